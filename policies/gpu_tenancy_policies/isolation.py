"""tenant-worker-isolation: every worker joins exactly one tenant, at that tenant's endpoint, and its labels agree.
node-restriction: every tenant API server limits each kubelet to its own Node.

A worker is any command (local ``docker exec`` or remote SSH) whose environment carries
``JOIN_ENDPOINT``; its tenant is the explicit ``GPU_TENANCY_TENANT``. The machine it runs on is the
Docker container it depends on (which its ``docker exec`` must name), or the SSH host of its connection.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from gpu_tenancy import addressing, kubeadm

from . import kinds, providers
from .findings import Finding
from .stack import ResourceView, StackView, as_int
from .values import UNKNOWN, dig


def _machine(stack: StackView, command: ResourceView) -> tuple[str | None, list[ResourceView]]:
    """(a key naming the machine, the worker containers the command runs in)."""
    containers = stack.dependencies(command, kinds.CONTAINER)
    if len(containers) == 1:
        return containers[0].urn, containers
    if command.type == kinds.REMOTE_COMMAND:
        host = command.get("connection", "host")
        if isinstance(host, str) and host:
            port = command.get("connection", "port", default=22)
            # The engine hands numbers over as floats: 22.0 is port 22.
            number = as_int(port) if port is not UNKNOWN else 22
            where = addressing.join_host_port(addressing.host_identity(host), number if number is not None else port)
            return f"ssh://{where}", containers
    return None, containers


# Options that take a value as the next word (docker/cli: cli/command/container/exec.go, and the
# docker command's own global options in cli/flags/options.go).
_EXEC_VALUE_OPTIONS = frozenset({"-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir", "--detach-keys"})
_GLOBAL_VALUE_OPTIONS = frozenset(
    {"-c", "--context", "-H", "--host", "--config", "-l", "--log-level", "--tlscacert", "--tlscert", "--tlskey"}
)


def _skip_options(words: list[str], index: int, valued: frozenset[str]) -> int:
    """The index of the first word after the options at ``index`` (pflag's rules: ``--x=v``, ``-iu root``, ``-uroot``)."""
    while index < len(words) and words[index].startswith("-"):
        word = words[index]
        index += 1
        if word == "--":
            break
        if word.startswith("--") or len(word) == 2:
            index += 1 if word in valued else 0
            continue
        for position, letter in enumerate(word[1:], start=1):
            if f"-{letter}" in valued:  # the rest of the word is its value, else the next word is
                index += 1 if position == len(word) - 1 else 0
                break
    return index


# What points the docker CLI at another engine than the command's DOCKER_HOST (the one the
# container was made on): a name there may be another engine's container.
_ENGINE_VARIABLES = ("DOCKER_HOST=", "DOCKER_CONTEXT=")
_ENGINE_OPTIONS = frozenset({"-H", "--host", "-c", "--context"})


def _names_an_engine(option: str) -> bool:
    if option.startswith("--"):
        return option.partition("=")[0] in _ENGINE_OPTIONS
    return any(f"-{letter}" in _ENGINE_OPTIONS for letter in option[1:2])


def exec_target(create: str) -> str | None:
    """The container ``[VAR=value ...] docker [OPTIONS] [container] exec [OPTIONS] CONTAINER COMMAND``
    runs in, on the engine its environment names; None for any other command, or one that names
    another engine (``-H``, ``--context``, ``DOCKER_HOST=``)."""
    try:
        words = shlex.split(create)
    except ValueError:
        return None
    index = 0
    while index < len(words) and "=" in words[index] and not words[index].startswith("-"):
        if words[index].startswith(_ENGINE_VARIABLES):
            return None
        index += 1  # the shell's variable assignments before the command
    if index >= len(words) or words[index] != "docker":
        return None
    start, index = index + 1, _skip_options(words, index + 1, _GLOBAL_VALUE_OPTIONS)
    if any(word.startswith("-") and _names_an_engine(word) for word in words[start:index]):
        return None
    if words[index : index + 1] == ["container"]:
        index += 1
    if words[index : index + 1] != ["exec"]:
        return None
    index = _skip_options(words, index + 1, _EXEC_VALUE_OPTIONS)
    return words[index] if index < len(words) else None


def _runs_in(command: ResourceView, containers: list[ResourceView], what: str) -> Iterator[Finding]:
    """A local command on a worker container runs there: its ``docker exec`` names that container.

    The rules learn a command's machine from its dependency; what it runs in is its own ``create``.
    """
    if command.type != kinds.LOCAL_COMMAND or len(containers) != 1:
        return
    create, name = command.get("create"), containers[0].get("name")
    if not isinstance(create, str) or not isinstance(name, str):
        return  # unknown in a preview
    target = exec_target(create)
    if target is None:
        yield Finding(
            f"{what} {command.name} waits for worker {name} but does not run `docker exec` in it on the engine its "
            "DOCKER_HOST names",
            command.urn,
        )
    elif target != name:
        yield Finding(f"{what} {command.name} waits for worker {name} but runs in container {target!r}", command.urn)


def _node_name(container: ResourceView) -> Any:
    hostname = container.get("hostname")
    return hostname if hostname else container.get("name")


def check(stack: StackView) -> Iterator[Finding]:
    planes = {plane.tenant: plane for plane in stack.control_planes if isinstance(plane.tenant, str)}
    joins_by_machine: dict[str, list[tuple[ResourceView, Any]]] = defaultdict(list)
    machine_tenants: dict[str, set[str]] = defaultdict(set)

    for command in stack.of_type(*kinds.COMMAND_TYPES):
        env = command.environment
        if env is UNKNOWN or kinds.ENV_JOIN_ENDPOINT not in env:
            continue
        tenant = env.get(kinds.ENV_TENANT)
        machine, containers = _machine(stack, command)
        if len(containers) > 1:
            names = ", ".join(sorted(str(c.get("name") or c.name) for c in containers))
            yield Finding(
                f"join {command.name} runs on {len(containers)} machines ({names}); a join belongs to one worker", command.urn
            )
        yield from _runs_in(command, containers, "join")
        if machine is not None:
            joins_by_machine[machine].append((command, tenant))
        if tenant is UNKNOWN:
            continue
        if not isinstance(tenant, str) or not tenant:
            yield Finding(f"join {command.name} names no tenant ({kinds.ENV_TENANT} is not set)", command.urn)
            continue
        if machine is not None:
            machine_tenants[machine].add(tenant)
        plane = planes.get(tenant)
        if plane is not None:
            yield from _endpoint(command, env.get(kinds.ENV_JOIN_ENDPOINT), tenant, plane.endpoints(), stack.endpoint_owners)
        elif stack.all_tenants_known:
            # (Otherwise a preview in which some control plane is still unknown as a whole.)
            yield Finding(
                f"join {command.name} is for tenant {tenant!r}, which has no TenantControlPlane in this stack", command.urn
            )
            continue
        yield from _tokens(stack, command, tenant)
        for container in containers:
            yield from _container_labels(container, tenant, f"joins tenant {tenant!r} (through {command.name})")

    for machine, joins in joins_by_machine.items():
        if len(joins) > 1:
            tenants = sorted(machine_tenants[machine])
            names = ", ".join(sorted(join.name for join, _ in joins))
            where = stack.by_urn[machine].name if machine in stack.by_urn else machine
            detail = f"tenants {', '.join(map(repr, tenants))}" if len(tenants) > 1 else "more than once"
            for join, _ in joins:
                yield Finding(f"worker {where} joins {detail} ({names}); a worker belongs to exactly one tenant", join.urn)

    yield from _unjoined_workers(stack, joins_by_machine)
    yield from _registrations(stack, joins_by_machine)


def _endpoint(command: ResourceView, endpoint: Any, tenant: str, expected: set[str], owner: dict[str, str]) -> Iterator[Finding]:
    if endpoint is UNKNOWN or not expected:
        return  # a preview before the VIP exists, or a load balancer that assigns it later
    if not isinstance(endpoint, str) or not endpoint:
        yield Finding(f"join {command.name} for tenant {tenant!r} has no {kinds.ENV_JOIN_ENDPOINT}", command.urn)
        return
    endpoint = endpoint.removeprefix("https://").rstrip("/")
    if endpoint in expected:
        return
    other = owner.get(endpoint)
    if other is not None:
        yield Finding(
            f"join {command.name} is for tenant {tenant!r} but joins {endpoint}, the endpoint of tenant {other!r}", command.urn
        )
    else:
        want = " or ".join(sorted(expected))
        yield Finding(f"join {command.name} joins {endpoint}, not tenant {tenant!r}'s endpoint {want}", command.urn)


def _tokens(stack: StackView, command: ResourceView, tenant: str) -> Iterator[Finding]:
    """The bootstrap token a join waits for must live in the same tenant: label and cluster."""
    for secret in stack.dependencies(command, kinds.SECRET):
        if secret.get("type") != kubeadm.BOOTSTRAP_SECRET_TYPE:
            continue
        label = dig(secret.labels, kinds.TENANT_LABEL)
        if isinstance(label, str) and label != tenant:
            yield Finding(
                f"join {command.name} for tenant {tenant!r} uses a bootstrap token labelled for tenant {label!r}", command.urn
            )
        clusters = stack.tenants_of_provider(secret.provider_urn)
        if secret.provider_urn in stack.management_providers:
            yield Finding(
                f"join {command.name} for tenant {tenant!r} uses a bootstrap token created in the management cluster", command.urn
            )
        elif clusters != {tenant} and not (not clusters and stack.reaches_unknown_tenant(secret.provider_urn)):
            yield Finding(
                f"join {command.name} for tenant {tenant!r} uses a bootstrap token created through a provider built from "
                f"{providers.built_from(clusters)}",
                command.urn,
            )


def _container_labels(container: ResourceView, tenant: str, why: str) -> Iterator[Finding]:
    labels = container.labels
    if labels is UNKNOWN:
        return
    label = labels.get(kinds.TENANT_LABEL)
    name = container.get("name") or container.name
    if label is UNKNOWN:
        return
    if not label:
        yield Finding(f"worker {name} {why} but carries no {kinds.TENANT_LABEL} label", container.urn)
    elif label != tenant:
        yield Finding(f"worker {name} {why} but is labelled {kinds.TENANT_LABEL}={label}", container.urn)
    role = labels.get(kinds.ROLE_LABEL)
    if role not in (UNKNOWN, kinds.WORKER_ROLE):
        yield Finding(f"worker {name} {why} but is labelled {kinds.ROLE_LABEL}={role}", container.urn)


def _unjoined_workers(stack: StackView, joins: dict[str, list[Any]]) -> Iterator[Finding]:
    for container in stack.of_type(kinds.CONTAINER):
        labels = container.labels
        if labels is UNKNOWN or labels.get(kinds.ROLE_LABEL) != kinds.WORKER_ROLE or container.urn in joins:
            continue
        name = container.get("name") or container.name
        yield Finding(f"worker {name} joins no tenant: no join command runs on it", container.urn)


def _registrations(stack: StackView, joins: dict[str, list[tuple[ResourceView, Any]]]) -> Iterator[Finding]:
    """GPU registrations on a worker speak for the worker's tenant and node, not another's."""
    for command in stack.of_type(*kinds.COMMAND_TYPES):
        env = command.environment
        if env is UNKNOWN or kinds.ENV_REGISTER not in env or kinds.ENV_JOIN_ENDPOINT in env:
            continue
        machine, containers = _machine(stack, command)
        yield from _runs_in(command, containers, "GPU registration")
        joined = {tenant for _, tenant in joins.get(machine or "", []) if isinstance(tenant, str)}
        tenant = env.get(kinds.ENV_TENANT)
        if isinstance(tenant, str) and joined and tenant not in joined:
            yield Finding(
                f"GPU registration {command.name} is for tenant {tenant!r} on a worker that joins "
                f"{', '.join(map(repr, sorted(joined)))}",
                command.urn,
            )
        node = env.get(kinds.ENV_NODE)
        for container in containers:
            expected = _node_name(container)
            if isinstance(node, str) and isinstance(expected, str) and node != expected:
                yield Finding(f"GPU registration {command.name} registers node {node!r} from worker {expected!r}", command.urn)


NODE_RESTRICTION = "NodeRestriction"


def check_node_restriction(resource: ResourceView) -> Iterator[str]:
    """Kamaji's default admission controllers lack NodeRestriction, which kubeadm always enables."""
    if resource.type != kinds.TENANT_CONTROL_PLANE:
        return
    controllers = resource.get("spec", "kubernetes", "admissionControllers", default=None)
    if controllers is UNKNOWN or (isinstance(controllers, list) and UNKNOWN in controllers):
        return
    if not isinstance(controllers, list) or NODE_RESTRICTION not in controllers:
        yield (
            "the TenantControlPlane does not enable the NodeRestriction admission plugin "
            "(spec.kubernetes.admissionControllers; Kamaji's default list lacks it): any kubelet of the tenant could "
            "change another node's labels, taints or GPU registration and steer that node's pods"
        )
