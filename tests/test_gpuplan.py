"""``python -m tools.gpuplan``: the JSON round trip, the stack table and the exit-2 paths."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_tenancy import gpus
from gpu_tenancy.stack_file import load_stack_config
from tools import gpuplan

PROJECT_DIR = Path(__file__).resolve().parent.parent
FRACTIONAL = PROJECT_DIR / "examples" / "pods" / "fractional.yaml"


def a100(card_id: str = "GPU-a100-0") -> dict[str, object]:
    return {
        "id": card_id,
        "index": 0,
        "type": "NVIDIA A100-SXM4-80GB",
        "count": 10,
        "devmem": 81920,
        "devcore": 100,
        "numa": 0,
        "health": True,
    }


def frac_pod(name: str, mem: int = 20000, cores: int = 30, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "containers": [{"name": "cuda", "limits": {"nvidia.com/gpumem": mem, "nvidia.com/gpucores": cores}}],
    } | extra


def run_main(argv: list[str], stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = gpuplan.main(argv, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def plan_json(document: dict[str, object]) -> dict[str, object]:
    code, out = run_main(["--json"], json.dumps(document))
    assert code == 0
    return json.loads(out)


# --- --json ----------------------------------------------------------------------------------


def test_json_round_trip_of_the_canonical_a100_pods():
    document = {
        "nodes": [{"name": "w0", "devices": [a100()]}],
        "pods": [frac_pod("p1"), frac_pod("p2"), frac_pod("p3"), frac_pod("p4"), frac_pod("big", mem=90000)],
    }
    result = plan_json(document)
    placed = {
        "stage": "scheduled",
        "scheduled": True,
        "node": "w0",
        "devices": [[{"id": "GPU-a100-0", "index": 0, "usedmem": 20000, "usedcores": 30}]],
    }
    assert [{k: v for k, v in pod.items() if k not in ("name", "message")} for pod in result["pods"][:3]] == [placed] * 3
    assert result["pods"][1]["message"] == "find fit node(w0), 0 nodes not fit, 1 nodes fit(w0:6.44)"
    assert result["pods"][3] == {
        "name": "p4",
        "stage": "filter",
        "scheduled": False,
        "reasons": ["CardInsufficientCore"],
        "nodeReasons": {"w0": "1/1 CardInsufficientCore"},
        "message": "0/1 nodes are available: 1 1/1 CardInsufficientCore.",
    }
    assert result["pods"][4]["reasons"] == ["CardInsufficientMemory"]
    assert result["nodes"] == [{"name": "w0", "devices": [{"id": "GPU-a100-0", "used": 3, "usedmem": 60000, "usedcores": 90}]}]


def test_json_usage_policy_and_config_are_honoured():
    l4 = [{**a100(f"GPU-l4-{i}"), "index": i, "type": "NVIDIA L4", "devmem": 23034} for i in range(2)]
    l4[0] |= {"used": 1, "usedmem": 1000, "usedcores": 10}
    document = {
        "policy": {"node": "binpack", "gpu": "binpack"},
        "config": {"defaultMemory": 3000},
        "nodes": [{"name": "w0", "devices": l4}],
        "pods": [{"name": "cores-only", "containers": [{"name": "c", "limits": {"nvidia.com/gpucores": 10}}]}],
    }
    (pod,) = plan_json(document)["pods"]
    # binpack takes the already used card; defaultMemory fills in the missing gpumem.
    assert pod["devices"] == [[{"id": "GPU-l4-0", "index": 0, "usedmem": 3000, "usedcores": 10}]]

    # The node policy: binpack fills the node already in use, spread the idle one.
    idle = [{**card, "id": card["id"].replace("l4", "idle"), "used": 0, "usedmem": 0, "usedcores": 0} for card in l4]
    document["nodes"].append({"name": "w1", "devices": idle})
    assert [pod["node"] for pod in plan_json(document)["pods"]] == ["w0"]
    document["policy"]["node"] = "spread"
    assert [pod["node"] for pod in plan_json(document)["pods"]] == ["w1"]


def test_json_quotas_annotations_and_init_containers():
    document = {
        "quotas": [{"namespace": "team", "gpumem": 30000}],
        "nodes": [{"name": "w0", "devices": [a100()]}, {"name": "bare", "devices": []}],
        "pods": [
            frac_pod("p1", namespace="team"),
            frac_pod("p2", namespace="team"),
            frac_pod("typed", annotations={"nvidia.com/use-gputype": "H100"}),
            {
                "name": "init",
                "initContainers": [{"name": "warm", "limits": {"nvidia.com/gpumem": 1000}}],
                "containers": [{"name": "web", "limits": {"cpu": 1}}],
            },
        ],
    }
    pods = plan_json(document)["pods"]
    assert pods[1]["stage"] == "admission"
    assert pods[1]["reasons"] == []
    assert pods[1]["message"] == 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'
    assert pods[2]["message"] == "0/2 nodes are available: 1 1/1 CardTypeMismatch, 1 node unregistered."
    assert pods[3]["node"] == "w0"
    assert pods[3]["devices"] == [[{"id": "GPU-a100-0", "index": 0, "usedmem": 1000, "usedcores": 0}], []]


def test_an_init_container_fits_the_quota_with_the_earlier_ones_collapsed():
    # score.go allocateInitContainers hands each init container the earlier ones' cards; fitQuota
    # collapses them per card (max, not sum): i1 may share i0's A100 within the quota, not take the L4.
    l4 = {"id": "L4", "index": 1, "type": "NVIDIA L4", "count": 10, "devmem": 23034, "devcore": 100, "health": True}
    slice_ = {"nvidia.com/gpucores": 10}
    document = {
        "quotas": [{"namespace": "default", "gpumem": 35000}],
        "nodes": [{"name": "n1", "devices": [a100("A100") | {"devmem": 40960}, l4]}],
        "pods": [
            {
                "name": "p1",
                "initContainers": [
                    {"name": "i0", "limits": {"nvidia.com/gpumem": 30000, **slice_}},
                    {"name": "i1", "limits": {"nvidia.com/gpumem": 10000, **slice_}},
                ],
                "containers": [{"name": "app", "limits": {"nvidia.com/gpumem": 1000, **slice_}}],
            },
            frac_pod("p2", mem=3000, cores=10),
        ],
    }
    p1, p2 = plan_json(document)["pods"]
    assert [[card["id"] for card in container] for container in p1["devices"]] == [["A100"], ["A100"], ["L4"]]
    assert p2["scheduled"], p2["message"]


def test_a_gpumem_hami_ignores_is_named_not_silently_dropped():
    # HAMi v2.10 reads nvidia.com/gpumem as MiB in an int32: 20Gi voids the container's whole request.
    pod = {"name": "gi", "containers": [{"name": "c", "limits": {"nvidia.com/gpumem": "20Gi", "nvidia.com/gpu": 1}}]}
    (result,) = plan_json({"nodes": [{"name": "w0", "devices": [a100()]}], "pods": [pod]})["pods"]
    assert result["stage"] == "no-gpu"
    assert result["message"] == (
        "nvidia.com/gpumem 20Gi is not a whole number of MiB below 2^31: HAMi v2.10 ignores the GPU request of "
        "container c (for 20Gi write 20480)"
    )


def test_json_pod_without_gpu_and_invalid_weights():
    document = {
        "nodes": [{"name": "w0", "devices": [a100()]}],
        "pods": [
            {"name": "web", "containers": [{"name": "c", "limits": {"cpu": 1}}]},
            frac_pod("weighted", annotations={"hami.io/device-scoring-weights": "slot=1"}),
        ],
    }
    web, weighted = plan_json(document)["pods"]
    assert (web["stage"], web["scheduled"], web["node"], web["devices"]) == ("no-gpu", True, None, [[]])
    assert weighted["stage"] == "error"
    assert weighted["message"].startswith('calcScore failed invalid hami.io/device-scoring-weights annotation "slot=1"')


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{not json", "error: stdin is not JSON: "),
        ('{"nodes": [{"name": "w0", "devices": [{"index": 0}]}]}', "error: w0.devices[0].id: a non-empty string is required"),
        ('{"pods": [{"name": "p", "containers": [{"name": "c", "limits": {"nvidia.com/gpu": "x"}}]}]}', "error: 'x' is not"),
        ('{"config": {"defaultMemory": -1}}', "error: config.defaultMemory: a non-negative integer is required"),
        ('{"nodes": [], "extra": 1}', "error: input: unknown key(s) extra"),
        ("[]", "error: input: expected an object"),
    ],
)
def test_malformed_json_exits_2_with_one_line(stdin, message, capsys):
    code, out = run_main(["--json"], stdin)
    err = capsys.readouterr().err
    assert (code, out) == (2, "")
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_module_entry_point_round_trip_and_exit_2():
    document = {"nodes": [{"name": "w0", "devices": [a100()]}], "pods": [frac_pod("p1")]}
    command = [sys.executable, "-m", "tools.gpuplan", "--json"]
    done = subprocess.run(command, input=json.dumps(document), capture_output=True, text=True, cwd=PROJECT_DIR, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pods"][0]["node"] == "w0"
    failed = subprocess.run(command, input="nope", capture_output=True, text=True, cwd=PROJECT_DIR, check=False)
    assert failed.returncode == 2
    assert failed.stdout == ""
    assert failed.stderr.startswith("error: stdin is not JSON")


# --- --stack / --config with --pods ----------------------------------------------------------


def dev_cards() -> dict[str, list[gpus.Card]]:
    config = load_stack_config(PROJECT_DIR / "Pulumi.dev.yaml")
    return {tenant.name: tenant.cards for tenant in config.tenants}


def cells(line: str) -> list[str]:
    # Columns are padded with at least two spaces; cells themselves hold single spaces only.
    return re.split(r" {2,}", line.strip())


def test_dev_stack_table_for_the_example_pods():
    code, out = run_main(["--stack", "dev", "--pods", str(FRACTIONAL)])
    assert code == 0
    pods_part, cards_part = out.split("\n\n")
    pod_lines = [cells(line) for line in pods_part.splitlines()]
    denied = 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'
    no_memory = "0/1 nodes are available: 1 2/2 CardInsufficientMemory."
    assert pod_lines == [
        ["POD", "TENANT", "CONTAINER", "NODE", "CARD", "MEMORY(MiB)", "CORES(%)", "RESULT"],
        ["fractional-1", "tenant-a", "cuda", "tenant-a-worker-0", "0", "20000", "30", "scheduled"],
        ["fractional-2", "tenant-a", "cuda", "tenant-a-worker-0", "0", "20000", "30", "scheduled"],
        ["fractional-3", "tenant-a", "cuda", "tenant-a-worker-0", "0", "20000", "30", "scheduled"],
        ["fractional-4", "tenant-a", "-", "-", "-", "-", "-", denied],
        ["too-big", "tenant-a", "-", "-", "-", "-", "-", denied],
        ["fractional-1", "tenant-b", "cuda", "tenant-b-worker-0", "1", "20000", "30", "scheduled"],
        ["fractional-2", "tenant-b", "cuda", "tenant-b-worker-0", "0", "20000", "30", "scheduled"],
        ["fractional-3", "tenant-b", "-", "-", "-", "-", "-", no_memory],
        ["fractional-4", "tenant-b", "-", "-", "-", "-", "-", no_memory],
        ["too-big", "tenant-b", "-", "-", "-", "-", "-", no_memory],
    ]
    (a100_card,) = dev_cards()["tenant-a"]
    l4_0, l4_1 = dev_cards()["tenant-b"]
    assert [cells(line) for line in cards_part.splitlines()] == [
        ["TENANT", "NODE", "CARD", "TYPE", "MEMORY(MiB)", "CORES(%)", "TASKS", "ID"],
        ["tenant-a", "tenant-a-worker-0", "0", "NVIDIA A100-SXM4-80GB", "60000/81920", "90/100", "3/10", a100_card.id],
        ["tenant-b", "tenant-b-worker-0", "0", "NVIDIA L4", "20000/23034", "30/100", "1/10", l4_0.id],
        ["tenant-b", "tenant-b-worker-0", "1", "NVIDIA L4", "20000/23034", "30/100", "1/10", l4_1.id],
    ]


def test_without_quota_the_scheduler_reasons_show():
    code, out = run_main(["--stack", "dev", "--pods", str(FRACTIONAL), "--tenant", "tenant-a", "--ignore-quota"])
    assert code == 0
    results = [cells(line)[-1] for line in out.split("\n\n")[0].splitlines()[1:]]
    assert results == [
        "scheduled",
        "scheduled",
        "scheduled",
        "0/1 nodes are available: 1 1/1 CardInsufficientCore.",
        "0/1 nodes are available: 1 1/1 CardInsufficientMemory.",
    ]
    assert "tenant-b" not in out


STACK = """
config:
  gpu-tenancy:tenants:
    - name: alpha
      workers:
        - name: alpha-0
          gpus: [{model: L4, count: 2}]
    - name: beta
      workers:
        - name: beta-0
          gpus: [{model: A100-80GB}]
