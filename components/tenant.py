"""Everything one tenant owns: control plane, workers, pod network, HAMi and GPU registration."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy import gpus
from gpu_tenancy.config import Tenant as TenantConfig
from gpu_tenancy.config import Versions
from gpu_tenancy.config import Worker as WorkerConfig
from gpu_tenancy.conventions import TENANT_LABEL

from .docker_host import DockerHost
from .docker_worker_machine import DockerWorkerMachine
from .gpu_registration import GpuRegistration
from .hami import Hami
from .ssh_worker_machine import SshWorkerMachine
from .tenant_control_plane import TenantControlPlane
from .tenant_network import TenantNetwork
from .worker_join import JoinPermissions, WorkerJoin
from .worker_machine import WorkerMachine


class Tenant(pulumi.ComponentResource):
    """One tenant cluster. Nothing here depends on another tenant's resources."""

    control_plane: TenantControlPlane
    outputs: dict[str, Any]

    def __init__(
        self,
        config: TenantConfig,
        vip: pulumi.Input[str] | None,
        versions: Versions,
        management: k8s.Provider,
        control_plane_prerequisites: list[pulumi.Resource],
        docker_host: DockerHost | None,
        management_cluster: pulumi.Resource | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-tenancy:tenant:Tenant", config.name, None, opts)
        name = config.name
        child = pulumi.ResourceOptions(parent=self)
        nested_nodes = any(_machine_type(worker).nested for worker in config.workers)
        rootless = docker_host.rootless if nested_nodes and docker_host is not None else False
        self.control_plane = TenantControlPlane(
            name,
            config,
            vip,
            management,
            versions.konnectivity,
            nested_nodes=nested_nodes,
            data_store_version=versions.kamaji_etcd,
            depends_on=control_plane_prerequisites,
            rootless=rootless,
            management_cluster=management_cluster,
            opts=child,
        )
        machines = {worker.name: self._machine(config, worker, docker_host) for worker in config.workers}
        self.outputs = self._outputs(config)
        # A control plane may come before its hardware. The pod network's operator and HAMi need a
        # node to run on (their Helm releases would time out waiting for one), so they come with
        # the first worker.
        if config.workers:
            self._nodes(config, versions, machines, nested_nodes, rootless)
        self.register_outputs(self.outputs)

    def _nodes(
        self,
        config: TenantConfig,
        versions: Versions,
        machines: dict[str, WorkerMachine],
        nested_nodes: bool,
        rootless: pulumi.Input[bool],
    ) -> None:
        """The workers' joins, then the pod network, the GPU registrations and HAMi on them."""
        name = config.name
        child = pulumi.ResourceOptions(parent=self)
        provider = self.control_plane.provider
        # What the program puts in the tenant cluster goes with its TCP: when the tenant goes, Pulumi
        # skips uninstalling Calico and HAMi (hook jobs, waits of up to the release timeout) and
        # deleting RBAC and tokens one by one. The joins still run their kubeadm reset: an SSH
        # host outlives its tenant.
        in_cluster = pulumi.ResourceOptions(parent=self, deleted_with=self.control_plane.cluster)
        permissions = JoinPermissions(name, provider, in_cluster)

        joins: dict[str, pulumi.Resource] = {}
        for worker in config.workers:
            # None removes the label: a worker whose cards left the config must leave HAMi's selector.
            labels = {TENANT_LABEL: name, gpus.GPU_NODE_LABEL[0]: gpus.GPU_NODE_LABEL[1] if worker.gpus else None}
            join = WorkerJoin(
                worker.name,
                name,
                config.kubernetes_version,
                machines[worker.name],
                self.control_plane.endpoint,
                self.control_plane.ca_cert_hash,
                provider,
                permissions,
                node_labels=labels,
                cluster=self.control_plane.cluster,
                opts=child,
            )
            joins[worker.name] = join.join

        network = TenantNetwork(
            name,
            config.pod_cidr,
            self.control_plane.endpoint,
            versions,
            provider,
            list(joins.values()),
            nested_nodes,
            rootless,
            in_cluster,
        )
        mock_devices = config.gpu_mode == "mock"
        # Simulated cards are registered on their nodes before HAMi starts, as real ones are there
        # before their device plugin: HAMi's mock plugin may read the registration only when it
        # starts (mock-device-plugin#10).
        registrations = [
            GpuRegistration(worker.name, name, machines[worker.name], worker.cards, [joins[worker.name]], child).command
            for worker in config.workers
            if mock_devices and worker.cards
        ]
        Hami(
            name,
            versions.hami,
            config.kubernetes_version,
            mock_devices=mock_devices,
            mock_device_plugin_tag=versions.mock_device_plugin,
            quota=config.quota,
            provider=provider,
            depends_on=[*joins.values(), *network.ready, *registrations],
            opts=in_cluster,
        )

    def _outputs(self, config: TenantConfig) -> dict[str, Any]:
        return {
            "kubeconfig": self.control_plane.kubeconfig,
            "endpoint": pulumi.Output.concat("https://", self.control_plane.endpoint),
            "kubernetesVersion": config.kubernetes_version,
            "namespace": self.control_plane.namespace,
            "workers": [worker.name for worker in config.workers],
            "gpus": {
                worker.name: [
                    {"model": gpu.model, "count": gpu.count, "memoryMiB": gpus.CATALOGUE[gpu.model].memory_mib}
                    for gpu in worker.gpus
                ]
                for worker in config.workers
            },
        }

    def _machine(self, tenant: TenantConfig, worker: WorkerConfig, docker_host: DockerHost | None) -> WorkerMachine:
        child = pulumi.ResourceOptions(parent=self)
        # A new version reaches a machine (an SSH host's packages, a container's node image) only
        # once the control plane runs it, kubeadm's upgrade order: a kubelet must not be newer than
        # its API server, and the old node keeps serving through the upgrade and stays if it fails.
        if worker.ssh is not None:
            # Only a host with cards needs NVIDIA's driver and runtime; a CPU host of an nvidia tenant does not.
            gpu_mode = tenant.gpu_mode if worker.gpus else "none"
            return SshWorkerMachine(
                worker.name, worker.ssh, tenant.kubernetes_version, gpu_mode, [self.control_plane.cluster], child
            )
        if docker_host is None:  # config validation requires a network for docker workers
            raise ValueError(f"docker worker {worker.name} has no docker host to run on")
        return DockerWorkerMachine(
            worker.name, tenant.name, tenant.kubernetes_version, docker_host, [self.control_plane.cluster], child
        )


def _machine_type(worker: WorkerConfig) -> type[SshWorkerMachine | DockerWorkerMachine]:
    return SshWorkerMachine if worker.ssh is not None else DockerWorkerMachine
