"""The dependency graph of a render: what the engine must do in order, and what it may do at once.

Nodes are the resources the engine acts on (custom resources, providers and reads); components
only group them, and the SDK already expands a dependency on a component into its children.
Edges are a resource's dependencies plus its provider, which the engine must have configured
(from its own inputs, such as a kubeconfig) before it can act on the resource.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

TENANT_COMPONENT = "gpu-tenancy:tenant:Tenant"


@dataclass(frozen=True)
class GraphStats:
    resources: int
    steps: int  # resources the engine acts on
    critical_path: list[str]  # "name (Kind)" along the longest dependency chain, first to last
    width: int  # the most steps at one depth: what unlimited parallelism runs at once
    cross_tenant_edges: list[tuple[str, str]]  # (dependent URN, dependency URN) in different tenants


def _is_step(resource: dict[str, Any]) -> bool:
    return bool(resource.get("custom", True)) or "read" in resource


def waits_for(resource: dict[str, Any]) -> list[str]:
    return [*resource["dependencies"], *([resource["provider"]] if resource.get("provider") else [])]


def tenant_of(resources: list[dict[str, Any]]) -> dict[str, str | None]:
    """The tenant each resource belongs to: the Tenant component among its ancestors, if any."""
    by_urn = {r["urn"]: r for r in resources}
    owner: dict[str, str | None] = {}

    def find(urn: str) -> str | None:
        if urn not in owner:
            resource = by_urn.get(urn)
            if resource is None:
                owner[urn] = None
            elif resource["type"] == TENANT_COMPONENT:
                owner[urn] = resource["name"]
            else:
                owner[urn] = find(resource["parent"]) if resource["parent"] else None
        return owner[urn]

    for resource in resources:
        find(resource["urn"])
    return owner


def analyse(resources: list[dict[str, Any]]) -> GraphStats:
    steps = {r["urn"]: r for r in resources if _is_step(r)}
    depth: dict[str, int] = {}
    previous: dict[str, str | None] = {}

    def depth_of(urn: str) -> int:
        if urn not in depth:
            best, via = 0, None
            for dependency in waits_for(steps[urn]):
                if dependency in steps and depth_of(dependency) > best:
                    best, via = depth[dependency], dependency
            depth[urn], previous[urn] = best + 1, via
        return depth[urn]

    last = max(steps, key=depth_of) if steps else None
    path: list[str] = []
    while last is not None:
        step = steps[last]
        path.append(f"{step['name']} ({step['type'].rsplit(':', 1)[-1]})")
        last = previous[last]
    owners = tenant_of(resources)
    cross = [
        (r["urn"], dependency)
        for r in resources
        for dependency in waits_for(r)
        if owners.get(r["urn"]) and owners.get(dependency) and owners[r["urn"]] != owners[dependency]
    ]
    width = max(Counter(depth.values()).values(), default=0)
    return GraphStats(len(resources), len(steps), path[::-1], width, cross)
