"""The words of a pipeline's and a stage's status (the reference's, verbatim), each with the tone
it is shown in. Adding a status is adding it here, with the decider's rule that sets it: the
list filter, the OpenAPI document and the dashboard take their words from these tables."""

from __future__ import annotations

from flowli.domain import Status, Tone

PIPELINE_STATUSES: dict[str, Tone] = {
    "NotStarted": Tone.IDLE, "Running": Tone.BUSY, "Paused": Tone.WAITING,
    "Completed": Tone.OK, "Failed": Tone.BAD, "Cancelled": Tone.BAD,
}
"""Every status a pipeline can show, with its tone."""

TERMINAL = ("Completed", "Failed", "Cancelled")
"""The statuses of a pipeline that ended."""

STAGE_STATUSES: dict[str, Tone] = {
    "NotStarted": Tone.IDLE, "Pending": Tone.BUSY, "Running": Tone.BUSY, "RetryScheduled": Tone.WAITING,
    "WaitingForApproval": Tone.WAITING, "Completed": Tone.OK, "Failed": Tone.BAD, "Skipped": Tone.OK,
    "Cancelled": Tone.BAD,
}
"""Every status a stage can show, with its tone."""

DONE_STAGES = ("Completed", "Skipped")
"""The statuses of a stage that count as done in a pipeline's progress ("3 of 5 stages")."""

ENDED_AS: dict[Status, str] = {Status.COMPLETED: "Completed", Status.FAILED: "Failed", Status.CANCELLED: "Cancelled"}
"""The one mapping between the engine's words and a pipeline's: a pipeline whose execution ended
shows how it ended; one whose execution has not (``pending``, ``running``, ``suspended``: it
waits for its next command) shows its state's status (NotStarted, Running, Paused). Every page,
list and answer of a pipeline reads its status through ``status_word``."""
