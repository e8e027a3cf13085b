"""How render and deploy cost grow with the number of tenants.

    python -m tools.bench [--tenants 2,10,50,100] [--repeat 3] [--json]

For each N it renders a generated stack of N tenants (two docker workers each, two L4 each) in a
fresh process, as ``tools.render`` runs (collector off), and reports the render's wall time (after
a one-tenant warm-up that pays the interpreter's and SDKs' import time, reported as startup), the
process's peak memory, the resource count, the dependency graph's critical path (resources on its
longest chain: the lower bound of ``pulumi up``'s wall time at unlimited parallelism, counted in
steps) and width, and the dependency edges between different tenants' resources (there must be
none). The marginal cost is the render time added per tenant between consecutive sizes. With
``--repeat K`` each timing is the fastest of K runs in that process (timeit's rule: the slower runs
measure the machine's other work, not the program's).

Two floors put the render time in proportion, each measured like the render:

- the SDK floor: as many bare resources, each with a single string input and nothing else, the
  least the Pulumi SDK spends per resource on this interpreter;
- the replay floor: the render's own resources registered again, each as an instance of its SDK
  class with the inputs the render recorded, but without the program: no component logic, no
  outputs flowing between resources. What the render costs above it is the program's own work.

The interpreter is reported too: its build (with PGO and LTO or not) moves every figure by 20-30 %.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_tenancy import addressing
from tools import cli

PROJECT_DIR = Path(__file__).resolve().parent.parent
# Inside kind's usual 172.18.0.0/16 and large enough for hundreds of tenant VIPs.
SCALE_POOL = "172.18.128.0-172.18.255.254"  # not the broadcast address


def scale_config(tenants: int) -> dict[str, Any]:
    """``gpu-tenancy`` keys of a stack with ``tenants`` tenants, two workers with two L4 each.

    VIPs are derived from the names, except where two names hash to one address: the later tenant
    is pinned to the address the config's error offers, as a user would.
    """
    names = [f"tenant-{i:03d}" for i in range(tenants)]
    pool = addressing.AddressPool.parse(SCALE_POOL)
    pinned = {
        clash.tenant: str(pool.address(clash.free))
        for clash in addressing.vip_clashes(len(pool), [(name, None) for name in names])
        if clash.free is not None
    }
    return {
        "network": {"pool": SCALE_POOL},
        "tenants": [
            {
                "name": name,
                **({"vip": pinned[i]} if i in pinned else {}),
                "workers": [{"name": f"{name}-worker-{j}", "gpus": [{"model": "L4", "count": 2}]} for j in range(2)],
            }
            for i, name in enumerate(names)
        ],
    }


def _as_config(tenants: int) -> dict[str, str]:
    return {f"gpu-tenancy:{key}": json.dumps(value) for key, value in scale_config(tenants).items()}


def interpreter() -> str:
    """The interpreter behind this process, through any virtualenv."""
    return f"{platform.python_implementation()} {platform.python_version()} ({getattr(sys, '_base_executable', sys.executable)})"


def bare_program(count: int) -> Callable[[], None]:
    """A program of ``count`` custom resources with one string input each."""
    import pulumi  # noqa: PLC0415 - only in the measuring process, after gc.disable()

    def program() -> None:
        for index in range(count):
            pulumi.CustomResource("gpu-tenancy:bench:Bare", f"bare-{index}", {"name": f"bare-{index}"})

    return program


def replay_program(resources: list[dict[str, Any]]) -> Callable[[], None]:
    """A program that registers ``resources`` (a render's records, secrets shown) once more.

    Each custom resource becomes an instance of the SDK class its type token names, so the SDK
    creates an output for every property of the class, as it does for the program; its inputs are
    the recorded plain values. Components stay components, reads stay reads.
    """
    import pulumi  # noqa: PLC0415 - only in the measuring process, after gc.disable()
    from pulumi import _types  # noqa: PLC0415

    def instance(type_: str) -> pulumi.CustomResource:
        package, module, _ = type_.split(":")
        registered = pulumi.runtime.rpc.get_resource_module(package, module, "")
        info = getattr(registered, "mod_info", None) or {}
        class_name = info.get("classes", {}).get(type_)
        # A CRD's kind (Kamaji's TenantControlPlane) has no generated class; the SDK's base is its class.
        cls = getattr(importlib.import_module(info["fqn"]), class_name) if class_name else pulumi.CustomResource
        return cls.__new__(cls)

    def register(record: dict[str, Any]) -> None:
        if not record["custom"]:
            pulumi.ComponentResource(record["type"], record["name"]).register_outputs({})
            return
        if record["type"].startswith("pulumi:providers:"):
            pulumi.ProviderResource(record["type"].rsplit(":", 1)[-1], record["name"], record["inputs"])
            return
        resource = instance(record["type"])
        python_names = {engine: python for python, engine, _ in _types._py_properties(type(resource))}
        inputs = {python_names.get(key, key): value for key, value in record["inputs"].items()}
        props = dict.fromkeys(python_names.values()) | inputs
        opts = pulumi.ResourceOptions(id=record["read"]) if "read" in record else None
        pulumi.CustomResource.__init__(resource, record["type"], record["name"], props, opts)

    def program() -> None:
        for record in resources:
            register(record)

    return program


def _fresh_render(config: dict[str, str]) -> object:
    """A render as the first one ran: the mock's kubeconfigs (real certificates) made anew."""
    from tools import harness, mock_cloud  # noqa: PLC0415 - only in the measuring process

    mock_cloud.kubeconfig.cache_clear()
    return harness.render(config, stack="bench", show_secrets=True)


def _fastest(repeat: int, run: Callable[[], object]) -> float:
    """The shortest of ``repeat`` timed runs, each from a collected heap."""
    import gc  # noqa: PLC0415
    import time  # noqa: PLC0415

    times = []
    for _ in range(repeat):
        gc.collect()  # the previous run's cycles
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def _measure(tenants: int, repeat: int = 1) -> dict[str, Any]:
    """One size, in this process: meant to run in a fresh interpreter (``--one``)."""
    import gc  # noqa: PLC0415 - the collector goes off before the SDKs are imported, as in tools.render
    import resource  # noqa: PLC0415
    import time  # noqa: PLC0415

    gc.disable()
    started = time.perf_counter()
    from tools import harness, render_graph  # noqa: PLC0415

    # One tenant first: the program's first run also imports the SDK modules it uses lazily.
    harness.render(_as_config(1), stack="bench")
    warm = time.perf_counter()
    config = _as_config(tenants)
    render = harness.render(config, stack="bench", show_secrets=True)
    render_seconds = time.perf_counter() - warm
    # Before any repetition: the peak of one render of this size.
    peak_memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if repeat > 1:
        again = _fastest(repeat - 1, lambda: _fresh_render(config))
        render_seconds = min(render_seconds, again)
    floor_seconds = _fastest(repeat, lambda: harness.render({}, stack="bench", program=bare_program(len(render.resources))))
    replay_seconds = _fastest(repeat, lambda: harness.render({}, stack="bench", program=replay_program(render.resources)))
    stats = render_graph.analyse(render.resources)
    return {
        "python": interpreter(),
        "tenants": tenants,
        "resources": stats.resources,
        "steps": stats.steps,
        "startupSeconds": round(warm - started, 3),
        "renderSeconds": round(render_seconds, 3),
        "floorSeconds": round(floor_seconds, 3),
        "replaySeconds": round(replay_seconds, 3),
        "repeat": repeat,
        "peakMemoryMiB": round(peak_memory / 1024, 1),
        "criticalPath": len(stats.critical_path),
        "criticalPathSteps": stats.critical_path,
        "width": stats.width,
        "crossTenantEdges": len(stats.cross_tenant_edges),
    }


def measure(tenants: int, repeat: int = 1) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--one", str(tenants), "--repeat", str(repeat)],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"rendering {tenants} tenants failed:\n{result.stderr.strip()}")
    return json.loads(result.stdout)


def with_marginal_cost(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for before, after in itertools.pairwise(rows):
        added = after["tenants"] - before["tenants"]
        after["marginalMsPerTenant"] = round((after["renderSeconds"] - before["renderSeconds"]) / added * 1000, 1)
        after["floorMsPerTenant"] = round((after["floorSeconds"] - before["floorSeconds"]) / added * 1000, 1)
        after["replayMsPerTenant"] = round((after["replaySeconds"] - before["replaySeconds"]) / added * 1000, 1)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    header = (
        "TENANTS",
        "RESOURCES",
        "RENDER(s)",
        "MARGINAL(ms/tenant)",
        "SDK FLOOR(ms/tenant)",
        "REPLAY FLOOR(ms/tenant)",
        "PEAK(MiB)",
        "CRITICAL PATH",
        "WIDTH",
        "CROSS-TENANT EDGES",
    )
    lines = [header] + [
        (
            str(row["tenants"]),
            str(row["resources"]),
            f"{row['renderSeconds']:.2f}",
            str(row.get("marginalMsPerTenant", "-")),
            str(row.get("floorMsPerTenant", "-")),
            str(row.get("replayMsPerTenant", "-")),
            f"{row['peakMemoryMiB']:.0f}",
            str(row["criticalPath"]),
            str(row["width"]),
            str(row["crossTenantEdges"]),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines]
    if not rows:
        return ""
    critical = " -> ".join(rows[-1]["criticalPathSteps"])
    return "\n".join(
        [*rendered, "", f"critical path at {rows[-1]['tenants']} tenants: {critical}", f"interpreter: {rows[-1]['python']}"]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", default="2,10,50,100", help="comma-separated stack sizes (default 2,10,50,100)")
    parser.add_argument("--repeat", type=int, default=1, help="time each size K times and keep the fastest (default 1)")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat needs at least 1")
    if args.one is not None:
        print(json.dumps(_measure(args.one, args.repeat)))
        return 0
    try:
        sizes = sorted({int(size) for size in args.tenants.split(",")})
    except ValueError:
        parser.error(f"--tenants takes comma-separated integers, not {args.tenants!r}")
    if not sizes or sizes[0] < 1:
        parser.error("--tenants needs sizes of at least 1")
    rows = with_marginal_cost([measure(size, args.repeat) for size in sizes])
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
