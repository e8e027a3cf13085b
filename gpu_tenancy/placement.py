"""A pure-Python model of how HAMi v2.10.0 admits and places NVIDIA GPU pods.

It answers "where would HAMi put these pods, and with which message does it refuse the rest?"
for an inventory such as a stack's declared workers, without a cluster. It reproduces, in order:

1. the admission webhook (``Project-HAMi/HAMi:pkg/scheduler/webhook.go`` ``Handle`` and
   ``fitResourceQuota``, ``pkg/device/nvidia/device.go`` ``MutateAdmission``): the default
   ``nvidia.com/gpu`` and exclusive ``gpucores`` it writes, the percentage validation, the
   privileged-container denial and the ``exceeding resource quota`` denial;
2. the request each container makes (``device.go`` ``GenerateResourceRequests``);
3. the extender's Filter (``pkg/scheduler/scheduler.go`` ``Filter``, ``pkg/scheduler/score.go``
   ``calcScoreWithOptions``/``scoreNode``/``fitInDevices``): device scores and sort
   (``pkg/scheduler/policy/gpu_policy.go``), the per-card checks of ``device.go`` ``Fit`` in their
   exact order, the reason strings of ``pkg/device/common/common.go`` ``GenReason``, the node score
   (``pkg/scheduler/policy/node_policy.go``) and the node choice;
4. the usage the placed pod then holds (``AddResourceUsage``, ``pkg/device/initContainer.go``
   ``CollapseInitContainerUsage``, ``pkg/device/quota.go``), so the next pod sees it.

Pods are placed one after another, each consuming capacity for the next, which is what a live
cluster does when they are created in that order (HAMi's node lock serialises binds per node).

Where HAMi is non-deterministic (goroutine completion order decides ties between equally scored
nodes, ``scheduler.go`` ``Filter`` takes the last of a sort over that order) the model takes the
candidate whose node name sorts first. Float scores are computed in float32, as Go does, so ties
and orderings match. Not modelled: the release of a pod's init-container usage once its init
containers have succeeded (HAMi#1773; a placed pod keeps ``max(init, sum of app containers)``
here, as while its init containers run), MIG and MPS partitioning, topology-aware pair scores (without
``hami.io/node-nvidia-score`` HAMi's choice degrades to the first candidates, which is what the
model returns), kube-scheduler's own predicates (taints, selectors, CPU/memory), pod priorities,
the bind-time node lock, and, on nodes of more than 12 cards, which of several equal cards HAMi
takes (Go's ``sort.Sort`` is a stable insertion sort only up to 12 elements; see ``sort_devices``).
Messages follow kube-scheduler's ``FitError`` form (``0/1 nodes are available: 1 1/1
CardInsufficientCore.``); a live ``FailedScheduling`` event may append a ``preemption: ...`` sentence after it.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import cmp_to_key
from typing import TYPE_CHECKING, Final

from .gpus import CORES_PER_CARD, SPLIT_COUNT

if TYPE_CHECKING:
    from .config import Tenant

# Resource names and annotations: charts/hami/values.yaml v2.10.0 and device.go constants.
GPU: Final = "nvidia.com/gpu"
GPUMEM: Final = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
GPUCORES: Final = "nvidia.com/gpucores"
USE_GPUTYPE: Final = "nvidia.com/use-gputype"
NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
VGPU_MODE: Final = "nvidia.com/vgpu-mode"
NUMA_BIND: Final = "nvidia.com/numa-bind"
NODE_POLICY_ANNOTATION: Final = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION: Final = "hami.io/gpu-scheduler-policy"
SCORING_WEIGHTS_ANNOTATION: Final = "hami.io/device-scoring-weights"
WEBHOOK_NAME: Final = "vgpu.hami.io"
HAMI_SCHEDULER: Final = "hami-scheduler"
DEFAULT_SCHEDULER: Final = "default-scheduler"
# Pods (and namespaces) with this label are never sent to HAMi's webhook (the chart's selectors).
WEBHOOK_IGNORE_LABEL: Final = ("hami.io/webhook", "ignore")

BINPACK: Final = "binpack"
SPREAD: Final = "spread"
MUTEX: Final = "mutex"
NUMA: Final = "numa"
TOPOLOGY_AWARE: Final = "topology-aware"

# Reason strings, verbatim from pkg/device/common/common.go (note "Uuid").
CARD_NOT_HEALTH: Final = "CardNotHealth"
CARD_CORDONED: Final = "CardCordoned"
CARD_TYPE_MISMATCH: Final = "CardTypeMismatch"
NUMA_NOT_FIT: Final = "NumaNotFit"
CARD_UUID_MISMATCH: Final = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED: Final = "CardTimeSlicingExhausted"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: Final = "ExclusiveDeviceAllocateConflict"
RESOURCE_QUOTA_NOT_FIT: Final = "ResourceQuotaNotFit"
CARD_INSUFFICIENT_MEMORY: Final = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE: Final = "CardInsufficientCore"
CARD_COMPUTE_UNITS_EXHAUSTED: Final = "CardComputeUnitsExhausted"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST: Final = "AllocatedCardsInsufficientRequest"
NODE_INSUFFICIENT_DEVICE: Final = "NodeInsufficientDevice"
# pkg/scheduler/nodes.go getNodesUsage: a node missing from HAMi's device cache.
NODE_UNREGISTERED: Final = "node unregistered"
EXCEEDING_RESOURCE_QUOTA: Final = "exceeding resource quota"

NVIDIA: Final = "NVIDIA"
UNSET_PERCENTAGE: Final = 101  # GenerateResourceRequests' "no gpumem-percentage" sentinel
WEIGHT: Final = 10  # pkg/util/types.go util.Weight
MAX_INT32: Final = 2**31 - 1
EXCLUSIVE_CORES: Final = 100

# Result stages: where a pod's journey ended.
STAGE_SCHEDULED: Final = "scheduled"
STAGE_ADMISSION: Final = "admission"
STAGE_FILTER: Final = "filter"
STAGE_ERROR: Final = "error"
STAGE_NO_GPU: Final = "no-gpu"
STAGE_NOT_HAMI: Final = "not-hami"


class PlacementInputError(ValueError):
    """Input the model cannot represent: bad quantities, malformed devices, duplicate names."""


class ScoringWeightsError(ValueError):
    """An invalid ``hami.io/device-scoring-weights`` annotation; HAMi fails Filter with it."""


class AdmissionError(ValueError):
    """The webhook refuses the pod (``admission.Denied`` or ``admission.Errored``)."""


# --- configuration and inventory -------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerConfig:
    """HAMi's scheduler settings (the ``hami-scheduler-device`` ConfigMap and extender flags).

    Defaults are the v2.10.0 chart's, which the project keeps.
    """

    default_memory: int = 0
    default_cores: int = 0
    memory_factor: int = 1
    default_gpu_num: int = 1
    node_policy: str = BINPACK
    gpu_policy: str = SPREAD


@dataclass
class Device:
    """One card as the scheduler sees it: a register-annotation entry plus its current usage.

    Field names follow HAMi's ``DeviceInfo`` JSON (``devmem`` is ``Totalmem``, ``devcore`` is
    ``Totalcore``); ``used``/``usedmem``/``usedcores`` are ``DeviceUsage``'s counters.
    """

    id: str
    index: int = 0
    type: str = NVIDIA
    count: int = SPLIT_COUNT
    devmem: int = 0
    devcore: int = CORES_PER_CARD
    numa: int = 0
    mode: str = "hami-core"
    health: bool = True
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0

    @classmethod
    def from_register_entry(cls, entry: Mapping[str, object], where: str = "device", *, strict: bool = True) -> Device:
        """Decode a ``hami.io/node-nvidia-register`` entry, optionally with usage counters.

        Omitted keys take Go's zero values, as ``json.Unmarshal`` into ``DeviceInfo`` does: no
        ``health`` means an unhealthy card and no ``count`` a card every request finds
        exhausted (hami.md §2.3). ``strict`` refuses unknown keys, for input a person wrote (a
        typo would otherwise vanish); what HAMi itself wrote is read as Go reads it, ignoring keys
        a HAMi build may add (``devicepairscore``, ``migtemplate``).
        """
        if not isinstance(entry, Mapping):
            raise PlacementInputError(f"{where}: expected an object, got {type(entry).__name__}")
        known = {"id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health", "used", "usedmem", "usedcores"}
        unknown = sorted(set(entry) - known - {"migProfiles", "devicevendor", "custominfo"})
        if unknown and strict:
            raise PlacementInputError(f"{where}: unknown key(s) {', '.join(unknown)}")
        card_id = entry.get("id")
        if not isinstance(card_id, str) or not card_id:
            raise PlacementInputError(f"{where}.id: a non-empty string is required")
        return cls(
            id=card_id,
            index=_entry_int(entry, "index", where),
            type=_entry_str(entry, "type", where),
            count=_entry_int(entry, "count", where),
            devmem=_entry_int(entry, "devmem", where),
            devcore=_entry_int(entry, "devcore", where),
            numa=_entry_int(entry, "numa", where),
            mode=_entry_str(entry, "mode", where),
            health=_entry_bool(entry, "health", where),
            used=_entry_int(entry, "used", where),
            usedmem=_entry_int(entry, "usedmem", where),
            usedcores=_entry_int(entry, "usedcores", where),
        )


def _entry_int(entry: Mapping[str, object], key: str, where: str) -> int:
    value = entry.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlacementInputError(f"{where}.{key}: a non-negative integer is required, got {value!r}")
    return value


def _entry_str(entry: Mapping[str, object], key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise PlacementInputError(f"{where}.{key}: a string is required, got {value!r}")
    return value


def _entry_bool(entry: Mapping[str, object], key: str, where: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise PlacementInputError(f"{where}.{key}: true or false is required, got {value!r}")
    return value


@dataclass
class Node:
    """A worker node: its registered cards (in annotation order) and cordoned card ids.

    A node without cards has no usable ``hami.io/node-nvidia-register`` annotation, so HAMi never
    adds it to its cache and fails it with ``node unregistered``.
    """

    name: str
    devices: list[Device] = field(default_factory=list)
    cordoned: frozenset[str] = frozenset()  # hami.io/device-cordon (v2.10)

    @property
    def registered(self) -> bool:
        return bool(self.devices)

    @classmethod
    def from_register_entries(cls, name: str, entries: Iterable[Mapping[str, object]], *, strict: bool = True) -> Node:
        devices = [Device.from_register_entry(entry, f"{name}.devices[{i}]", strict=strict) for i, entry in enumerate(entries)]
        ids = [device.id for device in devices]
        duplicates = sorted({card_id for card_id in ids if ids.count(card_id) > 1})
        if duplicates:
            raise PlacementInputError(f"{name}: duplicate device id(s) {', '.join(duplicates)}")
        return cls(name, devices)


Quantity = int | float | str


@dataclass(frozen=True)
class Container:
    """A container's name and resources; ``limits`` win over ``requests`` like in HAMi."""

    name: str
    limits: Mapping[str, Quantity] = field(default_factory=dict)
    requests: Mapping[str, Quantity] = field(default_factory=dict)
    privileged: bool = False


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str = "default"
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = ""  # spec.schedulerName as created ("" is the API server's default-scheduler)
    node_name: str = ""  # spec.nodeName as created

    @property
    def all_containers(self) -> tuple[Container, ...]:
        # pkg/device/devices.go Resourcereqs: init containers come first.
        return self.init_containers + self.containers


