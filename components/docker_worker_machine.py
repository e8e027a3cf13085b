"""A docker worker: a ``kindest/node`` container run the way kind runs its own nodes.

The flags mirror kind's docker provider (kubernetes-sigs/kind:pkg/cluster/internal/providers/
docker/provision.go). The container carries gpu-tenancy's labels, never kind's
``io.x-k8s.kind.cluster`` label: `kind delete cluster` removes every container with that label.
"""

from __future__ import annotations

import shlex

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from gpu_tenancy import kubeadm
from gpu_tenancy.conventions import ROLE_LABEL, TENANT_LABEL, WORKER_ROLE
from gpu_tenancy.docker_host import NodeMounts
from gpu_tenancy.versions import node_image

from .docker_host import DockerHost
from .worker_machine import secret_prelude


def _volumes(mounts: NodeMounts) -> list[docker.ContainerVolumeArgs]:
    volumes = [
        docker.ContainerVolumeArgs(container_path="/var"),
        docker.ContainerVolumeArgs(host_path="/lib/modules", container_path="/lib/modules", read_only=True),
    ]
    if mounts.dev_mapper:
        volumes.append(docker.ContainerVolumeArgs(host_path="/dev/mapper", container_path="/dev/mapper"))
    return volumes


def _devices(mounts: NodeMounts) -> list[docker.ContainerDeviceArgs]:
    # Docker's own default permissions, spelt out: the provider reads "rwm" back, and an unset value
    # then differs after a refresh and replaces the container (kreuzwerker/terraform-provider-docker#603).
    return (
        [docker.ContainerDeviceArgs(host_path="/dev/fuse", container_path="/dev/fuse", permissions="rwm")] if mounts.fuse else []
    )


class DockerWorkerMachine(pulumi.ComponentResource):
    """A privileged systemd container that kubelet and containerd run in.

    Other components run scripts on it through ``run`` (CAPD's split: this is the machine; the
    join and the GPU registration only need a shell on it).
    """

    machine_id: pulumi.Output[str]
    hostname: str
    # A nested node fails kubeadm's SystemVerification (no cpuset cgroup) and needs kind's kubelet settings.
    nested = True
    preflight_ignores = kubeadm.NESTED_NODE_PREFLIGHT_IGNORES

    def __init__(
        self,
        name: str,
        tenant: str,
        kubernetes_version: str,
        host: DockerHost,
        after: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``after``: what the container waits for (the image pull does not), on creation and on
        replacement; the old container is removed only then (it is replaced delete-first)."""
        super().__init__("gpu-tenancy:worker:DockerWorkerMachine", name, None, opts)
        self.hostname = name
        image = docker.RemoteImage(
            f"{name}-image",
            name=node_image(kubernetes_version),
            # Other workers and kind itself may use the same image.
            keep_locally=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        container = docker.Container(
            name,
            name=name,
            hostname=name,
            image=image.image_id,
            # Only on kind's network (the provider detaches the default bridge), where the tenant
            # VIPs and the other nodes are.
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=host.network, aliases=[name])],
            privileged=True,
            security_opts=["seccomp=unconfined", "apparmor=unconfined"],
            tmpfs={"/run": "", "/tmp": ""},
            volumes=host.node_mounts.apply(_volumes),
            devices=host.node_mounts.apply(_devices),
            cgroupns_mode="private",
            # A userns-remap engine refuses privileged containers in a remapped user namespace (kind
            # passes --userns=host there too).
            userns_mode=host.userns_remap.apply(lambda remap: "host" if remap else None),
            init=False,
            tty=True,
            restart="on-failure",
            max_retry_count=1,
            labels=[
                docker.ContainerLabelArgs(label=TENANT_LABEL, value=tenant),
                docker.ContainerLabelArgs(label=ROLE_LABEL, value=WORKER_ROLE),
            ],
            # The anonymous /var volume holds containerd's images and kubelet's state; it goes with the container.
            remove_volumes=True,
            # The container name is fixed, so a replacement must remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True, depends_on=after),
        )
        self.machine_id = container.id
        # The name is ours, fixed above; every command on the machine waits for it through machine_id.
        self._container_name = name
        self._engine = host.endpoint
        self.register_outputs({"containerId": self.machine_id})

    def run(
        self,
        name: str,
        script: pulumi.Input[str],
        environment: dict[str, pulumi.Input[str]],
        secrets: dict[str, pulumi.Input[str]],
        delete: str | None,
        triggers: list[pulumi.Input[str]] | None,
        opts: pulumi.ResourceOptions,
    ) -> command.local.Command:
        """A command that runs ``script`` as root in the container, on create and on input changes.

        ``environment`` reaches the script through ``docker exec -e`` and stays readable in the
        stack (policies check it); ``secrets`` are prepended to the script on its stdin. The docker
        CLI itself gets ``DOCKER_HOST``, the engine the container was made on, not the CLI's
        current context; it does not pass into the container.
        """
        passed = " ".join(f"-e {key}" for key in environment)
        return command.local.Command(
            name,
            create=f"docker exec -i {passed} {self._container_name} sh -s",
            delete=f"docker exec {self._container_name} sh -c {shlex.quote(delete)} || true" if delete else None,
            stdin=pulumi.Output.concat(secret_prelude(secrets), script),
            environment={**environment, "DOCKER_HOST": self._engine},
            triggers=[*(triggers or []), self.machine_id],
            # kubeadm reports its progress on stdout; secrets reach the script on stdin and are never printed.
            logging=command.local.Logging.STDOUT_AND_STDERR,
            # The old command's delete undoes what the new one did on the same machine (a
            # `kubeadm reset` after a fresh join), so replacements delete first.
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(delete_before_replace=True)),
        )
