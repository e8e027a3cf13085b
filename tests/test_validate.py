"""``python -m tools.validate``: expectations from the model, each check's decision, cleanup, reporting, exit 2.

No cluster here: the checks run against ``FakeKube``, a fake of the ``Kube`` interface whose
"HAMi" admits and places pods with ``gpu_tenancy.placement`` on the cards *it* is given. Pass
paths give it the declared cards; fail paths make it misbehave (other cards, no webhook, no
quota, no binding, wrong reasons) and the check must say so. Time is a fake clock, so every
bounded wait runs instantly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import urllib3
import websocket
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpu_tenancy import gpus, placement
from gpu_tenancy.config import StackConfig, Tenant
from gpu_tenancy.stack_file import load_stack_config
from tests.conftest import MGMT_KUBECONFIG, SSH_KEY
from tests.shell import executable
from tools import validate
from tools.validation import checks, context, expect, interrupts, kube, outputs, report, runner
from tools.validation.context import RUN_LABEL, Cleanup, Run, Settings, Target
from tools.validation.kube import ApiRefused, EventView, KubeError, NodeView, PodView, TlsRefused, Unreachable, Workload

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEV_FILE = PROJECT_DIR / "Pulumi.dev.yaml"
DEV = load_stack_config(DEV_FILE)
TENANT_A, TENANT_B = DEV.tenant("tenant-a"), DEV.tenant("tenant-b")

# A different inventory: one tenant with two L4s only, and a quota in its own namespace.
L4_ONLY_RAW: dict[str, Any] = {
    "tenants": [
        {
            "name": "lab",
            "workers": [{"name": "lab-worker-0", "gpus": [{"model": "L4", "count": 2}]}],
            "quota": {"gpumem": 46068, "gpucores": 200, "namespace": "research"},
        }
    ]
}
L4_ONLY = StackConfig.load(L4_ONLY_RAW)
SECRET = "s3cr3t-client-key-material"


def tenant_of(raw_tenant: dict[str, Any]) -> Tenant:
    return StackConfig.load({"tenants": [raw_tenant]}).tenants[0]


def real_gpus(tenant: str, worker: str, model: str, count: int = 1) -> dict[str, Any]:
    """A tenant on a real GPU host: more memory on one node than the mock plugin can list."""
    return {
        "name": tenant,
        "gpuMode": "nvidia",
        "workers": [
            {
                "name": worker,
                "ssh": {"host": "10.0.0.11", "user": "ubuntu", "privateKey": SSH_KEY},
                "gpus": [{"model": model, "count": count}],
            }
        ],
    }


# --- fakes -----------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "a poll loop must never spin without sleeping"
        self.now += seconds


def _encode_allocation(devices: Sequence[Sequence[placement.Allocation]]) -> str:
    return "".join("".join(f"{a.id},NVIDIA,{a.usedmem},{a.usedcores}:" for a in container) + ";" for container in devices)


def _model_pod(namespace: str, manifest: Mapping[str, Any]) -> placement.Pod:
    container = manifest["spec"]["containers"][0]
    limits = (container.get("resources") or {}).get("limits") or {}
    privileged = bool((container.get("securityContext") or {}).get("privileged"))
    return placement.Pod(
        manifest["metadata"]["name"],
        namespace,
        containers=(placement.Container(container["name"], dict(limits), {}, privileged),),
    )


@dataclass
class FakePod:
    view: PodView
    model: placement.Pod | None = None  # set while "HAMi" counts its cards


@dataclass
class FakeKube:
    """One cluster. As a tenant, its HAMi places pods with the model on ``hami_cards``' inventory."""

    server: str = "https://10.0.0.1:6443"
    version: str = "v1.36.4"
    nodes: list[NodeView] = field(default_factory=list)
    namespaces: set[str] = field(default_factory=lambda: {"default", "kube-system", "kube-public"})
    workloads: dict[str, list[Workload]] = field(default_factory=dict)
    releases: dict[tuple[str, str], str] = field(default_factory=dict)
    custom: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    webhooks: set[str] = field(default_factory=set)
    quotas: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    hami_cards: Tenant | None = None  # what HAMi really has; None: no HAMi at all
    hami_nodes: list[placement.Node] | None = None  # instead of hami_cards' cards: real GPUs' registration
    webhook_mutates: bool = True
    quota_enforced: bool = True
    binds: bool = True
    # False: pods are bound without HAMi's allocation annotation, as the default scheduler binds them.
    annotates: bool = True
    exec_output: str = "pause.c v3.10\n"
    force_bind: set[str] = field(default_factory=set)  # pods "HAMi" places whatever the model says
    tie_break: str | None = None  # the node "HAMi" picks among equally scored ones (goroutine timing)
    messages: dict[str, str] = field(default_factory=dict)  # pod -> the FailedScheduling text "HAMi" gives
    # Pods for which "HAMi" also records its own FilteringFailed events, one per reason
    # (Project-HAMi/HAMi:pkg/scheduler/score.go: "<n> nodes <Reason>(<nodes>)").
    filtering_events: set[str] = field(default_factory=set)
    refusals: dict[str, Exception] = field(default_factory=dict)  # pod -> what the API server answers its create with
    # Pods "HAMi" refuses but that get bound (uncounted) right after their events are read: a race.
    bind_after_events: set[str] = field(default_factory=set)
    fail_on: dict[str, Exception] = field(default_factory=dict)  # method name -> error it raises
    pods: dict[tuple[str, str], FakePod] = field(default_factory=dict)
    events: dict[tuple[str, str], list[EventView]] = field(default_factory=dict)
    created: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    deleted_namespaces: list[str] = field(default_factory=list)
    reachable: bool = True

    def _hook(self, name: str) -> None:
        if not self.reachable:
            raise Unreachable("no answer: connection refused")
        if name in self.fail_on:
            raise self.fail_on[name]

    def server_version(self) -> str:
        self._hook("server_version")
        return self.version

    def list_nodes(self) -> list[NodeView]:
        self._hook("list_nodes")
        return list(self.nodes)

    def list_namespaces(self) -> list[str]:
        self._hook("list_namespaces")
        return sorted(self.namespaces)

    def create_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self._hook("create_namespace")
        assert labels.get(RUN_LABEL), "the run's namespaces carry the run label"
        self.namespaces.add(name)

    def delete_namespace(self, name: str) -> None:
        self._hook("delete_namespace")
        self.deleted_namespaces.append(name)
        self.namespaces.discard(name)

    def service_account_exists(self, namespace: str, name: str) -> bool:
        return namespace in self.namespaces and name == "default"

    def list_workloads(self, namespace: str) -> list[Workload]:
        self._hook("list_workloads")
        return list(self.workloads.get(namespace, []))

    def helm_release_status(self, namespace: str, release: str) -> str | None:
        return self.releases.get((namespace, release))

    def get_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
        assert (group, version, plural) == checks.TCP_API
        return self.custom.get((namespace, name))

    def webhook_configuration_exists(self, name: str) -> bool:
        return name in self.webhooks

    def get_resource_quota(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.quotas.get((namespace, name))

    # pods, with HAMi simulated by the placement model ------------------------------------

    def _holding(self) -> list[tuple[placement.Pod, str | None]]:
        return [(pod.model, pod.view.node_name) for pod in self.pods.values() if pod.model is not None]

    def _hami_cluster(self) -> placement.Cluster:
        assert self.hami_cards is not None
        cluster = placement.Cluster.from_tenant(self.hami_cards, with_quota=self.quota_enforced)
        if self.hami_nodes is not None:
            cluster.nodes = [replace(node, devices=[replace(d) for d in node.devices]) for node in self.hami_nodes]
        for pod, node in self._holding():  # replay, in creation order, what already holds cards
            assert cluster.schedule(pod, prefer_node=node).scheduled
        return cluster

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> PodView:
        self._hook("create_pod")
        name = manifest["metadata"]["name"]
        assert manifest["metadata"]["namespace"] == namespace
        assert namespace in self.namespaces, f"namespace {namespace} does not exist"
        assert (namespace, name) not in self.pods, f"pod {namespace}/{name} already exists"
        spec = manifest["spec"]
        assert spec["restartPolicy"] == "Never"
        container = spec["containers"][0]
        assert container["image"] == "registry.k8s.io/pause:3.10"
        assert container["securityContext"]["privileged"] is False
        self.created.append((namespace, name))
        if name in self.refusals:
            raise self.refusals[name]
        model = _model_pod(namespace, manifest)
        limits = {key: str(value) for key, value in model.containers[0].limits.items()}
        wants_gpu = any(key.startswith("nvidia.com/") for key in limits)
        view = PodView(
            name, namespace, uid=f"uid-{len(self.created)}", labels=dict(manifest["metadata"]["labels"]), limits=limits
        )
        if wants_gpu and self.webhook_mutates and self.hami_cards is not None:
            return self._hami_create(namespace, name, model, view, spec)
        if wants_gpu:
            self.pods[(namespace, name)] = FakePod(view)
            self._event(namespace, name, "FailedScheduling", "0/1 nodes are available: 1 Insufficient nvidia.com/gpumem.")
            return view
        view = replace(view, phase="Running", node_name=self.nodes[0].name if self.nodes else None)
        self.pods[(namespace, name)] = FakePod(view)
        return view

    def _hami_create(self, namespace: str, name: str, model: placement.Pod, view: PodView, spec: Mapping[str, Any]) -> PodView:
        cluster = self._hami_cluster()
        admitted = placement.admit(model)
        view = replace(
            view,
            scheduler_name="hami-scheduler",
            limits={key: str(value) for key, value in admitted.pod.containers[0].limits.items()},
        )
        if spec.get("nodeSelector"):
            self.pods[(namespace, name)] = FakePod(view)
            self._event(
                namespace,
                name,
                "FailedScheduling",
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
            )
            return view
        result = cluster.schedule(model, prefer_node=self.tie_break)
        if result.stage == placement.STAGE_ADMISSION:
            raise ApiRefused(400, result.message)
        if name in self.force_bind and not result.scheduled:
            allocation = (placement.Allocation(self.hami_cards.cards[0].id, 0, 1, 1),)
            result = replace(result, stage=placement.STAGE_SCHEDULED, node=self.nodes[0].name, devices=(allocation,))
        if not result.scheduled:
            self.pods[(namespace, name)] = FakePod(view)
            message = self.messages.get(name, result.message)
            self._event(namespace, name, "FailedScheduling", message + " preemption: 0/1 nodes are available.")
            if name in self.filtering_events:
                for reason in result.reasons:
                    nodes = sorted(node for node, text in result.node_reasons.items() if reason in text)
                    self._event(namespace, name, "FilteringFailed", f"{len(nodes)} nodes {reason}({','.join(nodes)})")
            return view
        annotations = {expect.ALLOCATED_ANNOTATION: _encode_allocation(result.devices), expect.VGPU_NODE_ANNOTATION: result.node}
        if not self.annotates:
            annotations = {}
        # HAMi's Filter has decided (and counts the cards); binding may still fail.
        placed = replace(view, annotations=annotations)
        if self.binds:
            placed = replace(placed, node_name=result.node, phase="Running")
        else:
            self._event(namespace, name, "BindingFailed", f"node {result.node} has been locked within 5m0s")
        self.pods[(namespace, name)] = FakePod(placed, model)
        return placed

    def _event(self, namespace: str, name: str, reason: str, message: str) -> None:
        events = self.events.setdefault((namespace, name), [])
        uid = f"uid-{len(self.created)}"  # the pod being created; events stay after it is deleted
        events.append(EventView(reason, message, "hami-scheduler", float(len(events)), uid))

    def read_pod(self, namespace: str, name: str) -> PodView | None:
        self._hook("read_pod")
        pod = self.pods.get((namespace, name))
        return pod.view if pod else None

    def delete_pod(self, namespace: str, name: str) -> None:
        self._hook("delete_pod")
        self.deleted.append((namespace, name))
        self.pods.pop((namespace, name), None)

    def list_pods(self, namespace: str | None = None, label_selector: str = "") -> list[PodView]:
        self._hook("list_pods")
        return [pod.view for (ns, _), pod in self.pods.items() if namespace in (None, ns)]

    def pod_events(self, namespace: str, name: str) -> list[EventView]:
        events = list(self.events.get((namespace, name), []))
        pod = self.pods.get((namespace, name))
        if name in self.bind_after_events and pod is not None:
            pod.view = replace(pod.view, node_name=self.nodes[0].name, phase="Running")
        return events

    def pod_log(self, namespace: str, name: str) -> str:
        self._hook("pod_log")
        assert (namespace, name) in self.pods
        return ""

    def pod_exec(self, namespace: str, name: str, command: Sequence[str]) -> str:
        self._hook("pod_exec")
        assert list(command) == ["/pause", "-v"]
        return self.exec_output

    # helpers for tests ---------------------------------------------------------------------

    def add_gpu_pod(self, namespace: str, name: str, memory: int, cores: int, labels: dict[str, str] | None = None) -> None:
        """A user's GPU pod that already holds a slice when the suite starts."""
        self.namespaces.add(namespace)
        self.create_pod(
            namespace,
            expect.pod_manifest(
                name, namespace, labels or {"app": "user"}, {placement.GPUMEM: memory, placement.GPUCORES: cores}
            ),
        )
        self.created.remove((namespace, name))

    def leftovers(self) -> list[tuple[str, str]]:
        return [key for key, pod in self.pods.items() if RUN_LABEL in pod.view.labels]


def canonical(quantity: int) -> str:
    """A whole number as the API server returns a quantity it stored: 600000 reads "600k"."""
    suffix = 0
    while quantity and quantity % 1000 == 0 and suffix < 6:
        quantity, suffix = quantity // 1000, suffix + 1
    return f"{quantity}{['', 'k', 'M', 'G', 'T', 'P', 'E'][suffix]}"


def tenant_node(worker_name: str, cards: Sequence[gpus.Card], *, ready: bool = True) -> NodeView:
    labels: dict[str, str] = {"gpu-tenancy.io/tenant": "x"}
    annotations: dict[str, str] = {}
    capacity: dict[str, str] = {}
    allocatable: dict[str, str] = {}
    if cards:
        labels["gpu"] = "on"
        annotations[gpus.REGISTER_ANNOTATION] = gpus.register_annotation(list(cards))
        capacity[gpus.GPU_COUNT_RESOURCE] = canonical(gpus.gpu_capacity(list(cards)))
        memory, cores = gpus.inventory_totals(list(cards))
        allocatable.update({gpus.GPU_MEMORY_RESOURCE: canonical(memory), gpus.GPU_CORES_RESOURCE: canonical(cores)})
    return NodeView(worker_name, ready, labels, annotations, capacity, allocatable)


def fake_tenant(tenant: Tenant, index: int) -> FakeKube:
    fake = FakeKube(server=f"https://172.18.255.{200 + index}:6443", version=tenant.kubernetes_version, hami_cards=tenant)
    fake.nodes = [tenant_node(worker.name, worker.cards) for worker in tenant.workers]
    fake.workloads["kube-system"] = [
        Workload("DaemonSet", "kube-system", "konnectivity-agent", len(tenant.workers), len(tenant.workers)),
        Workload("Deployment", "kube-system", "hami-scheduler", 1, 1),
        Workload("Deployment", "kube-system", "coredns", 2, 2),
    ]
    fake.webhooks.add("hami-webhook")
    if tenant.quota is not None:
        fake.namespaces.add(tenant.quota.namespace)
        fake.quotas[(tenant.quota.namespace, "gpu-quota")] = {
            "limits.nvidia.com/gpumem": canonical(tenant.quota.gpumem),
            "limits.nvidia.com/gpucores": canonical(tenant.quota.gpucores),
        }
    return fake


def fake_management(config: StackConfig, tenants: Mapping[str, FakeKube]) -> FakeKube:
    fake = FakeKube(server="https://127.0.0.1:40123")
    for release, namespace in checks.RELEASES:
        fake.releases[(namespace, release)] = "deployed"
        fake.workloads[namespace] = [Workload("Deployment", namespace, release, 1, 1)]
    fake.workloads["kamaji-system"].append(Workload("StatefulSet", "kamaji-system", "kamaji-etcd", 3, 3))
    for tenant in config.tenants:
        endpoint = tenants[tenant.name].server.removeprefix("https://")
        fake.custom[(tenant.name, tenant.name)] = {
            "metadata": {"generation": 2},
            "status": {
                "observedGeneration": 2,
                "kubernetesResources": {"version": {"status": "Ready", "version": tenant.kubernetes_version}},
                "controlPlaneEndpoint": endpoint,
                "addons": {"konnectivity": {"enabled": True}},
            },
        }
    return fake


class CrossKube(FakeKube):
    """Another tenant's API seen with foreign credentials: refuses (or accepts) every request."""

    def __init__(self, outcome: Exception | None) -> None:
        super().__init__()
        self.outcome = outcome

    def list_namespaces(self) -> list[str]:
        if self.outcome is not None:
            raise self.outcome
        return ["default"]


@dataclass
class FakeConnector:
    clusters: dict[str, FakeKube]
    # (owner of the credentials, verify) -> what the other API does with them; default: refused.
    cross: dict[tuple[str, bool], Exception | None] = field(default_factory=dict)
    probes: list[tuple[str, str, bool]] = field(default_factory=list)

    def __call__(self, kubeconfig: str, *, server: str | None = None, verify: bool = True) -> kube.Kube:
        owner = kubeconfig.split(":")[1]
        if server is None:
            return self.clusters[owner]
        self.probes.append((owner, server, verify))
        if not next(fake for fake in self.clusters.values() if fake.server == server).reachable:
            return CrossKube(Unreachable("no answer: connection refused"))
        default = TlsRefused("TLS handshake failed: certificate verify failed") if verify else ApiRefused(401, "Unauthorized")
        return CrossKube(self.cross.get((owner, verify), default))


def outputs_document(config: StackConfig, tenants: Mapping[str, FakeKube]) -> dict[str, Any]:
    return {
        "managementKubeconfig": f"kubeconfig:management:{SECRET}",
        "tenants": {
            tenant.name: {
                "kubeconfig": f"kubeconfig:{tenant.name}:{SECRET}",
                "endpoint": tenants[tenant.name].server,
                "kubernetesVersion": tenant.kubernetes_version,
                "namespace": tenant.name,
                "workers": [worker.name for worker in tenant.workers],
                "gpus": {
                    worker.name: [
                        {"model": gpu.model, "count": gpu.count, "memoryMiB": gpus.CATALOGUE[gpu.model].memory_mib}
                        for gpu in worker.gpus
                    ]
                    for worker in tenant.workers
                },
            }
            for tenant in config.tenants
        },
    }


@dataclass
class World:
    """A fake deployment of ``config``: management, tenants, connector and the run's inputs."""

    config: StackConfig
    management: FakeKube
    tenants: dict[str, FakeKube]
    connector: FakeConnector
    clock: FakeClock

    def outputs(self) -> outputs.StackOutputs:
        return outputs.parse_outputs(outputs_document(self.config, self.tenants), "test")

    def run(self, selected: Sequence[str] | None = None, **settings: Any) -> Run:
        return runner.open_run(
            "dev",
            self.outputs(),
            self.config,
            self.connector,
            "abc123",
            clock=self.clock,
            settings=Settings(**settings),
            selected=frozenset(selected) if selected else None,
        )


def world(config: StackConfig = DEV) -> World:
    tenants = {tenant.name: fake_tenant(tenant, i) for i, tenant in enumerate(config.tenants)}
    management = fake_management(config, tenants)
    connector = FakeConnector({"management": management, **tenants})
    return World(config, management, tenants, connector, FakeClock())


def rows(results: Sequence[report.Result], check: str) -> dict[str, report.Result]:
    return {r.tenant: r for r in results if r.check == check}


def run_one(w: World, check: str, **settings: Any) -> dict[str, report.Result]:
    return rows(runner.run_checks(w.run([check], **settings)), check)


# --- expectations from the model --------------------------------------------------------------


def fresh(tenant: Tenant, usage: expect.LiveUsage | None = None) -> placement.Cluster:
    return expect.model_cluster(tenant, usage or expect.LiveUsage(), with_quota=True)


def test_dev_tenant_a_fits_three_fractional_pods_on_its_a100_and_refuses_the_fourth_on_cores():
    plan = expect.plan_fractional(fresh(TENANT_A), "scratch", "fit", 12)
    card = TENANT_A.cards[0]
    assert [step.probe.name for step in plan.placed] == ["fit-1", "fit-2", "fit-3"]
    assert plan.cards() == {("tenant-a-worker-0", card.id): 3}
    assert plan.refused is not None
    assert plan.refused.probe.name == "fit-4"
    assert plan.refused.result.stage == placement.STAGE_FILTER
    assert plan.refused.result.reasons == ("CardInsufficientCore",)
    assert plan.refused.result.message == "0/1 nodes are available: 1 1/1 CardInsufficientCore."


def test_dev_tenant_b_spreads_one_fractional_pod_per_l4_and_refuses_the_third_on_memory():
    plan = expect.plan_fractional(fresh(TENANT_B), "scratch", "fit", 12)
    cards = {card.id for card in TENANT_B.cards}
    assert len(plan.placed) == 2
    assert {card for _, card in plan.cards()} == cards and set(plan.cards().values()) == {1}
    assert plan.refused is not None and plan.refused.result.reasons == ("CardInsufficientMemory",)
    assert plan.refused.result.message == "0/1 nodes are available: 1 2/2 CardInsufficientMemory."


def test_a_different_inventory_two_l4_only_gives_its_own_expectations():
    lab = L4_ONLY.tenants[0]
    fit = expect.plan_fractional(fresh(lab), "scratch", "fit", 12)
    assert len(fit.placed) == 2 and fit.refused is not None
    assert fit.refused.result.reasons == ("CardInsufficientMemory",)
    quota = placement.quota_for_tenant(lab)
    assert quota is not None and quota.namespace == "research"
    plan = expect.plan_quota(lambda: fresh(lab), quota, "q", 12)
    # 2 × 20000 MiB fit the 46068 MiB quota; a third would hold 60000 MiB.
    assert len(plan.placed) == 2
    assert plan.refused is not None and plan.refused.result.stage == placement.STAGE_ADMISSION
    assert "exceeding resource quota" in plan.refused.result.message


def test_oversize_is_refused_on_memory_where_every_card_is_smaller_and_skipped_where_one_is_not():
    for tenant, cards in ((TENANT_A, 1), (TENANT_B, 2)):
        plan = expect.plan_oversize(fresh(tenant), "scratch", "oversize")
        assert plan.refused is not None and plan.refused.probe.memory_mib == 90000
        assert plan.refused.result.reasons == ("CardInsufficientMemory",)
        assert plan.refused.result.message == f"0/1 nodes are available: 1 {cards}/{cards} CardInsufficientMemory."
    h200 = tenant_of(real_gpus("big", "big-0", "H200"))
    plan = expect.plan_oversize(fresh(h200), "scratch", "oversize")
    assert plan.refused is None and "places a 90000 MiB/30 % pod on big-0" in plan.note


def test_dev_quota_admits_three_fractional_pods_then_refuses_the_fourth_at_admission():
    quota = placement.quota_for_tenant(TENANT_A)
    assert quota == placement.GpuQuota("default", 81920, 100)
    plan = expect.plan_quota(lambda: fresh(TENANT_A), quota, "validate-x-quota", 12)
    assert [step.probe.name for step in plan.placed] == ["validate-x-quota-1", "validate-x-quota-2", "validate-x-quota-3"]
    assert plan.refused is not None and plan.refused.probe.describe() == "20000 MiB/30 %"
    assert plan.refused.result.message == 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'


def test_quota_falls_back_to_one_pod_beyond_the_headroom_when_the_cards_run_out_first():
    t4 = tenant_of(
        {
            "name": "small",
            "workers": [{"name": "small-0", "gpus": [{"model": "T4", "count": 2}]}],
            # Room in the quota for a 20000 MiB pod, but no 15360 MiB T4 can hold one.
            "quota": {"gpumem": 30000, "gpucores": 200},
        }
    )
    quota = placement.quota_for_tenant(t4)
    assert quota is not None
    plan = expect.plan_quota(lambda: fresh(t4), quota, "q", 12)
    assert plan.placed == ()
    assert plan.refused is not None and plan.refused.probe.memory_mib == 30001
    assert "exceeding resource quota" in plan.refused.result.message
    assert "cards run out" in plan.note


def test_live_usage_seeds_the_model_so_existing_gpu_pods_lower_the_expectations():
    card = TENANT_A.cards[0].id
    pods = [
        PodView(
            "user",
            "default",
            "Running",
            "tenant-a-worker-0",
            annotations={expect.ALLOCATED_ANNOTATION: f"{card},NVIDIA,20000,30:;"},
        ),
        PodView(
            "done",
            "default",
            "Succeeded",
            "tenant-a-worker-0",
            annotations={expect.ALLOCATED_ANNOTATION: f"{card},NVIDIA,20000,30:;"},
        ),
        PodView("plain", "default", "Running", "tenant-a-worker-0"),
    ]
    usage = expect.live_usage(pods)
    assert usage.pods == 1
    assert usage.cards == {card: placement.CardHold(1, 20000, 30)}
    assert usage.namespaces == {"default": placement.QuotaUsage(20000, 30)}
    fit = expect.plan_fractional(fresh(TENANT_A, usage), "scratch", "fit", 12)
    assert len(fit.placed) == 2
    quota = placement.quota_for_tenant(TENANT_A)
    assert quota is not None
    assert len(expect.plan_quota(lambda: fresh(TENANT_A, usage), quota, "q", 12).placed) == 2


def test_the_probe_cap_leaves_no_refusal_and_says_how_to_reach_one():
    plan = expect.plan_fractional(fresh(TENANT_A), "scratch", "fit", 2)
    assert len(plan.placed) == 2 and plan.refused is None
    assert "--max-fit-pods" in plan.note


def test_allocation_annotation_and_event_reasons_are_read_like_hami_writes_them():
    text = "GPU-a,NVIDIA,20000,30:GPU-b,NVIDIA,100,0:;GPU-c,NVIDIA,5,5:;"
    assert expect.parse_allocated(text) == [
        [expect.CardUse("GPU-a", 20000, 30), expect.CardUse("GPU-b", 100, 0)],
        [expect.CardUse("GPU-c", 5, 5)],
    ]
    assert expect.parse_allocated("") == []
    message = "0/1 nodes are available: 1 1/2 CardInsufficientMemory, 1/2 CardUuidMismatch. preemption: 0/1 nodes are available."
    assert expect.observed_reasons(message) == {"CardInsufficientMemory", "CardUuidMismatch"}
    assert expect.observed_reasons("0/1 nodes are available: 1 Insufficient nvidia.com/gpumem.") == frozenset()
    assert expect.observed_reasons("1 nodes CardInsufficientCoreX(n)") == frozenset()


def test_probe_manifests_are_pause_pods_that_are_never_privileged_or_restarted():
    manifest = expect.pod_manifest("p", "ns", {RUN_LABEL: "r"}, {placement.GPUMEM: 20000, placement.GPUCORES: 30})
    spec = manifest["spec"]
    assert isinstance(spec, dict)
    container = spec["containers"][0]
    assert container["image"] == "registry.k8s.io/pause:3.10"
    assert container["securityContext"]["privileged"] is False
    assert container["resources"] == {"limits": {"nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"}}
    assert spec["restartPolicy"] == "Never"
    assert placement.admit(_model_pod("ns", manifest)).allowed


# --- the whole suite against a healthy fake deployment ----------------------------------------


def test_every_check_passes_on_a_healthy_dev_deployment_and_leaves_nothing_behind():
    w = world()
    results = runner.run_checks(w.run())
    failures = [r for r in results if r.status != report.PASS and not (r.check == "quota" and r.tenant == "tenant-b")]
    assert not failures, report.table(results)
    assert [(r.check, r.tenant) for r in results] == [("management", "-")] + [
        (check, tenant) for check in checks.CHECK_IDS[1:] for tenant in ("tenant-a", "tenant-b")
    ], "table order: catalogue order, tenants in stack order"
    assert rows(results, "quota")["tenant-b"].status == report.SKIP
    assert "declares no GPU quota" in rows(results, "quota")["tenant-b"].detail
    fit = rows(results, "fractional-fit")
    assert fit["tenant-a"].detail.startswith("3 × 20000 MiB/30 % landed: tenant-a-worker-0#0 (A100-80GB) ×3")
    assert fit["tenant-b"].detail.startswith(
        "2 × 20000 MiB/30 % landed: tenant-b-worker-0#0 (L4) ×1, tenant-b-worker-0#1 (L4) ×1"
    )
    nxt = rows(results, "fractional-next")
    assert "CardInsufficientCore" in nxt["tenant-a"].detail and "CardInsufficientMemory" in nxt["tenant-b"].detail
    assert "exceeding resource quota" in rows(results, "quota")["tenant-a"].detail
    for fake in w.tenants.values():
        assert fake.created, "the checks created probe pods"
        assert fake.leftovers() == []
        assert set(fake.deleted) >= set(fake.created)
        assert not any(ns.startswith("validate-abc123") for ns in fake.namespaces)
    assert report.exit_code(results) == 0


def test_the_cli_prints_the_table_writes_reports_and_exits_0(tmp_path):
    w = world()
    outputs_file = tmp_path / "outputs.json"
    outputs_file.write_text(json.dumps(outputs_document(DEV, w.tenants)))
    out, err = io.StringIO(), io.StringIO()
    md, js, txt = tmp_path / "r.md", tmp_path / "r.json", tmp_path / "r.txt"
    argv = [
        "--outputs",
        str(outputs_file),
        "--config",
        str(DEV_FILE),
        "--report",
        str(md),
        "--report",
        str(js),
        "--report",
        str(txt),
    ]
    code = validate.main(argv, stdout=out, stderr=err, connector=w.connector, clock=w.clock)
    assert code == 0, out.getvalue()
    table = out.getvalue()
    assert table.splitlines()[0].split() == ["CHECK", "TENANT", "RESULT", "DETAIL"]
    assert "PASSED: 20 passed, 0 failed, 1 skipped" in table
    document = json.loads(js.read_text())
    assert document["passed"] is True and len(document["results"]) == 21
    assert md.read_text().startswith("## Validation of stack `dev`")
    assert txt.read_text().startswith("CHECK")
    everything = table + err.getvalue() + md.read_text() + js.read_text()
    assert SECRET not in everything, "kubeconfigs are never printed"
    assert "validate: management [-]" in err.getvalue()


def test_the_cli_runs_a_two_l4_only_inventory_from_its_own_stack_file(tmp_path):
    w = world(L4_ONLY)
    stack_file = tmp_path / "Pulumi.lab.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {f"gpu-tenancy:{k}": v for k, v in L4_ONLY_RAW.items()}}))
    outputs_file = tmp_path / "outputs.json"
    outputs_file.write_text(json.dumps(outputs_document(L4_ONLY, w.tenants)))
    out = io.StringIO()
    argv = ["--stack", "lab", "--outputs", str(outputs_file), "--config", str(stack_file), "-q"]
    code = validate.main(argv, stdout=out, stderr=io.StringIO(), connector=w.connector, clock=w.clock)
    assert code == 0, out.getvalue()
    lines = {
        line.split()[0]: line for line in out.getvalue().splitlines() if line.startswith(("fractional", "quota", "isolation"))
    }
    assert "2 × 20000 MiB/30 % landed" in lines["fractional-fit"]
    assert "CardInsufficientMemory" in lines["fractional-next"]
    assert "quota 46068 MiB/200 % in research: after 2 × 20000 MiB/30 % placed" in lines["quota"]
    assert "SKIP" in lines["isolation"] and "only one tenant" in lines["isolation"]


def test_only_the_selected_checks_run():
    w = world()
    results = runner.run_checks(w.run(["webhook"]))
    assert {r.check for r in results} == {"webhook"} and len(results) == 2
    assert all(r.status == report.PASS for r in results)


# --- each check's failure decision ------------------------------------------------------------


def test_management_fails_on_a_release_not_deployed_or_a_workload_not_ready():
    w = world()
    assert run_one(w, "management")["-"].status == report.PASS
    w.management.releases[("metallb-system", "metallb")] = "failed"
    w.management.workloads["kamaji-system"][1] = Workload("StatefulSet", "kamaji-system", "kamaji-etcd", 3, 1)
    del w.management.releases[("cert-manager", "cert-manager")]
    detail = run_one(w, "management")["-"].detail
    assert "metallb-system/metallb is failed" in detail
    assert "cert-manager/cert-manager is missing" in detail
    assert "StatefulSet kamaji-system/kamaji-etcd 1/3 ready" in detail


def test_control_plane_fails_unless_the_tcp_is_ready_at_the_declared_version_with_konnectivity():
    w = world()
    status = w.management.custom[("tenant-a", "tenant-a")]["status"]
    status["kubernetesResources"]["version"] = {"status": "Provisioning", "version": "v1.35.0"}
    status["addons"]["konnectivity"]["enabled"] = False
    del w.management.custom[("tenant-b", "tenant-b")]
    result = run_one(w, "control-plane")
    assert result["tenant-a"].status == report.FAIL
    assert "status Provisioning, not Ready" in result["tenant-a"].detail
    assert "version v1.35.0, declared v1.36.4" in result["tenant-a"].detail
    assert "Konnectivity" in result["tenant-a"].detail
    assert result["tenant-b"].detail == "no TenantControlPlane tenant-b/tenant-b"


def test_control_plane_fails_on_a_status_behind_the_spec_or_without_an_endpoint():
    w = world()
    w.management.custom[("tenant-a", "tenant-a")]["metadata"]["generation"] = 3  # a spec change not reconciled yet
    del w.management.custom[("tenant-b", "tenant-b")]["status"]["controlPlaneEndpoint"]
    result = run_one(w, "control-plane")
    assert result["tenant-a"].status == report.FAIL
    assert "status describes generation 2, the spec is at 3: still reconciling" in result["tenant-a"].detail
    assert result["tenant-b"].status == report.FAIL
    assert result["tenant-b"].detail == "no status.controlPlaneEndpoint"
    # A Kamaji that never sets observedGeneration cannot tell: not held against it.
    w = world()
    del w.management.custom[("tenant-a", "tenant-a")]["status"]["observedGeneration"]
    assert run_one(w, "control-plane")["tenant-a"].status == report.PASS


def test_tenant_api_fails_on_foreign_missing_or_unready_nodes_and_on_an_unreachable_api():
    w = world()
    a = w.tenants["tenant-a"]
    a.nodes = [replace(a.nodes[0], ready=False), tenant_node("tenant-b-worker-0", [])]
    w.tenants["tenant-b"].reachable = False
    w.tenants["tenant-b"].version = "v1.36.4"
    result = run_one(w, "tenant-api")
    assert "nodes that are not its workers: tenant-b-worker-0" in result["tenant-a"].detail
    assert "not Ready: tenant-a-worker-0" in result["tenant-a"].detail
    assert result["tenant-b"].status == report.FAIL
    assert "does not answer" in result["tenant-b"].detail and "connection refused" in result["tenant-b"].detail


def test_tenant_api_fails_when_the_api_reports_another_kubernetes_version_than_declared():
    w = world()
    w.tenants["tenant-a"].version = "v1.35.0"
    w.tenants["tenant-b"].version = "v1.36.4+k3s1"  # a build suffix is still the declared version
    result = run_one(w, "tenant-api")
    assert result["tenant-a"].status == report.FAIL
    assert result["tenant-a"].detail == "version v1.35.0, declared v1.36.4"
    assert result["tenant-b"].status == report.PASS, result["tenant-b"].detail


def test_an_unreachable_tenant_skips_its_later_checks_and_fails_the_run():
    w = world()
    w.tenants["tenant-b"].reachable = False
    results = runner.run_checks(w.run())
    b = [r for r in results if r.tenant == "tenant-b"]
    assert rows(results, "tenant-api")["tenant-b"].status == report.FAIL
    later = [r for r in b if r.check not in ("control-plane", "tenant-api")]
    assert later and all(r.status == report.SKIP and r.detail.startswith("not run:") for r in later)
    assert rows(results, "isolation")["tenant-a"].status == report.FAIL  # cannot prove tenant-b refuses it
    assert report.exit_code(results) == 1


def test_isolation_passes_only_when_every_other_api_refuses_the_credentials():
    w = world()
    result = run_one(w, "isolation")
    assert result["tenant-a"].status == report.PASS
    assert "tenant-b: TLS refused" in result["tenant-a"].detail and "tenant-b: HTTP 401" in result["tenant-a"].detail
    assert ("tenant-a", w.tenants["tenant-b"].server, True) in w.connector.probes
    assert ("tenant-a", w.tenants["tenant-b"].server, False) in w.connector.probes

    w = world()
    w.connector.cross[("tenant-a", False)] = None  # tenant-b's API accepts tenant-a's client certificate
    w.connector.cross[("tenant-b", True)] = ApiRefused(403, "forbidden")  # a refusal too: shared CA, no rights
    result = run_one(w, "isolation")
    assert result["tenant-a"].status == report.FAIL and "ACCEPTED tenant-a's credentials" in result["tenant-a"].detail
    assert result["tenant-b"].status == report.PASS and "HTTP 403" in result["tenant-b"].detail


def test_isolation_fails_when_a_tenant_sees_another_tenants_namespace_or_node():
    w = world()
    a = w.tenants["tenant-a"]
    a.namespaces.add("validate-abc123-tenant-b")  # as if both tenants shared one API server
    a.nodes.append(tenant_node("tenant-b-worker-0", []))
    result = run_one(w, "isolation")["tenant-a"]
    assert result.status == report.FAIL
    assert "sees tenant-b's namespace validate-abc123-tenant-b" in result.detail
    assert "sees tenant-b's nodes tenant-b-worker-0" in result.detail


def test_isolation_fails_on_an_inconclusive_probe():
    w = world()
    w.connector.cross[("tenant-a", False)] = ApiRefused(500, "etcd down")
    w.connector.cross[("tenant-a", True)] = Unreachable("no answer: timed out")
    detail = run_one(w, "isolation")["tenant-a"].detail
    assert "answered HTTP 500" in detail and "could not reach tenant-b's API" in detail


def test_konnectivity_fails_when_agents_logs_or_exec_do_not_work():
    w = world()
    a, b = w.tenants["tenant-a"], w.tenants["tenant-b"]
    a.fail_on["pod_exec"] = KubeError("exec failed: error dialing backend: No agent available")
    a.fail_on["pod_log"] = ApiRefused(500, "Get https://tenant-a-worker-0:10250/containerLogs: No agent available")
    b.workloads["kube-system"][0] = Workload("DaemonSet", "kube-system", "konnectivity-agent", 1, 0)
    result = run_one(w, "konnectivity")
    assert "logs failed" in result["tenant-a"].detail and "No agent available" in result["tenant-a"].detail
    assert "exec failed" in result["tenant-a"].detail
    assert result["tenant-b"].detail == "DaemonSet konnectivity-agent: 0/1 ready"
    assert a.leftovers() == []


def test_konnectivity_passes_with_pause_version_from_exec_and_fails_on_other_output():
    w = world()
    assert "pause.c v3.10" in run_one(w, "konnectivity")["tenant-a"].detail
    w.tenants["tenant-a"].exec_output = "OCI runtime exec failed"
    assert "not pause's version" in run_one(w, "konnectivity")["tenant-a"].detail


def test_gpu_registration_fails_on_a_wrong_annotation_missing_label_or_mock_resources():
    w = world()
    a = w.tenants["tenant-a"]
    wrong = gpus.worker_cards("tenant-a-worker-0", [("H100-80GB", 1)])
    a.nodes[0] = replace(
        a.nodes[0],
        labels={},
        annotations={gpus.REGISTER_ANNOTATION: gpus.register_annotation(wrong)},
        allocatable={},
    )
    w.tenants["tenant-b"].webhooks.clear()
    result = run_one(w, "gpu-registration")
    detail = result["tenant-a"].detail
    assert "not labelled gpu=on" in detail
    assert "registers 1 card(s) unlike the declared ones" in detail
    assert "allocatable nvidia.com/gpumem None, want 81920 (mock device plugin)" in detail
    assert result["tenant-b"].detail == "no MutatingWebhookConfiguration hami-webhook"
    assert w.clock.now >= Settings().registration_timeout, "the registration is awaited, within its bound"


def test_gpu_registration_fails_when_the_outputs_differ_from_the_declared_inventory():
    w = world()
    document = outputs_document(DEV, w.tenants)
    document["tenants"]["tenant-b"]["gpus"]["tenant-b-worker-0"][0]["count"] = 1
    run = runner.open_run("dev", outputs.parse_outputs(document, "t"), DEV, w.connector, "abc123", clock=w.clock)
    run.selected = frozenset({"gpu-registration"})
    result = rows(runner.run_checks(run), "gpu-registration")
    assert "differ from Pulumi.dev.yaml" in result["tenant-b"].detail
    assert result["tenant-a"].status == report.PASS


def test_webhook_fails_when_the_pod_keeps_default_scheduler():
    w = world()
    w.tenants["tenant-a"].webhook_mutates = False
    w.tenants["tenant-b"].webhook_mutates = False
    w.tenants["tenant-b"].webhooks.clear()
    result = run_one(w, "webhook")
    assert "schedulerName is default-scheduler" in result["tenant-a"].detail and "Konnectivity" in result["tenant-a"].detail
    assert "there is no MutatingWebhookConfiguration hami-webhook" in result["tenant-b"].detail
    assert "limit nvidia.com/gpu is None, the model's webhook sets 1" in result["tenant-a"].detail


def test_fractional_fit_fails_when_pods_land_elsewhere_than_the_model_predicts():
    w = world()
    # HAMi really has two A100s where one is declared: spread puts the probes on both.
    w.tenants["tenant-a"].hami_cards = tenant_of(real_gpus("tenant-a", "tenant-a-worker-0", "A100-80GB", 2))
    results = runner.run_checks(w.run(["fractional-fit", "fractional-next"]))
    fit, nxt = rows(results, "fractional-fit")["tenant-a"], rows(results, "fractional-next")["tenant-a"]
    assert fit.status == report.FAIL and "the model expects tenant-a-worker-0#0 (A100-80GB) ×3" in fit.detail
    assert nxt.status == report.SKIP and nxt.detail == "not run: fractional-fit failed"
    assert w.tenants["tenant-a"].leftovers() == []


TWO_NODES_RAW = [{"name": f"lab-worker-{i}", "gpus": [{"model": "L4", "count": 4}]} for i in (0, 1)]
TWO_NODES = StackConfig.load({"tenants": [{"name": "lab", "workers": TWO_NODES_RAW}]})


@pytest.mark.parametrize("tie_break", [None, "lab-worker-1"])
def test_fractional_fit_follows_hamis_choice_between_equally_scored_nodes(tie_break: str | None):
    # Two idle nodes of four L4s score the same for the first probe: HAMi's pick depends on
    # goroutine timing (the model takes lab-worker-0). Binpack then fills that node first, so
    # with six probes the tie decides which node holds four and which two.
    w = world(TWO_NODES)
    w.tenants["lab"].tie_break = tie_break
    fit = run_one(w, "fractional-fit", max_fit_pods=6)["lab"]
    assert fit.status == report.PASS, fit.detail
    first, second = ("lab-worker-1", "lab-worker-0") if tie_break else ("lab-worker-0", "lab-worker-1")
    assert (fit.detail.count(f"{first}#"), fit.detail.count(f"{second}#")) == (4, 2), fit.detail


def test_a_tie_does_not_excuse_a_card_the_model_would_not_take():
    w = world(TWO_NODES)
    # The tie is followed, but "HAMi" then keeps a fifth probe on the same node, which has only
    # four cards the model knows of.
    w.tenants["lab"].tie_break = "lab-worker-1"
    w.tenants["lab"].hami_cards = tenant_of(
        {"name": "lab", "workers": [{"name": f"lab-worker-{i}", "gpus": [{"model": "L4", "count": 4 + i}]} for i in range(2)]}
    )
    fit = run_one(w, "fractional-fit", max_fit_pods=6)["lab"]
    assert fit.status == report.FAIL and "the model expects" in fit.detail


def test_fractional_next_fails_when_the_next_pod_is_placed_or_pending_for_another_reason():
    w = world()
    w.tenants["tenant-a"].force_bind.add("fit-4")  # HAMi places a pod the model refuses
    result = run_one(w, "fractional-next")["tenant-a"]
    assert result.status == report.FAIL
    assert (
        "fit-4 was placed on tenant-a-worker-0; the model refuses it: 0/1 nodes are available: 1 1/1 CardInsufficientCore."
        in result.detail
    )

    w = world()
    w.tenants["tenant-a"].messages["fit-4"] = "0/1 nodes are available: 1 1/1 CardInsufficientMemory."
    result = run_one(w, "fractional-next")["tenant-a"]
    assert result.status == report.FAIL
    assert "no event with the model's reasons (CardInsufficientCore)" in result.detail
    assert "last: 0/1 nodes are available: 1 1/1 CardInsufficientMemory." in result.detail
    assert w.tenants["tenant-a"].leftovers() == []


def test_fractional_next_reads_hamis_own_events_when_the_aggregated_one_is_stale():
    # kube-scheduler's events series keeps a pod's first FailedScheduling message (client-go
    # tools/events getKey leaves the message out); after a transient first attempt only HAMi's
    # FilteringFailed events carry the current reasons.
    w = world()
    w.tenants["tenant-a"].messages["fit-4"] = "0/1 nodes are available: 1 node unregistered."
    w.tenants["tenant-a"].filtering_events.add("fit-4")
    result = run_one(w, "fractional-next")["tenant-a"]
    assert result.status == report.PASS, result.detail
    assert "1 nodes CardInsufficientCore(tenant-a-worker-0)" in result.detail


def test_fractional_fit_fails_when_a_probe_the_model_places_stays_pending():
    w = world()
    # HAMi really has an L4 and a T4 where two L4s are declared: the second probe fits nowhere.
    w.tenants["tenant-b"].hami_cards = tenant_of(
        {"name": "tenant-b", "workers": [{"name": "tenant-b-worker-0", "gpus": [{"model": "L4", "count": 1}, {"model": "T4"}]}]}
    )
    result = run_one(w, "fractional-fit")["tenant-b"]
    assert result.status == report.FAIL
    assert "fit-2 not placed within 120s, the model places it on tenant-b-worker-0" in result.detail
    assert "CardInsufficientMemory" in result.detail


def test_a_probe_that_never_binds_fails_with_the_last_scheduling_event_within_the_bound():
    w = world()
    w.tenants["tenant-a"].binds = False
    result = run_one(w, "fractional-fit")["tenant-a"]
    assert result.status == report.FAIL
    assert "fit-1 not placed within 120s" in result.detail and "has been locked within 5m0s" in result.detail
    assert w.tenants["tenant-a"].leftovers() == []


def test_a_probe_bound_without_hamis_allocation_annotation_has_not_landed():
    # Bound by some scheduler other than HAMi, the probe holds no card HAMi counts, so it proves
    # nothing about placement; the quota check, which counts landed probes only, must not pass on it.
    w = world()
    w.tenants["tenant-a"].annotates = False
    results = runner.run_checks(w.run(["fractional-fit", "quota"]))
    fit, quota = rows(results, "fractional-fit")["tenant-a"], rows(results, "quota")["tenant-a"]
    assert fit.status == report.FAIL and "fit-1 not placed within 120s" in fit.detail, fit.detail
    assert quota.status == report.FAIL and "not placed within 120s" in quota.detail, quota.detail
    assert w.tenants["tenant-a"].leftovers() == []


def test_a_probe_bound_after_its_refusal_event_matched_fails_the_check():
    # The event says HAMi refused fit-4, but the pod is bound by the time the check re-reads it.
    w = world()
    w.tenants["tenant-a"].bind_after_events.add("fit-4")
    result = run_one(w, "fractional-next")["tenant-a"]
    assert result.status == report.FAIL
    assert "fit-4 was placed on tenant-a-worker-0; the model refuses it" in result.detail
    assert w.tenants["tenant-a"].leftovers() == []


def test_oversize_fails_when_the_pod_is_pending_for_a_reason_the_model_does_not_give():
    w = world()
    assert run_one(w, "oversize")["tenant-a"].status == report.PASS
    w.tenants["tenant-a"].webhook_mutates = False  # default-scheduler: "Insufficient nvidia.com/gpumem"
    result = run_one(w, "oversize")["tenant-a"]
    assert result.status == report.FAIL
    assert "no event with the model's reasons (CardInsufficientMemory) within 90s" in result.detail
    assert "Insufficient nvidia.com/gpumem" in result.detail


def test_oversize_is_skipped_where_the_model_places_a_90000_mib_pod():
    config = StackConfig.load({"tenants": [real_gpus("big", "big-0", "H200")]})
    w = world(config)
    result = run_one(w, "oversize")["big"]
    assert result.status == report.SKIP and "places a 90000 MiB/30 % pod on big-0" in result.detail


def test_quota_fails_when_the_quota_is_not_enforced_or_not_as_declared():
    w = world()
    w.tenants["tenant-a"].quota_enforced = False
    result = run_one(w, "quota")["tenant-a"]
    assert result.status == report.FAIL and "validate-abc123-quota-4 (20000 MiB/30 %) was admitted" in result.detail
    assert w.tenants["tenant-a"].leftovers() == [], "probes in the quota's namespace are cleaned up too"
    w.tenants["tenant-a"].quotas[("default", "gpu-quota")] = {"limits.nvidia.com/gpumem": "1000"}
    assert "declared" in run_one(w, "quota")["tenant-a"].detail
    del w.tenants["tenant-a"].quotas[("default", "gpu-quota")]
    assert run_one(w, "quota")["tenant-a"].detail == "no ResourceQuota default/gpu-quota"


def test_quota_compares_quantities_not_their_spelling():
    # The API server returns a declared 60000 as "60k"; that is what was declared.
    raw = yaml.safe_load(DEV_FILE.read_text())["config"]
    raw = {key.removeprefix("gpu-tenancy:"): value for key, value in raw.items()}
    raw["tenants"][0]["quota"] = {"gpumem": 60000, "gpucores": 100}
    w = world(StackConfig.load(raw))
    assert w.tenants["tenant-a"].quotas[("default", "gpu-quota")]["limits.nvidia.com/gpumem"] == "60k"
    quota = run_one(w, "quota")["tenant-a"]
    assert "declared" not in quota.detail and quota.status != report.FAIL
    assert checks._quantity_is("1k", 1000) and not checks._quantity_is("1k", 100)
    assert not checks._quantity_is(None, 0) and not checks._quantity_is("lots", 1)


def test_quota_fails_when_the_pod_is_refused_by_something_else_than_hamis_quota():
    w = world()
    w.tenants["tenant-a"].refusals["validate-abc123-quota-4"] = ApiRefused(
        403, 'pods "validate-abc123-quota-4" is forbidden: exceeded quota: compute, requested: pods=1'
    )
    result = run_one(w, "quota")["tenant-a"]
    assert result.status == report.FAIL
    assert "refused, but not by the quota" in result.detail and "exceeded quota: compute" in result.detail


def test_quota_takes_existing_usage_in_its_namespace_into_account():
    w = world()
    w.tenants["tenant-a"].add_gpu_pod("default", "user-job", 20000, 30)
    result = run_one(w, "quota")["tenant-a"]
    assert result.status == report.PASS, result.detail
    assert "after 2 × 20000 MiB/30 % placed, validate-abc123-quota-3" in result.detail
    assert "with 1 GPU pod(s) already holding cards" in result.detail
    assert ("default", "user-job") in w.tenants["tenant-a"].pods, "the suite never touches other pods"


def test_probes_an_earlier_run_left_behind_fail_the_fractional_check():
    # A killed run's quota probe: a pause pod that never exits and keeps its card and quota.
    w = world()
    w.tenants["tenant-a"].add_gpu_pod("default", "validate-old999-quota-1", 20000, 30, {RUN_LABEL: "old999"})
    results = runner.run_checks(w.run(["fractional-fit", "fractional-next"]))
    fit, nxt = rows(results, "fractional-fit")["tenant-a"], rows(results, "fractional-next")["tenant-a"]
    assert fit.status == report.FAIL
    assert "1 probe pod(s) of an earlier validation run still hold GPUs and quota: default/validate-old999-quota-1" in fit.detail
    assert f"kubectl delete pods -A -l {RUN_LABEL}" in fit.detail
    assert nxt.status == report.SKIP
    # tenant-b has none: it runs as usual, and the suite deletes no pod it did not make.
    assert rows(results, "fractional-fit")["tenant-b"].status == report.PASS
    assert ("default", "validate-old999-quota-1") in w.tenants["tenant-a"].pods


def test_only_an_earlier_runs_pods_that_hold_cards_count_as_leftovers():
    w = world()
    fake = w.tenants["tenant-a"]
    # A pod of another run that holds no card (a konnectivity tunnel probe), and one of this run.
    fake.namespaces.add("validate-old999-tenant-a")
    fake.create_pod(
        "validate-old999-tenant-a", expect.pod_manifest("tunnel", "validate-old999-tenant-a", {RUN_LABEL: "old999"}, {})
    )
    fake.add_gpu_pod("default", "validate-abc123-quota-1", 20000, 30, {RUN_LABEL: "abc123"})
    fit = rows(runner.run_checks(w.run(["fractional-fit"])), "fractional-fit")["tenant-a"]
    assert fit.status == report.PASS and "earlier validation run" not in fit.detail, fit.detail


def test_a_tenant_without_workers_skips_hamis_checks_and_passes_the_rest():
    # Such a tenant is a control plane only: HAMi comes with its first worker.
    raw = DEV.model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["tenants"][1] = {"name": "tenant-b"}
    config = StackConfig.load(raw)
    w = world(config)
    w.tenants["tenant-b"].workloads["kube-system"] = [
        workload for workload in w.tenants["tenant-b"].workloads["kube-system"] if workload.name != "hami-scheduler"
    ]
    w.tenants["tenant-b"].webhooks.clear()
    results = [r for r in runner.run_checks(w.run()) if r.tenant == "tenant-b"]
    assert {r.check for r in results if r.status == report.SKIP} == set(runner.HAMI_CHECKS) | {"konnectivity"}
    assert all("first worker" in r.detail for r in results if r.check in runner.HAMI_CHECKS)
    assert [r for r in results if r.status == report.FAIL] == [], report.table(results)


def test_a_declared_tenant_missing_from_the_stack_file_fails_its_model_checks():
    w = world()
    config = StackConfig.load({"tenants": [DEV.tenants[0].model_dump(by_alias=True, exclude_none=True, mode="json")]})
    run = runner.open_run("dev", w.outputs(), config, w.connector, "abc123", clock=w.clock, selected=frozenset({"quota"}))
    result = rows(runner.run_checks(run), "quota")["tenant-b"]
    assert result.status == report.FAIL and "declares no tenant tenant-b" in result.detail


def test_an_existing_cluster_keeping_its_own_cert_manager_is_not_expected_to_run_ours():
    raw = {
        "management": {"mode": "existing", "kubeconfig": MGMT_KUBECONFIG, "installCertManager": False},
        "network": {"pool": "10.0.0.0/28"},
        "tenants": [{"name": "t"}],
    }
    assert checks.expected_releases(StackConfig.load(raw)) == (("metallb", "metallb-system"), ("kamaji", "kamaji-system"))


def test_an_existing_management_cluster_without_a_pool_is_not_expected_to_run_metallb():
    raw = {"management": {"mode": "existing", "kubeconfig": MGMT_KUBECONFIG}, "tenants": [{"name": "t", "vip": "10.0.0.5"}]}
    assert checks.expected_releases(StackConfig.load(raw)) == (("cert-manager", "cert-manager"), ("kamaji", "kamaji-system"))
    raw["network"] = {"pool": "10.0.0.0/28"}
    assert ("metallb", "metallb-system") in checks.expected_releases(StackConfig.load(raw))
    assert ("metallb", "metallb-system") in checks.expected_releases(DEV)
    config = StackConfig.load({**raw, "network": {}})
    w = world(config)
    del w.management.releases[("metallb-system", "metallb")]
    del w.management.workloads["metallb-system"]
    result = run_one(w, "management")["-"]
    assert result.status == report.PASS and result.detail.startswith("releases cert-manager, kamaji deployed")


# Real GPUs: HAMi's own device plugin registers real UUIDs and NVML's memory.
NVIDIA_RAW: dict[str, Any] = {
    "tenants": [
        {
            "name": "prod",
            "gpuMode": "nvidia",
            "workers": [
                {
                    "name": "gpu-host-1",
                    "ssh": {"host": "10.0.0.11", "user": "ubuntu", "privateKey": SSH_KEY},
                    "gpus": [{"model": "H100-80GB", "count": 1}],
                }
            ],
        }
    ]
}
REAL_H100 = {
    "id": "GPU-6d3f0c1e-real",
    "index": 0,
    "count": 10,
    "devmem": 81559,
    "devcore": 100,
    "type": "NVIDIA H100 80GB HBM3",
    "numa": 0,
    "health": True,
}


def nvidia_world(registered: list[dict[str, Any]]) -> World:
    w = world(StackConfig.load(NVIDIA_RAW))
    fake = w.tenants["prod"]
    fake.nodes = [
        NodeView(
            "gpu-host-1",
            True,
            {"gpu": "on"},
            {gpus.REGISTER_ANNOTATION: json.dumps(registered)},
            {},
            {gpus.GPU_COUNT_RESOURCE: str(10 * len(registered))},
        )
    ]
    fake.hami_nodes = [placement.Node.from_register_entries("gpu-host-1", registered, strict=False)]
    return w


def test_real_gpus_are_expected_to_hold_what_was_declared():
    w = nvidia_world([REAL_H100])
    results = runner.run_checks(w.run(["gpu-registration", "fractional-fit", "fractional-next"]))
    assert rows(results, "gpu-registration")["prod"].status == report.PASS
    fit = rows(results, "fractional-fit")["prod"]
    assert fit.status == report.PASS and "3 × 20000 MiB/30 % landed: gpu-host-1#0 (NVIDIA H100 80GB HBM3) ×3" in fit.detail
    assert "CardInsufficientCore" in rows(results, "fractional-next")["prod"].detail


def test_keys_a_hami_build_adds_to_its_registration_are_ignored_as_go_ignores_them():
    # Some builds write "devicepairscore":{} (an omitempty struct) into every entry.
    w = nvidia_world([{**REAL_H100, "devicepairscore": {}}])
    results = runner.run_checks(w.run(["gpu-registration", "fractional-fit"]))
    assert rows(results, "gpu-registration")["prod"].status == report.PASS
    assert rows(results, "fractional-fit")["prod"].status == report.PASS


def test_real_cards_that_differ_from_the_declaration_fail_the_next_pod_check():
    # Declared an H100: the model refuses a fourth 20000 MiB / 30 % pod (120 % of its cores).
    # The real card reports twice the memory and cores, so HAMi places it: the declaration is wrong.
    bigger = {**REAL_H100, "devmem": 163118, "devcore": 200}
    results = runner.run_checks(nvidia_world([bigger]).run(["fractional-fit", "fractional-next"]))
    assert rows(results, "fractional-fit")["prod"].status == report.PASS
    next_pod = rows(results, "fractional-next")["prod"]
    assert next_pod.status == report.FAIL and "CardInsufficientCore" in next_pod.detail


def test_real_gpus_fail_registration_when_fewer_healthy_cards_are_registered_than_declared():
    w = nvidia_world([{**REAL_H100, "health": False}])
    detail = run_one(w, "gpu-registration")["prod"].detail
    assert "0 healthy card(s) registered, 1 declared" in detail


# --- cleanup ---------------------------------------------------------------------------------


def test_pods_are_deleted_when_a_check_fails_half_way():
    w = world()
    a = w.tenants["tenant-a"]
    calls = {"n": 0}
    original = a.read_pod

    def flaky(namespace: str, name: str) -> PodView | None:
        calls["n"] += 1
        if calls["n"] == 3:  # while the second probe waits to land
            raise Unreachable("no answer: connection reset")
        return original(namespace, name)

    a.read_pod = flaky  # type: ignore[method-assign]
    result = run_one(w, "fractional-fit")["tenant-a"]
    assert result.status == report.FAIL and result.detail == "API error: no answer: connection reset"
    assert len(a.created) >= 2 and a.leftovers() == []
    assert a.deleted_namespaces == ["validate-abc123-tenant-a"]


def test_pods_are_deleted_when_a_check_has_a_bug(monkeypatch):
    w = world()

    def broken(run: Run, target: Target, cleanup: Cleanup) -> list[report.Result]:
        assert target.kube is not None
        cleanup.pod(target.kube, target.scratch, "half")
        target.kube.create_pod(target.scratch, expect.pod_manifest("half", target.scratch, run.labels()))
        raise RuntimeError("boom")

    monkeypatch.setattr(runner, "POD_CHECKS", ((("webhook",), broken),))
    result = rows(runner.run_checks(w.run(["webhook"])), "webhook")
    assert result["tenant-a"].detail == "internal error: RuntimeError: boom"
    assert all(fake.leftovers() == [] for fake in w.tenants.values())


def test_a_cleanup_that_cannot_delete_fails_the_check():
    w = world()
    w.tenants["tenant-a"].fail_on["delete_pod"] = ApiRefused(403, "forbidden")
    result = run_one(w, "webhook")["tenant-a"]
    assert result.status == report.FAIL
    assert "cleanup: could not delete pod validate-abc123-tenant-a/webhook: HTTP 403: forbidden" in result.detail
    assert "cleanup: probe pods still present after 90s" in result.detail


def test_scratch_namespaces_are_deleted_even_when_the_run_is_interrupted():
    w = world()
    w.tenants["tenant-b"].fail_on["list_workloads"] = KeyboardInterrupt()  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        runner.run_checks(w.run())
    for fake in w.tenants.values():
        assert fake.deleted_namespaces == [f"validate-abc123-{next(k for k, v in w.tenants.items() if v is fake)}"]
        assert fake.leftovers() == []


def test_an_interrupt_during_the_final_namespace_deletion_still_deletes_the_rest():
    w = world()
    fake = w.tenants["tenant-a"]
    delete_namespace = fake.delete_namespace
    hit: list[str] = []

    def interrupt_once(name: str) -> None:
        if not hit:
            hit.append(name)
            raise KeyboardInterrupt
        delete_namespace(name)

    fake.delete_namespace = interrupt_once  # type: ignore[method-assign]
    with pytest.raises(runner.Interrupted):
        runner.run_checks(w.run(["isolation"]))
    assert hit == ["validate-abc123-tenant-a"]
    assert fake.deleted_namespaces == ["validate-abc123-tenant-a"]
    assert w.tenants["tenant-b"].deleted_namespaces == ["validate-abc123-tenant-b"]


def test_long_tenant_names_sharing_a_prefix_get_distinct_scratch_namespaces():
    # The scratch namespace is also the marker the isolation check looks for in other tenants.
    names = ["research-platform-gpu-inference-europe-west-000a", "research-platform-gpu-inference-europe-west-000b"]
    namespaces = [context.scratch_namespace("abc123", name) for name in names]
    assert namespaces[0] != namespaces[1]
    assert all(len(ns) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ns) for ns in namespaces)
    assert context.scratch_namespace("abc123", "tenant-a") == "validate-abc123-tenant-a"
    raw = {"tenants": [{"name": name} for name in names]}
    w = world(StackConfig.load(raw))
    isolation = rows(runner.run_checks(w.run(["isolation"])), "isolation")
    assert {tenant: row.status for tenant, row in isolation.items()} == dict.fromkeys(names, report.PASS), report.table(
        list(isolation.values())
    )