"""

PODS = """
apiVersion: v1
kind: Pod
metadata:
  name: pinned
  labels: {gpu-tenancy.io/tenant: beta}
spec:
  containers:
    - name: a
      resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 1000}}
---
apiVersion: v1
kind: Pod
metadata: {name: everywhere, namespace: jobs}
spec:
  initContainers:
    - name: fetch
      resources: {requests: {cpu: 1}}
  containers:
    - name: main
      resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 1000, nvidia.com/gpucores: 5}}
    - name: log
      image: busybox
"""


@pytest.fixture
def stack_files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "Pulumi.test.yaml").write_text(STACK)
    (tmp_path / "pods.yaml").write_text(PODS)
    return tmp_path / "Pulumi.test.yaml", tmp_path / "pods.yaml"


def test_config_file_and_tenant_label(stack_files):
    stack, pods = stack_files
    code, out = run_main(["--config", str(stack), "--pods", str(pods)])
    assert code == 0
    alpha = gpus.worker_cards("alpha-0", [("L4", 2)])
    pod_lines = [cells(line) for line in out.split("\n\n")[0].splitlines()[1:]]
    assert pod_lines == [
        ["everywhere", "alpha", "main", "alpha-0", "1", "1000", "5", "scheduled"],
        ["everywhere", "alpha", "main", "alpha-0", "0", "1000", "5", "scheduled"],
        ["pinned", "beta", "-", "-", "-", "-", "-", "0/1 nodes are available: 1 NodeInsufficientDevice."],
        ["everywhere", "beta", "-", "-", "-", "-", "-", "0/1 nodes are available: 1 NodeInsufficientDevice."],
    ]
    assert alpha[1].id in out


def test_unknown_tenant_exits_2(stack_files, capsys):
    stack, pods = stack_files
    code, out = run_main(["--config", str(stack), "--pods", str(pods), "--tenant", "gamma"])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == "error: no tenant 'gamma' in the stack; tenants: alpha, beta\n"


@pytest.mark.parametrize("stack_yaml", ["config: {}\n", "config:\n  gpu-tenancy:tenants: []\n"])
def test_a_stack_without_tenants_exits_2(stack_files, stack_yaml, capsys):
    stack, pods = stack_files
    stack.write_text(stack_yaml)
    code, out = run_main(["--config", str(stack), "--pods", str(pods)])
    assert (code, out) == (2, "")
    expected = f"error: {stack} declares no tenants (gpu-tenancy:tenants): there is nothing to plan pods in\n"
    assert capsys.readouterr().err == expected


def test_config_error_exits_2(tmp_path, capsys):
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  gpu-tenancy:tenants:\n    - name: x\n      workers: [{name: w, gpus: [{model: B200}]}]\n")
    code, out = run_main(["--config", str(bad), "--pods", str(FRACTIONAL)])
    assert (code, out) == (2, "")
    err = capsys.readouterr().err
    assert err.startswith("error: invalid gpu-tenancy stack configuration:")
    assert "unknown GPU model 'B200'" in err


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("kind: Deployment\nmetadata: {name: d}\n", "error: pods.yaml[0]: only kind Pod is planned, got 'Deployment'\n"),
        ("kind: Pod\nmetadata: {}\n", "error: pods.yaml[0].metadata.name: a non-empty name is required\n"),
        ("kind: Pod\nmetadata: {name: [\n", "error: "),
    ],
)
def test_bad_manifests_exit_2(tmp_path, capsys, manifest, message):
    (tmp_path / "pods.yaml").write_text(manifest)
    code, _ = run_main(["--stack", "dev", "--pods", str(tmp_path / "pods.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_missing_files_exit_2(tmp_path, capsys):
    assert run_main(["--stack", "nosuch", "--pods", str(FRACTIONAL)])[0] == 2
    assert capsys.readouterr().err.startswith("error: no such stack config file: ")
    assert run_main(["--stack", "dev", "--pods", str(tmp_path / "none.yaml")])[0] == 2
    assert capsys.readouterr().err.startswith("error: no such pods file: ")
    # A directory is named as one, not as missing.
    assert run_main(["--stack", "dev", "--pods", str(tmp_path)])[0] == 2
    assert capsys.readouterr().err == f"error: pods file {tmp_path} is a directory, not a file\n"
    assert run_main(["--config", str(tmp_path), "--pods", str(FRACTIONAL)])[0] == 2
    assert capsys.readouterr().err == f"error: stack config file {tmp_path} is a directory, not a file\n"


@pytest.mark.parametrize("argv", [["--stack", "dev"], [], ["--json", "--pods", "x.yaml"], ["--json", "--stack", "dev"]])
def test_usage_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exit_:
        run_main(argv)
    assert exit_.value.code == 2


def test_stack_defaults_to_dev():
    assert run_main(["--pods", str(FRACTIONAL)]) == run_main(["--stack", "dev", "--pods", str(FRACTIONAL)])


def test_manifests_naming_another_scheduler_or_a_node_are_read_as_hami_reads_them(stack_files):
    stack, _ = stack_files
    manifests = stack.parent / "special.yaml"
    manifests.write_text(
        """
