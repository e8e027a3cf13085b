"""A read-only view of the resources a rule looks at, built from CrossGuard's arguments.

Resource rules get a ``ResourceView`` of ``ResourceValidationArgs`` (props = inputs); stack rules a
``StackView`` of ``StackValidationArgs`` (props = outputs in a real run, which for commands, custom
resources and releases echo the inputs under the same keys). Both carry plain props with
``UNKNOWN`` for what a preview cannot know (see values.py).

A stack rule may also see no props at all: in a preview, a resource whose provider's own inputs
are unknown (a fresh stack's management and tenant providers, built from kubeconfigs that do not
exist yet) gets no outputs from the engine (pulumi/pulumi pkg/resource/plugin/provider_plugin.go,
``Create`` and ``Read`` when ``!pcfg.known``), and AnalyzeStack hands rules those outputs
(step_generator.go, ``AnalyzeResources``). Such a resource is unknown as a whole.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import yaml
from pulumi_policy import PolicyProviderResource, PolicyResource, ResourceValidationArgs

from gpu_tenancy import kubeconfig

from . import kinds
from .values import UNKNOWN, dig, labels_of, plain


@dataclass(frozen=True)
class ProviderRef:
    """The provider a resource is managed through (the engine passes default providers too)."""

    urn: str
    name: str
    type: str

    @property
    def is_default(self) -> bool:
        # The engine names default providers `default` or `default_<version>` (e.g. default_4_34_2).
        return self.name == "default" or self.name.startswith("default_")

    @classmethod
    def of(cls, provider: PolicyProviderResource | None) -> ProviderRef | None:
        if provider is None:
            return None
        return cls(provider.urn, provider.name, provider.resource_type)


@dataclass(frozen=True)
class ResourceView:
    urn: str
    type: str
    name: str
    props: dict[str, Any] | Any  # UNKNOWN when the engine gave a stack rule no props at all
    provider: ProviderRef | None = None
    dependencies: tuple[str, ...] = ()
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of_args(cls, args: ResourceValidationArgs) -> ResourceView:
        return cls(args.urn, args.resource_type, args.name, plain(args.props), ProviderRef.of(args.provider))

    @classmethod
    def of_resource(cls, resource: PolicyResource) -> ResourceView:
        props = plain(resource.props)
        return cls(
            resource.urn,
            resource.resource_type,
            resource.name,
            props if props else UNKNOWN,
            ProviderRef.of(resource.provider),
            tuple(dependency.urn for dependency in resource.dependencies),
            {key: tuple(item.urn for item in items) for key, items in (resource.property_dependencies or {}).items()},
        )

    def get(self, *path: str | int, default: Any = None) -> Any:
        return dig(self.props, *path, default=default)

    @property
    def provider_urn(self) -> str | None:
        return self.provider.urn if self.provider else None

    @property
    def labels(self) -> dict[str, Any] | Any:
        """Kubernetes metadata.labels or a Docker container's labels."""
        if self.type == kinds.CONTAINER:
            return labels_of(self.get("labels"))
        return labels_of(self.get("metadata", "labels"))

    @property
    def environment(self) -> dict[str, Any] | Any:
        """A command's environment; a remote command's, which sshd would refuse, is its first trigger."""
        env = self.get("environment", default={})
        if self.type == kinds.REMOTE_COMMAND and not env:
            recorded = self.get("triggers", 0)
            env = recorded if recorded is UNKNOWN or isinstance(recorded, dict) else {}
        return env if env is UNKNOWN or isinstance(env, dict) else {}


