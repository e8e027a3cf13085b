"""Tenant control planes: the TCP spec, readiness, the kubeconfig read and the tenant provider."""

from __future__ import annotations

import json

import jsonpatch
import pytest
import yaml

from gpu_tenancy import kubeconfig
from tests.conftest import K8S_PROVIDER, MGMT_KUBECONFIG, RELEASE, SECRET, TCP, dev_config, render_config
from tools import harness

NAMESPACE = "kubernetes:core/v1:Namespace"


def test_one_namespace_and_tcp_per_tenant(dev: harness.Render) -> None:
    assert sorted(r["inputs"]["metadata"]["name"] for r in dev.find(NAMESPACE) if r["name"].endswith("-namespace")) == [
        "tenant-a",
        "tenant-b",
    ]
    assert sorted(r["name"] for r in dev.find(TCP)) == ["tenant-a", "tenant-b"]


def test_tcp_spec(dev: harness.Render) -> None:
    tcp = dev.one(TCP, "tenant-a")["inputs"]
    assert tcp["apiVersion"] == "kamaji.clastix.io/v1alpha1"
    assert tcp["metadata"]["namespace"] == "tenant-a"
    spec = tcp["spec"]
    vip = "172.18.255.230"
    assert spec["controlPlane"]["service"]["serviceType"] == "LoadBalancer"
    assert spec["controlPlane"]["service"]["additionalMetadata"]["annotations"] == {"metallb.io/loadBalancerIPs": vip}
    assert spec["networkProfile"] == {
        "address": vip,
        "port": 6443,
        "podCidrs": ["10.244.0.0/16"],
        "serviceCidrs": ["10.96.0.0/16"],
        "dnsServiceIPs": ["10.96.0.10"],
    }
    assert spec["kubernetes"]["version"] == "v1.36.4"
    assert spec["addons"]["coreDNS"] == {} and spec["addons"]["kubeProxy"] == {}
    assert spec["addons"]["konnectivity"] == {"server": {"port": 8132}, "agent": {"mode": "DaemonSet"}}
    patches = spec["kubernetes"]["kubelet"]["configurationJSONPatches"]
    assert {"op": "add", "path": "/cgroupDriver", "value": "systemd"} in patches
    assert spec["dataStore"] == "default"  # Kamaji's default DataStore, named
    # Kamaji's default list lacks NodeRestriction: kubelets could rewrite each other's Nodes.
    assert "NodeRestriction" in spec["kubernetes"]["admissionControllers"]
    # No management-cluster token in the tenant's control-plane pods (kamaji.md: mounted unless set).
    assert spec["controlPlane"]["deployment"]["automountServiceAccountToken"] is False
    # One management node: a second replica would cost memory and buy no availability.
    assert spec["controlPlane"]["deployment"]["replicas"] == 1
    # The tenant label on the TCP, its pods, its Service and its namespace (what policies and `validate` select by).
    assert tcp["metadata"]["labels"] == {"gpu-tenancy.io/tenant": "tenant-a", "tenant.clastix.io": "tenant-a"}
    assert spec["controlPlane"]["deployment"]["additionalMetadata"] == {"labels": {"gpu-tenancy.io/tenant": "tenant-a"}}
    assert spec["controlPlane"]["service"]["additionalMetadata"]["labels"] == {"gpu-tenancy.io/tenant": "tenant-a"}
    namespace = dev.one(NAMESPACE, "tenant-a-namespace")["inputs"]["metadata"]
    assert namespace == {"name": "tenant-a", "labels": {"gpu-tenancy.io/tenant": "tenant-a"}}


# The KubeletConfiguration Kamaji uploads, as far as the patches touch it. Kamaji sets
# cgroupDriver only from the deprecated spec.kubernetes.kubelet.cgroupfs
# (clastix/kamaji:internal/kubeadm/uploadconfig.go), so by default the key is absent.
KAMAJI_KUBELET_CONFIG = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "clusterDNS": ["10.96.0.10"],
}


