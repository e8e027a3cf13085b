"""hami-on-tenants-only and gpu-quota-within-inventory: GPU slicing lives in tenants, within their cards."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, Final

from gpu_tenancy import gpus

from . import kinds, providers
from .findings import Finding
from .stack import ResourceView, StackView, as_int
from .values import UNKNOWN, dig

# HAMi's DeviceInfo keys and their JSON types (Project-HAMi/HAMi@v2.10.0:pkg/device/devices.go),
# the shape gpu_tenancy.gpus.Card.register_entry writes.
_ENTRY_FIELDS: Final = {
    "id": str,
    "index": int,
    "count": int,
    "devmem": int,
    "devcore": int,
    "type": str,
    "numa": int,
    "mode": str,
    "health": bool,
}
# HAMi enforces the limits. keys; Kubernetes enforces requests. keys of extended resources itself
# (on the raw per-container number). Either one above the inventory is a promise nothing keeps.
QUOTA_KEYS: Final = {
    f"{prefix}.{resource}": name
    for prefix in ("limits", "requests")
    for resource, name in ((gpus.GPU_MEMORY_RESOURCE, "gpumem"), (gpus.GPU_CORES_RESOURCE, "gpucores"))
}
_BY_HAMI_TYPE: Final = {model.hami_type: model for model in gpus.CATALOGUE.values()}
_QUANTITY: Final = re.compile(r"^(\d+)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_MULTIPLIERS: Final = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def is_hami(resource: ResourceView) -> bool:
    return resource.type in kinds.HELM_TYPES and kinds.chart_name(resource.get("chart")) == kinds.HAMI_CHART


def check_hami_placement(stack: StackView) -> Iterator[Finding]:
    for release in stack.resources:
        if not is_hami(release):
            continue
        provider = release.provider
        if provider is None or provider.is_default:
            yield Finding(
                f"HAMi ({release.name}) is installed through the default Kubernetes provider, i.e. whatever cluster the "
                "ambient kubeconfig names; install it through a tenant's provider",
                release.urn,
            )
        elif provider.urn in stack.management_providers:
            yield Finding(
                f"HAMi ({release.name}) is installed through the management cluster's provider {provider.name}: its "
                "scheduler and webhook would govern the cluster that runs every tenant's control plane",
                release.urn,
            )
        elif len(tenants := stack.tenants_of_provider(provider.urn)) != 1 and not (
            not tenants and stack.reaches_unknown_tenant(provider.urn)
        ):
            yield Finding(
                f"HAMi ({release.name}) is installed through provider {provider.name}, built from "
                f"{providers.built_from(tenants)}: install it through one tenant's provider",
                release.urn,
            )


def parse_registration(value: str) -> tuple[list[gpus.Card], list[str]]:
    """The cards a ``hami.io/node-nvidia-register`` value announces, and what is wrong with it."""
    try:
        entries = json.loads(value)
    except json.JSONDecodeError as error:
        return [], [f"is not JSON ({error.msg}); HAMi >= 2.8 parses only the JSON form"]
    if not isinstance(entries, list) or not entries:
        return [], ["must be a non-empty JSON list of devices"]
    cards: list[gpus.Card] = []
    problems: list[str] = []
    seen_ids: set[str] = set()
    seen_indexes: set[int] = set()
    for position, entry in enumerate(entries):
        where = f"device [{position}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} is not an object")
            continue
        missing = [key for key in _ENTRY_FIELDS if key not in entry]
        wrong = [
            key
            for key, kind in _ENTRY_FIELDS.items()
            if key in entry and (not isinstance(entry[key], kind) or (kind is int and isinstance(entry[key], bool)))
        ]
        if missing or wrong:
            problems.extend(f"{where} lacks {key!r}" for key in missing)
            problems.extend(
                f"{where} has a {type(entry[key]).__name__} {key!r}, not {_ENTRY_FIELDS[key].__name__}" for key in wrong
            )
            continue
        bad = len(problems)
        if not entry["health"]:
            problems.append(f"{where} is not healthy; HAMi ignores it")
        if entry["count"] <= 0:
            problems.append(f"{where} has count {entry['count']}; every request would fail CardTimeSlicingExhausted")
        if not 0 < entry["devcore"] <= gpus.CORES_PER_CARD:
            problems.append(f"{where} has devcore {entry['devcore']}, not 1-{gpus.CORES_PER_CARD}")
        if entry["id"] in seen_ids or not entry["id"]:
            problems.append(f"{where} repeats or lacks the device id {entry['id']!r}")
        if entry["index"] in seen_indexes or entry["index"] < 0:
            problems.append(f"{where} repeats or negates the index {entry['index']}")
        model = _BY_HAMI_TYPE.get(entry["type"])
        if model is None:
            problems.append(f"{where} has type {entry['type']!r}, not a catalogue GPU ({', '.join(sorted(_BY_HAMI_TYPE))})")
        elif entry["devmem"] != model.memory_mib:
            problems.append(f"{where} claims {entry['devmem']} MiB; a {model.model} has {model.memory_mib} MiB")
        seen_ids.add(entry["id"])
        seen_indexes.add(entry["index"])
        if len(problems) == bad and model is not None:
            cards.append(gpus.Card(entry["id"], entry["index"], model))
    return cards, problems


def parse_quantity(value: Any) -> int | None:
    number = as_int(value)
    if number is not None:
        return number
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    return int(match[1]) * _MULTIPLIERS[match[2]] if match else None


def _real_devices(stack: StackView, tenant: str) -> bool:
    """Whether the tenant's HAMi runs the real device plugin, which discovers the cards at run time."""
    for release in stack.resources:
        if is_hami(release) and tenant in stack.tenants_of_provider(release.provider_urn):
            return (
                release.get("values", "devicePlugin", "enabled") is True
                and release.get("values", "mockDevicePlugin", "enabled") is not True
            )
    return False


