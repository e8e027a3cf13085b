"""The stack configuration contract: defaults, and every rejection with its key path."""

from __future__ import annotations

import base64
import ipaddress
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from gpu_tenancy import addressing
from gpu_tenancy.config import ConfigError, StackConfig, address_plan, misspelt_namespaces, secure_placeholder
from tests.conftest import MGMT_KUBECONFIG, SSH_KEY, dev_config

KIND_SUBNETS = "172.18.0.0/16 fc00:f853:ccd:e793::/64"


def problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        StackConfig.load(raw)
    return caught.value.problems


def problem_at(raw: dict[str, Any], path: str) -> str:
    """Every message reported at ``path``, joined."""
    found = problems(raw)
    messages = [message for where, message in found if where == path]
    assert messages, f"expected a problem at {path}, got {found}"
    return " | ".join(messages)


def test_dev_stack_is_valid_and_defaults_come_from_code() -> None:
    config = StackConfig.load(dev_config())
    assert config.management.name == "kamaji"
    # kind v0.33.0's build of the tag, by digest (lab.md: kind re-tags images between releases)
    digest = "sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
    assert config.management.node_image == f"kindest/node:v1.36.4@{digest}"
    assert (config.versions.cert_manager, config.versions.metallb, config.versions.kamaji) == (
        "v1.21.2",
        "v0.16.1",
        "0.0.0+latest",
    )
    assert config.versions.hami == "2.10.0"
    assert config.network.pool is None
    assert [t.name for t in config.tenants] == ["tenant-a", "tenant-b"]
    assert str(config.tenants[0].pod_cidr) == "10.244.0.0/16"
    assert str(config.tenants[0].service_cidr) == "10.96.0.0/16"
    assert [(c.model.model, c.model.memory_mib) for c in config.tenants[0].cards] == [("A100-80GB", 81920)]
    assert [c.model.model for c in config.tenants[1].cards] == ["L4", "L4"]


def test_message_names_the_key_path_and_what_is_allowed() -> None:
    raw = dev_config()
    raw["tenants"][1]["vip"] = "not-an-ip"
    with pytest.raises(ConfigError) as caught:
        StackConfig.load(raw)
    message = str(caught.value)
    assert message.startswith("invalid gpu-tenancy stack configuration:")
    assert "tenants[1].vip: " in message
    assert "IPv4" in message and "'not-an-ip'" in message


def test_duplicate_tenant_names() -> None:
    raw = dev_config()
    raw["tenants"][1]["name"] = "tenant-a"
    raw["tenants"][1]["workers"][0]["name"] = "other-worker"
    assert "already used by tenants[0]" in problem_at(raw, "tenants[1].name")


