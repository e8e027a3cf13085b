"""Plan GPU pods offline the way HAMi v2.10 would admit and place them (gpu_tenancy.placement).

    python -m tools.gpuplan --json < plan.json
    python -m tools.gpuplan [--stack dev] --pods examples/pods/fractional.yaml [--tenant tenant-a] [--ignore-quota]
    python -m tools.gpuplan --config path/to/Pulumi.mystack.yaml --pods pods.yaml

``--json`` reads one object on stdin::

    {"policy": {"node": "binpack", "gpu": "spread"},             (optional, HAMi's defaults)
     "config": {"defaultMemory": 0, "defaultCores": 0, "memoryFactor": 1},     (optional)
     "quotas": [{"namespace": "default", "gpumem": 81920, "gpucores": 100}],    (optional)
     "nodes": [{"name": "n1", "devices": [{"id", "index", "type", "count", "devmem", "devcore",
                "numa", "health", "used", "usedmem", "usedcores"}]}],
     "pods": [{"name": "p", "namespace": "default", "annotations": {...},
               "containers": [{"name": "c", "limits": {"nvidia.com/gpumem": 20000}}]}]}

Devices are ``hami.io/node-nvidia-register`` entries and decode like HAMi does: an omitted key
is Go's zero value, so a device without ``"health": true`` is unhealthy and one without
``count`` has no slots. ``used``/``usedmem``/``usedcores`` (default 0) are existing usage.
Containers may also carry ``requests`` and ``privileged``; pods may carry ``initContainers``,
``labels``, ``schedulerName`` and ``nodeName`` (as the API server received them).
Pods are placed in the given order, each consuming capacity for the next. It writes::

    {"pods": [{"name", "stage": "scheduled", "scheduled": true, "node",
               "devices": [[{"id", "index", "usedmem", "usedcores"}]], "message"}
              | {"name", "stage": "filter"|"admission"|"error", "scheduled": false,
                 "reasons": ["CardInsufficientCore"], "nodeReasons": {"n1": "1/1 CardInsufficientCore"},
                 "message": "0/1 nodes are available: 1 1/1 CardInsufficientCore."}],
     "nodes": [{"name", "devices": [{"id", "used", "usedmem", "usedcores"}]}]}

``devices`` has one list per container, init containers first (HAMi's annotation order). A pod
with no NVIDIA request has stage ``no-gpu``, ``scheduled: true`` and ``node: null``:
kube-scheduler alone places it. A pod HAMi never handles (labelled ``hami.io/webhook: ignore``
without naming ``hami-scheduler``, or naming a scheduler other than ``default-scheduler`` or
``hami-scheduler``) has stage ``not-hami``
and ``scheduled: false``: it holds no card in the plan, and its message says why. (A namespace's
``hami.io/webhook: ignore`` label has the same effect; a Pod manifest does not show it.)
``reasons`` are HAMi's Filter reason names; an admission denial (stage ``admission``) has none,
its message is what kubectl prints.

``--stack``/``--config`` with ``--pods`` plans the Pod manifests of a YAML file (several
documents, ``kind: Pod``) against the inventory the stack declares. Each tenant is its own
cluster, so each pod is planned in:

1. the tenant ``--tenant`` names, for every pod; else
2. the tenant named by the pod's label or annotation ``gpu-tenancy.io/tenant``; else
3. every tenant of the stack, independently (as if the manifest were applied to each).

A tenant's ``quota`` applies to pods in its namespace (``metadata.namespace``, default
``default``), at admission and in Filter, unless ``--ignore-quota``. It prints one row per
allocated card (pod, tenant, container, node, card index, MiB, cores) or the reason, then each
card's memory, cores and task slots in use.

Exit status 2, with the reason on stderr, on malformed input or an invalid stack configuration,
as far as the stack file alone shows it: the checks of addresses against the kind network run in
the program, on the live network at ``pulumi up`` (``tools.render`` runs them against kind's usual
one). A stack without tenants is an error too: there is nothing to plan in. 0 otherwise, whether
or not every pod fits.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpu_tenancy.config import ConfigError, StackConfig, Tenant
from gpu_tenancy.placement import (
    STAGE_NO_GPU,
    Cluster,
    Container,
    GpuQuota,
    Node,
    PlacementInputError,
    Pod,
    PodResult,
    SchedulerConfig,
)
from gpu_tenancy.stack_file import UniqueKeyLoader, load_stack_config, missing_file, stack_file
from tools import cli

PROJECT_DIR = Path(__file__).resolve().parent.parent
TENANT_KEY = "gpu-tenancy.io/tenant"


# --- shared decoding -------------------------------------------------------------------------


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PlacementInputError(f"{where}: expected an object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise PlacementInputError(f"{where}: expected a list")
    return value


def _string_map(value: object, where: str) -> dict[str, str]:
    mapping = _object(value, where)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise PlacementInputError(f"{where}: expected string keys and string values")
    return dict(mapping)


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise PlacementInputError(f"{where}: a non-empty name is required")
    return value


def _optional_string(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PlacementInputError(f"{where}: a string is required")
    return value


def _resources(value: object, where: str) -> dict[str, Any]:
    mapping = _object(value, where)
    for key, quantity in mapping.items():
        if not isinstance(key, str) or isinstance(quantity, bool) or not isinstance(quantity, int | float | str):
            raise PlacementInputError(f"{where}.{key}: expected a resource quantity, got {quantity!r}")
    return dict(mapping)


def _container(raw: object, where: str, *, manifest: bool) -> Container:
    item = _object(raw, where)
    if manifest:
        resources = _object(item.get("resources") or {}, f"{where}.resources")
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        privileged = _object(item.get("securityContext") or {}, f"{where}.securityContext").get("privileged", False)
    else:
        limits, requests, privileged = item.get("limits") or {}, item.get("requests") or {}, item.get("privileged", False)
    if not isinstance(privileged, bool):
        raise PlacementInputError(f"{where}: privileged must be true or false")
    return Container(
        _name(item.get("name"), f"{where}.name"),
        _resources(limits, f"{where}.limits"),
        _resources(requests, f"{where}.requests"),
        privileged,
    )


def _containers(raw: object, where: str, *, manifest: bool) -> tuple[Container, ...]:
    return tuple(_container(item, f"{where}[{i}]", manifest=manifest) for i, item in enumerate(_list(raw, where)))


# --- --json ----------------------------------------------------------------------------------


def _config(document: Mapping[str, Any]) -> SchedulerConfig:
    policy = _object(document.get("policy") or {}, "policy")
    overrides = _object(document.get("config") or {}, "config")
    known = {
        "defaultMemory": "default_memory",
        "defaultCores": "default_cores",
        "memoryFactor": "memory_factor",
        "defaultGPUNum": "default_gpu_num",
    }
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise PlacementInputError(f"config: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(known)}")
    values: dict[str, Any] = {}
    for key, attribute in known.items():
        if key in overrides:
            value = overrides[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlacementInputError(f"config.{key}: a non-negative integer is required")
            values[attribute] = value
    for key in ("node", "gpu"):
        if key in policy:
            if not isinstance(policy[key], str):
                raise PlacementInputError(f"policy.{key}: a string is required")
            values[f"{key}_policy"] = policy[key]
    return SchedulerConfig(**values)


def _json_pod(raw: object, where: str) -> Pod:
    item = _object(raw, where)
    return Pod(
        name=_name(item.get("name"), f"{where}.name"),
        namespace=_name(item.get("namespace", "default"), f"{where}.namespace"),
        annotations=_string_map(item.get("annotations") or {}, f"{where}.annotations"),
        containers=_containers(item.get("containers") or [], f"{where}.containers", manifest=False),
        init_containers=_containers(item.get("initContainers") or [], f"{where}.initContainers", manifest=False),
        labels=_string_map(item.get("labels") or {}, f"{where}.labels"),
        scheduler_name=_optional_string(item.get("schedulerName"), f"{where}.schedulerName"),
        node_name=_optional_string(item.get("nodeName"), f"{where}.nodeName"),
    )


def _json_node(raw: object, where: str) -> Node:
    item = _object(raw, where)
    name = _name(item.get("name"), f"{where}.name")
    node = Node.from_register_entries(name, _list(item.get("devices", []), f"{where}.devices"))
    cordoned = item.get("cordoned", [])
    if not isinstance(cordoned, list) or not all(isinstance(card, str) for card in cordoned):
        raise PlacementInputError(f"{where}.cordoned: a list of device ids is required")
    node.cordoned = frozenset(cordoned)
    return node


def _json_quota(raw: object, where: str) -> GpuQuota:
    item = _object(raw, where)
    limits: dict[str, int | None] = {}
    for key in ("gpumem", "gpucores"):
        value = item.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise PlacementInputError(f"{where}.{key}: a non-negative integer is required")
        limits[key] = value
    return GpuQuota(_name(item.get("namespace", "default"), f"{where}.namespace"), limits["gpumem"], limits["gpucores"])


def cluster_from_json(document: object) -> tuple[Cluster, list[Pod]]:
    """The cluster and pods a ``--json`` document describes."""
    doc = _object(document, "input")
    unknown = sorted(set(doc) - {"policy", "config", "quotas", "nodes", "pods"})
    if unknown:
        raise PlacementInputError(f"input: unknown key(s) {', '.join(unknown)}")
    nodes = [_json_node(item, f"nodes[{i}]") for i, item in enumerate(_list(doc.get("nodes", []), "nodes"))]
    pods = [_json_pod(item, f"pods[{i}]") for i, item in enumerate(_list(doc.get("pods", []), "pods"))]
    quotas = [_json_quota(item, f"quotas[{i}]") for i, item in enumerate(_list(doc.get("quotas", []), "quotas"))]
    return Cluster(nodes, _config(doc), {quota.namespace: quota for quota in quotas}), pods


def result_json(result: PodResult) -> dict[str, Any]:
    body: dict[str, Any] = {"name": result.pod, "stage": result.stage, "scheduled": result.scheduled}
    if result.scheduled:
        body["node"] = result.node
        body["devices"] = [
            [{"id": a.id, "index": a.index, "usedmem": a.usedmem, "usedcores": a.usedcores} for a in container]
            for container in result.devices
        ]
    else:
        body["reasons"] = list(result.reasons)
        body["nodeReasons"] = dict(result.node_reasons)
    body["message"] = result.message
    return body


def nodes_json(nodes: Sequence[Node]) -> list[dict[str, Any]]:
    return [
        {
            "name": node.name,
            "devices": [{"id": d.id, "used": d.used, "usedmem": d.usedmem, "usedcores": d.usedcores} for d in node.devices],
        }
        for node in nodes
    ]


def run_json(stdin: TextIO, stdout: TextIO) -> None:
    try:
        document = json.load(stdin)
    except json.JSONDecodeError as error:
        raise PlacementInputError(f"stdin is not JSON: {error}") from None
    except ValueError as error:  # not UTF-8, or an integer of more digits than Python converts
        raise PlacementInputError(f"cannot read stdin: {error}") from None
    except RecursionError:
        raise PlacementInputError("cannot read stdin: the JSON is nested too deeply") from None
    cluster, pods = cluster_from_json(document)
    results = cluster.plan(pods)
    json.dump({"pods": [result_json(r) for r in results], "nodes": nodes_json(cluster.nodes)}, stdout, indent=2)
    stdout.write("\n")


# --- --stack/--config --pods -----------------------------------------------------------------


def manifest_pod(document: object, where: str) -> tuple[Pod, str | None]:
    """A Pod manifest as the model's pod, plus the tenant its ``gpu-tenancy.io/tenant`` names."""
    manifest = _object(document, where)
    if manifest.get("kind") != "Pod":
        raise PlacementInputError(f"{where}: only kind Pod is planned, got {manifest.get('kind')!r}")
    metadata = _object(manifest.get("metadata") or {}, f"{where}.metadata")
    spec = _object(manifest.get("spec") or {}, f"{where}.spec")
    labels = _string_map(metadata.get("labels") or {}, f"{where}.metadata.labels")
    annotations = _string_map(metadata.get("annotations") or {}, f"{where}.metadata.annotations")
    pod = Pod(
        name=_name(metadata.get("name"), f"{where}.metadata.name"),
        namespace=_name(metadata.get("namespace", "default"), f"{where}.metadata.namespace"),
        annotations=annotations,
        containers=_containers(spec.get("containers") or [], f"{where}.spec.containers", manifest=True),
        init_containers=_containers(spec.get("initContainers") or [], f"{where}.spec.initContainers", manifest=True),
        labels=labels,
        scheduler_name=_optional_string(spec.get("schedulerName"), f"{where}.spec.schedulerName"),
        node_name=_optional_string(spec.get("nodeName"), f"{where}.spec.nodeName"),
    )
    return pod, labels.get(TENANT_KEY, annotations.get(TENANT_KEY))