@dataclass(frozen=True)
class Request:
    """``ContainerDeviceRequest``: cards wanted and, per card, MiB / percent of memory / cores."""

    nums: int
    memreq: int
    mem_percentage: int
    coresreq: int


@dataclass(frozen=True)
class Allocation:
    """One card given to a container (``ContainerDevice``)."""

    id: str
    index: int
    usedmem: int
    usedcores: int


@dataclass(frozen=True)
class GpuQuota:
    """HAMi's view of a ResourceQuota: ``limits.nvidia.com/gpumem`` / ``limits.nvidia.com/gpucores``.

    ``None`` means the key is absent; an explicit 0 blocks (PR #2313, in v2.10). Usage counts the
    per-card allocation summed over cards (``gpu: 2, gpumem: 2000`` uses 4000).
    """

    namespace: str = "default"
    gpumem: int | None = None
    gpucores: int | None = None

    def fits(self, used: QuotaUsage, mem: int, cores: int, memory_factor: int = 1) -> bool:
        """``pkg/device/quota.go`` ``FitQuota``: would ``mem``/``cores`` more stay within it?"""
        if self.gpumem is not None:
            limit = self.gpumem * memory_factor if memory_factor > 1 else self.gpumem
            if used.mem + mem > limit:
                return False
        return not (self.gpucores is not None and used.cores + cores > self.gpucores)


@dataclass(frozen=True)
class QuotaUsage:
    mem: int = 0
    cores: int = 0

    def __add__(self, other: QuotaUsage) -> QuotaUsage:
        return QuotaUsage(self.mem + other.mem, self.cores + other.cores)


@dataclass(frozen=True)
class ScoringWeights:
    slot: int = 1
    core: int = 1
    memory: int = 1


