"""An SSH worker's lifecycle on one host: preparing it beside Docker CE, and moving it to a new version.

The preparation runs under sh against stand-ins for the package tools and services; paths under
/etc are moved into a temporary directory. The version change is checked on rendered stacks.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.ssh_worker_machine import _PREPARE, OWNER_FILE, owner, prepare_environment
from gpu_tenancy import kubeadm
from tests.conftest import MGMT_KUBECONFIG, SSH_KEY, TCP, render_config
from tests.shell import executable
from tools import harness

REMOTE = "command:remote:Command"
# The mock's RandomUuid of worker gpu-host-1 (tools.harness: a UUID5 of its resource name).
UNIQUE = str(uuid.uuid5(uuid.NAMESPACE_URL, "gpu-tenancy:gpu-host-1-owner"))
OWNER = f"gpu-tenancy/dev/gpu-host-1/{UNIQUE}"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"

# What containerd.io installs as /etc/containerd/config.toml (docker/containerd-packaging:common/containerd.toml).
DOCKER_CONFIG = 'disabled_plugins = ["cri"]\n\n#root = "/var/lib/containerd"\n#state = "/run/containerd"\n'
NVIDIA_DROP_IN = 'version = 2 [plugins."io.containerd.grpc.v1.cri".containerd] default_runtime_name = "nvidia"'
CONTAINERD_DEFAULT = """version = 2
disabled_plugins = []
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
"""


def run_prepare(
    tmp_path: Path,
    containerd_io: str | None,
    config: str | None = None,
    gpu_mode: str = "mock",
    drop_in: str | None = None,
    containerd: str = "1.7",
    nvidia_ctk: str | None = None,
    *,
    curl: str | None = None,
    version: str = "v1.36.4",
    cgroup_v2: bool = True,
    owner_on_host: str | None = None,
    lists_locked_for: int = 0,
    archives_locked_for: int = 0,
    update_error: str | None = None,
    dpkg_interrupted: bool = False,
) -> subprocess.CompletedProcess[str]:
    """The preparation on a host whose dpkg reports ``containerd.io`` in state ``containerd_io``.

    The apt-get stand-in acts as apt does with ``-y``: asked for the distribution's containerd
    while containerd.io is on the host, it removes containerd.io (and docker-ce, which needs it),
    unless ``--no-remove`` makes it refuse. ``apt-get update`` finds the package lists locked by
    another apt run its first ``lists_locked_for`` times, or fails with ``update_error``; with
    ``dpkg_interrupted`` dpkg's journal holds a cut-short run, and installs are refused until
    ``dpkg --configure -a`` finishes it. /var/lib/dpkg is moved into ``tmp_path``.
    """
    etc = tmp_path / "etc"
    for directory in ("modules-load.d", "sysctl.d", "apt/sources.list.d", "containerd/conf.d"):
        (etc / directory).mkdir(parents=True, exist_ok=True)
    (etc / "fstab").write_text("UUID=1 / ext4 defaults 0 1\n")
    if owner_on_host is not None:
        (etc / "gpu-tenancy").mkdir()
        (etc / "gpu-tenancy" / "owner").write_text(f"{owner_on_host}\n")
    cgroup = tmp_path / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True, exist_ok=True)
    if cgroup_v2:
        (cgroup / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    if config is not None:
        (etc / "containerd" / "config.toml").write_text(config)
    if drop_in is not None:
        (etc / "containerd" / "conf.d" / "99-nvidia.toml").write_text(drop_in)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    journal = tmp_path / "var" / "lib" / "dpkg" / "updates"
    journal.mkdir(parents=True, exist_ok=True)
    if dpkg_interrupted:
        (journal / "0001").write_text("the unpack a reboot cut short\n")
    (state / "containerd.io").write_text(containerd_io or "")
    (state / "default.toml").write_text(CONTAINERD_DEFAULT)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stand_ins = {
        "dpkg-query": f'status=$(cat "{state}/containerd.io")\n'
        '[ -n "$status" ] || { echo "dpkg-query: no packages found matching $4" >&2; exit 1; }\n'
        'printf %s "$status"',
        "apt-get": f"""case " $* " in *" update "*)
  n=$(cat "{state}/updates" 2>/dev/null || echo 0); echo $((n + 1)) > "{state}/updates"
  if [ "$n" -lt {lists_locked_for} ]; then
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (apt-get)" >&2; exit 100
  fi
  {f"echo 'E: {update_error}' >&2; exit 100" if update_error else ":"} ;;