@pytest.mark.parametrize("name", ["Tenant-A", "1tenant", "tenant_a", "tenant.a", "tenant-", "t" * 64])
def test_tenant_names_must_be_dns_1035_labels(name: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["name"] = name
    assert "DNS-1035" in problem_at(raw, "tenants[0].name")


@pytest.mark.parametrize("version", ["1.36.4", "v1.36", "v1.36.4-rc.1", "latest", "v1.36.x"])
def test_versions_must_be_vxyz(version: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["kubernetesVersion"] = version
    assert "vX.Y.Z" in problem_at(raw, "tenants[0].kubernetesVersion")


@pytest.mark.parametrize("version", ["v1.37.0", "v2.0.0"])
def test_versions_above_the_newest_kamaji_minor_are_rejected(version: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["kubernetesVersion"] = version
    assert "newer than Kamaji supports; use v1.36.x or older" in problem_at(raw, "tenants[0].kubernetesVersion")


def test_older_supported_version_is_accepted() -> None:
    raw = dev_config()
    raw["tenants"][0]["kubernetesVersion"] = "v1.35.7"
    assert StackConfig.load(raw).tenants[0].kubernetes_version == "v1.35.7"


@pytest.mark.parametrize(
    ("mutate", "path", "key"),
    [
        (lambda raw: raw.update(tenant=[]), "", "'tenant'"),
        (lambda raw: raw["tenants"][0].update(vipp="172.18.255.201"), "tenants[0]", "'vipp'"),
        (lambda raw: raw.update(management={"nodeimage": "kindest/node:v1.36.4"}), "management", "'nodeimage'"),
        (lambda raw: raw.update(versions={"certmanager": "v1"}), "versions", "'certmanager'"),
        (lambda raw: raw["tenants"][0]["workers"][0]["gpus"][0].update(memory=1), "tenants[0].workers[0].gpus[0]", "'memory'"),
        (lambda raw: raw["tenants"][0]["quota"].update(gpus=1), "tenants[0].quota", "'gpus'"),
    ],
)
def test_unknown_keys_are_rejected_with_the_allowed_ones(mutate: Any, path: str, key: str) -> None:
    raw = dev_config()
    mutate(raw)
    message = problem_at(raw, path)
    assert f"unknown key {key}" in message
    assert "allowed: " in message


@pytest.mark.parametrize("vip", ["172.18.255.300", "fc00::1", "tenant-a", "172.18.255.0/24"])
def test_vip_must_be_an_ipv4_address(vip: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["vip"] = vip
    assert "IPv4" in problem_at(raw, "tenants[0].vip")


def test_vip_outside_a_pinned_pool() -> None:
    raw = dev_config()
    raw["network"] = {"pool": "172.18.255.200-172.18.255.250"}
    raw["tenants"][1]["vip"] = "172.18.0.5"
    assert "outside the MetalLB pool 172.18.255.200-172.18.255.250" in problem_at(raw, "tenants[1].vip")


@pytest.mark.parametrize("vip", ["172.18.0.5", "172.18.255.199", "172.18.255.251"])
def test_a_vip_no_derived_pool_can_hold_is_refused_before_kind_runs(vip: str) -> None:
    raw = dev_config()
    raw["tenants"][1]["vip"] = vip
    assert problem_at(raw, "tenants[1].vip") == (
        f"{vip} cannot lie in the MetalLB pool derived from the kind network (.200-.250 of its last /24); "
        "pin network.pool around it, or leave vip unset"
    )
    raw["network"] = {"pool": f"{vip}-{ipaddress.IPv4Address(vip) + 1}"}  # a pinned pool holds it, and tenant-a's
    StackConfig.load(raw)
    existing = existing_with_ssh("10.0.0.11")  # no MetalLB: the cluster's own load balancer hands out VIPs
    existing["tenants"][0]["vip"] = vip
    StackConfig.load(existing)


def test_vip_outside_the_pool_derived_from_the_kind_network() -> None:
    raw = dev_config()
    raw["tenants"][1]["vip"] = "172.18.0.250"  # .200-.250 of some /24: the pool is not known before kind has run
    config = StackConfig.load(raw)
    with pytest.raises(ConfigError) as caught:
        address_plan(config, KIND_SUBNETS)
    assert dict(caught.value.problems)["tenants[1].vip"].startswith(
        "172.18.0.250 lies outside the MetalLB pool 172.18.255.200-172.18.255.250"
    )


def test_an_ssh_host_inside_the_pool_derived_from_the_kind_network_is_refused() -> None:
    # With no network.pool the pool exists only once kind has made its network: a host there
    # could be handed out as a tenant's VIP, and the tenant would talk to the worker as its API.
    raw = {
        "tenants": [
            {"name": "t1", "workers": [{"name": "w1", "ssh": {"host": "172.18.255.223", "user": "u", "privateKey": SSH_KEY}}]}
        ]
    }
    config = StackConfig.load(raw)
    with pytest.raises(ConfigError) as caught:
        address_plan(config, KIND_SUBNETS)
    assert dict(caught.value.problems)["tenants[0].workers[0].ssh.host"].startswith(
        "172.18.255.223 lies in the MetalLB pool 172.18.255.200-172.18.255.250 derived from the kind network"
    )
    raw["tenants"][0]["workers"][0]["ssh"]["host"] = "172.18.0.23"
    address_plan(StackConfig.load(raw), KIND_SUBNETS)


def test_vip_used_twice() -> None:
    raw = dev_config()
    raw["tenants"][0]["vip"] = raw["tenants"][1]["vip"] = "172.18.255.201"
    assert "already the VIP of tenants[0]" in problem_at(raw, "tenants[1].vip")


@pytest.mark.parametrize("pool", ["172.18.255.250-172.18.255.200", "172.18.255.0/33", "a-b", "172.18.255.1/24"])
def test_pool_must_be_an_ipv4_range_or_cidr(pool: str) -> None:
    raw = dev_config()
    raw["network"] = {"pool": pool}
    assert problem_at(raw, "network.pool")


def test_pod_and_service_cidrs_must_not_overlap_each_other() -> None:
    raw = dev_config()
    raw["tenants"][0]["serviceCidr"] = "10.244.128.0/20"
    assert "overlaps podCidr 10.244.0.0/16" in problem_at(raw, "tenants[0].serviceCidr")


def test_cidrs_must_not_overlap_a_pinned_pool_on_the_node_network() -> None:
    raw = dev_config()
    raw["network"] = {"pool": "172.18.255.200-172.18.255.250"}
    raw["tenants"][0]["podCidr"] = "172.18.0.0/16"
    assert "overlaps the MetalLB pool" in problem_at(raw, "tenants[0].podCidr")


@pytest.mark.parametrize("key", ["podCidr", "serviceCidr"])
def test_cidrs_must_not_overlap_the_kind_node_network(key: str) -> None:
    raw = dev_config()
    raw["tenants"][1][key] = "172.16.0.0/12"
    config = StackConfig.load(raw)  # the node network is known once kind has created it
    with pytest.raises(ConfigError) as caught:
        address_plan(config, KIND_SUBNETS)
    assert dict(caught.value.problems)[f"tenants[1].{key}"] == "172.16.0.0/12 overlaps the node network 172.18.0.0/16"


def test_cidrs_must_not_contain_another_tenants_vip() -> None:
    raw = dev_config()
    raw["network"] = {"pool": "10.0.0.200-10.0.0.250"}
    raw["tenants"][0]["vip"] = "10.0.0.201"
    raw["tenants"][1]["podCidr"] = "10.0.0.0/24"
    message = problem_at(raw, "tenants[1].podCidr")
    assert "10.0.0.0/24 contains tenant-a's VIP 10.0.0.201" in message
    assert "overlaps the MetalLB pool 10.0.0.200-10.0.0.250" in message


def test_cidr_with_host_bits_is_rejected() -> None:
    raw = dev_config()
    raw["tenants"][0]["podCidr"] = "10.244.0.1/16"
    assert problem_at(raw, "tenants[0].podCidr")


@pytest.mark.parametrize("image", ["kindest/node", "kindest/node:latest", "Kindest/Node:v1"])
def test_management_node_image_must_be_pinned(image: str) -> None:
    assert problem_at({"management": {"nodeImage": image}}, "management.nodeImage")


def test_unknown_gpu_model_lists_the_known_ones() -> None:
    raw = dev_config()
    raw["tenants"][0]["workers"][0]["gpus"] = [{"model": "B200", "count": 1}]
    message = problem_at(raw, "tenants[0].workers[0].gpus[0].model")
    assert "unknown GPU model 'B200'" in message
    for model in ("A100-40GB", "A100-80GB", "H100-80GB", "H200", "L4", "L40S", "T4", "A10"):
        assert model in message


@pytest.mark.parametrize("count", [0, -1])
def test_gpu_count_below_one(count: int) -> None:
    raw = dev_config()
    raw["tenants"][1]["workers"][0]["gpus"][0]["count"] = count
    assert "greater than or equal to 1" in problem_at(raw, "tenants[1].workers[0].gpus[0].count")


def test_worker_names_are_unique_across_the_stack() -> None:
    raw = dev_config()
    raw["tenants"][1]["workers"][0]["name"] = "tenant-a-worker-0"
    assert "already used by tenants[0].workers[0].name" in problem_at(raw, "tenants[1].workers[0].name")


def test_worker_name_must_not_clash_with_the_kind_node() -> None:
    raw = dev_config()
    raw["tenants"][0]["workers"][0]["name"] = "kamaji-control-plane"
    assert "kind management node" in problem_at(raw, "tenants[0].workers[0].name")
    existing = existing_with_ssh("10.0.0.11")  # no kind node to clash with
    existing["tenants"][0]["workers"][0]["name"] = "kamaji-control-plane"
    StackConfig.load(existing)


def test_quota_above_the_tenants_gpu_memory() -> None:
    raw = dev_config()
    raw["tenants"][0]["quota"]["gpumem"] = 81921
    assert "exceeds the tenant's GPU memory (81920 MiB" in problem_at(raw, "tenants[0].quota.gpumem")


def test_quota_above_the_tenants_gpu_cores() -> None:
    raw = dev_config()
    raw["tenants"][1]["quota"] = {"gpumem": 1000, "gpucores": 201}
    assert "(200% = 100 per card)" in problem_at(raw, "tenants[1].quota.gpucores")


@pytest.mark.parametrize(
    ("gpus", "fits"),
    [
        ([{"model": "A100-80GB", "count": 1}, {"model": "A100-40GB", "count": 1}], True),  # 122880 MiB
        ([{"model": "A100-80GB", "count": 1}, {"model": "L40S", "count": 1}], False),  # 127988 MiB
        ([{"model": "H200", "count": 1}], False),  # 143771 MiB
    ],
)
def test_a_mock_node_holds_no_more_gpu_memory_than_the_mock_plugin_can_list(gpus: list[dict], fits: bool) -> None:
    raw = dev_config()
    raw["tenants"][0]["workers"][0]["gpus"] = gpus
    raw["tenants"][0].pop("quota")
    if fits:
        StackConfig.load(raw)
        return
    message = problem_at(raw, "tenants[0].workers[0].gpus")
    assert "at most 123011 MiB fit" in message and "Spread the cards over more workers" in message
    raw["tenants"][0]["gpuMode"] = "nvidia"  # the real plugin lists cards, not MiB
    raw["tenants"][0]["workers"][0]["ssh"] = {"host": "10.0.0.11", "user": "ubuntu", "privateKey": SSH_KEY}
    assert not [p for p in problems_or_none(raw) if p[0] == "tenants[0].workers[0].gpus"]


def problems_or_none(raw: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        StackConfig.load(raw)
    except ConfigError as error:
        return error.problems
    return []


def test_quota_on_a_tenant_without_gpus() -> None:
    raw = dev_config()
    raw["tenants"][1]["workers"][0]["gpus"] = []
    raw["tenants"][1]["quota"] = {"gpumem": 1, "gpucores": 0}
    assert "(0 MiB on its workers)" in problem_at(raw, "tenants[1].quota.gpumem")


def test_quota_values_must_be_non_negative_integers() -> None:
    raw = dev_config()
    raw["tenants"][0]["quota"] = {"gpumem": "lots", "gpucores": -1}
    found = dict(problems(raw))
    assert "valid integer" in found["tenants[0].quota.gpumem"]
    assert "greater than or equal to 0" in found["tenants[0].quota.gpucores"]
    raw["tenants"][0]["quota"] = {"gpumem": -5, "gpucores": 0}
    assert "greater than or equal to 0" in dict(problems(raw))["tenants[0].quota.gpumem"]


def test_several_problems_are_reported_together() -> None:
    raw = dev_config()
    raw["tenants"][0]["vip"] = raw["tenants"][1]["vip"] = "172.18.255.201"
    raw["tenants"][0]["serviceCidr"] = "10.244.0.0/24"
    paths = {path for path, _ in problems(raw)}
    assert {"tenants[1].vip", "tenants[0].serviceCidr"} <= paths


@pytest.mark.parametrize("image", ["localhost:5000/kindest/node:v1.36.4", "registry.example.com/kindest/node@sha256:" + "a" * 64])
def test_management_node_image_from_a_registry_with_a_port_or_digest(image: str) -> None:
    assert StackConfig.load({"management": {"nodeImage": image}}).management.node_image == image


@pytest.mark.parametrize(
    ("key", "version", "refused"),
    [
        ("hami", "2.7.1", True),
        ("hami", "v2.6.0", True),
        ("hami", "2.8.0-rc.1", True),
        ("hami", "2.8.0", False),
        ("hami", "2.10.0", False),
        ("hami", "2.8.1-rc.1", False),
        ("metallb", "0.14.8", True),
        ("metallb", "v0.13.12", True),
        ("metallb", "0.14.9", False),
        ("metallb", "0.16.1", False),
        ("calico", "v3.31.5", True),
        ("calico", "v3.32.0", False),
        ("certManager", "v1.14.5", True),
        ("certManager", "v1.15.0", False),
    ],
)
def test_charts_older_than_what_the_program_relies_on_are_refused(key: str, version: str, refused: bool) -> None:
    # HAMi: the mock device plugin; MetalLB: the metallb.io/loadBalancerIPs annotation the VIPs use;
    # Calico: its CRD chart; cert-manager: crds.enabled.
    why = {
        "hami": "HAMi chart {version} is older than 2.8.0, the first with the mock device plugin",
        "metallb": "MetalLB chart {version} is older than 0.14.9, the first that reads the metallb.io/loadBalancerIPs annotation",
        "calico": "Calico chart {version} is older than 3.32.0, the first with its CRDs as a chart of their own",
        "certManager": "cert-manager chart {version} is older than 1.15.0, the first with the crds.enabled value",
    }
    raw = dev_config()
    raw["versions"] = {key: version}
    found = dict(problems_or_none(raw))
    if refused:
        assert why[key].format(version=version) in found[f"versions.{key}"]
    else:
        assert f"versions.{key}" not in found


@pytest.mark.parametrize("key", ["certManager", "metallb", "kamaji", "kamajiEtcd", "hami", "calico", "konnectivity"])
@pytest.mark.parametrize("version", ["~2.10.0", ">=2.8.0", "2.10", "2.x", "latest", " 2.10.0", ""])
def test_versions_must_be_exact_not_helm_ranges(key: str, version: str) -> None:
    raw = dev_config()
    raw["versions"] = {key: version}
    found = dict(problems_or_none(raw))
    assert "is not an exact version: MAJOR.MINOR.PATCH" in found[f"versions.{key}"]


@pytest.mark.parametrize("version", ["0.0.0+latest", "v1.21.2", "3.0.0-alpha.1+build.7", "v0.34.0"])
def test_exact_versions_with_pre_release_or_build_are_accepted(version: str) -> None:
    raw = dev_config()
    raw["versions"] = {"kamaji": version, "kamajiEtcd": version}
    assert not [path for path, _ in problems_or_none(raw) if path.startswith("versions.")]


# --- values Kubernetes, kind, Helm or Docker would refuse during `pulumi up` -------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("tenants[0].name", "tenant-a\n"),
        ("tenants[0].kubernetesVersion", "v1.36.4\n"),
        ("tenants[0].workers[0].name", "tenant-a-worker-0\n"),
        ("management.name", "kamaji\n"),
        ("management.nodeImage", "kindest/node:v1.36.4\n"),
        ("versions.hami", "2.10.0\n"),
    ],
)
def test_a_trailing_newline_is_refused(path: str, value: str) -> None:
    # `$` in a Python pattern also matches before a final newline, which a value read from a file keeps.
    raw = dev_config()
    if path.startswith("tenants"):
        tenant = raw["tenants"][0]
        if "workers" in path:
            tenant["workers"][0]["name"] = value
        else:
            tenant[path.rsplit(".", 1)[1]] = value
    else:
        section, key = path.split(".")
        raw[section] = {key: value}
    assert problem_at(raw, path)


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public", "kamaji-system", "cert-manager", "metallb-system"])
def test_a_tenant_cannot_take_a_namespace_the_management_cluster_has(name: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["name"] = name
    assert f"{name!r} is a namespace the management cluster has already" in problem_at(raw, "tenants[0].name")


@pytest.mark.parametrize("namespace", ["kube-system", "tigera-operator", "calico-system"])
def test_a_quota_cannot_create_a_namespace_the_tenant_has(namespace: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["quota"]["namespace"] = namespace
    assert "is a namespace every tenant cluster has already" in problem_at(raw, "tenants[0].quota.namespace")


def test_names_that_become_longer_upstream_names_are_bounded() -> None:
    raw = dev_config()
    raw["management"] = {"name": "k" * 50}
    assert "its node " + "k" * 50 + "-control-plane must fit a 63-character label" in problem_at(raw, "management.name")
    raw["management"] = {"name": "k" * 49}
    raw["tenants"][0]["name"] = "t" * 45  # its etcd's hook Job t...t-etcd-etcd-teardown would be 64
    raw["tenants"][0]["dataStore"] = "dedicated"
    raw["tenants"][1]["name"] = "u" * 63  # without a dedicated datastore a full label fits
    found = dict(problems(raw))
    assert "the most a tenant with dataStore dedicated may have" in found["tenants[0].name"]
    assert "tenants[1].name" not in found
    raw["tenants"][0]["name"] = "t" * 44
    assert StackConfig.load(raw)


@pytest.mark.parametrize(
    ("key", "cidr", "expected"),
    [
        ("serviceCidr", "10.96.0.0/29", "is smaller than a /28"),
        ("podCidr", "10.244.0.0/25", "is smaller than a /24"),
        ("podCidr", "169.254.0.0/16", "link-local"),
        ("serviceCidr", "127.0.0.0/16", "loopback"),
        # Ranges that only partly cover one (ipaddress's is_link_local and friends miss them).
        ("podCidr", "169.0.0.0/8", "169.0.0.0/8 takes in the link-local range 169.254.0.0/16"),
        ("podCidr", "224.0.0.0/3", "224.0.0.0/3 takes in the multicast range 224.0.0.0/4"),
        ("serviceCidr", "0.0.0.0/4", "0.0.0.0/4 takes in the unspecified range 0.0.0.0/8"),
        ("serviceCidr", "96.0.0.0/3", "96.0.0.0/3 takes in the loopback range 127.0.0.0/8"),
    ],
)
def test_cidr_sizes_and_ranges_kubernetes_accepts(key: str, cidr: str, expected: str) -> None:
    raw = dev_config()
    raw["tenants"][0][key] = cidr
    message = problem_at(raw, f"tenants[0].{key}")
    assert expected in message
    assert "(got" not in message  # the message names the value already


def test_a_long_value_is_cut_short_in_a_message() -> None:
    raw = dev_config()
    raw["tenants"][0]["kubernetesVersion"] = "v" + "9" * 500
    message = problem_at(raw, "tenants[0].kubernetesVersion")
    assert len(message) < 200 and message.startswith("'v999") and "...' is not a Kubernetes version" in message, message


def test_a_service_range_beyond_a_12_needs_kubernetes_1_34() -> None:
    # Before v1.34 kube-apiserver's legacy allocator took at most 20 bits; the ServiceCIDR one has no such bound.
    raw = dev_config()
    raw["tenants"][0]["serviceCidr"] = "10.64.0.0/10"
    raw["tenants"][0]["podCidr"] = "10.200.0.0/16"
    assert StackConfig.load(raw)
    raw["tenants"][0]["kubernetesVersion"] = "v1.34.3"
    assert StackConfig.load(raw)
    raw["tenants"][0]["kubernetesVersion"] = "v1.33.7"
    assert "10.64.0.0/10 is larger than a /12, the most kube-apiserver v1.33.7 takes" in problem_at(raw, "tenants[0].serviceCidr")
    raw["tenants"][0]["serviceCidr"] = "10.96.0.0/11"  # one bit more than the legacy allocator holds
    assert "larger than a /12" in problem_at(raw, "tenants[0].serviceCidr")
    raw["tenants"][0]["serviceCidr"] = "10.96.0.0/12"  # exactly its 20 bits
    assert StackConfig.load(raw)


@pytest.mark.parametrize(
    ("subnets", "pool"),
    [
        # Dual-stack hosts may list the IPv6 subnet first: the "invalid CIDR" of Kamaji's kind guide.
        ("fc00:f853:ccd:e793::/64 172.18.0.0/16", "172.18.255.200-172.18.255.250"),
        # Docker's default-address-pools with size 24 give kind exactly a /24; its top still holds the pool.
        ("192.168.49.0/24", "192.168.49.200-192.168.49.250"),
    ],
)
def test_the_pool_is_derived_from_the_kind_networks_ipv4_subnet(subnets: str, pool: str) -> None:
    assert str(address_plan(StackConfig.load(dev_config()), subnets).pool) == pool


def test_a_worker_holds_at_most_16_cards_however_they_are_listed() -> None:
    raw = dev_config()
    raw["tenants"][0]["gpuMode"] = "nvidia"
    raw["tenants"][0]["workers"][0]["ssh"] = {"host": "h", "user": "u", "privateKey": SSH_KEY}
    raw["tenants"][0]["workers"][0]["gpus"] = [{"model": "L4", "count": 10}, {"model": "L4", "count": 7}]
    raw["tenants"][0].pop("quota")
    assert "declare 17 cards on one worker; a machine holds at most 16" in problem_at(raw, "tenants[0].workers[0].gpus")
    raw["tenants"][0]["workers"][0]["gpus"] = [{"model": "L4", "count": 16}]
    assert StackConfig.load(raw)


@pytest.mark.parametrize("cidr", ["10.96.0.0/12", "10.96.0.0/28"])
def test_service_cidr_bounds_are_inclusive(cidr: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["serviceCidr"] = cidr
    raw["tenants"][0]["podCidr"] = "10.0.0.0/16"
    raw["tenants"][1]["podCidr"] = "10.0.0.0/16"
    assert StackConfig.load(raw)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("workers[0].gpus[0].count", True),
        ("workers[0].gpus[0].count", "2"),
        ("vip", 2886926290),
        ("podCidr", 184549376),
        ("quota.gpumem", "81920"),
    ],
)
def test_values_are_not_coerced_from_other_types(path: str, value: Any) -> None:
    raw = dev_config()
    tenant = raw["tenants"][0]
    if path.startswith("workers"):
        tenant["workers"][0]["gpus"][0]["count"] = value
    elif path.startswith("quota"):
        tenant["quota"]["gpumem"] = value
    else:
        tenant[path] = value
    assert problem_at(raw, f"tenants[0].{path}")


def test_snake_case_keys_are_unknown_keys() -> None:
    raw = dev_config()
    raw["tenants"][0]["pod_cidr"] = "10.10.0.0/16"
    assert "unknown key 'pod_cidr'" in problem_at(raw, "tenants[0]")


@pytest.mark.parametrize("version", ["v1.36.04", "v01.36.4", "v1.36", "1.36.4"])
def test_kubernetes_versions_are_release_tags(version: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["kubernetesVersion"] = version
    assert problem_at(raw, "tenants[0].kubernetesVersion")


@pytest.mark.parametrize("version", ["0.34.0", "v0.34.0+build.1"])  # '+' is no image tag character
def test_konnectivity_is_an_image_tag_with_v(version: str) -> None:
    raw = dev_config()
    raw["versions"] = {"konnectivity": version}
    assert "Konnectivity images are tagged vX.Y.Z" in problem_at(raw, "versions.konnectivity")


@pytest.mark.parametrize(
    ("tag", "hami", "refused"),
    [
        ("1.0.1", "2.10.0", True),
        ("1.0.0", "2.9.0", True),
        ("1.0.1@sha256:" + "a" * 64, "2.10.0", True),
        ("1.0.1@sha256:" + "a" * 64, "2.9.0-rc.1+x", False),  # a pre-release of 2.9.0 comes before it
        ("1.0.1", "2.8.0", False),
        ("1.0.2", "2.10.0", False),
        ("latest", "2.10.0", False),
    ],
)
def test_a_mock_plugin_that_cannot_read_the_hami_charts_device_config_is_refused(tag: str, hami: str, refused: bool) -> None:
    raw = dev_config()
    raw["versions"] = {"mockDevicePlugin": tag, "hami": hami}
    if refused:
        message = problem_at(raw, "versions.mockDevicePlugin")
        assert f"mockDevicePlugin {tag} cannot read the device config HAMi charts write from 2.9.0 on (hami {hami}" in message
    else:
        assert StackConfig.load(raw).versions.mock_device_plugin == tag


@pytest.mark.parametrize("tag", ["", "latest@sha256:abc", "-latest", "1.0.2\n", "projecthami/mock-device-plugin:1.0.2"])
def test_mock_device_plugin_is_an_image_tag(tag: str) -> None:
    raw = dev_config()
    raw["versions"] = {"mockDevicePlugin": tag}
    assert "is not an image tag" in problem_at(raw, "versions.mockDevicePlugin")


@pytest.mark.parametrize("tag", ["1.0.2", "latest", "latest@sha256:" + "a" * 64])
def test_mock_device_plugin_tags_and_digests(tag: str) -> None:
    raw = dev_config()
    raw["versions"] = {"mockDevicePlugin": tag}
    assert StackConfig.load(raw).versions.mock_device_plugin == tag


def test_a_named_datastore_needs_an_existing_management_cluster() -> None:
    raw = dev_config()
    raw["tenants"][0]["dataStore"] = "gold"
    assert "has only Kamaji's default one: use shared or dedicated" in problem_at(raw, "tenants[0].dataStore")
    raw["tenants"][0]["dataStore"] = "default"  # that one exists, and shared is its name here
    assert problem_at(raw, "tenants[0].dataStore") == "'default' is Kamaji's default DataStore, which shared uses: write shared"


def test_more_tenants_than_the_derived_pool_holds_need_a_pool() -> None:
    raw = {"tenants": [{"name": f"t{i}"} for i in range(52)]}
    assert "52 tenants need more VIPs than the 51 of the pool derived from the kind network" in problem_at(raw, "tenants")
    # 51 tenants fill it when their VIPs are pinned: 51 names hashed into 51 slots always meet.
    pinned = [{"name": f"t{i}", "vip": f"172.18.255.{200 + i}"} for i in range(51)]
    assert StackConfig.load({"tenants": pinned})


@pytest.mark.parametrize(
    ("pool", "address"),
    [
        ("172.18.0.0/16", "172.18.0.0"),
        ("172.18.0.1-172.18.0.9", "172.18.0.1"),
        ("172.18.255.250-172.18.255.255", "172.18.255.255"),  # the broadcast address
    ],
)
def test_a_pinned_pool_must_not_hold_the_kind_networks_own_addresses(pool: str, address: str) -> None:
    raw = dev_config()
    raw["network"] = {"pool": pool}
    for tenant in raw["tenants"]:
        tenant.pop("vip", None)
    config = StackConfig.load(raw)
    with pytest.raises(ConfigError) as caught:
        address_plan(config, KIND_SUBNETS)
    assert f"contains {address}," in " ".join(message for path, message in caught.value.problems if path == "network.pool")


def test_an_error_about_a_secret_does_not_echo_it() -> None:
    # `pulumi config set --secret gpu-tenancy:management "$(cat kubeconfig)"`, without --path.
    raw = {"management": "apiVersion: v1\nclient-key-data: TOPSECRET\n"}
    message = problem_at(raw, "management")
    assert "TOPSECRET" not in message
    worker = {"name": "w", "ssh": {"host": "h", "user": "u", "privateKey": 42}}
    assert "42" not in problem_at({"tenants": [{"name": "a", "workers": [worker]}]}, "tenants[0].workers[0].ssh.privateKey")


@pytest.mark.parametrize("where", ["worker", "tenant", "workers"])
def test_an_object_set_as_one_secret_is_not_echoed_where_an_object_belongs(where: str) -> None:
    # `pulumi config set --secret --path 'gpu-tenancy:tenants[0].workers[0]' "$(cat worker.json)"`:
    # the engine hands the program the JSON as text, and marks the key secret.
    worker = {"name": "w", "ssh": {"host": "h", "user": "u", "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----TOPSECRET"}}
    raw, path, kind = {
        "worker": ({"tenants": [{"name": "a", "workers": [json.dumps(worker)]}]}, "tenants[0].workers[0]", "an object of keys"),
        "tenant": ({"tenants": [json.dumps({"name": "a", "workers": [worker]})]}, "tenants[0]", "an object of keys"),
        "workers": ({"tenants": [{"name": "a", "workers": json.dumps([worker])}]}, "tenants[0].workers", "a list"),
    }[where]
    with pytest.raises(ConfigError) as caught:
        StackConfig.load(raw, secret_keys=["tenants"])
    assert dict(caught.value.problems)[path] == f"must be {kind}, not text"
    assert "(got '" in problem_at(raw, path), "a value the stack does not mark secret is named"


# --- Values that could never deploy, refused before any resource exists (fuzzing review, 2026-12-01) ---


def existing_with_ssh(*hosts: str, **ssh: Any) -> dict[str, Any]:
    """An existing-cluster stack with one SSH worker per host, each in tenant ``a``."""
    workers = [
        {"name": f"w{i}", "ssh": {"host": host, "user": "ubuntu", "privateKey": SSH_KEY, **ssh}} for i, host in enumerate(hosts)
    ]
    return {
        "management": {"mode": "existing", "kubeconfig": MGMT_KUBECONFIG},
        "tenants": [{"name": "a", "workers": workers}],
    }


def _private_key(key: Any, key_format: serialization.PrivateFormat, password: bytes | None = None) -> str:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, key_format, encryption).decode()


def _ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _encrypted_openssh_key() -> str:
    """A key as ``ssh-keygen -N <passphrase>`` writes it (aes256-ctr, bcrypt); making one needs bcrypt,
    refusing one does not (cryptography stops at the missing password)."""
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    blob = _ssh_string(b"ssh-ed25519") + _ssh_string(public.public_bytes_raw())
    body = b"openssh-key-v1\0" + _ssh_string(b"aes256-ctr") + _ssh_string(b"bcrypt")
    body += _ssh_string(_ssh_string(bytes(16)) + (16).to_bytes(4, "big")) + (1).to_bytes(4, "big")
    body += _ssh_string(blob) + _ssh_string(b"SECRET".ljust(32, b"x"))
    lines = [base64.b64encode(body).decode()[i : i + 70] for i in range(0, len(base64.b64encode(body)), 70)]
    return "\n".join(["-----BEGIN OPENSSH PRIVATE KEY-----", *lines, "-----END OPENSSH PRIVATE KEY-----", ""])


def test_ssh_private_keys_in_the_formats_ssh_reads_them_are_accepted() -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    for key in (
        SSH_KEY,
        _private_key(rsa_key, serialization.PrivateFormat.OpenSSH),
        _private_key(rsa_key, serialization.PrivateFormat.TraditionalOpenSSL),  # BEGIN RSA PRIVATE KEY
        _private_key(rsa_key, serialization.PrivateFormat.PKCS8),  # BEGIN PRIVATE KEY
        _private_key(ec_key, serialization.PrivateFormat.TraditionalOpenSSL),  # BEGIN EC PRIVATE KEY
        SSH_KEY.replace("\n", "\r\n"),  # pasted on Windows
    ):
        assert StackConfig.load(existing_with_ssh("10.0.0.11", privateKey=key)).tenants[0].workers[0].ssh is not None


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("~/.ssh/id_ed25519", "is not an SSH private key"),  # a path, which pulumi-command does not read
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpIN7xjIVPkUq2ZWiLzEBVYK1h8a3wZkm5cB8S2lT0p me@host", "is not an SSH private key"),
        (SSH_KEY.replace("\n", "\nSECRETx", 2), "is not an SSH private key"),  # damaged in the pasting
        ("encrypted-openssh", "is protected by a passphrase"),
        ("encrypted-pkcs8", "is protected by a passphrase"),
    ],
)
def test_what_ssh_cannot_read_as_a_private_key_is_refused_before_any_host_is_touched(key: str, expected: str) -> None:
    # pulumi-command parses the key only when it first connects, after the control planes exist.
    if key == "encrypted-openssh":
        key = _encrypted_openssh_key()
    elif key == "encrypted-pkcs8":
        key = _private_key(ed25519.Ed25519PrivateKey.generate(), serialization.PrivateFormat.PKCS8, b"SECRET-passphrase")
    message = problem_at(existing_with_ssh("10.0.0.11", privateKey=key), "tenants[0].workers[0].ssh.privateKey")
    assert expected in message
    assert "SECRET" not in message and "id_ed25519" not in message and "AAAA" not in message


@pytest.mark.parametrize(
    ("kubeconfig", "reason"),
    [
        ("~/.kube/config", "kubeconfig is not a mapping"),  # a path
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "kubeconfig has no current context"),
        (MGMT_KUBECONFIG.replace("current-context: mgmt", "current-context: other"), "kubeconfig has no context 'other'"),
        (
            MGMT_KUBECONFIG.replace('server: "https://10.0.100.2:6443"', "insecure-skip-tls-verify: true"),
            "kubeconfig's cluster has no server",
        ),
        ("apiVersion: v1\nusers: [{name: SECRET-token: x", "it is not YAML"),  # the parser would quote the text
    ],
)
def test_a_management_kubeconfig_that_reaches_no_cluster_is_refused(kubeconfig: str, reason: str) -> None:
    raw = existing_with_ssh("10.0.0.11")
    raw["management"]["kubeconfig"] = kubeconfig
    message = problem_at(raw, "management.kubeconfig")
    assert f"is not a kubeconfig the management cluster can be reached with ({reason}" in message
    assert "give the file's contents, not its path" in message
    assert "SECRET" not in message


def test_values_the_offline_tools_cannot_decrypt_wait_for_pulumi_up() -> None:
    # Pulumi.example-multihost.yaml's secure values reach the offline tools as placeholders.
    placeholder = secure_placeholder("REPLACE-with-pulumi-config-set")
    raw = existing_with_ssh("10.0.0.11", privateKey=placeholder)
    raw["management"]["kubeconfig"] = placeholder
    config = StackConfig.load(raw)
    assert config.management.kubeconfig == placeholder


@pytest.mark.parametrize(("key", "value"), [("name", "lab"), ("nodeImage", "kindest/node:v1.35.7"), ("name", "kamaji")])
def test_kind_cluster_keys_are_refused_with_an_existing_cluster(key: str, value: str) -> None:
    # They would do nothing there; the default value written out counts too, since it was set.
    raw = existing_with_ssh("10.0.0.11")
    raw["management"][key] = value
    expected = "is only used with management.mode kind; an existing cluster has its own"
    assert problem_at(raw, f"management.{key}") == expected
    raw["management"].update(mode="kind")
    del raw["management"]["kubeconfig"]
    assert [where for where, _ in problems_or_none(raw) if where == f"management.{key}"] == []


@pytest.mark.parametrize(("version", "accepted"), [("v1.29.9", False), ("v1.30.0", True), ("v0.0.0", False)])
def test_kubernetes_versions_older_than_kamaji_supports_are_refused(version: str, accepted: bool) -> None:
    raw = {"tenants": [{"name": "a", "kubernetesVersion": version}]}
    if accepted:
        assert StackConfig.load(raw).tenants[0].kubernetes_version == version
    else:
        assert "older than Kamaji supports for tenants; use v1.30.0 or newer" in problem_at(raw, "tenants[0].kubernetesVersion")


@pytest.mark.parametrize("vip", ["127.0.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "169.254.1.1"])
def test_a_vip_must_be_an_address_a_load_balancer_can_announce(vip: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["vip"] = vip
    assert f"{vip} is a loopback, link-local, multicast, unspecified or reserved address" in problem_at(raw, "tenants[0].vip")


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        ("127.0.0.10-127.0.0.50", "loopback, link-local, multicast, unspecified or reserved range"),
        ("224.0.0.10-224.0.0.20", "loopback, link-local, multicast, unspecified or reserved range"),
        ("0.0.0.0-0.0.0.10", "loopback, link-local, multicast, unspecified or reserved range"),
        # A block that only partly covers one (ipaddress's is_loopback misses it).
        ("96.0.0.0-127.255.255.255", "96.0.0.0/3 takes in the loopback range 127.0.0.0/8"),
    ],
)
def test_a_pool_must_hold_addresses_a_load_balancer_can_announce(pool: str, expected: str) -> None:
    raw = dev_config()
    raw["network"] = {"pool": pool}
    assert expected in problem_at(raw, "network.pool")


def test_a_pool_must_stay_above_the_addresses_docker_gives_containers() -> None:
    raw = dev_config()
    raw["network"] = {"pool": "172.18.0.2-172.18.0.3"}  # .2 is kind's node, .3 the first worker
    with pytest.raises(ConfigError) as caught:
        address_plan(StackConfig.load(raw), KIND_SUBNETS)
    assert caught.value.problems == [
        (
            "network.pool",
            "172.18.0.2-172.18.0.3 starts in the lower half of the kind network 172.18.0.0/16, where Docker gives "
            "containers (kind's node, the workers) their addresses from the bottom up; start it at 172.18.128.0 or "
            "above, e.g. 172.18.255.200-172.18.255.250",
        )
    ]
    raw["network"] = {"pool": "172.18.128.0-172.18.128.10"}
    assert address_plan(StackConfig.load(raw), KIND_SUBNETS).pool is not None


@pytest.mark.parametrize(
    ("first", "again", "shown"),
    [
        ("10.0.0.12", "10.0.0.12", "10.0.0.12:22"),
        ("fd00::12", "fd00:0::12", "[fd00:0::12]:22"),  # not the address fd00:0::12:22
        ("gpu-2.lab", "GPU-2.lab.", "GPU-2.lab.:22"),
        # The machine running pulumi up, however it is written (RFC 6761 for the names).
        ("127.0.0.1", "localhost", "localhost:22"),
        ("127.0.1.1", "::1", "[::1]:22"),
        ("Localhost.", "gpu.localhost", "gpu.localhost:22"),
    ],
)
def test_one_ssh_host_is_one_worker(first: str, again: str, shown: str) -> None:
    raw = existing_with_ssh("10.0.0.11", first, again)
    assert problems(raw) == [
        (
            "tenants[0].workers[2].ssh.host",
            f"{shown} is already the host of tenants[0].workers[1]; a machine joins one tenant once",
        )
    ]
    raw["tenants"][0]["workers"][2]["ssh"]["port"] = 2222  # another sshd on the host: a distinct target
    StackConfig.load(raw)


def test_vips_pools_and_tenant_networks_keep_off_the_ssh_hosts() -> None:
    raw = existing_with_ssh("10.0.0.11")
    raw["tenants"][0]["vip"] = "10.0.0.11"
    assert problem_at(raw, "tenants[0].vip") == "10.0.0.11 is the address of tenants[0].workers[0]'s host"
    raw = existing_with_ssh("10.0.0.11")
    raw["network"] = {"pool": "10.0.0.0/24"}
    assert "contains 10.0.0.11, the address of tenants[0].workers[0]'s host" in problem_at(raw, "network.pool")
    raw = existing_with_ssh("10.0.0.11")
    raw["tenants"][0]["serviceCidr"] = "10.0.0.0/24"
    assert problem_at(raw, "tenants[0].serviceCidr") == "10.0.0.0/24 contains 10.0.0.11, the host of tenants[0].workers[0]"
    # Another tenant's host too, as the mandatory unique-tenant-endpoints policy holds.
    raw = existing_with_ssh("10.0.0.11")
    raw["tenants"].append({"name": "b", "podCidr": "10.0.0.0/16"})
    assert problem_at(raw, "tenants[1].podCidr") == "10.0.0.0/16 contains 10.0.0.11, the host of tenants[0].workers[0]"


@pytest.mark.parametrize(
    ("ssh", "key", "expected"),
    [
        (
            {"host": "10.0.0.11:2222"},
            "host",
            "neither an IP address nor a host name (labels of at most 63 characters); give the port",
        ),
        ({"host": "ubuntu@gpu-1"}, "host", "neither an IP address nor a host name"),
        ({"host": "gpu host"}, "host", "neither an IP address nor a host name"),
        ({"host": f"{'g' * 64}.lab"}, "host", "neither an IP address nor a host name (labels of at most 63 characters)"),
        # The C resolver reads leading zeros as octal and fills in missing parts; Go's takes a name.
        (
            {"host": "10.0.0.011"},
            "host",
            "'10.0.0.011' is 10.0.0.9 to the C library's resolver and a host name to Go's; write 10.0.0.9",
        ),
        ({"host": "10.1"}, "host", "write 10.0.0.1"),
        ({"host": "0x0a.0.0.1"}, "host", "write 10.0.0.1"),
        ({"host": "10.0.0.256"}, "host", "'10.0.0.256' is not an IPv4 address: four decimal parts of 0-255"),
        ({"host": "::ffff:10.0.0.1"}, "host", "'::ffff:10.0.0.1' is the IPv4 address 10.0.0.1 written as IPv6; write 10.0.0.1"),
        *(({"host": address}, "host", f"{address!r} is an unspecified or multicast address") for address in ("::", "ff02::1")),
        ({"host": "0.0.0.0"}, "host", "'0.0.0.0' is an unspecified or multicast address"),
        ({"host": "0.1.2.3"}, "host", "'0.1.2.3' is in the unspecified range 0.0.0.0/8, not a machine's address"),
        ({"host": "224.0.0.1"}, "host", "'224.0.0.1' is an unspecified or multicast address"),
        ({"host": "255.255.255.255"}, "host", "'255.255.255.255' is in the reserved range 240.0.0.0/4"),
        ({"host": "240.0.0.1"}, "host", "'240.0.0.1' is in the reserved range 240.0.0.0/4"),
        ({"user": "root user"}, "user", "is not a login name"),
        ({"hostKey": "not a key"}, "hostKey", "is not a public key as known_hosts holds it"),
        ({"hostKey": "ssh-ed25519 A"}, "hostKey", "is not a public key as known_hosts holds it"),  # not base64
        # An ed25519 key under another type's name: ssh would never match it.
        (
            {"hostKey": "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"},
            "hostKey",
            "then the base64 key of that type",
        ),
    ],
)
def test_ssh_targets_are_checked(ssh: dict[str, str], key: str, expected: str) -> None:
    raw = existing_with_ssh("10.0.0.11", **{k: v for k, v in ssh.items() if k != "host"})
    if "host" in ssh:
        raw["tenants"][0]["workers"][0]["ssh"]["host"] = ssh["host"]
    message = problem_at(raw, f"tenants[0].workers[0].ssh.{key}")
    assert expected in message
    if key == "hostKey":
        assert "not a key" not in message


@pytest.mark.parametrize(
    "host_key",
    [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
        "10.0.0.11 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",  # a known_hosts line
        "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= root@gpu-1",
    ],
)
def test_host_keys_in_known_hosts_and_authorized_keys_form_are_accepted(host_key: str) -> None:
    assert StackConfig.load(existing_with_ssh("gpu-1.example.com", hostKey=host_key)).tenants[0].workers[0].ssh is not None


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "fd00::1", "169.254.0.5"])
def test_loopback_and_other_unicast_ssh_hosts_are_machines(host: str) -> None:
    # Loopback: pulumi run on the GPU host itself.
    assert StackConfig.load(existing_with_ssh(host)).tenants[0].workers[0].ssh.host == host


