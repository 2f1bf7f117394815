"""The deterministic eids (a child's, a keyed start's) are the RFC 4122 name-based (version 5)
UUIDs of the standard library, made without its UUID object."""

from __future__ import annotations

import uuid

import pytest

from flowli.domain._ids import CHILD_NAMESPACE, child_eid, keyed_eid, name_eid  # the functions under test

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["", "a", "key:flowli.pipeline:billing/idempotency:invoice-42", "é/ü/漢字",
                                  "x" * 5000, "0198f0c2-5b0a-7c4e-9d4e-0f10f1c0de01/step#2"])
def test_a_name_eid_is_the_uuid5_of_its_name(name: str) -> None:
    made = name_eid(name)
    assert made == str(uuid.uuid5(CHILD_NAMESPACE, name))
    assert uuid.UUID(made).version == 5 and uuid.UUID(made).variant == uuid.RFC_4122


def test_child_and_keyed_eids_keep_their_names() -> None:
    assert child_eid("p", "f/1") == str(uuid.uuid5(CHILD_NAMESPACE, "p/f/1"))
    assert keyed_eid("wf", "app/k") == str(uuid.uuid5(CHILD_NAMESPACE, "key:wf:app/k"))