@pytest.mark.parametrize("uploaded", [{}, {"cgroupDriver": "cgroupfs"}], ids=["no cgroupDriver", "cgroupfs"])
def test_kubelet_patches_apply_to_the_configuration_kamaji_uploads(dev: harness.Render, uploaded: dict) -> None:
    # Kamaji applies configurationJSONPatches with RFC 6902 semantics (evanphx/json-patch); one
    # failing operation fails the whole upload and the TCP never becomes Ready.
    patches = dev.one(TCP, "tenant-a")["inputs"]["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    patched = jsonpatch.apply_patch({**KAMAJI_KUBELET_CONFIG, **uploaded}, patches)
    assert patched["cgroupDriver"] == "systemd"
    assert patched["failSwapOn"] is False
    # kind's values: a laptop's fuller disk must not evict the tenant's pods.
    assert patched["evictionHard"] == {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"}
    assert patched["imageGCHighThresholdPercent"] == 100


def test_tenant_cidrs_and_konnectivity_version_come_from_config() -> None:
    config = dev_config()
    config["tenants"][1].update(podCidr="10.48.0.0/16", serviceCidr="10.49.0.0/16", vip="172.18.255.240")
    config["versions"] = {"konnectivity": "v0.35.0"}
    tcp = render_config(config).one(TCP, "tenant-b")["inputs"]["spec"]
    assert tcp["networkProfile"]["podCidrs"] == ["10.48.0.0/16"]
    assert tcp["networkProfile"]["serviceCidrs"] == ["10.49.0.0/16"]
    # CoreDNS's address moves with the CIDR: Kamaji's webhook refuses an update whose DNS address
    # lies outside serviceCidrs, and picks one itself only on create.
    assert tcp["networkProfile"]["dnsServiceIPs"] == ["10.49.0.10"]
    assert tcp["networkProfile"]["address"] == "172.18.255.240"
    assert tcp["addons"]["konnectivity"]["server"]["version"] == "v0.35.0"
    assert tcp["addons"]["konnectivity"]["agent"]["version"] == "v0.35.0"


def test_pulumi_waits_until_the_tcp_is_ready(dev: harness.Render) -> None:
    annotation = dev.one(TCP, "tenant-a")["inputs"]["metadata"]["annotations"]["pulumi.com/waitFor"]
    conditions = json.loads(annotation)
    assert "jsonpath={.status.kubernetesResources.version.status}=Ready" in conditions
    # The tenant network patches kube-proxy's DaemonSet and HAMi's webhook needs Konnectivity: both must exist.
    assert "jsonpath={.status.addons.kubeProxy.enabled}=true" in conditions
    assert "jsonpath={.status.addons.konnectivity.enabled}=true" in conditions
    # A change of DataStore returns Ready at once; Kamaji names the new store only after migrating to it.
    assert "jsonpath={.status.storage.dataStoreName}=default" in conditions
    # Kamaji reconciles for minutes on a laptop: Pulumi's 10-minute default is not enough, for a
    # new TCP nor for a new version (an update that waits until the TCP reports that version).
    assert dev.one(TCP, "tenant-a")["options"]["customTimeouts"] == {"create": "20m", "update": "20m"}


def test_a_dedicated_store_is_waited_for_by_its_name() -> None:
    config = dev_config()
    config["tenants"][0]["dataStore"] = "dedicated"
    tcp = render_config(config).one(TCP, "tenant-a")["inputs"]
    conditions = json.loads(tcp["metadata"]["annotations"]["pulumi.com/waitFor"])
    assert tcp["spec"]["dataStore"] != "default"
    assert f"jsonpath={{.status.storage.dataStoreName}}={tcp['spec']['dataStore']}" in conditions


def test_the_wait_includes_the_requested_version() -> None:
    # After a version bump the status is still Ready from the old version when the update returns;
    # Kamaji reports the running version only once the upgrade is done.
    config = dev_config()
    config["tenants"][1]["kubernetesVersion"] = "v1.35.7"
    render = render_config(config)
    for tenant, version in (("tenant-a", "v1.36.4"), ("tenant-b", "v1.35.7")):
        annotation = render.one(TCP, tenant)["inputs"]["metadata"]["annotations"]["pulumi.com/waitFor"]
        assert f"jsonpath={{.status.kubernetesResources.version.version}}={version}" in json.loads(annotation)


def test_the_tenant_provider_identifies_its_cluster_by_the_tcps_uid(dev: harness.Render, dev_preview: harness.Render) -> None:
    # A new CA or address is the same cluster; only a recreated TCP (a new uid) is a new one.
    provider = dev.one(K8S_PROVIDER, "tenant-a")
    tcp = dev.one(TCP, "tenant-a")
    assert provider["inputs"]["clusterIdentifier"] == harness.mock_uid("tenant-a", "tenant-a")
    assert provider["inputs"]["clusterIdentifier"] != dev.one(K8S_PROVIDER, "tenant-b")["inputs"]["clusterIdentifier"]
    assert tcp["urn"] in provider["dependencies"]
    # Previewing a fresh stack: the uid is not known yet (the management provider has no
    # kubeconfig either, so the TCP reports nothing), and the provider is new anyway.
    previewed = dev_preview.one(K8S_PROVIDER, "tenant-a")
    assert previewed["inputs"]["clusterIdentifier"] == harness.UNKNOWN
    assert dev_preview.one(TCP, "tenant-a")["urn"] in previewed["dependencies"]


def test_tcp_waits_for_kamaji_and_the_load_balancer_pool(dev: harness.Render) -> None:
    tcp = dev.one(TCP, "tenant-a")
    needed = [
        dev.one(RELEASE, "gpu-tenancy-management-kamaji"),
        dev.one("kubernetes:metallb.io/v1beta1:IPAddressPool"),
        dev.one("kubernetes:metallb.io/v1beta1:L2Advertisement"),
        dev.one(NAMESPACE, "tenant-a-namespace"),
    ]
    for other in needed:
        assert other["urn"] in tcp["dependencies"], other["name"]


def test_admin_kubeconfig_is_read_from_the_secret_kamaji_names(dev: harness.Render) -> None:
    read = dev.one(SECRET, "tenant-a-admin-kubeconfig")
    assert read["read"] == "tenant-a/tenant-a-admin-kubeconfig"
    assert dev.one(TCP, "tenant-a")["urn"] in read["dependencies"]
    assert read["provider"] == dev.one(K8S_PROVIDER, "gpu-tenancy-management")["urn"]


def test_tenant_provider_uses_the_tenant_kubeconfig(dev: harness.Render, dev_secrets: harness.Render) -> None:
    provider = dev.one(K8S_PROVIDER, "tenant-a")
    assert dev.one(SECRET, "tenant-a-admin-kubeconfig")["urn"] in provider["dependencies"]
    assert provider["inputs"]["kubeconfig"] == "[secret]"
    # A refresh while the API server is briefly away must not drop what lives in the tenant from the
    # state; on destroy that goes with the TCP (deletedWith) without asking the API server.
    assert "deleteUnreachable" not in provider["inputs"]
    config = dev_secrets.one(K8S_PROVIDER, "tenant-a")["inputs"]["kubeconfig"]
    assert kubeconfig.server(config) == "https://172.18.255.230:6443"
    # super-admin.conf: admin.conf's RBAC binding appears only after Kamaji reports the TCP Ready.
    assert yaml.safe_load(config)["users"][0]["name"] == "kubernetes-super-admin"
    # Users get admin.conf, as Kamaji's guides export it.
    exported = dev_secrets.outputs["tenants"]["tenant-a"]["kubeconfig"]
    assert yaml.safe_load(exported)["users"][0]["name"] == "kubernetes-admin"
    assert kubeconfig.server(exported) == "https://172.18.255.230:6443"


def test_stack_outputs(dev: harness.Render) -> None:
    assert set(dev.outputs) == {"managementKubeconfig", "tenants"}
    assert dev.outputs["tenants"]["tenant-a"] == {
        "kubeconfig": "[secret]",
        "endpoint": "https://172.18.255.230:6443",
        "kubernetesVersion": "v1.36.4",
        "namespace": "tenant-a",
        "workers": ["tenant-a-worker-0"],
        "gpus": {"tenant-a-worker-0": [{"model": "A100-80GB", "count": 1, "memoryMiB": 81920}]},
    }
    assert dev.outputs["tenants"]["tenant-b"]["endpoint"] == "https://172.18.255.219:6443"
    assert dev.outputs["tenants"]["tenant-b"]["gpus"] == {"tenant-b-worker-0": [{"model": "L4", "count": 2, "memoryMiB": 23034}]}


def test_vips_are_stable_when_tenants_are_added(dev: harness.Render) -> None:
    config = dev_config()
    config["tenants"].insert(0, {"name": "tenant-0"})
    config["tenants"].append({"name": "tenant-z"})
    endpoints = {name: t["endpoint"] for name, t in render_config(config).outputs["tenants"].items()}
    assert endpoints["tenant-a"] == dev.outputs["tenants"]["tenant-a"]["endpoint"]
    assert endpoints["tenant-b"] == dev.outputs["tenants"]["tenant-b"]["endpoint"]
    assert len(set(endpoints.values())) == 4


def test_a_tenant_without_workers_is_its_control_plane_only() -> None:
    # The pod network's operator and HAMi need a node; their releases would time out without one.
    config = dev_config()
    config["tenants"][1] = {"name": "tenant-b"}
    render = render_config(config)
    tenant_b = [r for r in render.resources if r["urn"].split("::")[-1].startswith("tenant-b") or "tenant-b" in r["name"]]
    assert {(r["type"], r["name"]) for r in tenant_b} == {
        ("gpu-tenancy:tenant:Tenant", "tenant-b"),
        ("gpu-tenancy:tenant:TenantControlPlane", "tenant-b"),
        ("kubernetes:core/v1:Namespace", "tenant-b-namespace"),
        (TCP, "tenant-b"),
        (SECRET, "tenant-b-admin-kubeconfig"),
        (K8S_PROVIDER, "tenant-b"),
    }
    assert render.outputs["tenants"]["tenant-b"]["workers"] == []
    assert render.outputs["tenants"]["tenant-b"]["endpoint"].startswith("https://")
    # The other tenant keeps everything.
    assert render.one(RELEASE, "tenant-a-hami") and render.one(RELEASE, "tenant-a-calico")


def test_what_lives_in_the_tenant_goes_with_its_tcp(dev: harness.Render) -> None:
    # Removing a tenant skips uninstalling Calico and HAMi (hook jobs, release timeouts) and
    # deleting RBAC and tokens; children inherit deletedWith from their component in the engine
    # (pulumi/docs#18681). The joins still run kubeadm reset: an SSH host outlives its tenant.
    for tenant in ("tenant-a", "tenant-b"):
        tcp = dev.one(TCP, tenant)["urn"]
        for kind in ("gpu-tenancy:tenant:TenantNetwork", "gpu-tenancy:tenant:Hami", "gpu-tenancy:worker:JoinPermissions"):
            assert dev.one(kind, tenant)["options"]["deletedWith"] == tcp
        assert dev.one(SECRET, f"{tenant}-worker-0-bootstrap-token")["options"]["deletedWith"] == tcp
        for command in dev.find("command:local:Command"):
            if command["name"].startswith(tenant):
                assert "deletedWith" not in command.get("options", {}), command["name"]


def test_a_tenants_control_plane_goes_with_the_kind_cluster_it_runs_in() -> None:
    # Destroy skips deleting the namespace, the TCP and a dedicated etcd in a cluster it deletes
    # anyway: no wait on Kamaji's finalizers or the etcd chart's teardown hook.
    config = dev_config()
    config["tenants"][1]["dataStore"] = "dedicated"
    render = render_config(config)
    cluster = render.one("command:local:Command", "gpu-tenancy-management-kind-cluster")["urn"]
    for tenant in ("tenant-a", "tenant-b"):
        assert render.one(TCP, tenant)["options"]["deletedWith"] == cluster
        assert render.one("kubernetes:core/v1:Namespace", f"{tenant}-namespace")["options"]["deletedWith"] == cluster
    assert render.one(RELEASE, "tenant-b-etcd")["options"]["deletedWith"] == cluster


def test_in_an_existing_cluster_a_tenants_control_plane_is_deleted_with_it() -> None:
    # The cluster stays: removing the tenant, or destroying the stack, must delete what it put there.
    config = dev_config()
    config["management"] = {"mode": "existing", "kubeconfig": MGMT_KUBECONFIG}
    config["network"] = {"pool": "172.18.255.200-172.18.255.250", "workerNetwork": "kind"}
    config["tenants"][1]["dataStore"] = "dedicated"
    render = render_config(config)
    for resource in (render.one(TCP, "tenant-b"), render.one("kubernetes:core/v1:Namespace", "tenant-b-namespace")):
        assert "deletedWith" not in resource.get("options", {})
    assert "deletedWith" not in render.one(RELEASE, "tenant-b-etcd").get("options", {})