def test_a_tenant_cannot_use_another_tenants_dedicated_store() -> None:
    raw = existing_with_ssh("10.0.0.11")
    raw["tenants"] = [{"name": "a", "dataStore": "dedicated"}, {"name": "b", "dataStore": "a-etcd"}]
    assert problem_at(raw, "tenants[1].dataStore").startswith("'a-etcd' is the dedicated DataStore of tenants[0]")
    raw["tenants"][1]["dataStore"] = "team-etcd"  # one this stack does not manage
    StackConfig.load(raw)


@pytest.mark.parametrize("namespace", ["gpu-tennancy", "gpu-tenacny", "gpu-tenncy", "gpu_Tenancy", "gputenancy"])
def test_a_namespace_a_typo_away_from_ours_is_reported(namespace: str) -> None:
    assert misspelt_namespaces([f"{namespace}:network", "kubernetes:context", "aws:region", "gpu-tenancy:tenants"]) == [
        (f"{namespace}:network", "is not in the gpu-tenancy namespace; did you mean gpu-tenancy:network?")
    ]


def test_sibling_projects_namespaces_are_not_typos_of_ours() -> None:
    # They may share a Pulumi ESC environment with this stack; refusing them would block every up.
    keys = ["gpu-tenancy-ops:x", "tenancy:x", "gpu-tenant:x", "gpu-tenancies:x", "my-gpu-tenancy:x", "kubernetes:context"]
    assert misspelt_namespaces(keys) == []


