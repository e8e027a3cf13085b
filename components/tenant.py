"""Everything one tenant owns: its control plane, and (later) its workers and GPU layer."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy.config import Tenant as TenantConfig
from gpu_tenancy.config import Versions

from .tenant_control_plane import TenantControlPlane


class Tenant(pulumi.ComponentResource):
    """One tenant cluster. Nothing here depends on another tenant's resources."""

    control_plane: TenantControlPlane

    def __init__(
        self,
        config: TenantConfig,
        vip: pulumi.Input[str],
        versions: Versions,
        management: k8s.Provider,
        control_plane_prerequisites: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-tenancy:tenant:Tenant", config.name, None, opts)
        self.control_plane = TenantControlPlane(
            config.name,
            config,
            vip,
            management,
            versions.konnectivity,
            nested_nodes=True,
            depends_on=control_plane_prerequisites,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.outputs = {
            "kubeconfig": self.control_plane.kubeconfig,
            "endpoint": self.control_plane.endpoint,
            "kubernetesVersion": config.kubernetes_version,
            "namespace": self.control_plane.namespace,
        }
        self.register_outputs(self.outputs)
