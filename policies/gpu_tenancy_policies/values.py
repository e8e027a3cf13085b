"""Reading resource properties the way CrossGuard hands them over: proxied, and possibly unknown.

The analyzer wraps ``props`` in ``unknown_checking_proxy``: touching a value that a preview cannot
know raises ``UnknownValueError``, and a validator that lets it escape is skipped *as a whole*
(one advisory "can't run policy during preview" line). A stack rule that stopped at the first
unknown VIP would check nothing at all in a pull-request preview, so every rule first turns the
props into plain data with ``UNKNOWN`` in place of each unknown value and skips just those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pulumi_policy import proxy
from pulumi_policy.proxy import UnknownValueError

# The engine's markers for values a preview cannot know (pulumi_policy/proxy.py).
SENTINELS: Final = frozenset(
    {
        proxy.UNKNOWN_BOOLEAN_VALUE,
        proxy.UNKNOWN_NUMBER_VALUE,
        proxy.UNKNOWN_STRING_VALUE,
        proxy.UNKNOWN_ARRAY_VALUE,
        proxy.UNKNOWN_ASSET_VALUE,
        proxy.UNKNOWN_ARCHIVE_VALUE,
        proxy.UNKNOWN_OBJECT_VALUE,
    }
)


class _Unknown:
    """A value the engine does not know yet (preview) or the offline check cannot read (masked)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:
        # An unknown is never "set" in a truth test; rules compare against UNKNOWN explicitly first.
        return False


UNKNOWN: Final = _Unknown()


def _item(container: Any, key: Any) -> Any:
    try:
        return container[key]
    except UnknownValueError:
        return UNKNOWN


def plain(value: Any) -> Any:
    """``value`` as plain dicts and lists, with ``UNKNOWN`` for every unknown value in it."""
    if isinstance(value, str):
        return UNKNOWN if value in SENTINELS else value
    if isinstance(value, Mapping):
        return {key: plain(_item(value, key)) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [plain(_item(value, index)) for index in range(len(value))]
    return value


def dig(value: Any, *path: str | int, default: Any = None) -> Any:
    """The value at ``path`` in plain data: ``UNKNOWN`` if any step is unknown, ``default`` if absent."""
    for key in path:
        if value is UNKNOWN:
            return UNKNOWN
        if isinstance(key, int) and isinstance(value, list):
            if not -len(value) <= key < len(value):
                return default
            value = value[key]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return default
    return default if value is None else value


def is_known(value: Any) -> bool:
    """Whether ``value`` contains no unknown anywhere."""
    if value is UNKNOWN:
        return False
    if isinstance(value, dict):
        return all(is_known(item) for item in value.values())
    if isinstance(value, list):
        return all(is_known(item) for item in value)
    return True


def labels_of(value: Any) -> dict[str, Any] | _Unknown:
    """Labels as a dict, from Kubernetes ``metadata.labels`` or Docker's ``[{label, value}]`` list."""
    if value is UNKNOWN:
        return UNKNOWN
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        labels: dict[str, Any] = {}
        for entry in value:
            if entry is UNKNOWN:
                return UNKNOWN
            if isinstance(entry, dict) and isinstance(entry.get("label"), str):
                labels[entry["label"]] = entry.get("value")
        return labels
    return {}