@dataclass(frozen=True)
class PodResult:
    """What happened to one pod.

    ``stage`` is ``scheduled``, ``admission`` (the webhook refused it), ``filter`` (no node fits),
    ``error`` (Filter failed, e.g. invalid scoring weights), ``no-gpu`` (no NVIDIA request, so
    HAMi's Filter passes every node and kube-scheduler alone places it; ``node`` is then None) or
    ``not-hami`` (labelled ``hami.io/webhook: ignore`` or naming another scheduler: HAMi never
    schedules the pod nor counts what it holds; ``message`` says which).
    ``devices`` holds one tuple per container, init containers first, as in HAMi's
    ``hami.io/vgpu-devices-allocated``. ``node_reasons`` maps each failed node to HAMi's string.
    """

    pod: str
    namespace: str
    stage: str
    node: str | None = None
    devices: tuple[tuple[Allocation, ...], ...] = ()
    node_reasons: Mapping[str, str] = field(default_factory=dict)
    message: str = ""

    @property
    def scheduled(self) -> bool:
        return self.stage in (STAGE_SCHEDULED, STAGE_NO_GPU)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Distinct reason names over all failed nodes, sorted (like ``common.ParseReason``)."""
        return tuple(sorted({name for text in self.node_reasons.values() for name in parse_reason(text)}))


# --- quantities ------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+)?$", re.ASCII)
_SUFFIX_SCALE: Final[dict[str, Fraction]] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    **{suffix: Fraction(1000**power) for power, suffix in enumerate(("k", "M", "G", "T", "P", "E"), start=1)},
    **{suffix: Fraction(1024**power) for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)},
}


# resource.Quantity holds at most 2^63-1; a larger request is refused here rather than silently
# capped to it as Kubernetes does.
MAX_QUANTITY: Final = 2**63 - 1
# Powers of ten past which a quantity is surely above MAX_QUANTITY or below 1n, whatever its suffix
# (the suffixes scale by 10^-3 to under 10^19); checked before any exact arithmetic, so
# "1e100000000" costs no hundred-million-digit power.
_MAGNITUDE_BOUND: Final = 40


def parse_quantity(value: Quantity) -> Fraction:
    """A Kubernetes resource quantity (``20000``, ``"20Gi"``, ``"1e3"``) as an exact number."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PlacementInputError(f"{_shown(value)} is not a resource quantity")
    if isinstance(value, int):
        number = Fraction(value)
    else:
        match = _QUANTITY.match(str(value).strip())
        if not match:
            raise PlacementInputError(f"{_shown(value)} is not a resource quantity")
        number = _decimal_quantity(value, match[1], match[2] or "")
    if number < 0:
        # The API server rejects negative resource quantities before any webhook runs.
        raise PlacementInputError(f"{_shown(value)}: resource quantities must not be negative")
    if number > MAX_QUANTITY:
        raise PlacementInputError(f"{_shown(value)} is out of range: a Kubernetes quantity is at most 2^63-1 ({MAX_QUANTITY})")
    return number


def _decimal_quantity(value: Quantity, digits: str, suffix: str) -> Fraction:
    """``digits`` scaled by ``suffix``: exact, unless past ``_MAGNITUDE_BOUND`` either way."""
    scale = _SUFFIX_SCALE.get(suffix)  # first: "E" and "Ei" are suffixes, not exponents
    try:
        # Exact however many digits (Fraction(str) stops at 4300), and its size known at once.
        amount = Decimal(digits if scale is not None else digits + suffix)
    except InvalidOperation:  # an exponent of more than 18 digits, past what Kubernetes parses
        raise PlacementInputError(f"{_shown(value)} is not a resource quantity: its exponent is out of range") from None
    if amount.is_zero():
        return Fraction(0)
    sign = -1 if amount.is_signed() else 1
    if amount.adjusted() > _MAGNITUDE_BOUND:
        return sign * Fraction(MAX_QUANTITY + 1)  # out of range, as the caller reports
    if amount.adjusted() < -_MAGNITUDE_BOUND:
        # Below 1n, which Kubernetes rounds it up to; all that counts here is being a fraction.
        return sign * Fraction(1, 10**9)
    return Fraction(amount) * (scale or 1)


def _shown(value: Quantity) -> str:
    """``value`` for a message, a long one cut short (a quantity may come with thousands of digits)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}… ({len(text)} characters)"


def _as_int64(value: Quantity) -> int | None:
    """``Quantity.AsInt64``: the value when it is an exact integer, else None."""
    number = parse_quantity(value)
    return int(number) if number.denominator == 1 else None


def _resource(container: Container, name: str) -> Quantity | None:
    """The container's value for ``name``: its limit, falling back to its request."""
    if name in container.limits:
        return container.limits[name]
    return container.requests.get(name)


# --- admission webhook -----------------------------------------------------------------------


def validate_container(container: Container) -> None:
    """``device.go`` ``validateMemoryPercentage``: raises AdmissionError outside 0-100."""
    value = _resource(container, GPUMEM_PERCENTAGE)
    if value is None:
        return
    # resourceValue uses Quantity.Value(), which rounds up.
    percentage = math.ceil(parse_quantity(value))
    if not 0 <= percentage <= 100:
        raise AdmissionError(
            f"invalid {GPUMEM_PERCENTAGE} value {percentage} in container {container.name}: must be an integer between 0 and 100"
        )


def mutate_container(container: Container, config: SchedulerConfig = SchedulerConfig()) -> tuple[Container, bool]:
    """The webhook's edits of one container and whether it requests a HAMi resource.

    ``device.go`` ``mutateContainerResource``: only gpumem/gpucores/percentage *limits* and no
    ``nvidia.com/gpu`` limit → add ``nvidia.com/gpu: defaultGPUNum``. Then
    ``defaultExclusiveCoreIfNeeded``: a GPU request without gpucores whose memory is the whole
    card (percentage 100, or neither gpumem nor percentage) → add ``nvidia.com/gpucores: 100``.
    """
    validate_container(container)
    limits = dict(container.limits)
    has_resource = GPU in limits
    if not has_resource and any(name in limits for name in (GPUCORES, GPUMEM, GPUMEM_PERCENTAGE)) and config.default_gpu_num > 0:
        limits[GPU] = config.default_gpu_num
        has_resource = True
    if _needs_exclusive_cores(replace(container, limits=dict(limits))):
        limits[GPUCORES] = EXCLUSIVE_CORES
        has_resource = True
    return replace(container, limits=limits), has_resource


def _needs_exclusive_cores(container: Container) -> bool:
    if _resource(container, GPU) is None or _resource(container, GPUCORES) is not None:
        return False
    percentage = _resource(container, GPUMEM_PERCENTAGE)
    if percentage is not None:
        return math.ceil(parse_quantity(percentage)) == 100
    return _resource(container, GPUMEM) is None


@dataclass(frozen=True)
class Admission:
    """The webhook's verdict: the mutated pod, or the message the API server reports.

    ``bypassed``: allowed unchanged because the pod names another scheduler; HAMi never sees it again.
    """

    allowed: bool
    pod: Pod
    message: str = ""
    bypassed: bool = False


