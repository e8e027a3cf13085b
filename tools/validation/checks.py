"""The checks: the catalogue (what each proves) and how each decides.

Each check returns ``Result`` rows for one tenant (or ``-`` for the management cluster). Checks
that create pods take a ``Cleanup`` and register every pod with it before creating it. GPU
expectations come from ``expect`` (the placement model), never from constants.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpu_tenancy import gpus, placement
from gpu_tenancy.config import StackConfig, Tenant

from . import expect
from .context import RUN_LABEL, Cleanup, Run, Target, wait_for
from .expect import Probe, Step
from .kube import ApiRefused, EventView, Kube, KubeError, NodeView, PodView, TlsRefused, Unreachable
from .outputs import TenantOutputs
from .report import MANAGEMENT, Result, failed, passed, skipped


@dataclass(frozen=True)
class CheckInfo:
    id: str
    scope: str  # "management": one row; "tenant": one row per tenant
    proves: str


CATALOGUE: tuple[CheckInfo, ...] = (
    CheckInfo(
        "management",
        "management",
        "cert-manager, MetalLB and Kamaji Helm releases are deployed and every workload in their namespaces is ready",
    ),
    CheckInfo(
        "control-plane",
        "tenant",
        "the tenant's TenantControlPlane is Ready at the declared Kubernetes version, with Konnectivity, on its VIP",
    ),
    CheckInfo(
        "tenant-api",
        "tenant",
        "the tenant API answers at its VIP with its kubeconfig, at its version, and sees exactly its own nodes, all Ready",
    ),
    CheckInfo(
        "isolation",
        "tenant",
        "every other tenant's API refuses this tenant's credentials, and this tenant sees none of their namespaces or nodes",
    ),
    CheckInfo(
        "konnectivity",
        "tenant",
        "konnectivity agents are ready, and logs and exec on a tenant pod work (they only work through the tunnel)",
    ),
    CheckInfo(
        "gpu-registration",
        "tenant",
        "HAMi's scheduler and webhook are installed; each GPU worker is labelled gpu=on and registered with its declared cards",
    ),
    CheckInfo(
        "webhook",
        "tenant",
        "a pod asking for nvidia.com/gpumem gets schedulerName hami-scheduler and the nvidia.com/gpu limit the model adds",
    ),
    CheckInfo(
        "fractional-fit",
        "tenant",
        "as many 20000 MiB / 30 % pods land on each card as the model predicts for the inventory (3 on an A100-80GB)",
    ),
    CheckInfo(
        "fractional-next",
        "tenant",
        "the next such pod stays Pending with the model's reasons (CardInsufficientCore on an A100-80GB)",
    ),
    CheckInfo(
        "oversize",
        "tenant",
        "a 90000 MiB pod stays Pending with the model's reasons (CardInsufficientMemory where every card is smaller)",
    ),
    CheckInfo(
        "quota",
        "tenant",
        "a pod beyond the tenant's declared GPU quota is refused at admission (exceeding resource quota), as the model predicts",
    ),
)
CHECK_IDS: tuple[str, ...] = tuple(check.id for check in CATALOGUE)
# Checks that create pods or need the run's scratch namespace in each tenant.
SCRATCH_CHECKS = frozenset({"isolation", "konnectivity", "webhook", "fractional-fit", "fractional-next", "oversize"})

RELEASES: tuple[tuple[str, str], ...] = (
    ("cert-manager", "cert-manager"),
    ("metallb", "metallb-system"),
    ("kamaji", "kamaji-system"),
)
TCP_API = ("kamaji.clastix.io", "v1alpha1", "tenantcontrolplanes")
KUBE_SYSTEM = "kube-system"
KONNECTIVITY_AGENT = "konnectivity-agent"
HAMI_SCHEDULER = "hami-scheduler"
HAMI_WEBHOOK = "hami-webhook"
QUOTA_NAME = "gpu-quota"
# A nodeSelector no node matches: the webhook probe is about admission and must hold no card.
UNSCHEDULABLE = {"gpu-tenancy.io/validation": "never-schedule"}
SCHEDULING_EVENTS = frozenset({"FailedScheduling", "FilteringFailed"})
PENDING_EVENTS = SCHEDULING_EVENTS | {"BindingFailed"}
PAUSE_VERSION_COMMAND = ("/pause", "-v")  # pause.c prints "pause.c <version>" and exits 0


# --- management ------------------------------------------------------------------------------


def expected_releases(config: StackConfig) -> tuple[tuple[str, str], ...]:
    """The management releases the stack installs: MetalLB only when it knows the pool,
    cert-manager unless an existing cluster keeps its own.

    A kind management cluster always gets MetalLB; an existing one only with ``network.pool``
    (otherwise that cluster's own LoadBalancer serves the VIPs).
    """
    installed = {
        "cert-manager": config.management.install_cert_manager,
        "metallb": config.management.mode == "kind" or config.network.pool is not None,
        "kamaji": True,
    }
    return tuple((release, namespace) for release, namespace in RELEASES if installed[release])


def check_management(run: Run) -> list[Result]:
    problems: list[str] = []
    ready = 0
    releases = expected_releases(run.config)
    for release, namespace in releases:
        status = run.management.helm_release_status(namespace, release)
        if status != "deployed":
            problems.append(f"Helm release {namespace}/{release} is {status or 'missing'}")
        workloads = run.management.list_workloads(namespace)
        if not workloads:
            problems.append(f"no workloads in {namespace}")
        for workload in workloads:
            if workload.ok:
                ready += 1
            else:
                problems.append(f"{workload.kind} {namespace}/{workload.name} {workload.ready}/{workload.desired} ready")
    if problems:
        return [failed("management", MANAGEMENT, "; ".join(problems))]
    names = ", ".join(release for release, _ in releases)
    return [passed("management", MANAGEMENT, f"releases {names} deployed; {ready} workloads ready")]


def _dig(document: Any, *keys: str) -> Any:
    for key in keys:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def check_control_plane(run: Run, target: Target) -> list[Result]:
    namespace = target.outputs.namespace
    tcp = run.management.get_custom_object(TCP_API[0], TCP_API[1], namespace, TCP_API[2], target.name)
    if tcp is None:
        return [failed("control-plane", target.name, f"no TenantControlPlane {namespace}/{target.name}")]
    state = _dig(tcp, "status", "kubernetesResources", "version", "status")
    version = _dig(tcp, "status", "kubernetesResources", "version", "version")
    endpoint = _dig(tcp, "status", "controlPlaneEndpoint")
    problems = []
    if state != "Ready":
        problems.append(f"status {state or 'unset'}, not Ready")
    if version != target.outputs.kubernetes_version:
        problems.append(f"version {version or 'unset'}, declared {target.outputs.kubernetes_version}")
    if _dig(tcp, "status", "addons", "konnectivity", "enabled") is not True:
        problems.append("the Konnectivity addon is not enabled")
    # Kamaji reports Ready and the version from its Deployment, and sets observedGeneration only once
    # a reconcile of that generation completed (controllers/tenantcontrolplane_controller.go): behind
    # the spec's generation, Ready may describe the spec before the last change. (A Kamaji that never
    # sets it cannot say; that is not held against it.)
    generation, observed = _dig(tcp, "metadata", "generation"), _dig(tcp, "status", "observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        problems.append(f"status describes generation {observed}, the spec is at {generation}: still reconciling, re-run")
    expected_endpoint = target.outputs.endpoint.removeprefix("https://")
    if not endpoint:
        problems.append("no status.controlPlaneEndpoint")
    elif endpoint.removeprefix("https://") != expected_endpoint:
        problems.append(f"endpoint {endpoint}, but the stack's VIP endpoint is {expected_endpoint}")
    if problems:
        return [failed("control-plane", target.name, "; ".join(problems))]
    return [passed("control-plane", target.name, f"Ready, {version}, endpoint {endpoint}")]


# --- tenant API and isolation ----------------------------------------------------------------


def check_tenant_api(run: Run, target: Target) -> list[Result]:
    if target.kube is None or target.version is None:
        return [failed("tenant-api", target.name, target.problem)]
    problems = []
    if target.kube.server.rstrip("/") != target.outputs.endpoint.rstrip("/"):
        problems.append(f"the kubeconfig points at {target.kube.server}, not the VIP endpoint {target.outputs.endpoint}")
    if target.version.split("+")[0] != target.outputs.kubernetes_version:
        problems.append(f"version {target.version}, declared {target.outputs.kubernetes_version}")
    nodes = {node.name: node for node in target.kube.list_nodes()}
    expected = set(target.outputs.workers)
    if missing := sorted(expected - nodes.keys()):
        problems.append(f"missing nodes {', '.join(missing)}")
    if extra := sorted(nodes.keys() - expected):
        problems.append(f"nodes that are not its workers: {', '.join(extra)}")
    if not_ready := sorted(name for name, node in nodes.items() if not node.ready):
        problems.append(f"not Ready: {', '.join(not_ready)}")
    if problems:
        return [failed("tenant-api", target.name, "; ".join(problems))]
    node_list = ", ".join(sorted(nodes)) or "no nodes (none declared)"
    return [passed("tenant-api", target.name, f"answers at {target.outputs.endpoint} ({target.version}); Ready: {node_list}")]


def _refusal(run: Run, target: Target, other: Target, verify: bool) -> tuple[bool, str]:
    """Present ``target``'s credentials to ``other``'s API; (refused, how)."""
    mode = "verifying the server with its own CA" if verify else "without verifying the server"
    try:
        cross = run.connector(target.outputs.kubeconfig, server=other.outputs.endpoint, verify=verify)
        cross.list_namespaces()
    except TlsRefused as error:
        if verify:
            return True, f"TLS refused ({mode})"
        # kube-apiserver only requests client certificates in the handshake and judges them after
        # it (401), so without verification a failed handshake is not an API server's refusal.
        return False, f"TLS failed even without verifying the server, so {other.name}'s API judged no credentials: {error}"
    except ApiRefused as error:
        if error.status in (401, 403):
            return True, f"HTTP {error.status} ({mode})"
        return False, f"{other.name}'s API answered HTTP {error.status} ({mode}), neither 401 nor 403: {error.message}"
    except Unreachable as error:
        return False, f"could not reach {other.name}'s API to prove the refusal: {error}"
    except KubeError as error:
        return False, f"inconclusive probe of {other.name}'s API: {error}"
    return False, f"{other.name}'s API ACCEPTED {target.name}'s credentials ({mode})"


def check_isolation(run: Run, target: Target) -> list[Result]:
    others = [other for other in run.targets if other.name != target.name]
    if not others:
        return [skipped("isolation", target.name, "only one tenant: there is no other tenant to be isolated from")]
    kube = require_kube(target)
    problems: list[str] = []
    refusals: list[str] = []
    for other in others:
        # Verified: the other API's certificate is not signed by this tenant's CA. Unverified: past
        # TLS, the other API itself rejects the client certificate (401) or its identity (403).
        for verify in (True, False):
            refused, how = _refusal(run, target, other, verify)
            if refused:
                refusals.append(f"{other.name}: {how}")
            else:
                problems.append(how)
    namespaces = set(kube.list_namespaces())
    if target.scratch_ready and target.scratch not in namespaces:
        problems.append(f"cannot see its own marker namespace {target.scratch}, so the namespace listing proves nothing")
    for other in others:
        if other.scratch_ready and other.scratch in namespaces:
            problems.append(f"sees {other.name}'s namespace {other.scratch}")
    visible_nodes = {node.name for node in kube.list_nodes()}
    for other in others:
        if shared := sorted(visible_nodes & set(other.outputs.workers)):
            problems.append(f"sees {other.name}'s nodes {', '.join(shared)}")
    if problems:
        return [failed("isolation", target.name, "; ".join(problems))]
    markers = [other.name for other in others if other.scratch_ready]
    seen = f"none of the namespaces of {', '.join(markers)}" if markers else "no marker namespaces to look for"
    detail = f"credentials refused by {'; '.join(refusals)}; sees {seen} and none of their nodes"
    return [passed("isolation", target.name, detail)]


# --- konnectivity and HAMi's installation ----------------------------------------------------


def require_kube(target: Target) -> Kube:
    if target.kube is None:
        raise KubeError(target.problem or "no connection to the tenant")
    return target.kube


def _wait_running(run: Run, kube: Kube, namespace: str, name: str) -> PodView | str:
    """The pod once Running, or why it is not."""
    last: list[PodView] = []

    def probe() -> PodView | str | None:
        pod = kube.read_pod(namespace, name)
        if pod is None:
            return f"pod {namespace}/{name} disappeared"
        last[:] = [pod]
        if pod.phase == "Running":
            return pod
        if pod.phase in expect.TERMINATED_PHASES:
            return f"pod {namespace}/{name} ended {pod.phase}: {pod.reason} {pod.message}".rstrip()
        return None

    outcome = wait_for(run.clock, run.settings.start_timeout, run.settings.poll_interval, probe)
    if outcome is None:
        phase = last[0].phase if last else "unknown"
        return f"pod {namespace}/{name} not Running after {run.settings.start_timeout:.0f}s (phase {phase})"
    return outcome


def check_konnectivity(run: Run, target: Target, cleanup: Cleanup) -> list[Result]:
    kube = require_kube(target)
    agents = [w for w in kube.list_workloads(KUBE_SYSTEM) if w.name == KONNECTIVITY_AGENT]
    if not agents:
        return [failed("konnectivity", target.name, f"no {KONNECTIVITY_AGENT} in {KUBE_SYSTEM}")]
    agent = agents[0]
    if not target.outputs.workers:
        return [skipped("konnectivity", target.name, "no workers: there is no node to run a pod on")]
    if agent.desired == 0 or not agent.ok:
        return [failed("konnectivity", target.name, f"{agent.kind} {KONNECTIVITY_AGENT}: {agent.ready}/{agent.desired} ready")]
    name = "tunnel"
    cleanup.pod(kube, target.scratch, name)
    kube.create_pod(target.scratch, expect.pod_manifest(name, target.scratch, run.labels()))
    pod = _wait_running(run, kube, target.scratch, name)
    if isinstance(pod, str):
        return [failed("konnectivity", target.name, pod)]
    problems = []
    try:
        kube.pod_log(target.scratch, name)
    except KubeError as error:
        problems.append(f"logs failed: {error}")
    output = ""
    try:
        output = kube.pod_exec(target.scratch, name, PAUSE_VERSION_COMMAND).strip()
        if "pause" not in output:
            problems.append(f"exec printed {output[:80]!r}, not pause's version")
    except KubeError as error:
        problems.append(f"exec failed: {error}")
    if problems:
        return [failed("konnectivity", target.name, "; ".join(problems))]
    detail = (
        f"{agent.ready}/{agent.desired} agents ready; logs and exec on {target.scratch}/{name} ({pod.node_name}) work: {output}"
    )
    return [passed("konnectivity", target.name, detail)]


def registered_node(node: NodeView | None, name: str) -> placement.Node:
    """The cards HAMi sees on a live node (its register annotation); none when unreadable."""
    raw = node.annotations.get(gpus.REGISTER_ANNOTATION) if node is not None else None
    try:
        return placement.Node.from_register_entries(name, json.loads(raw or "null") or [], strict=False)
    except (ValueError, TypeError):
        return placement.Node(name)


def _registration_problems(declared: Tenant, nodes: Mapping[str, NodeView]) -> list[str]:
    """How the live GPU nodes differ from the declared cards.

    mock: the register annotation, the patched capacity and the mock plugin's resources are the
    project's own, so they must equal the declaration exactly. nvidia: HAMi's real plugin writes
    the real UUIDs and NVML's memory, so only the number of healthy cards and the slots are
    declared.
    """
    problems = []
    expected_nodes = {node.name: node for node in placement.nodes_for_tenant(declared)}
    for worker in declared.workers:
        if not worker.gpus:
            continue
        node = nodes.get(worker.name)
        if node is None:
            problems.append(f"{worker.name}: no such node")
            continue
        key, value = gpus.GPU_NODE_LABEL
        if node.labels.get(key) != value:
            problems.append(f"{worker.name}: not labelled {key}={value}")
        live = registered_node(node, worker.name)
        capacity = gpus.gpu_capacity(worker.cards)
        if declared.gpu_mode == "nvidia":
            healthy = [device for device in live.devices if device.health]
            if len(healthy) != len(worker.cards):
                problems.append(f"{worker.name}: {len(healthy)} healthy card(s) registered, {len(worker.cards)} declared")
            if not _quantity_is(node.allocatable.get(gpus.GPU_COUNT_RESOURCE), capacity):
                got = node.allocatable.get(gpus.GPU_COUNT_RESOURCE)
                problems.append(f"{worker.name}: allocatable {gpus.GPU_COUNT_RESOURCE} {got}, want {capacity}")
            continue
        if live.devices != expected_nodes[worker.name].devices:
            problems.append(
                f"{worker.name}: {gpus.REGISTER_ANNOTATION} registers {len(live.devices)} card(s) unlike the declared ones"
            )
        if not _quantity_is(node.capacity.get(gpus.GPU_COUNT_RESOURCE), capacity):
            problems.append(
                f"{worker.name}: capacity {gpus.GPU_COUNT_RESOURCE} {node.capacity.get(gpus.GPU_COUNT_RESOURCE)}, want {capacity}"
            )
        memory, cores = gpus.inventory_totals(worker.cards)
        for resource, want in ((gpus.GPU_MEMORY_RESOURCE, memory), (gpus.GPU_CORES_RESOURCE, cores)):
            if not _quantity_is(node.allocatable.get(resource), want):
                problems.append(
                    f"{worker.name}: allocatable {resource} {node.allocatable.get(resource)}, want {want} (mock device plugin)"
                )
    return problems


def _declared_gpus(declared: Tenant) -> dict[str, list[tuple[str, int]]]:
    return {worker.name: [(gpu.model, gpu.count) for gpu in worker.gpus] for worker in declared.workers}


def _deployed_gpus(outputs: TenantOutputs) -> dict[str, list[tuple[str, int]]]:
    return {worker: [(gpu.model, gpu.count) for gpu in entries] for worker, entries in outputs.gpus.items()}


def _require_declared(run: Run, target: Target) -> Tenant:
    if target.declared is None:
        raise KubeError(f"Pulumi.{run.stack}.yaml declares no tenant {target.name}: the config changed since the last `make up`")
    return target.declared


def check_gpu_registration(run: Run, target: Target) -> list[Result]:
    kube = require_kube(target)
    declared = _require_declared(run, target)
    problems = []
    if _declared_gpus(declared) != _deployed_gpus(target.outputs):
        problems.append(f"the deployed GPUs (stack outputs) differ from Pulumi.{run.stack}.yaml: redeploy with `make up`")
    scheduler = [w for w in kube.list_workloads(KUBE_SYSTEM) if w.kind == "Deployment" and w.name == HAMI_SCHEDULER]
    if not scheduler or scheduler[0].desired == 0 or not scheduler[0].ok:
        state = f"{scheduler[0].ready}/{scheduler[0].desired} ready" if scheduler else "missing"
        problems.append(f"Deployment {KUBE_SYSTEM}/{HAMI_SCHEDULER} {state}")
    if not kube.webhook_configuration_exists(HAMI_WEBHOOK):
        problems.append(f"no MutatingWebhookConfiguration {HAMI_WEBHOOK}")
    last: list[list[str]] = [[]]

    def registered() -> bool | None:
        last[0] = _registration_problems(declared, {node.name: node for node in kube.list_nodes()})
        return True if not last[0] else None

    wait_for(run.clock, run.settings.registration_timeout, run.settings.poll_interval, registered)
    problems += last[0]
    if problems:
        return [failed("gpu-registration", target.name, "; ".join(problems))]
    cards = [f"{w.name}: {len(w.cards)}× {w.cards[0].model.model}" for w in declared.workers if w.cards]
    inventory = "; ".join(cards) if cards else "no GPUs declared"
    return [passed("gpu-registration", target.name, f"{HAMI_SCHEDULER} ready, {HAMI_WEBHOOK} present; registered {inventory}")]


# --- HAMi behaviour --------------------------------------------------------------------------


def check_webhook(run: Run, target: Target, cleanup: Cleanup) -> list[Result]:
    kube = require_kube(target)
    probe = Probe("webhook", expect.PROBE_MEMORY_MIB, expect.PROBE_CORES)
    admitted = placement.admit(probe.model_pod(target.scratch))
    want_gpu = str(admitted.pod.containers[0].limits.get(placement.GPU))
    manifest = expect.pod_manifest(probe.name, target.scratch, run.labels(), probe.limits, UNSCHEDULABLE)
    cleanup.pod(kube, target.scratch, probe.name)
    pod = kube.create_pod(target.scratch, manifest)
    problems = []
    if pod.scheduler_name != HAMI_SCHEDULER:
        hint = "the webhook did not mutate it; failurePolicy Ignore hides an unreachable webhook (is Konnectivity up?)"
        if not kube.webhook_configuration_exists(HAMI_WEBHOOK):
            hint = f"there is no MutatingWebhookConfiguration {HAMI_WEBHOOK}"
        problems.append(f"schedulerName is {pod.scheduler_name}: {hint}")
    if pod.limits.get(placement.GPU) != want_gpu:
        problems.append(f"limit {placement.GPU} is {pod.limits.get(placement.GPU)}, the model's webhook sets {want_gpu}")
    if problems:
        return [failed("webhook", target.name, "; ".join(problems))]
    return [
        passed(
            "webhook", target.name, f"schedulerName {HAMI_SCHEDULER}, {placement.GPU} {want_gpu} added, as the model admits it"
        )
    ]


def _events_of(kube: Kube, pod: PodView, reasons: frozenset[str]) -> list[EventView]:
    """The pod's events with these reasons, oldest first.

    Events outlive their pod, so an event about an earlier pod of the same name (another uid)
    must not count for this one.
    """
    events = [e for e in kube.pod_events(pod.namespace, pod.name) if e.reason in reasons and (not e.uid or e.uid == pod.uid)]
    return sorted(events, key=lambda event: event.timestamp)


def _wait_landed(run: Run, kube: Kube, created: PodView, step: Step) -> PodView | str:
    """The probe once HAMi placed it and it is bound, or why it did not land."""
    namespace, name = created.namespace, created.name

    def probe() -> PodView | str | None:
        pod = kube.read_pod(namespace, name)
        if pod is None:
            return f"{name} disappeared"
        if pod.phase in expect.TERMINATED_PHASES:
            return f"{name} ended {pod.phase} on {pod.node_name}: {pod.reason} {pod.message}".rstrip()
        if pod.node_name and pod.annotations.get(expect.ALLOCATED_ANNOTATION):
            return pod
        return None

    outcome = wait_for(run.clock, run.settings.land_timeout, run.settings.poll_interval, probe)
    if outcome is None:
        events = _events_of(kube, created, PENDING_EVENTS)
        event = events[-1].message if events else "no scheduling event"
        return f"{name} not placed within {run.settings.land_timeout:.0f}s, the model places it on {step.result.node}: {event}"
    return outcome


def _place(run: Run, kube: Kube, namespace: str, steps: Sequence[Step], cleanup: Cleanup) -> tuple[list[PodView], str]:
    """Create the probes the model places, one at a time, each landing before the next is created."""
    landed: list[PodView] = []
    for step in steps:
        cleanup.pod(kube, namespace, step.probe.name)
        manifest = expect.pod_manifest(step.probe.name, namespace, run.labels(), step.probe.limits)
        try:
            created = kube.create_pod(namespace, manifest)
        except ApiRefused as error:
            return landed, f"{step.probe.name} refused at creation ({error}); the model places it on {step.result.node}"
        pod = _wait_landed(run, kube, created, step)
        if isinstance(pod, str):
            return landed, pod
        landed.append(pod)
    return landed, ""


def live_cards(pods: Sequence[PodView]) -> Counter[tuple[str, str]]:
    """How many of ``pods`` each (node, card) holds, from HAMi's allocation annotation."""
    counts: Counter[tuple[str, str]] = Counter()
    for pod in pods:
        for container in expect.parse_allocated(pod.annotations.get(expect.ALLOCATED_ANNOTATION, "")):
            for use in container:
                counts[(pod.node_name or "", use.card)] += 1
    return counts


def _expect_pending(run: Run, kube: Kube, check: str, tenant: str, namespace: str, step: Step, cleanup: Cleanup) -> Result:
    """Create the probe the model refuses in Filter; it must stay unbound with the model's reasons."""
    name, want = step.probe.name, frozenset(step.result.reasons)
    cleanup.pod(kube, namespace, name)
    try:
        created = kube.create_pod(namespace, expect.pod_manifest(name, namespace, run.labels(), step.probe.limits))
    except ApiRefused as error:
        return failed(check, tenant, f"{name} refused at creation ({error}); the model expects it Pending: {step.result.message}")
    seen: list[str] = []

    def probe() -> tuple[str, str] | None:
        pod = kube.read_pod(namespace, name)
        if pod is not None and pod.node_name:
            return "bound", pod.node_name
        events = _events_of(kube, created, SCHEDULING_EVENTS)
        aggregated = [e.message for e in events if e.reason == "FailedScheduling"]
        # HAMi's FilteringFailed events carry one reason each; together they name them all.
        per_reason = " ".join(e.message for e in events if e.reason == "FilteringFailed")
        for message in [*aggregated, per_reason]:
            if message and expect.observed_reasons(message) == want:
                return "match", message
        if aggregated or per_reason:
            seen[:] = [aggregated[-1] if aggregated else per_reason]
        return None

    outcome = wait_for(run.clock, run.settings.event_timeout, run.settings.poll_interval, probe)
    wanted = ", ".join(sorted(want))
    if outcome is None:
        last = seen[0] if seen else "no FailedScheduling event"
        return failed(
            check,
            tenant,
            f"{name} shows no event with the model's reasons ({wanted}) within {run.settings.event_timeout:.0f}s; last: {last}",
        )
    kind, text = outcome
    pod = kube.read_pod(namespace, name)
    if kind == "bound" or (pod is not None and pod.node_name):
        return failed(
            check, tenant, f"{name} was placed on {pod.node_name if pod else text}; the model refuses it: {step.result.message}"
        )
    return passed(check, tenant, f"{name} ({step.probe.describe()}) stays Pending: {text} (model: {step.result.message})")


@dataclass(frozen=True)
class Model:
    """The tenant's model: fresh copies on demand, the usage it starts from, readable card names."""

    make: Callable[[], placement.Cluster]
    usage: expect.LiveUsage
    labels: Mapping[str, str]


def _model_for(kube: Kube, declared: Tenant) -> Model:
    """The model of the tenant as it is now: its cards, the GPU pods already holding them, its quota.

    The declared cards drive the expectations in both GPU modes. mock: the project registers them
    itself. nvidia: HAMi's real device plugin names the cards by their real UUIDs, so each
    declared card takes the UUID registered at its index on its node (gpu-registration compares
    the rest with the declaration); a real card with more memory than declared still gets the
    declared expectation, and the check shows the difference.
    """
    usage = expect.live_usage(kube.list_pods())
    if declared.gpu_mode != "nvidia":
        return Model(lambda: expect.model_cluster(declared, usage, with_quota=True), usage, expect.card_labels(declared))
    live = {node.name: node for node in kube.list_nodes()}
    nodes = []
    for node in placement.nodes_for_tenant(declared):
        real_ids = {device.index: device.id for device in registered_node(live.get(node.name), node.name).devices}
        nodes.append(replace(node, devices=[replace(d, id=real_ids.get(d.index, d.id)) for d in node.devices]))
    labels = {d.id: f"{node.name}#{d.index} ({d.type})" for node in nodes for d in node.devices}
    return Model(lambda: expect.model_cluster(declared, usage, with_quota=True, nodes=nodes), usage, labels)


def _leftover_probes(kube: Kube, run: Run) -> list[str]:
    """Probe pods an earlier run left behind (killed, or its cleanup gave up): pause pods that
    never exit and keep their cards and the tenant's quota, which HAMi counts like any pod's."""
    return sorted(
        f"{pod.namespace}/{pod.name}"
        for pod in kube.list_pods()
        if RUN_LABEL in pod.labels and pod.labels[RUN_LABEL] != run.run_id and expect.holds_allocation(pod)
    )


def _usage_note(usage: expect.LiveUsage) -> str:
    return f" (with {usage.pods} GPU pod(s) already holding cards)" if usage.pods else ""


def check_fractional(run: Run, target: Target, cleanup: Cleanup) -> list[Result]:
    kube, declared = require_kube(target), _require_declared(run, target)
    if not declared.cards:
        return [skipped(c, target.name, "no GPUs declared") for c in ("fractional-fit", "fractional-next")]
    not_run = skipped("fractional-next", target.name, "not run: fractional-fit failed")
    leftovers = _leftover_probes(kube, run)
    if leftovers:
        detail = (
            f"{len(leftovers)} probe pod(s) of an earlier validation run still hold GPUs and quota: "
            f"{', '.join(leftovers)}; delete them (kubectl delete pods -A -l {RUN_LABEL}) and run again"
        )
        return [failed("fractional-fit", target.name, detail), not_run]
    model = _model_for(kube, declared)
    plan = expect.plan_fractional(model.make(), target.scratch, "fit", run.settings.max_fit_pods)
    labels, usage = model.labels, model.usage
    probe = f"{expect.PROBE_MEMORY_MIB} MiB/{expect.PROBE_CORES} %"
    landed, problem = _place(run, kube, target.scratch, plan.placed, cleanup)
    if problem:
        return [failed("fractional-fit", target.name, problem), not_run]
    live, want = live_cards(landed), plan.cards()
    if live != want:
        # HAMi breaks ties between equally scored nodes by goroutine timing: follow its choices
        # wherever they tie with the model's, and compare the cards it then takes.
        nodes = [pod.node_name for pod in landed]
        plan = expect.plan_fractional(model.make(), target.scratch, "fit", run.settings.max_fit_pods, nodes)
        want = plan.cards()
    if live != want:
        landed_on, expected_on = expect.describe_cards(live, labels), expect.describe_cards(want, labels)
        detail = f"{probe} pods landed on {landed_on}; the model expects {expected_on}"
        return [failed("fractional-fit", target.name, detail), not_run]
    if plan.placed:
        detail = (
            f"{len(landed)} × {probe} landed: {expect.describe_cards(live, labels)}, as the model predicts{_usage_note(usage)}"
        )
        fit = passed("fractional-fit", target.name, detail)
    else:
        first = plan.refused.result.message if plan.refused else ""
        fit = skipped("fractional-fit", target.name, f"the model places no {probe} pod here: {first}")
    if plan.refused is None:
        return [fit, skipped("fractional-next", target.name, plan.note)]
    return [fit, _expect_pending(run, kube, "fractional-next", target.name, target.scratch, plan.refused, cleanup)]


def check_oversize(run: Run, target: Target, cleanup: Cleanup) -> list[Result]:
    kube, declared = require_kube(target), _require_declared(run, target)
    if not declared.cards:
        return [skipped("oversize", target.name, "no GPUs declared")]
    plan = expect.plan_oversize(_model_for(kube, declared).make(), target.scratch, "oversize")
    if plan.refused is None:
        return [skipped("oversize", target.name, f"{plan.note}: no oversize to prove on this inventory")]
    return [_expect_pending(run, kube, "oversize", target.name, target.scratch, plan.refused, cleanup)]


def _quantity_is(live: str | None, want: int) -> bool:
    """Whether a quantity as the API server returns it is ``want``.

    The server stores quantities in canonical form, so a declared 600000 reads back as "600k"
    (k8s.io/apimachinery:pkg/api/resource/quantity.go, CanonicalizeBytes).
    """
    if live is None:
        return False
    try:
        return placement.parse_quantity(live) == want
    except placement.PlacementInputError:
        return False


def check_quota(run: Run, target: Target, cleanup: Cleanup) -> list[Result]:
    kube, declared = require_kube(target), _require_declared(run, target)
    quota = placement.quota_for_tenant(declared)
    if quota is None:
        return [skipped("quota", target.name, f"{target.name} declares no GPU quota")]
    hard = kube.get_resource_quota(quota.namespace, QUOTA_NAME)
    want_hard = {f"limits.{placement.GPUMEM}": quota.gpumem, f"limits.{placement.GPUCORES}": quota.gpucores}
    if hard is None:
        return [failed("quota", target.name, f"no ResourceQuota {quota.namespace}/{QUOTA_NAME}")]
    if not all(_quantity_is(hard.get(key), want) for key, want in want_hard.items()):
        return [failed("quota", target.name, f"ResourceQuota {quota.namespace}/{QUOTA_NAME} is {hard}, declared {want_hard}")]
    model = _model_for(kube, declared)
    usage = model.usage
    plan = expect.plan_quota(model.make, quota, f"validate-{run.run_id}-quota", run.settings.max_fit_pods)
    if plan.refused is None:
        return [skipped("quota", target.name, plan.note)]
    landed, problem = _place(run, kube, quota.namespace, plan.placed, cleanup)
    if problem:
        return [failed("quota", target.name, problem)]
    refused = plan.refused
    cleanup.pod(kube, quota.namespace, refused.probe.name)
    manifest = expect.pod_manifest(refused.probe.name, quota.namespace, run.labels(), refused.probe.limits)
    try:
        kube.create_pod(quota.namespace, manifest)
    except ApiRefused as error:
        if placement.EXCEEDING_RESOURCE_QUOTA not in error.message:
            return [failed("quota", target.name, f"{refused.probe.name} refused, but not by the quota: {error}")]
        limit = f"quota {quota.gpumem} MiB/{quota.gpucores} % in {quota.namespace}"
        before = f"after {len(landed)} × {plan.placed[0].probe.describe()} placed, " if landed else ""
        detail = (
            f"{limit}: {before}{refused.probe.name} ({refused.probe.describe()}) refused: {error.message}{_usage_note(usage)}"
        )
        return [passed("quota", target.name, detail)]
    return [
        failed(
            "quota",
            target.name,
            f"{refused.probe.name} ({refused.probe.describe()}) was admitted; the model refuses it: {refused.result.message}",
        )
    ]
