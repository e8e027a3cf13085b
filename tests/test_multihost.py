"""Beyond one host: an existing management cluster, SSH workers, real NVIDIA GPUs, dedicated datastores."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.ssh_worker_machine import _CLEAN_UP, _PREPARE
from gpu_tenancy import kubeadm
from gpu_tenancy.config import ConfigError, StackConfig
from tests import fidelity
from tests.conftest import (
    COMMAND,
    CONTAINER,
    K8S_PROVIDER,
    MGMT_KUBECONFIG,
    PROJECT_DIR,
    RELEASE,
    SSH_KEY,
    TCP,
    render_config,
)
from tests.shell import assert_valid_machine_script, executable
from tools import harness

REMOTE = "command:remote:Command"
POOL = "kubernetes:metallb.io/v1beta1:IPAddressPool"


def ssh_worker(name: str, host: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "ssh": {"host": host, "user": "ubuntu", "privateKey": SSH_KEY}, **extra}


def existing(pool: str | None = "10.0.100.10-10.0.100.50", **tenant: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "management": {"mode": "existing", "kubeconfig": MGMT_KUBECONFIG},
        "tenants": [
            {
                "name": "prod-a",
                "gpuMode": "nvidia",
                "dataStore": "dedicated",
                "workers": [ssh_worker("gpu-host-1", "10.0.0.11", gpus=[{"model": "H100-80GB", "count": 8}])],
                **tenant,
            }
        ],
    }
    if pool is not None:
        config["network"] = {"pool": pool}
    return config


@pytest.fixture(scope="module")
def multihost() -> harness.Render:
    # Its secure values are placeholders, so showing them reveals nothing.
    return harness.render_file(PROJECT_DIR / "Pulumi.example-multihost.yaml", show_secrets=True)


@pytest.fixture(scope="module")
def prod() -> harness.Render:
    return render_config(existing(), show_secrets=True)


# --- management.mode: existing ------------------------------------------------------------------


def test_existing_management_cluster_has_no_kind(prod: harness.Render) -> None:
    assert [r for r in prod.find(COMMAND) if "kind" in r["name"]] == []
    provider = prod.one(K8S_PROVIDER, "gpu-tenancy-management")
    assert provider["inputs"]["kubeconfig"] == MGMT_KUBECONFIG
    assert render_config(existing()).one(K8S_PROVIDER, "gpu-tenancy-management")["inputs"]["kubeconfig"] == "[secret]"
    assert render_config(existing()).outputs["managementKubeconfig"] == "[secret]"
    charts = {r["inputs"]["chart"]: r for r in prod.find(RELEASE) if r["name"].startswith("gpu-tenancy-management-")}
    assert set(charts) == {"cert-manager", "metallb", "kamaji-crds", "kamaji"}
    for release in charts.values():
        assert release["provider"] == provider["urn"]
    # The user's cluster outlives the stack: what the program installed there is uninstalled.
    assert [r["name"] for r in prod.resources if r.get("options", {}).get("retainOnDelete")] == []


def test_existing_cluster_may_keep_its_own_cert_manager() -> None:
    config = existing()
    config["management"]["installCertManager"] = False
    render = render_config(config)
    charts = {r["inputs"]["chart"] for r in render.find(RELEASE) if r["name"].startswith("gpu-tenancy-management-")}
    assert charts == {"metallb", "kamaji-crds", "kamaji"}
    assert render.one(RELEASE, "gpu-tenancy-management-kamaji")["dependencies"] == [
        render.one(RELEASE, "gpu-tenancy-management-kamaji-crds")["urn"]
    ]


def test_installing_no_cert_manager_needs_an_existing_cluster() -> None:
    with pytest.raises(
        harness.RenderError, match=r"management.installCertManager: can be false only with management.mode existing"
    ):
        render_config({"management": {"installCertManager": False}, "tenants": [{"name": "a"}]})


def test_metallb_namespace_allows_its_privileged_speaker_on_an_existing_cluster(
    prod: harness.Render, dev: harness.Render
) -> None:
    # An existing cluster may default to a restricted Pod Security level; kind enforces none.
    namespace = prod.one("kubernetes:core/v1:Namespace", "gpu-tenancy-management-metallb-namespace")
    assert namespace["inputs"]["metadata"] == {
        "name": "metallb-system",
        "labels": {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")},
    }
    assert namespace["urn"] in prod.one(RELEASE, "gpu-tenancy-management-metallb")["dependencies"]
    assert dev.find("kubernetes:core/v1:Namespace", "gpu-tenancy-management-metallb-namespace") == []


def test_existing_cluster_with_a_pool_gets_metallb_and_planned_vips(prod: harness.Render) -> None:
    assert prod.one(POOL)["inputs"]["spec"]["addresses"] == ["10.0.100.10-10.0.100.50"]
    address = prod.one(TCP, "prod-a")["inputs"]["spec"]["networkProfile"]["address"]
    assert address.startswith("10.0.100.")
    assert prod.outputs["tenants"]["prod-a"]["endpoint"] == f"https://{address}:6443"
    # Which nodes announce is the cluster operator's choice (the exclude-from-external-load-balancers label).
    (metallb,) = [r for r in prod.find(RELEASE) if r["inputs"]["chart"] == "metallb"]
    assert metallb["inputs"]["values"] == {}


def test_vips_are_known_in_a_preview_when_the_pool_is_configured() -> None:
    # No VIP pinned: the address is planned from the configured pool, which needs nothing live.
    preview = render_config(existing(), preview=True)
    address = preview.one(TCP, "prod-a")["inputs"]["spec"]["networkProfile"]["address"]
    assert address == render_config(existing()).one(TCP, "prod-a")["inputs"]["spec"]["networkProfile"]["address"]
    assert address.startswith("10.0.100.")


def test_an_existing_cluster_of_control_planes_only_announces_from_them() -> None:
    # kubeadm labels control-plane nodes exclude-from-external-load-balancers: on a single kubeadm
    # node MetalLB's speaker would stay silent and nothing would answer for the VIPs.
    config = existing()
    config["network"]["announceFromControlPlanes"] = True
    (metallb,) = [r for r in render_config(config).find(RELEASE) if r["inputs"]["chart"] == "metallb"]
    assert metallb["inputs"]["values"] == {"speaker": {"ignoreExcludeLB": True}}


def test_announcing_from_control_planes_needs_the_programs_metallb() -> None:
    config = existing(pool=None)
    config["network"] = {"announceFromControlPlanes": True}
    assert "needs network.pool" in problems(config)["network.announceFromControlPlanes"]


def test_existing_cluster_without_a_pool_uses_its_own_load_balancer() -> None:
    render = render_config(existing(pool=None))
    assert render.find(POOL) == [] and [r for r in render.find(RELEASE) if r["inputs"]["chart"] == "metallb"] == []
    spec = render.one(TCP, "prod-a")["inputs"]["spec"]
    assert spec["controlPlane"]["service"]["serviceType"] == "LoadBalancer"
    assert "address" not in spec["networkProfile"]
    assert "annotations" not in spec["controlPlane"]["service"]["additionalMetadata"]
    # The endpoint is whatever the LoadBalancer gave, as Kamaji reports it in the TCP's status.
    endpoint = render.outputs["tenants"]["prod-a"]["endpoint"]
    assert endpoint.startswith("https://203.0.113.") and endpoint.endswith(":6443")
    join = render_config(existing(pool=None), show_secrets=True).one(REMOTE, "gpu-host-1-join")
    assert join["inputs"]["triggers"][0]["JOIN_ENDPOINT"] == endpoint.removeprefix("https://")


def test_a_pinned_vip_without_a_pool() -> None:
    spec = render_config(existing(pool=None, vip="192.0.2.10")).one(TCP, "prod-a")["inputs"]["spec"]
    assert spec["networkProfile"]["address"] == "192.0.2.10"


def mock_mode() -> dict[str, Any]:
    """The existing-cluster stack under gpuMode mock, with a node small enough for the mock plugin."""
    config = existing(gpuMode="mock")
    config["tenants"][0]["workers"][0]["gpus"] = [{"model": "H100-80GB", "count": 1}]
    return config


def test_docker_workers_with_an_existing_cluster_need_a_worker_network() -> None:
    config = mock_mode()
    config["tenants"].append({"name": "lab", "workers": [{"name": "docker-0"}]})
    with pytest.raises(harness.RenderError, match=r"tenants\[1\]\.workers\[0\]: is a docker worker \(no ssh\)"):
        render_config(config)
    config["network"]["workerNetwork"] = "lab-net"
    container = render_config(config).one(CONTAINER, "docker-0")
    assert container["inputs"]["networksAdvanced"] == [{"name": "lab-net", "aliases": ["docker-0"]}]


def test_a_tenant_does_not_mix_docker_workers_and_ssh_hosts() -> None:
    # Kubelet and kube-proxy settings are per tenant; kind's nested-node ones would reach real hosts.
    config = mock_mode()
    config["network"]["workerNetwork"] = "lab-net"
    config["tenants"][0]["workers"].append({"name": "docker-0"})
    with pytest.raises(harness.RenderError, match=r"tenants\[0\]\.workers: mix docker workers and ssh hosts"):
        render_config(config)


# --- SSH workers ------------------------------------------------------------------------------------


def test_ssh_worker_is_prepared_over_ssh(prod: harness.Render) -> None:
    assert prod.find("gpu-tenancy:worker:DockerHost") == []  # no docker worker, no docker engine asked
    prepare = prod.one(REMOTE, "gpu-host-1-prepare")["inputs"]
    connection = prepare["connection"]
    assert {key: connection[key] for key in ("host", "port", "user", "privateKey")} == {
        "host": "10.0.0.11",
        "port": 22,
        "user": "ubuntu",
        "privateKey": SSH_KEY,
    }
    assert prepare["create"] == "sudo -n sh -s"
    script = prepare["stdin"]
    assert "KUBERNETES_VERSION=v1.36.4\n" in script and "KUBERNETES_MINOR=v1.36\n" in script
    for step in (
        "modprobe br_netfilter",
        "net.ipv4.ip_forward = 1",
        "swapoff -a",
        # Swap units fstab does not list stay off at boot: masked, or disabled when the host owns the file.
        'systemctl mask "$unit" >/dev/null 2>&1 || systemctl disable "$unit" >/dev/null\ndone',
        "SystemdCgroup = true",
        "apt-mark hold kubelet kubeadm kubectl",
        'repository="$PACKAGE_REPOSITORY/$KUBERNETES_MINOR/deb/"',
        "apt-get -o DPkg::Lock::Timeout=600",  # unattended-upgrades on a fresh host
    ):
        assert step in script, step
    assert "\napt-get install" not in script  # every install waits for the dpkg lock
    assert "PACKAGE_REPOSITORY=https://pkgs.k8s.io/core:/stable:\n" in script
    assert "kubeadm reset --force" in prepare["delete"] and "/etc/cni/net.d" in prepare["delete"]
    # Only kube-proxy's and Calico's iptables rules go; the host's firewall (and SSH) stays.
    assert '"$table-save" | grep -v -e KUBE- -e "cali[-:]" | "$table-restore"' in prepare["delete"]
    assert "for table in iptables ip6tables" in prepare["delete"]
    assert "iptables -F" not in prepare["delete"] and "iptables -X" not in prepare["delete"]


def test_an_ssh_host_gets_a_new_version_only_once_its_control_plane_runs_it(multihost: harness.Render) -> None:
    # kubeadm's upgrade order: the preparation installs the new kubelet package, which a reboot or
    # a crash would start before `kubeadm upgrade node`; a kubelet must not be newer than its API
    # server, nor stay so when the control plane's upgrade fails.
    prepare = multihost.one(REMOTE, "gpu-host-3-prepare")
    assert multihost.one(TCP, "research")["urn"] in prepare["dependencies"]
    assert not multihost.waits_for(prepare, multihost.one(TCP, "prod-a"))


def test_ssh_private_key_is_a_secret() -> None:
    render = render_config(existing())
    # A connection carrying a secret is secret as a whole in state.
    assert render.one(REMOTE, "gpu-host-1-prepare")["inputs"]["connection"] == "[secret]"


def test_ssh_worker_joins_with_the_same_token_and_hash(prod: harness.Render) -> None:
    join = prod.one(REMOTE, "gpu-host-1-join")
    inputs = join["inputs"]
    assert inputs["create"] == "sudo -n sh -s"
    # The environment goes on stdin: sshd refuses variables outside AcceptEnv, and pulumi-command
    # fails a command whose variable is refused. It is recorded as the first trigger.
    assert "environment" not in inputs
    recorded = inputs["triggers"][0]
    assert recorded["JOIN_ENDPOINT"].endswith(":6443")
    assert recorded["JOIN_CA_CERT_HASH"].startswith("sha256:")
    assert f"JOIN_ENDPOINT={recorded['JOIN_ENDPOINT']}\n" in inputs["stdin"]
    token = prod.one("kubernetes:core/v1:Secret", "gpu-host-1-bootstrap-token")["inputs"]["stringData"]
    assert f"JOIN_TOKEN={token['token-id']}.{token['token-secret']}\n" in inputs["stdin"]
    assert "--ignore-preflight-errors" not in inputs["stdin"]  # a real host passes every check
    assert "kubeadm reset --force" in inputs["delete"] and "delete node" not in inputs["delete"]
    assert prod.one(REMOTE, "gpu-host-1-prepare")["urn"] in join["dependencies"]
    assert prod.waits_for(join, prod.one(TCP, "prod-a"))


@pytest.mark.parametrize("script", ["stdin", "delete"])
def test_ssh_scripts_are_valid_posix_shell(prod: harness.Render, script: str) -> None:
    commands = prod.find(REMOTE)
    assert commands
    for command in commands:
        assert_valid_machine_script(command["inputs"][script])


def test_ssh_only_tenants_get_no_nested_node_workarounds(prod: harness.Render) -> None:
    patches = prod.one(TCP, "prod-a")["inputs"]["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    assert patches == [{"op": "add", "path": "/cgroupDriver", "value": "systemd"}]
    assert prod.find("kubernetes:apps/v1:DaemonSetPatch") == []


def test_ssh_workers_in_mock_mode_are_registered_on_the_host() -> None:
    render = render_config(mock_mode())
    registration = render.one(REMOTE, "gpu-host-1-gpu-registration")
    assert registration["inputs"]["triggers"][0]["NVIDIA_GPU_CAPACITY"] == "10"
    assert "NVIDIA_GPU_CAPACITY=10\n" in registration["inputs"]["stdin"]
    assert "kubectl --kubeconfig /etc/kubernetes/kubelet.conf" in registration["inputs"]["stdin"]


@pytest.mark.parametrize("command", ["gpu-host-1-join", "gpu-host-1-gpu-registration"])
def test_an_ssh_scripts_values_reach_it_as_they_were_given(command: str) -> None:
    # The values go on stdin as shell assignments: unquoted, the shell would strip the double
    # quotes from HAMi's JSON registration, and the node would show no GPUs.
    inputs = render_config(mock_mode(), show_secrets=True).one(REMOTE, command)["inputs"]
    environment = inputs["triggers"][0]
    assignments, separator, _ = inputs["stdin"].partition("set -eu")
    assert separator and any('"' in value for value in environment.values()) == (command.endswith("registration"))
    echo = "".join(f'printf "%s\\0" "${key}"\n' for key in environment)
    result = subprocess.run(["sh", "-c", assignments + echo], capture_output=True, text=True, timeout=30, check=True)
    assert dict(zip(environment, result.stdout.split("\0")[:-1], strict=True)) == environment


# --- gpuMode: nvidia ----------------------------------------------------------------------------------


def test_nvidia_mode_runs_hamis_real_device_plugin(prod: harness.Render) -> None:
    values = prod.one(RELEASE, "prod-a-hami")["inputs"]["values"]
    assert values["devicePlugin"] == {"enabled": True, "service": {"type": "ClusterIP"}}  # no NodePort on GPU hosts
    assert values["mockDevicePlugin"] == {"enabled": False}
    # The real plugin releases HAMi's bind lock.
    assert "nodeLockExpire" not in values["scheduler"] and "extender" not in values["scheduler"]
    # NVIDIA's runtime is containerd's default there: pods asking for no GPU get NVIDIA_VISIBLE_DEVICES=none.
    assert values["scheduler"]["overwriteEnv"] == "true"
    assert [r for r in prod.resources if r["name"].endswith("-gpu-registration")] == []  # no fake registration
    assert "--node-labels=gpu=on,gpu-tenancy.io/tenant=prod-a" in prod.one(REMOTE, "gpu-host-1-join")["inputs"]["stdin"]
    prepare = prod.one(REMOTE, "gpu-host-1-prepare")["inputs"]["stdin"]
    assert "GPU_MODE=nvidia\n" in prepare and "nvidia-ctk runtime configure --runtime=containerd --set-as-default" in prepare
    # The guard asks containerd's effective configuration (drop-ins included only when imported;
    # tests/test_ssh_worker.py runs it). A driver that finds no GPU stops the preparation.
    assert 'nvidia_default() { containerd config dump 2>/dev/null | grep -Eq "default_runtime_name = ' in prepare
    assert "if ! nvidia_default; then" in prepare
    assert 'nvidia-smi -L >/dev/null || { echo "gpuMode nvidia: nvidia-smi finds no GPU' in prepare


def test_declared_gpus_still_drive_quota_checks_and_outputs(prod: harness.Render) -> None:
    assert prod.outputs["tenants"]["prod-a"]["gpus"] == {"gpu-host-1": [{"model": "H100-80GB", "count": 8, "memoryMiB": 81559}]}
    config = existing(quota={"gpumem": 81559 * 8 + 1, "gpucores": 800})
    with pytest.raises(harness.RenderError, match=r"tenants\[0\]\.quota\.gpumem"):
        render_config(config)


# --- dataStore ----------------------------------------------------------------------------------------


def test_dedicated_datastore_is_a_kamaji_etcd_of_the_tenant(prod: harness.Render) -> None:
    etcd = prod.one(RELEASE, "prod-a-etcd")
    inputs = etcd["inputs"]
    assert (inputs["chart"], inputs["version"], inputs["namespace"]) == ("kamaji-etcd", "0.17.0", "prod-a")
    assert inputs["repositoryOpts"] == {"repo": "https://clastix.github.io/charts"}
    assert inputs["values"] == {"fullnameOverride": "prod-a-etcd", "datastore": {"enabled": True, "name": "prod-a-etcd"}}
    assert etcd["provider"] == prod.one(K8S_PROVIDER, "gpu-tenancy-management")["urn"]
    tcp = prod.one(TCP, "prod-a")
    assert tcp["inputs"]["spec"]["dataStore"] == "prod-a-etcd"
    assert etcd["urn"] in tcp["dependencies"]
    # The chart's DataStore needs Kamaji's CRD, which comes with the Kamaji release.
    assert prod.waits_for(etcd, prod.one(RELEASE, "gpu-tenancy-management-kamaji"))


# Shared names Kamaji's default DataStore: the CRD refuses to unset dataStore, so a TCP that once
# named a store could otherwise never move back to shared.
@pytest.mark.parametrize(("data_store", "expected"), [("shared", "default"), ("gold", "gold")])
def test_shared_and_named_datastores(data_store: str, expected: str) -> None:
    render = render_config(existing(dataStore=data_store))
    assert render.one(TCP, "prod-a")["inputs"]["spec"]["dataStore"] == expected
    assert [r for r in render.find(RELEASE) if r["inputs"]["chart"] == "kamaji-etcd"] == []


def test_datastore_values_exist_in_the_chart(prod: harness.Render) -> None:
    defaults = fidelity.chart_values("kamaji/kamaji-etcd-values.yaml")
    assert fidelity.unknown_value_keys(prod.one(RELEASE, "prod-a-etcd")["inputs"]["values"], defaults) == []


def test_multihost_objects_validate_against_upstream_schemas(multihost: harness.Render) -> None:
    for tcp in multihost.find(TCP):
        fidelity.validate_custom_resource(fidelity.kubernetes_object(tcp), "kamaji/tenantcontrolplanes.yaml")
    assert {t["inputs"]["spec"].get("dataStore") for t in multihost.find(TCP)} == {"prod-a-etcd", "gold"}


# --- the example stack ----------------------------------------------------------------------------


def test_example_multihost_stack_renders(multihost: harness.Render) -> None:
    assert set(multihost.outputs["tenants"]) == {"prod-a", "research"}
    assert multihost.outputs["tenants"]["prod-a"]["endpoint"] == "https://10.0.100.10:6443"
    assert multihost.outputs["managementKubeconfig"].startswith("<secure value REPLACE-with")
    for name in ("gpu-host-1", "gpu-host-2", "gpu-host-3"):
        assert multihost.one(REMOTE, f"{name}-join")
    assert multihost.one(REMOTE, "gpu-host-2-prepare")["inputs"]["connection"]["port"] == 2222
    assert "KUBERNETES_VERSION=v1.35.7\n" in multihost.one(REMOTE, "gpu-host-3-prepare")["inputs"]["stdin"]


# --- config errors ----------------------------------------------------------------------------------


def problems(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        StackConfig.load(raw)
    return dict(caught.value.problems)


def test_existing_mode_requires_a_kubeconfig() -> None:
    assert (
        "is required when management.mode is existing" in problems({"management": {"mode": "existing"}})["management.kubeconfig"]
    )


def test_kubeconfig_and_worker_network_are_only_for_existing_mode() -> None:
    found = problems(
        {"management": {"kubeconfig": MGMT_KUBECONFIG}, "network": {"workerNetwork": "kind", "announceFromControlPlanes": True}}
    )
    assert "only used with management.mode existing" in found["management.kubeconfig"]
    assert "only used with management.mode existing" in found["network.workerNetwork"]
    assert "only used with management.mode existing" in found["network.announceFromControlPlanes"]


def test_unknown_management_mode() -> None:
    assert "'kind' or 'existing'" in problems({"management": {"mode": "cloud"}})["management.mode"]


@pytest.mark.parametrize("missing", ["host", "user", "privateKey"])
def test_ssh_fields_are_required(missing: str) -> None:
    worker = ssh_worker("gpu-host-1", "10.0.0.11")
    del worker["ssh"][missing]
    assert problems({"tenants": [{"name": "a", "workers": [worker]}]})[f"tenants[0].workers[0].ssh.{missing}"] == "is required"


def test_ssh_port_and_unknown_ssh_keys() -> None:
    worker = ssh_worker("gpu-host-1", "10.0.0.11")
    worker["ssh"].update(port=70000)
    found = problems({"tenants": [{"name": "a", "workers": [worker]}]})
    assert found == {"tenants[0].workers[0].ssh.port": "Input should be less than or equal to 65535 (got 70000)"}
    worker["ssh"].update(port=22, password="x")
    found = problems({"tenants": [{"name": "a", "workers": [worker]}]})
    assert "unknown key 'password'" in found["tenants[0].workers[0].ssh"]


def test_nvidia_mode_needs_gpu_hosts_not_containers() -> None:
    raw = {"tenants": [{"name": "a", "gpuMode": "nvidia", "workers": [{"name": "w", "gpus": [{"model": "L4"}]}]}]}
    assert "kindest/node container has no GPU" in problems(raw)["tenants[0].workers[0]"]


def test_unknown_gpu_mode_and_bad_datastore_name() -> None:
    found = problems({"tenants": [{"name": "a", "gpuMode": "cuda", "dataStore": "Gold Tier"}]})
    assert "'mock' or 'nvidia'" in found["tenants[0].gpuMode"]
    assert "neither 'shared', 'dedicated' nor the name of a DataStore" in found["tenants[0].dataStore"]


def test_no_remote_command_asks_sshd_for_environment_variables(prod: harness.Render) -> None:
    # Debian's and Ubuntu's sshd accept only LANG and LC_* (AcceptEnv): any other variable set on
    # the session fails the whole command (pulumi-command remote, commandOutputs.go), delete included.
    remote = prod.find(REMOTE)
    assert remote and all("environment" not in r["inputs"] for r in remote)
    prepare = prod.one(REMOTE, "gpu-host-1-prepare")["inputs"]["stdin"]
    assert "KUBERNETES_VERSION=v1.36.4\n" in prepare and "GPU_MODE=nvidia\n" in prepare


CONTAINERD_1_7 = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = ""
  SystemdCgroup = false
"""
# containerd 2.0/2.1's default leaves SystemdCgroup out (containerd#12101).
CONTAINERD_2_0 = """version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = ''
"""