def test_an_interrupt_while_a_check_cleans_up_still_deletes_its_probes():
    # The quota probes live in the quota's namespace, which no scratch-namespace deletion takes along.
    w = world()
    fake = w.tenants["tenant-a"]
    delete_pod = fake.delete_pod
    interrupted: list[tuple[str, str]] = []

    def interrupt_once(namespace: str, name: str) -> None:
        if namespace == "default" and not interrupted:
            interrupted.append((namespace, name))
            raise KeyboardInterrupt
        delete_pod(namespace, name)

    fake.delete_pod = interrupt_once  # type: ignore[method-assign]
    with pytest.raises(runner.Interrupted) as stopped:
        runner.run_checks(w.run(["quota"]))
    assert interrupted, "the interrupt hit the quota probes' deletion"
    assert stopped.value.leftovers == []
    assert fake.leftovers() == []


def test_an_interrupted_cli_run_cleans_up_and_exits_130(tmp_path):
    w = world()
    w.tenants["tenant-a"].fail_on["pod_exec"] = KeyboardInterrupt()  # type: ignore[assignment]
    outputs_file = tmp_path / "o.json"
    outputs_file.write_text(json.dumps(outputs_document(DEV, w.tenants)))
    code, out, err = run_cli(
        ["--outputs", str(outputs_file), "--config", str(DEV_FILE), "-q"], connector=w.connector, clock=w.clock
    )
    assert code == 130 and out == "" and "interrupted" in err
    assert all(fake.leftovers() == [] and len(fake.deleted_namespaces) == 1 for fake in w.tenants.values())


