"""tenant-provider-isolation: each tenant's Kubernetes provider reaches that tenant's cluster and no other.

A tenant provider is built from its TCP's admin kubeconfig, so its dependencies lead to that TCP
(``StackView.tenants_of_provider``); what it creates (HAMi, quotas, bootstrap tokens) lands in the
cluster its kubeconfig names. A provider whose dependencies lead to two tenants' control planes,
or whose kubeconfig names another tenant's API endpoint or the management cluster's, would put one
tenant's objects into another cluster while every label still says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import kinds
from .findings import Finding
from .stack import StackView, kubeconfig_server


def check(stack: StackView) -> Iterator[Finding]:
    owners = {endpoint: plane.tenant for plane in stack.control_planes for endpoint in plane.endpoints()}
    for provider in stack.of_type(kinds.KUBERNETES_PROVIDER):
        if provider.urn in stack.management_providers:
            continue
        tenants = stack.tenants_of_provider(provider.urn)
        if len(tenants) > 1:
            yield Finding(
                f"Kubernetes provider {provider.name} is built from the control planes of tenants "
                f"{', '.join(map(repr, sorted(tenants)))}: which cluster it reaches is one of them, by chance",
                provider.urn,
            )
            continue
        server = kubeconfig_server(provider)
        owner = owners.get(server) if server is not None else None
        if tenants and isinstance(owner, str) and owner not in tenants:
            yield Finding(
                f"Kubernetes provider {provider.name} is built from tenant {next(iter(tenants))!r}'s control plane but its "
                f"kubeconfig names {server}, the endpoint of tenant {owner!r}",
                provider.urn,
            )


def describe(tenants: set[str]) -> str:
    """Where a provider whose tenants are ``tenants`` reaches, for messages."""
    if not tenants:
        return "no tenant's cluster (a provider built from no TenantControlPlane)"
    return f"the cluster{'s' if len(tenants) > 1 else ''} of tenant{'s' if len(tenants) > 1 else ''} " + ", ".join(
        map(repr, sorted(tenants))
    )
