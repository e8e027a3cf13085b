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
    for provider in stack.of_type(kinds.KUBERNETES_PROVIDER):
        if provider.urn in stack.management_providers:
            continue
        tenants = stack.tenants_of_provider(provider.urn)
        if len(tenants) > 1:
            yield Finding(
                f"Kubernetes provider {provider.name} is built from {built_from(tenants)}: which cluster it reaches "
                "is one of them, by chance",
                provider.urn,
            )
            continue
        server = kubeconfig_server(provider)
        owner = stack.endpoint_owners.get(server) if server is not None else None
        if tenants and isinstance(owner, str) and owner not in tenants:
            yield Finding(
                f"Kubernetes provider {provider.name} is built from {built_from(tenants)} but its kubeconfig names "
                f"{server}, the endpoint of tenant {owner!r}",
                provider.urn,
            )


def built_from(tenants: set[str]) -> str:
    """What a provider whose tenants are ``tenants`` is built from, for messages."""
    if not tenants:
        return "no TenantControlPlane (which cluster it reaches, the stack cannot tell)"
    if len(tenants) == 1:
        return f"tenant {next(iter(tenants))!r}'s control plane"
    return f"the control planes of tenants {', '.join(map(repr, sorted(tenants)))}"
