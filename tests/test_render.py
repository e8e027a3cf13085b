"""The offline render: the harness, the CLI, secrets, dependencies, and config errors end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pulumi
import pytest

from tests.conftest import COMMAND, K8S_PROVIDER, MGMT_KUBECONFIG, PROJECT_DIR, RELEASE, TCP, dev_config, render_config
from tools import harness


def test_every_resource_has_the_documented_fields(dev: harness.Render) -> None:
    for resource in dev.resources:
        assert set(resource) >= {"urn", "type", "name", "parent", "provider", "dependencies", "inputs"}
        assert resource["urn"].startswith("urn:pulumi:dev::gpu-tenancy::")
    urns = {r["urn"] for r in dev.resources}
    for resource in dev.resources:
        assert set(resource["dependencies"]) <= urns, f"{resource['name']} waits for an unknown resource"
        if resource["parent"] and not resource["parent"].endswith("pulumi:pulumi:Stack::gpu-tenancy-dev"):
            assert resource["parent"] in urns


def test_dependencies_include_explicit_depends_on_and_input_flows(dev: harness.Render) -> None:
    kamaji = dev.one(RELEASE, "gpu-tenancy-management-kamaji")
    cert_manager = dev.one(RELEASE, "gpu-tenancy-management-cert-manager")
    assert cert_manager["urn"] in kamaji["dependencies"]  # depends_on
    network = dev.one(COMMAND, "gpu-tenancy-management-kind-network")
    tcp = dev.one(TCP, "tenant-a")
    assert network["urn"] in tcp["dependencies"]  # the VIP flows from the kind network's subnet


def test_secrets_are_masked_unless_asked(dev: harness.Render, dev_secrets: harness.Render) -> None:
    assert dev.outputs["managementKubeconfig"] == "[secret]"
    assert dev.outputs["tenants"]["tenant-a"]["kubeconfig"] == "[secret]"
    assert "BEGIN CERTIFICATE" not in json.dumps(dev.to_json())
    assert dev_secrets.outputs["managementKubeconfig"].startswith("apiVersion: v1")
    tenant = dev_secrets.outputs["tenants"]["tenant-a"]["kubeconfig"]
    assert "server: https://172.18.255.230:6443" in tenant


def test_provider_inputs_keep_the_kubeconfig_secret(dev: harness.Render) -> None:
    providers = dev.find(K8S_PROVIDER)
    assert len(providers) == 3  # the management cluster and two tenants
    for provider in providers:
        assert provider["inputs"]["kubeconfig"] == "[secret]"


def test_two_renders_of_one_config_are_identical(dev: harness.Render) -> None:
    again = harness.render_stack("dev")
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(dev.to_json(), sort_keys=True)


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
def test_echoing_inputs_renders_what_the_mocks_round_trip_renders(preview: bool) -> None:
    """Resources whose mock state is their inputs skip decoding and re-encoding them; nothing else changes."""
    with mock.patch.object(harness._Cloud, "computes", lambda *_: True):
        round_trip = harness.render_stack("dev", preview=preview, show_secrets=True)
    echoed = harness.render_stack("dev", preview=preview, show_secrets=True)
    assert json.dumps(echoed.to_json(), sort_keys=True) == json.dumps(round_trip.to_json(), sort_keys=True)


def test_the_harness_computes_plain_urns_as_the_sdk_does() -> None:
    parent = "urn:pulumi:dev::gpu-tenancy::gpu-tenancy:tenant:Tenant$gpu-tenancy:worker:WorkerJoin::tenant-a-worker-0"
    cases = [
        ("child", "pkg:module:Type", None, None, None),
        ("child", "pkg:module:Type", parent, None, None),
        ("child", "pkg:module:Type", None, "other-project", "other-stack"),
        ("child", "pkg:module:Type", "", None, None),
    ]

    def program() -> None:
        cases.append((pulumi.Output.from_input("child"), "pkg:module:Type", parent, None, None))  # the SDK's own path
        for index, case in enumerate(cases):
            pulumi.export(f"harness-{index}", harness._create_urn(*case))
            pulumi.export(f"sdk-{index}", harness._sdk_create_urn(*case))

    outputs = harness.render({}, stack="dev", program=program).outputs
    assert outputs["harness-1"] == parent.rsplit("::", 1)[0] + "$pkg:module:Type::child"
    for index in range(len(cases)):
        assert outputs[f"harness-{index}"] == outputs[f"sdk-{index}"], cases[index]


def test_a_config_error_is_a_render_error_with_the_key_path() -> None:
    config = dev_config()
    config["tenants"][0]["name"] = "Tenant_A"
    with pytest.raises(harness.RenderError) as caught:
        render_config(config)
    assert "tenants[0].name: 'Tenant_A' is not a DNS-1035 label" in str(caught.value)


def test_a_live_network_conflict_is_reported_before_any_tenant_exists() -> None:
    config = dev_config()
    config["tenants"][1]["serviceCidr"] = "172.18.0.0/24"
    with pytest.raises(harness.RenderError) as caught:
        render_config(config)
    assert "tenants[1].serviceCidr: 172.18.0.0/24 overlaps the node network 172.18.0.0/16" in str(caught.value)
    # Of the tenants, only what needs nothing from the network was registered before the check:
    # their namespaces and node-image pulls. No control plane, no worker container, no join.
    tenant_owned = {
        (r["type"].rsplit(":", 1)[-1], r["name"])
        for r in caught.value.registered
        if r["custom"] and r["name"].startswith(("tenant-a", "tenant-b"))
    }
    assert tenant_owned == {
        ("Namespace", "tenant-a-namespace"),
        ("Namespace", "tenant-b-namespace"),
        ("RemoteImage", "tenant-a-worker-0-image"),
        ("RemoteImage", "tenant-b-worker-0-image"),
    }


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.render", *args], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120, check=False
    )


def test_cli_prints_the_render_as_json() -> None:
    result = run_cli("--stack", "dev")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["stack"] == "dev"
    assert set(document) == {"stack", "resources", "outputs"}
    assert any(r["type"] == TCP for r in document["resources"])
    assert result.stderr == ""


def test_cli_exits_2_with_the_message_on_a_config_error(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.broken.yaml"
    stack.write_text("config:\n  gpu-tenancy:tenants:\n    - name: tenant-a\n      kubernetesVersion: v1.37.0\n")
    result = run_cli("--config", str(stack))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "tenants[0].kubernetesVersion: v1.37.0 is newer than Kamaji supports" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"config: {a: [\n", "cannot read"),
        (b"config:\n  x: \xff\n", "cannot read"),
        (b"config: [a]\n", "is not a stack file"),
        (b"- a\n", "is not a stack file"),
        (b"config:\n  gpu_tenancy:tenants: [{name: a}]\n", "gpu_tenancy:tenants: is not in the gpu-tenancy namespace"),
    ],
)
def test_cli_exits_2_on_a_file_that_is_no_stack_file(tmp_path: Path, content: bytes, expected: str) -> None:
    stack = tmp_path / "Pulumi.broken.yaml"
    stack.write_bytes(content)
    result = run_cli("--config", str(stack))
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_stack_files_are_read_as_the_pulumi_cli_reads_them(tmp_path: Path) -> None:
    # Go's yaml.v3: on/no/yes/off are strings, only true/false are booleans; a repeated key is an error.
    from gpu_tenancy.stack_file import read_stack_file  # noqa: PLC0415

    stack = tmp_path / "Pulumi.words.yaml"
    stack.write_text("config:\n  gpu-tenancy:tenants:\n    - name: on\n      quota: {gpumem: 0, gpucores: 0, namespace: no}\n")
    values, _ = read_stack_file(stack)
    assert values["gpu-tenancy:tenants"] == [{"name": "on", "quota": {"gpumem": 0, "gpucores": 0, "namespace": "no"}}]
    stack.write_text("config:\n  x:\n    a: true\n    b: False\n")
    assert read_stack_file(stack)[0]["gpu-tenancy:x"] == {"a": True, "b": False}
    stack.write_text("config:\n  x: {when: 2024-01-01, span: 1:30, merged: {<<: &m {p: 1, q: 2}, q: 3}, again: *m}\n")
    assert read_stack_file(stack)[0]["gpu-tenancy:x"] == {
        "when": "2024-01-01",
        "span": "1:30",
        "merged": {"p": 1, "q": 3},  # a merge key's values may be overridden
        "again": {"p": 1, "q": 2},
    }
    # Numbers in an object are float64 to yaml.v3, and Go's JSON writes whole ones without a fraction.
    # yaml.v3 drops underscores before it reads a number that starts with a digit or sign, not one that starts with '.'.
    stack.write_text(
        "config:\n  x: {a: 2.0, b: 1e4, c: 2.5, d: 1_000.5, e: 1., f: -3E2, g: 1e21, h: 7, i: ._5, j: .5}\n  y: 2.0\n"
    )
    values = read_stack_file(stack)[0]
    expected = {"a": 2, "b": 10000, "c": 2.5, "d": 1000.5, "e": 1, "f": -300, "g": 1e21, "h": 7, "i": "._5", "j": 0.5}
    assert values["gpu-tenancy:x"] == expected
    assert [type(values["gpu-tenancy:x"][key]) for key in "abg"] == [int, int, float]
    assert values["gpu-tenancy:y"] == 2.0  # a scalar key is the text as written, which the CLI hands over as such
    stack.write_text("config:\n  gpu-tenancy:tenants: [{name: a, workers: [{name: w1, gpus: [{model: L4, count: 2.0}]}]}]\n")
    assert run_cli("--config", str(stack)).returncode == 0  # as pulumi up would take it
    stack.write_text("config:\n  ? [a]\n  : 1\n")  # an unhashable key: a message, not a traceback
    assert run_cli("--config", str(stack)).returncode == 2
    stack.write_text("config:\n  gpu-tenancy:tenants: [{name: a}]\n  gpu-tenancy:tenants: [{name: b}]\n")
    result = run_cli("--config", str(stack))
    assert result.returncode == 2
    assert "found the key 'gpu-tenancy:tenants' twice" in result.stderr


def test_the_program_refuses_a_misspelt_namespace_too() -> None:
    # The engine hands the program every key; a misspelt namespace is not silently ignored.
    with pytest.raises(harness.RenderError, match="did you mean gpu-tenancy:tenants"):
        harness.render({"gpu_tenancy:tenants": json.dumps([{"name": "a"}])})


def test_the_program_refuses_a_key_given_twice_in_json_text() -> None:
    # `pulumi config set gpu-tenancy:network '{"pool": ..., "pool": ...}'`: neither may silently win.
    pools = '{"pool": "172.18.255.200-172.18.255.250", "pool": "172.18.255.200-172.18.255.201"}'
    with pytest.raises(harness.RenderError, match=r"network: gives the key 'pool' twice in its JSON; keep one"):
        harness.render({"gpu-tenancy:network": pools})
    tenants = json.dumps([{"name": "tenant-a"}]).replace('"tenant-a"', '"tenant-a", "name": "tenant-b"')
    with pytest.raises(harness.RenderError, match=r"tenants: gives the key 'name' twice in its JSON; keep one"):
        harness.render({"gpu-tenancy:tenants": tenants})


def test_cli_exits_2_on_a_missing_file(tmp_path: Path) -> None:
    result = run_cli("--config", str(tmp_path / "Pulumi.none.yaml"))
    assert result.returncode == 2
    assert "no such stack config file" in result.stderr


def test_every_helm_release_waits_long_enough_for_a_first_install(dev: harness.Render) -> None:
    # Helm's default 300 s: cert-manager and MetalLB pull their images together right after kind
    # create, and a laptop's network can take longer.
    releases = dev.find("kubernetes:helm.sh/v3:Release")
    assert len(releases) == 10  # cert-manager, MetalLB, Kamaji and its CRDs; per tenant two Calico charts and HAMi
    assert all(release["inputs"]["timeout"] == 900 for release in releases), [r["name"] for r in releases]


def test_every_helm_release_creates_its_namespace(dev: harness.Render) -> None:
    # cert-manager, metallb-system, kamaji-system and tigera-operator exist nowhere before their chart.
    for release in dev.find("kubernetes:helm.sh/v3:Release"):
        assert release["inputs"]["createNamespace"] is True, release["name"]


def test_errors_stay_readable_when_a_path_secret_makes_the_whole_key_secret() -> None:
    # `pulumi config set --secret --path 'tenants[0].workers[0].ssh.privateKey'` makes all of
    # `tenants` a secret for the program; only the secret fields themselves are never quoted.
    worker = {"name": "w", "ssh": {"host": "10.0.0.11", "user": "ubuntu", "privateKey": 42}}
    config = {
        "gpu-tenancy:management": json.dumps({"mode": "existing", "kubeconfig": MGMT_KUBECONFIG}),
        "gpu-tenancy:tenants": json.dumps([{"name": "Team_A", "workers": [worker]}]),
    }
    with pytest.raises(harness.RenderError) as caught:
        harness.render(config, secret_keys=["gpu-tenancy:tenants", "gpu-tenancy:management"])
    assert "tenants[0].name: 'Team_A' is not a DNS-1035 label" in str(caught.value)
    assert "tenants[0].workers[0].ssh.privateKey: must be text, not a number or boolean; quote it" in str(caught.value)
    assert "42" not in str(caught.value)


def test_an_object_set_as_one_secret_with_path_is_not_echoed() -> None:
    # `pulumi config set --secret --path 'gpu-tenancy:tenants[0].workers[0]' "$(cat worker.json)"`
    # stores the worker, its SSH key with it, as one secret text.
    worker = {"name": "w", "ssh": {"host": "10.0.0.11", "user": "ubuntu", "privateKey": "TOPSECRET"}}
    config = {
        "gpu-tenancy:management": json.dumps({"mode": "existing", "kubeconfig": MGMT_KUBECONFIG}),
        "gpu-tenancy:tenants": json.dumps([{"name": "a", "workers": [json.dumps(worker)]}]),
    }
    with pytest.raises(harness.RenderError) as caught:
        harness.render(config, secret_keys=["gpu-tenancy:tenants", "gpu-tenancy:management"])
    assert str(caught.value).endswith("tenants[0].workers[0]: must be an object of keys, not text")
    assert "TOPSECRET" not in str(caught.value)
