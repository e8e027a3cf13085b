"""Guarantees about growth, on the dependency graph rather than on timings."""

from __future__ import annotations

import copy
import itertools
import json
import platform
import time
from typing import Any

import pytest

from gpu_tenancy import addressing
from gpu_tenancy.config import StackConfig
from tests.conftest import render_config
from tools import bench, harness, render_graph


def render_tenants(tenants: int) -> harness.Render:
    return render_config(bench.scale_config(tenants))


@pytest.fixture(scope="module")
def small() -> harness.Render:
    return render_tenants(2)


@pytest.fixture(scope="module")
def large() -> harness.Render:
    return render_tenants(12)


def test_the_critical_path_does_not_grow_with_tenants(small: harness.Render, large: harness.Render) -> None:
    short, long = render_graph.analyse(small.resources), render_graph.analyse(large.resources)
    assert len(short.critical_path) == len(long.critical_path)
    assert long.critical_path[:2] == [
        "gpu-tenancy-management-kind-owner (RandomUuid)",
        "gpu-tenancy-management-kind-cluster (Command)",
    ]
    assert long.critical_path[-1].endswith("-hami (Release)")
    assert len(long.critical_path) == 13
    # Width is what grows: tenants are built side by side.
    assert long.width >= short.width * 4


def test_no_dependency_edge_joins_two_tenants(large: harness.Render, dev: harness.Render) -> None:
    for render in (large, dev):
        stats = render_graph.analyse(render.resources)
        assert stats.cross_tenant_edges == []
    owners = render_graph.tenant_of(large.resources)
    assert {owner for owner in owners.values() if owner} == {f"tenant-{i:03d}" for i in range(12)}


def test_the_cross_tenant_check_finds_an_injected_edge(large: harness.Render) -> None:
    resources = copy.deepcopy(large.resources)
    join = next(r for r in resources if r["name"] == "tenant-001-worker-0-join")
    join["dependencies"].append(next(r["urn"] for r in resources if r["name"] == "tenant-002-hami"))
    assert len(render_graph.analyse(resources).cross_tenant_edges) == 1


def inputs_by_urn(render: harness.Render) -> dict[str, Any]:
    return {r["urn"]: json.dumps(r["inputs"], sort_keys=True) for r in render.resources}


def test_adding_a_tenant_changes_no_other_resources_inputs(small: harness.Render) -> None:
    config = bench.scale_config(2)
    config["tenants"].append({"name": "tenant-new", "workers": [{"name": "tenant-new-worker-0", "gpus": [{"model": "T4"}]}]})
    grown = inputs_by_urn(render_config(config))
    before = inputs_by_urn(small)
    assert set(before) < set(grown)
    changed = [urn for urn, inputs in before.items() if grown[urn] != inputs]
    assert changed == []


def test_removing_a_tenant_changes_no_other_resources_inputs(small: harness.Render) -> None:
    config = bench.scale_config(2)
    del config["tenants"][0]
    shrunk = inputs_by_urn(render_config(config))
    before = inputs_by_urn(small)
    assert [urn for urn, inputs in shrunk.items() if before[urn] != inputs] == []


def test_a_tenant_that_would_take_anothers_vip_is_refused_rather_than_moving_it() -> None:
    config = bench.scale_config(2)
    pool = addressing.AddressPool.parse(bench.SCALE_POOL)

    def vip(name: str) -> addressing.IPv4:
        return addressing.assign_vips(pool, [(name, None)])[name]

    clashing = next(name for name in (f"team-{i}" for i in itertools.count()) if vip(name) == vip("tenant-001"))
    config["tenants"].insert(0, {"name": clashing})
    with pytest.raises(harness.RenderError, match=rf"tenants\[2\]\.vip: 'tenant-001' and tenants\[0\] \('{clashing}'\)"):
        render_config(config)


def test_generated_stacks_pin_only_the_tenants_whose_names_clash() -> None:
    tenants = bench.scale_config(200)["tenants"]
    # tenant-105 hashes to tenant-011's address in the bench's pool.
    assert [(tenant["name"], tenant["vip"]) for tenant in tenants if "vip" in tenant] == [("tenant-105", "172.18.244.82")]
    assert StackConfig.load({"network": {"pool": bench.SCALE_POOL}, "tenants": tenants})


