"""The whole platform: the management cluster and every tenant, wired from validated config."""

from __future__ import annotations

from typing import Any

import pulumi

from gpu_tenancy.config import AddressPlan, ConfigError, StackConfig, address_plan

from .kind_cluster import KindCluster
from .management_cluster import ManagementCluster
from .stack_config import fail
from .tenant import Tenant


class Platform(pulumi.ComponentResource):
    """gpu-tenancy on one Docker host: a kind management cluster and its tenants."""

    management_kubeconfig: pulumi.Output[str]
    tenants: dict[str, Tenant]

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-tenancy:platform:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        kind = KindCluster(f"{name}-management", config.management.name, config.management.node_image, child)
        self.management_kubeconfig = kind.kubeconfig

        def plan(node_subnets: str) -> AddressPlan:
            try:
                return address_plan(config, node_subnets)
            except ConfigError as error:
                raise fail(error) from None

        # The pool and VIPs depend on the kind network's subnet, which exists only after kind
        # has run; in a preview of an empty host they stay unknown.
        addresses = kind.node_subnets.apply(plan)
        management = ManagementCluster(
            f"{name}-management",
            config.versions,
            addresses.apply(lambda plan: str(plan.pool)),
            kind.provider,
            child,
        )
        self.tenants = {
            tenant.name: Tenant(
                tenant,
                addresses.apply(lambda plan, name=tenant.name: str(plan.vips[name])),
                config.versions,
                kind.provider,
                [management.kamaji, *management.load_balancer],
                kind.network,
                child,
            )
            for tenant in config.tenants
        }
        self.register_outputs({"managementKubeconfig": self.management_kubeconfig})

    def tenant_outputs(self) -> dict[str, dict[str, Any]]:
        return {name: tenant.outputs for name, tenant in self.tenants.items()}
