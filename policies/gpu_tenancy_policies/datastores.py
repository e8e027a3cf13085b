"""shared-datastore (advisory): tenants whose control planes keep their state in one etcd.

Every TCP without ``spec.dataStore`` lands on Kamaji's default DataStore (Kamaji's webhook fills
the default name in, so a real run's outputs name it). Tenants there are separated only by etcd
RBAC and a key prefix; quota, compaction and I/O are shared. A DataStore per tenant removes that.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from .findings import Finding
from .stack import ControlPlane, StackView
from .values import UNKNOWN


def check(stack: StackView, default_data_store: str) -> Iterator[Finding]:
    groups: dict[str, list[ControlPlane]] = defaultdict(list)
    for plane in stack.control_planes:
        name = plane.resource.get("spec", "dataStore")
        if name is UNKNOWN:
            continue
        groups[name if isinstance(name, str) and name else default_data_store].append(plane)
    for name, planes in sorted(groups.items()):
        if len(planes) < 2:
            continue
        tenants = sorted(str(plane.tenant) for plane in planes)
        which = f"Kamaji's default DataStore {name!r}" if name == default_data_store else f"the DataStore {name!r}"
        for plane in planes:
            yield Finding(
                f"tenants {', '.join(tenants)} share {which}: one etcd holds their state, separated only by a key prefix; "
                "give each tenant its own DataStore (kamaji-etcd per tenant) for stronger isolation",
                plane.urn,
            )
