"""Redaction: what a public view shows of a value that holds sensitive context items. An item is
``{"key", "value", "isSensitive"?, ...}``; it is sensitive when it says so or when its key is a
key known to be sensitive (redaction follows the key, not the flag of each value: a key that was
sensitive once stays so). Its value is then ``"***"``."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

REDACTED = "***"


def is_sensitive(item: dict[str, Any], keys: Collection[str] = ()) -> bool:
    """Whether a context item's value is hidden: it is marked sensitive, or its key is in ``keys``."""
    if item.get("isSensitive"):
        return True
    key = item.get("key")
    return isinstance(key, str) and key in keys


def sensitive_keys(value: Any) -> set[str]:
    """The keys of the items marked sensitive anywhere in ``value``."""
    found: set[str] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            if v.get("isSensitive") and isinstance(v.get("key"), str):
                found.add(v["key"])
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return found


def redact(value: Any, keys: Collection[str] = ()) -> Any:
    """A copy of ``value`` in which every sensitive item that has a value shows ``"***"``: an item
    marked sensitive, or one whose key is marked sensitive elsewhere in ``value`` or is in ``keys``
    (the sensitive keys of the run the value belongs to)."""
    return _redact(value, sensitive_keys(value) | set(keys))


def _redact(value: Any, keys: set[str]) -> Any:
    if isinstance(value, dict):
        if "value" in value and is_sensitive(value, keys):
            return {**value, "value": REDACTED}
        return {k: _redact(v, keys) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, keys) for v in value]
    return value


def mask(text: str, secrets: Iterable[Any]) -> str:
    """``text`` with every occurrence of each secret value (a nonempty string) replaced by ``"***"``:
    for the free text a person sends about a run that has sensitive values (a rejection reason)."""
    for secret in sorted((s for s in secrets if isinstance(s, str) and s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