esac
case " $* " in *" install "*)
  n=$(cat "{state}/installs" 2>/dev/null || echo 0); echo $((n + 1)) > "{state}/installs"
  if [ "$n" -lt {archives_locked_for} ]; then
    echo "E: Could not get lock /var/cache/apt/archives/lock. It is held by process 812 (apt-get)" >&2; exit 100
  fi
  if [ -n "$(ls -A "{journal}")" ]; then
    echo "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem." >&2; exit 100
  fi ;;
esac
case " $* " in *" install "*" containerd "*)
  if [ -n "$(cat "{state}/containerd.io")" ]; then
    case " $* " in *" --no-remove "*) echo "E: Packages need to be removed but remove is disabled." >&2; exit 100 ;; esac
    : > "{state}/containerd.io"; echo "apt-get removed containerd.io docker-ce" >> "$LOG"
  fi ;;
esac""",
        # The repository of the tenant's minor lists its patch release.
        "apt-cache": 'echo "   kubeadm | ${KUBERNETES_VERSION#v}-1.1 | $PACKAGE_REPOSITORY/$KUBERNETES_MINOR/deb  Packages"',
        # `config dump` is the effective configuration: config.toml, and the drop-ins only
        # when config.toml imports them; containerd 2.x prints strings in single quotes.
        "containerd": f"""config="{etc}/containerd/config.toml"
