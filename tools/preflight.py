"""Whether ``make up``'s host checks apply to a stack: does it run anything on this host's Docker engine?

    python -m tools.preflight --stack dev

Exit status 0 when the stack does (a kind management cluster, docker workers) or when that cannot
be told from its stack file (missing, or invalid: ``pulumi up`` reports why); 3 when it does not
(an existing management cluster with SSH workers only), with a note on stderr. ``make preflight``
checks the Docker daemon and the inotify limits only in the first case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_tenancy.config import ConfigError
from gpu_tenancy.stack_file import is_file, load_stack_config

PROJECT_DIR = Path(__file__).resolve().parent.parent
NO_DOCKER = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preflight", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="dev", help="the stack whose Pulumi.<stack>.yaml is read (default: dev)")
    args = parser.parse_args(argv)
    path = PROJECT_DIR / f"Pulumi.{args.stack}.yaml"
    if not is_file(path):
        return 0
    try:
        config = load_stack_config(path)
    except ConfigError:
        return 0
    if config.uses_docker:
        return 0
    print(
        f"{path.name}: an existing management cluster and SSH workers only, nothing runs on this host's Docker: "
        "no Docker or inotify checks",
        file=sys.stderr,
    )
    return NO_DOCKER


if __name__ == "__main__":
    sys.exit(main())
