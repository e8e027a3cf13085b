"""HAMi per tenant: chart values, ordering after the joins, and the GPU quota."""

from __future__ import annotations

from tests.conftest import COMMAND, K8S_PROVIDER, RELEASE, dev_config, render_config
from tools import harness

QUOTA = "kubernetes:core/v1:ResourceQuota"


def test_hami_release(dev: harness.Render) -> None:
    release = dev.one(RELEASE, "tenant-a-hami")
    inputs = release["inputs"]
    assert (inputs["chart"], inputs["version"], inputs["namespace"]) == ("hami", "2.10.0", "kube-system")
    assert inputs["repositoryOpts"] == {"repo": "https://project-hami.github.io/HAMi/"}
    assert release["provider"] == dev.one(K8S_PROVIDER, "tenant-a")["urn"]
    assert release["provider"] != dev.one(K8S_PROVIDER, "gpu-tenancy-management")["urn"]


def test_hami_values(dev: harness.Render) -> None:
    values = dev.one(RELEASE, "tenant-b-hami")["inputs"]["values"]
    assert values["devicePlugin"] == {"enabled": False, "service": {"type": "ClusterIP"}}
    # Not the chart's 1.0.1, which exits on the chart's own device config from HAMi 2.9.0 on.
    # The chart's IfNotPresent stays: Always would fail a worker's restart offline (README: pin a digest).
    assert values["mockDevicePlugin"] == {"enabled": True, "image": {"tag": "latest"}}
    assert values["scheduler"]["kubeScheduler"]["image"] == {
        "registry": "registry.k8s.io",
        "repository": "kube-scheduler",
        "tag": "v1.36.4",
    }
    assert values["scheduler"]["nodeLockExpire"] == "2s"
    # The 2.9 and 2.10 schedulers ignore nodeLockExpire's environment variable; the flag wins.
    assert values["scheduler"]["extender"] == {"extraArgs": ["--debug", "-v=4", "--node-lock-timeout=2s"]}
    assert values["scheduler"]["service"] == {"type": "ClusterIP"}
    assert "overwriteEnv" not in values["scheduler"]  # no NVIDIA runtime on mock nodes


def test_mock_device_plugin_tag_from_config() -> None:
    config = dev_config()
    digest = "sha256:" + "0" * 64
    config["versions"] = {"mockDevicePlugin": f"latest@{digest}"}
    render = render_config(config)
    for tenant in ("tenant-a", "tenant-b"):
        values = render.one(RELEASE, f"{tenant}-hami")["inputs"]["values"]
        assert values["mockDevicePlugin"]["image"] == {"tag": f"latest@{digest}"}


def test_kube_scheduler_follows_the_tenant_version() -> None:
    config = dev_config()
    config["tenants"][0]["kubernetesVersion"] = "v1.35.7"
    values = render_config(config).one(RELEASE, "tenant-a-hami")["inputs"]["values"]
    assert values["scheduler"]["kubeScheduler"]["image"]["tag"] == "v1.35.7"


def test_hami_waits_for_the_tenants_joins_and_network(dev: harness.Render) -> None:
    hami = dev.one(RELEASE, "tenant-a-hami")
    assert dev.one(COMMAND, "tenant-a-worker-0-join")["urn"] in hami["dependencies"]
    assert dev.one(RELEASE, "tenant-a-calico")["urn"] in hami["dependencies"]
    # On nested nodes kube-proxy crash-loops until its override is in, and with it HAMi's Service.
    assert dev.one("kubernetes:apps/v1:DaemonSetPatch", "tenant-a-kube-proxy")["urn"] in hami["dependencies"]
    assert dev.one("kubernetes:core/v1:ConfigMapPatch", "tenant-a-kube-proxy-config")["urn"] in hami["dependencies"]
    assert not dev.waits_for(hami, dev.one(COMMAND, "tenant-b-worker-0-join"))


def test_quota_becomes_the_resource_quota_hami_enforces(dev: harness.Render) -> None:
    quota = dev.one(QUOTA, "tenant-a-gpu-quota")
    assert quota["inputs"]["metadata"] == {"name": "gpu-quota", "namespace": "default"}
    assert quota["inputs"]["spec"] == {"hard": {"limits.nvidia.com/gpumem": "81920", "limits.nvidia.com/gpucores": "100"}}
    assert quota["provider"] == dev.one(K8S_PROVIDER, "tenant-a")["urn"]
    assert dev.find(QUOTA, "tenant-b-gpu-quota") == []  # tenant-b declares no quota


def test_quota_in_its_own_namespace() -> None:
    config = dev_config()
    config["tenants"][1]["quota"] = {"gpumem": 40000, "gpucores": 150, "namespace": "ml"}
    render = render_config(config)
    quota = render.one(QUOTA, "tenant-b-gpu-quota")
    assert quota["inputs"]["metadata"] == {"name": "gpu-quota", "namespace": "ml"}
    namespace = render.one("kubernetes:core/v1:Namespace", "tenant-b-quota-namespace")
    assert namespace["inputs"]["metadata"]["name"] == "ml"
    # Stacks made before the rename keep their namespace: its old Pulumi name is an alias.
    assert namespace["options"]["aliases"] == ["tenant-b-ml"]
    assert namespace["urn"] in quota["dependencies"]
    # A namespace the quota leaves (renamed, quota lifted) keeps the pods in it.
    assert namespace["options"]["retainOnDelete"] is True
