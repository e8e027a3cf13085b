"""The management cluster: kind created and deleted by the program, and its services."""

from __future__ import annotations

import yaml

from components import kind_cluster
from gpu_tenancy import versions
from tests.conftest import COMMAND, K8S_PROVIDER, RELEASE, dev_config, render_config
from tools import harness

POOL = "kubernetes:metallb.io/v1beta1:IPAddressPool"
L2 = "kubernetes:metallb.io/v1beta1:L2Advertisement"


def test_kind_cluster_is_created_from_config_on_stdin_and_deleted_on_destroy(dev: harness.Render) -> None:
    kind = dev.one(COMMAND, "gpu-tenancy-management-kind-cluster")["inputs"]
    # The owner (a UUID kept in the stack's state) marks the cluster as this stack's, so destroy
    # never deletes someone else's; only a new name replaces the cluster (a new node image is an
    # update that the create script refuses: tests/test_kind_scripts.py).
    owner = dev.one("random:index/randomUuid:RandomUuid", "gpu-tenancy-management-kind-owner")
    assert owner["urn"] in dev.one(COMMAND, "gpu-tenancy-management-kind-cluster")["dependencies"]
    assert set(kind["environment"]) == {"KIND_CLUSTER", "KIND_OWNER", "KIND_NODE_IMAGE"}
    assert kind["environment"]["KIND_CLUSTER"] == "kamaji"
    assert kind["environment"]["KIND_NODE_IMAGE"] == versions.DEFAULT_NODE_IMAGE
    assert len(kind["environment"]["KIND_OWNER"]) == 36
    options = dev.one(COMMAND, "gpu-tenancy-management-kind-cluster")["options"]
    assert options["replaceOnChanges"] == ["environment.KIND_CLUSTER", "triggers[*]"]
    # Created first, the replacement would adopt the old cluster (same owner) and the old one's
    # delete would then remove it from under the new state.
    assert options["deleteBeforeReplace"] is True
    # Its stdout is the cluster-admin kubeconfig: encrypted in the stack's state, not only masked.
    assert options["additionalSecretOutputs"] == ["stdout"]
    # --wait: the node is Ready before the charts' pods need scheduling.
    assert 'kind create cluster --name "$KIND_CLUSTER" --config - --kubeconfig "$scratch/kubeconfig" --wait 5m' in kind["create"]
    assert 'kind delete cluster --name "$KIND_CLUSTER"' in kind["delete"]
    config = yaml.safe_load(kind["stdin"])
    assert config == {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "nodes": [{"role": "control-plane", "image": versions.DEFAULT_NODE_IMAGE}],
    }
    # The user's kubeconfig is never written: kind gets a throwaway one.
    assert '--kubeconfig "$scratch/kubeconfig"' in kind["create"]


def test_management_node_image_and_name_come_from_config() -> None:
    config = dev_config()
    config["management"] = {"name": "mgmt", "nodeImage": "kindest/node:v1.35.7@sha256:" + "a" * 64}
    render = render_config(config)
    kind = render.one(COMMAND, "gpu-tenancy-management-kind-cluster")["inputs"]
    assert kind["environment"]["KIND_CLUSTER"] == "mgmt"
    assert yaml.safe_load(kind["stdin"])["nodes"][0]["image"].startswith("kindest/node:v1.35.7@sha256:")


def test_management_kubeconfig_is_a_secret_and_feeds_the_provider(dev: harness.Render) -> None:
    assert dev.outputs["managementKubeconfig"] == "[secret]"
    provider = dev.one(K8S_PROVIDER, "gpu-tenancy-management")
    kind = dev.one(COMMAND, "gpu-tenancy-management-kind-cluster")
    assert kind["urn"] in provider["dependencies"]
    assert provider["inputs"]["kubeconfig"] == "[secret]"
    # Opt-in per run (PULUMI_K8S_DELETE_UNREACHABLE): a refresh with Docker stopped must not forget the cluster.
    assert "deleteUnreachable" not in provider["inputs"]
    # The kind command's id, not the kubeconfig, says when the cluster is a new one: an update of
    # the command (its stdout unknown in a preview) must not preview as replacing everything on it.
    assert provider["inputs"]["clusterIdentifier"] == "gpu-tenancy-management-kind-cluster-id"


def test_the_kind_subnet_is_read_after_kind_runs(dev: harness.Render) -> None:
    network = dev.one(COMMAND, "gpu-tenancy-management-kind-network")
    kind = dev.one(COMMAND, "gpu-tenancy-management-kind-cluster")
    assert network["inputs"]["create"] == kind_cluster._INSPECT_NETWORK
    assert kind["urn"] in network["dependencies"]
    # The route check opens the API port of this stack's own kind node (tests/test_kind_scripts.py).
    assert network["inputs"]["environment"] == {"KIND_CLUSTER": kind["inputs"]["environment"]["KIND_CLUSTER"]}


def releases(render: harness.Render) -> dict[str, dict]:
    return {r["inputs"]["name"]: r for r in render.find(RELEASE) if r["name"].startswith("gpu-tenancy-management-")}


