"""The docker engine docker workers run on: its endpoint, the network they join and what they need."""

from __future__ import annotations

import pulumi
import pulumi_command as command

from gpu_tenancy.docker_host import ENGINE_SCRIPT, NodeMounts, engine


class DockerHost(pulumi.ComponentResource):
    """Facts about the docker engine, read once by a command whose output is kept in state.

    Like the kind network's subnet they are live values, so they flow as outputs of the command
    that reads them: a preview of an empty host leaves them unknown instead of failing. The
    command also stops a run whose docker CLI and Pulumi docker provider would reach different
    engines (gpu_tenancy.docker_host), and keeps the checked endpoint for every `docker exec`.
    """

    endpoint: pulumi.Output[str]
    network: pulumi.Output[str]
    node_mounts: pulumi.Output[NodeMounts]
    rootless: pulumi.Output[bool]
    userns_remap: pulumi.Output[bool]

    def __init__(self, name: str, network: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-tenancy:worker:DockerHost", name, None, opts)
        info = command.local.Command(
            f"{name}-docker-info",
            create=ENGINE_SCRIPT,
            opts=pulumi.ResourceOptions(parent=self),
        )
        facts = info.stdout.apply(engine)
        self.endpoint = facts.apply(lambda facts: facts.endpoint)
        self.network = pulumi.Output.from_input(network)
        self.node_mounts = facts.apply(lambda facts: facts.node_mounts)
        # kind mounts /dev/fuse exactly when the engine is rootless; its nodes then need kind's
        # rootless kubelet and kube-proxy settings too.
        self.rootless = self.node_mounts.apply(lambda mounts: mounts.fuse)
        self.userns_remap = facts.apply(lambda facts: facts.userns_remap)
        self.register_outputs({"dockerInfo": info.stdout, "endpoint": self.endpoint})
