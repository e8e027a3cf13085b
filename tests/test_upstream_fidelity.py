"""Everything emitted matches upstream: CRD schemas, the v1.36 API in strict mode, chart values."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from tests import fidelity
from tests.conftest import RELEASE, TCP, dev_config, render_config
from tools import harness, mock_cloud

CUSTOM_RESOURCES = {
    TCP: "kamaji/tenantcontrolplanes.yaml",
    "kubernetes:metallb.io/v1beta1:IPAddressPool": "metallb-v0.16.1/metallb.io_ipaddresspools.yaml",
    "kubernetes:metallb.io/v1beta1:L2Advertisement": "metallb-v0.16.1/metallb.io_l2advertisements.yaml",
}
CHART_VALUES = {
    "cert-manager": "cert-manager-v1.21/values.yaml",
    "metallb": "metallb-v0.16.1/values.yaml",
    "kamaji": "kamaji/values.yaml",
    "hami": "hami/values.yaml",
}
BUILTIN_PREFIXES = ("kubernetes:core/", "kubernetes:apps/", "kubernetes:rbac.authorization.k8s.io/")


@pytest.fixture(scope="module")
def variant(dev_secrets: harness.Render) -> harness.Render:
    """A config exercising the optional fields too: pinned VIP and pool, quota namespace, versions,
    and a rootless docker engine (kind's rootless kubelet and kube-proxy settings)."""
    config = dev_config()
    config["network"] = {"pool": "172.18.255.200-172.18.255.250"}
    config["versions"] = {"konnectivity": "v0.35.0"}
    config["tenants"][1].update(vip="172.18.255.201", quota={"gpumem": 46068, "gpucores": 200, "namespace": "ml"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mock_cloud, "DOCKER_INFO", '{"driver":"fuse-overlayfs","securityOptions":["name=rootless"]}')
        render = render_config(config, show_secrets=True)
    patches = render.one(TCP, "tenant-a")["inputs"]["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    assert {"op": "add", "path": "/featureGates", "value": {"KubeletInUserNamespace": True}} in patches
    return render


@pytest.mark.parametrize("type_", sorted(CUSTOM_RESOURCES))
def test_custom_resources_validate_against_their_crds(dev_secrets: harness.Render, variant: harness.Render, type_: str) -> None:
    for render in (dev_secrets, variant):
        found = render.find(type_)
        assert found, f"no {type_} rendered"
        for resource in found:
            fidelity.validate_custom_resource(fidelity.kubernetes_object(resource), CUSTOM_RESOURCES[type_])


def test_the_crd_check_catches_a_misspelt_field(dev_secrets: harness.Render) -> None:
    tcp = fidelity.kubernetes_object(dev_secrets.one(TCP, "tenant-a"))
    tcp["spec"]["networkProfile"]["adress"] = tcp["spec"]["networkProfile"].pop("address")
    with pytest.raises(jsonschema.ValidationError, match="adress"):
        fidelity.validate_custom_resource(tcp, CUSTOM_RESOURCES[TCP])


def builtins(render: harness.Render) -> list[dict]:
    return [r for r in render.resources if r["type"].startswith(BUILTIN_PREFIXES) and r["inputs"] and "read" not in r]


def test_builtin_objects_validate_against_the_v1_36_api_in_strict_mode(
    dev_secrets: harness.Render, variant: harness.Render
) -> None:
    checked = set()
    for render in (dev_secrets, variant):
        for resource in builtins(render):
            obj = fidelity.kubernetes_object(resource)
            if resource["type"].endswith("Patch"):
                fidelity.validate_patch(obj)
            else:
                fidelity.validate_builtin(obj)
            checked.add(resource["type"])
    assert checked >= {
        "kubernetes:core/v1:Namespace",
        "kubernetes:core/v1:Secret",
        "kubernetes:core/v1:ResourceQuota",
        "kubernetes:core/v1:ConfigMapPatch",
        "kubernetes:apps/v1:DaemonSetPatch",
        "kubernetes:rbac.authorization.k8s.io/v1:Role",
        "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
    }


def test_the_strict_api_check_catches_unknown_fields(dev_secrets: harness.Render) -> None:
    patch = fidelity.kubernetes_object(dev_secrets.one("kubernetes:apps/v1:DaemonSetPatch", "tenant-a-kube-proxy"))
    patch["spec"]["template"]["spec"]["containers"][0]["argz"] = patch["spec"]["template"]["spec"]["containers"][0].pop("args")
    with pytest.raises(jsonschema.ValidationError):
        fidelity.validate_patch(patch)


@pytest.mark.parametrize("chart", sorted(CHART_VALUES))
def test_every_helm_value_we_set_exists_in_the_chart(dev: harness.Render, chart: str) -> None:
    defaults = fidelity.chart_values(CHART_VALUES[chart])
    releases = [r for r in dev.find(RELEASE) if r["inputs"]["chart"] == chart]
    assert releases
    for release in releases:
        assert fidelity.unknown_value_keys(release["inputs"]["values"], defaults) == [], release["name"]
        for values_file in release["inputs"].get("valueYamlFiles", []):
            assert fidelity.unknown_value_keys(yaml.safe_load(values_file["text"]), defaults) == [], release["name"]


def test_the_values_check_catches_a_stale_key(dev: harness.Render) -> None:
    values = dev.one(RELEASE, "tenant-a-hami")["inputs"]["values"]
    stale = {**values, "scheduler": {**values["scheduler"], "kubeScheduler": {"imageTag": "v1.36.4"}}}
    assert fidelity.unknown_value_keys(stale, fidelity.chart_values(CHART_VALUES["hami"])) == ["scheduler.kubeScheduler.imageTag"]


@pytest.mark.parametrize(
    ("chart", "schema"),
    [("cert-manager", "cert-manager-v1.21/values.schema.json"), ("metallb", "metallb-v0.16.1/values.schema.json")],
)
def test_values_validate_against_the_charts_values_schema(dev: harness.Render, chart: str, schema: str) -> None:
    document = json.loads((fidelity.require_schemas() / schema).read_text())
    releases = [release for release in dev.find(RELEASE) if release["inputs"]["chart"] == chart]
    assert releases
    for release in releases:
        merged = fidelity.merged_values(fidelity.chart_values(CHART_VALUES[chart]), release["inputs"]["values"])
        jsonschema.Draft7Validator(document).validate(merged)


def test_admission_controllers_are_kamajis_defaults_plus_node_restriction() -> None:
    from components.tenant_control_plane import ADMISSION_CONTROLLERS  # noqa: PLC0415

    schema = fidelity.crd_schema("kamaji/tenantcontrolplanes.yaml", "v1alpha1")
    field = schema["properties"]["spec"]["properties"]["kubernetes"]["properties"]["admissionControllers"]
    assert set(ADMISSION_CONTROLLERS) == {*field["default"], "NodeRestriction"}
    assert set(ADMISSION_CONTROLLERS) <= set(field["items"]["enum"])
