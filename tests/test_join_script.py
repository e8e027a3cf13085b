"""The join script itself, run under sh against stand-ins for systemctl, kubeadm and kubectl.

Paths under /etc are moved into a temporary directory; everything else runs as on a worker.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpu_tenancy import kubeadm
from tests.shell import executable

ENDPOINT = "172.18.255.230:6443"
LABELS = {"gpu": "on", "gpu-tenancy.io/tenant": "tenant-a"}
# How a label call shows among the calls run_join returns.
LABEL = "kubectl --kubeconfig"
KIND_KUBELET_ARGS = "--runtime-cgroups=/system.slice/containerd.service"
NODE = "tenant-a-worker-0"
CA_CERT_HASH = "sha256:00"
# How the removal of another tenant's images shows among the calls.
SCRUB = "crictl --runtime-endpoint"


def tool(bin_dir: Path, name: str, body: str) -> None:
    """A stand-in that logs its call and then runs ``body``."""
    executable(bin_dir / name, f'#!/bin/sh\necho "{name} $*" >> "$LOG"\n{body}\n')


def run_join(
    tmp_path: Path,
    *,
    failing_joins: int = 0,
    runtime_starts_after: int = 0,
    expires: str | None = None,
    version: str = "v1.36.4",
    restarted_kubelet: str | None = None,
    endpoint: str = ENDPOINT,
    labels: dict[str, str | None] | None = None,
    node: str = NODE,
    ca_cert_hash: str = CA_CERT_HASH,
    unregistered_for: int = 0,
    reset_fails: bool = False,
    scrub_fails: bool = False,
) -> tuple[int, list[str], Path]:
    """Run the join for ``version``; the Node reports the kubelet in ``state/kubelet-version``.

    A fresh join leaves a kubelet of ``version``; ``systemctl restart kubelet`` starts the one the
    packages installed (``version``), or ``restarted_kubelet`` when given (one that never comes up).
    The machine keeps its /etc between runs in one ``tmp_path``, as a worker does between joins.
    """
    etc = tmp_path / "etc"
    (etc / "kubernetes" / "pki").mkdir(parents=True, exist_ok=True)
    (etc / "default").mkdir(exist_ok=True)
    if not (etc / "default" / "kubelet").exists():  # what kind's image ships
        (etc / "default" / "kubelet").write_text(f"KUBELET_EXTRA_ARGS={KIND_KUBELET_ARGS}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    k8s = etc / "kubernetes"
    tool(bin_dir, "sleep", ":")
    tool(
        bin_dir,
        "systemctl",
        f"""case "$1 $2" in
  "restart kubelet") echo {restarted_kubelet or version} > "{state}/kubelet-version" ;;
  is-active*)
    n=$(cat "{state}/runtime" 2>/dev/null || echo 0); echo $((n + 1)) > "{state}/runtime"
    [ "$n" -ge {runtime_starts_after} ] ;;
esac""",
    )
    # A failed join leaves what kubeadm's kubelet-start phase writes before the TLS bootstrap.
    tool(
        bin_dir,
        "kubeadm",
        f"""case "$1" in
  reset) {"exit 1" if reset_fails else f'rm -f "{k8s}/kubelet.conf" "{k8s}/bootstrap-kubelet.conf" "{k8s}/pki/ca.crt"'} ;;
  join)
    [ "$2" = --config ] || {{ echo "join without --config" >&2; exit 1; }}
    cp "$3" "{state}/join-config"; stat -c %a "$3" > "{state}/join-config-mode"
    for f in "{k8s}/kubelet.conf" "{k8s}/bootstrap-kubelet.conf" "{k8s}/pki/ca.crt"; do
      [ ! -e "$f" ] || {{ echo "[ERROR FileAvailable] $f already exists" >&2; exit 1; }}
    done
    : > "{k8s}/bootstrap-kubelet.conf"; : > "{k8s}/pki/ca.crt"
    n=$(cat "{state}/joins" 2>/dev/null || echo 0); echo $((n + 1)) > "{state}/joins"
    [ "$n" -ge {failing_joins} ] || exit 1
    endpoint=$(sed -n 's/^ *apiServerEndpoint: "\\(.*\\)"$/\\1/p' "$3")
    printf '    server: https://%s\\n' "$endpoint" > "{k8s}/kubelet.conf"
    echo {version} > "{state}/kubelet-version" ;;
