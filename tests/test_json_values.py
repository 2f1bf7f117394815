"""check_json: a value as the journal gives it back, or NotJSONCompatibleError naming where it breaks."""

from __future__ import annotations

import enum
import json

import pytest

from flowli.domain import NotJSONCompatibleError, check_json, check_json_since, dumps, loads

pytestmark = pytest.mark.unit


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def test_a_plain_value_comes_back_equal():
    value = {"s": "text", "i": 7, "f": 1.5, "t": True, "n": None, "l": [1, "two", 3.0, False, None, {"x": []}], "d": {}}
    back = check_json(value, "the value")
    assert back == value
    assert json.loads(json.dumps(back)) == back
    for scalar in ("s", 0, -3, 2.25, True, False, None):
        assert check_json(scalar, "a scalar") == scalar
        assert type(check_json(scalar, "a scalar")) is type(scalar)


def test_a_tuple_comes_back_as_a_list():
    back = check_json({"pair": (1, 2), "nested": [(3, (4, 5))]}, "the value")
    assert back == {"pair": [1, 2], "nested": [[3, [4, 5]]]}
    assert type(back["pair"]) is list and type(back["nested"][0][1]) is list
    top = check_json((1, "a"), "the value")
    assert top == [1, "a"] and type(top) is list


def test_an_int_enum_comes_back_as_a_plain_int():
    back = check_json(Level.HIGH, "the value")
    assert back == 2 and type(back) is int
    inside = check_json({"level": Level.LOW, "levels": [Level.HIGH]}, "the value")
    assert inside == {"level": 1, "levels": [2]}
    assert type(inside["level"]) is int and type(inside["levels"][0]) is int


def test_a_dict_with_an_int_key_is_refused_naming_the_path():
    with pytest.raises(NotJSONCompatibleError) as info:
        check_json({"outer": {1: "one"}}, "the value of step s")
    message = str(info.value)
    assert info.value.what == "the value of step s"
    assert "value['outer']" in message and "key 1" in message and "int" in message
    with pytest.raises(NotJSONCompatibleError):
        check_json({2: "top"}, "the value")


def test_nan_in_a_list_is_refused_naming_the_path():
    with pytest.raises(NotJSONCompatibleError) as info:
        check_json({"xs": [1.0, float("nan")]}, "the arguments")
    assert "value['xs'][1]" in str(info.value) and "nan" in str(info.value)
    with pytest.raises(NotJSONCompatibleError) as top:
        check_json([float("inf")], "the arguments", "args")
    assert "args[0] is inf" in str(top.value)


def test_a_set_is_refused():
    with pytest.raises(NotJSONCompatibleError) as info:
        check_json({1, 2}, "the payload")
    assert "set" in str(info.value)
    with pytest.raises(NotJSONCompatibleError) as nested:
        check_json({"tags": {"a"}}, "the payload")
    assert "value['tags']" in str(nested.value) and "set" in str(nested.value)


def test_a_value_made_from_a_plain_one_is_checked_where_it_changed():
    before = {"big": {"layers": [{"steps": list(range(50))}]}, "status": {"a": "PENDING"}, "done": ["a"]}
    shared = {**before, "status": {**before["status"], "b": "COMPLETED"}, "done": [*before["done"], "b"]}
    assert check_json_since(shared, before, "the state") is shared  # plain: returned as it is
    # what changed is checked as check_json checks it: a tuple becomes a list, an enum an int ...
    back = check_json_since({**before, "status": {"a": Level.HIGH}, "done": [*before["done"], ("c", 1)]}, before,
                            "the state")
    assert back["status"] == {"a": 2} and type(back["status"]["a"]) is int and back["done"] == ["a", ["c", 1]]
    # ... and what cannot be JSON is refused, naming where, however deep in a shared part's copy
    with pytest.raises(NotJSONCompatibleError, match=r"value\['big'\]\['layers'\]\[0\]\['extra'\] is of type set"):
        check_json_since({**before, "big": {"layers": [{**before["big"]["layers"][0], "extra": {1}}]}}, before, "the state")
    with pytest.raises(NotJSONCompatibleError, match="keys must be str"):
        check_json_since({**before, "status": {**before["status"], 3: "x"}}, before, "the state")


def test_the_store_text_keeps_every_value_exactly():
    """``dumps`` and ``loads`` (the store's JSON) give back each checked value equal and of the
    same types: ints past 64 bits exact (a reader that makes them floats is not used for them),
    a long run of digits in a string, unicode, nested containers, and a lone surrogate that one
    writer refuses and the other keeps."""
    values = [2**70, -(2**80), {"big": [10**30, 1.5, "12345678901234567890123"]}, "é ✓ \u2028", [[], {}, None, True],
              {"n": 9007199254740993}, 0.1, -0.0, 1e16, "\ud800"]
    for value in values:
        back = loads(dumps(check_json(value, "the value")))
        assert back == value and type(back) is type(value), (value, back)
        assert json.loads(dumps(value)) == value  # the text is the standard's JSON
    assert type(loads(dumps({"x": 2**70}))["x"]) is int
    assert dumps({"a": [1, 2.5, "b"]}) == '{"a":[1,2.5,"b"]}'


class Name(str):
    """A str subclass: the journal gives it back as a plain str."""


def _types(value):
    if isinstance(value, dict):
        return {type(k).__name__ + ":" + k: _types(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *map(_types, value)]
    return type(value).__name__


@pytest.mark.parametrize("make", [
    lambda x: x, lambda x: [x], lambda x: {"k": x}, lambda x: {"a": [1, {"b": [None, x]}]}, lambda x: [[], {}, [x]],
], ids=["top", "in-a-list", "in-a-dict", "deep", "after-empties"])
def test_a_value_of_plain_types_only_is_kept_as_it_is_and_any_other_type_anywhere_is_converted(make):
    plain = make({"s": "t", "i": 1, "b": True, "n": None, "f": 0.5, "l": [1, 2.0]})
    assert check_json(plain, "the value") is plain  # no copy: the journal gives it back as it is
    assert check_json_since(plain, make(None), "the state") is plain
    for odd, back in ((Level.HIGH, 2), (Name("x"), "x"), ((1, 2), [1, 2])):
        got = check_json(make(odd), "the value")
        assert got == make(back) and _types(got) == _types(make(back))  # JSON's own types, wherever it was
    with pytest.raises(NotJSONCompatibleError, match="inf"):
        check_json(make(float("inf")), "the value")
    with pytest.raises(NotJSONCompatibleError, match="keys must be str"):
        check_json(make({Level.LOW: "low"}), "the value")