def test_two_renders_of_one_config_produce_identical_inputs(large: harness.Render) -> None:
    assert inputs_by_urn(render_tenants(12)) == inputs_by_urn(large)


def test_bench_reports_the_graph_of_each_size(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[int, int]] = []

    def measure(tenants: int, repeat: int) -> dict[str, Any]:
        calls.append((tenants, repeat))
        return {
            "python": "CPython 3.11.7 (/usr/bin/python3)",
            "tenants": tenants,
            "resources": 40 * tenants,
            "steps": 30 * tenants,
            "startupSeconds": 1.0,
            "renderSeconds": 0.1 * tenants,
            "floorSeconds": 0.04 * tenants,
            "replaySeconds": 0.08 * tenants,
            "peakMemoryMiB": 100.0,
            "criticalPath": 9,
            "criticalPathSteps": ["a", "b"],
            "width": 7 * tenants,
            "crossTenantEdges": 0,
        }

    monkeypatch.setattr(bench, "measure", measure)
    assert bench.main(["--tenants", "10,2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert calls == [(2, 1), (10, 1)]
    assert rows[1]["marginalMsPerTenant"] == 100.0
    assert rows[1]["floorMsPerTenant"] == 40.0
    assert rows[1]["replayMsPerTenant"] == 80.0
    assert "marginalMsPerTenant" not in rows[0]

    assert bench.main(["--tenants", "2,10"]) == 0
    table = capsys.readouterr().out
    assert "SDK FLOOR(ms/tenant)  REPLAY FLOOR(ms/tenant)" in table.splitlines()[0]
    assert table.splitlines()[2].split()[3:6] == ["100.0", "40.0", "80.0"]
    assert "interpreter: CPython 3.11.7 (/usr/bin/python3)" in table

    calls.clear()
    assert bench.main(["--tenants", "2", "--repeat", "3"]) == 0
    assert calls == [(2, 3)]
    with pytest.raises(SystemExit):
        bench.main(["--tenants", "2", "--repeat", "0"])


def test_fastest_keeps_the_shortest_of_the_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 5.0, 10.0, 12.0, 20.0, 23.0])  # runs of 5, 2 and 3 seconds
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    runs: list[int] = []
    assert bench._fastest(3, lambda: runs.append(1)) == 2.0
    assert len(runs) == 3


def test_bench_measures_a_real_render_in_a_fresh_process() -> None:
    row = bench.measure(1, repeat=2)
    assert row["repeat"] == 2
    assert row["tenants"] == 1 and row["resources"] > 30
    assert row["crossTenantEdges"] == 0
    assert row["criticalPath"] == len(row["criticalPathSteps"]) >= 5
    assert row["renderSeconds"] > 0 and row["peakMemoryMiB"] > 50
    assert 0 < row["floorSeconds"] < row["renderSeconds"]
    assert row["replaySeconds"] > 0
    assert row["python"].startswith(platform.python_implementation())


def test_the_floor_program_registers_bare_resources_in_place_of_the_project() -> None:
    render = harness.render({}, stack="bench", program=bench.bare_program(3))
    assert [(r["type"], r["name"], r["inputs"]) for r in render.resources] == [
        ("gpu-tenancy:bench:Bare", f"bare-{i}", {"name": f"bare-{i}"}) for i in range(3)
    ]
    assert render.outputs == {}


def test_the_replay_program_registers_the_renders_resources_again() -> None:
    original = harness.render(bench._as_config(2), stack="bench", show_secrets=True)
    replay = harness.render({}, stack="bench", program=bench.replay_program(original.resources))

    def kinds(render: harness.Render) -> list[tuple[str, str, bool, bool]]:
        return sorted((r["type"], r["name"], r["custom"], "read" in r) for r in render.resources)

    assert kinds(replay) == kinds(original)
    # Each resource carries as many inputs as in the program, under the SDK class's property names.
    replayed = {(r["type"], r["name"]): r["inputs"] for r in replay.resources}
    for record in original.resources:
        assert len(replayed[record["type"], record["name"]]) == len(record["inputs"]), record["name"]
    container = next(r for r in replay.resources if r["type"] == "docker:index/container:Container")
    assert container["inputs"]["networks_advanced"][0]["name"] == "kind"
    # Nothing flows between the replayed resources: that is the program's work, left out.
    assert all(r["dependencies"] == [] for r in replay.resources)
