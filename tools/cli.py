"""How every tool ends at its command line: a reader that stops early (``| head``) is no error.

As the Python docs' "Note on SIGPIPE" says, stdout then goes to devnull so that the flush at exit
fails no more; 141 is a shell's status for a process ended by SIGPIPE. A tool started with stdout
closed (``>&-``) says so instead of failing on its first print.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

SIGPIPE_STATUS = 141


def run(main: Callable[[], int]) -> int:
    if sys.stdout is None:
        print("error: stdout is closed; redirect it to a file or /dev/null instead", file=sys.stderr)
        return 2
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_STATUS
    return status
