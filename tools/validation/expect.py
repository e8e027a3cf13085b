"""What the GPU checks expect, computed by ``gpu_tenancy.placement``, never written down as constants.

The model gets the tenant's declared inventory (``Cluster.from_tenant``) plus the GPU usage the
tenant already has (pods carrying HAMi's ``hami.io/vgpu-devices-allocated``), and then plans the
suite's probe pods in the order the suite creates them. A ``Plan`` says which probes land where
and which one is the first the model refuses, with the stage (``filter`` or ``admission``), the
reasons and the message. The live probes are built from the same ``Probe`` as the model's pods,
so the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpu_tenancy import placement
from gpu_tenancy.config import Tenant
from gpu_tenancy.placement import CardHold, Cluster, GpuQuota, PodResult, QuotaUsage

from .kube import PodView

# The probe workloads: a fractional slice (20000 MiB, 30 % of the cores) and an
# oversized memory request. Only the request sizes are fixed; what happens to them is the model's.
PROBE_MEMORY_MIB = 20000
PROBE_CORES = 30
OVERSIZE_MEMORY_MIB = 90000
# Every probe pod runs pause, pinned, tiny, and present on every node that ran a pod before.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# The pause image's own user; restricted PodSecurity would accept the probes as they are.
PAUSE_USER = 65535
# Probes the fractional and quota checks create at most before giving up on seeing a refusal.
DEFAULT_MAX_FIT_PODS = 12

ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
VGPU_NODE_ANNOTATION = "hami.io/vgpu-node"
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})

# Every reason HAMi's Filter can give (pkg/device/common/common.go), as the model names them.
KNOWN_REASONS: tuple[str, ...] = (
    placement.CARD_NOT_HEALTH,
    placement.CARD_CORDONED,
    placement.CARD_TYPE_MISMATCH,
    placement.NUMA_NOT_FIT,
    placement.CARD_UUID_MISMATCH,
    placement.CARD_TIME_SLICING_EXHAUSTED,
    placement.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
    placement.RESOURCE_QUOTA_NOT_FIT,
    placement.CARD_INSUFFICIENT_MEMORY,
    placement.CARD_INSUFFICIENT_CORE,
    placement.CARD_COMPUTE_UNITS_EXHAUSTED,
    placement.ALLOCATED_CARDS_INSUFFICIENT_REQUEST,
    placement.NODE_INSUFFICIENT_DEVICE,
    placement.NODE_UNREGISTERED,
)
_REASON_PATTERNS = {reason: re.compile(rf"(?<![A-Za-z]){re.escape(reason)}(?![A-Za-z])") for reason in KNOWN_REASONS}


# --- probes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One test pod's name and GPU request, shared by the model and the live manifest."""

    name: str
    memory_mib: int
    cores: int

    @property
    def limits(self) -> dict[str, int]:
        # No nvidia.com/gpu: HAMi's webhook adds it (defaultGPUNum), as it would for a user's pod.
        return {placement.GPUMEM: self.memory_mib, placement.GPUCORES: self.cores}

    def model_pod(self, namespace: str) -> placement.Pod:
        return placement.Pod(self.name, namespace, containers=(placement.Container("probe", self.limits),))

    def describe(self) -> str:
        return f"{self.memory_mib} MiB/{self.cores} %"


def pod_manifest(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    limits: Mapping[str, int] | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """A pause pod: not privileged (HAMi's webhook denies privileged GPU pods), never restarted."""
    container: dict[str, object] = {
        "name": "probe",
        "image": PAUSE_IMAGE,
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]}},
    }
    if limits:
        container["resources"] = {"limits": {key: str(value) for key, value in limits.items()}}
    spec: dict[str, object] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": PAUSE_USER, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


# --- live usage ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CardUse:
    card: str
    mem: int
    cores: int


def parse_allocated(text: str) -> list[list[CardUse]]:
    """``hami.io/vgpu-devices-allocated``: ``UUID,NVIDIA,<MiB>,<cores>:`` per card, ``;`` per container."""
    containers: list[list[CardUse]] = []
    for chunk in text.split(";"):
        cards = []
        for device in chunk.split(":"):
            fields = device.split(",")
            if len(fields) >= 4 and fields[0] and fields[2].isdigit() and fields[3].isdigit():
                cards.append(CardUse(fields[0], int(fields[2]), int(fields[3])))
        if cards:
            containers.append(cards)
    return containers


def holds_allocation(pod: PodView) -> bool:
    """Whether HAMi counts the pod's cards as used: it passed Filter and has not terminated."""
    return bool(pod.annotations.get(ALLOCATED_ANNOTATION)) and pod.phase not in TERMINATED_PHASES


@dataclass
class LiveUsage:
    """What pods already hold, per card (slots, MiB, cores) and per namespace (for quotas)."""

    cards: dict[str, CardHold] = field(default_factory=dict)
    namespaces: dict[str, QuotaUsage] = field(default_factory=dict)
    pods: int = 0


def live_usage(pods: Iterable[PodView]) -> LiveUsage:
    """Usage as HAMi's pod cache sums it (``onAddPod``): one slot per container and card.

    Init containers cannot be told apart in the annotation, so they count like app containers;
    that over-reserves, which makes the model refuse earlier, never place a pod HAMi would not.
    """
    usage = LiveUsage()
    for pod in pods:
        if not holds_allocation(pod):
            continue
        usage.pods += 1
        for container in parse_allocated(pod.annotations[ALLOCATED_ANNOTATION]):
            for use in container:
                held = usage.cards.get(use.card, CardHold())
                usage.cards[use.card] = CardHold(held.slots + 1, held.mem + use.mem, held.cores + use.cores)
                spent = usage.namespaces.get(pod.namespace, QuotaUsage())
                usage.namespaces[pod.namespace] = spent + QuotaUsage(use.mem, use.cores)
    return usage


