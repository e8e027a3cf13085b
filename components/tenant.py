"""Everything one tenant owns: control plane, workers, pod network, HAMi and GPU registration."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy import gpus, kubeadm
from gpu_tenancy.config import Tenant as TenantConfig
from gpu_tenancy.config import Versions

from .gpu_registration import GpuRegistration
from .hami import Hami
from .tenant_control_plane import API_PORT, TenantControlPlane
from .tenant_network import TenantNetwork
from .worker_join import JoinPermissions, WorkerJoin
from .worker_machine import TENANT_LABEL, DockerWorkerMachine


class Tenant(pulumi.ComponentResource):
    """One tenant cluster. Nothing here depends on another tenant's resources."""

    control_plane: TenantControlPlane
    outputs: dict[str, Any]

    def __init__(
        self,
        config: TenantConfig,
        vip: pulumi.Input[str],
        versions: Versions,
        management: k8s.Provider,
        control_plane_prerequisites: list[pulumi.Resource],
        node_network: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-tenancy:tenant:Tenant", config.name, None, opts)
        name = config.name
        child = pulumi.ResourceOptions(parent=self)
        nested_nodes = True
        self.control_plane = TenantControlPlane(
            name,
            config,
            vip,
            management,
            versions.konnectivity,
            nested_nodes=nested_nodes,
            depends_on=control_plane_prerequisites,
            opts=child,
        )
        provider = self.control_plane.provider
        permissions = JoinPermissions(name, provider, child)
        endpoint = pulumi.Output.concat(vip, f":{API_PORT}")

        machines: dict[str, DockerWorkerMachine] = {}
        joins: list[pulumi.Resource] = []
        for worker in config.workers:
            machine = DockerWorkerMachine(worker.name, name, config.kubernetes_version, node_network, child)
            labels = {TENANT_LABEL: name, **({gpus.GPU_NODE_LABEL[0]: gpus.GPU_NODE_LABEL[1]} if worker.cards else {})}
            join = WorkerJoin(
                worker.name,
                name,
                machine,
                endpoint,
                self.control_plane.kubeconfig,
                provider,
                permissions,
                node_labels=labels,
                preflight_ignores=kubeadm.NESTED_NODE_PREFLIGHT_IGNORES,
                opts=child,
            )
            machines[worker.name] = machine
            joins.append(join.join)

        network = TenantNetwork(name, config.pod_cidr, vip, versions, provider, joins, nested_nodes, child)
        hami = Hami(
            name,
            versions.hami,
            config.kubernetes_version,
            mock_devices=True,
            quota=config.quota,
            provider=provider,
            depends_on=[*joins, *network.ready],
            opts=child,
        )
        for worker in config.workers:
            if worker.cards:
                GpuRegistration(worker.name, name, machines[worker.name], worker.cards, [hami.release], child)

        self.outputs = {
            "kubeconfig": self.control_plane.kubeconfig,
            "endpoint": self.control_plane.endpoint,
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
        self.register_outputs(self.outputs)