def test_sigterm_is_an_interrupt_too(tmp_path):
    # A cancelled CI job sends SIGTERM; the CLI must take the same way out as Ctrl-C.
    bin_dir, started = tmp_path / "bin", tmp_path / "started"
    bin_dir.mkdir()
    executable(bin_dir / "pulumi", f"#!/bin/sh\n: > {started}\nexec sleep 30\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.validate", "--stack", "dev"],
        cwd=PROJECT_DIR,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert process.poll() is None and time.monotonic() < deadline, "the CLI never asked pulumi for the outputs"
            time.sleep(0.05)
        process.terminate()
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err


def test_a_namespace_that_cannot_be_deleted_is_reported():
    w = world()
    w.tenants["tenant-a"].fail_on["delete_namespace"] = Unreachable("no answer: timed out")
    results = runner.run_checks(w.run(["webhook"]))
    cleanup = rows(results, "cleanup")
    assert cleanup["tenant-a"].status == report.FAIL and "validate-abc123-tenant-a" in cleanup["tenant-a"].detail
    assert report.exit_code(results) == 1


def test_a_scratch_namespace_that_never_gets_its_service_account_fails_the_pod_checks():
    w = world()
    w.tenants["tenant-a"].service_account_exists = lambda namespace, name: False  # type: ignore[method-assign]
    result = run_one(w, "konnectivity")["tenant-a"]
    assert result.status == report.FAIL and "has no default ServiceAccount after 60s" in result.detail