apiVersion: v1
kind: Pod
metadata: {name: batch, labels: {gpu-tenancy.io/tenant: alpha}}
spec:
  schedulerName: volcano
  containers: [{name: a, resources: {limits: {nvidia.com/gpumem: 1000}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: bound, labels: {gpu-tenancy.io/tenant: alpha}}
spec:
  nodeName: alpha-0
  containers: [{name: a, resources: {limits: {nvidia.com/gpumem: 1000}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: unseen, labels: {gpu-tenancy.io/tenant: alpha, hami.io/webhook: ignore}}
spec:
  containers: [{name: a, resources: {limits: {nvidia.com/gpumem: 1000}}}]
"""
    )
    code, out = run_main(["--config", str(stack), "--pods", str(manifests)])
    assert code == 0
    rows = {row[0]: row for row in (cells(line) for line in out.split("\n\n")[0].splitlines()[1:])}
    assert "HAMi neither schedules it nor counts what it holds" in " ".join(rows["batch"])
    assert "pod has node assigned" in " ".join(rows["bound"])
    assert "labelled hami.io/webhook: ignore" in " ".join(rows["unseen"])


def test_json_pods_carry_labels_scheduler_and_node():
    _, pods = gpuplan.cluster_from_json(
        {
            "pods": [
                {"name": "p", "labels": {"hami.io/webhook": "ignore"}, "schedulerName": "volcano", "nodeName": "n1"},
            ]
        }
    )
    assert (pods[0].labels, pods[0].scheduler_name, pods[0].node_name) == ({"hami.io/webhook": "ignore"}, "volcano", "n1")
    with pytest.raises(gpuplan.PlacementInputError, match=r"pods\[0\]\.schedulerName: a string is required"):
        gpuplan.cluster_from_json({"pods": [{"name": "p", "schedulerName": 3}]})


def test_a_key_given_twice_in_a_pod_manifest_is_refused(tmp_path, capsys):
    # kubectl's strict decoding refuses it; planning the last value would plan another pod.
    pods = tmp_path / "pods.yaml"
    pods.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, name: q}\nspec:\n  containers: [{name: c}]\n")
    assert run_main(["--stack", "dev", "--pods", str(pods)])[0] == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {pods}: not valid YAML: ") and "found the key 'name' twice" in err
