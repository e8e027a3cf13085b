"""Which docker engine runs the worker containers, and what it needs of them, decided as kind does.

The engine is the one the docker CLI talks to: ``DOCKER_HOST``, else the current context
(``docker context use``, ``DOCKER_CONTEXT``), the order the CLI itself resolves them in
(docker/cli:cli/command/cli.go resolveContextName). Pulumi's docker provider follows only
``DOCKER_CONTEXT``, else ``DOCKER_HOST``, else the default socket, never the context `docker
context use` chose. The program keeps that default provider (configured from the environment, it
is known in a preview of an empty host, so the policy pack sees the containers there) and instead
stops before any container exists when the two would reach different engines, naming the
``DOCKER_HOST`` to export. Every ``docker exec`` then gets the endpoint that was checked.

kind adds ``/dev/mapper`` when the engine's storage driver or backing filesystem hides block
devices from a nested kubelet (whose ContainerManager otherwise fails "failed to get rootfs info"),
``/dev/fuse`` under rootless docker, whose nodes use fuse-overlayfs, and ``--userns=host`` when the
engine remaps user namespaces, since such an engine refuses privileged containers in a remapped
namespace (kubernetes-sigs/kind:pkg/cluster/internal/providers/docker/util.go usernsRemap,
mountDevMapper, mountFuse; provision.go commonArgs).
"""

from __future__ import annotations

import csv
import json
import shlex
from dataclasses import dataclass
from typing import Any, Final

# One line of JSON from `docker info --format`: the facts kind reads, nothing else of the host.
INFO_FORMAT: Final = (
    '{"driver":{{json .Driver}},"driverStatus":{{json .DriverStatus}},"securityOptions":{{json .SecurityOptions}}}'
)

# Sets $endpoint to the engine the docker CLI would use here, or stops the script. kind's script
# (components/kind_cluster.py) resolves the engine it checks the same way.
_RESOLVE_ENDPOINT: Final = """endpoint="${DOCKER_HOST:-}"
[ -n "$endpoint" ] || endpoint="$(docker context inspect --format '{{.Endpoints.docker.Host}}')"
if [ -z "$endpoint" ]; then
  echo "error: cannot tell which docker engine to use: DOCKER_HOST is unset and the current docker context" \\
    "has no docker endpoint (docker context ls)" >&2
  exit 1
fi
"""

# Pulumi's docker provider takes DOCKER_CONTEXT over the host it is given, the docker CLI
# DOCKER_HOST over DOCKER_CONTEXT: with both set to different engines they would part again.
_ONE_ENGINE: Final = """if [ -n "${DOCKER_CONTEXT:-}" ] &&
  [ "$(docker context inspect "$DOCKER_CONTEXT" --format '{{.Endpoints.docker.Host}}' || true)" != "$endpoint" ]; then
  echo "error: DOCKER_HOST ($endpoint) and DOCKER_CONTEXT ($DOCKER_CONTEXT) name different docker engines;" \\
    "the docker CLI follows DOCKER_HOST and Pulumi's docker provider DOCKER_CONTEXT: unset one of them" >&2
  exit 1
fi
"""

# The engine Pulumi's docker provider reaches (DOCKER_CONTEXT, checked above to agree, else
# DOCKER_HOST, else the default socket) must be the CLI's. Compared by engine ID, not by endpoint:
# one engine may answer at two sockets (Docker Desktop links /var/run/docker.sock to its own).
_PROVIDER_ENGINE: Final = """provider="${DOCKER_HOST:-unix:///var/run/docker.sock}"
[ -z "${DOCKER_CONTEXT:-}" ] || provider="$endpoint"
engine_id="$(DOCKER_HOST="$endpoint" docker info --format '{{.ID}}')"
if [ "$provider" != "$endpoint" ] &&
  [ "$(DOCKER_HOST="$provider" docker info --format '{{.ID}}' 2>/dev/null || true)" != "$engine_id" ]; then
  echo "error: the docker CLI uses the engine at $endpoint (its current context), but Pulumi's docker provider" \\
    "follows only DOCKER_HOST or DOCKER_CONTEXT and would use $provider: export DOCKER_HOST=$endpoint" >&2
  exit 1
fi
"""

# The engine's endpoint on the first line, its `docker info` facts on the second, both of one engine.
ENGINE_SCRIPT: Final = (
    "set -eu\n"
    + _RESOLVE_ENDPOINT
    + _ONE_ENGINE
    + _PROVIDER_ENGINE
    + f"""printf '%s\\n' "$endpoint"
DOCKER_HOST="$endpoint" docker info --format {shlex.quote(INFO_FORMAT)}
"""
)

_DEV_MAPPER_DRIVERS: Final = frozenset({"btrfs", "zfs", "devicemapper"})
_DEV_MAPPER_BACKING_FILESYSTEMS: Final = frozenset({"btrfs", "zfs", "xfs"})


@dataclass(frozen=True)
class NodeMounts:
    dev_mapper: bool = False
    fuse: bool = False


@dataclass(frozen=True)
class Engine:
    """What ``ENGINE_SCRIPT`` learnt of the engine."""

    endpoint: str
    node_mounts: NodeMounts
    userns_remap: bool


def _security_fields(facts: dict[str, Any]) -> list[str]:
    # Security options read "name=seccomp,profile=builtin", "name=rootless" or "name=userns"; only
    # a whole field counts, as kind splits each option on commas.
    return [field for option in facts.get("securityOptions") or [] for row in csv.reader([option]) for field in row]


def node_mounts(info: str) -> NodeMounts:
    """The mounts a kindest/node container needs on the engine ``docker info --format INFO_FORMAT`` described."""
    facts = json.loads(info)
    driver = str(facts.get("driver") or "").strip().lower()
    backing = next(
        (str(value).strip().lower() for key, value in facts.get("driverStatus") or [] if key == "Backing Filesystem"), ""
    )
    return NodeMounts(
        dev_mapper=driver in _DEV_MAPPER_DRIVERS or backing in _DEV_MAPPER_BACKING_FILESYSTEMS,
        fuse="name=rootless" in _security_fields(facts),
    )


def userns_remap(info: str) -> bool:
    """Whether the engine runs with ``userns-remap``: its privileged containers must then use the host's user namespace."""
    return "name=userns" in _security_fields(json.loads(info))


def engine(output: str) -> Engine:
    """The engine ``ENGINE_SCRIPT`` printed: its endpoint, then its ``docker info`` line."""
    endpoint, _, info = output.strip().partition("\n")
    return Engine(endpoint=endpoint.strip(), node_mounts=node_mounts(info), userns_remap=userns_remap(info))
