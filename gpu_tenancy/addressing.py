"""Address planning: the MetalLB pool, tenant VIPs, and which ranges must not overlap."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

IPv4 = ipaddress.IPv4Address
Network = ipaddress.IPv4Network
# What every spelling of the machine running `pulumi up` is to host_identity.
LOCALHOST = "localhost"


@dataclass(frozen=True)
class AddressPool:
    """An inclusive IPv4 range, the form MetalLB's IPAddressPool takes (``a.b.c.d-e.f.g.h``)."""

    first: IPv4
    last: IPv4

    @classmethod
    def parse(cls, text: str) -> AddressPool:
        """Accept ``first-last`` or a CIDR; raise ValueError with a message fit for a user."""
        given, text = text, text.strip()
        if "-" in text:
            first_text, _, last_text = text.partition("-")
            try:
                first = ipaddress.IPv4Address(first_text.strip())
                last = ipaddress.IPv4Address(last_text.strip())
            except ValueError:
                raise ValueError(f"{text!r} is not an IPv4 range; use first-last, e.g. 172.18.255.200-172.18.255.250") from None
            if first > last:
                raise ValueError(f"{text!r} starts after it ends")
            return cls(first, last)
        try:
            network = ipaddress.IPv4Network(text, strict=True)
        except ValueError:
            raise ValueError(f"{given!r} is not an IPv4 range or CIDR; use e.g. 172.18.255.200-172.18.255.250") from None
        return cls(network.network_address, network.broadcast_address)

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    def __contains__(self, address: object) -> bool:
        return isinstance(address, IPv4) and self.first <= address <= self.last

    def __len__(self) -> int:
        return int(self.last) - int(self.first) + 1

    def address(self, offset: int) -> IPv4:
        return IPv4(int(self.first) + offset)

    def networks(self) -> Iterator[Network]:
        return ipaddress.summarize_address_range(self.first, self.last)

    def overlaps(self, network: Network) -> bool:
        return any(part.overlaps(network) for part in self.networks())