def test_management_releases_are_pinned_upstream_charts(dev: harness.Render) -> None:
    found = {name: r["inputs"] for name, r in releases(dev).items()}
    assert {name: (i["chart"], i["version"], i["repositoryOpts"]["repo"], i["namespace"]) for name, i in found.items()} == {
        "cert-manager": ("cert-manager", "v1.21.2", "https://charts.jetstack.io", "cert-manager"),
        "metallb": ("metallb", "0.16.1", "https://metallb.github.io/metallb", "metallb-system"),
        "kamaji-crds": ("kamaji-crds", "0.0.0+latest", "https://clastix.github.io/charts", "kamaji-system"),
        "kamaji": ("kamaji", "0.0.0+latest", "https://clastix.github.io/charts", "kamaji-system"),
    }
    assert found["cert-manager"]["values"] == {"crds": {"enabled": True}}
    # Kamaji's kind guide installs with `resources: null`; only a values file carries the null.
    # No telemetry to Kamaji's maintainers unless asked (kamaji.md: on by default).
    assert found["kamaji"]["values"] == {"telemetry": {"disabled": True}}
    assert found["kamaji"]["valueYamlFiles"] == [{"text": "resources: null\n"}]
    assert "allowNullValues" not in found["kamaji"]
    assert found["kamaji"]["timeout"] == 900  # a first install pulls Kamaji and starts kamaji-etcd
    # Helm never upgrades a chart's crds/: Kamaji's CRDs come from its CRD-only chart, as templates
    # every upgrade applies (its defaults are this release's names), adopting those an earlier
    # install made from crds/.
    assert found["kamaji"]["skipCrds"] is True
    assert found["kamaji-crds"]["values"] == {}
    assert found["kamaji-crds"]["takeOwnership"] is True
    assert "skipCrds" not in found["kamaji-crds"]
    # kind's one node is a control-plane node; MetalLB must announce the VIPs from it.
    assert found["metallb"]["values"] == {"speaker": {"ignoreExcludeLB": True}}
    for release in dev.find(RELEASE):
        assert release["provider"] == dev.one(K8S_PROVIDER, "gpu-tenancy-management")["urn"] or release["name"].startswith(
            "tenant-"
        )


def test_versions_come_from_config() -> None:
    config = dev_config()
    config["versions"] = {"certManager": "v1.21.1", "metallb": "v0.16.0", "kamaji": "26.8.6-edge"}
    found = {name: r["inputs"]["version"] for name, r in releases(render_config(config)).items()}
    assert found == {"cert-manager": "v1.21.1", "metallb": "0.16.0", "kamaji": "26.8.6-edge"}


def test_a_numbered_kamaji_chart_keeps_its_crds_from_the_chart() -> None:
    # The CRD-only chart is published as 0.0.0+latest only: a pinned old chart brings its own.
    config = dev_config()
    config["versions"] = {"kamaji": "0.4.2"}
    found = releases(render_config(config))
    assert "kamaji-crds" not in found
    assert "skipCrds" not in found["kamaji"]["inputs"] and found["kamaji"]["dependencies"] == [found["cert-manager"]["urn"]]


def test_services_are_ordered_by_real_dependencies_only(dev: harness.Render) -> None:
    found = releases(dev)
    pool, l2 = dev.one(POOL), dev.one(L2)
    assert found["cert-manager"]["urn"] in found["kamaji"]["dependencies"]  # webhook and etcd certificates
    assert found["kamaji-crds"]["urn"] in found["kamaji"]["dependencies"]  # the controller watches them
    assert not dev.waits_for(found["metallb"], found["cert-manager"])
    assert not dev.waits_for(found["cert-manager"], found["metallb"])
    assert not dev.waits_for(found["kamaji"], found["metallb"])
    for advertised in (pool, l2):
        assert found["metallb"]["urn"] in advertised["dependencies"]  # MetalLB's validating webhook
        assert not dev.waits_for(advertised, found["kamaji"])


def test_pool_is_derived_from_the_kind_network(dev: harness.Render) -> None:
    pool = dev.one(POOL)
    assert pool["inputs"]["metadata"] == {"name": "gpu-tenancy", "namespace": "metallb-system"}
    # Only the TCPs, which name their VIPs, get addresses from the pool.
    assert pool["inputs"]["spec"] == {"addresses": ["172.18.255.200-172.18.255.250"], "autoAssign": False}
    assert dev.one(COMMAND, "gpu-tenancy-management-kind-network")["urn"] in pool["dependencies"]
    assert dev.one(L2)["inputs"]["spec"] == {"ipAddressPools": ["gpu-tenancy"]}


def test_a_pinned_pool_wins() -> None:
    config = dev_config()
    config["network"] = {"pool": "172.18.200.10-172.18.200.20"}
    render = render_config(config)
    assert render.one(POOL)["inputs"]["spec"]["addresses"] == ["172.18.200.10-172.18.200.20"]
    endpoints = {name: t["endpoint"] for name, t in render.outputs["tenants"].items()}
    assert all(e.startswith("https://172.18.200.") for e in endpoints.values())


def test_kind_takes_the_management_services_along_on_destroy(dev: harness.Render) -> None:
    # Uninstalling them first could hang on Kamaji's DataStore finalizer and fails on a cluster
    # already gone; `kind delete cluster` removes them anyway.
    retained = {r["name"] for r in dev.resources if r.get("options", {}).get("retainOnDelete")}
    assert retained == {
        "gpu-tenancy-management-cert-manager",
        "gpu-tenancy-management-metallb",
        "gpu-tenancy-management-kamaji",
        "gpu-tenancy-management-kamaji-crds",
        "gpu-tenancy-management-address-pool",
        "gpu-tenancy-management-l2-advertisement",
    }
