"""Tenant networking: Calico on the tenant pod CIDR and a kube-proxy that survives nested nodes."""

from __future__ import annotations

import base64

import pytest
import yaml

from components.tenant_network import service_endpoint
from gpu_tenancy.addressing import split_endpoint
from tests.conftest import COMMAND, K8S_PROVIDER, RELEASE, dev_config, render_config
from tools import harness

CONFIG_MAP_PATCH = "kubernetes:core/v1:ConfigMapPatch"
DAEMON_SET_PATCH = "kubernetes:apps/v1:DaemonSetPatch"


def test_calico_is_pinned_and_installed_through_the_tenant_provider(dev: harness.Render) -> None:
    crds = dev.one(RELEASE, "tenant-a-calico-crds")
    calico = dev.one(RELEASE, "tenant-a-calico")
    for release, chart in ((crds, "crd.projectcalico.org.v1"), (calico, "tigera-operator")):
        assert release["inputs"]["chart"] == chart
        assert release["inputs"]["version"] == "v3.32.2"
        assert release["inputs"]["repositoryOpts"] == {"repo": "https://docs.tigera.io/calico/charts"}
        # Calico's Helm guide installs the operator into tigera-operator, which it creates.
        assert (release["inputs"]["namespace"], release["inputs"]["createNamespace"]) == ("tigera-operator", True)
        assert release["provider"] == dev.one(K8S_PROVIDER, "tenant-a")["urn"]
    assert crds["urn"] in calico["dependencies"]


def test_calico_uses_the_tenant_pod_cidr() -> None:
    config = dev_config()
    config["tenants"][1]["podCidr"] = "10.48.0.0/16"
    render = render_config(config)
    pools = render.one(RELEASE, "tenant-b-calico")["inputs"]["values"]["installation"]["calicoNetwork"]["ipPools"]
    assert [pool["cidr"] for pool in pools] == ["10.48.0.0/16"]
    assert render.one(RELEASE, "tenant-a-calico")["inputs"]["values"]["installation"]["calicoNetwork"]["ipPools"][0]["cidr"] == (
        "10.244.0.0/16"
    )


def test_calico_values(dev: harness.Render) -> None:
    values = dev.one(RELEASE, "tenant-a-calico")["inputs"]["values"]
    network = values["installation"]["calicoNetwork"]
    assert values["installation"]["cni"] == {"type": "Calico"}
    # One pool on the tenant's pod CIDR for every node, VXLAN between the nodes, NAT for traffic
    # leaving the pod network (pods reach the VIP and the internet through their node).
    assert network == {
        "ipPools": [{"nodeSelector": "all()", "cidr": "10.244.0.0/16", "encapsulation": "VXLAN", "natOutgoing": "Enabled"}],
        "linuxDataplane": "Iptables",
        "bgp": "Disabled",
        # VXLAN between the addresses nodes registered with, not Calico's first-found interface.
        "nodeAddressAutodetectionV4": {"kubernetes": "NodeInternalIP"},
    }
    assert values["kubernetesServiceEndpoint"] == {"host": "172.18.255.230", "port": "6443"}
    assert values["goldmane"] == values["whisker"] == values["apiServer"] == {"enabled": False}


@pytest.mark.parametrize(
    ("endpoint", "host", "port"),
    [
        ("172.18.255.230:6443", "172.18.255.230", "6443"),
        # An existing cluster's load balancer may hand out IPv6; Kamaji joins it as Go does, in brackets.
        ("[fd00:10::5]:6443", "fd00:10::5", "6443"),
        ("api.tenant.example.com:443", "api.tenant.example.com", "443"),
    ],
)
def test_the_operator_gets_the_bare_host_of_the_endpoint(endpoint: str, host: str, port: str) -> None:
    assert service_endpoint(endpoint) == {"host": host, "port": port}


@pytest.mark.parametrize("endpoint", ["172.18.255.230", ":6443", "172.18.255.230:https"])
def test_an_endpoint_without_a_port_is_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        split_endpoint(endpoint)


def test_calico_installs_after_the_joins(dev: harness.Render) -> None:
    calico = dev.one(RELEASE, "tenant-a-calico")
    assert dev.one(COMMAND, "tenant-a-worker-0-join")["urn"] in calico["dependencies"]


def test_kube_proxy_gets_a_conntrack_safe_config_kamaji_leaves_alone(dev: harness.Render) -> None:
    patch = dev.one(CONFIG_MAP_PATCH, "tenant-a-kube-proxy-config")["inputs"]
    assert patch["metadata"]["name"] == "kube-proxy" and patch["metadata"]["namespace"] == "kube-system"
    assert "data" not in patch  # Kamaji re-applies data within seconds
    config = yaml.safe_load(base64.b64decode(patch["binaryData"]["gpu-tenancy.conf"]))
    assert config == {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"},
        "clusterCIDR": "10.244.0.0/16",
        "mode": "iptables",
        "conntrack": {"maxPerCore": 0},
    }
    daemon_set = dev.one(DAEMON_SET_PATCH, "tenant-a-kube-proxy")
    # Kamaji manages both objects; a server-side apply patch takes the fields only when forced.
    for applied in (patch, daemon_set["inputs"]):
        assert applied["metadata"]["annotations"] == {"pulumi.com/patchForce": "true"}
    containers = daemon_set["inputs"]["spec"]["template"]["spec"]["containers"]
    assert containers == [{"name": "kube-proxy", "args": ["--config=/var/lib/kube-proxy/gpu-tenancy.conf"]}]
    assert dev.one(CONFIG_MAP_PATCH, "tenant-a-kube-proxy-config")["urn"] in daemon_set["dependencies"]
    assert daemon_set["provider"] == dev.one(K8S_PROVIDER, "tenant-a")["urn"]
