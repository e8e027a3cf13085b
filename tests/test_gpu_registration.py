"""The simulated inventory: each worker's cards registered the way HAMi's device plugin would."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from components import gpu_registration
from gpu_tenancy import gpus
from tests.conftest import COMMAND, DEV_CONFIG, RELEASE, dev_config, render_config
from tests.shell import executable
from tools import harness

DEV_WORKERS = {worker["name"]: worker["gpus"] for tenant in DEV_CONFIG["tenants"] for worker in tenant["workers"]}


def registration(render: harness.Render, worker: str) -> dict:
    return render.one(COMMAND, f"{worker}-gpu-registration")


def test_annotation_json_for_one_a100(dev: harness.Render) -> None:
    environment = registration(dev, "tenant-a-worker-0")["inputs"]["environment"]
    cards = json.loads(environment["HAMI_NODE_REGISTER"])
    assert len(cards) == 1
    card = cards[0]
    assert card["id"].startswith("GPU-") and len(card["id"]) == 40
    assert {k: v for k, v in card.items() if k != "id"} == {
        "index": 0,
        "count": 10,
        "devmem": 81920,
        "devcore": 100,
        "type": "NVIDIA A100-SXM4-80GB",
        "numa": 0,
        "mode": "hami-core",
        "health": True,
    }
    assert environment["NVIDIA_GPU_CAPACITY"] == "10"
    assert environment["GPU_TENANCY_NODE"] == "tenant-a-worker-0"


def test_annotation_json_for_two_l4(dev: harness.Render) -> None:
    environment = registration(dev, "tenant-b-worker-0")["inputs"]["environment"]
    cards = json.loads(environment["HAMI_NODE_REGISTER"])
    assert [(c["index"], c["devmem"], c["type"], c["count"], c["health"]) for c in cards] == [
        (0, 23034, "NVIDIA L4", 10, True),
        (1, 23034, "NVIDIA L4", 10, True),
    ]
    assert len({c["id"] for c in cards}) == 2
    assert environment["NVIDIA_GPU_CAPACITY"] == "20"  # non-zero: the mock plugin's health gate


def test_card_ids_are_stable_and_unique_across_the_stack(dev: harness.Render) -> None:
    again = harness.render_stack("dev")
    ids = [
        card["id"]
        for worker in ("tenant-a-worker-0", "tenant-b-worker-0")
        for card in json.loads(registration(again, worker)["inputs"]["environment"]["HAMI_NODE_REGISTER"])
    ]
    assert len(set(ids)) == 3
    assert registration(again, "tenant-a-worker-0")["inputs"] == registration(dev, "tenant-a-worker-0")["inputs"]


def test_every_catalogue_card_is_a_valid_hami_device() -> None:
    for model in gpus.CATALOGUE.values():
        entry = gpus.worker_cards("w", [(model.model, 1)])[0].register_entry()
        assert "NVIDIA" in entry["type"].upper()  # HAMi ignores devices whose type lacks it
        assert entry["devmem"] > 0 and entry["devcore"] == 100 and entry["count"] == 10 and entry["health"] is True
    assert gpus.CATALOGUE["T4"].hami_type == "NVIDIA-Tesla T4"


def test_registration_runs_on_the_node_with_its_own_credentials(dev: harness.Render) -> None:
    command = registration(dev, "tenant-a-worker-0")["inputs"]
    assert command["create"].startswith("docker exec -i ") and command["create"].endswith(" tenant-a-worker-0 sh -s")
    script = command["stdin"]
    assert "kubectl --kubeconfig /etc/kubernetes/kubelet.conf" in script
    assert "--subresource=status" in script and "/status/capacity/nvidia.com~1gpu" in script
    assert "hami.io/node-nvidia-register=" in script
    assert "OnUnitActiveSec=30s" in script  # restored when the node re-registers
    assert "hami.io/node-nvidia-register-" in command["delete"]
    # Unregistering removes the capacity too, or the node keeps advertising nvidia.com/gpu.
    remove = '--subresource=status --type=json -p \'[{"op":"remove","path":"/status/capacity/nvidia.com~1gpu"}]\''
    inner = shlex.split(command["delete"])[5]  # docker exec <container> sh -c <script> || true
    assert f"patch node tenant-a-worker-0 {remove}" in inner
    # The timer goes first (it would keep starting a service whose script is gone); a run it has
    # just started would register the cards again after the removals.
    assert inner.index("systemctl disable --now gpu-tenancy-register.timer") < inner.index("rm -f")
    assert inner.index("systemctl stop gpu-tenancy-register.service") < inner.index("annotate node")


def test_cards_are_registered_after_the_join_and_before_hami(dev: harness.Render) -> None:
    # HAMi's mock device plugin may read the registration only when it starts (mock-device-plugin#10).
    command = registration(dev, "tenant-b-worker-0")
    hami = dev.one(RELEASE, "tenant-b-hami")
    assert dev.one(COMMAND, "tenant-b-worker-0-join")["urn"] in command["dependencies"]
    assert command["urn"] in hami["dependencies"]
    assert not dev.waits_for(command, hami)
    assert not dev.waits_for(command, dev.one(RELEASE, "tenant-a-hami"))


def test_workers_without_gpus_are_not_registered() -> None:
    config = dev_config()
    config["tenants"][1]["workers"].append({"name": "tenant-b-cpu-0"})
    render = render_config(config)
    assert render.find(COMMAND, "tenant-b-cpu-0-gpu-registration") == []
    assert render.outputs["tenants"]["tenant-b"]["workers"] == ["tenant-b-worker-0", "tenant-b-cpu-0"]
    assert render.outputs["tenants"]["tenant-b"]["gpus"]["tenant-b-cpu-0"] == []


def test_mock_device_list_size_is_the_protobuf_size_of_the_mocks_response() -> None:
    # Ten devices "mock-devices-id-0".."9", each Device {ID (2 + 17 bytes), health (2 + 7)} in a
    # repeated field (2): 30 bytes each.
    assert gpus.mock_device_list_bytes(10) == 300
    assert gpus.mock_device_list_bytes(11) == 300 + 31
    # mock-device-plugin PR #27 measured 6.76 MB for an MI300X's 196608 MiB.
    assert round(gpus.mock_device_list_bytes(196608) / 1e6, 2) == 6.77


def test_the_mock_memory_limit_is_the_last_size_under_kubelets_4_mib() -> None:
    limit = gpus.mock_memory_limit_mib()
    assert gpus.mock_device_list_bytes(limit) <= 4 * 1024 * 1024 < gpus.mock_device_list_bytes(limit + 1)
    assert limit == 123011  # "more than ~120 GB per node" (hami.md)


def run_registration(
    tmp_path: Path, command: dict, failing_calls: int = 0
) -> tuple[subprocess.CompletedProcess[str], list[list[str]], list[str], Path]:
    """Run a rendered registration as its machine would, against stand-ins for kubectl and systemctl.

    /etc and /usr/local/bin move into ``tmp_path``; the environment is the command's own. The
    first ``failing_calls`` kubectl calls fail (a kubelet still registering its Node). Returns
    the result, each kubectl call's arguments, each systemctl call and the moved root.
    """
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl_log, systemctl_log = tmp_path / "kubectl.jsonl", tmp_path / "systemctl.log"
    executable(
        bin_dir / "kubectl",
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(kubectl_log)!r}, 'a+') as log:\n"
        "    log.seek(0)\n    earlier = len(log.readlines())\n    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"sys.exit(1 if earlier < {failing_calls} else 0)\n",
    )
    executable(bin_dir / "systemctl", f'#!/bin/sh\necho "$*" >> "{systemctl_log}"\n')
    executable(bin_dir / "sleep", "#!/bin/sh\n:\n")
    script = command["stdin"].replace("/etc/", f"{root}/etc/").replace("/usr/local/bin/", f"{root}/usr/local/bin/")
    environment = {key: value for key, value in command["environment"].items() if key != "DOCKER_HOST"}
    result = subprocess.run(
        ["sh", "-s"],
        input=script,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **environment},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    kubectl = [json.loads(line) for line in kubectl_log.read_text().splitlines()] if kubectl_log.exists() else []
    systemctl = systemctl_log.read_text().splitlines() if systemctl_log.exists() else []
    return result, kubectl, systemctl, root


@pytest.mark.parametrize(("failing_calls", "code"), [(3, 0), (1000, 1)])
def test_the_registration_is_retried_until_the_node_takes_it(
    dev: harness.Render, tmp_path: Path, failing_calls: int, code: int
) -> None:
    # Right after its join the kubelet may still be registering its Node; `pulumi up` should end
    # with the cards in place, or say why not.
    result, kubectl, _, _ = run_registration(tmp_path, registration(dev, "tenant-a-worker-0")["inputs"], failing_calls)
    assert result.returncode == code, result.stderr
    if code == 0:
        assert len(kubectl) > failing_calls
    else:
        assert len(kubectl) >= 30  # one attempt every 2 s for a minute
        assert "could not register the GPUs of tenant-a-worker-0" in result.stderr


@pytest.mark.parametrize("worker", sorted(DEV_WORKERS))
def test_the_registration_writes_the_cards_and_their_capacity(dev: harness.Render, tmp_path: Path, worker: str) -> None:
    result, kubectl, _, root = run_registration(tmp_path, registration(dev, worker)["inputs"])
    assert result.returncode == 0, result.stderr
    # The cards Pulumi.dev.yaml gives this worker, one entry per card, and the capacity the real
    # plugin would advertise for them: the sum of their split counts, never 0 (the mock's gate).
    cards = gpus.worker_cards(worker, [(gpu["model"], gpu["count"]) for gpu in DEV_WORKERS[worker]])
    expected = [card.register_entry() for card in cards]
    assert len(expected) == sum(gpu["count"] for gpu in DEV_WORKERS[worker])
    capacity = sum(entry["count"] for entry in expected)
    assert capacity == gpus.gpu_capacity(cards) > 0
    assert json.loads((root / "etc" / "gpu-tenancy" / "node-nvidia-register.json").read_text()) == expected

    kubeconfig = ["--kubeconfig", f"{root}/etc/kubernetes/kubelet.conf"]
    annotate, patch = kubectl
    prefix = f"{gpus.REGISTER_ANNOTATION}="
    assert annotate[:-1] == [*kubeconfig, "annotate", "node", worker, "--overwrite"]
    assert annotate[-1].startswith(prefix)
    assert json.loads(annotate[-1].removeprefix(prefix)) == expected
    assert patch[:-1] == [*kubeconfig, "patch", "node", worker, "--subresource=status", "--type=json", "-p"]
    assert json.loads(patch[-1]) == [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(capacity)}]


def test_a_timer_keeps_the_registration_from_boot_on(dev: harness.Render, tmp_path: Path) -> None:
    result, _, systemctl, root = run_registration(tmp_path, registration(dev, "tenant-a-worker-0")["inputs"])
    assert result.returncode == 0, result.stderr
    # Started now as well as enabled: `enable` alone would wait for the next boot.
    assert systemctl == ["daemon-reload", "enable --now gpu-tenancy-register.timer"]
    seconds = gpu_registration.REFRESH_SECONDS
    units = root / "etc" / "systemd" / "system"
    assert (units / "gpu-tenancy-register.timer").read_text() == (
        "[Unit]\n"
        "Description=Keep this node's simulated GPUs registered with HAMi\n"
        "[Timer]\n"
        f"OnBootSec={seconds}s\n"
        f"OnUnitActiveSec={seconds}s\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )
    service = (units / "gpu-tenancy-register.service").read_text()
    assert f"ExecStart={root}/usr/local/bin/gpu-tenancy-register\n" in service and "Type=oneshot\n" in service