esac""",
    )
    # Removes every image the runtime holds (``state/images``, one per line).
    tool(bin_dir, "crictl", "exit 1" if scrub_fails else f': > "{state}/images"')
    # The Node is found by its first label call after ``unregistered_for`` failed ones.
    tool(
        bin_dir,
        "kubectl",
        f"""case "$*" in
  *" get node "*) cat "{state}/kubelet-version" ;;
  *" label node "*)
    n=$(cat "{state}/label-calls" 2>/dev/null || echo 0); echo $((n + 1)) > "{state}/label-calls"
    [ "$n" -ge {unregistered_for} ] || {{ echo "Error from server (NotFound): nodes not found" >&2; exit 1; }} ;;
esac""",
    )
    script = kubeadm.join_script(node, version, ("SystemVerification",), LABELS if labels is None else labels)
    script = script.replace("/etc/", f"{etc}/").replace("/var/", f"{tmp_path}/var/")
    log = tmp_path / "log"
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    result = subprocess.run(
        ["sh", "-c", script],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "LOG": str(log),
            "TMPDIR": str(scratch),
            "JOIN_ENDPOINT": endpoint,
            "JOIN_TOKEN": "abcdef.0123456789abcdef",
            "JOIN_CA_CERT_HASH": ca_cert_hash,
            **({"BOOTSTRAP_TOKEN_EXPIRES": expires} if expires else {}),
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = log.read_text().splitlines() if log.exists() else []
    calls = [" ".join(line.split(" ")[:2]) for line in lines if not line.startswith(("sleep", "systemctl"))]
    return result.returncode, calls, etc


def test_a_fresh_machine_joins_once(tmp_path: Path) -> None:
    code, calls, etc = run_join(tmp_path)
    assert code == 0
    assert calls == ["kubeadm join", LABEL]
    assert (etc / "default" / "kubelet").read_text() == (
        "KUBELET_EXTRA_ARGS=--runtime-cgroups=/system.slice/containerd.service "
        "--node-labels=gpu=on,gpu-tenancy.io/tenant=tenant-a\n"
    )


def test_a_failed_join_is_reset_and_retried(tmp_path: Path) -> None:
    # The leftovers of the failed attempt would fail every later preflight without the reset.
    code, calls, _ = run_join(tmp_path, failing_joins=2)
    assert code == 0
    assert calls == ["kubeadm join", "kubeadm reset", "kubeadm join", "kubeadm reset", "kubeadm join", LABEL]


def test_a_join_that_keeps_failing_gives_up(tmp_path: Path) -> None:
    code, calls, _ = run_join(tmp_path, failing_joins=99)
    assert code == 1
    assert calls.count("kubeadm join") == kubeadm.JOIN_ATTEMPTS


def test_leftovers_of_an_earlier_run_are_reset_before_joining(tmp_path: Path) -> None:
    run_join(tmp_path, failing_joins=99)  # gives up, leaving bootstrap-kubelet.conf behind
    (tmp_path / "state" / "joins").unlink()
    (tmp_path / "log").unlink()
    code, calls, _ = run_join(tmp_path)
    assert code == 0 and calls == ["kubeadm reset", "kubeadm join", LABEL]


@pytest.mark.parametrize("leftover", ["bootstrap-kubelet.conf", "pki/ca.crt", "kubelet.conf"])
def test_any_one_leftover_of_a_join_is_reset_first(tmp_path: Path, leftover: str) -> None:
    # kubeadm's preflight (FileAvailable) refuses each of them on its own.
    k8s = tmp_path / "etc" / "kubernetes"
    (k8s / "pki").mkdir(parents=True)
    (k8s / leftover).write_text("" if leftover != "kubelet.conf" else "    server: https://172.18.255.99:6443\n")
    code, calls, _ = run_join(tmp_path)
    assert code == 0
    # A kubelet.conf names the control plane the machine served; a failed join's leftovers do not.
    assert calls[:2] == ["kubeadm reset", SCRUB if leftover == "kubelet.conf" else "kubeadm join"]


def test_a_leftover_that_cannot_be_reset_stops_the_join(tmp_path: Path) -> None:
    k8s = tmp_path / "etc" / "kubernetes"
    (k8s / "pki").mkdir(parents=True)
    (k8s / "bootstrap-kubelet.conf").write_text("")
    code, calls, _ = run_join(tmp_path, reset_fails=True)
    assert code == 1 and calls == ["kubeadm reset"]


def test_a_joined_machine_only_gets_its_labels_again(tmp_path: Path) -> None:
    run_join(tmp_path)
    (tmp_path / "log").unlink()
    code, _, _ = run_join(tmp_path)
    assert code == 0
    log = (tmp_path / "log").read_text()
    assert "label node tenant-a-worker-0 --overwrite gpu=on gpu-tenancy.io/tenant=tenant-a" in log
    # Its kubelet already runs the tenant's version: nothing is upgraded or restarted.
    assert [line for line in log.splitlines() if line.startswith("kubeadm") or "systemctl restart" in line] == []


def test_a_label_set_to_none_leaves_the_kubelet_flag_and_the_node(tmp_path: Path) -> None:
    run_join(tmp_path)
    (tmp_path / "log").unlink()
    code, _, etc = run_join(tmp_path, labels={**LABELS, "gpu": None})  # the worker's cards left the config
    assert code == 0
    assert "label node tenant-a-worker-0 --overwrite gpu-tenancy.io/tenant=tenant-a gpu-\n" in (tmp_path / "log").read_text()
    assert (etc / "default" / "kubelet").read_text().endswith(" --node-labels=gpu-tenancy.io/tenant=tenant-a\n")


def test_a_new_version_upgrades_a_joined_node_in_kubeadms_order(tmp_path: Path) -> None:
    run_join(tmp_path, version="v1.35.7")
    (tmp_path / "log").unlink()
    code, _, _ = run_join(tmp_path, version="v1.36.4")  # the setup step installed v1.36.4's packages
    assert code == 0
    log = (tmp_path / "log").read_text().splitlines()
    steps = [line for line in log if line.startswith(("kubeadm", "systemctl")) and "is-active" not in line]
    # kubeadm's guide for Linux nodes: `kubeadm upgrade node`, then the kubelet restarted on the
    # new binary; no reset and no new join, which would drop the node's pods and state.
    assert steps == ["kubeadm upgrade node", "systemctl daemon-reload", "systemctl restart kubelet"]
    assert (tmp_path / "state" / "kubelet-version").read_text().strip() == "v1.36.4"
    assert (tmp_path / "state" / "joins").read_text().strip() == "1"


def test_an_upgrade_fails_when_the_node_keeps_reporting_the_old_kubelet(tmp_path: Path) -> None:
    run_join(tmp_path, version="v1.35.7")
    code, _, _ = run_join(tmp_path, version="v1.36.4", restarted_kubelet="v1.35.7")
    assert code == 1
    assert "systemctl restart kubelet" in (tmp_path / "log").read_text()


@pytest.mark.parametrize(("starts_after", "code"), [(3, 0), (1000, 1)])
def test_the_join_waits_for_containerd(tmp_path: Path, starts_after: int, code: int) -> None:
    result, calls, _ = run_join(tmp_path, runtime_starts_after=starts_after)
    assert result == code
    assert calls == (["kubeadm join", LABEL] if code == 0 else [])


def test_the_token_reaches_kubeadm_in_a_file_only_root_reads(tmp_path: Path) -> None:
    code, _, _ = run_join(tmp_path)
    assert code == 0
    # Arguments are readable by every user of the host (/proc/<pid>/cmdline); the token is not one.
    assert "abcdef.0123456789abcdef" not in (tmp_path / "log").read_text()
    state = tmp_path / "state"
    assert (state / "join-config-mode").read_text().strip() == "600"
    assert list((tmp_path / "tmp").iterdir()) == [], "the configuration is removed after the join"
    assert (state / "join-config").read_text() == (
        "apiVersion: kubeadm.k8s.io/v1beta4\n"
        "kind: JoinConfiguration\n"
        "discovery:\n"
        "  bootstrapToken:\n"
        f'    apiServerEndpoint: "{ENDPOINT}"\n'
        '    token: "abcdef.0123456789abcdef"\n'
        '    caCertHashes: ["sha256:00"]\n'
        "nodeRegistration:\n"
        "  name: tenant-a-worker-0\n"
    )


@pytest.mark.parametrize(("version", "api"), [("v1.36.4", "v1beta4"), ("v1.31.0", "v1beta4"), ("v1.30.9", "v1beta3")])
def test_the_join_configuration_speaks_the_tenants_kubeadm(version: str, api: str) -> None:
    assert f"apiVersion: kubeadm.k8s.io/{api}\n" in kubeadm.join_script("w", version, (), {})


@pytest.mark.parametrize(("expires", "joins"), [("2000-01-01T00:00:00Z", False), ("2999-01-01T00:00:00Z", True)])
def test_an_expired_token_stops_the_join_before_kubeadm_runs(tmp_path: Path, expires: str, joins: bool) -> None:
    code, calls, _ = run_join(tmp_path, expires=expires)
    assert (code == 0) is joins
    assert ("kubeadm join" in calls) is joins


@pytest.mark.parametrize(
    ("expires", "joins"), [("2026-12-02T10:00:00Z", False), ("2026-12-02T10:00:01Z", True), ("2026-12-02T09:59:59Z", False)]
)
def test_a_token_is_expired_from_its_expiry_second_on(tmp_path: Path, expires: str, joins: bool) -> None:
    # The tokencleaner deletes a token once its expiration is not after now; so does the script.
    (tmp_path / "bin").mkdir()
    executable(tmp_path / "bin" / "date", "#!/bin/sh\necho 2026-12-02T10:00:00Z\n")
    code, calls, _ = run_join(tmp_path, expires=expires)
    assert ("kubeadm join" in calls) is joins
    assert (code == 0) is joins


@pytest.mark.parametrize(
    ("earlier", "rejoins"),
    [
        (ENDPOINT, False),
        ("172.18.255.231:6443", True),  # another tenant's control plane
        (ENDPOINT + "0", True),  # an endpoint that merely starts with this one
    ],
)
def test_only_a_machine_joined_to_this_endpoint_counts_as_joined(tmp_path: Path, earlier: str, rejoins: bool) -> None:
    code, _, etc = run_join(tmp_path, endpoint=earlier)
    assert code == 0
    assert (etc / "kubernetes" / "kubelet.conf").read_text() == f"    server: https://{earlier}\n"
    # What the earlier tenant's Calico installed on the machine.
    cni_config, cni_state = etc / "cni" / "net.d", tmp_path / "var" / "lib" / "cni"
    for directory in (cni_config, cni_state):
        directory.mkdir(parents=True)
        (directory / "calico").write_text("the earlier tenant's\n")
    (tmp_path / "log").unlink()
    code, calls, _ = run_join(tmp_path)
    assert code == 0
    if rejoins:
        # A kubelet.conf for another endpoint is a join to undo: reset, then join this tenant,
        # without the earlier tenant's pod network (kubeadm reset leaves it), images or logs.
        assert calls == ["kubeadm reset", SCRUB, "kubeadm join", LABEL]
        assert (tmp_path / "state" / "joins").read_text().strip() == "2"
        assert not cni_config.exists() and not cni_state.exists()
    else:
        assert (cni_config / "calico").exists() and (cni_state / "calico").exists()
        assert not [call for call in calls if call.startswith("kubeadm")]
        assert "kubectl --kubeconfig" in calls  # the labels, applied again
        assert (tmp_path / "state" / "joins").read_text().strip() == "1"
    assert (etc / "kubernetes" / "kubelet.conf").read_text() == f"    server: https://{ENDPOINT}\n"


@pytest.mark.parametrize(
    "relabel",
    [
        LABELS,
        {"gpu": "on", "gpu-tenancy.io/tenant": "tenant-a", "gpu-tenancy.io/pool": "l4"},
        {"gpu-tenancy.io/tenant": "tenant-a"},
    ],
)
def test_a_rerun_replaces_the_node_labels_flag(tmp_path: Path, relabel: dict[str, str]) -> None:
    assert run_join(tmp_path)[0] == 0
    code, _, etc = run_join(tmp_path, labels=relabel)
    assert code == 0
    latest = ",".join(f"{key}={value}" for key, value in sorted(relabel.items()))
    # One flag, the latest labels; the image's own flags stay where they were.
    assert (etc / "default" / "kubelet").read_text() == f"KUBELET_EXTRA_ARGS={KIND_KUBELET_ARGS} --node-labels={latest}\n"


def join_record(etc: Path) -> str:
    return (etc / kubeadm.JOIN_RECORD.removeprefix("/etc/")).read_text()


def test_a_join_records_what_the_machine_joined_as(tmp_path: Path) -> None:
    code, _, etc = run_join(tmp_path)
    assert code == 0
    assert join_record(etc) == f"{ENDPOINT} {CA_CERT_HASH} {NODE}\n"


@pytest.mark.parametrize(
    ("change", "rejoins"),
    [
        ({}, False),
        # The control plane made anew at the same address: the kubelet's credentials are worthless.
        ({"ca_cert_hash": "sha256:11"}, True),
        # The worker renamed on the same host: the kubelet could not even label the new node.
        ({"node": "tenant-a-worker-9"}, True),
    ],
)
def test_a_machine_joined_at_this_endpoint_under_another_ca_or_name_joins_again(
    tmp_path: Path, change: dict[str, str], rejoins: bool
) -> None:
    assert run_join(tmp_path)[0] == 0
    (tmp_path / "log").unlink()
    code, calls, etc = run_join(tmp_path, **change)
    assert code == 0
    # A new CA may be another tenant's at a reused address: its images go too. A new name does not.
    rejoin = ["kubeadm reset", *([SCRUB] if "ca_cert_hash" in change else []), "kubeadm join", LABEL]
    assert (calls == rejoin) == rejoins
    wanted = {"ca_cert_hash": CA_CERT_HASH, "node": NODE, **change}
    assert join_record(etc) == f"{ENDPOINT} {wanted['ca_cert_hash']} {wanted['node']}\n"


def test_a_machine_joined_before_joins_were_recorded_counts_by_its_endpoint(tmp_path: Path) -> None:
    # Hosts joined by an earlier gpu-tenancy have no record: they keep their join, and get one.
    _, _, etc = run_join(tmp_path)
    (etc / kubeadm.JOIN_RECORD.removeprefix("/etc/")).unlink()
    (tmp_path / "log").unlink()
    code, calls, _ = run_join(tmp_path)
    assert code == 0
    assert not [call for call in calls if call.startswith("kubeadm")]
    assert join_record(etc) == f"{ENDPOINT} {CA_CERT_HASH} {NODE}\n"


def test_a_machine_joined_before_records_to_an_endpoint_that_starts_with_this_one_joins_again(tmp_path: Path) -> None:
    _, _, etc = run_join(tmp_path, endpoint=ENDPOINT + "0")
    (etc / kubeadm.JOIN_RECORD.removeprefix("/etc/")).unlink()
    (tmp_path / "log").unlink()
    code, calls, _ = run_join(tmp_path)
    assert code == 0
    assert calls == ["kubeadm reset", SCRUB, "kubeadm join", LABEL]


def test_a_fresh_join_labels_its_node_too(tmp_path: Path) -> None:
    # A Node that outlived its machine's last join keeps its labels through a new registration.
    code, calls, _ = run_join(tmp_path, labels={**LABELS, "gpu": None})
    assert code == 0
    assert calls == ["kubeadm join", LABEL]
    assert "label node tenant-a-worker-0 --overwrite gpu-tenancy.io/tenant=tenant-a gpu-\n" in (tmp_path / "log").read_text()


def test_the_label_waits_for_the_node_to_register(tmp_path: Path) -> None:
    code, _, _ = run_join(tmp_path, unregistered_for=3)
    assert code == 0
    assert (tmp_path / "state" / "label-calls").read_text().strip() == "4"


def test_a_node_that_never_registers_fails_the_join(tmp_path: Path) -> None:
    code, _, _ = run_join(tmp_path, unregistered_for=1000)
    assert code == 1
    assert int((tmp_path / "state" / "label-calls").read_text()) == kubeadm.NODE_REGISTER_WAIT_SECONDS // 2 + 1


def leave(tmp_path: Path) -> int:
    """kubeadm.LEAVE_SCRIPT on the machine of ``run_join(tmp_path)``, as a join's delete runs it."""
    script = kubeadm.LEAVE_SCRIPT.replace("/etc/", f"{tmp_path}/etc/").replace("/var/", f"{tmp_path}/var/")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "LOG": str(tmp_path / "log")}
    return subprocess.run(["sh", "-c", script], env=env, timeout=30, check=False).returncode