# --- reporting -------------------------------------------------------------------------------


RESULTS = [
    report.passed("management", "-", "ok"),
    report.failed("webhook", "tenant-a", "schedulerName is default-scheduler | x"),
    report.skipped("quota", "tenant-b", "tenant-b declares no GPU quota"),
]


def test_the_table_has_one_aligned_row_per_check_and_tenant_and_a_summary():
    lines = report.table(RESULTS).splitlines()
    assert lines[0] == "CHECK       TENANT    RESULT  DETAIL"
    assert lines[1] == "management  -         PASS    ok"
    assert lines[2] == "webhook     tenant-a  FAIL    schedulerName is default-scheduler | x"
    assert lines[-1] == "FAILED: 1 passed, 1 failed, 1 skipped"
    assert report.exit_code(RESULTS) == 1
    assert report.exit_code([RESULTS[0], RESULTS[2]]) == 0
    assert report.summary([]) == "PASSED: 0 passed, 0 failed, 0 skipped"


def test_report_files_are_markdown_json_or_text_by_suffix(tmp_path):
    for name in ("r.md", "r.json", "r.txt"):
        report.write_report(tmp_path / name, RESULTS, "dev", "abc123")
    assert "| webhook | tenant-a | FAIL | schedulerName is default-scheduler \\| x |" in (tmp_path / "r.md").read_text()
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["passed"] is False and document["runId"] == "abc123"
    assert document["results"][2] == {
        "check": "quota",
        "tenant": "tenant-b",
        "status": "SKIP",
        "detail": RESULTS[2].detail,
        "seconds": 0.0,
    }
    assert (tmp_path / "r.txt").read_text() == report.table(RESULTS) + "\n"


