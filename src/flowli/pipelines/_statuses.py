"""The words of a pipeline's and a stage's status (the reference's, verbatim), each with the tone
it is shown in. Adding a status is adding it here, with the decider's rule that sets it: the
list filter, the OpenAPI document and the dashboard take their words from these tables."""

from __future__ import annotations

from flowli.domain import Tone

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