def read_manifests(path: Path) -> list[tuple[Pod, str | None]]:
    try:
        text = path.read_text(encoding="utf-8")
        documents = [doc for doc in yaml.load_all(text, Loader=UniqueKeyLoader) if doc is not None]
    except UnicodeDecodeError as error:  # kubectl reads manifests as UTF-8 whatever the locale
        raise PlacementInputError(f"{path}: not UTF-8 text: byte {error.start} cannot be decoded") from None
    # ValueError: a value its tag cannot hold, or an integer of more digits than Python converts.
    except (yaml.YAMLError, ValueError) as error:
        raise PlacementInputError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise PlacementInputError(f"{path}: not valid YAML: nested too deeply") from None
    return [manifest_pod(doc, f"{path.name}[{i}]") for i, doc in enumerate(documents)]


def assign_tenants(
    pods: Sequence[tuple[Pod, str | None]], config: StackConfig, forced: str | None
) -> list[tuple[Tenant, list[Pod]]]:
    """Each tenant with the pods planned in it, in stack order and file order (module docstring)."""
    names = [tenant.name for tenant in config.tenants]
    for requested in [forced, *(hint for _, hint in pods)]:
        if requested is not None and requested not in names:
            raise PlacementInputError(f"no tenant {requested!r} in the stack; tenants: {', '.join(names) or 'none'}")
    return [
        (tenant, [pod for pod, hint in pods if (forced or hint or tenant.name) == tenant.name])
        for tenant in config.tenants
        if forced is None or tenant.name == forced
    ]


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows)