def test_a_failed_check_makes_the_cli_exit_1(tmp_path):
    w = world()
    w.tenants["tenant-b"].webhook_mutates = False
    outputs_file = tmp_path / "o.json"
    outputs_file.write_text(json.dumps(outputs_document(DEV, w.tenants)))
    out = io.StringIO()
    argv = ["--outputs", str(outputs_file), "--config", str(DEV_FILE), "--check", "webhook", "-q"]
    assert validate.main(argv, stdout=out, stderr=io.StringIO(), connector=w.connector, clock=w.clock) == 1
    assert "FAILED: 1 passed, 1 failed, 0 skipped" in out.getvalue()


def test_list_prints_one_check_per_line_and_touches_nothing():
    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("--list must not touch a cluster or the Pulumi CLI")

    out = io.StringIO()
    assert (
        validate.main(["--list"], stdout=out, stderr=io.StringIO(), connector=forbidden, runner=forbidden, which=forbidden) == 0
    )
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == list(checks.CHECK_IDS)
    assert len(checks.CHECK_IDS) >= 9
    assert all(line.split()[1] in ("management", "tenant") for line in lines)


def test_list_works_as_a_module_without_pulumi_or_a_cluster():
    done = subprocess.run(
        [sys.executable, "-m", "tools.validate", "--list"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert len(done.stdout.splitlines()) == len(checks.CATALOGUE)


# --- no reachable stack: one line, exit 2 -----------------------------------------------------


def run_cli(argv: list[str], **seams: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = validate.main(argv, stdout=out, stderr=err, **seams)
    return code, out.getvalue(), err.getvalue()


def assert_unavailable(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("validate: "), err
    for fragment in fragments:
        assert fragment in err
    assert SECRET not in err


def completed(returncode: int = 0, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["pulumi"], returncode, stdout, stderr)


def test_without_the_pulumi_cli_it_says_so_in_one_line_and_exits_2():
    assert_unavailable(*run_cli(["--stack", "dev"], which=lambda _name: None), "Pulumi CLI is not on PATH")


def test_the_real_module_exits_2_in_one_line_without_pulumi_on_path():
    env = {**os.environ, "PATH": "/nonexistent"}
    done = subprocess.run(
        [sys.executable, "-m", "tools.validate", "--stack", "dev"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert_unavailable(done.returncode, done.stdout, done.stderr, "Pulumi CLI")


def test_pulumi_is_asked_for_the_outputs_with_secrets_and_a_timeout():
    calls: list[tuple[list[str], dict[str, Any]]] = []

    def runner_(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append((command, kwargs))
        return completed(255, stderr="error: no stack named 'dev' found\nmore detail\n")

    code, out, err = run_cli(["--stack", "dev"], which=lambda _name: "/usr/bin/pulumi", runner=runner_)
    assert_unavailable(code, out, err, "no stack named 'dev' found")
    command, kwargs = calls[0]
    assert command == ["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", "dev"]
    assert kwargs["timeout"] == outputs.PULUMI_TIMEOUT and kwargs["cwd"] == PROJECT_DIR


@pytest.mark.parametrize(
    ("result", "fragment"),
    [
        (subprocess.TimeoutExpired(["pulumi"], 60), "did not answer within 60s"),
        (completed(stdout="not json"), "did not print JSON"),
        (completed(stdout="{}"), "has no outputs"),
        (completed(stdout=json.dumps({"managementKubeconfig": SECRET})), "outputs.tenants"),
        (
            completed(
                stdout=json.dumps(
                    {"managementKubeconfig": SECRET, "tenants": {"tenant-a": {"endpoint": "https://1.2.3.4:6443", "workers": []}}}
                )
            ),
            "tenants.tenant-a.kubeconfig",
        ),
        (
            completed(
                stdout=json.dumps(
                    {
                        "managementKubeconfig": SECRET,
                        "tenants": {
                            "tenant-a": {"kubeconfig": SECRET, "endpoint": "1.2.3.4", "kubernetesVersion": "v1", "namespace": "a"}
                        },
                    }
                )
            ),
            "https://VIP:PORT",
        ),
    ],
)
def test_missing_or_bad_outputs_exit_2_in_one_line(result: Any, fragment: str):
    def runner_(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if isinstance(result, Exception):
            raise result
        return result

    assert_unavailable(*run_cli(["--stack", "dev"], which=lambda _name: "/usr/bin/pulumi", runner=runner_), fragment)


def test_an_unreachable_management_api_exits_2_in_one_line(tmp_path):
    w = world()
    w.management.reachable = False
    outputs_file = tmp_path / "o.json"
    outputs_file.write_text(json.dumps(outputs_document(DEV, w.tenants)))
    argv = ["--outputs", str(outputs_file), "--config", str(DEV_FILE)]
    assert_unavailable(
        *run_cli(argv, connector=w.connector, clock=w.clock), "management cluster API does not answer", "connection refused"
    )


def kubeconfig_for(server: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": SECRET}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


@pytest.mark.parametrize(
    ("environ", "endpoint", "expected"),
    [
        # Go (kubectl, the Pulumi provider) reads only the https variables for an https server;
        # the client alone would let HTTP_PROXY win.
        ({"HTTP_PROXY": "http://plain:3128"}, "https://172.18.255.200:6443", None),
        ({"HTTP_PROXY": "http://plain:3128", "HTTPS_PROXY": "http://tls:3128"}, "https://172.18.255.200:6443", "http://tls:3128"),
        ({"https_proxy": "tls:3128"}, "https://172.18.255.200:6443", "http://tls:3128"),
        ({"HTTPS_PROXY": "http://tls:3128"}, "https://127.0.0.1:40123", None),
        ({"HTTPS_PROXY": "http://tls:3128"}, "https://localhost:40123", None),
    ],
)
def test_the_proxy_is_the_one_kubectl_takes(environ: dict[str, str], endpoint: str, expected: str | None) -> None:
    assert kube.https_proxy(environ, endpoint) == expected


def test_the_client_gets_that_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://plain.invalid:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://tls.invalid:3128")
    live = kube.connect(yaml.safe_dump(kubeconfig_for("https://172.18.255.200:6443")))
    assert live._apis.core.api_client.configuration.proxy == "http://tls.invalid:3128"


def exec_proxy(configuration: Any, host: str) -> tuple[Any, ...]:
    """(proxy host, port, auth) exec's websocket takes to ``host`` with the client's ``configuration``."""
    from kubernetes.stream.ws_client import websocket_proxycare  # noqa: PLC0415
    from websocket._url import get_proxy_info  # noqa: PLC0415

    options = websocket_proxycare({}, configuration, f"wss://{host}:6443", None)
    return get_proxy_info(
        host,
        True,
        proxy_host=options.get("http_proxy_host"),
        proxy_port=options.get("http_proxy_port"),
        no_proxy=options.get("http_no_proxy"),
    )


def test_a_clusters_proxy_url_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # kubectl sends a cluster with proxy-url through that proxy, whatever HTTPS_PROXY and NO_PROXY say.
    behind_a_proxy(monkeypatch)
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8")
    config = kubeconfig_for("https://10.1.2.3:6443")
    config["clusters"][0]["cluster"]["proxy-url"] = "http://bastion.invalid"
    live = kube.connect(yaml.safe_dump(config))
    assert type(live._apis.core.api_client.rest_client.pool_manager) is urllib3.ProxyManager
    configuration = live._apis.core.api_client.configuration
    assert configuration.proxy == "http://bastion.invalid:80"  # Go's default port for an http proxy
    # exec's websocket too, which would read NO_PROXY from the environment itself.
    assert exec_proxy(configuration, "10.1.2.3")[:2] == ("bastion.invalid", 80)
    config["clusters"][0]["cluster"]["proxy-url"] = "socks5://bastion.invalid:1080"
    with pytest.raises(kube.KubeError, match=r"proxy-url socks5:// proxies are not supported here"):
        kube.connect(yaml.safe_dump(config))


def behind_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS_PROXY set to a proxy that does not exist, no other proxy variable."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")


def test_a_real_unreachable_api_is_reported_quickly_through_the_real_client(tmp_path):
    config = kubeconfig_for("https://127.0.0.1:1")
    document = {
        "managementKubeconfig": yaml.safe_dump(config),
        "tenants": {},
    }
    outputs_file = tmp_path / "o.json"
    outputs_file.write_text(json.dumps(document))
    code, out, err = run_cli(["--outputs", str(outputs_file), "--config", str(DEV_FILE)])
    assert_unavailable(code, out, err, "management cluster API does not answer", "no answer")


@pytest.mark.parametrize("variable", ["NO_PROXY", "no_proxy"])
def test_no_proxy_is_honoured_behind_a_proxy(monkeypatch, variable):
    # kubernetes-client/python#2460: the client reads HTTPS_PROXY and drops NO_PROXY, so kind's
    # 127.0.0.1 and the tenant VIPs went to the proxy.
    behind_a_proxy(monkeypatch)
    monkeypatch.setenv(variable, "127.0.0.1,172.18.0.0/16")
    config = kubeconfig_for("https://127.0.0.1:1")
    with pytest.raises(kube.Unreachable) as refused:
        kube.connect(yaml.safe_dump(config)).server_version()
    assert "proxy" not in str(refused.value).lower()


def test_no_proxy_is_read_as_kubectl_reads_it():
    # Go reads NO_PROXY first; the client's exec websocket splits on commas without stripping.
    assert kube.no_proxy({"NO_PROXY": "localhost, 127.0.0.1 ,172.18.0.0/16", "no_proxy": "other"}) == (
        "localhost,127.0.0.1,172.18.0.0/16"
    )
    assert kube.no_proxy({"no_proxy": "172.18.0.0/16"}) == "172.18.0.0/16"
    assert kube.no_proxy({"NO_PROXY": " , "}) is None
    assert kube.no_proxy({}) is None


def test_api_calls_and_exec_bypass_the_proxy_for_the_no_proxy_entries(monkeypatch):
    behind_a_proxy(monkeypatch)
    monkeypatch.setenv("NO_PROXY", "localhost, 172.18.0.0/16")
    live = kube.connect(yaml.safe_dump(kubeconfig_for("https://172.18.255.200:6443")))
    assert type(live._apis.core.api_client.rest_client.pool_manager) is urllib3.PoolManager
    assert exec_proxy(live._apis.core.api_client.configuration, "172.18.255.200")[0] is None


def test_a_loopback_api_is_never_proxied(monkeypatch):
    # kind's API at 127.0.0.1: Go's proxy selection, and so kubectl and the Pulumi provider, never proxy loopback.
    behind_a_proxy(monkeypatch)
    local = kube.connect(yaml.safe_dump(kubeconfig_for("https://127.0.0.1:40123")))
    assert type(local._apis.core.api_client.rest_client.pool_manager) is urllib3.PoolManager
    remote = kube.connect(yaml.safe_dump(kubeconfig_for("https://172.18.255.200:6443")))
    assert type(remote._apis.core.api_client.rest_client.pool_manager) is urllib3.ProxyManager


def test_unreadable_outputs_file_or_stack_config_exit_2(tmp_path):
    assert_unavailable(*run_cli(["--outputs", str(tmp_path / "none.json")]), "cannot read stack outputs")
    w = world()
    outputs_file = tmp_path / "o.json"
    outputs_file.write_text(json.dumps(outputs_document(DEV, w.tenants)))
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {"config": {"gpu-tenancy:tenants": [{"name": "x", "workers": [{"name": "w", "gpus": [{"model": "Z9"}]}]}]}}
        )
    )
    code, out, err = run_cli(["--outputs", str(outputs_file), "--config", str(bad)], connector=w.connector)
    assert_unavailable(code, out, err, "not a valid stack configuration", "unknown GPU model")
    code, out, err = run_cli(["--outputs", str(outputs_file), "--config", str(tmp_path / "missing.yaml")], connector=w.connector)
    assert_unavailable(code, out, err, "no stack config file")


# --- the kubernetes-client boundary ----------------------------------------------------------


class Recorder:
    """An API group whose methods record their arguments and return canned client models."""

    def __init__(self, responses: Mapping[str, Any]) -> None:
        self.responses = responses
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def method(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            response = self.responses.get(name)
            if isinstance(response, Exception):
                raise response
            return response

        method.__self__ = self  # type: ignore[attr-defined]
        return method


def _meta(name: str, namespace: str | None = None, **extra: Any) -> k8s.V1ObjectMeta:
    return k8s.V1ObjectMeta(name=name, namespace=namespace, **extra)


def live_apis() -> kube.Apis:
    node = k8s.V1Node(
        metadata=_meta("w0", labels={"gpu": "on"}, annotations={"a": "b"}),
        status=k8s.V1NodeStatus(
            conditions=[k8s.V1NodeCondition(type="Ready", status="True")],
            capacity={"nvidia.com/gpu": "10"},
            allocatable={"nvidia.com/gpumem": "81920"},
        ),
    )
    pod = k8s.V1Pod(
        metadata=_meta("p", "ns", annotations={expect.ALLOCATED_ANNOTATION: "x"}),
        spec=k8s.V1PodSpec(
            node_name="w0",
            scheduler_name="hami-scheduler",
            containers=[k8s.V1Container(name="c", resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))],
        ),
        status=k8s.V1PodStatus(phase="Running"),
    )
    event = k8s.CoreV1Event(
        metadata=_meta("e", "ns"),
        involved_object=k8s.V1ObjectReference(name="p"),
        reason="FailedScheduling",
        message="0/1 nodes are available: 1 1/1 CardInsufficientCore.",
        source=k8s.V1EventSource(component="hami-scheduler"),
    )
    secrets = [
        k8s.V1Secret(metadata=_meta(f"sh.helm.release.v1.kamaji.v{v}", labels={"version": str(v), "status": status}))
        for v, status in ((1, "superseded"), (2, "deployed"))
    ]
    core = Recorder(
        {
            "list_node": k8s.V1NodeList(items=[node]),
            "list_namespace": k8s.V1NamespaceList(items=[k8s.V1Namespace(metadata=_meta("default"))]),
            "delete_namespace": ApiException(status=404, reason="Not Found"),
            "read_namespaced_service_account": k8s.V1ServiceAccount(metadata=_meta("default", "ns")),
            "list_namespaced_secret": k8s.V1SecretList(items=secrets),
            "read_namespaced_resource_quota": k8s.V1ResourceQuota(
                spec=k8s.V1ResourceQuotaSpec(hard={"limits.nvidia.com/gpumem": "81920"})
            ),
            "create_namespaced_pod": pod,
            "read_namespaced_pod": pod,
            "list_pod_for_all_namespaces": k8s.V1PodList(items=[pod]),
            "list_namespaced_pod": k8s.V1PodList(items=[pod]),
            "list_namespaced_event": k8s.CoreV1EventList(items=[event]),
            "read_namespaced_pod_log": "",
            "delete_namespaced_pod": ApiException(status=404, reason="Not Found"),
        }
    )
    apps = Recorder(
        {
            "list_namespaced_deployment": k8s.V1DeploymentList(
                items=[
                    k8s.V1Deployment(
                        metadata=_meta("d", "ns"),
                        spec=k8s.V1DeploymentSpec(replicas=2, selector=k8s.V1LabelSelector(), template=k8s.V1PodTemplateSpec()),
                        status=k8s.V1DeploymentStatus(ready_replicas=1),
                    )
                ]
            ),
            "list_namespaced_daemon_set": k8s.V1DaemonSetList(
                items=[
                    k8s.V1DaemonSet(
                        metadata=_meta("konnectivity-agent", "kube-system"),
                        status=k8s.V1DaemonSetStatus(
                            desired_number_scheduled=1, number_ready=1, current_number_scheduled=1, number_misscheduled=0
                        ),
                    )
                ]
            ),
            "list_namespaced_stateful_set": k8s.V1StatefulSetList(items=[]),
        }
    )
    return kube.Apis(
        core=core,
        apps=apps,
        custom=Recorder({"get_namespaced_custom_object": {"status": {}}}),
        admission=Recorder({"read_mutating_webhook_configuration": ApiException(status=404, reason="Not Found")}),
        version=Recorder(
            {
                "get_code": k8s.VersionInfo(
                    git_version="v1.36.4",
                    major="1",
                    minor="36",
                    build_date="",
                    compiler="",
                    git_commit="",
                    git_tree_state="",
                    go_version="",
                    platform="",
                )
            }
        ),
    )


class FakeSession:
    def __init__(self, status: str, output: str, stays_open: bool = False) -> None:
        self.status, self.output, self.stays_open = status, output, stays_open
        self.closed = False
        self.timeouts: list[float | None] = []

    def run_forever(self, timeout: float | None = None) -> None:
        self.timeouts.append(timeout)

    def is_open(self) -> bool:
        return self.stays_open

    def read_channel(self, channel: int) -> str:
        assert channel == kube.ERROR_CHANNEL
        return self.status

    def read_all(self) -> str:
        return self.output

    def close(self) -> None:
        self.closed = True


def test_every_live_call_carries_a_request_timeout_and_maps_to_views():
    apis = live_apis()
    sessions = [FakeSession('{"metadata":{},"status":"Success"}', "pause.c v3.10\n")]
    stream_calls: list[dict[str, Any]] = []

    def streamer(method: Any, *args: Any, **kwargs: Any) -> FakeSession:
        stream_calls.append(kwargs)
        return sessions[0]

    live = kube.LiveKube(apis, "https://1.2.3.4:6443", streamer=streamer)
    assert live.server_version() == "v1.36.4"
    assert live.list_nodes() == [
        NodeView("w0", True, {"gpu": "on"}, {"a": "b"}, {"nvidia.com/gpu": "10"}, {"nvidia.com/gpumem": "81920"})
    ]
    assert live.list_namespaces() == ["default"]
    live.create_namespace("n", {RUN_LABEL: "r"})
    live.delete_namespace("n")
    assert live.service_account_exists("ns", "default") is True
    assert live.list_workloads("ns") == [
        Workload("Deployment", "ns", "d", 2, 1),
        Workload("DaemonSet", "kube-system", "konnectivity-agent", 1, 1),
    ]
    assert live.helm_release_status("kamaji-system", "kamaji") == "deployed"
    assert live.get_custom_object("g", "v", "ns", "p", "n") == {"status": {}}
    assert live.webhook_configuration_exists("hami-webhook") is False
    assert live.get_resource_quota("default", "gpu-quota") == {"limits.nvidia.com/gpumem": "81920"}
    pod = live.create_pod("ns", {"metadata": {"name": "p"}})
    assert (pod.name, pod.node_name, pod.scheduler_name, pod.phase, dict(pod.limits)) == (
        "p",
        "w0",
        "hami-scheduler",
        "Running",
        {"nvidia.com/gpu": "1"},
    )
    assert live.read_pod("ns", "p") == pod
    live.delete_pod("ns", "p")
    assert live.list_pods() == [pod] and live.list_pods("ns", "a=b") == [pod]
    assert live.pod_events("ns", "p")[0].message.endswith("CardInsufficientCore.")
    assert live.pod_log("ns", "p") == ""
    assert live.pod_exec("ns", "p", ["/pause", "-v"]) == "pause.c v3.10\n"
    recorded = [call for group in (apis.core, apis.apps, apis.custom, apis.admission, apis.version) for call in group.calls]
    assert len(recorded) >= 20
    for name, _args, kwargs in recorded:
        assert kwargs.get("_request_timeout") == kube.REQUEST_TIMEOUT, f"{name} has no timeout"
    assert stream_calls[0]["_request_timeout"] == kube.STREAM_TIMEOUT
    assert stream_calls[0]["command"] == ["/pause", "-v"] and stream_calls[0]["_preload_content"] is False
    assert sessions[0].timeouts == [kube.STREAM_TIMEOUT] and sessions[0].closed
    delete = next(call for call in apis.core.calls if call[0] == "delete_namespaced_pod")
    assert delete[2]["grace_period_seconds"] == 0


def test_exec_failures_and_hangs_become_kube_errors():
    apis = live_apis()
    failing = FakeSession('{"status":"Failure","message":"command terminated with non-zero exit code"}', "")
    live = kube.LiveKube(apis, "s", streamer=lambda *a, **k: failing)
    with pytest.raises(KubeError, match="non-zero exit code"):
        live.pod_exec("ns", "p", ["false"])
    hanging = FakeSession("", "", stays_open=True)
    live = kube.LiveKube(apis, "s", streamer=lambda *a, **k: hanging, stream_timeout=7)
    with pytest.raises(KubeError, match="did not finish within 7s"):
        live.pod_exec("ns", "p", ["/pause"])
    assert hanging.closed

    def handshake(*args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=0, reason="Handshake status 500 Internal Server Error")

    with pytest.raises(KubeError, match="Handshake status 500"):
        kube.LiveKube(apis, "s", streamer=handshake).pod_exec("ns", "p", ["/pause"])


def test_client_errors_translate_to_one_line_kube_errors():
    forbidden = kube.translate(ApiException(status=403, reason="Forbidden"))
    assert isinstance(forbidden, ApiRefused) and forbidden.status == 403
    body = ApiException(status=400, reason="Bad Request")
    body.body = json.dumps({"message": 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'})
    assert kube.translate(body).message.endswith("exceeding resource quota")  # type: ignore[attr-defined]
    tls = kube.translate(urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.SSLError("certificate verify failed")))
    assert isinstance(tls, TlsRefused) and "certificate verify failed" in str(tls)
    refused = kube.translate(
        urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.NewConnectionError(None, "Connection refused"))
    )
    assert isinstance(refused, Unreachable)
    assert isinstance(kube.translate(TimeoutError("timed out")), Unreachable)
    assert "\n" not in str(kube.translate(ApiException(status=500, reason="multi\nline")))


def test_retarget_keeps_the_credentials_and_drops_the_ca_only_when_not_verifying():
    document = {
        "clusters": [{"name": "a", "cluster": {"server": "https://a:6443", "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "u", "user": {"client-certificate-data": "Y2VydA==", "client-key-data": SECRET}}],
        "contexts": [{"name": "c", "context": {"cluster": "a", "user": "u"}}],
        "current-context": "c",
    }
    verified = kube.retarget(document, "https://b:6443", verify=True)
    assert verified["clusters"][0]["cluster"] == {"server": "https://b:6443", "certificate-authority-data": "Q0E="}
    unverified = kube.retarget(document, "https://b:6443", verify=False)
    assert unverified["clusters"][0]["cluster"] == {"server": "https://b:6443", "insecure-skip-tls-verify": True}
    assert unverified["users"] == document["users"]
    assert document["clusters"][0]["cluster"]["server"] == "https://a:6443", "the original is not modified"


def test_connect_refuses_a_malformed_kubeconfig_without_quoting_it():
    with pytest.raises(KubeError) as error:
        kube.connect(f"{SECRET}: [unclosed")
    assert SECRET not in str(error.value)
    with pytest.raises(KubeError, match="no usable current cluster"):
        kube.connect(yaml.safe_dump({"clusters": [], "users": [], "contexts": []}))
    # Entries of the wrong shape are refused the same way, never with a traceback.
    for malformed in ({"clusters": [{"cluster": {}}]}, {"clusters": "x"}, {"clusters": [{"name": "c", "cluster": {}}]}):
        with pytest.raises(KubeError, match=r"unusable|no usable current cluster"):
            kube.connect(yaml.safe_dump(malformed))


def test_connect_retries_once_and_bounds_the_exec_websocket(monkeypatch):
    # Nothing is sent: the pool is only inspected and exec goes to a fake streamer.
    config = kubeconfig_for("https://127.0.0.1:1")
    live = kube.connect(yaml.safe_dump(config))
    # One retry, not urllib3's default three: an unreachable API is reported, not waited for.
    assert kube.RETRIES == 1
    retries = live._apis.core.api_client.rest_client.pool_manager.connection_pool_kw.get("retries")
    assert retries is not None and retries.total == kube.RETRIES
    # The websocket handshake has no timeout of its own; exec must set the default before it.
    monkeypatch.setattr(websocket._socket, "_default_timeout", None)
    handshakes: list[float | None] = []

    def streamer(*args: Any, **kwargs: Any) -> FakeSession:
        handshakes.append(websocket.getdefaulttimeout())
        return FakeSession('{"metadata":{},"status":"Success"}', "")

    monkeypatch.setattr(live, "_stream", streamer)
    live.pod_exec("ns", "p", ["/pause", "-v"])
    assert handshakes == [kube.STREAM_TIMEOUT]


def test_outputs_keep_kubeconfigs_out_of_their_repr():
    parsed = outputs.parse_outputs(outputs_document(DEV, world().tenants), "t")
    assert SECRET not in repr(parsed)
    assert parsed.tenant("tenant-a").vip == "172.18.255.200"
    assert parsed.tenant("tenant-b").gpus["tenant-b-worker-0"] == (outputs.GpuOutput("L4", 2, 23034),)


# --- Makefile and workflow --------------------------------------------------------------------


def test_make_validate_runs_the_suite_through_the_pulumi_environment_script():
    makefile = (PROJECT_DIR / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(makefile) if line.startswith("validate:"))
    recipe = []
    for line in makefile[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    # --existing: validating never creates an empty stack.
    assert recipe == [
        "scripts/pulumi-env.sh --existing $(STACK) $(VENV)/bin/python -m tools.validate --stack $(STACK) $(VALIDATE_FLAGS)"
    ]


def test_the_e2e_workflow_deploys_validates_uploads_and_always_destroys():
    workflow = yaml.safe_load((PROJECT_DIR / ".github" / "workflows" / "e2e.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key "on" as true
    assert "workflow_dispatch" in triggers and triggers["schedule"][0]["cron"]
    job = workflow["jobs"]["e2e"]
    assert job["runs-on"] == "ubuntu-latest" and job["timeout-minutes"] <= 120
    steps = job["steps"]
    runs = [step.get("run", "") for step in steps]
    names = ("make up", "make validate", "make preview", "make destroy")
    index = {name: next(i for i, run in enumerate(runs) if name in run) for name in names}
    assert index["make up"] < index["make validate"] < index["make destroy"]
    # The policy pack against the deployed stack, where the stack policies see live outputs (a pull
    # request's preview of a fresh stack gives them none), even when validation failed.
    assert index["make up"] < index["make preview"] < index["make destroy"]
    policy = steps[index["make preview"]]
    assert "steps.deploy.outcome == 'success'" in policy["if"] and "!cancelled()" in policy["if"]
    assert steps[index["make up"]]["id"] == "deploy"
    assert any("fs.inotify.max_user_instances=1024" in run and "fs.inotify.max_user_watches=524288" in run for run in runs)
    assert "validation-report" in runs[index["make validate"]]
    destroy = steps[index["make destroy"]]
    assert destroy["if"] == "always()"
    upload = next(step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and "validation-report" in upload["with"]["path"]
    assert steps.index(upload) < index["make destroy"], "the report is uploaded even if destroy hangs"


@pytest.fixture
def signals() -> Iterator[None]:
    interrupts.reset()
    yield
    interrupts.reset()


def test_an_interrupt_the_client_swallows_during_an_exec_handshake_is_still_an_interrupt(signals: None):
    # kubernetes/stream/ws_client.py websocket_call turns a KeyboardInterrupt into ApiException(status=0).
    def handshake(*args: Any, **kwargs: Any) -> Any:
        try:
            interrupts.handle(signal.SIGINT, None)
        except KeyboardInterrupt as interrupt:
            raise ApiException(status=0, reason=str(interrupt)) from None

    with pytest.raises(KeyboardInterrupt):
        kube.LiveKube(live_apis(), "s", streamer=handshake).pod_exec("ns", "p", ["/pause"])


def test_a_second_signal_lets_the_cleanup_finish_and_a_third_abandons_it(signals: None, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(KeyboardInterrupt):
        interrupts.handle(signal.SIGINT, None)
    interrupts.handle(signal.SIGTERM, None)  # CI's follow-up SIGTERM: the cleanup goes on
    assert "interrupt again to abandon it" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):
        interrupts.handle(signal.SIGINT, None)
    # A client error during the cleanup after the first signal is an error, not an interrupt.
    interrupts.reset()
    with pytest.raises(KeyboardInterrupt):
        interrupts.handle(signal.SIGINT, None)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=0, reason="Handshake status 500")

    with pytest.raises(KubeError, match="Handshake status 500"):
        kube.LiveKube(live_apis(), "s", streamer=refused).pod_exec("ns", "p", ["/pause"])


def test_an_interrupted_run_says_what_its_cleanup_left(tmp_path):
    w = world()
    w.tenants["tenant-a"].fail_on["pod_exec"] = KeyboardInterrupt()  # type: ignore[assignment]
    w.tenants["tenant-a"].fail_on["delete_pod"] = ApiRefused(403, "forbidden")
    outputs_file = tmp_path / "o.json"
    outputs_file.write_text(json.dumps(outputs_document(DEV, w.tenants)))
    code, out, err = run_cli(
        ["--outputs", str(outputs_file), "--config", str(DEV_FILE), "-q"], connector=w.connector, clock=w.clock
    )
    assert code == 130 and out == ""
    assert "interrupted; the cleanup left: cleanup: could not delete pod" in err and "were deleted" not in err


def test_a_tenant_that_does_not_answer_fails_a_selection_without_tenant_api():
    w = world()
    w.tenants["tenant-b"].fail_on["server_version"] = Unreachable("no answer: timed out")
    results = runner.run_checks(w.run(["webhook"]))
    assert rows(results, "webhook")["tenant-b"].status == report.FAIL
    assert report.exit_code(results) == 1
    # With tenant-api selected, that row fails and the others are skipped.
    results = runner.run_checks(w.run(["tenant-api", "webhook"]))
    assert rows(results, "tenant-api")["tenant-b"].status == report.FAIL
    assert rows(results, "webhook")["tenant-b"].status == report.SKIP


def test_a_declared_tenant_missing_from_the_outputs_fails():
    w = world()
    document = outputs_document(DEV, w.tenants)
    del document["tenants"]["tenant-b"]  # declared, never deployed
    run = runner.open_run("dev", outputs.parse_outputs(document, "test"), DEV, w.connector, "abc123", clock=w.clock)
    results = runner.run_checks(run)
    missing = rows(results, "outputs")["tenant-b"]
    assert missing.status == report.FAIL and "not in the stack's outputs" in missing.detail
    assert report.exit_code(results) == 1


def test_declared_workers_missing_from_the_outputs_fail_and_do_not_skip_hami_quietly():
    # Workers added to Pulumi.dev.yaml since the last pulumi up: without them HAMi's checks would
    # only skip ("no workers"), and the run would pass.
    w = world()
    document = outputs_document(DEV, w.tenants)
    document["tenants"]["tenant-b"]["workers"] = []
    document["tenants"]["tenant-b"]["gpus"] = {}
    run = runner.open_run("dev", outputs.parse_outputs(document, "test"), DEV, w.connector, "abc123", clock=w.clock)
    results = runner.run_checks(run)
    missing = rows(results, "outputs")["tenant-b"]
    assert missing.status == report.FAIL
    declared = ", ".join(worker.name for worker in DEV.tenant("tenant-b").workers)
    assert missing.detail == f"workers {declared} declared in Pulumi.dev.yaml but not in the stack's outputs; run pulumi up"
    assert report.exit_code(results) == 1


def test_a_handshake_that_fails_without_verification_proves_no_refusal():
    # kube-apiserver asks for a client certificate and rejects a foreign one after the handshake
    # (401); a TLS failure without verification means no API server judged the credentials.
    w = world()
    w.connector.cross[("tenant-a", False)] = TlsRefused("TLS handshake failed: wrong version number")
    result = run_one(w, "isolation")["tenant-a"]
    assert result.status == report.FAIL and "TLS failed even without verifying the server" in result.detail


def test_an_interrupt_during_the_cleanup_abandons_it_and_says_so(tmp_path):
    w = world()
    w.tenants["tenant-a"].fail_on["pod_exec"] = KeyboardInterrupt()  # type: ignore[assignment]
    w.tenants["tenant-a"].fail_on["delete_pod"] = KeyboardInterrupt()  # type: ignore[assignment]
    outputs_file = tmp_path / "o.json"
    outputs_file.write_text(json.dumps(outputs_document(DEV, w.tenants)))
    args = ["--outputs", str(outputs_file), "--config", str(DEV_FILE), "-q"]
    code, _, err = run_cli(args, connector=w.connector, clock=w.clock)
    assert code == 130
    assert "were deleted" not in err and f"anything the run created carries the label {RUN_LABEL}" in err


def test_which_signals_raise(signals: None):
    assert not interrupts.raised_since(0)
    for _ in range(2):
        with contextlib.suppress(KeyboardInterrupt):
            interrupts.handle(signal.SIGINT, None)
    # The first and second both arrived during one call: the first raised, so it is an interrupt.
    assert interrupts.raised_since(0)
    assert not interrupts.raised_since(1)  # only the second, which lets the cleanup go on


def test_scratch_namespaces_are_deleted_when_a_run_ends_in_any_other_way():
    w = world()
    w.tenants["tenant-b"].fail_on["list_workloads"] = SystemExit(3)  # type: ignore[assignment]
    with pytest.raises(SystemExit):
        runner.run_checks(w.run())
    assert all(len(fake.deleted_namespaces) == 1 for fake in w.tenants.values())


def test_an_events_time_is_its_latest_occurrence_in_either_events_api():
    # kube-scheduler reports through events.k8s.io: seen as core/v1, eventTime is the first
    # occurrence and repeats only move series.lastObservedTime.
    from datetime import UTC, datetime  # noqa: PLC0415

    def at(second: int) -> datetime:
        return datetime(2026, 12, 1, 0, 0, second, tzinfo=UTC)

    repeated = k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name="r", creation_timestamp=at(1)),
        involved_object=k8s.V1ObjectReference(),
        event_time=at(1),
        series=k8s.CoreV1EventSeries(count=9, last_observed_time=at(50)),
    )
    once = k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name="o", creation_timestamp=at(5)),
        involved_object=k8s.V1ObjectReference(),
        last_timestamp=at(5),
    )
    assert kube._event_view(repeated).timestamp > kube._event_view(once).timestamp


@pytest.mark.parametrize(("document", "kind"), [([], "an array"), ("x", "a string"), (3, "a number"), (None, "null")])
def test_outputs_that_are_not_an_object_are_named_as_such(document: object, kind: str) -> None:
    with pytest.raises(outputs.StackUnavailable) as refused:
        outputs.parse_outputs(document, "o.json")
    assert str(refused.value) == f"expected a JSON object of stack outputs (o.json), not {kind}"