@pytest.mark.parametrize(
    ("user", "host"), [("jdoe@corp.example.com", "gpu_host_1.lab"), ("Administrator", "fe80::1"), ("u", "gpu-1.")]
)
def test_directory_logins_and_resolvable_host_names_are_accepted(user: str, host: str) -> None:
    config = StackConfig.load(existing_with_ssh(host, user=user))
    assert config.tenants[0].workers[0].ssh.user == user


def test_a_pinned_pool_must_lie_in_the_kind_network_where_metallb_answers_arp() -> None:
    raw = dev_config()
    raw["network"] = {"pool": "10.0.100.10-10.0.100.50"}
    with pytest.raises(ConfigError) as caught:
        address_plan(StackConfig.load(raw), KIND_SUBNETS)
    assert caught.value.problems == [
        ("network.pool", "10.0.100.10-10.0.100.50 is not inside the kind network 172.18.0.0/16, where MetalLB answers ARP")
    ]


def test_a_tenant_whose_name_hashes_to_another_tenants_vip_is_refused_not_moved() -> None:
    pool = addressing.AddressPool.parse("172.18.255.200-172.18.255.203")
    # Slots in this pool of four: t0 -> 0, t1 -> 2, t2 -> 0.
    assert [addressing._slot(name, len(pool)) for name in ("t0", "t1", "t2")] == [0, 2, 0]
    with pytest.raises(addressing.VipClashError) as caught:
        addressing.assign_vips(pool, [(name, None) for name in ("t0", "t1", "t2")])
    # t2 meets t0 at offset 0. The old rule moved it to the next free address, 1; the address
    # offered is the first that no tenant derives nor got from the old rule: 3.
    assert caught.value.clashes == [addressing.VipClash(2, 0, False, 0, 1, 3)]
    # A pinned VIP holds its address even when listed after the tenant that derives it.
    clashes = addressing.vip_clashes(len(pool), [("t0", None), ("pinned", 0)])
    assert clashes == [addressing.VipClash(0, 1, True, 0, 1, 2)]
    # Two clashes are never offered one address: in a pool of eight, t15 and t18 both meet t0 at
    # 4, and the old rule gave them 5 and 6.
    both = addressing.vip_clashes(8, [("t0", None), ("t15", None), ("t18", None)])
    assert [(clash.tenant, clash.moved_to, clash.free) for clash in both] == [(1, 5, 7), (2, 6, 0)]