def model_cluster(
    tenant: Tenant, usage: LiveUsage, *, with_quota: bool, nodes: Sequence[placement.Node] | None = None
) -> Cluster:
    """The tenant as HAMi sees it now: its cards, the live usage on them, its quota if asked.

    The cards are the declared ones unless ``nodes`` gives the registered ones (real GPUs).
    """
    if nodes is None:
        cluster = Cluster.from_tenant(tenant, with_quota=with_quota)
    else:
        quota = placement.quota_for_tenant(tenant) if with_quota else None
        copies = [replace(node, devices=[replace(device) for device in node.devices]) for node in nodes]
        cluster = Cluster(copies, quotas={quota.namespace: quota} if quota else {})
    for node in cluster.nodes:
        for device in node.devices:
            held = usage.cards.get(device.id)
            if held is not None:
                device.used += held.slots
                device.usedmem += held.mem
                device.usedcores += held.cores
    cluster.quota_used = dict(usage.namespaces)
    return cluster


# --- plans -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    probe: Probe
    result: PodResult


@dataclass(frozen=True)
class Plan:
    """Probes the model places, in order, then the first it refuses (None: ``note`` says why)."""

    placed: tuple[Step, ...]
    refused: Step | None
    note: str = ""

    def cards(self) -> Counter[tuple[str, str]]:
        """How many placed probes each (node, card) takes."""
        counts: Counter[tuple[str, str]] = Counter()
        for step in self.placed:
            for container in step.result.devices:
                for allocation in container:
                    counts[(step.result.node or "", allocation.id)] += 1
        return counts


def plan_fractional(cluster: Cluster, namespace: str, prefix: str, max_pods: int, nodes: Sequence[str | None] = ()) -> Plan:
    """``PROBE_MEMORY_MIB``/``PROBE_CORES`` probes until the model refuses one (at most ``max_pods`` placed).

    ``nodes`` are where live probes landed, in order: where HAMi broke a tie between equally
    scored nodes differently from the model, the plan follows it (see ``Cluster.schedule``).
    """
    placed: list[Step] = []
    for number in range(1, max_pods + 2):
        probe = Probe(f"{prefix}-{number}", PROBE_MEMORY_MIB, PROBE_CORES)
        prefer = nodes[number - 1] if number <= len(nodes) else None
        step = Step(probe, cluster.schedule(probe.model_pod(namespace), prefer_node=prefer))
        if not step.result.scheduled:
            return Plan(tuple(placed), step)
        if len(placed) == max_pods:
            break
        placed.append(step)
    return Plan(tuple(placed), None, f"the model places more than {max_pods} probes; raise --max-fit-pods to reach a refusal")


def plan_oversize(cluster: Cluster, namespace: str, name: str) -> Plan:
    probe = Probe(name, OVERSIZE_MEMORY_MIB, PROBE_CORES)
    step = Step(probe, cluster.schedule(probe.model_pod(namespace)))
    if step.result.scheduled:
        return Plan((step,), None, f"the model places a {probe.describe()} pod on {step.result.node}")
    return Plan((), step)


def _headroom_probe(name: str, quota: GpuQuota, used: QuotaUsage) -> Probe:
    """One pod just beyond what the quota has left, in the dimension the quota limits."""
    if quota.gpumem is not None:
        return Probe(name, max(quota.gpumem - used.mem, 0) + 1, PROBE_CORES)
    cores = max((quota.gpucores or 0) - used.cores, 0) + 1
    return Probe(name, PROBE_MEMORY_MIB, cores)


def plan_quota(make_cluster: Callable[[], Cluster], quota: GpuQuota, prefix: str, max_pods: int) -> Plan:
    """Fractional probes in the quota's namespace until the quota refuses one at admission.

    When the cards run out first (the model refuses a probe in Filter, e.g. cards smaller than
    the probe), a single probe sized just beyond the quota's remaining headroom is planned instead.
    """
    fractional = plan_fractional(make_cluster(), quota.namespace, prefix, max_pods)
    if fractional.refused is not None and _is_quota_refusal(fractional.refused.result):
        return fractional
    cluster = make_cluster()
    probe = _headroom_probe(f"{prefix}-beyond", quota, cluster.quota_used.get(quota.namespace, QuotaUsage()))
    step = Step(probe, cluster.schedule(probe.model_pod(quota.namespace)))
    if _is_quota_refusal(step.result):
        return Plan((), step, "the cards run out before the quota does, so one pod beyond the quota's headroom is used")
    return Plan(
        (), None, f"the model does not refuse a {probe.describe()} pod at admission: {step.result.message or step.result.stage}"
    )


def _is_quota_refusal(result: PodResult) -> bool:
    return result.stage == placement.STAGE_ADMISSION and placement.EXCEEDING_RESOURCE_QUOTA in result.message


# --- reading what the cluster said -----------------------------------------------------------


def observed_reasons(message: str) -> frozenset[str]:
    """HAMi reason names in a scheduling event's message."""
    return frozenset(reason for reason, pattern in _REASON_PATTERNS.items() if pattern.search(message))


def card_labels(tenant: Tenant) -> dict[str, str]:
    """card id -> ``worker#index (type)``, for readable details."""
    return {card.id: f"{worker.name}#{card.index} ({card.model.model})" for worker in tenant.workers for card in worker.cards}


def describe_cards(counts: Counter[tuple[str, str]], labels: Mapping[str, str]) -> str:
    if not counts:
        return "none"
    named = sorted((labels.get(card, f"{node}/{card}"), n) for (node, card), n in counts.items())
    return ", ".join(f"{label} ×{n}" for label, n in named)