@dataclass(frozen=True)
class ControlPlane:
    """One TenantControlPlane, with what the rules ask of it."""

    resource: ResourceView

    @property
    def urn(self) -> str:
        return self.resource.urn

    @property
    def tenant(self) -> str | Any:
        label = dig(self.resource.labels, kinds.TENANT_LABEL)
        if isinstance(label, str) and label:
            return label
        return self.resource.get("metadata", "name")

    @property
    def address(self) -> str | Any:
        """``spec.networkProfile.address``; None when unset, UNKNOWN in a preview before the VIP exists."""
        return self.resource.get("spec", "networkProfile", "address")

    @property
    def effective_address(self) -> str | Any:
        """The address workers reach: the spec's, or (a load balancer that assigned one) the status's host."""
        if self.address is UNKNOWN or self.address:
            return self.address
        status = self.resource.get("status", "controlPlaneEndpoint")
        if not isinstance(status, str) or not status:
            return None
        host = status.removeprefix("https://").rstrip("/").rpartition(":")[0]
        return host.removeprefix("[").removesuffix("]") or None

    @property
    def port(self) -> int | Any:
        port = self.resource.get("spec", "networkProfile", "port", default=kinds.DEFAULT_API_PORT)
        return as_int(port) if port is not UNKNOWN else UNKNOWN

    @property
    def service_type(self) -> str | Any:
        return self.resource.get("spec", "controlPlane", "service", "serviceType")

    def endpoints(self) -> set[str]:
        """The ``host:port`` forms workers may join at: the spec's address and, in a real run, the status."""
        found = set()
        if isinstance(self.address, str) and self.address and isinstance(self.port, int):
            found.add(f"{self.address}:{self.port}")
        status = self.resource.get("status", "controlPlaneEndpoint")
        if isinstance(status, str) and status:
            found.add(status.removeprefix("https://").rstrip("/"))
        return found

    def cidrs(self) -> list[tuple[str, Any]]:
        """(field, network) for every pod and service CIDR that is known and parses.

        Kamaji's CRD keeps the deprecated singular ``podCidr``/``serviceCidr`` (defaulted even when
        the plural lists are set); they are the TCP's networks only where the plural list is absent.
        """
        found = []
        for plural, singular in (("podCidrs", "podCidr"), ("serviceCidrs", "serviceCidr")):
            field, values = plural, self.resource.get("spec", "networkProfile", plural, default=None)
            if values is None:
                single = self.resource.get("spec", "networkProfile", singular, default=None)
                field, values = singular, [] if single is None or single is UNKNOWN else [single]
            for value in values if isinstance(values, list) else []:
                network = parse_network(value)
                if network is not None:
                    found.append((f"{field} {value}", network))
        return found