def test_a_vip_is_its_names_address_in_the_pool_or_refused() -> None:
    pool = addressing.AddressPool.parse("172.18.255.200-172.18.255.250")
    names = [f"team-{i}" for i in range(40)]
    alone = {name: addressing.assign_vips(pool, [(name, None)])[name] for name in names}
    refused = 0
    for start in range(0, 40, 2):
        group = names[start : start + 8]
        for order in (group, group[::-1]):
            try:
                vips = addressing.assign_vips(pool, [(name, None) for name in order])
            except addressing.VipClashError:
                refused += 1
                continue
            assert vips == {name: alone[name] for name in group}
    # Both kinds of group were met: never moving a tenant means refusing some.
    assert 0 < refused < 40


def test_clashing_vips_are_refused_with_where_to_pin_them() -> None:
    # team-42 hashes to tenant-a's address (.230) in a pool of 51; listed first, it would have
    # taken that address under the old rule and moved tenant-a on to .231.
    raw = dev_config()
    raw["tenants"].insert(0, {"name": "team-42"})
    expected = (
        "'tenant-a' and tenants[0] ('team-42') both derive the VIP {0}230 from their names; two tenants cannot share one. "
        "Pin vip on whichever is not deployed yet, to a free address such as {0}232. If both are deployed, pin 'tenant-a' "
        "where it runs, its stack output tenants.tenant-a.endpoint (earlier releases moved it on: to {0}231 if no tenant "
        "was added before it since)"
    )
    assert problems(raw) == [("tenants[1].vip", expected.format("."))]
    raw["network"] = {"pool": "172.18.255.200-172.18.255.250"}
    assert problems(raw) == [("tenants[1].vip", expected.format("172.18.255."))]
    # A pinned VIP is held against a tenant deriving it, wherever the two are listed.
    raw["tenants"][0]["vip"] = "172.18.255.219"  # tenant-b's derived address
    assert problems(raw) == [
        (
            "tenants[2].vip",
            "'tenant-b' derives the VIP 172.18.255.219 from its name, which tenants[0] ('team-42') pins; two tenants "
            "cannot share one. Pin vip on whichever is not deployed yet, to a free address such as 172.18.255.221. "
            "If both are deployed, pin 'tenant-b' where it runs, its stack output tenants.tenant-b.endpoint (earlier "
            "releases moved it on: to 172.18.255.220 if no tenant was added before it since)",
        )
    ]
    raw["tenants"][0]["vip"] = "172.18.255.231"
    assert StackConfig.load(raw).known_vips()["tenant-a"] == ipaddress.IPv4Address("172.18.255.230")
    # Before kind has made its network, a pinned VIP lies in the derived pool by its last octet.
    del raw["network"]
    raw["tenants"][0]["vip"] = "172.18.255.219"
    assert problem_at(raw, "tenants[2].vip").startswith("'tenant-b' derives the VIP .219 from its name, which tenants[0]")