def admit(
    pod: Pod,
    config: SchedulerConfig = SchedulerConfig(),
    quota: GpuQuota | None = None,
    quota_used: QuotaUsage = QuotaUsage(),
) -> Admission:
    """``webhook.go`` ``Handle`` for a pod bound for hami-scheduler.

    ``quota`` is the ResourceQuota of the pod's namespace (None: none), ``quota_used`` what the
    namespace's scheduled pods already hold. Denials read like kubectl's
    ``admission webhook "vgpu.hami.io" denied the request: exceeding resource quota``.
    """
    check_quantities(pod)
    if not pod.containers:
        return _denied(pod, "pod has no containers")
    # forceOverwriteDefaultScheduler is the chart's default (true): an explicit default-scheduler is taken over.
    if pod.scheduler_name not in ("", DEFAULT_SCHEDULER, HAMI_SCHEDULER):
        return Admission(True, pod, "pod already has different scheduler assigned", bypassed=True)
    has_resource = False
    init_containers: list[Container] = []
    containers: list[Container] = []
    try:
        for source, target in ((pod.init_containers, init_containers), (pod.containers, containers)):
            for container in source:
                mutated, found = mutate_container(container, config)
                target.append(mutated)
                has_resource = has_resource or found
    except AdmissionError as error:
        return _denied(pod, str(error))
    mutated_pod = replace(pod, init_containers=tuple(init_containers), containers=tuple(containers))
    privileged = next((c.name for c in mutated_pod.all_containers if c.privileged), None)
    if privileged is not None and has_resource:
        return _denied(pod, f"container {privileged} is privileged")
    if has_resource:
        mutated_pod = replace(mutated_pod, scheduler_name=HAMI_SCHEDULER)
        if pod.node_name:  # bound at creation, it would skip the scheduler that accounts for its cards
            return _denied(pod, "pod has node assigned")
    if quota is not None and not _admission_quota_fits(mutated_pod, config, quota, quota_used):
        return _denied(pod, EXCEEDING_RESOURCE_QUOTA)
    return Admission(True, mutated_pod)