POD_HEADER = ("POD", "TENANT", "CONTAINER", "NODE", "CARD", "MEMORY(MiB)", "CORES(%)", "RESULT")
CARD_HEADER = ("TENANT", "NODE", "CARD", "TYPE", "MEMORY(MiB)", "CORES(%)", "TASKS", "ID")


def pod_rows(tenant: str, pod: Pod, result: PodResult) -> list[tuple[str, ...]]:
    """One row per card the pod was given, or one row with why it was not."""
    if result.stage == STAGE_NO_GPU:
        why = f" ({result.message})" if result.message else ""
        return [(pod.name, tenant, "-", "-", "-", "-", "-", f"no NVIDIA request{why}: kube-scheduler places it")]
    if not result.scheduled:
        return [(pod.name, tenant, "-", "-", "-", "-", "-", result.message)]
    names = [container.name for container in pod.all_containers]
    return [
        (pod.name, tenant, name, result.node or "-", str(a.index), str(a.usedmem), str(a.usedcores), "scheduled")
        for name, allocations in zip(names, result.devices, strict=True)
        for a in allocations
    ]


def card_rows(tenant: str, cluster: Cluster) -> list[tuple[str, ...]]:
    return [
        (
            tenant,
            node.name,
            str(d.index),
            d.type,
            f"{d.usedmem}/{d.devmem}",
            f"{d.usedcores}/{d.devcore}",
            f"{d.used}/{d.count}",
            d.id,
        )
        for node in cluster.nodes
        for d in node.devices
    ]


