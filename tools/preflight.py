"""Whether ``make up``'s host checks apply to a stack: does it run anything on this host's Docker engine?

    python -m tools.preflight --stack dev

Exit status 0 when the stack does (a kind management cluster, docker workers) or when its stack
file cannot be read; 3 when it does not (an existing management cluster with SSH workers only),
with a note on stderr. ``make preflight`` checks the Docker daemon and the inotify limits only in
the first case. The stack's values are read as they are, not validated: a stack that needs no
Docker must reach ``pulumi up`` to hear what is wrong with its config, not be told to start Docker.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpu_tenancy.config import CONFIG_NAMESPACE, ConfigError, config_value
from gpu_tenancy.stack_file import is_file, read_stack_file, stack_file

NO_DOCKER = 3


def uses_docker(values: dict[str, Any]) -> bool:
    """A kind cluster (the default mode) or a worker without ``ssh``, in a stack file's raw values."""

    def value(key: str) -> Any:
        raw = values.get(f"{CONFIG_NAMESPACE}:{key}")
        return config_value(raw) if isinstance(raw, str) else raw

    management = value("management")
    if not isinstance(management, dict) or management.get("mode", "kind") != "existing":
        return True
    tenants = value("tenants")
    return any(
        isinstance(worker, dict) and worker.get("ssh") is None
        for tenant in (tenants if isinstance(tenants, list) else [])
        if isinstance(tenant, dict) and isinstance(tenant.get("workers"), list)
        for worker in tenant["workers"]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preflight", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="dev", help="the stack whose Pulumi.<stack>.yaml is read (default: dev)")
    args = parser.parse_args(argv)
    path = stack_file(args.stack)
    if not is_file(path):
        return 0
    try:
        values, _ = read_stack_file(path)
    except ConfigError:
        return 0
    if uses_docker(values):
        return 0
    print(
        f"{path.name}: an existing management cluster and SSH workers only, nothing runs on this host's Docker: "
        "no Docker or inotify checks",
        file=sys.stderr,
    )
    return NO_DOCKER


if __name__ == "__main__":
    sys.exit(main())
