"""Which mounts a worker container needs on a given docker engine, decided as kind decides."""

from __future__ import annotations

import json

import pytest

from gpu_tenancy.docker_host import NodeMounts, node_mounts
from tools import mock_cloud


def info(driver: str, backing: str | None = None, security: list[str] | None = None) -> str:
    status = [["Backing Filesystem", backing], ["Supports d_type", "true"]] if backing else None
    return json.dumps({"driver": driver, "driverStatus": status, "securityOptions": security})


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        (mock_cloud.DOCKER_INFO, NodeMounts()),
        (info("overlay2", "extfs"), NodeMounts()),
        (info("overlay2", "xfs"), NodeMounts(dev_mapper=True)),
        (info("overlay2", "btrfs"), NodeMounts(dev_mapper=True)),
        (info("btrfs"), NodeMounts(dev_mapper=True)),
        (info("zfs"), NodeMounts(dev_mapper=True)),
        (info("devicemapper"), NodeMounts(dev_mapper=True)),
        # Docker's containerd image store reports a snapshotter and no backing filesystem.
        (json.dumps({"driver": "overlayfs", "driverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}), NodeMounts()),
        (info("overlay2", "extfs", ["name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"]), NodeMounts(fuse=True)),
        (info("fuse-overlayfs", None, ["name=rootless"]), NodeMounts(fuse=True)),
        # Only a whole option field counts (kind splits each option on commas).
        (info("overlay2", "extfs", ["name=seccomp,profile=name=rootless-like"]), NodeMounts()),
    ],
)
def test_node_mounts(engine: str, expected: NodeMounts) -> None:
    assert node_mounts(engine) == expected