def run_stack(path: Path, pods_file: Path, forced: str | None, with_quota: bool, stdout: TextIO) -> None:
    for file, what in ((path, "stack config file"), (pods_file, "pods file")):
        if problem := missing_file(file, what):
            raise PlacementInputError(problem)
    config = load_stack_config(path)
    if not config.tenants:
        raise PlacementInputError(f"{path} declares no tenants (gpu-tenancy:tenants): there is nothing to plan pods in")
    pods = read_manifests(pods_file)
    pod_table: list[tuple[str, ...]] = [POD_HEADER]
    card_table: list[tuple[str, ...]] = [CARD_HEADER]
    for tenant, tenant_pods in assign_tenants(pods, config, forced):
        cluster = Cluster.from_tenant(tenant, with_quota=with_quota)
        for pod in tenant_pods:
            pod_table.extend(pod_rows(tenant.name, pod, cluster.schedule(pod)))
        card_table.extend(card_rows(tenant.name, cluster))
    stdout.write(_table(pod_table) + "\n\n" + _table(card_table) + "\n")


# --- entry point -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpuplan", description=(__doc__ or "").split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="read a cluster and pods as JSON on stdin, write the plan as JSON")
    mode.add_argument("--stack", help="plan against Pulumi.<stack>.yaml of this project (default: dev)")
    mode.add_argument("--config", type=Path, help="plan against any file in the Pulumi.<stack>.yaml format")
    parser.add_argument("--pods", type=Path, help="YAML file of Pod manifests (with --stack/--config)")
    parser.add_argument("--tenant", help="plan every pod in this tenant only")
    parser.add_argument("--ignore-quota", action="store_true", help="leave the tenants' GPU quotas out")
    args = parser.parse_args(argv)
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    if args.json and (args.pods or args.tenant or args.ignore_quota):
        parser.error("--pods, --tenant and --ignore-quota apply to --stack/--config, not --json")
    if not args.json and args.pods is None:
        parser.error("--pods is required with --stack/--config")
    try:
        if args.json:
            run_json(stdin, stdout)
        else:
            path = args.config if args.config is not None else stack_file(args.stack or "dev")
            run_stack(path, args.pods, args.tenant, not args.ignore_quota, stdout)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # a reader that stopped early: tools.cli's exit, not malformed input
    except (PlacementInputError, OSError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