@pytest.mark.parametrize("default", [CONTAINERD_1_7, CONTAINERD_2_0], ids=["containerd-1.7", "containerd-2.0"])
def test_containerd_gets_the_systemd_cgroup_driver(default: str, tmp_path: Path) -> None:
    start = _PREPARE.index("if ! grep -q 'SystemdCgroup = true'")
    block = _PREPARE[start : _PREPARE.index("\nfi\n", start) + 4].replace("/etc/containerd", str(tmp_path / "containerd"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "default.toml").write_text(default)
    executable(bin_dir / "containerd", f'#!/bin/sh\n[ "$1 $2" = "config default" ] && cat {tmp_path / "default.toml"}\n')
    executable(bin_dir / "systemctl", f'#!/bin/sh\necho "$*" >> {tmp_path / "systemctl.log"}\n')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    for _ in range(2):  # the second run finds the driver set and changes nothing
        subprocess.run(["sh", "-eu", "-c", block], env=env, check=True, capture_output=True, text=True)
    config = (tmp_path / "containerd" / "config.toml").read_text()
    assert config.count("SystemdCgroup = true") == 1 and "SystemdCgroup = false" not in config
    options = config.splitlines().index(next(line for line in config.splitlines() if "runtimes.runc.options]" in line))
    assert "SystemdCgroup = true" in "\n".join(config.splitlines()[options:])
    assert (tmp_path / "systemctl.log").read_text() == "restart containerd\n"


IPTABLES = """*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:KUBE-FORWARD - [0:0]
:cali-FORWARD - [0:0]
-A INPUT -p tcp --dport 22 -j ACCEPT
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
-A FORWARD -m comment --comment "cali:S93hcgKJrXEqnTfs" -m mark --mark 0x10000/0x10000 -j ACCEPT
-A FORWARD -i docker0 -j ACCEPT
COMMIT
"""


def test_destroy_removes_only_kube_proxys_and_calicos_iptables_rules(tmp_path: Path) -> None:
    start = _CLEAN_UP.index("for table in")
    loop = _CLEAN_UP[start : _CLEAN_UP.index("done; ", start) + len("done;")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "rules").write_text(IPTABLES)
    for table in ("iptables", "ip6tables"):
        executable(bin_dir / f"{table}-save", f"#!/bin/sh\ncat {tmp_path / 'rules'}\n")
        executable(bin_dir / f"{table}-restore", f"#!/bin/sh\ncat > {tmp_path / table}.restored\n")
    subprocess.run(["sh", "-c", loop], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True)
    restored = (tmp_path / "iptables.restored").read_text()
    # The host's own policy and rules stay, the SSH rule first of all.
    assert restored.splitlines() == [
        "*filter",
        ":INPUT DROP [0:0]",
        ":FORWARD DROP [0:0]",
        "-A INPUT -p tcp --dport 22 -j ACCEPT",
        "-A FORWARD -i docker0 -j ACCEPT",
        "COMMIT",
    ]
    assert (tmp_path / "ip6tables.restored").read_text() == restored


def test_ssh_steps_undo_the_old_step_before_a_replacement_runs(multihost: harness.Render) -> None:
    # A replaced join's delete (`kubeadm reset`) on the same host must come before the new join.
    steps = multihost.find(REMOTE)
    assert {step["name"].rsplit("-", 1)[-1] for step in steps} == {"prepare", "join"}
    for step in steps:
        assert step["options"]["deleteBeforeReplace"] is True, step["name"]


def test_a_host_removed_from_the_stack_loses_its_tenants_images_and_pod_logs() -> None:
    # kubeadm reset leaves them; the host may serve another tenant next. After the reset: the
    # images of running pods could not be removed.
    assert f"{kubeadm.SCRUB_SCRIPT} || true" in _CLEAN_UP
    assert _CLEAN_UP.index("kubeadm reset") < _CLEAN_UP.index(kubeadm.SCRUB_SCRIPT)