def _is_extended_resource(name: str) -> bool:
    """``nvidia.com/gpumem`` and the like: a domain outside kubernetes.io (the API server's IsExtendedResourceName)."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and not domain.endswith("kubernetes.io") and not name.startswith("requests.")


def check_quantities(pod: Pod) -> None:
    """Raise ``PlacementInputError`` naming the pod, container and resource of a limit or request
    the API server refuses before any webhook: not a quantity Kubernetes holds, or, for an extended
    resource (every ``nvidia.com/...``), not an integer, a request without a limit or unequal to it
    (pkg/apis/core/validation ValidateResourceRequirements: extended resources never overcommit)."""
    for container in pod.all_containers:
        where = f"pod {pod.namespace}/{pod.name}, container {container.name}"
        parsed: dict[str, dict[str, Fraction]] = {}
        for kind, resources in (("limits", container.limits), ("requests", container.requests)):
            for name, quantity in resources.items():
                try:
                    parsed.setdefault(kind, {})[name] = amount = parse_quantity(quantity)
                except PlacementInputError as error:
                    raise PlacementInputError(f"{error}; in {where}, {kind} {name}") from None
                if _is_extended_resource(name) and amount.denominator != 1:
                    raise PlacementInputError(
                        f"{kind}[{name}]: Invalid value: {_shown(quantity)}: must be an integer; in {where}"
                    )
        limits = parsed.get("limits", {})
        for name, amount in parsed.get("requests", {}).items():
            if not _is_extended_resource(name):
                continue
            if name not in limits:
                raise PlacementInputError(
                    f"limits[{name}]: Required value: Limit must be set for non overcommitable resources; in {where}"
                )
            if amount != limits[name]:
                raise PlacementInputError(
                    f"requests[{name}]: Invalid value: {_shown(container.requests[name])}: must be equal to {name} limit of "
                    f"{_shown(container.limits[name])}; in {where}"
                )


def _denied(pod: Pod, reason: str) -> Admission:
    return Admission(False, pod, f'admission webhook "{WEBHOOK_NAME}" denied the request: {reason}')


def admission_quota_request(pod: Pod, config: SchedulerConfig = SchedulerConfig()) -> QuotaUsage:
    """What ``fitResourceQuota`` charges at admission: ``max(Σ app, max init)`` of Memreq×Nums.

    Percentage and whole-card requests have Memreq 0, so only their cores count here (#2468).
    """
    app = [r for r in (container_request(c, config) for c in pod.containers) if r is not None]
    init = [r for r in (container_request(c, config) for c in pod.init_containers) if r is not None]
    mem = max(sum(r.memreq * r.nums for r in app), max((r.memreq * r.nums for r in init), default=0))
    cores = max(sum(r.coresreq * r.nums for r in app), max((r.coresreq * r.nums for r in init), default=0))
    return QuotaUsage(mem, cores)


def _admission_quota_fits(pod: Pod, config: SchedulerConfig, quota: GpuQuota, used: QuotaUsage) -> bool:
    request = admission_quota_request(pod, config)
    if request.mem == 0 and request.cores == 0:
        return True
    return quota.fits(used, request.mem, request.cores, config.memory_factor)


# --- requests --------------------------------------------------------------------------------


def container_request(container: Container, config: SchedulerConfig = SchedulerConfig()) -> Request | None:
    """``device.go`` ``GenerateResourceRequests``; None when the container asks for no card.

    The webhook's defaults are not applied here: pass a container from ``admit``.
    """
    count = _resource(container, GPU)
    nums = _as_int64(count) if count is not None else None
    if nums is None or nums <= 0:
        return None
    memreq = 0
    memory = _resource(container, GPUMEM)
    if memory is not None:
        factor = max(config.memory_factor, 1)
        mib = _as_int64(memory)
        # v2.10: a gpumem that is not a plain int32-sized integer voids the whole request, so
        # the container is treated as asking for no GPU rather than silently under-allocated.
        if mib is None or mib > MAX_INT32 // factor:
            return None
        memreq = mib * factor
    percentage = UNSET_PERCENTAGE
    percent = _resource(container, GPUMEM_PERCENTAGE)
    if percent is not None:
        value = _as_int64(percent)
        if value is not None:
            # Above 100 clamps; 0 keeps the sentinel (0 would mean "no limit" to HAMi-core).
            percentage = min(value, 100) if value > 0 else UNSET_PERCENTAGE
    if percentage == UNSET_PERCENTAGE and memreq == 0:
        if config.default_memory != 0:
            memreq = config.default_memory
        else:
            percentage = 100
    coresreq = config.default_cores
    cores = _resource(container, GPUCORES)
    if cores is not None:
        value = _as_int64(cores)
        if value is not None:
            coresreq = value
    return Request(nums, memreq, percentage, coresreq)


def voided_memory(container: Container, config: SchedulerConfig = SchedulerConfig()) -> str | None:
    """Why HAMi ignores the container's GPU request for its ``nvidia.com/gpumem``, or None.

    ``container_request`` then says the container asks for no card, as HAMi does; this says why,
    with the MiB the value meant when it is a whole number of them (``20Gi`` is 20480).
    """
    memory = _resource(container, GPUMEM)
    if memory is None or container_request(container, config) is not None or _resource(container, GPU) is None:
        return None
    factor = max(config.memory_factor, 1)
    mib = _as_int64(memory)
    if mib is not None and mib <= MAX_INT32 // factor:
        return None
    meant = ""
    try:
        amount = parse_quantity(memory)
    except PlacementInputError:
        amount = None
    if amount is not None and amount.denominator == 1 and amount % 2**20 == 0 and 0 < amount // 2**20 <= MAX_INT32 // factor:
        meant = f" (for {memory} write {amount // 2**20})"
    return (
        f"{GPUMEM} {memory} is not a whole number of MiB below 2^31: HAMi v2.10 ignores the GPU request of "
        f"container {container.name}{meant}"
    )


def pod_requests(pod: Pod, config: SchedulerConfig = SchedulerConfig()) -> list[Request | None]:
    """One entry per container, init containers first."""
    return [container_request(container, config) for container in pod.all_containers]


# --- annotations -----------------------------------------------------------------------------


def parse_scoring_weights(value: str) -> ScoringWeights:
    """``pkg/util/device_scoring_weights.go`` ``ParseDeviceScoringWeights``, messages included."""
    key_name = SCORING_WEIGHTS_ANNOTATION
    parts = value.split(",")
    if len(parts) != 3:
        raise ScoringWeightsError(f"invalid {key_name} annotation {_go_quote(value)}: expected slot, core, and memory weights")
    weights: dict[str, int] = {}
    for part in parts:
        key, sep, raw = part.strip().partition("=")
        if not sep:
            raise ScoringWeightsError(f"invalid {key_name} annotation {_go_quote(value)}: expected key=value entries")
        key = key.strip()
        if key in weights:
            raise ScoringWeightsError(f"invalid {key_name} annotation {_go_quote(value)}: duplicate {_go_quote(key)} weight")
        if not re.fullmatch(r"[+-]?[0-9]+", raw.strip()):
            raise ScoringWeightsError(
                f"invalid {key_name} annotation {_go_quote(value)}: {_go_quote(key)} weight must be an integer"
            )
        weight = int(raw.strip())
        if weight < 0:
            raise ScoringWeightsError(
                f"invalid {key_name} annotation {_go_quote(value)}: {_go_quote(key)} weight must not be negative"
            )
        if key not in ("slot", "core", "memory"):
            raise ScoringWeightsError(f"invalid {key_name} annotation {_go_quote(value)}: unknown weight {_go_quote(key)}")
        weights[key] = weight
    if not any(weights.values()):
        raise ScoringWeightsError(f"invalid {key_name} annotation {_go_quote(value)}: at least one weight must be positive")
    return ScoringWeights(weights["slot"], weights["core"], weights["memory"])


def _go_quote(text: str) -> str:
    # Go's %q for the plain strings annotations hold.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scoring_weights(pod: Pod) -> ScoringWeights:
    """``GetDeviceScoringWeightsByPod``: the annotation's weights, else 1/1/1."""
    value = pod.annotations.get(SCORING_WEIGHTS_ANNOTATION)
    return ScoringWeights() if value is None else parse_scoring_weights(value)


def policy_contains(policy: str, name: str) -> bool:
    """``util.PolicyContains`` (v2.10, #2621): membership in a comma-separated policy chain."""
    return any(part.strip() == name for part in policy.split(","))


def _parse_go_bool(text: str) -> bool | None:
    # strconv.ParseBool's accepted spellings.
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def numa_bind(annotations: Mapping[str, str]) -> bool:
    """``device.go`` ``assertNuma``: ``nvidia.com/numa-bind`` parses as true."""
    return _parse_go_bool(annotations.get(NUMA_BIND, "")) is True


def _list_items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def type_allowed(annotations: Mapping[str, str], device: Device) -> bool:
    """``device.go`` ``checkType``: gputype allow/deny lists and the vgpu-mode annotation.

    Case-insensitive substring of the card type, comma lists; an empty list constrains nothing.
    """
    card_type = device.type.upper()
    if USE_GPUTYPE in annotations:
        allowed = _list_items(annotations[USE_GPUTYPE])
        if allowed and not any(item.upper() in card_type for item in allowed):
            return False
    if NOUSE_GPUTYPE in annotations and any(item.upper() in card_type for item in _list_items(annotations[NOUSE_GPUTYPE])):
        return False
    mode = annotations.get(VGPU_MODE)
    return mode is None or device.mode in mode


def uuid_allowed(annotations: Mapping[str, str], device: Device) -> bool:
    """``pkg/device/devices.go`` ``CheckUUID`` (v2.10, #1965): exact ids, both lists apply; an
    empty list is no constraint (#2045)."""
    use = [u.strip() for u in annotations.get(USE_GPUUUID, "").split(",") if u.strip()]
    nouse = [u.strip() for u in annotations.get(NOUSE_GPUUUID, "").split(",") if u.strip()]
    return (not use or device.id in use) and device.id not in nouse


# --- scores and sort (float32, like Go) ------------------------------------------------------


def _f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def device_score(device: Device, request: Request, weights: ScoringWeights = ScoringWeights()) -> float:
    """``gpu_policy.go`` ``ComputeScore``: the card's utilisation including this request.

    The request only counts when its type ("NVIDIA") equals the card's type; real cards register
    their model name, so in practice the score is the card's current utilisation.
    """
    if device.count == 0 or device.devcore == 0 or device.devmem == 0:
        return 0.0
    slots = cores = mem = 0
    if device.type == NVIDIA:
        slots, cores = 1, request.coresreq
        if request.mem_percentage not in (0, UNSET_PERCENTAGE):
            mem = device.devmem * request.mem_percentage // 100
        else:
            mem = request.memreq
    used_score = _f32(_f32(slots + device.used) / _f32(device.count))
    core_score = _f32(_f32(cores + device.usedcores) / _f32(device.devcore))
    mem_score = _f32(_f32(mem + device.usedmem) / _f32(device.devmem))
    total = _f32(_f32(weights.slot * used_score) + _f32(weights.core * core_score))
    total = _f32(total + _f32(weights.memory * mem_score))
    return _f32(WEIGHT * total)


def node_score(devices: Sequence[Device]) -> float:
    """``node_policy.go`` ``ComputeDefaultScore``: the node's utilisation before the pod."""
    count = sum(d.count for d in devices)
    total_cores = sum(d.devcore for d in devices)
    total_mem = sum(d.devmem for d in devices)
    if not count or not total_cores or not total_mem:
        return 0.0
    used_score = _f32(_f32(sum(d.used for d in devices)) / _f32(count))
    core_score = _f32(_f32(sum(d.usedcores for d in devices)) / _f32(total_cores))
    mem_score = _f32(_f32(sum(d.usedmem for d in devices)) / _f32(total_mem))
    return _f32(WEIGHT * _f32(_f32(used_score + core_score) + mem_score))


def _sort_chain(policy: str, bind: bool) -> list[str]:
    # gpu_policy.go gpuSortKeyChain / lessByChain.
    chain: list[str] = []
    for part in policy.split(","):
        name = part.strip()
        if name in (BINPACK, SPREAD, NUMA) and name not in chain:
            chain.append(name)
    if not chain:
        chain = [SPREAD]
    if bind and chain[0] != NUMA:
        chain = [NUMA, *(key for key in chain if key != NUMA)]
    return chain


def _less(a: tuple[Device, float], b: tuple[Device, float], policy: str, bind: bool) -> bool:
    """``gpu_policy.go`` ``DeviceUsageList.Less`` at v2.10."""
    (da, sa), (db, sb) = a, b
    if "," in policy or policy == NUMA:
        for key in _sort_chain(policy, bind):
            if key == BINPACK and sa != sb:
                return sa < sb
            if key == SPREAD and sa != sb:
                return sa > sb
            if key == NUMA and da.numa != db.numa:
                return da.numa < db.numa
        return da.index < db.index
    binpack = policy == BINPACK
    if policy == MUTEX:
        return da.used > db.used if da.used != db.used else da.numa < db.numa
    if bind:
        if da.numa != db.numa:
            return da.numa > db.numa if binpack else da.numa < db.numa
        return sa < sb if binpack else sa > sb
    if sa != sb:
        return sa < sb if binpack else sa > sb
    return da.numa < db.numa


def sort_devices(devices: Sequence[Device], scores: Sequence[float], policy: str, bind: bool = False) -> list[Device]:
    """The order ``sort.Sort`` leaves the devices in; Fit then walks it from the end.

    Go's sort is an insertion sort (stable) up to 12 elements, so equal cards keep their current
    order and the *last* of them is tried first. Python's stable sort reproduces that; nodes with
    more than 12 cards get pdqsort in Go, which is not stable, so ties there may differ.
    """

    def compare(a: tuple[Device, float], b: tuple[Device, float]) -> int:
        return -1 if _less(a, b, policy, bind) else 1 if _less(b, a, policy, bind) else 0

    return [device for device, _ in sorted(zip(devices, scores, strict=True), key=cmp_to_key(compare))]


# --- Fit -------------------------------------------------------------------------------------

QuotaCheck = Callable[[int, int], bool]


@dataclass(frozen=True)
class FitContext:
    """What Fit reads from the pod besides the request."""

    annotations: Mapping[str, str]
    gpu_policy: str
    weights: ScoringWeights
    quota_fits: QuotaCheck  # (pod's total mem, pod's total cores) → within the namespace quota?


def gen_reason(reasons: Mapping[str, int], cards: int) -> str:
    """``common.GenReason``: ``"{cnt}/{cards} {Reason}"`` sorted as strings, joined by ", "."""
    return ", ".join(sorted(f"{count}/{cards} {reason}" for reason, count in reasons.items()))


def parse_reason(text: str) -> list[str]:
    """The reason names in a node's failure string (``"1/2 A, 1/2 B"`` → ``[A, B]``)."""
    names = []
    for part in text.split(", "):
        prefix, _, name = part.partition(" ")
        names.append(name if name and re.fullmatch(r"[0-9]+/[0-9]+", prefix) else part)
    return names


def fit(
    devices: Sequence[Device],
    request: Request,
    context: FitContext,
    cordoned: frozenset[str] = frozenset(),
    prior: QuotaUsage = QuotaUsage(),
    init_prior: Sequence[Sequence[Allocation]] | None = None,
) -> tuple[list[Allocation], str]:
    """``device.go`` ``Fit``: the cards for one container, or HAMi's reason string.

    ``devices`` are the node's NVIDIA cards in sorted order; ``prior`` is what the pod's earlier
    app containers already took, for the quota check; ``init_prior``, for an init container, the
    cards the earlier init containers took, which count collapsed per card with this one's
    (``fitQuota``'s ``CollapseInitContainerUsage``). Returns (allocations, "") or ([], reason).
    """
    remaining, wanted, cores = request.nums, request.nums, request.coresreq
    need_topology = policy_contains(context.gpu_policy, TOPOLOGY_AWARE)
    is_mutex = policy_contains(context.gpu_policy, MUTEX)
    bind = numa_bind(context.annotations)
    previous_numa = -1
    picked: list[Allocation] = []
    reasons: dict[str, int] = {}

    def reject(reason: str) -> None:
        reasons[reason] = reasons.get(reason, 0) + 1

    for device in reversed(devices):
        if not device.health:
            reject(CARD_NOT_HEALTH)
            continue
        if device.id in cordoned:
            reject(CARD_CORDONED)
            continue
        if not type_allowed(context.annotations, device):
            reject(CARD_TYPE_MISMATCH)
            continue
        if bind and previous_numa != device.numa:
            # numa-bind: a container's cards share one NUMA node; a new node restarts the run.
            if remaining != wanted:
                reasons[NUMA_NOT_FIT] = reasons.get(NUMA_NOT_FIT, 0) + len(picked)
            remaining, previous_numa, picked = wanted, device.numa, []
        if not uuid_allowed(context.annotations, device):
            reject(CARD_UUID_MISMATCH)
            continue
        if device.count <= device.used:
            reject(CARD_TIME_SLICING_EXHAUSTED)
            continue
        if is_mutex and device.used > 0:
            reject(EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
            continue
        # The clamp sticks for the rest of the loop: Go mutates its copy of the request.
        cores = min(cores, EXCLUSIVE_CORES)
        memreq = _card_memory(device, request)
        if init_prior is not None:
            # fitQuota: CollapseInitContainerUsage over the earlier init containers plus this one.
            trial = [*picked, Allocation(device.id, device.index, memreq, cores)]
            held = collapse_usage([*init_prior, trial], len(init_prior) + 1)
            so_far = prior + QuotaUsage(sum(h.mem for h in held.values()), sum(h.cores for h in held.values()))
        else:
            so_far = prior + QuotaUsage(sum(a.usedmem for a in picked) + memreq, sum(a.usedcores for a in picked) + cores)
        if not context.quota_fits(so_far.mem, so_far.cores):
            reject(RESOURCE_QUOTA_NOT_FIT)
            continue
        if device.devmem - device.usedmem < memreq:
            reject(CARD_INSUFFICIENT_MEMORY)
            continue
        if device.devcore - device.usedcores < cores:
            reject(CARD_INSUFFICIENT_CORE)
            continue
        # gpucores 100 asks for the card to itself, so any other task on it conflicts.
        if device.devcore == EXCLUSIVE_CORES and cores == EXCLUSIVE_CORES and device.used > 0:
            reject(EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
            continue
        if device.devcore != 0 and device.usedcores == device.devcore and cores == 0:
            reject(CARD_COMPUTE_UNITS_EXHAUSTED)
            continue
        if remaining > 0:
            if not need_topology:
                remaining -= 1
            picked.append(Allocation(device.id, device.index, memreq, cores))
        if remaining == 0 and not need_topology:
            return picked, ""
    if need_topology and len(picked) >= wanted:
        # Without hami.io/node-nvidia-score every pair scores 0, and computeWorstSingleCard /
        # computeBestCombination keep the first candidate(s) they see.
        return picked[:wanted], ""
    if picked:
        reasons[ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(picked)
    return [], gen_reason(reasons, len(devices))


def _card_memory(device: Device, request: Request) -> int:
    """MiB one card gives the container: gpumem, else the percentage of this card."""
    memreq = max(request.memreq, 0)
    if request.mem_percentage != UNSET_PERCENTAGE and request.memreq == 0:
        memreq = device.devmem * request.mem_percentage // 100
    return memreq


def _is_nvidia(device: Device) -> bool:
    # score.go getNodeResources: the card's type must contain the vendor word.
    return NVIDIA.lower() in device.type.lower()


def fit_in_devices(
    devices: list[Device],
    request: Request,
    context: FitContext,
    cordoned: frozenset[str] = frozenset(),
    prior: QuotaUsage = QuotaUsage(),
    init_prior: Sequence[Sequence[Allocation]] | None = None,
) -> tuple[list[Allocation], str]:
    """``score.go`` ``fitInDevices``: score, sort (in place), check count, Fit, take the cards.

    ``devices`` is a working copy of the node's cards; its order and usage are updated so the
    pod's next container starts from them, as HAMi's node copy does.
    """
    scores = [device_score(device, request, context.weights) for device in devices]
    devices[:] = sort_devices(devices, scores, context.gpu_policy, numa_bind(context.annotations))
    candidates = [device for device in devices if _is_nvidia(device)]
    if request.nums > len(candidates):
        return [], NODE_INSUFFICIENT_DEVICE
    allocations, reason = fit(candidates, request, context, cordoned, prior, init_prior)
    by_id = {device.id: device for device in devices}
    for allocation in allocations:
        card = by_id[allocation.id]
        card.used += 1
        card.usedmem += allocation.usedmem
        card.usedcores += allocation.usedcores
    return allocations, reason


# --- node outcome and usage ------------------------------------------------------------------


@dataclass(frozen=True)
class NodeFit:
    """A node that can take the pod: its pre-pod score and the cards per container."""

    node: str
    score: float
    devices: tuple[tuple[Allocation, ...], ...]


@dataclass(frozen=True)
class CardHold:
    """Slots, MiB and cores a pod holds on one card."""

    slots: int = 0
    mem: int = 0
    cores: int = 0

    def peak(self, other: CardHold) -> CardHold:
        return CardHold(max(self.slots, other.slots), max(self.mem, other.mem), max(self.cores, other.cores))


def _copy_devices(devices: Iterable[Device]) -> list[Device]:
    return [replace(device) for device in devices]


def _usage_of(allocations: Iterable[Allocation]) -> QuotaUsage:
    return sum((QuotaUsage(a.usedmem, a.usedcores) for a in allocations), QuotaUsage())


def score_node(node: Node, requests: Sequence[Request | None], init_count: int, context: FitContext) -> NodeFit | str:
    """``score.go`` ``scoreNode``: fit every container on a copy of the node, or the reason.

    Each init container is fitted on its own copy of the pre-pod node (they run one at a time);
    app containers share one copy, each consuming capacity for the next.
    """
    score = node_score(node.devices)
    allocations: list[tuple[Allocation, ...]] = []
    for request in requests[:init_count]:
        if request is None:
            allocations.append(())
            continue
        picked, reason = fit_in_devices(_copy_devices(node.devices), request, context, node.cordoned, init_prior=allocations)
        if reason:
            return reason
        allocations.append(tuple(picked))
    app_devices = _copy_devices(node.devices)
    taken = QuotaUsage()
    for request in requests[init_count:]:
        if request is None:
            allocations.append(())
            continue
        picked, reason = fit_in_devices(app_devices, request, context, node.cordoned, taken)
        if reason:
            return reason
        taken += _usage_of(picked)
        allocations.append(tuple(picked))
    return NodeFit(node.name, score, tuple(allocations))


def collapse_usage(devices: Sequence[Sequence[Allocation]], init_count: int) -> dict[str, CardHold]:
    """``CollapseInitContainerUsage``: per card, what the pod holds once placed.

    Per card and dimension, ``max(Σ app containers, max init container)``; init containers run
    one at a time, so together they hold at most one slot.
    """
    init: dict[str, CardHold] = {}
    app: dict[str, CardHold] = {}
    for position, container in enumerate(devices):
        for a in container:
            if position < init_count:
                held = init.get(a.id, CardHold())
                init[a.id] = CardHold(1, max(held.mem, a.usedmem), max(held.cores, a.usedcores))
            else:
                held = app.get(a.id, CardHold())
                app[a.id] = CardHold(held.slots + 1, held.mem + a.usedmem, held.cores + a.usedcores)
    return {card: init.get(card, CardHold()).peak(app.get(card, CardHold())) for card in init.keys() | app.keys()}


# --- messages --------------------------------------------------------------------------------


def unschedulable_message(node_reasons: Mapping[str, str], total_nodes: int) -> str:
    """kube-scheduler's ``FitError``: ``0/N nodes are available: <count> <reason>, ....``"""
    histogram: dict[str, int] = {}
    for reason in node_reasons.values():
        histogram[reason] = histogram.get(reason, 0) + 1
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    message = f"0/{total_nodes} nodes are available:"
    return f"{message} {', '.join(parts)}." if parts else message


def filtering_succeeded_message(chosen: str, fits: Sequence[NodeFit], failed: int) -> str:
    """HAMi's ``FilteringSucceed`` event text (``scheduler.go`` ``Filter``)."""
    scores = ",".join(f"{fit.node}:{fit.score:.2f}" for fit in fits)
    return f"find fit node({chosen}), {failed} nodes not fit, {len(fits)} nodes fit({scores})"


# --- the cluster -----------------------------------------------------------------------------


@dataclass
class Cluster:
    """One Kubernetes cluster's GPU nodes and HAMi quotas, consumed as pods are scheduled.

    ``quotas`` maps a namespace to its ResourceQuota; ``quota_used`` is what the namespace's
    scheduled pods hold (pre-existing usage can be seeded there).
    """

    nodes: list[Node]
    config: SchedulerConfig = SchedulerConfig()
    quotas: dict[str, GpuQuota] = field(default_factory=dict)
    quota_used: dict[str, QuotaUsage] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [node.name for node in self.nodes]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise PlacementInputError(f"duplicate node name(s) {', '.join(duplicates)}")

    @classmethod
    def from_tenant(cls, tenant: Tenant, config: SchedulerConfig = SchedulerConfig(), *, with_quota: bool = True) -> Cluster:
        """The tenant cluster its stack declares: workers' cards, and its quota if any."""
        quota = quota_for_tenant(tenant) if with_quota else None
        return cls(nodes_for_tenant(tenant), config, {quota.namespace: quota} if quota else {})

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def plan(self, pods: Iterable[Pod]) -> list[PodResult]:
        """Schedule pods in order, each one's placement consuming capacity for the next."""
        return [self.schedule(pod) for pod in pods]

    def schedule(self, pod: Pod, prefer_node: str | None = None) -> PodResult:
        """Admit, filter and place one pod, then record what it holds.

        ``prefer_node`` breaks a tie as a live HAMi did: taken when it scores as well as the
        model's own choice (see ``_choose``), ignored otherwise.
        """
        # Unmutated, such a pod keeps the scheduler it names: only one naming hami-scheduler itself
        # still reaches HAMi (the model then applies the webhook's defaults all the same).
        if pod.labels.get(WEBHOOK_IGNORE_LABEL[0]) == WEBHOOK_IGNORE_LABEL[1] and pod.scheduler_name != HAMI_SCHEDULER:
            return PodResult(
                pod.name,
                pod.namespace,
                STAGE_NOT_HAMI,
                message="labelled hami.io/webhook: ignore: HAMi's webhook never sees it, "
                "so HAMi neither schedules it nor counts what it holds",
            )
        used = self.quota_used.get(pod.namespace, QuotaUsage())
        quota = self.quotas.get(pod.namespace)
        admission = admit(pod, self.config, quota, used)
        if not admission.allowed:
            return PodResult(pod.name, pod.namespace, STAGE_ADMISSION, message=admission.message)
        if admission.bypassed:
            return PodResult(
                pod.name,
                pod.namespace,
                STAGE_NOT_HAMI,
                message=f"schedulerName {pod.scheduler_name}: HAMi's webhook lets it through unchanged, "
                "so HAMi neither schedules it nor counts what it holds",
            )
        pod = admission.pod
        requests = pod_requests(pod, self.config)
        if all(request is None for request in requests):
            # scheduler.go Filter: a pod asking for no device gets every node back.
            voided = [note for container in pod.all_containers if (note := voided_memory(container, self.config))]
            return PodResult(
                pod.name, pod.namespace, STAGE_NO_GPU, devices=tuple(() for _ in requests), message="; ".join(voided)
            )
        try:
            weights = scoring_weights(pod)
        except ScoringWeightsError as error:
            return PodResult(pod.name, pod.namespace, STAGE_ERROR, message=f"calcScore failed {error} for pod {pod.name}")
        context = FitContext(
            annotations=pod.annotations,
            gpu_policy=pod.annotations.get(GPU_POLICY_ANNOTATION, self.config.gpu_policy),
            weights=weights,
            quota_fits=lambda mem, cores: quota is None or quota.fits(used, mem, cores, self.config.memory_factor),
        )
        fits, node_reasons = self._filter(requests, len(pod.init_containers), context)
        if not fits:
            return PodResult(
                pod.name,
                pod.namespace,
                STAGE_FILTER,
                node_reasons=node_reasons,
                message=unschedulable_message(node_reasons, len(self.nodes)),
            )
        ranked = self._rank(fits, pod.annotations.get(NODE_POLICY_ANNOTATION, self.config.node_policy), prefer_node)
        chosen = ranked[-1]
        self._take(self.node(chosen.node), chosen.devices, len(pod.init_containers), pod.namespace)
        return PodResult(
            pod.name,
            pod.namespace,
            STAGE_SCHEDULED,
            node=chosen.node,
            devices=chosen.devices,
            node_reasons=node_reasons,
            message=filtering_succeeded_message(chosen.node, ranked, len(node_reasons)),
        )

    def _filter(
        self, requests: Sequence[Request | None], init_count: int, context: FitContext
    ) -> tuple[list[NodeFit], dict[str, str]]:
        fits: list[NodeFit] = []
        node_reasons: dict[str, str] = {}
        for node in sorted(self.nodes, key=lambda n: n.name):
            if not node.registered:
                node_reasons[node.name] = NODE_UNREGISTERED
                continue
            outcome = score_node(node, requests, init_count, context)
            if isinstance(outcome, str):
                node_reasons[node.name] = outcome
            else:
                fits.append(outcome)
        return fits, node_reasons

    @staticmethod
    def _rank(fits: Sequence[NodeFit], policy: str, prefer: str | None = None) -> list[NodeFit]:
        """The fits in the order Filter leaves them, the chosen node last.

        ``scheduler.go`` ``Filter`` sorts the scores with ``node_policy.go`` ``NodeScoreList.Less``
        (ascending for binpack, descending for spread), takes the last element and prints the
        list in that order in FilteringSucceed. Equal scores keep goroutine completion order, so
        HAMi's pick among them is not deterministic; the model takes the tied node whose name
        sorts first (``fits`` is in name order), unless ``prefer`` names another tied node.
        """
        ranked = sorted(fits, key=lambda fit: fit.score, reverse=policy == SPREAD)  # stable, as Go's for <= 12
        tied = [fit for fit in ranked if fit.score == ranked[-1].score]
        chosen = next((fit for fit in tied if fit.node == prefer), tied[0])
        return [fit for fit in ranked if fit is not chosen] + [chosen]

    def _take(self, node: Node, devices: Sequence[Sequence[Allocation]], init_count: int, namespace: str) -> None:
        held = collapse_usage(devices, init_count)
        for device in node.devices:
            if device.id in held:
                device.used += held[device.id].slots
                device.usedmem += held[device.id].mem
                device.usedcores += held[device.id].cores
        total = QuotaUsage(sum(h.mem for h in held.values()), sum(h.cores for h in held.values()))
        self.quota_used[namespace] = self.quota_used.get(namespace, QuotaUsage()) + total


def plan(
    pods: Iterable[Pod],
    nodes: Iterable[Node],
    config: SchedulerConfig = SchedulerConfig(),
    quotas: Iterable[GpuQuota] = (),
) -> list[PodResult]:
    """Schedule ``pods`` in order on copies of ``nodes``; the inputs are left untouched."""
    copies = [replace(node, devices=_copy_devices(node.devices)) for node in nodes]
    return Cluster(copies, config, {quota.namespace: quota for quota in quotas}).plan(pods)


# --- gpu-tenancy inventory -------------------------------------------------------------------


def nodes_for_tenant(tenant: Tenant) -> list[Node]:
    """The tenant's workers as HAMi registers them (``Card.register_entry``), usage zero."""
    return [
        Node.from_register_entries(worker.name, [card.register_entry() for card in worker.cards]) for worker in tenant.workers
    ]


def quota_for_tenant(tenant: Tenant) -> GpuQuota | None:
    """The HAMi quota a tenant's ``quota`` declares, in its namespace."""
    if tenant.quota is None:
        return None
    return GpuQuota(tenant.quota.namespace, tenant.quota.gpumem, tenant.quota.gpucores)
