"""How the HTTP service reads a JSON body (``parse_json`` of ``flowli.http``'s body reader): its
depth is measured without parsing it (brackets inside strings do not count), a body nested too
deep or carrying a number JSON does not have is refused in one sentence naming the field."""

from __future__ import annotations

import pytest

from flowli.http._body import MAX_JSON_DEPTH, BodyRefused, json_depth, parse_json  # private: the reader's own seams

pytestmark = pytest.mark.unit


def refusal(raw: bytes) -> str:
    with pytest.raises(BodyRefused) as refused:
        parse_json(raw)
    assert refused.value.status == 400
    return refused.value.message


def test_depth_counts_arrays_and_objects_not_brackets_in_strings():
    assert json_depth(b'{"a": [1, {"b": []}]}') == 4
    assert json_depth(b'{"a": "[[[[{{{{", "b": "\\"[["}') == 1
    assert json_depth(b"[]" * 100_000) == 1
    assert json_depth(b"42") == 0


def test_a_body_nested_too_deep_is_refused_before_it_is_parsed():
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    assert refusal(deep) == "the body is nested deeper than 64 levels of arrays and objects"
    assert refusal(b"[" * 50_000) == "the body is nested deeper than 64 levels of arrays and objects"
    at_limit = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert json_depth(at_limit) == MAX_JSON_DEPTH and parse_json(at_limit) is not None


@pytest.mark.parametrize(("raw", "message"), [
    (b'{"timeOut": Infinity}', "timeOut: Infinity is not a number JSON allows (a number must be finite)"),
    (b'{"a": {"min_idle_seconds": -Infinity}}',
     "min_idle_seconds: -Infinity is not a number JSON allows (a number must be finite)"),
    (b'{"x": NaN}', "x: NaN is not a number JSON allows (a number must be finite)"),
    (b'{"retryInterval": 1e400}', "retryInterval: 1e400 is not a number JSON allows (a number must be finite)"),
    (b"[NaN]", "NaN is not a number JSON allows (a number must be finite)"),
    (b"", "the body is required (a JSON object)"),
    (b'{"name": ', "the body is not valid JSON: Expecting value"),
    (b"\xff", "the body is not valid JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
], ids=["infinity", "minus-infinity", "nan", "overflow", "unnamed", "empty", "cut", "not-utf8"])
def test_a_body_json_does_not_allow_is_refused_naming_the_field(raw, message):
    assert refusal(raw) == message


def test_finite_numbers_and_big_integers_are_read_as_sent():
    assert parse_json(b'{"a": 1.5e300, "b": -0.0, "c": 99999999999999999999}') == {
        "a": 1.5e300, "b": -0.0, "c": 99999999999999999999}
