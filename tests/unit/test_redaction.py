"""Redaction (``redact`` and ``redact_items`` of ``flowli.pipelines``, ``mask`` of ``flowli.domain``,
``redacted`` of ``flowli.store.postgres``): a sensitive context item's value becomes ``***``
wherever it sits in a value, and so does the value of every item of a key that was sensitive; a
secret quoted in free text is masked; a database URL loses its password; nothing else changes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowli.domain import mask
from flowli.engine.deciders import Event
from flowli.pipelines import redact, redact_items
from flowli.pipelines._decider import INITIAL, evolve  # private: the state a pipeline's view is built from
from flowli.store.postgres import redacted

pytestmark = pytest.mark.unit

SECRET = "tok-9f8e7d6c5b4a"


def test_a_sensitive_item_anywhere_in_a_value_is_redacted_and_nothing_else_changes():
    value = {"stage": "send", "attempt": 2, "ok": True, "none": None, "ratio": 0.5,
             "contextItems": [{"key": "accessToken", "value": SECRET, "valueType": "string", "isSensitive": True},
                              {"key": "invoiceId", "value": "invoice-42", "valueType": "string", "isSensitive": False},
                              {"key": "region", "value": "eu"}],
             "nested": {"deeper": [[{"key": "pin", "value": 1234, "isSensitive": True}]]}}
    before = copy.deepcopy(value)
    assert redact(value) == {
        "stage": "send", "attempt": 2, "ok": True, "none": None, "ratio": 0.5,
        "contextItems": [{"key": "accessToken", "value": "***", "valueType": "string", "isSensitive": True},
                         {"key": "invoiceId", "value": "invoice-42", "valueType": "string", "isSensitive": False},
                         {"key": "region", "value": "eu"}],
        "nested": {"deeper": [[{"key": "pin", "value": "***", "isSensitive": True}]]}}
    assert value == before  # the value redacted is a copy


def test_scalars_and_items_without_a_value_are_left_as_they_are():
    for scalar in ("text", 3, 2.5, True, None):
        assert redact(scalar) == scalar
    assert redact({"key": "token", "isSensitive": True}) == {"key": "token", "isSensitive": True}  # no value to hide
    assert redact({"key": "token", "value": None, "isSensitive": True}) == {
        "key": "token", "value": "***", "isSensitive": True}
    assert redact([]) == [] and redact({}) == {}


def test_redact_items_hides_the_value_of_each_sensitive_item_and_copies_the_others():
    items = [{"key": "accessToken", "value": SECRET, "valueType": "string", "isSensitive": True},
             {"key": "invoiceId", "value": "invoice-42", "valueType": "string", "isSensitive": False},
             {"key": "token", "isSensitive": True}]
    shown = redact_items(items)
    assert shown == [{"key": "accessToken", "value": "***", "valueType": "string", "isSensitive": True},
                     {"key": "invoiceId", "value": "invoice-42", "valueType": "string", "isSensitive": False},
                     {"key": "token", "value": "***", "isSensitive": True}]
    shown[1]["value"] = "changed"
    assert items[1]["value"] == "invoice-42" and items[0]["value"] == SECRET  # copies, not the items
    assert redact_items([]) == []


def test_an_item_of_a_key_that_was_sensitive_is_redacted_though_it_does_not_say_so():
    value = {"spec": {"context": [{"key": "accessToken", "value": SECRET, "isSensitive": True}]},
             "result": {"context": [{"key": "accessToken", "value": "tok-2"}, {"key": "region", "value": "eu"}]}}
    assert redact(value) == {
        "spec": {"context": [{"key": "accessToken", "value": "***", "isSensitive": True}]},
        "result": {"context": [{"key": "accessToken", "value": "***"}, {"key": "region", "value": "eu"}]}}
    # the keys of a run that were sensitive elsewhere (another journal entry) are given
    assert redact([{"key": "accessToken", "value": "tok-2"}, {"key": "region", "value": "eu"}], {"accessToken"}) == [
        {"key": "accessToken", "value": "***"}, {"key": "region", "value": "eu"}]
    items = [{"key": "accessToken", "value": "tok-2", "valueType": "string"}, {"key": "region", "value": "eu"}]
    assert redact_items(items, {"accessToken"}) == [
        {"key": "accessToken", "value": "***", "valueType": "string"}, {"key": "region", "value": "eu"}]


def test_a_pipeline_keeps_a_key_sensitive_when_a_later_item_of_it_does_not_say_so():
    # a journal written before the service marked such items: its view redacts them all the same
    p = evolve(INITIAL, Event("pipeline.started", {"spec": {"pipelineId": 1, "stages": [
        {"id": 2, "stageName": "a", "dependsOn": []}], "context": [
        {"key": "accessToken", "value": "***", "isSensitive": True}, {"key": "region", "value": "eu"}]}}))

    def completed(p: dict, *items: dict) -> dict:
        return evolve(p, Event("stage.completed", {"stage": "a", "attempt": 1, "context": list(items)}))

    p = completed(p, {"key": "accessToken", "value": SECRET})
    assert redact_items(list(p["context"].values()), p["sensitive"]) == [
        {"key": "accessToken", "value": "***"}, {"key": "region", "value": "eu"}]
    p = completed(p, {"key": "accessToken", "isDeleted": True})
    p = completed(p, {"key": "accessToken", "value": SECRET})  # deleted, then set again: still sensitive
    assert redact_items(list(p["context"].values()), p["sensitive"])[-1] == {"key": "accessToken", "value": "***"}


def test_a_secret_quoted_in_free_text_is_masked():
    assert mask(f"the token {SECRET} was revoked", [SECRET, None, ""]) == "the token *** was revoked"
    assert mask(f"{SECRET}-{SECRET}x", ["x", SECRET]) == "***-******"  # the longer secret first
    assert mask("nothing to hide", [SECRET]) == "nothing to hide"


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://flowli:s3cret@127.0.0.1:1/test", "postgresql://flowli:***@127.0.0.1:1/test"),
    ("postgresql://flowli:s3cret@db.example.com/app?schema=billing&sslmode=require",
     "postgresql://flowli:***@db.example.com/app?schema=billing&sslmode=require"),
    ("postgres://a:a@host/a", "postgres://a:***@host/a"),  # a password equal to the user's name
    ("postgresql://u:p%40ss:w@host/db", "postgresql://u:***@host/db"),
    ("postgresql://flowli@127.0.0.1:5432/test", "postgresql://flowli@127.0.0.1:5432/test"),
    ("postgresql:///test", "postgresql:///test"),
], ids=["password", "query-kept", "same-as-user", "escaped", "no-password", "local-socket"])
def test_a_database_url_is_shown_without_its_password(url, shown):
    assert redacted(url) == shown


# ---- properties ---------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "key", "value", "items", "stage"])
SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["x", "eu", "invoice-42", ""])


def sensitive_item(value: Any) -> dict[str, Any]:
    return {"key": "token", "value": value, "isSensitive": True}


PLAIN = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                     max_leaves=12)
WITH_SECRETS = st.recursive(
    SCALARS | st.just(sensitive_item(SECRET)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(PLAIN)
def test_a_value_without_sensitive_items_is_returned_equal(value):
    assert redact(value) == value


@settings(max_examples=150, deadline=None)
@given(WITH_SECRETS)
def test_no_sensitive_value_survives_and_redacting_twice_changes_nothing_more(value):
    before = json.dumps(value, sort_keys=True)
    once = redact(value)
    assert SECRET not in json.dumps(once)
    assert json.dumps(once).count('"***"') == before.count(SECRET)  # exactly the sensitive values became ***
    assert redact(once) == once
    assert json.dumps(value, sort_keys=True) == before  # the input is untouched