def test_a_pinned_pool_smaller_than_the_tenants_is_refused() -> None:
    raw = dev_config()
    raw["network"] = {"pool": "172.18.255.230-172.18.255.230"}
    assert problem_at(raw, "network.pool") == (
        "172.18.255.230-172.18.255.230 holds 1 address, too few for a VIP of each of the 2 tenants"
    )


@pytest.mark.parametrize(
    ("raw", "path", "expected"),
    [
        ({"tenants": ["x"]}, "tenants[0]", "must be an object of keys, not text (got 'x')"),
        ({"tenants": {"name": "a"}}, "tenants", "must be a list, not an object"),
        (
            {"tenants": [{"name": "a", "workers": [{"name": "w", "ssh": "gpu-1"}]}]},
            "tenants[0].workers[0].ssh",
            "must be an object of keys, not text",
        ),
        # A whole key given as text may be a kubeconfig set without --path: never echoed.
        ({"management": "apiVersion: v1"}, "management", "must be an object of keys, not text"),
        (
            {"tenants": [{"name": "a", "podCidr": "10.244.0.0"}]},
            "tenants[0].podCidr",
            "'10.244.0.0' has no prefix length; write a CIDR such as 10.244.0.0/16",
        ),
        # An unquoted version is a YAML number: 2.10 arrives as 2.1.
        (
            {"versions": {"hami": 2.1}},
            "versions.hami",
            "must be text, not the number 2.1: quote it as you mean it (YAML reads an unquoted 2.10 as the number 2.1 "
            "and 1.30 as 1.3)",
        ),
        ({"tenants": [{"name": True}]}, "tenants[0].name", "must be text, not a boolean; quote it"),
        ({"network": {"pool": ["172.18.255.200"]}}, "network.pool", "must be text, not a list"),
        (
            {"tenants": [{"name": "a", "podCidr": "10.244.1.0/16"}]},
            "tenants[0].podCidr",
            "'10.244.1.0/16' has host bits set: the network is 10.244.0.0/16",
        ),
        (
            {"tenants": [{"name": "a", "serviceCidr": "10.96.0.0/33"}]},
            "tenants[0].serviceCidr",
            "'10.96.0.0/33' is not an IPv4 CIDR: '33' is not a valid netmask",
        ),
        (
            {"network": {"pool": "  "}},
            "network.pool",
            "'  ' is not an IPv4 range or CIDR; use e.g. 172.18.255.200-172.18.255.250",
        ),
    ],
)
def test_shape_errors_speak_yaml_not_python(raw: dict[str, Any], path: str, expected: str) -> None:
    assert problem_at(raw, path) == expected


