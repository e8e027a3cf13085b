"""What a rule returns: a message, and for stack rules the URN of the resource it is about."""

from __future__ import annotations

from typing import NamedTuple


class Finding(NamedTuple):
    message: str
    urn: str | None = None
