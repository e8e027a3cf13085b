"""The docker engine docker workers run on: the network they join and the mounts they need."""

from __future__ import annotations

import shlex

import pulumi
import pulumi_command as command

from gpu_tenancy.docker_host import INFO_FORMAT, NodeMounts, node_mounts


class DockerHost(pulumi.ComponentResource):
    """Facts about the local docker engine, read once by a command whose output is kept in state.

    Like the kind network's subnet they are live values, so they flow as outputs of the command
    that reads them: a preview of an empty host leaves them unknown instead of failing.
    """

    network: pulumi.Output[str]
    node_mounts: pulumi.Output[NodeMounts]
    rootless: pulumi.Output[bool]

    def __init__(self, name: str, network: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-tenancy:worker:DockerHost", name, None, opts)
        info = command.local.Command(
            f"{name}-docker-info",
            create=f"docker info --format {shlex.quote(INFO_FORMAT)}",
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.network = pulumi.Output.from_input(network)
        self.node_mounts = info.stdout.apply(node_mounts)
        # kind mounts /dev/fuse exactly when the engine is rootless; its nodes then need kind's
        # rootless kubelet and kube-proxy settings too.
        self.rootless = self.node_mounts.apply(lambda mounts: mounts.fuse)
        self.register_outputs({"dockerInfo": info.stdout})
