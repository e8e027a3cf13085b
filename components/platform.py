"""The whole platform: the management cluster and every tenant, wired from validated config."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy.config import AddressPlan, ConfigError, StackConfig, address_plan

from .docker_host import DockerHost
from .kind_cluster import KindCluster
from .management_cluster import ManagementCluster
from .stack_config import fail
from .tenant import Tenant


def _plan(config: StackConfig, node_subnets: str | None) -> AddressPlan:
    try:
        return address_plan(config, node_subnets)
    except ConfigError as error:
        raise fail(error) from None


class Platform(pulumi.ComponentResource):
    """Kamaji and its tenants, on a kind cluster the program creates or on an existing cluster."""

    management_kubeconfig: pulumi.Output[str]
    tenants: dict[str, Tenant]

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-tenancy:platform:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        worker_network: pulumi.Input[str] | None
        # A cluster the program deletes takes the tenants' control planes in it along.
        management_cluster: pulumi.Resource | None = None
        if config.management.mode == "kind":
            kind = KindCluster(f"{name}-management", config.management.name, config.management.node_image, child)
            self.management_kubeconfig = kind.kubeconfig
            provider = kind.provider
            management_cluster = kind.cluster
            # The pool and VIPs depend on the kind network's subnet, which exists only after kind
            # has run; in a preview of an empty host they stay unknown.
            addresses = kind.node_subnets.apply(lambda subnets: _plan(config, subnets))
            # Workers start only once the addresses passed the checks against the live network.
            worker_network = pulumi.Output.all(kind.network, addresses).apply(lambda values: values[0])
        else:
            assert config.management.kubeconfig is not None  # required by config validation
            self.management_kubeconfig = pulumi.Output.secret(config.management.kubeconfig)
            provider = k8s.Provider(f"{name}-management", kubeconfig=self.management_kubeconfig, opts=child)
            addresses = pulumi.Output.from_input(_plan(config, None))
            worker_network = config.network.worker_network

        # One engine runs every docker worker; it is asked about its storage once, and only if needed.
        has_docker_workers = any(worker.ssh is None for tenant in config.tenants for worker in tenant.workers)
        docker_host = (
            DockerHost(f"{name}-docker-host", worker_network, child)
            if has_docker_workers and worker_network is not None
            else None
        )

        # MetalLB when the program knows the pool: always with kind, with an existing cluster only
        # when network.pool is given (otherwise that cluster's own LoadBalancer serves the VIPs).
        with_pool = config.management.mode == "kind" or config.network.pool is not None
        management = ManagementCluster(
            f"{name}-management",
            config.versions,
            addresses.apply(lambda plan: str(plan.pool)) if with_pool else None,
            provider,
            announce_from_control_planes=config.management.mode == "kind" or config.network.announce_from_control_planes,
            deleted_with_cluster=config.management.mode == "kind",
            install_cert_manager=config.management.install_cert_manager,
            label_metallb_namespace=config.management.mode == "existing",
            opts=child,
        )
        self.tenants = {
            tenant.name: Tenant(
                tenant,
                addresses.apply(lambda plan, name=tenant.name: str(plan.vips[name]))
                if with_pool or tenant.vip is not None
                else None,
                config.versions,
                provider,
                [management.kamaji, *management.load_balancer],
                docker_host,
                management_cluster,
                child,
            )
            for tenant in config.tenants
        }
        self.register_outputs({"managementKubeconfig": self.management_kubeconfig})

    def tenant_outputs(self) -> dict[str, dict[str, Any]]:
        return {name: tenant.outputs for name, tenant in self.tenants.items()}