def host_identity(host: str) -> str:
    """One spelling per machine for an SSH host: ``fd00:0::1`` is ``fd00::1``, ``::ffff:10.0.0.1`` is
    ``10.0.0.1``, ``GPU-1.lab.`` is ``gpu-1.lab``, and every loopback address and ``localhost`` name
    (RFC 6761: its subdomains too) is ``localhost``, the machine running ``pulumi up``.

    Config validation and the policy pack both ask whether two workers name one machine.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower().removesuffix(".")
        return LOCALHOST if name == LOCALHOST or name.endswith(f".{LOCALHOST}") else name
    # ::ffff:10.0.0.1 reaches 10.0.0.1.
    address = getattr(address, "ipv4_mapped", None) or address
    return LOCALHOST if address.is_loopback else address.compressed


def join_host_port(host: str, port: int | str) -> str:
    """``host:port`` as Go's ``net.JoinHostPort`` writes it: ``[fd00::1]:22``, never the address ``fd00::1:22``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_endpoint(endpoint: str) -> tuple[str, str]:
    """``host:port`` as Kamaji reports ``controlPlaneEndpoint`` (Go's ``net.JoinHostPort``: an
    IPv6 address comes in brackets) into the bare host and the port."""
    host, separator, port = endpoint.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ValueError(f"{endpoint!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def inspect_subnets(network: str) -> str:
    """The command that prints ``network``'s IPAM subnets on one line, as ``ipv4_subnet`` reads them.

    The policy pack finds kind's subnet by a command whose script ends with this line.
    """
    return f"docker network inspect {network} --format '{{{{range .IPAM.Config}}}}{{{{.Subnet}}}} {{{{end}}}}'"


def ipv4_subnet(subnets: str) -> Network:
    """Pick the IPv4 subnet out of ``docker network inspect``'s IPAM subnets.

    kind's network is dual-stack on hosts with IPv6, so the IPAM config lists an IPv6 subnet
    too; taking the first entry blindly is the "invalid CIDR" failure Kamaji's kind guide warns
    about (clastix/kamaji:docs/content/getting-started/kamaji-kind.md, troubleshooting).
    """
    for token in subnets.replace(",", " ").split():
        try:
            network = ipaddress.ip_network(token, strict=False)
        except ValueError:
            continue
        if isinstance(network, Network):
            return network
    raise ValueError(f"no IPv4 subnet in the kind network's IPAM config: {subnets.strip()!r}")


# .200-.250 of a /24: where a derived pool starts in it, and how many tenants it holds.
DERIVED_POOL_START = 200
DERIVED_POOL_SIZE = 51


def reserved_addresses(subnet: Network) -> dict[IPv4, str]:
    """Addresses of ``subnet`` that MetalLB must never announce: Docker's gateway is the host."""
    return {
        subnet.network_address: "the network address",
        subnet.network_address + 1: "Docker's gateway (the host)",
        subnet.broadcast_address: "the broadcast address",
    }


def first_free_of_containers(subnet: Network) -> IPv4:
    """The lowest address a pool on ``subnet`` may use: the middle of the subnet.

    Docker's IPAM hands out container addresses from the bottom of the subnet up, so kind's node
    takes .2 and every worker the next; a pool in the upper half never meets them.
    """
    return subnet.network_address + subnet.num_addresses // 2


def pool_for_subnet(subnet: Network) -> AddressPool:
    """The pool Kamaji's kind guide uses: .200-.250 of the subnet's last /24.

    Docker hands out container addresses from the bottom of the subnet, so the top /24 stays free
    for MetalLB on any subnet of /24 or larger.
    """
    if subnet.prefixlen > 24:
        raise ValueError(f"the kind network {subnet} is smaller than a /24; pin gpu-tenancy:network.pool")
    last_24 = int(subnet.broadcast_address) & ~0xFF
    return AddressPool(IPv4(last_24 + DERIVED_POOL_START), IPv4(last_24 + DERIVED_POOL_START + DERIVED_POOL_SIZE - 1))


def may_lie_in_a_derived_pool(address: IPv4) -> bool:
    """Whether some kind network's derived pool could hold ``address``: its last octet is .200-.250.

    Known before kind creates its network, so a VIP no derived pool can hold is refused up front.
    """
    return DERIVED_POOL_START <= int(address) & 0xFF < DERIVED_POOL_START + DERIVED_POOL_SIZE


def _slot(name: str, size: int) -> int:
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") % size


@dataclass(frozen=True)
class VipClash:
    """Two tenants that would share one VIP: ``tenant`` derives the address ``holder`` has.

    Positions are indexes into the tenants as given (config order), addresses offsets into the
    pool. ``moved_to`` is where gpu-tenancy's old rule (the next free address after the slot, in
    config order) puts ``tenant`` with the tenants as listed now: where it runs if both were deployed
    with this list, not if tenants were added before it since. None if no address was free.
    """

    tenant: int
    holder: int
    holder_pinned: bool
    offset: int
    moved_to: int | None
    free: int | None  # the first address after the slot that no tenant has or may have had, nor another clash is offered


def _next_free(slot: int, size: int, taken: set[int | None]) -> int | None:
    """The first offset from ``slot`` on, wrapping around the pool, that is not ``taken``."""
    return next(((slot + step) % size for step in range(size) if (slot + step) % size not in taken), None)


def _moved(size: int, slots: list[int], pinned: set[int]) -> list[int | None]:
    """Where each slot ended up when clashes took the next free address, in order (the old rule)."""
    taken: set[int | None] = set(pinned)
    result: list[int | None] = []
    for slot in slots:
        free = _next_free(slot, size, taken)
        if free is not None:
            taken.add(free)
        result.append(free)
    return result


def vip_clashes(size: int, tenants: list[tuple[str, int | None]]) -> list[VipClash]:
    """Tenants whose name-derived VIP another tenant already has, pinned or derived earlier.

    ``tenants`` are names with their pinned offset into a pool of ``size`` addresses, or None.
    Pinned offsets shared between tenants are the caller's to report; they are not clashes here.
    """
    holders: dict[int, int] = {}
    for index, (_, pinned) in enumerate(tenants):
        if pinned is not None:
            holders.setdefault(pinned, index)
    unpinned = [index for index, (_, pinned) in enumerate(tenants) if pinned is None]
    slots = [_slot(tenants[index][0], size) for index in unpinned]
    moved = _moved(size, slots, set(holders))
    # Never offered as free: a tenant's address, nor one the old rule may have given a deployed tenant.
    used: set[int | None] = set(holders) | set(slots) | set(moved)
    clashes = []
    for index, slot, old in zip(unpinned, slots, moved, strict=True):
        holder = holders.setdefault(slot, index)
        if holder != index:
            free = _next_free(slot, size, used)
            used.add(free)  # each clash is offered an address of its own
            clashes.append(VipClash(index, holder, tenants[holder][1] is not None, slot, old, free))
    return clashes


class VipClashError(ValueError):
    def __init__(self, pool: AddressPool, clashes: list[VipClash]) -> None:
        super().__init__(f"tenants share VIPs of the pool {pool}")
        self.clashes = clashes


def assign_vips(pool: AddressPool, tenants: Iterable[tuple[str, IPv4 | None]]) -> dict[str, IPv4]:
    """Give every tenant a VIP: its pinned one, else the address its name hashes to in the pool.

    A VIP depends only on the tenant's own name and the pool, so adding, removing or reordering
    other tenants never moves it. Two tenants whose addresses meet are refused (VipClashError):
    taking the next free address instead would move a deployed tenant whenever a new one hashing
    to its address is listed before it. Pinned VIPs must lie in the pool.
    """
    tenants = list(tenants)
    offsets = [(name, None if vip is None else int(vip) - int(pool.first)) for name, vip in tenants]
    clashes = vip_clashes(len(pool), offsets)
    if clashes:
        raise VipClashError(pool, clashes)
    return {name: vip if vip is not None else pool.address(_slot(name, len(pool))) for name, vip in tenants}
