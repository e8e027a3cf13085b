"""The policies of the gpu-tenancy pack: names, levels, config schemas, and the validators CrossGuard calls.

Nothing here starts a server: ``PolicyPack(...)`` never returns, so only policies/__main__.py
builds it. Tests and ``tools.policycheck`` call these same policy objects' ``validate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpu_tenancy import kubeadm
from gpu_tenancy.versions import NODE_IMAGE_REPOSITORY

from . import containers, datastores, endpoints, gpus, isolation, pinning, providers, tokens
from .findings import Finding
from .stack import ResourceView, StackView

PACK_NAME: Final = "gpu-tenancy-isolation"
# Every policy is mandatory unless it says otherwise; the pack's config can change any level.
PACK_ENFORCEMENT: Final = EnforcementLevel.MANDATORY

# Config properties per policy, as JSON Schema with defaults. The engine applies the defaults
# before the pack sees its config; `settings` applies them again so direct calls (tests, the
# offline check with no config) behave the same.
CONFIG_SCHEMAS: Final[dict[str, dict[str, dict[str, Any]]]] = {
    "control-plane-exposure": {
        "nodePortMin": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 30000},
        "nodePortMax": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 32767},
    },
    "privileged-containers-are-nodes": {
        "nodeImageRepositories": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "default": [NODE_IMAGE_REPOSITORY],
        },
    },
    "shared-datastore": {
        "defaultDataStore": {"type": "string", "minLength": 1, "default": "default"},
    },
    "bootstrap-token-hygiene": {
        "allowedGroups": {
            "type": "array",
            "items": {"type": "string", "pattern": "^system:bootstrappers:"},
            "default": [kubeadm.NODE_BOOTSTRAP_GROUP],
        },
    },
}


def settings(policy: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``policy``'s config with the schema's defaults under what was given."""
    values = {key: schema["default"] for key, schema in CONFIG_SCHEMAS.get(policy, {}).items()}
    values.update({key: value for key, value in (config or {}).items() if key != "enforcementLevel"})
    return values


def _schema(policy: str) -> PolicyConfigSchema | None:
    properties = CONFIG_SCHEMAS.get(policy)
    return PolicyConfigSchema(properties) if properties else None


def _resource_policy(
    name: str,
    description: str,
    rule: Callable[[ResourceView, dict[str, Any]], Iterable[str]],
    level: EnforcementLevel | None = None,
    severity: Severity = Severity.HIGH,
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        options = settings(name, args.get_config())
        for message in rule(ResourceView.of_args(args), options):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name, description, validate, enforcement_level=level, config_schema=_schema(name), severity=severity
    )


def _stack_policy(
    name: str,
    description: str,
    rule: Callable[[StackView, dict[str, Any]], Iterable[Finding]],
    level: EnforcementLevel | None = None,
    severity: Severity = Severity.HIGH,
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        options = settings(name, args.get_config())
        for finding in rule(StackView.of_resources(args.resources), options):
            report_violation(finding.message, finding.urn)

    return StackValidationPolicy(
        name, description, validate, enforcement_level=level, config_schema=_schema(name), severity=severity
    )


POLICIES: Final[list[Policy]] = [
    _stack_policy(
        "tenant-worker-isolation",
        "Every worker joins exactly one tenant, at that tenant's endpoint, and its labels agree.",
        lambda stack, _: isolation.check(stack),
        severity=Severity.CRITICAL,
    ),
    _stack_policy(
        "tenant-provider-isolation",
        "Each tenant's Kubernetes provider reaches that tenant's cluster: one TenantControlPlane, its endpoint.",
        lambda stack, _: providers.check(stack),
        severity=Severity.CRITICAL,
    ),
    _stack_policy(
        "unique-tenant-endpoints",
        "No two TenantControlPlanes share an address or namespace; tenant CIDRs hold no tenant's VIP and miss the node network.",
        lambda stack, _: endpoints.check_unique_endpoints(stack),
        severity=Severity.CRITICAL,
    ),
    _resource_policy(
        "konnectivity-required",
        "Every TenantControlPlane runs the Konnectivity addon.",
        lambda resource, _: endpoints.check_konnectivity(resource),
    ),
    _resource_policy(
        "node-restriction",
        "Every TenantControlPlane enables the NodeRestriction admission plugin.",
        lambda resource, _: isolation.check_node_restriction(resource),
    ),
    _stack_policy(
        "control-plane-exposure",
        "Tenant API servers use a LoadBalancer at a fixed address in the MetalLB pool, or an in-range NodePort with an address.",
        lambda stack, options: endpoints.check_exposure(stack, int(options["nodePortMin"]), int(options["nodePortMax"])),
    ),
    _resource_policy(
        "pinned-versions",
        "Every Helm release has an exact chart version and every image an explicit tag or digest, never 'latest'.",
        lambda resource, _: pinning.check(resource),
        severity=Severity.MEDIUM,
    ),
    _resource_policy(
        "pinned-versions-exceptions",
        "Acknowledged moving versions (Kamaji's 0.0.0+latest chart, the mock device plugin's latest tag) are reported, "
        "not blocked.",
        lambda resource, _: pinning.check_exceptions(resource),
        level=EnforcementLevel.ADVISORY,
        severity=Severity.LOW,
    ),
    _stack_policy(
        "privileged-containers-are-nodes",
        "Privileged (or root-equivalent) containers run only Kubernetes node images; none mounts the engine's socket.",
        lambda stack, options: containers.check(stack, options["nodeImageRepositories"]),
        severity=Severity.CRITICAL,
    ),
    _stack_policy(
        "hami-on-tenants-only",
        "HAMi is never installed through the management cluster's provider.",
        lambda stack, _: gpus.check_hami_placement(stack),
    ),
    _stack_policy(
        "gpu-quota-within-inventory",
        "A tenant's GPU quota does not exceed the cards registered on its workers; every registration is well-formed.",
        lambda stack, _: gpus.check_quota(stack),
    ),
    _stack_policy(
        "shared-datastore",
        "Tenants sharing Kamaji's default DataStore share one etcd.",
        lambda stack, options: datastores.check(stack, options["defaultDataStore"]),
        level=EnforcementLevel.ADVISORY,
        severity=Severity.LOW,
    ),
    _resource_policy(
        "bootstrap-token-hygiene",
        "Bootstrap token Secrets carry an expiration and only bootstrap usages and groups.",
        lambda resource, options: tokens.check(resource, options["allowedGroups"]),
    ),
]

POLICY_NAMES: Final = tuple(policy.name for policy in POLICIES)


def default_level(policy: Policy) -> EnforcementLevel:
    """The level a policy runs at with no pack config, as the analyzer computes it."""
    return policy.enforcement_level if policy.enforcement_level is not None else PACK_ENFORCEMENT