@pytest.mark.parametrize("user", ["a\x01b", "a\x00b", "a\x7fb", "a b", "a:b"])
def test_an_ssh_login_with_control_characters_is_refused(user: str) -> None:
    raw = dev_config()
    raw["tenants"][0]["workers"][0]["ssh"] = {"host": "10.0.0.11", "user": user, "privateKey": SSH_KEY}
    assert "is not a login name: no spaces, control characters or ':'" in problem_at(raw, "tenants[0].workers[0].ssh.user")


@pytest.mark.parametrize(
    ("key", "value"),
    [("kubernetesVersion", "v1.3\u0666.4"), ("versions.hami", "2.1\u0660.0"), ("versions.calico", "v3.3\u0662.2")],
)
def test_versions_are_ascii_digits_only(key: str, value: str) -> None:
    # \d takes any script's digits; an image tag v1.3٦.4 exists nowhere.
    raw = dev_config()
    if key.startswith("versions."):
        raw["versions"] = {key.split(".", 1)[1]: value}
        path = key
    else:
        raw["tenants"][0][key] = value
        path = f"tenants[0].{key}"
    assert problem_at(raw, path)


def test_a_pool_overlaps_a_network_that_covers_any_part_of_it() -> None:
    # 200-250 is several CIDR blocks; a /28 at its top overlaps only the last of them.
    pool = addressing.AddressPool.parse("172.18.255.200-172.18.255.250")
    assert pool.overlaps(ipaddress.IPv4Network("172.18.255.240/28"))
    assert not pool.overlaps(ipaddress.IPv4Network("172.18.255.0/25"))


