"""Tenant API endpoints: unique-tenant-endpoints, control-plane-exposure and konnectivity-required."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from gpu_tenancy.addressing import AddressPool, inspect_subnets, ipv4_subnet

from . import kinds
from .findings import Finding
from .stack import ControlPlane, ResourceView, StackView, as_int, parse_address
from .values import UNKNOWN

# MetalLB reads a Service's requested address from this annotation (>= 0.13), or the legacy one.
LOAD_BALANCER_IP_ANNOTATIONS = ("metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs")


def _pools(resource: ResourceView) -> list[AddressPool] | Any:
    """The ranges of one IPAddressPool, as MetalLB reads them (CIDR or first-last)."""
    addresses = resource.get("spec", "addresses", default=[])
    if addresses is UNKNOWN:
        return UNKNOWN
    pools = []
    for entry in addresses if isinstance(addresses, list) else []:
        if entry is UNKNOWN:
            return UNKNOWN
        try:
            pools.append(AddressPool.parse(entry))
        except (ValueError, AttributeError):
            continue  # an IPv6 range or a typo: MetalLB's own webhook rejects typos
    return pools


def metallb_pools(stack: StackView, provider_urn: str | None = None) -> list[AddressPool] | Any:
    """Every MetalLB range in the stack (on one cluster when ``provider_urn`` is given); UNKNOWN
    when any of them is not known yet."""
    found: list[AddressPool] = []
    for resource in stack.of_type(kinds.IP_ADDRESS_POOL):
        if provider_urn is not None and resource.provider_urn != provider_urn:
            continue
        pools = _pools(resource)
        if pools is UNKNOWN:
            return UNKNOWN
        found.extend(pools)
    return found


def _ends_with_subnets(script: str) -> bool:
    """Whether what ``script`` prints is a docker network's subnets (``inspect_subnets`` as its last line)."""
    words = script.rstrip().rsplit("\n", 1)[-1].split(" ")
    return len(words) > 3 and " ".join(words) == inspect_subnets(words[3])


def node_networks(stack: StackView) -> list[tuple[str, list[Any]]]:
    """(description, networks) for what is known of the node network.

    MetalLB announces its pool on the node network, so the pool is part of it. In a real run the
    `docker network inspect` command reports kind's subnet and worker containers their addresses;
    SSH workers name their hosts.
    """
    found: list[tuple[str, list[Any]]] = []
    pools = metallb_pools(stack)
    if pools is not UNKNOWN:
        found.extend((f"the MetalLB pool {pool}", list(pool.networks())) for pool in pools)
    for command in stack.of_type(*kinds.COMMAND_TYPES):
        create, stdout = command.get("create"), command.get("stdout")
        # kind's network: its subnets are the last line of the script (after kind_cluster's route check).
        if isinstance(create, str) and _ends_with_subnets(create) and isinstance(stdout, str) and stdout:
            try:
                subnet = ipv4_subnet(stdout)
            except ValueError:
                subnet = None  # an IPv6-only network: tenant CIDRs are IPv4
            if subnet is not None:
                found.append((f"the node network {subnet}", [subnet]))
        host = parse_address(command.get("connection", "host")) if command.type == kinds.REMOTE_COMMAND else None
        if host is not None:
            found.append((f"worker host {host}", [ipaddress.ip_network(host)]))
    for container in stack.of_type(kinds.CONTAINER):
        networks = container.get("networkData", default=[])
        for entry in networks if isinstance(networks, list) else []:
            address = parse_address(entry.get("ipAddress") if isinstance(entry, dict) else None)
            if address is not None:
                found.append((f"worker {container.get('name') or container.name} at {address}", [ipaddress.ip_network(address)]))
    return found


def _shared(planes: dict[Any, list[ControlPlane]], what: str) -> Iterator[Finding]:
    """A finding on each TCP that shares its key (``what``, with ``{}`` for the key) with another."""
    for key, sharing in planes.items():
        for plane in sharing if len(sharing) > 1 else []:
            others = ", ".join(repr(other.tenant) for other in sharing if other is not plane)
            yield Finding(f"tenant {plane.tenant!r} shares {what.format(key)} with tenant {others}", plane.urn)


def check_unique_endpoints(stack: StackView) -> Iterator[Finding]:
    planes = stack.control_planes
    by_address: dict[Any, list[ControlPlane]] = defaultdict(list)
    # Kamaji names a TCP's Secrets, Service and Deployment after the TCP, in its namespace: tenants in one
    # namespace share whoever may read Secrets there (their admin kubeconfigs) and its quotas.
    by_namespace: dict[Any, list[ControlPlane]] = defaultdict(list)
    for plane in planes:
        address = parse_address(plane.effective_address)
        if address is not None:
            by_address[address].append(plane)
        namespace = plane.resource.get("metadata", "namespace")
        if namespace is None or isinstance(namespace, str):
            by_namespace[namespace or "default"].append(plane)
    yield from _shared(by_address, "its address {}")
    yield from _shared(by_namespace, "the management cluster namespace {!r}")

    nodes = node_networks(stack)
    for plane in planes:
        for field, network in plane.cidrs():
            for address, owners in by_address.items():
                if address in network:
                    whose = ", ".join(repr(owner.tenant) for owner in owners)
                    yield Finding(
                        f"tenant {plane.tenant!r}'s {field} contains the address {address} of tenant {whose}", plane.urn
                    )
            for description, node_network in nodes:
                if any(part.version == network.version and part.overlaps(network) for part in node_network):
                    yield Finding(f"tenant {plane.tenant!r}'s {field} overlaps {description}", plane.urn)