dump() {{ cat "$config"; grep -q '^imports = .*conf.d' "$config" && cat "{etc}"/containerd/conf.d/*.toml; }}
case "$1 $2" in
  "config default") cat "{state}/default.toml" ;;
  "config dump") if [ "{containerd}" = 2.x ]; then dump | tr '"' "'"; else dump; fi ;;
esac
exit 0""",
        # nvidia-ctk >= 1.18: the runtime in a drop-in, and config.toml made to import it.
        "nvidia-ctk": (
            f"printf '%s\\n' '{NVIDIA_DROP_IN}' > '{etc}/containerd/conf.d/99-nvidia.toml'\n"
            f"grep -q '^imports = .*conf.d' '{etc}/containerd/config.toml' ||\n"
            f"  sed -i '1i imports = [\"/etc/containerd/conf.d/*.toml\"]' '{etc}/containerd/config.toml'"
        ),
        # gpg writes where -o says; without a terminal it overwrites a file only with --yes.
        "gpg": """yes= out=
while [ $# -gt 0 ]; do case "$1" in --yes) yes=1 ;; -o) out="$2"; shift ;; esac; shift; done
if [ -e "$out" ] && [ -z "$yes" ]; then echo "gpg: cannot open '/dev/tty': No such device or address" >&2; exit 2; fi
echo key > "$out"
""",
        "systemctl": ":",
        "dpkg": f'[ "$*" = "--force-confdef --force-confold --configure -a" ] && rm -f "{journal}"/*',
        "sleep": ":",
    }
    if nvidia_ctk is not None:
        stand_ins["nvidia-ctk"] = nvidia_ctk
    if curl is not None:
        stand_ins["curl"] = curl
    for name in ("modprobe", "sysctl", "swapoff", "apt-mark", "curl", "nvidia-smi", *stand_ins):
        executable(bin_dir / name, f'#!/bin/sh\necho "{name} $*" >> "$LOG"\n{stand_ins.get(name, ":")}\n')
    return subprocess.run(
        [
            "sh",
            "-c",
            _PREPARE.replace("/etc/", f"{etc}/")
            .replace("/sys/fs/cgroup/", f"{cgroup}/")
            .replace("/var/lib/dpkg/", f"{tmp_path}/var/lib/dpkg/"),
        ],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(tmp_path / "log"), **prepare_environment(version, gpu_mode, OWNER)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def calls(tmp_path: Path, prefix: str) -> list[str]:
    return [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("status", ["install ok installed", "hold ok installed"])
def test_a_docker_ce_host_keeps_its_containerd_and_gets_cri(tmp_path: Path, status: str) -> None:
    result = run_prepare(tmp_path, status, DOCKER_CONFIG)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "state" / "containerd.io").read_text() == status, "docker-ce and containerd.io stay"
    (runtime_install, _) = calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 install")
    assert " containerd " not in f"{runtime_install} "
    # containerd.io ships with the CRI plugin off; kubelet needs it, with the systemd cgroup driver.
    config = (tmp_path / "etc" / "containerd" / "config.toml").read_text()
    assert 'disabled_plugins = ["cri"]' not in config and "SystemdCgroup = true" in config
    assert "systemctl restart containerd" in calls(tmp_path, "systemctl")


def test_cri_is_enabled_again_where_the_cgroup_driver_is_already_set(tmp_path: Path) -> None:
    # A host whose config.toml has the driver but still disables CRI (Docker's file, edited).
    result = run_prepare(tmp_path, "install ok installed", DOCKER_CONFIG + "SystemdCgroup = true\n")
    assert result.returncode == 0, result.stderr
    assert 'disabled_plugins = ["cri"]' not in (tmp_path / "etc" / "containerd" / "config.toml").read_text()


def test_a_host_without_docker_gets_the_distributions_containerd(tmp_path: Path) -> None:
    result = run_prepare(tmp_path, None)
    assert result.returncode == 0, result.stderr
    installs = calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 install")
    assert " containerd " in f"{installs[0]} "
    # apt removes nothing the host has: a conflict stops the preparation instead.
    assert all(" --no-remove " in install for install in installs)
    assert "SystemdCgroup = true" in (tmp_path / "etc" / "containerd" / "config.toml").read_text()


def test_a_conflict_fails_the_preparation_instead_of_removing_packages(tmp_path: Path) -> None:
    # containerd.io half-installed is not dpkg's "installed", but apt would still remove it.
    result = run_prepare(tmp_path, "install ok half-configured")
    assert result.returncode == 100
    assert "remove is disabled" in result.stderr
    assert (tmp_path / "state" / "containerd.io").read_text() == "install ok half-configured"
    assert calls(tmp_path, "apt-get removed") == []


def test_package_lists_locked_by_another_apt_run_are_waited_for(tmp_path: Path) -> None:
    # apt-daily or cloud-init refreshing the lists at boot: apt-get update does not wait for that lock.
    result = run_prepare(tmp_path, None, lists_locked_for=3)
    assert result.returncode == 0, result.stderr
    assert len(calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 update")) == 3 + 2  # both updates went through
    assert "waiting for another apt or dpkg run to finish" in result.stderr


def test_lists_locked_for_too_long_fail_the_preparation(tmp_path: Path) -> None:
    result = run_prepare(tmp_path, None, lists_locked_for=999)
    assert result.returncode != 0
    assert len(calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 update")) == 61  # 600 s, 10 s apart
    assert "Could not get lock /var/lib/apt/lists/lock" in result.stderr
    assert calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 install") == []


def test_the_archives_lock_of_another_apt_run_is_waited_for_too(tmp_path: Path) -> None:
    result = run_prepare(tmp_path, None, archives_locked_for=2)
    assert result.returncode == 0, result.stderr
    assert len(calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 install")) == 2 + 2  # both installs went through


def test_an_update_that_fails_otherwise_stops_at_once(tmp_path: Path) -> None:
    result = run_prepare(tmp_path, None, update_error="Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease")
    assert result.returncode == 100  # apt-get's own status
    assert len(calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 update")) == 1
    assert "Failed to fetch" in result.stderr


def test_a_preparation_cut_short_inside_dpkg_is_finished_before_installing(tmp_path: Path) -> None:
    # Without it apt refuses every install, on every later run, until someone runs dpkg by hand.
    result = run_prepare(tmp_path, None, dpkg_interrupted=True)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path, "dpkg ") == ["dpkg --force-confdef --force-confold --configure -a"]
    assert calls(tmp_path, "apt-get -o DPkg::Lock::Timeout=600 install")


def test_a_clean_dpkg_is_left_alone(tmp_path: Path) -> None:
    assert run_prepare(tmp_path, None).returncode == 0
    assert calls(tmp_path, "dpkg ") == []


def test_the_preparation_never_restarts_kubelet(tmp_path: Path) -> None:
    # A new version's packages land before the control plane is upgraded; the running kubelet
    # must stay on the old version until the join upgrades the node after it.
    result = run_prepare(tmp_path, None)
    assert result.returncode == 0, result.stderr
    assert [c for c in calls(tmp_path, "systemctl") if "kubelet" in c] == ["systemctl enable kubelet"]


def test_the_preparation_first_marks_the_host_as_its_workers(tmp_path: Path) -> None:
    result = run_prepare(tmp_path, None)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / OWNER_FILE.removeprefix("/")).read_text() == f"{OWNER}\n"
    assert _PREPARE.index(OWNER_FILE) < _PREPARE.index("apt_get update")


@pytest.mark.parametrize(
    ("owner_on_host", "prepared"),
    [
        (f"gpu-tenancy/dev/gpu-host-0/{uuid.uuid4()}", True),  # renamed within the stack: taken over
        (f"gpu-tenancy/dev/gpu-host-1/{uuid.uuid4()}", True),  # the stack's state made anew
        (f"gpu-tenancy/prod/gpu-host-1/{UNIQUE}", True),  # the same state: `pulumi stack rename prod dev`
        (f"old-name/dev/gpu-host-1/{UNIQUE}", True),  # the same state, the project renamed
        (f"gpu-tenancy/prod/gpu-host-1/{uuid.uuid4()}", False),
        (f"gpu-tenancy/dev-2/gpu-host-1/{uuid.uuid4()}", False),  # a prefix of the name is another stack
        (f"other-project/dev/gpu-host-1/{uuid.uuid4()}", False),
        (f"gpu-tenancy/prod/gpu-host-1/{UNIQUE}0", False),  # the UUID must match whole
    ],
)
def test_a_host_another_stack_prepared_is_left_to_it(tmp_path: Path, owner_on_host: str, prepared: bool) -> None:
    result = run_prepare(tmp_path, None, owner_on_host=owner_on_host)
    owner_file = (tmp_path / OWNER_FILE.removeprefix("/")).read_text()
    if prepared:
        assert result.returncode == 0, result.stderr
        assert owner_file == f"{OWNER}\n"
    else:
        assert result.returncode == 1
        assert f"this host belongs to {owner_on_host} (project/stack/worker/id)" in result.stderr
        assert owner_file == f"{owner_on_host}\n"
        assert not (tmp_path / "log").exists(), "nothing on the host was touched"


def test_a_failed_key_download_leaves_no_keyring_and_the_next_run_fetches_it(tmp_path: Path) -> None:
    # Piped into gpg, a failed download left an empty keyring that gpg then refused to overwrite
    # without a terminal: every later run failed until someone deleted the file.
    keyring = tmp_path / "etc" / "apt" / "keyrings" / "kubernetes-v1.36.gpg"
    failed = run_prepare(tmp_path, None, curl='echo "curl: (6) Could not resolve host" >&2; exit 6')
    assert failed.returncode == 1 and "Could not resolve host" in failed.stderr
    assert not keyring.exists() and not keyring.with_name(f"{keyring.name}.new").exists()
    again = run_prepare(tmp_path, None)
    assert again.returncode == 0, again.stderr
    assert keyring.exists()


def test_an_empty_keyring_an_earlier_release_left_is_replaced(tmp_path: Path) -> None:
    keyring = tmp_path / "etc" / "apt" / "keyrings" / "kubernetes-v1.36.gpg"
    keyring.parent.mkdir(parents=True)
    keyring.write_text("")
    result = run_prepare(tmp_path, None)
    assert result.returncode == 0, result.stderr
    assert [line for line in calls(tmp_path, "gpg") if "--dearmor" in line], "the key was fetched again"
    assert keyring.exists() and not keyring.with_name(f"{keyring.name}.new").exists()


def test_kubeadm_is_given_the_iptables_its_preflight_requires(tmp_path: Path) -> None:
    result = run_prepare(tmp_path, None)
    assert result.returncode == 0, result.stderr
    installs = [line.split() for line in calls(tmp_path, "apt-get") if " install " in line]
    assert "iptables" in installs[0], installs


@pytest.mark.parametrize(
    ("version", "cgroup_v2", "prepared"),
    [("v1.36.4", False, False), ("v1.35.0", False, False), ("v1.34.3", False, True), ("v1.35.0", True, True)],
)
def test_kubelet_135_and_newer_need_a_cgroup_v2_host(tmp_path: Path, version: str, cgroup_v2: bool, prepared: bool) -> None:
    result = run_prepare(tmp_path, None, version=version, cgroup_v2=cgroup_v2)
    if prepared:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 1
        assert f"this host runs cgroup v1, on which kubelet {version.rsplit('.', 1)[0]} does not start" in result.stderr
        assert not (tmp_path / "log").exists() and not (tmp_path / OWNER_FILE.removeprefix("/")).exists()


# --- a version change on a rendered stack ----------------------------------------------------------


def ssh_stack(version: str) -> dict[str, Any]:
    return {
        "management": {"mode": "existing", "kubeconfig": MGMT_KUBECONFIG},
        "network": {"pool": "10.0.100.10-10.0.100.50"},
        "tenants": [
            {
                "name": "prod-a",
                "kubernetesVersion": version,
                "gpuMode": "nvidia",
                "workers": [{"name": "gpu-host-1", "ssh": {"host": "10.0.0.11", "user": "ubuntu", "privateKey": SSH_KEY}}],
            }
        ],
    }


@pytest.fixture(scope="module")
def before() -> harness.Render:
    return render_config(ssh_stack("v1.35.7"), show_secrets=True)


@pytest.fixture(scope="module")
def after() -> harness.Render:
    return render_config(ssh_stack("v1.36.4"), show_secrets=True)


def test_a_new_version_reruns_the_join_in_place(before: harness.Render, after: harness.Render) -> None:
    old, new = before.one(REMOTE, "gpu-host-1-join")["inputs"], after.one(REMOTE, "gpu-host-1-join")["inputs"]
    # Same triggers: no replacement, whose delete would `kubeadm reset` the node. A new script:
    # pulumi-command runs it again, and it upgrades the joined node.
    assert old["triggers"] == new["triggers"]
    assert old["stdin"] != new["stdin"]
    assert "\ntarget_version=v1.36.4\n" in new["stdin"] and "kubeadm upgrade node" in new["stdin"]
    prepare_old, prepare_new = (r.one(REMOTE, "gpu-host-1-prepare")["inputs"] for r in (before, after))
    assert prepare_old["triggers"] == prepare_new["triggers"]
    assert "KUBERNETES_VERSION=v1.36.4\n" in prepare_new["stdin"]


def test_the_node_is_upgraded_after_its_control_plane(after: harness.Render) -> None:
    join = after.one(REMOTE, "gpu-host-1-join")
    assert after.waits_for(join, after.one(TCP, "prod-a"))
    assert after.one(REMOTE, "gpu-host-1-prepare")["urn"] in join["dependencies"]
    # The TCP's update returns only once Kamaji runs the requested version.
    assert "version.version}=v1.36.4" in after.one(TCP, "prod-a")["inputs"]["metadata"]["annotations"]["pulumi.com/waitFor"]


def test_nodes_may_read_what_kubeadm_upgrade_node_reads(after: harness.Render) -> None:
    # `kubeadm upgrade node` reads kubeadm-config and kubelet-config as the node (kubelet.conf).
    binding = after.one(BINDING, "prod-a-bootstrap-config-reader")
    assert {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": kubeadm.NODES_GROUP} in binding["inputs"][
        "subjects"
    ]
    role = after.one("kubernetes:rbac.authorization.k8s.io/v1:Role", "prod-a-bootstrap-config-reader")["inputs"]
    assert binding["inputs"]["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["urn"] in after.one(REMOTE, "gpu-host-1-join")["dependencies"]


# --- gpuMode: nvidia -------------------------------------------------------------------------------


@pytest.mark.parametrize("containerd", ["1.7", "2.x"])
def test_a_host_set_up_by_nvidias_guide_keeps_nvidia_as_the_default_runtime(tmp_path: Path, containerd: str) -> None:
    # nvidia-ctk >= 1.18 left a drop-in and config.toml importing it, without SystemdCgroup: the
    # preparation replaces config.toml, whose default imports nothing, so the drop-in no longer counts.
    result = run_prepare(
        tmp_path,
        None,
        config='imports = ["/etc/containerd/conf.d/*.toml"]\nversion = 2\n',
        gpu_mode="nvidia",
        drop_in=NVIDIA_DROP_IN,
        containerd=containerd,
    )
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path, "nvidia-ctk runtime configure --runtime=containerd --set-as-default")
    config = (tmp_path / "etc" / "containerd" / "config.toml").read_text()
    assert "SystemdCgroup = true" in config and "conf.d" in config


@pytest.mark.parametrize("containerd", ["1.7", "2.x"])
def test_a_host_whose_containerd_already_defaults_to_nvidia_is_left_alone(tmp_path: Path, containerd: str) -> None:
    # A second `pulumi up` changes nothing on the host, whichever quotes containerd prints.
    configured = 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + CONTAINERD_DEFAULT.replace("false", "true")
    result = run_prepare(tmp_path, None, config=configured, gpu_mode="nvidia", drop_in=NVIDIA_DROP_IN, containerd=containerd)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path, "nvidia-ctk") == []
    assert calls(tmp_path, "systemctl restart containerd") == []


def test_an_nvidia_ctk_whose_drop_in_containerd_never_reads_stops_the_preparation(tmp_path: Path) -> None:
    # nvidia-ctk 1.18.0 wrote /etc/containerd/config.d/, which containerd does not import
    # (nvidia-container-toolkit#1404): the runtime stays runc and HAMi's plugin would find no GPU.
    etc = tmp_path / "etc"
    buggy = f"""case "$1" in
  --version) echo "NVIDIA Container Toolkit CLI version 1.18.0" ;;
  *) mkdir -p '{etc}/containerd/config.d'; printf '%s\\n' '{NVIDIA_DROP_IN}' > '{etc}/containerd/config.d/99-nvidia.toml' ;;
esac"""
    result = run_prepare(tmp_path, None, gpu_mode="nvidia", nvidia_ctk=buggy)
    assert result.returncode == 1
    assert (
        "gpuMode nvidia: containerd's default runtime is still not nvidia after nvidia-ctk runtime configure "
        "(NVIDIA Container Toolkit CLI version 1.18.0); upgrade the NVIDIA Container Toolkit"
    ) in result.stderr
    assert calls(tmp_path, "apt-cache") == []  # stopped before the Kubernetes packages


def test_only_hosts_with_cards_get_nvidias_setup_in_an_nvidia_tenant() -> None:
    # A CPU host (system pods, no gpu=on label) needs no NVIDIA driver or runtime.
    stack = ssh_stack("v1.36.4")
    workers = stack["tenants"][0]["workers"]
    workers[0]["gpus"] = [{"model": "H100-80GB", "count": 8}]
    workers.append({"name": "cpu-host-1", "ssh": {"host": "10.0.0.12", "user": "ubuntu", "privateKey": SSH_KEY}})
    render = render_config(stack, show_secrets=True)
    assert "GPU_MODE=nvidia\n" in render.one(REMOTE, "gpu-host-1-prepare")["inputs"]["stdin"]
    assert "GPU_MODE=none\n" in render.one(REMOTE, "cpu-host-1-prepare")["inputs"]["stdin"]


def test_ssh_commands_do_not_send_their_previous_output_as_variables() -> None:
    # sshd refuses PULUMI_COMMAND_STDOUT/STDERR (AcceptEnv LANG LC_*): a warning per update or delete.
    render = render_config(ssh_stack("v1.36.4"))
    assert {r["inputs"]["addPreviousOutputInEnv"] for r in render.find(REMOTE)} == {False}


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpIN7xjIVPkUq2ZWiLzEBVYK1h8a3wZkm5cB8S2lT0p"


@pytest.mark.parametrize("host_key", [None, HOST_KEY])
def test_an_unpinned_host_key_is_warned_about_and_a_pinned_one_checked(
    host_key: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    # pulumi-command checks no host key at all without one: not only the first connection is trusted.
    stack = ssh_stack("v1.36.4")
    if host_key is not None:
        stack["tenants"][0]["workers"][0]["ssh"]["hostKey"] = host_key
    with caplog.at_level("WARNING"):
        render = render_config(stack, show_secrets=True)
    warnings = [record.getMessage() for record in caplog.records if "hostKey" in record.getMessage()]
    if host_key is None:
        assert warnings == [
            "worker gpu-host-1: no ssh.hostKey, so any machine answering at 10.0.0.11:22 is trusted with the join token "
            "and root commands; pin it with a line of `ssh-keyscan -p 22 10.0.0.11`"
        ]
    else:
        assert warnings == []
    connections = {r["name"]: r["inputs"]["connection"] for r in render.find(REMOTE)}
    assert connections and all(connection.get("hostKey") == host_key for connection in connections.values())


# --- a host that changes hands -----------------------------------------------------------------------


def run_delete(
    tmp_path: Path, delete: str, owner_on_host: str | None, *, kubeadm: bool = True
) -> tuple[subprocess.CompletedProcess[str], str]:
    """A rendered ``sudo -n sh -c <script>`` delete, on a host whose owner file holds ``owner_on_host``.

    Paths under /etc, /var and /usr/local are moved into ``tmp_path``; every tool it runs is a stand-in.
    """
    sudo, no_prompt, shell, flag, script = shlex.split(delete)
    assert (sudo, no_prompt, shell, flag) == ("sudo", "-n", "sh", "-c")
    for tree in ("/etc/", "/var/", "/usr/local/"):
        script = script.replace(tree, f"{tmp_path}{tree}")
    if owner_on_host is not None:
        (tmp_path / OWNER_FILE.removeprefix("/")).parent.mkdir(parents=True)
        (tmp_path / OWNER_FILE.removeprefix("/")).write_text(f"{owner_on_host}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tables = [f"{table}-{way}" for table in ("iptables", "ip6tables") for way in ("save", "restore")]
    for tool in ("kubeadm", "kubectl", "apt-get", "apt-mark", "systemctl", *tables)[0 if kubeadm else 1 :]:
        executable(bin_dir / tool, f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/log"\n')
    result = subprocess.run(
        ["sh", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=30, check=False
    )
    log = tmp_path / "log"
    return result, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("command", ["gpu-host-1-prepare", "gpu-host-1-join"])
@pytest.mark.parametrize(
    ("owner_on_host", "runs"),
    [
        (OWNER, True),
        (None, True),  # prepared before owners were written: cleaned up as before
        (f"gpu-tenancy/dev/gpu-host-1b/{uuid.uuid4()}", False),  # the worker renamed: the new name already joined it
        (f"gpu-tenancy/staging/gpu-host-1/{UNIQUE}", False),  # taken over by another stack
        # A stack of the same name from another checkout or backend: its own RandomUuid.
        (f"gpu-tenancy/dev/gpu-host-1/{uuid.uuid4()}", False),
    ],
)
def test_a_deleted_worker_leaves_a_host_that_now_belongs_to_another_alone(
    tmp_path: Path, command: str, owner_on_host: str | None, runs: bool
) -> None:
    # Pulumi deletes what left the program after creating what came in: a renamed worker's old
    # join and preparation would otherwise reset and purge the host its new name has just joined.
    render = render_config(ssh_stack("v1.36.4"), stack="dev")
    cni_config = tmp_path / "etc" / "cni" / "net.d"
    cni_config.mkdir(parents=True)
    result, log = run_delete(tmp_path, render.one(REMOTE, command)["inputs"]["delete"], owner_on_host)
    assert result.returncode == 0, result.stderr
    assert ("kubeadm reset --force" in log) == runs
    # kubeadm reset leaves the pod network's configuration; leaving a tenant removes it too.
    assert cni_config.exists() != runs
    if not runs:
        assert log == ""
        assert f"this host is now {owner_on_host}, no longer {OWNER}: left as it is" in result.stderr
        assert (tmp_path / OWNER_FILE.removeprefix("/")).exists()


@pytest.mark.parametrize("command", ["gpu-host-1-prepare", "gpu-host-1-join"])
@pytest.mark.parametrize(("owner_on_host", "kubeadm", "runs"), [(None, False, False), (None, True, True), (OWNER, False, True)])
def test_a_reinstalled_host_has_nothing_to_undo(
    tmp_path: Path, command: str, owner_on_host: str | None, kubeadm: bool, runs: bool
) -> None:
    # A host reinstalled after its worker joined: `kubeadm reset` would fail the delete (127).
    render = render_config(ssh_stack("v1.36.4"), stack="dev")
    delete = render.one(REMOTE, command)["inputs"]["delete"]
    result, log = run_delete(tmp_path, delete, owner_on_host, kubeadm=kubeadm)
    if runs:  # it ran (the join's reset fails where our host lost kubeadm: something else removed it)
        assert "nothing of" not in result.stderr and (log or "kubeadm: not found" in result.stderr), (result.stderr, log)
    else:
        assert result.returncode == 0, result.stderr
        assert log == ""
        owner_file = tmp_path / OWNER_FILE.removeprefix("/")
        assert f"this host has no {owner_file} and no kubeadm (reinstalled?): nothing of {OWNER} to undo" in result.stderr


def test_a_cleaned_up_host_keeps_no_owner(tmp_path: Path) -> None:
    render = render_config(ssh_stack("v1.36.4"), stack="dev")
    keyrings = tmp_path / "etc" / "apt" / "keyrings"
    keyrings.mkdir(parents=True)
    for name in ("kubernetes-v1.35.gpg", "kubernetes-v1.36.gpg", "docker.gpg"):  # two minors the host went through
        (keyrings / name).write_text("key")
    result, log = run_delete(tmp_path, render.one(REMOTE, "gpu-host-1-prepare")["inputs"]["delete"], OWNER)
    assert result.returncode == 0, result.stderr
    assert "apt-get" in log and not (tmp_path / OWNER_FILE.removeprefix("/")).parent.exists()
    assert [path.name for path in keyrings.iterdir()] == ["docker.gpg"], "the host's own keys stay"


def test_each_ssh_worker_is_owned_by_its_stack_name_and_a_uuid_of_its_state() -> None:
    render = render_config(ssh_stack("v1.36.4"), stack="staging", show_secrets=True)
    unique = render.one("random:index/randomUuid:RandomUuid", "gpu-host-1-owner")
    mine = owner("gpu-tenancy", "staging", "gpu-host-1", UNIQUE)
    assert mine == f"gpu-tenancy/staging/gpu-host-1/{UNIQUE}"
    prepare = render.one(REMOTE, "gpu-host-1-prepare")
    assert f"GPU_TENANCY_OWNER={mine}\n" in prepare["inputs"]["stdin"]
    assert unique["urn"] in prepare["dependencies"]
    for command in render.find(REMOTE):
        assert f"!= {mine} ]; then" in command["inputs"]["delete"], command["name"]


@pytest.mark.parametrize("marked_secret", [False, True])
def test_secrets_kept_in_plain_text_in_the_stack_file_are_warned_about(
    marked_secret: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # The program keeps both encrypted in state; a stack file set without --secret holds them as they are.
    with caplog.at_level("WARNING"):
        render_config(
            ssh_stack("v1.36.4"), secret_keys=["gpu-tenancy:management", "gpu-tenancy:tenants"] if marked_secret else []
        )
    warnings = [record.getMessage() for record in caplog.records if "plain text" in record.getMessage()]
    if marked_secret:
        assert warnings == []
    else:
        assert warnings == [
            f"{path} is in plain text in Pulumi.dev.yaml, and in its history if committed; set it again as a secret: "
            f"pulumi config set --secret --path 'gpu-tenancy:{path}' < FILE"
            for path in ("management.kubeconfig", "tenants[0].workers[0].ssh.privateKey")
        ]


def test_a_plain_key_beside_an_encrypted_one_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # One `secure:` value under `tenants` makes Pulumi mark the whole key secret: only the stack
    # file itself tells that the second host's key sits there in plain text.
    config = ssh_stack("v1.36.4")
    config["management"]["kubeconfig"] = {"secure": "v1:bWFuYWdlbWVudA=="}
    workers = config["tenants"][0]["workers"]
    workers[0]["ssh"]["privateKey"] = {"secure": "v1:a2V5LW9uZQ=="}
    workers.append({"name": "gpu-host-2", "ssh": {"host": "10.0.0.12", "user": "ubuntu", "privateKey": SSH_KEY}})
    path = tmp_path / "Pulumi.mixed.yaml"
    path.write_text(yaml.safe_dump({"config": {f"gpu-tenancy:{key}": value for key, value in config.items()}}))
    with caplog.at_level("WARNING"):
        render = harness.render_file(path)
    assert render.one(TCP, "prod-a")
    warnings = [record.getMessage() for record in caplog.records if "plain text" in record.getMessage()]
    assert warnings == [
        "tenants[0].workers[1].ssh.privateKey is in plain text in Pulumi.mixed.yaml, and in its history if committed; "
        "set it again as a secret: pulumi config set --secret --path 'gpu-tenancy:tenants[0].workers[1].ssh.privateKey' < FILE"
    ]