def test_a_pool_of_one_address() -> None:
    pool = addressing.AddressPool.parse("172.18.255.210-172.18.255.210")
    assert len(pool) == 1 and str(pool) == "172.18.255.210-172.18.255.210"


def test_a_pool_may_start_at_the_first_address_above_dockers_half() -> None:
    raw = dev_config()
    raw["network"] = {"pool": "172.18.127.255-172.18.128.10"}
    with pytest.raises(ConfigError) as caught:
        address_plan(StackConfig.load(raw), KIND_SUBNETS)
    ((key, problem),) = caught.value.problems
    assert key == "network.pool" and "starts in the lower half of the kind network" in problem
    raw["network"] = {"pool": "172.18.128.0-172.18.128.10"}
    assert address_plan(StackConfig.load(raw), KIND_SUBNETS).pool == addressing.AddressPool.parse("172.18.128.0-172.18.128.10")


@pytest.mark.parametrize(("field", "key"), [("hostKey", "hostKey"), ("host", "host"), ("port", "port")])
def test_a_value_the_offline_tools_cannot_decrypt_is_named_as_such_not_as_malformed(field: str, key: str) -> None:
    # `pulumi config set --secret --path '...ssh.hostKey'`: pulumi up decrypts it; offline, its
    # placeholder is no host key, host name or port, and saying so would send the user astray.
    raw = existing_with_ssh("10.0.0.11", **{field: secure_placeholder("AAAABBBBCCCCDDDD")})
    message = problem_at(raw, f"tenants[0].workers[0].ssh.{key}")
    assert message == (
        "is encrypted (secure:), which the offline tools cannot decrypt to check it (pulumi up can); "
        "to check it offline, set it without --secret"
    )


def test_a_docker_workers_name_is_one_docker_takes_for_a_container() -> None:
    raw = {"tenants": [{"name": "a", "workers": [{"name": "w"}]}]}
    assert problem_at(raw, "tenants[0].workers[0].name") == (
        "'w' is one character; a docker worker's name is its container's, which Docker requires to have two or more"
    )
    raw["tenants"][0]["workers"][0]["name"] = "w1"
    assert StackConfig.load(raw).tenants[0].workers[0].name == "w1"
    # An SSH host's worker name is only its node's.
    assert StackConfig.load(existing_with_ssh("10.0.0.11")).tenants[0].workers[0].name == "w0"
    ssh = existing_with_ssh("10.0.0.11")
    ssh["tenants"][0]["workers"][0]["name"] = "w"
    assert StackConfig.load(ssh).tenants[0].workers[0].name == "w"
