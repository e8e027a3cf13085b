"""Ctrl-C and SIGTERM during a validation run: stop the checks, then finish cleaning up.

The first signal raises ``KeyboardInterrupt`` wherever the run is, and the runner deletes what the
run created. Two things could lose that: the kubernetes client turns a ``KeyboardInterrupt`` raised
during an exec handshake into ``ApiException(status=0)`` (``kubernetes/stream/ws_client.py``,
``websocket_call``), which would read as a failed check; and CI cancels a job with SIGINT, then
SIGTERM seconds later, which would abort the cleanup itself. So every signal is counted, a client
error during which one arrived is the interrupt again, and a second signal lets the cleanup
finish (a third abandons it).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

_received = 0


def received() -> int:
    """How many interrupting signals have arrived so far."""
    return _received


def raised_since(count: int) -> bool:
    """Whether a signal that raises (the first, or any after the second) arrived after ``count`` of them."""
    return any(number != 2 for number in range(count + 1, _received + 1))


def handle(_signum: int, _frame: FrameType | None) -> None:
    global _received  # noqa: PLW0603 - signal handlers share state only through module globals
    _received += 1
    if _received == 2:
        sys.stderr.write("validate: still deleting what the run created; interrupt again to abandon it\n")
        return
    raise KeyboardInterrupt


def install() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handle)


def reset() -> None:
    """For tests: forget earlier signals."""
    global _received  # noqa: PLW0603
    _received = 0