def check_exposure(stack: StackView, node_port_min: int, node_port_max: int) -> Iterator[Finding]:
    for plane in stack.control_planes:
        service_type = plane.service_type
        if service_type is UNKNOWN:
            continue
        if service_type == "LoadBalancer":
            yield from _load_balancer(stack, plane)
        elif service_type == "NodePort":
            yield from _node_port(plane, node_port_min, node_port_max)
        else:
            yield Finding(
                f"tenant {plane.tenant!r} exposes its API server as {service_type or 'no Service type'}; workers on other "
                "machines need a LoadBalancer address or a NodePort",
                plane.urn,
            )


def _load_balancer(stack: StackView, plane: ControlPlane) -> Iterator[Finding]:
    pools = metallb_pools(stack, plane.resource.provider_urn)
    address = plane.address
    if pools is UNKNOWN or address is UNKNOWN:
        return  # a preview on a fresh host: the pool comes from kind's network
    if not pools:
        # No MetalLB in this stack (an existing cluster's own load balancer): it assigns the address,
        # which is then known only once the Service exists; nothing to pin against.
        return
    if not address:
        yield Finding(
            f"tenant {plane.tenant!r} uses a LoadBalancer without a fixed address (spec.networkProfile.address); "
            "MetalLB would hand it any free address, and workers join a fixed one",
            plane.urn,
        )
        return
    parsed = parse_address(address)
    if parsed is None or not any(parsed in pool for pool in pools):
        ranges = ", ".join(str(pool) for pool in pools)
        yield Finding(f"tenant {plane.tenant!r}'s address {address} lies outside the MetalLB pool {ranges}", plane.urn)
    annotations = plane.resource.get("spec", "controlPlane", "service", "additionalMetadata", "annotations", default={})
    if isinstance(annotations, dict):
        for key in LOAD_BALANCER_IP_ANNOTATIONS:
            requested = annotations.get(key)
            if isinstance(requested, str) and requested and requested != address:
                yield Finding(f"tenant {plane.tenant!r} asks MetalLB for {requested} ({key}) but advertises {address}", plane.urn)


def _node_port(plane: ControlPlane, low: int, high: int) -> Iterator[Finding]:
    if low > high:
        # JSON Schema cannot relate two properties, so the engine lets this through.
        yield Finding(
            f"tenant {plane.tenant!r} uses a NodePort, but the pack config's nodePortMin {low} is above its "
            f"nodePortMax {high}: no port is in that range; fix control-plane-exposure in the policy config",
            plane.urn,
        )
        return
    address = plane.address
    if address is not UNKNOWN and not address:
        yield Finding(
            f"tenant {plane.tenant!r} uses a NodePort without spec.networkProfile.address; Kamaji cannot tell workers "
            "which node address to join",
            plane.urn,
        )
    # Kamaji uses these ports literally as the Service's NodePorts.
    ports = [("spec.networkProfile.port", plane.resource.get("spec", "networkProfile", "port", default=kinds.DEFAULT_API_PORT))]
    konnectivity = plane.resource.get("spec", "addons", "konnectivity")
    if isinstance(konnectivity, dict):
        ports.append(
            (
                "spec.addons.konnectivity.server.port",
                plane.resource.get("spec", "addons", "konnectivity", "server", "port", default=kinds.DEFAULT_KONNECTIVITY_PORT),
            )
        )
    for field, value in ports:
        if value is UNKNOWN:
            continue
        port = as_int(value)
        if port is None or not low <= port <= high:
            yield Finding(
                f"tenant {plane.tenant!r} uses a NodePort with {field} {port if port is not None else value}, "
                f"outside the NodePort range {low}-{high}",
                plane.urn,
            )


def check_konnectivity(resource: ResourceView) -> Iterator[str]:
    if resource.type != kinds.TENANT_CONTROL_PLANE:
        return
    addons = resource.get("spec", "addons", default={})
    if addons is UNKNOWN:
        return
    konnectivity = addons.get("konnectivity") if isinstance(addons, dict) else None
    if konnectivity is UNKNOWN:
        return
    if not isinstance(konnectivity, dict):
        yield (
            "the TenantControlPlane does not run the Konnectivity addon (spec.addons.konnectivity): the tenant API "
            "server, which runs in the management cluster, could not reach HAMi's webhook, logs or exec on the workers"
        )
