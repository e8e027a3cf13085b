"""The management cluster's services: cert-manager, MetalLB with the VIP pool, and Kamaji."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy.config import Versions
from gpu_tenancy.versions import KAMAJI_MOVING_CHART

from .helm import chart

POOL_NAME = "gpu-tenancy"
METALLB_NAMESPACE = "metallb-system"
METALLB_NAMESPACE_LABELS = {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")}
KAMAJI_NAMESPACE = "kamaji-system"  # the TCP CRD hard-codes its webhook service namespace to this


def metallb_values(announce_from_control_planes: bool) -> dict:
    """MetalLB's values; a cluster of control-plane nodes only must announce from them.

    kubeadm labels control-plane nodes node.kubernetes.io/exclude-from-external-load-balancers and
    MetalLB's speakers then stay silent there, so on kind's one node, or an existing cluster of
    control planes only, nothing would answer ARP for the VIPs. kind drops the label from
    single-node clusters only since v0.22 (kubernetes-sigs/kind#3507); an existing cluster keeps
    its operator's choice unless network.announceFromControlPlanes says otherwise.
    """
    return {"speaker": {"ignoreExcludeLB": True}} if announce_from_control_planes else {}


class ManagementCluster(pulumi.ComponentResource):
    """What Kamaji needs to run tenant control planes, installed through ``provider``."""

    kamaji: k8s.helm.v3.Release
    load_balancer: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        versions: Versions,
        pool: pulumi.Input[str] | None,
        provider: k8s.Provider,
        announce_from_control_planes: bool,
        deleted_with_cluster: bool = False,
        install_cert_manager: bool = True,
        label_metallb_namespace: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            "gpu-tenancy:management:ManagementCluster",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[provider])),
        )
        # A cluster that `pulumi destroy` deletes (kind) takes everything in it along, so nothing
        # here is uninstalled first: Helm's uninstall of Kamaji can wait out its timeout on the
        # default DataStore's finalizer, which only the controller it removes would clear
        # (clastix/kamaji#550, #1115), and a Release cannot be deleted from a cluster that is
        # already gone, whatever deleteUnreachable says (pulumi/pulumi-kubernetes#2675).
        child = pulumi.ResourceOptions(parent=self, retain_on_delete=deleted_with_cluster)

        # Kamaji's webhook serving certificate and its etcd certificates are cert-manager's; an
        # existing cluster may bring its own.
        before_kamaji: list[pulumi.Resource] = []
        if install_cert_manager:
            before_kamaji.append(
                chart(
                    f"{name}-cert-manager",
                    "cert-manager",
                    "certManager",
                    versions.cert_manager,
                    "cert-manager",
                    {"crds": {"enabled": True}},
                    child,
                )
            )

        self.load_balancer = []
        if pool is not None:
            # The speaker runs privileged on the host network: under a cluster-wide restricted Pod
            # Security default (an existing cluster's choice; kind enforces none) its namespace
            # must allow that, as MetalLB's own manifests label it.
            metallb_namespace: pulumi.Input[str] = METALLB_NAMESPACE
            if label_metallb_namespace:
                metallb_namespace = k8s.core.v1.Namespace(
                    f"{name}-metallb-namespace",
                    metadata={"name": METALLB_NAMESPACE, "labels": METALLB_NAMESPACE_LABELS},
                    opts=child,
                ).metadata["name"]
            metallb = chart(
                f"{name}-metallb",
                "metallb",
                "metallb",
                versions.metallb.removeprefix("v"),
                metallb_namespace,
                metallb_values(announce_from_control_planes),
                child,
            )
            # The pool is validated by MetalLB's webhook, which serves only once the release is
            # ready; creating it earlier fails with 'failed calling webhook
            # "ipaddresspoolvalidationwebhook.metallb.io"' (metallb/metallb#1597).
            after_metallb = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[metallb]))
            address_pool = k8s.apiextensions.CustomResource(
                f"{name}-address-pool",
                api_version="metallb.io/v1beta1",
                kind="IPAddressPool",
                metadata={"name": POOL_NAME, "namespace": METALLB_NAMESPACE},
                # Every TCP asks for its VIP by name (metallb.io/loadBalancerIPs); other LoadBalancer
                # Services of the cluster must not take a tenant's address before its TCP exists.
                spec={"addresses": [pool], "autoAssign": False},
                opts=after_metallb,
            )
            advertisement = k8s.apiextensions.CustomResource(
                f"{name}-l2-advertisement",
                api_version="metallb.io/v1beta1",
                kind="L2Advertisement",
                metadata={"name": POOL_NAME, "namespace": METALLB_NAMESPACE},
                spec={"ipAddressPools": [POOL_NAME]},
                opts=after_metallb,
            )
            self.load_balancer = [address_pool, advertisement]

        # Helm installs a chart's crds/ directory once and never upgrades it, and Kamaji's chart keeps
        # its CRDs there while its controller follows `latest`: the CRDs would stay at the first
        # install's. Kamaji's CRD-only chart renders the same CRDs as templates, which every upgrade
        # applies (its defaults name this release's namespace, webhook Service and serving
        # Certificate); take_ownership adopts the CRDs an earlier install made from crds/.
        # The CRD-only chart is published as 0.0.0+latest only: an old numbered Kamaji chart, which a
        # stack may pin, installs its CRDs from crds/ as before.
        crds = (
            [
                chart(
                    f"{name}-kamaji-crds",
                    "kamaji-crds",
                    "kamaji",
                    versions.kamaji,
                    KAMAJI_NAMESPACE,
                    {},
                    # Beside cert-manager, not after it: its CA injector annotates the CRDs whenever it runs.
                    child,
                    take_ownership=True,
                )
            ]
            if versions.kamaji == KAMAJI_MOVING_CHART
            else []
        )
        # `resources: null` as in Kamaji's kind guide: the chart's default limits starve the
        # controller (clastix/kamaji#664). The chart's kamaji-etcd is the default DataStore.
        # Kamaji's telemetry, on by default, reports TCP counts and versions to its maintainers; a
        # platform does not phone home unasked (clastix/kamaji:docs/content/telemetry.md).
        self.kamaji = chart(
            f"{name}-kamaji",
            "kamaji",
            "kamaji",
            versions.kamaji,
            KAMAJI_NAMESPACE,
            {"telemetry": {"disabled": True}},
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[*before_kamaji, *crds])),
            unset=["resources"],
            **({"skip_crds": True} if crds else {}),
        )
        self.register_outputs({})
