"""The HAMi v2.10 placement model against HAMi's documented and coded behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_tenancy import gpus
from gpu_tenancy.placement import (
    GPU,
    GPU_POLICY_ANNOTATION,
    GPUCORES,
    GPUMEM,
    GPUMEM_PERCENTAGE,
    NODE_POLICY_ANNOTATION,
    NOUSE_GPUTYPE,
    NOUSE_GPUUUID,
    NUMA_BIND,
    SCORING_WEIGHTS_ANNOTATION,
    USE_GPUTYPE,
    USE_GPUUUID,
    Allocation,
    Cluster,
    Container,
    Device,
    GpuQuota,
    Node,
    PlacementInputError,
    Pod,
    QuotaUsage,
    Request,
    SchedulerConfig,
    ScoringWeights,
    ScoringWeightsError,
    admission_quota_request,
    admit,
    container_request,
    device_score,
    gen_reason,
    mutate_container,
    node_score,
    nodes_for_tenant,
    parse_quantity,
    parse_reason,
    parse_scoring_weights,
    plan,
    quota_for_tenant,
    sort_devices,
    unschedulable_message,
)
from gpu_tenancy.stack_file import load_stack_config

PROJECT_DIR = Path(__file__).resolve().parent.parent


def cards(worker: str, model: str, count: int) -> list[gpus.Card]:
    return gpus.worker_cards(worker, [(model, count)])


def gpu_node(name: str, model: str = "A100-80GB", count: int = 1) -> Node:
    return Node.from_register_entries(name, [card.register_entry() for card in cards(name, model, count)])


def pod(name: str, *containers: Container, annotations: dict[str, str] | None = None, **kwargs: object) -> Pod:
    return Pod(name, annotations=annotations or {}, containers=containers, **kwargs)  # type: ignore[arg-type]


def ctr(name: str = "cuda", **limits: int | str) -> Container:
    names = {"gpu": GPU, "mem": GPUMEM, "pct": GPUMEM_PERCENTAGE, "cores": GPUCORES}
    return Container(name, {names[key]: value for key, value in limits.items()})


def frac(name: str, mem: int = 20000, cores: int = 30, **kwargs: object) -> Pod:
    return pod(name, ctr(mem=mem, cores=cores), **kwargs)  # type: ignore[arg-type]


def ids(node: Node) -> list[str]:
    return [device.id for device in node.devices]


# --- the canonical facts ---------------------------------------------------------------------


def test_three_fractional_pods_fit_an_a100_and_the_fourth_lacks_cores():
    a100 = gpu_node("w0")
    card = ids(a100)[0]
    results = plan([frac("p1"), frac("p2"), frac("p3"), frac("p4")], [a100])
    assert [r.stage for r in results] == ["scheduled", "scheduled", "scheduled", "filter"]
    assert [r.devices for r in results[:3]] == [((Allocation(card, 0, 20000, 30),),)] * 3
    assert results[3].node_reasons == {"w0": "1/1 CardInsufficientCore"}
    assert results[3].reasons == ("CardInsufficientCore",)
    assert results[3].message == "0/1 nodes are available: 1 1/1 CardInsufficientCore."
    assert not results[3].scheduled


def test_a_request_larger_than_the_card_fails_on_memory():
    (result,) = plan([frac("big", mem=90000)], [gpu_node("w0")])
    assert result.message == "0/1 nodes are available: 1 1/1 CardInsufficientMemory."


def test_one_20000_mib_pod_per_l4_with_spread_taking_the_last_card_first():
    l4s = gpu_node("w0", "L4", 2)
    first, second = ids(l4s)
    results = plan([frac("p1"), frac("p2"), frac("p3")], [l4s])
    # Equal scores keep annotation order and Fit walks from the end: index 1, then the idle index 0.
    assert results[0].devices == ((Allocation(second, 1, 20000, 30),),)
    assert results[1].devices == ((Allocation(first, 0, 20000, 30),),)
    assert results[2].message == "0/1 nodes are available: 1 2/2 CardInsufficientMemory."


def test_inputs_are_untouched_by_plan_but_a_cluster_consumes_capacity():
    node = gpu_node("w0")
    plan([frac("p1")], [node])
    assert node.devices[0].used == 0
    cluster = Cluster([node])
    cluster.plan([frac("p1"), frac("p2")])
    device = cluster.node("w0").devices[0]
    assert (device.used, device.usedmem, device.usedcores) == (2, 40000, 60)


def test_node_score_reported_before_each_pod():
    results = plan([frac("p1"), frac("p2")], [gpu_node("w0")])
    # 10 * (1/10 + 30/100 + 20000/81920) in float32, as FilteringSucceed prints it.
    assert results[0].message == "find fit node(w0), 0 nodes not fit, 1 nodes fit(w0:0.00)"
    assert results[1].message == "find fit node(w0), 0 nodes not fit, 1 nodes fit(w0:6.44)"


# --- requests and webhook defaults -----------------------------------------------------------


def test_limits_fall_back_to_requests():
    container = Container("c", limits={GPU: 1}, requests={GPUMEM: 3000, GPUCORES: 20})
    assert container_request(container) == Request(1, 3000, 101, 20)


def test_limit_wins_over_request():
    container = Container("c", limits={GPU: 1, GPUMEM: 1000}, requests={GPUMEM: 3000})
    assert container_request(container) == Request(1, 1000, 101, 0)


def test_no_gpu_count_means_no_request_before_the_webhook():
    assert container_request(ctr(mem=1000)) is None
    assert container_request(ctr(gpu=0, mem=1000)) is None


def test_omitting_memory_means_the_whole_card():
    assert container_request(ctr(gpu=1, cores=30)) == Request(1, 0, 100, 30)


def test_configured_default_memory_and_cores():
    config = SchedulerConfig(default_memory=5000, default_cores=10)
    assert container_request(ctr(gpu=1), config) == Request(1, 5000, 101, 10)


def test_memory_factor_scales_gpumem():
    assert container_request(ctr(gpu=1, mem=1000), SchedulerConfig(memory_factor=4)) == Request(1, 4000, 101, 0)


def test_percentage_semantics():
    assert container_request(ctr(gpu=1, pct=50)) == Request(1, 0, 50, 0)
    assert container_request(ctr(gpu=1, pct=150)) == Request(1, 0, 100, 0)
    # 0 keeps the "unset" sentinel 101, so the whole-card default applies.
    assert container_request(ctr(gpu=1, pct=0)) == Request(1, 0, 100, 0)


def test_non_integer_memory_voids_the_request():
    assert container_request(ctr(gpu=1, mem="0.5")) is None
    assert container_request(ctr(gpu=1, mem=2**31)) is None


def test_quantities():
    assert parse_quantity("20Gi") == 20 * 1024**3
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(20000) == 20000
    with pytest.raises(PlacementInputError):
        parse_quantity("-1")
    with pytest.raises(PlacementInputError):
        parse_quantity("lots")


@pytest.mark.parametrize(
    ("limits", "requests", "message"),
    [
        ({}, {GPUMEM: 20000}, "limits[nvidia.com/gpumem]: Required value: Limit must be set for non overcommitable resources"),
        ({GPU: "1.5"}, {}, "limits[nvidia.com/gpu]: Invalid value: '1.5': must be an integer"),
        ({GPU: "500m"}, {}, "limits[nvidia.com/gpu]: Invalid value: '500m': must be an integer"),
        ({GPU: 1}, {GPU: 2}, "requests[nvidia.com/gpu]: Invalid value: 2: must be equal to nvidia.com/gpu limit of 1"),
    ],
)
def test_the_api_server_refuses_extended_resources_that_overcommit_or_are_fractional(
    limits: dict, requests: dict, message: str
) -> None:
    # pkg/apis/core/validation ValidateResourceRequirements: an extended resource is an integer, and
    # its request, if any, equals its limit. Such a pod never reaches HAMi's webhook.
    pod = Pod("p", containers=(Container("c", limits=limits, requests=requests),))
    with pytest.raises(PlacementInputError) as refused:
        admit(pod, {})
    assert str(refused.value) == f"{message}; in pod default/p, container c"


def test_equal_requests_and_cpu_fractions_are_fine() -> None:
    pod = Pod("p", containers=(Container("c", limits={GPU: 1, "cpu": "500m"}, requests={GPU: "1", "cpu": "250m"}),))
    assert admit(pod, {}).allowed


def test_webhook_adds_one_gpu_when_only_memory_or_cores_are_given():
    mutated, found = mutate_container(ctr(mem=20000))
    assert found is True
    assert mutated.limits == {GPUMEM: 20000, GPU: 1}
    assert mutate_container(ctr(pct=50))[0].limits == {GPUMEM_PERCENTAGE: 50, GPU: 1}


def test_webhook_makes_whole_card_requests_exclusive():
    assert mutate_container(ctr(gpu=1))[0].limits == {GPU: 1, GPUCORES: 100}
    assert mutate_container(ctr(pct=100))[0].limits == {GPUMEM_PERCENTAGE: 100, GPU: 1, GPUCORES: 100}
    assert mutate_container(ctr(pct=99))[0].limits == {GPUMEM_PERCENTAGE: 99, GPU: 1}  # a share, not the card
    assert mutate_container(ctr(gpu=1, cores=30))[0].limits == {GPU: 1, GPUCORES: 30}
    assert mutate_container(ctr(gpu=1, pct=50))[0].limits == {GPU: 1, GPUMEM_PERCENTAGE: 50}


def test_webhook_leaves_non_gpu_containers_alone():
    assert mutate_container(Container("c", {"cpu": 1})) == (Container("c", {"cpu": 1}), False)


def test_bare_gpu_pod_takes_the_whole_card_and_a_second_one_lacks_memory():
    a100 = gpu_node("w0")
    results = plan([pod("p1", ctr(gpu=1)), pod("p2", ctr(gpu=1))], [a100])
    assert results[0].devices == ((Allocation(ids(a100)[0], 0, 81920, 100),),)
    assert results[1].message == "0/1 nodes are available: 1 1/1 CardInsufficientMemory."


def test_percentage_memory_is_a_share_of_each_card():
    results = plan([pod(f"p{i}", ctr(pct=50)) for i in range(3)], [gpu_node("w0")])
    assert [r.devices[0][0].usedmem for r in results[:2]] == [40960, 40960]
    assert results[2].reasons == ("CardInsufficientMemory",)


# --- the per-card checks, in HAMi's order ----------------------------------------------------


def test_card_not_health():
    node = gpu_node("w0")
    node.devices[0].health = False
    (result,) = plan([frac("p")], [node])
    assert result.node_reasons == {"w0": "1/1 CardNotHealth"}


def test_unhealthy_is_checked_before_type():
    node = gpu_node("w0")
    node.devices[0].health = False
    (result,) = plan([frac("p", annotations={USE_GPUTYPE: "H100"})], [node])
    assert result.node_reasons == {"w0": "1/1 CardNotHealth"}


def test_cordoned_card():
    node = gpu_node("w0")
    node.cordoned = frozenset(ids(node))
    (result,) = plan([frac("p")], [node])
    assert result.node_reasons == {"w0": "1/1 CardCordoned"}


def test_gpu_type_annotations_are_case_insensitive_substrings_and_comma_lists():
    mixed = Node.from_register_entries("w0", [c.register_entry() for c in gpus.worker_cards("w0", [("A100-80GB", 1), ("L4", 1)])])
    a100, l4 = ids(mixed)
    results = plan(
        [
            frac("use-a100", annotations={USE_GPUTYPE: "a100"}),
            frac("use-list", annotations={USE_GPUTYPE: "V100,L4"}),
            frac("avoid-l4", annotations={NOUSE_GPUTYPE: "l4"}),
            frac("none", annotations={USE_GPUTYPE: "H100"}),
        ],
        [mixed],
    )
    assert [r.devices[0][0].id for r in results[:3]] == [a100, l4, a100]
    assert results[3].node_reasons == {"w0": "2/2 CardTypeMismatch"}


def test_gpu_uuid_annotations_match_exactly():
    l4s = gpu_node("w0", "L4", 2)
    first, second = ids(l4s)
    results = plan(
        [
            frac("use-first", annotations={USE_GPUUUID: first}),
            frac("avoid-second", annotations={NOUSE_GPUUUID: f"{second},GPU-other"}),
            frac("prefix-only", annotations={USE_GPUUUID: first[:-1]}),
        ],
        [l4s],
    )
    assert results[0].devices[0][0].id == first
    # avoid-second must take the first card, which already holds 20000 MiB.
    assert results[1].node_reasons == {"w0": "1/2 CardInsufficientMemory, 1/2 CardUuidMismatch"}
    assert results[2].node_reasons == {"w0": "2/2 CardUuidMismatch"}


@pytest.mark.parametrize("value", ["", "  ", ","])
def test_an_empty_gpu_uuid_list_is_no_constraint(value: str):
    # HAMi#2045: CheckUUID skips a use/nouse list that is empty once trimmed.
    for key in (USE_GPUUUID, NOUSE_GPUUUID):
        (result,) = plan([frac("any", annotations={key: value})], [gpu_node("w0", "L4")])
        assert result.scheduled, (key, result.message)


def test_filtering_succeeded_lists_the_nodes_in_hamis_order_the_chosen_last():
    # scheduler.go Filter sorts with NodeScoreList.Less (binpack ascending, spread descending)
    # and takes the last element; the event prints the sorted list.
    binpack = plan([frac("p1"), frac("p2")], [gpu_node("a"), gpu_node("b")])
    assert binpack[1].message == "find fit node(a), 0 nodes not fit, 2 nodes fit(b:0.00,a:6.44)"
    spread = plan([frac("p1"), frac("p2")], [gpu_node("a"), gpu_node("b")], SchedulerConfig(node_policy="spread"))
    assert spread[1].message == "find fit node(b), 0 nodes not fit, 2 nodes fit(a:6.44,b:0.00)"
    # Tied: HAMi's pick depends on goroutine timing; the model's pick (the name that sorts first) is listed last.
    assert binpack[0].message == "find fit node(a), 0 nodes not fit, 2 nodes fit(b:0.00,a:0.00)"


def test_time_slicing_exhausted_after_split_count_tasks():
    results = plan([frac(f"p{i}", mem=1000, cores=0) for i in range(11)], [gpu_node("w0")])
    assert [r.stage for r in results].count("scheduled") == 10
    assert results[10].node_reasons == {"w0": "1/1 CardTimeSlicingExhausted"}


def test_exclusive_cores_on_a_used_card_conflict():
    # The first pod holds a slot but no cores, so 100 cores fit and only exclusivity refuses.
    results = plan([pod("shared", ctr(mem=1000)), frac("exclusive", mem=1000, cores=100)], [gpu_node("w0")])
    assert results[1].node_reasons == {"w0": "1/1 ExclusiveDeviceAllocateConflict"}


def test_exclusive_pod_after_a_fractional_one_lacks_cores_first():
    results = plan([frac("p1"), frac("exclusive", mem=1000, cores=100)], [gpu_node("w0")])
    assert results[1].node_reasons == {"w0": "1/1 CardInsufficientCore"}


def test_mutex_policy_refuses_any_used_card():
    node = gpu_node("w0", "L4", 2)
    results = plan(
        [
            frac("p1", mem=1000, cores=10),
            *(frac(f"m{i}", mem=1000, cores=10, annotations={GPU_POLICY_ANNOTATION: "mutex"}) for i in (1, 2)),
        ],
        [node],
    )
    first, second = ids(node)
    assert results[0].devices[0][0].id == second
    assert results[1].devices[0][0].id == first
    assert results[2].node_reasons == {"w0": "2/2 ExclusiveDeviceAllocateConflict"}


def test_mutex_in_a_policy_chain_still_filters():
    results = plan(
        [frac("p1", mem=1000, cores=10), frac("m", mem=1000, cores=10, annotations={GPU_POLICY_ANNOTATION: "binpack,mutex"})],
        [gpu_node("w0")],
    )
    assert results[1].node_reasons == {"w0": "1/1 ExclusiveDeviceAllocateConflict"}


def test_compute_units_exhausted_for_a_zero_core_request_on_a_full_card():
    results = plan([frac("full", mem=1000, cores=100), pod("no-cores", ctr(mem=1000))], [gpu_node("w0")])
    assert results[1].node_reasons == {"w0": "1/1 CardComputeUnitsExhausted"}


def test_cores_above_100_are_clamped():
    (result,) = plan([frac("greedy", mem=1000, cores=150)], [gpu_node("w0")])
    assert result.devices[0][0].usedcores == 100


def test_allocated_cards_insufficient_request():
    node = gpu_node("w0", "L4", 2)
    node.devices[0].usedmem = 20000
    (result,) = plan([pod("two", ctr(gpu=2, mem=10000, cores=10))], [node])
    assert result.node_reasons == {"w0": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"}


def test_two_cards_for_one_container():
    node = gpu_node("w0", "L4", 2)
    first, second = ids(node)
    (result,) = plan([pod("two", ctr(gpu=2, mem=20000, cores=30))], [node])
    assert result.devices == ((Allocation(second, 1, 20000, 30), Allocation(first, 0, 20000, 30)),)


@pytest.mark.parametrize(("cards_on_node", "taken"), [(2, [1, 0]), (3, [2, 1])])
def test_topology_aware_takes_the_first_fitting_cards_when_enough_fit(cards_on_node: int, taken: list[int]):
    # HAMi's Fit collects every fitting card, then takes them all when exactly as many fit as asked
    # and the best-scored combination when more do; with no pair scores that is the first ones seen.
    node = gpu_node("w0", "L4", cards_on_node)
    two = pod("two", ctr(gpu=2, mem=20000, cores=30), annotations={GPU_POLICY_ANNOTATION: "topology-aware"})
    (result,) = plan([two], [node])
    assert [allocation.index for allocation in result.devices[0]] == taken


def test_topology_aware_fails_when_fewer_cards_fit_than_asked():
    node = gpu_node("w0", "L4", 2)
    node.devices[0].usedmem = 20000
    two = pod("two", ctr(gpu=2, mem=10000, cores=30), annotations={GPU_POLICY_ANNOTATION: "topology-aware"})
    (result,) = plan([two], [node])
    assert result.node_reasons == {"w0": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"}


def test_more_cards_than_the_node_has():
    (result,) = plan([pod("three", ctr(gpu=3, mem=1000))], [gpu_node("w0", "L4", 2)])
    assert result.node_reasons == {"w0": "NodeInsufficientDevice"}
    assert result.message == "0/1 nodes are available: 1 NodeInsufficientDevice."


def test_non_nvidia_cards_are_not_candidates():
    node = Node("w0", [Device("GPU-x", type="Tesla T4", devmem=15360)])
    (result,) = plan([frac("p", mem=1000)], [node])
    assert result.node_reasons == {"w0": "NodeInsufficientDevice"}


def test_node_unregistered():
    (result,) = plan([frac("p")], [Node("bare")])
    assert result.node_reasons == {"bare": "node unregistered"}
    assert result.message == "0/1 nodes are available: 1 node unregistered."


def test_numa_bind_keeps_a_containers_cards_on_one_numa_node():
    node = gpu_node("w0", "L4", 3)
    node.devices[2].numa = 1
    annotations = {NUMA_BIND: "true"}
    (result,) = plan([pod("p", ctr(gpu=2, mem=1000), annotations=annotations)], [node])
    assert {a.id for a in result.devices[0]} == set(ids(node)[:2])
    node.devices[1].health = False
    (result,) = plan([pod("p", ctr(gpu=2, mem=1000), annotations=annotations)], [node])
    assert result.node_reasons == {"w0": "1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, 1/3 NumaNotFit"}


# --- GPU order and node choice ---------------------------------------------------------------


def test_gpu_binpack_keeps_filling_the_busiest_card():
    node = gpu_node("w0", "L4", 2)
    binpack = {GPU_POLICY_ANNOTATION: "binpack"}
    results = plan([frac(f"p{i}", mem=5000, cores=10, annotations=binpack) for i in range(3)], [node])
    assert {r.devices[0][0].id for r in results} == {ids(node)[1]}


def test_gpu_policy_from_config():
    node = gpu_node("w0", "L4", 2)
    results = plan([frac(f"p{i}", mem=5000, cores=10) for i in range(2)], [node], SchedulerConfig(gpu_policy="binpack"))
    assert {r.devices[0][0].id for r in results} == {ids(node)[1]}


def test_unknown_gpu_policy_sorts_like_spread():
    node = gpu_node("w0", "L4", 2)
    pack = {GPU_POLICY_ANNOTATION: "pack"}
    results = plan([frac(f"p{i}", mem=5000, cores=10, annotations=pack) for i in range(2)], [node])
    assert [r.devices[0][0].id for r in results] == [ids(node)[1], ids(node)[0]]


def test_device_sort_is_stable_and_spread_tries_the_least_used_first():
    devices = [Device(f"d{i}", index=i, devmem=1000) for i in range(3)]
    devices[1].used = 1
    request = Request(1, 100, 101, 0)
    scores = [device_score(d, request) for d in devices]
    assert [d.id for d in sort_devices(devices, scores, "spread")] == ["d1", "d0", "d2"]
    assert [d.id for d in sort_devices(devices, scores, "binpack")] == ["d0", "d2", "d1"]


def test_device_score_counts_the_request_only_for_a_card_typed_nvidia():
    request = Request(1, 500, 101, 50)
    plain = Device("a", type="NVIDIA", devmem=1000)
    named = Device("b", type="NVIDIA L4", devmem=1000)
    assert device_score(plain, request) == pytest.approx(10 * (0.1 + 0.5 + 0.5))
    assert device_score(named, request) == 0.0
    assert device_score(Device("z", devmem=0), request) == 0.0


def test_node_score_over_all_cards():
    devices = [Device("a", devmem=1000, used=2, usedmem=500, usedcores=50), Device("b", devmem=1000)]
    assert node_score(devices) == pytest.approx(10 * (2 / 20 + 50 / 200 + 500 / 2000))
    assert node_score([]) == 0.0


def test_node_binpack_prefers_the_busier_node_and_spread_the_idler_one():
    busy, idle = gpu_node("busy"), gpu_node("idle")
    busy.devices[0].used, busy.devices[0].usedmem, busy.devices[0].usedcores = 1, 10000, 10
    assert plan([frac("p")], [idle, busy])[0].node == "busy"
    assert plan([frac("p", annotations={NODE_POLICY_ANNOTATION: "spread"})], [idle, busy])[0].node == "idle"
    assert plan([frac("p")], [idle, busy], SchedulerConfig(node_policy="spread"))[0].node == "idle"
    # Anything but "spread" sorts like binpack.
    assert plan([frac("p", annotations={NODE_POLICY_ANNOTATION: "pack"})], [idle, busy])[0].node == "busy"


def test_node_ties_go_to_the_name_that_sorts_first():
    results = plan([frac("p1"), frac("p2")], [gpu_node("b"), gpu_node("a")])
    # binpack: the first pod ties (both idle) → "a"; the second then prefers the used "a".
    assert [r.node for r in results] == ["a", "a"]
    spread = {NODE_POLICY_ANNOTATION: "spread"}
    results = plan([frac("p1", annotations=spread), frac("p2", annotations=spread)], [gpu_node("b"), gpu_node("a")])
    assert [r.node for r in results] == ["a", "b"]


def test_failures_group_by_reason_across_nodes():
    results = plan([frac("p", mem=90000)], [gpu_node("w0"), gpu_node("w1"), Node("bare")])
    assert results[0].message == "0/3 nodes are available: 1 node unregistered, 2 1/1 CardInsufficientMemory."
    assert results[0].reasons == ("CardInsufficientMemory", "node unregistered")


def test_a_fitting_node_wins_over_failing_ones():
    small = gpu_node("small", "L4")
    (result,) = plan([frac("p", mem=40000)], [small, gpu_node("big")])
    assert result.node == "big"
    assert result.node_reasons == {"small": "1/1 CardInsufficientMemory"}
    assert result.message.startswith("find fit node(big), 1 nodes not fit, 1 nodes fit(big:")


# --- scoring weights -------------------------------------------------------------------------


def test_scoring_weights_change_which_card_spread_picks():
    node = gpu_node("w0", "L4", 2)
    first, second = ids(node)
    # first: many small tasks; second: one large task.
    node.devices[0].used, node.devices[0].usedmem = 3, 1000
    node.devices[1].used, node.devices[1].usedmem = 1, 20000
    assert plan([frac("p", mem=1000, cores=0)], [node])[0].devices[0][0].id == first
    weights = {SCORING_WEIGHTS_ANNOTATION: "slot=1,core=1,memory=0"}
    assert plan([frac("p", mem=1000, cores=0, annotations=weights)], [node])[0].devices[0][0].id == second


def test_parse_scoring_weights():
    assert parse_scoring_weights("slot=1,core=1,memory=3") == ScoringWeights(1, 1, 3)
    assert parse_scoring_weights(" memory = 2 , slot=0,core=0") == ScoringWeights(0, 0, 2)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("slot=1,core=1", "expected slot, core, and memory weights"),
        ("slot=1,core,memory=1", "expected key=value entries"),
        ("slot=1,slot=1,memory=1", 'duplicate "slot" weight'),
        ("slot=1,core=x,memory=1", '"core" weight must be an integer'),
        ("slot=1,core=-1,memory=1", '"core" weight must not be negative'),
        ("slot=1,gpu=1,memory=1", 'unknown weight "gpu"'),
        ("slot=0,core=0,memory=0", "at least one weight must be positive"),
    ],
)
def test_invalid_scoring_weights(value, problem):
    with pytest.raises(ScoringWeightsError) as error:
        parse_scoring_weights(value)
    assert str(error.value) == f'invalid hami.io/device-scoring-weights annotation "{value}": {problem}'


def test_invalid_scoring_weights_fail_filter_with_an_error():
    (result,) = plan([frac("p", annotations={SCORING_WEIGHTS_ANNOTATION: "slot=1"})], [gpu_node("w0")])
    assert result.stage == "error"
    assert not result.scheduled
    assert result.message == (
        'calcScore failed invalid hami.io/device-scoring-weights annotation "slot=1": '
        "expected slot, core, and memory weights for pod p"
    )


# --- pods with several containers ------------------------------------------------------------


def test_containers_of_one_pod_consume_capacity_for_the_next():
    node = gpu_node("w0", "L4", 2)
    first, second = ids(node)
    (result,) = plan([pod("two", ctr("a", mem=10000, cores=10), ctr("b", mem=10000, cores=10))], [node])
    # spread re-sorts after the first container: the second goes to the still idle card.
    assert result.devices == ((Allocation(second, 1, 10000, 10),), (Allocation(first, 0, 10000, 10),))


def test_containers_of_one_pod_share_a_card_under_binpack():
    node = gpu_node("w0")
    (result,) = plan([pod("two", ctr("a", mem=30000, cores=40), ctr("b", mem=30000, cores=40))], [node])
    assert [c[0].id for c in result.devices] == [ids(node)[0]] * 2


def test_a_pod_whose_containers_do_not_fit_together_fails():
    (result,) = plan([pod("two", ctr("a", mem=15000, cores=10), ctr("b", mem=15000, cores=10))], [gpu_node("w0", "L4")])
    assert result.node_reasons == {"w0": "1/1 CardInsufficientMemory"}


def test_non_gpu_containers_get_an_empty_device_list():
    (result,) = plan([pod("mixed", Container("sidecar", {"cpu": 1}), ctr(mem=1000))], [gpu_node("w0")])
    assert result.devices[0] == ()
    assert len(result.devices[1]) == 1


def test_init_containers_come_first_and_hold_their_peak():
    node = gpu_node("w0")
    init = (ctr("warmup", mem=60000, cores=50),)
    results = plan([pod("p", ctr("main", mem=30000, cores=20), init_containers=init), frac("next", mem=30000)], [node])
    card = ids(node)[0]
    assert results[0].devices == ((Allocation(card, 0, 60000, 50),), (Allocation(card, 0, 30000, 20),))
    # The pod holds max(init, app) per card: 60000 MiB and 50 %, one slot.
    assert results[1].node_reasons == {"w0": "1/1 CardInsufficientMemory"}


def test_pod_without_gpu_request_is_left_to_kube_scheduler():
    (result,) = plan([pod("web", Container("nginx", {"cpu": 1}))], [gpu_node("w0")])
    assert (result.stage, result.scheduled, result.node, result.devices) == ("no-gpu", True, None, ((),))


# --- admission -------------------------------------------------------------------------------


def test_invalid_percentage_is_refused_by_the_webhook():
    (result,) = plan([pod("p", ctr("c", pct=150))], [gpu_node("w0")])
    assert result.stage == "admission"
    assert result.message == (
        'admission webhook "vgpu.hami.io" denied the request: '
        "invalid nvidia.com/gpumem-percentage value 150 in container c: must be an integer between 0 and 100"
    )


def test_privileged_gpu_container_is_refused():
    privileged = Container("c", {GPUMEM: 1000}, privileged=True)
    assert admit(pod("p", privileged)).message == 'admission webhook "vgpu.hami.io" denied the request: container c is privileged'
    assert admit(pod("p", Container("c", {"cpu": 1}, privileged=True))).allowed


def test_pod_without_containers_is_refused():
    assert admit(Pod("empty")).message == 'admission webhook "vgpu.hami.io" denied the request: pod has no containers'


def test_pods_hami_never_handles_hold_no_card():
    # webhook.go: another scheduler's pod is let through unchanged; the chart's selectors never
    # send a pod labelled hami.io/webhook: ignore. Neither is counted, so the fourth pod fits.
    bypassing = [
        frac("volcano", scheduler_name="volcano"),
        frac("ignored", labels={"hami.io/webhook": "ignore"}),
        frac("other", scheduler_name="my-scheduler"),
    ]
    results = plan([*bypassing, frac("p1"), frac("p2"), frac("p3")], [gpu_node("w0")])
    assert [r.stage for r in results] == ["not-hami"] * 3 + ["scheduled"] * 3
    assert not any(r.scheduled for r in results[:3])
    assert "schedulerName volcano: HAMi's webhook lets it through unchanged" in results[0].message
    assert "labelled hami.io/webhook: ignore" in results[1].message


def test_an_ignored_pod_that_names_hami_scheduler_itself_is_still_hamis():
    # The webhook never sees it, but the scheduler it names is HAMi's: HAMi places it and counts it.
    pod_ = frac("own", scheduler_name="hami-scheduler", labels={"hami.io/webhook": "ignore"})
    assert [r.stage for r in plan([pod_], [gpu_node("w0")])] == ["scheduled"]


def test_the_default_scheduler_named_explicitly_is_taken_over():
    # forceOverwriteDefaultScheduler is the chart's default: default-scheduler becomes hami-scheduler.
    for name in ("default-scheduler", "hami-scheduler", ""):
        admission = admit(frac("p", scheduler_name=name))
        assert admission.allowed and not admission.bypassed
        assert admission.pod.scheduler_name == "hami-scheduler"


def test_a_gpu_pod_bound_at_creation_is_refused():
    denied = admit(frac("p", node_name="w0"))
    assert denied.message == 'admission webhook "vgpu.hami.io" denied the request: pod has node assigned'
    # Without a GPU request the webhook leaves it alone.
    assert admit(pod("cpu", Container("c", {"cpu": 1}), node_name="w0")).allowed


# --- quota -----------------------------------------------------------------------------------


def test_quota_refuses_a_pod_beyond_the_namespace_limit_at_admission():
    quota = GpuQuota("default", gpumem=40000, gpucores=100)
    results = plan([frac("p1"), frac("p2"), frac("p3")], [gpu_node("w0")], quotas=[quota])
    assert [r.stage for r in results] == ["scheduled", "scheduled", "admission"]
    assert results[2].message == 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'


def test_quota_counts_cores_too_and_only_its_namespace():
    quota = GpuQuota("team", gpucores=50)
    results = plan(
        [frac("p1", namespace="team"), frac("p2", namespace="team"), frac("other", namespace="default")],
        [gpu_node("w0")],
        quotas=[quota],
    )
    assert [r.stage for r in results] == ["scheduled", "admission", "scheduled"]


def test_quota_multiplies_memory_by_card_count():
    assert admission_quota_request(admit(pod("p", ctr(gpu=2, mem=2000, cores=10))).pod) == QuotaUsage(4000, 20)


def test_whole_card_request_passes_admission_and_fails_filter_on_quota():
    quota = GpuQuota("default", gpumem=1000)
    (result,) = plan([pod("whole", ctr(gpu=1))], [gpu_node("w0")], quotas=[quota])
    assert result.stage == "filter"
    assert result.node_reasons == {"w0": "1/1 ResourceQuotaNotFit"}


def test_explicit_zero_quota_blocks():
    (result,) = plan([frac("p")], [gpu_node("w0")], quotas=[GpuQuota("default", gpumem=0)])
    assert result.stage == "admission"


def test_quota_fits():
    quota = GpuQuota("ns", gpumem=1000, gpucores=None)
    assert quota.fits(QuotaUsage(500, 0), 500, 999)
    assert not quota.fits(QuotaUsage(500, 0), 501, 0)
    assert quota.fits(QuotaUsage(500, 0), 1500, 0, memory_factor=2)


# --- messages --------------------------------------------------------------------------------


def test_gen_reason_sorts_the_formatted_strings():
    assert gen_reason({"CardTypeMismatch": 1, "CardInsufficientMemory": 1}, 2) == (
        "1/2 CardInsufficientMemory, 1/2 CardTypeMismatch"
    )
    # As strings, "10/12" sorts before "2/12".
    assert gen_reason({"B": 2, "A": 10}, 12) == "10/12 A, 2/12 B"


def test_parse_reason():
    assert parse_reason("1/2 CardInsufficientMemory, 1/2 CardTypeMismatch") == ["CardInsufficientMemory", "CardTypeMismatch"]
    assert parse_reason("NodeInsufficientDevice") == ["NodeInsufficientDevice"]
    assert parse_reason("node unregistered") == ["node unregistered"]


def test_unschedulable_message_without_nodes():
    assert unschedulable_message({}, 0) == "0/0 nodes are available:"


# --- inventory from gpu-tenancy --------------------------------------------------------------


def test_device_decoding_uses_go_zero_values():
    device = Device.from_register_entry({"id": "GPU-x", "devmem": 100, "type": "NVIDIA L4"})
    assert (device.health, device.count, device.index, device.devcore) == (False, 0, 0, 0)
    with pytest.raises(PlacementInputError, match=r"device.count: a non-negative integer"):
        Device.from_register_entry({"id": "GPU-x", "count": "10"})
    with pytest.raises(PlacementInputError, match="unknown key"):
        Device.from_register_entry({"id": "GPU-x", "memory": 1})
    # What HAMi wrote is read as Go reads it: keys a HAMi build adds are ignored.
    lenient = Device.from_register_entry({"id": "GPU-x", "devmem": 100, "devicepairscore": {}}, strict=False)
    assert lenient.devmem == 100


def test_duplicate_names_are_refused():
    with pytest.raises(PlacementInputError, match="duplicate node name"):
        Cluster([Node("a"), Node("a")])
    entry = {"id": "GPU-x", "health": True}
    with pytest.raises(PlacementInputError, match="duplicate device id"):
        Node.from_register_entries("a", [entry, entry])


def test_nodes_come_from_the_stacks_declared_workers():
    config = load_stack_config(PROJECT_DIR / "Pulumi.dev.yaml")
    for tenant in config.tenants:
        nodes = nodes_for_tenant(tenant)
        assert [node.name for node in nodes] == [worker.name for worker in tenant.workers]
        declared = [card.register_entry() for worker in tenant.workers for card in worker.cards]
        assert [(d.id, d.index, d.devmem, d.type, d.count, d.health) for node in nodes for d in node.devices] == [
            (e["id"], e["index"], e["devmem"], e["type"], e["count"], e["health"]) for e in declared
        ]
        quota = quota_for_tenant(tenant)
        if tenant.quota is None:
            assert quota is None
        else:
            assert quota == GpuQuota(tenant.quota.namespace, tenant.quota.gpumem, tenant.quota.gpucores)


def test_a_tenant_cluster_plans_within_its_inventory():
    config = load_stack_config(PROJECT_DIR / "Pulumi.dev.yaml")
    tenant = next(t for t in config.tenants if t.cards)
    cluster = Cluster.from_tenant(tenant, with_quota=False)
    total = sum(card.model.memory_mib for card in tenant.cards)
    (result,) = cluster.plan([frac("too-big", mem=total + 1)])
    assert result.reasons == ("CardInsufficientMemory",)


def test_a_preferred_node_is_taken_only_where_it_ties():
    cluster = Cluster([gpu_node("a"), gpu_node("b")])
    assert cluster.schedule(frac("p1"), prefer_node="b").node == "b"  # idle nodes tie: HAMi may take either
    # Binpack now scores b above a: a live HAMi cannot have chosen a, and the model does not follow it.
    assert cluster.schedule(frac("p2"), prefer_node="a").node == "b"


# --- boundaries and combinations a mutation review found unpinned -------------------------------


def test_filter_quota_counts_the_pods_running_total_over_its_cards():
    # Each half-card (40960 MiB) fits the 50000 MiB quota; the pod's two together do not.
    quota = GpuQuota("default", gpumem=50000)
    (result,) = plan([pod("two-halves", ctr(gpu=2, pct=50))], [gpu_node("w0", count=2)], quotas=[quota])
    assert result.stage == "filter"
    assert "ResourceQuotaNotFit" in result.reasons


def test_an_init_container_holds_its_peak_not_the_sum_with_the_app():
    node = gpu_node("w0")
    init = (ctr("warmup", mem=60000, cores=10),)
    # The card keeps 81920 - max(60000, 30000) MiB: room for 20000 more (a sum would leave 0).
    results = plan([pod("p", ctr("main", mem=30000, cores=10), init_containers=init), frac("next", mem=20000)], [node])
    assert [r.stage for r in results] == ["scheduled", "scheduled"]


def test_init_containers_on_one_card_take_one_time_slicing_slot():
    node = gpu_node("w0")
    init = (ctr("a", mem=1000, cores=5), ctr("b", mem=1000, cores=5))
    first = pod("p", ctr("main", mem=1000, cores=5), init_containers=init)
    # A card has ten slots: the pod takes one however many init containers used it.
    results = plan([first, *(frac(f"f{i}", mem=1000, cores=5) for i in range(9))], [node])
    assert [r.stage for r in results] == ["scheduled"] * 10
    assert plan([first, *(frac(f"f{i}", mem=1000, cores=5) for i in range(10))], [gpu_node("w0")])[-1].reasons == (
        "CardTimeSlicingExhausted",
    )


def test_a_pod_may_take_exactly_the_namespaces_core_quota():
    quota = GpuQuota("ns", gpucores=100)
    assert quota.fits(QuotaUsage(0, 0), 0, 100)
    assert not quota.fits(QuotaUsage(0, 1), 0, 100)


def test_an_empty_gpu_type_list_is_no_constraint():
    (result,) = plan([frac("p", annotations={USE_GPUTYPE: ""})], [gpu_node("w0")])
    assert result.stage == "scheduled"


def test_memory_in_mib_wins_over_a_percentage():
    (result,) = plan([pod("both", ctr(gpu=1, mem=1000, pct=50))], [gpu_node("w0")])
    assert result.devices[0][0].usedmem == 1000


def test_milli_quantities():
    assert parse_quantity("2000m") == 2
    (result,) = plan([pod("p", ctr(gpu="2000m", mem=1000))], [gpu_node("w0", "L4", 2)])
    assert len(result.devices[0]) == 2


def test_a_default_gpu_num_of_zero_adds_no_gpu():
    assert mutate_container(ctr(mem=20000), SchedulerConfig(default_gpu_num=0)) == (ctr(mem=20000), False)


def test_numa_bind_puts_numa_first_in_any_policy_chain():
    from gpu_tenancy.placement import _sort_chain  # noqa: PLC0415 - the chain itself, which sort_devices applies

    assert _sort_chain("binpack,numa", bind=True) == ["numa", "binpack"]
    assert _sort_chain("binpack,numa", bind=False) == ["binpack", "numa"]
    assert _sort_chain("binpack", bind=True) == ["numa", "binpack"]
