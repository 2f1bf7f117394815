"""JSON values: what the journal can hold, and the argument digest."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - a dependency; the standard library stands in for it
    orjson = None  # type: ignore[assignment]

JSON = Any  # a JSON-compatible value: None, bool, int, float, str, list, dict with str keys


def _find_bad(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}, which JSON cannot hold"
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            bad = _find_bad(item, f"{path}[{i}]")
            if bad:
                return bad
        return None
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"{path} has the key {k!r} of type {type(k).__name__}; keys must be str"
            bad = _find_bad(item, f"{path}[{k!r}]")
            if bad:
                return bad
        return None
    return f"{path} is of type {type(value).__name__}"


_isfinite = math.isfinite


def _plain(value: Any) -> bool:
    """Whether the journal gives ``value`` back equal and of the same types: JSON's own types
    exactly (no tuple, no subclass such as an IntEnum), str keys, finite floats.

    Loops, not ``all()`` over generators, and the scalar types tested before the call: this runs
    on every decided state, event and task payload (a pipeline's state of 841 bytes in 6.9 us
    against 16-22 with generators)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is dict:
        for k, item in value.items():
            if type(k) is not str:
                return False
            t = type(item)
            if t is str or t is int or t is bool or item is None:
                continue
            if not _plain(item):
                return False
        return True
    if t is list:
        for item in value:
            t = type(item)
            if t is str or t is int or t is bool or item is None:
                continue
            if not _plain(item):
                return False
        return True
    if t is float:
        return _isfinite(value)
    return False


def _plain_since(value: Any, before: Any) -> bool:
    """``_plain`` of ``value``, taking as plain what it shares with ``before`` (plain itself, and
    never changed in place): the parts at the same place that are the very same objects."""
    if value is before:
        return True
    t = type(value)
    if t is dict and type(before) is dict:
        get = before.get
        for k, item in value.items():
            if type(k) is not str:
                return False
            old = get(k, _ABSENT)
            if item is not old and not _plain_since(item, old):
                return False
        return True
    if t is list and type(before) is list:
        n = len(before)
        for i, item in enumerate(value):
            old = before[i] if i < n else _ABSENT
            if item is not old and not _plain_since(item, old):
                return False
        return True
    return _plain(value)


_ABSENT = object()


def check_json_since(value: Any, before: Any, what: str, root: str = "value") -> Any:
    """``check_json`` of a value made from ``before`` (a plain value, never changed in place) by
    copying only what changes: the parts it shares with ``before`` are not walked again."""
    return value if _plain_since(value, before) else check_json(value, what, root)


def check_json(value: Any, what: str, root: str = "value") -> Any:
    """Return ``value`` as the journal will give it back (tuples become lists), or raise.

    The first run returns this round-tripped value too, so a replay and a first run see the same.
    A value made of JSON's own types only is returned as it is (the round trip would not change it).
    The error names where the bad part is, from ``root`` (``args[0] is of type set``).
    """
    if _plain(value):
        return value
    from ._errors import NotJSONCompatibleError

    bad = _find_bad(value, root)
    if bad:
        raise NotJSONCompatibleError(what, bad)
    return loads(dumps(value))


def dumps(value: Any) -> str:
    """The compact JSON text of a checked value (see ``check_json``), as the store keeps it.

    orjson writes it (about 14 times faster than the standard library on a pipeline's state:
    0.6 against 8.4 us for 841 bytes); what it refuses (an int past 64 bits, a lone surrogate,
    a key that is not a str) the standard library writes, as before."""
    if orjson is not None:
        try:
            return orjson.dumps(value).decode()
        except TypeError:
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_DIGITS = bytes(0x39 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))
"""Each ASCII digit as ``9``, every other byte as a space (a UTF-8 sequence holds no ASCII digit
but the digit itself): a run of digits is then a run of ``9``, found by a substring search in C
(a regular expression took 470 us on a 51 kB state, this 31)."""
_LONG_RUN = b"9" * 19


def loads(text: str | bytes) -> Any:
    """The value of a JSON text. orjson reads it (2.6 times faster than the standard library on
    a pipeline's state) unless it holds a run of 19 digits or more (orjson reads an int past 64
    bits as a float, the standard library exactly) or something orjson will not read."""
    if orjson is not None:
        try:
            raw = text.encode() if isinstance(text, str) else text
            if _LONG_RUN not in raw.translate(_DIGITS):
                return orjson.loads(raw)
        except ValueError:  # a text it will not read (a lone surrogate): the standard library's to read or refuse
            pass
    return json.loads(text)


def canonical(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    """The argument digest of a frame: a short hash of the canonical JSON of its arguments."""
    return hashlib.sha256(canonical(value).encode()).hexdigest()[:16]
