"""What the docker engine that runs worker containers needs them to mount, decided as kind does.

kind adds ``/dev/mapper`` when the engine's storage driver or backing filesystem hides block
devices from a nested kubelet (whose ContainerManager otherwise fails "failed to get rootfs info"),
and ``/dev/fuse`` under rootless docker, whose nodes use fuse-overlayfs
(kubernetes-sigs/kind:pkg/cluster/internal/providers/docker/util.go mountDevMapper, mountFuse and
provider.go info).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import Final

# One line of JSON from `docker info --format`: the three facts kind reads, nothing else of the host.
INFO_FORMAT: Final = (
    '{"driver":{{json .Driver}},"driverStatus":{{json .DriverStatus}},"securityOptions":{{json .SecurityOptions}}}'
)

_DEV_MAPPER_DRIVERS: Final = frozenset({"btrfs", "zfs", "devicemapper"})
_DEV_MAPPER_BACKING_FILESYSTEMS: Final = frozenset({"btrfs", "zfs", "xfs"})


@dataclass(frozen=True)
class NodeMounts:
    dev_mapper: bool = False
    fuse: bool = False


def node_mounts(info: str) -> NodeMounts:
    """The mounts a kindest/node container needs on the engine ``docker info --format INFO_FORMAT`` described."""
    facts = json.loads(info)
    driver = str(facts.get("driver") or "").strip().lower()
    backing = next(
        (str(value).strip().lower() for key, value in facts.get("driverStatus") or [] if key == "Backing Filesystem"), ""
    )
    # Security options read "name=seccomp,profile=builtin" or "name=rootless".
    fields = [field for option in facts.get("securityOptions") or [] for row in csv.reader([option]) for field in row]
    return NodeMounts(
        dev_mapper=driver in _DEV_MAPPER_DRIVERS or backing in _DEV_MAPPER_BACKING_FILESYSTEMS,
        fuse="name=rootless" in fields,
    )