def check_quota(stack: StackView) -> Iterator[Finding]:
    inventory: dict[str, list[gpus.Card]] = defaultdict(list)
    declared: set[str] = set()
    for command in stack.of_type(*kinds.COMMAND_TYPES):
        env = command.environment
        if env is UNKNOWN or kinds.ENV_REGISTER not in env:
            continue
        value, tenant = env.get(kinds.ENV_REGISTER), env.get(kinds.ENV_TENANT)
        if value is UNKNOWN:
            continue
        what = f"GPU registration {command.name}: {gpus.REGISTER_ANNOTATION}"
        if not isinstance(value, str):
            yield Finding(f"{what} is not a string", command.urn)
            continue
        cards, problems = parse_registration(value)
        for problem in problems:
            yield Finding(f"{what} {problem}", command.urn)
        capacity = env.get(kinds.ENV_GPU_CAPACITY)
        if capacity is not UNKNOWN and capacity is not None and not problems:
            # The mock device plugin advertises what the node's capacity says (gotcha 1: Σ count).
            total = sum(entry["count"] for entry in json.loads(value))
            if as_int(capacity) != total:
                yield Finding(
                    f"{what}: {kinds.ENV_GPU_CAPACITY}={capacity}, but the devices' counts add up to {total}", command.urn
                )
        if tenant is UNKNOWN:
            continue
        if not isinstance(tenant, str) or not tenant:
            yield Finding(
                f"GPU registration {command.name} names no tenant ({kinds.ENV_TENANT}), so its cards count for none", command.urn
            )
            continue
        declared.add(tenant)
        inventory[tenant].extend(cards)

    for quota in stack.of_type(kinds.RESOURCE_QUOTA):
        hard = quota.get("spec", "hard", default={})
        if hard is UNKNOWN or not isinstance(hard, dict) or not any(key in hard for key in QUOTA_KEYS):
            continue
        tenants = stack.tenants_of_provider(quota.provider_urn)
        if not tenants and stack.reaches_unknown_tenant(quota.provider_urn):
            continue  # a TCP whose tenant a preview does not know yet
        if len(tenants) != 1:
            yield Finding(
                f"GPU quota {quota.name} is created through a provider built from {providers.built_from(tenants)}, so no "
                "single tenant's cards bound it",
                quota.urn,
            )
            continue
        tenant = next(iter(tenants))
        if tenant not in declared and _real_devices(stack, tenant):
            continue  # the real device plugin registers the cards; the stack cannot count them
        memory, cores = gpus.inventory_totals(inventory.get(tenant, []))
        limits = {"gpumem": (memory, "MiB of GPU memory"), "gpucores": (cores, "% of GPU cores (100 per card)")}
        for key, name in QUOTA_KEYS.items():
            raw = dig(hard, key)
            if raw is None or raw is UNKNOWN:
                continue
            amount = parse_quantity(raw)
            bound, unit = limits[name]
            if amount is None:
                yield Finding(f"GPU quota {quota.name}: {key}={raw!r} is not a whole quantity", quota.urn)
            elif amount > bound:
                yield Finding(
                    f"GPU quota {quota.name} of tenant {tenant!r}: {key}={amount} exceeds the {bound} {unit} registered on "
                    "its workers",
                    quota.urn,
                )
