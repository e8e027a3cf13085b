"""A tenant's pod network: Calico on its pod CIDR, and a kube-proxy that survives nested nodes."""

from __future__ import annotations

import base64
import ipaddress
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from gpu_tenancy.addressing import split_endpoint
from gpu_tenancy.config import Versions

from .helm import chart

CALICO_NAMESPACE = "tigera-operator"
KUBE_PROXY_CONFIG_KEY = "gpu-tenancy.conf"


def calico_values(pod_cidr: ipaddress.IPv4Network, api_endpoint: pulumi.Input[str]) -> dict:
    """tigera-operator values; ``installation`` is passed to the operator's Installation resource."""
    return {
        "installation": {
            "cni": {"type": "Calico"},
            "calicoNetwork": {
                # Nodes share one L2 network (kind's), so VXLAN without BGP is all that is needed.
                "bgp": "Disabled",
                "linuxDataplane": "Iptables",
                "ipPools": [{"cidr": str(pod_cidr), "encapsulation": "VXLAN", "natOutgoing": "Enabled", "nodeSelector": "all()"}],
                # The address the kubelet registered (the API server reaches the node there), not
                # Calico's default first-found: on a GPU host with several NICs (InfiniBand, Docker
                # bridges, a management port) the first one need not reach the other workers.
                "nodeAddressAutodetectionV4": {"kubernetes": "NodeInternalIP"},
            },
        },
        # Components a tenant network does not need, and that cost memory on a laptop.
        "apiServer": {"enabled": False},
        "goldmane": {"enabled": False},
        "whisker": {"enabled": False},
        # The operator starts before Service routing works; point it at the API server directly.
        "kubernetesServiceEndpoint": pulumi.Output.from_input(api_endpoint).apply(service_endpoint),
    }


def service_endpoint(api_endpoint: str) -> dict[str, str]:
    """tigera-operator's ``kubernetesServiceEndpoint``: the bare host (no IPv6 brackets) and port."""
    host, port = split_endpoint(api_endpoint)
    return {"host": host, "port": port}


def kube_proxy_configuration(pod_cidr: ipaddress.IPv4Network, rootless: bool = False) -> str:
    """kube-proxy's config for nodes that are containers.

    ``conntrack.maxPerCore: 0`` leaves nf_conntrack_max alone, as kind configures it: the sysctl
    is read-only in a nested network namespace and kube-proxy crash-loops trying to raise it.
    On a rootless engine the TCP timeouts are left alone too (0s), as kind does: in a user
    namespace those sysctls are not even visible. ``clusterCIDR`` is set explicitly
    (clastix/kamaji#1289 leaves it empty).
    """
    conntrack: dict[str, Any] = {"maxPerCore": 0}
    if rootless:
        conntrack |= {"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    return yaml.safe_dump(
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"},
            "clusterCIDR": str(pod_cidr),
            "mode": "iptables",
            "conntrack": conntrack,
        },
        sort_keys=False,
    )


class TenantNetwork(pulumi.ComponentResource):
    """Calico and the kube-proxy override, installed through the tenant's provider."""

    ready: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        pod_cidr: ipaddress.IPv4Network,
        api_endpoint: pulumi.Input[str],
        versions: Versions,
        provider: k8s.Provider,
        nodes: list[pulumi.Resource],
        nested_nodes: bool,
        rootless: pulumi.Input[bool] = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            "gpu-tenancy:tenant:TenantNetwork",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[provider])),
        )
        # Calico 3.32 ships its CRDs as a chart of their own; the operator chart alone is not enough.
        crds = chart(
            f"{name}-calico-crds",
            "calico-crds",
            "calico",
            versions.calico,
            CALICO_NAMESPACE,
            {},
            pulumi.ResourceOptions(parent=self),
            chart_name="crd.projectcalico.org.v1",
        )
        # Helm waits for the operator, which needs a node to run on: install after the joins.
        calico = chart(
            f"{name}-calico",
            "calico",
            "calico",
            versions.calico,
            CALICO_NAMESPACE,
            calico_values(pod_cidr, api_endpoint),
            pulumi.ResourceOptions(parent=self, depends_on=[crds, *nodes]),
            chart_name="tigera-operator",
        )
        self.ready = [calico]
        if nested_nodes:
            self.ready += self._kube_proxy_override(name, pod_cidr, rootless)
        self.register_outputs({})

    def _kube_proxy_override(
        self, name: str, pod_cidr: ipaddress.IPv4Network, rootless: pulumi.Input[bool]
    ) -> list[pulumi.Resource]:
        """Point Kamaji's kube-proxy at our configuration without fighting Kamaji's reconciler.

        Kamaji re-applies the kube-proxy ConfigMap's ``data`` and the DaemonSet fields it generates
        within seconds of any change (clastix/kamaji:internal/resources/addons/kube_proxy.go,
        mutateConfigMap / mutateDaemonSet). It never touches the ConfigMap's ``binaryData`` or the
        container's ``args``: our config goes into a ``binaryData`` key of the same ConfigMap (so
        it lands in the volume kube-proxy already mounts) and a later ``--config`` argument wins
        over the one in Kamaji's ``command``.
        """
        metadata = {"name": "kube-proxy", "namespace": "kube-system", "annotations": {"pulumi.com/patchForce": "true"}}
        config = k8s.core.v1.ConfigMapPatch(
            f"{name}-kube-proxy-config",
            metadata=metadata,
            binary_data=pulumi.Output.from_input(rootless).apply(
                lambda in_user_namespace: {
                    KUBE_PROXY_CONFIG_KEY: base64.b64encode(
                        kube_proxy_configuration(pod_cidr, in_user_namespace).encode()
                    ).decode()
                }
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        daemon_set = k8s.apps.v1.DaemonSetPatch(
            f"{name}-kube-proxy",
            metadata=metadata,
            spec={
                "template": {
                    "spec": {
                        "containers": [{"name": "kube-proxy", "args": [f"--config=/var/lib/kube-proxy/{KUBE_PROXY_CONFIG_KEY}"]}]
                    }
                }
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[config]),
        )
        return [config, daemon_set]
