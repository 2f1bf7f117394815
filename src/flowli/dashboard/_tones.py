"""The tone a status is shown in: every audience's status words (an execution's, a pipeline's, a
stage's, a catalog run's, a frame's), each with the tone its own table gives it. A page shows a status as
``class="status tone-{{ status|tone }}"``; the stylesheet styles the five tones, never a word, so
a status added to its table needs nothing here."""

from __future__ import annotations

from flowli.catalog import RUN_TONES
from flowli.domain import STATUS_TONES, Tone
from flowli.engine import FRAME_TONES
from flowli.pipelines import PIPELINE_STATUSES, STAGE_STATUSES

TABLES: tuple[dict[str, Tone], ...] = (STATUS_TONES, RUN_TONES, PIPELINE_STATUSES, STAGE_STATUSES, FRAME_TONES)
"""The tables of status words, each its audience's."""



def tone(status: object) -> str:
    """The tone of a status word (``idle`` for a word no table knows: an unknown node), looked up
    in the tables as they are now."""
    word = str(status)
    for table in TABLES:
        found = table.get(word)
        if found is not None:
            return found.value
    return Tone.IDLE.value