def as_int(value: Any) -> int | None:
    """Integers arrive as floats from the engine (protobuf numbers) and as strings from some inputs."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def parse_address(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_address(value.strip())
    except ValueError:
        return None


def parse_network(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        return None


class StackView:
    """Every resource of the stack, indexed by URN, with the cross-resource questions rules ask."""

    def __init__(self, resources: Iterable[ResourceView]) -> None:
        self.resources = list(resources)
        self.by_urn = {resource.urn: resource for resource in self.resources}

    @classmethod
    def of_resources(cls, resources: Iterable[PolicyResource]) -> StackView:
        return cls(ResourceView.of_resource(resource) for resource in resources)

    def of_type(self, *types: str) -> Iterator[ResourceView]:
        return (resource for resource in self.resources if resource.type in types)

    def dependencies(self, resource: ResourceView, *types: str) -> list[ResourceView]:
        """Direct dependencies of ``resource`` (all of them, or those of ``types``)."""
        found = [self.by_urn[urn] for urn in resource.dependencies if urn in self.by_urn]
        return [item for item in found if not types or item.type in types]

    @cached_property
    def control_planes(self) -> list[ControlPlane]:
        return [ControlPlane(resource) for resource in self.of_type(kinds.TENANT_CONTROL_PLANE)]

    @cached_property
    def tenants(self) -> set[str]:
        return {plane.tenant for plane in self.control_planes if isinstance(plane.tenant, str)}

    @cached_property
    def endpoint_owners(self) -> dict[str, str]:
        """``host:port`` -> the tenant whose API server answers there (``ControlPlane.endpoints``)."""
        planes = [plane for plane in self.control_planes if isinstance(plane.tenant, str)]
        return {endpoint: plane.tenant for plane in planes for endpoint in plane.endpoints()}

    @cached_property
    def all_tenants_known(self) -> bool:
        """Whether every TenantControlPlane's tenant can be read: only then is a missing one missing."""
        return all(isinstance(plane.tenant, str) for plane in self.control_planes)

    @cached_property
    def management_providers(self) -> set[str]:
        """Providers that reach the management cluster: whatever creates the TCPs, their DataStores,
        MetalLB's pools or the Kamaji charts, identified by what they manage, not by name; and any
        other provider built from the same cluster: its kubeconfig names the same server, or its
        dependencies reach what theirs do (the kind cluster) without passing through a TCP."""
        urns = set()
        for resource in self.resources:
            if resource.provider_urn is None:
                continue
            if resource.type in (kinds.TENANT_CONTROL_PLANE, kinds.DATA_STORE, kinds.IP_ADDRESS_POOL, kinds.L2_ADVERTISEMENT) or (
                resource.type in kinds.HELM_TYPES and kinds.chart_name(resource.get("chart")) in kinds.MANAGEMENT_CHARTS
            ):
                urns.add(resource.provider_urn)
        managers = [self.by_urn[urn] for urn in urns if urn in self.by_urn]
        servers = {server for provider in managers if (server := kubeconfig_server(provider)) is not None}
        origins = {urn for provider in managers for urn in self.reached(provider)}
        for provider in self.of_type(kinds.KUBERNETES_PROVIDER):
            if provider.urn not in urns and (kubeconfig_server(provider) in servers or origins & self.reached(provider)):
                urns.add(provider.urn)
        return urns

    def reached(self, resource: ResourceView) -> set[str]:
        """What ``resource`` depends on, directly or not, up to and including TCPs (whose own
        dependencies are the management cluster's)."""
        seen: set[str] = set()
        todo = list(resource.dependencies)
        while todo:
            urn = todo.pop()
            if urn in seen or urn not in self.by_urn:
                continue
            seen.add(urn)
            if self.by_urn[urn].type != kinds.TENANT_CONTROL_PLANE:
                todo.extend(self.by_urn[urn].dependencies)
        return seen

    def reaches_unknown_tenant(self, provider_urn: str | None) -> bool:
        """Whether ``provider_urn`` is built from a TCP whose tenant a preview cannot read yet: of
        such a provider the stack cannot say whose it is, which is no finding yet."""
        if provider_urn is None or provider_urn in self.management_providers or provider_urn not in self.by_urn:
            return False
        return any(
            self.by_urn[urn].type == kinds.TENANT_CONTROL_PLANE and not isinstance(ControlPlane(self.by_urn[urn]).tenant, str)
            for urn in self.reached(self.by_urn[provider_urn])
        )

    def tenants_of_provider(self, provider_urn: str | None) -> set[str]:
        """The tenant(s) whose cluster ``provider_urn`` reaches: none for the management cluster's,
        a default provider or one built from anything but a TCP; more than one is itself wrong.

        A tenant provider is built from its TCP's admin kubeconfig, so its dependencies lead to that
        TCP and to no other. What the provider creates is not asked: a tenant label on a resource
        is what the rules check, not evidence of where the resource goes.
        """
        if provider_urn is None or provider_urn in self.management_providers or provider_urn not in self.by_urn:
            return set()
        found = set()
        for urn in self.reached(self.by_urn[provider_urn]):
            if self.by_urn[urn].type == kinds.TENANT_CONTROL_PLANE:
                tenant = ControlPlane(self.by_urn[urn]).tenant
                if isinstance(tenant, str):
                    found.add(tenant)
        return found


def kubeconfig_server(provider: ResourceView) -> str | None:
    """The ``host:port`` of the cluster a provider's kubeconfig and context name, when known and parsed.

    The provider's own ``context`` and ``cluster`` inputs win over the file's, as in pulumi-kubernetes.
    """
    text, context, cluster = provider.get("kubeconfig"), provider.get("context"), provider.get("cluster")
    if not isinstance(text, str) or not text or UNKNOWN in (context, cluster):
        return None  # unknown, or overridden by what a preview cannot know yet
    try:
        server = kubeconfig.server(
            text, context if isinstance(context, str) else None, cluster if isinstance(cluster, str) else None
        )
    except (ValueError, yaml.YAMLError):
        return None
    return server.removeprefix("https://").removeprefix("http://").rstrip("/")
