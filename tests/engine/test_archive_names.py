"""The archive answers for the files of its own folder only: an eid that would name a file
elsewhere (``../``, a NUL, a separator) reads as no archive, whatever the caller checked before,
so ``engine.status`` and ``engine.journal`` say "unknown execution" and ``engine.archived`` finds
nothing; an eid's form is ``flowli.domain.is_eid``."""

from __future__ import annotations

import json
import uuid

import pytest

from flowli import Registry
from flowli.domain import UnknownExecutionError, checked_eid, is_eid, keyed_eid, new_eid


@pytest.mark.integration
async def test_an_eid_that_names_a_file_outside_the_archive_reads_as_no_archive(open_engine, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"record": {"eid": "x"}, "journal": []}))
    (tmp_path / "bucket" / "archive").mkdir(parents=True)
    async with open_engine(Registry(), worker=False) as engine:
        for eid in ("../../outside", "../outside", "..", "a/../../../outside", "x" * 5000, ""):
            with pytest.raises(UnknownExecutionError):
                await engine.status(eid)
            with pytest.raises(UnknownExecutionError):
                await engine.journal(eid)
            assert await engine.archived(eid) is None


@pytest.mark.unit
def test_an_eid_is_a_uuid_in_its_canonical_text():
    assert is_eid(new_eid()) and is_eid(keyed_eid("w", "k")) and is_eid(str(uuid.uuid4()))
    for bad in ("../../x", "", str(uuid.uuid4()).upper(), "{" + str(uuid.uuid4()) + "}", uuid.uuid4().hex,
                str(uuid.uuid4()) + "\n", None, 7):
        assert not is_eid(bad), bad
        with pytest.raises(UnknownExecutionError, match="an execution id is a UUID"):
            checked_eid(bad)
    eid = new_eid()
    assert checked_eid(eid) == eid
