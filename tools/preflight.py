"""Whether a stack needs this host's Docker engine, or kind: what ``make up`` checks and fetches.

    python -m tools.preflight --stack dev [--needs docker|kind|cgroup-v2]

Exit status 0 when the stack does, or when its stack file cannot be read; 3 when it does not, with
a note on stderr. Docker: a kind management cluster or a docker worker; ``make preflight`` checks
the Docker daemon and the inotify limits only then. kind: a kind management cluster; ``make tools``
fetches kind only then (a data-centre host may reach no GitHub release downloads). cgroup-v2: a
kubelet of Kubernetes 1.35 or newer in a container of this host's Docker (kind's node, a docker
worker), which does not start on a cgroup v1 engine (``failCgroupV1``, KEP-5573); ``make preflight``
asks the engine only then. A version that cannot be read counts as new. The stack's
values are read as they are, not validated: a stack that needs neither must reach ``pulumi up`` to
hear what is wrong with its config, not be told to start Docker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from gpu_tenancy import versions
from gpu_tenancy.config import CONFIG_NAMESPACE, ConfigError, config_value
from gpu_tenancy.stack_file import is_file, read_stack_file, stack_file
from tools import cli

DOES_NOT_NEED = 3
# The first Kubernetes release whose kubelet refuses cgroup v1 unless told otherwise.
FIRST_WITHOUT_CGROUP_V1 = (1, 35)


def _value(values: dict[str, Any], key: str) -> Any:
    raw = values.get(f"{CONFIG_NAMESPACE}:{key}")
    return config_value(raw, key) if isinstance(raw, str) else raw


def uses_kind(values: dict[str, Any]) -> bool:
    """A kind management cluster (the default mode), in a stack file's raw values."""
    management = _value(values, "management")
    return not isinstance(management, dict) or management.get("mode", "kind") != "existing"


def _tenants_with_docker_workers(values: dict[str, Any]) -> list[dict[str, Any]]:
    tenants = _value(values, "tenants")
    return [
        tenant
        for tenant in (tenants if isinstance(tenants, list) else [])
        if isinstance(tenant, dict)
        and isinstance(tenant.get("workers"), list)
        and any(isinstance(worker, dict) and worker.get("ssh") is None for worker in tenant["workers"])
    ]


def _unreadable_workers(values: dict[str, Any]) -> bool:
    """Whether tenants, a tenant, its workers or a worker is encrypted as a whole (reads as text here)."""
    tenants = _value(values, "tenants")
    if tenants is None:
        return False
    if not isinstance(tenants, list):
        return True
    for tenant in tenants:
        if not isinstance(tenant, dict):
            return True
        workers = tenant.get("workers")
        if workers is not None and (not isinstance(workers, list) or not all(isinstance(w, dict) for w in workers)):
            return True
    return False


def uses_docker(values: dict[str, Any]) -> bool:
    """A kind cluster or a worker without ``ssh``, in a stack file's raw values."""
    return uses_kind(values) or bool(_tenants_with_docker_workers(values))


def _without_cgroup_v1(version: Any) -> bool:
    try:
        return versions.kubernetes_minor(str(version)) >= FIRST_WITHOUT_CGROUP_V1
    except ValueError:
        return True


def needs_cgroup_v2(values: dict[str, Any]) -> bool:
    """A kubelet of 1.35 or newer in Docker: kind's node image, or a tenant with docker workers."""
    if uses_kind(values):
        management = _value(values, "management")
        image = (management.get("nodeImage") if isinstance(management, dict) else None) or versions.DEFAULT_NODE_IMAGE
        if _without_cgroup_v1(versions.image_tag(str(image))):
            return True
    return any(
        _without_cgroup_v1(tenant.get("kubernetesVersion", versions.DEFAULT_KUBERNETES_VERSION))
        for tenant in _tenants_with_docker_workers(values)
    )


NOTES: dict[str, tuple[Callable[[dict[str, Any]], bool], str]] = {
    "docker": (
        uses_docker,
        "an existing management cluster and SSH workers only, nothing runs on this host's Docker: no Docker or inotify checks",
    ),
    "kind": (uses_kind, "an existing management cluster, no kind cluster: kind is not fetched"),
    "cgroup-v2": (needs_cgroup_v2, "no kubelet of Kubernetes 1.35 or newer in Docker: a cgroup v1 engine will do"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preflight", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="dev", help="the stack whose Pulumi.<stack>.yaml is read (default: dev)")
    parser.add_argument("--needs", choices=sorted(NOTES), default="docker", help="what to ask about (default: docker)")
    args = parser.parse_args(argv)
    path = stack_file(args.stack)
    if not is_file(path):
        return 0
    try:
        # A key encrypted as a whole reads as text here: what it would say counts as unknown.
        values, _ = read_stack_file(path, whole_secrets=True)
    except ConfigError:
        return 0
    uses, note = NOTES[args.needs]
    try:
        if uses(values):
            return 0
        unreadable = args.needs != "kind" and _unreadable_workers(values)
    except ConfigError:  # a key given twice: pulumi up names it, and nothing is skipped meanwhile
        return 0
    if unreadable:
        # Encrypted workers are no reason to ask an SSH-only stack for Docker, but the note must not
        # claim what it cannot read.
        note = (
            "workers encrypted as a whole cannot be read here, so whether any runs in Docker is unknown: no Docker, "
            "cgroup or inotify checks; if one does, `pulumi up` fails when Docker does not answer (encrypt only the "
            "secret fields, with --path, to let these checks run)"
        )
    print(f"{path.name}: {note}", file=sys.stderr)
    return DOES_NOT_NEED


if __name__ == "__main__":
    sys.exit(cli.run(main))