def pods_of_the_earlier_tenant(tmp_path: Path) -> tuple[Path, Path]:
    """An image in the runtime and a pod log, as the earlier tenant's pods leave them."""
    images, logs = tmp_path / "state" / "images", tmp_path / "var" / "log" / "pods" / "default_job_uid"
    images.write_text("registry.example/team-a/private:1\n")
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("the earlier tenant's\n")
    return images, logs


@pytest.mark.parametrize(
    ("endpoint", "ca_cert_hash", "scrubs"),
    [
        ("172.18.255.231:6443", CA_CERT_HASH, True),  # another tenant
        (ENDPOINT, "sha256:11", True),  # a new control plane at the address, maybe another tenant's
        (ENDPOINT, CA_CERT_HASH, False),  # the same one again (a replaced join, a new token)
    ],
)
def test_a_machine_that_left_another_tenant_loses_its_images_and_pod_logs_before_joining(
    tmp_path: Path, endpoint: str, ca_cert_hash: str, scrubs: bool
) -> None:
    assert run_join(tmp_path)[0] == 0
    images, logs = pods_of_the_earlier_tenant(tmp_path)
    assert leave(tmp_path) == 0
    (tmp_path / "log").unlink()
    code, calls, etc = run_join(tmp_path, endpoint=endpoint, ca_cert_hash=ca_cert_hash)
    assert code == 0
    assert calls == [*([SCRUB] if scrubs else []), "kubeadm join", LABEL]
    assert (images.read_text() == "") is scrubs
    assert logs.exists() is not scrubs
    # The join now recorded is what the next one compares with.
    assert join_record(etc) == f"{endpoint} {ca_cert_hash} {NODE}\n"
    assert not (etc / kubeadm.LEFT_RECORD.removeprefix("/etc/")).exists()


def test_a_machine_joined_to_another_tenant_is_reset_before_its_images_go(tmp_path: Path) -> None:
    # The images of running pods could not be removed: the reset removes their containers first.
    assert run_join(tmp_path, endpoint="172.18.255.231:6443")[0] == 0
    images, _ = pods_of_the_earlier_tenant(tmp_path)
    (tmp_path / "log").unlink()
    code, calls, _ = run_join(tmp_path)
    assert code == 0 and calls == ["kubeadm reset", SCRUB, "kubeadm join", LABEL]
    assert images.read_text() == ""


def test_images_that_cannot_be_removed_stop_the_join(tmp_path: Path) -> None:
    assert run_join(tmp_path, endpoint="172.18.255.231:6443")[0] == 0
    (tmp_path / "log").unlink()
    code, calls, _ = run_join(tmp_path, scrub_fails=True)
    assert code == 1 and calls == ["kubeadm reset", SCRUB]
