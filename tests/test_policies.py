"""The isolation policy pack: every rule passes the dev stack and catches a broken variant of it.

Each case changes a real render of the dev stack (secrets shown, as the pack sees them) and runs
the rule twice: through the pack's own policy object, with arguments built here the way
CrossGuard's analyzer builds them, and through the offline check (`tools.policycheck`, exit codes
included). Both must agree.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from policies.gpu_tenancy_policies import POLICIES, POLICY_NAMES, kinds, settings
from policies.gpu_tenancy_policies.isolation import exec_target
from policies.gpu_tenancy_policies.stack import ResourceView, kubeconfig_server
from policies.gpu_tenancy_policies.values import UNKNOWN
from tests.conftest import COMMAND, CONTAINER, K8S_PROVIDER, PROJECT_DIR, RELEASE, SECRET, TCP
from tools import harness, policycheck

POOL = "kubernetes:metallb.io/v1beta1:IPAddressPool"
QUOTA = "kubernetes:core/v1:ResourceQuota"
IMAGE = "docker:index/remoteImage:RemoteImage"
REMOTE_COMMAND = "command:remote:Command"
BY_NAME = {policy.name: policy for policy in POLICIES}
ISSUE_RULES = [
    "tenant-worker-isolation",
    "unique-tenant-endpoints",
    "konnectivity-required",
    "node-restriction",
    "control-plane-exposure",
    "pinned-versions",
    "privileged-containers-are-nodes",
    "hami-on-tenants-only",
    "gpu-quota-within-inventory",
    "shared-datastore",
    "bootstrap-token-hygiene",
]
ADVISORY = {"shared-datastore", "pinned-versions-exceptions"}


# --- the pack's validators, called as the analyzer calls them ---------------------------------


def _engine(value: Any) -> Any:
    """The render's markers as the engine sends them: unknowns (and masked secrets) are sentinels."""
    if value in (harness.UNKNOWN, harness.SECRET):
        return UNKNOWN_STRING_VALUE
    if isinstance(value, dict):
        return {key: _engine(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_engine(item) for item in value]
    return value


def _options(parent: str | None) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], parent)


def _provider(document: dict, record: dict) -> PolicyProviderResource | None:
    by_urn = {item["urn"]: item for item in document["resources"]}
    if record.get("provider") in by_urn:
        provider = by_urn[record["provider"]]
        return PolicyProviderResource(
            provider["type"], unknown_checking_proxy(_engine(provider["inputs"])), provider["urn"], provider["name"]
        )
    if not record.get("custom", True) or record["type"].startswith("pulumi:providers:"):
        return None
    package = record["type"].split(":", 1)[0]
    return PolicyProviderResource(
        f"pulumi:providers:{package}",
        unknown_checking_proxy({}),
        f"urn:pulumi:dev::gpu-tenancy::pulumi:providers:{package}::default",
        "default",
    )


def pack_violations(document: dict, name: str, config: dict | None = None) -> list[tuple[str, str]]:
    """(urn, message) of every violation the pack's policy ``name`` reports on ``document``."""
    policy = BY_NAME[name]
    options = settings(name, config)  # the engine hands the pack its config with the schema's defaults
    found: list[tuple[str, str]] = []
    if isinstance(policy, ResourceValidationPolicy):
        for record in document["resources"]:
            if "read" in record:
                continue
            args = ResourceValidationArgs(
                record["type"],
                unknown_checking_proxy(_engine(record["inputs"])),
                record["urn"],
                record["name"],
                _options(record["parent"]),
                _provider(document, record),
                options,
            )
            policy.validate(args, lambda message, urn=None, record=record: found.append((record["urn"], message)))
        return found
    assert isinstance(policy, StackValidationPolicy)
    resources = {
        record["urn"]: PolicyResource(
            record["type"],
            unknown_checking_proxy(_engine(record["inputs"])),
            record["urn"],
            record["name"],
            _options(record["parent"]),
            _provider(document, record),
            None,
            [],
            {},
        )
        for record in document["resources"]
    }
    for record in document["resources"]:
        resources[record["urn"]].dependencies = [resources[urn] for urn in record["dependencies"] if urn in resources]
    policy.validate(
        StackValidationArgs(list(resources.values()), options), lambda message, urn=None: found.append((urn, message))
    )
    return found


# --- the offline check --------------------------------------------------------------------------


def offline(document: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[str], str]:
    """Exit status, printed lines and stderr of `python -m tools.policycheck --resources FILE`."""
    path = tmp_path / "render.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    code = policycheck.main(["--resources", str(path), *extra])
    captured = capsys.readouterr()
    return code, [line for line in captured.out.splitlines() if line], captured.err


def offline_messages(lines: list[str], name: str) -> list[tuple[str, str, str]]:
    """(level, urn, message) of the lines for policy ``name``."""
    found = []
    for line in lines:
        level, policy, rest = line.split(" ", 2)
        if policy == name:
            urn, _, message = rest.partition(": ")
            found.append((level, urn, message))
    return found


# --- the dev render and its variants --------------------------------------------------------------


@pytest.fixture(scope="module")
def base(dev_secrets: harness.Render) -> dict:
    return dev_secrets.to_json()


def record(document: dict, type_: str, name: str) -> dict:
    found = [item for item in document["resources"] if item["type"] == type_ and item["name"] == name]
    assert len(found) == 1, f"expected one {type_} {name}"
    return found[0]


def spec(document: dict, tenant: str) -> dict:
    return record(document, TCP, tenant)["inputs"]["spec"]


def env(document: dict, command: str) -> dict:
    return record(document, COMMAND, command)["inputs"]["environment"]


def remove(document: dict, type_: str, name: str) -> None:
    urn = record(document, type_, name)["urn"]
    document["resources"] = [item for item in document["resources"] if item["urn"] != urn]
    for item in document["resources"]:
        item["dependencies"] = [dep for dep in item["dependencies"] if dep != urn]


def endpoint_of(document: dict, tenant: str) -> str:
    profile = spec(document, tenant)["networkProfile"]
    return f"{profile['address']}:{profile['port']}"


def provider_of(document: dict, type_: str, name: str) -> str:
    return record(document, type_, name)["provider"]


def extra_provider(document: dict, name: str, like: str, dependencies: list[str] | None = None, server: str | None = None) -> str:
    """One more Kubernetes provider, a copy of ``like``'s under ``name``: its dependencies and the
    server its kubeconfig names replaced where given. Returns its URN."""
    template = record(document, K8S_PROVIDER, like)
    provider = copy.deepcopy(template)
    provider.update(name=name, urn=f"{template['urn'].rsplit('::', 1)[0]}::{name}")
    if dependencies is not None:
        provider["dependencies"] = dependencies
    if server is not None:
        kubeconfig = yaml.safe_load(provider["inputs"]["kubeconfig"])
        kubeconfig["clusters"][0]["cluster"]["server"] = f"https://{server}"
        provider["inputs"]["kubeconfig"] = yaml.safe_dump(kubeconfig)
    document["resources"].append(provider)
    return provider["urn"]


def extra_container(document: dict, name: str, **inputs: Any) -> None:
    """One more container, a copy of tenant-a-worker-0's under ``name`` with ``inputs`` over its own."""
    template = record(document, CONTAINER, "tenant-a-worker-0")
    container = copy.deepcopy(template)
    container.update(name=name, urn=f"{template['urn'].rsplit('::', 1)[0]}::{name}")
    container["inputs"].update(name=name, **inputs)
    document["resources"].append(container)


def worker_volume(document: dict, host_path: str, container_path: str) -> None:
    """One more host path bound into tenant-a-worker-0."""
    record(document, CONTAINER, "tenant-a-worker-0")["inputs"]["volumes"].append(
        {"hostPath": host_path, "containerPath": container_path}
    )


def bind_volume(document: dict, name: str, device: str, o: str = "bind") -> None:
    """A docker Volume the local driver binds to ``device`` on the host, beside the containers."""
    template = record(document, CONTAINER, "tenant-a-worker-0")
    urn = f"{template['urn'].rsplit('$', 1)[0]}$docker:index/volume:Volume::{name}"
    document["resources"].append(
        {
            **{key: value for key, value in template.items() if key not in ("inputs", "options")},
            "urn": urn,
            "type": "docker:index/volume:Volume",
            "name": name,
            "dependencies": [],
            "inputs": {"name": name, "driver": "local", "driverOpts": {"type": "none", "o": o, "device": device}},
        }
    )


def tcp_metadata_unknown(document: dict, tenant: str) -> None:
    record(document, TCP, tenant)["inputs"]["metadata"] = harness.UNKNOWN


def tcp_metadata_unknown_b(document: dict) -> None:
    tcp_metadata_unknown(document, "tenant-b")


def both(*changes: Callable[[dict], Any]) -> Callable[[dict], None]:
    def change(document: dict) -> None:
        for each in changes:
            each(document)

    return change


def registration(document: dict, worker: str) -> list[dict]:
    return json.loads(env(document, f"{worker}-gpu-registration")["HAMI_NODE_REGISTER"])


def set_registration(document: dict, worker: str, entries: Any) -> None:
    env(document, f"{worker}-gpu-registration")["HAMI_NODE_REGISTER"] = (
        entries if isinstance(entries, str) else json.dumps(entries)
    )


def token(document: dict, worker: str) -> dict:
    return record(document, SECRET, f"{worker}-bootstrap-token")["inputs"]["stringData"]


def ssh_join(document: dict, name: str, tenant: str, host: str, endpoint: str) -> None:
    """A worker on a real host (issue 6): a remote command with the join environment."""
    template = record(document, COMMAND, "tenant-a-worker-0-join")
    join = copy.deepcopy(template)
    join.update(
        type=REMOTE_COMMAND,
        name=f"{name}-join",
        urn=template["urn"].replace("command:local:Command::tenant-a-worker-0-join", f"command:remote:Command::{name}-join"),
        dependencies=[],
    )
    join["inputs"] = {
        "connection": {"host": host, "port": 22, "user": "ubuntu", "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----"},
        "create": "sudo -n sh -s",
        "environment": {"GPU_TENANCY_TENANT": tenant, "JOIN_ENDPOINT": endpoint, "JOIN_CA_CERT_HASH": "sha256:00"},
    }
    document["resources"].append(join)


def second_join(document: dict, tenant: str = "tenant-b") -> None:
    """tenant-a's worker joins again: ``tenant`` (tenant-b), or tenant-a a second time."""
    join = copy.deepcopy(record(document, COMMAND, "tenant-a-worker-0-join"))
    join["name"] += "-again"
    join["urn"] += "-again"
    join["inputs"]["environment"].update(GPU_TENANCY_TENANT=tenant, JOIN_ENDPOINT=endpoint_of(document, tenant))
    document["resources"].append(join)


def node_port(document: dict, tenant: str, port: int, konnectivity: int) -> None:
    tenant_spec = spec(document, tenant)
    tenant_spec["controlPlane"]["service"] = {"serviceType": "NodePort"}
    tenant_spec["networkProfile"]["port"] = port
    tenant_spec["addons"]["konnectivity"]["server"]["port"] = konnectivity


def vip(document: dict, tenant: str, address: str) -> None:
    """The tenant's TCP at ``address``, asked of MetalLB as the program asks it."""
    spec(document, tenant)["networkProfile"].update(address=address)
    spec(document, tenant)["controlPlane"]["service"]["additionalMetadata"]["annotations"].update(
        {"metallb.io/loadBalancerIPs": address}
    )


def pool_elsewhere(document: dict, addresses: str, provider: str) -> None:
    """A second MetalLB pool, on the cluster ``provider`` reaches."""
    pool = copy.deepcopy(record(document, POOL, "gpu-tenancy-management-address-pool"))
    pool["urn"] = pool["urn"].replace("gpu-tenancy-management-address-pool", "other-pool")
    pool["name"] = "other-pool"
    pool["provider"] = provider
    pool["inputs"]["spec"]["addresses"] = [addresses]
    document["resources"].append(pool)


def one_host_in_both_tenants(as_b: str, as_a: str) -> Callable[[dict], Any]:
    """SSH workers of tenant-b and tenant-a on one host, which each names its own way."""
    return lambda d: (
        ssh_join(d, "gpu-host-1", "tenant-b", as_b, endpoint_of(d, "tenant-b")),
        ssh_join(d, "gpu-host-1-again", "tenant-a", as_a, endpoint_of(d, "tenant-a")),
    )


def as_base64_data(document: dict, worker: str) -> None:
    """The Secret as its outputs look: `data`, base64, instead of `stringData`."""
    inputs = record(document, SECRET, f"{worker}-bootstrap-token")["inputs"]
    data = inputs.pop("stringData")
    data.pop("expiration")
    inputs["data"] = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}


def real_devices(document: dict, tenant: str) -> None:
    """gpuMode nvidia (issue 6): HAMi's device plugin finds the cards; no registration command."""
    remove(document, COMMAND, f"{tenant}-worker-0-gpu-registration")
    record(document, RELEASE, f"{tenant}-hami")["inputs"]["values"].update(
        devicePlugin={"enabled": True}, mockDevicePlugin={"enabled": False}
    )


def untraced_image(document: dict, worker: str) -> None:
    """The worker runs an image id no RemoteImage of the stack accounts for."""
    image = record(document, IMAGE, f"{worker}-image")["urn"]
    container = record(document, CONTAINER, worker)
    assert image in container["dependencies"]
    container["dependencies"].remove(image)


def registered_device(document: dict, worker: str, position: int, **fields: Any) -> None:
    """Change device [position] of the worker's GPU registration."""
    entries = registration(document, worker)
    entries[position].update(fields)
    set_registration(document, worker, entries)


def kind_network_output(document: dict) -> None:
    """A real run's outputs: `docker network inspect kind` reported the node subnet."""
    record(document, COMMAND, "gpu-tenancy-management-kind-network")["inputs"]["stdout"] = (
        "172.18.0.0/16 fc00:f853:ccd:e793::/64\n"
    )


def kind_network_script(document: dict, script: str) -> None:
    record(document, COMMAND, "gpu-tenancy-management-kind-network")["inputs"]["create"] = script


# The kind network's script before it checked the route (what stacks deployed then keep in state).
BARE_INSPECT = "docker network inspect kind --format '{{range .IPAM.Config}}{{.Subnet}} {{end}}'"

DIGEST = "sha256:" + "0" * 64


@dataclass(frozen=True)
class Case:
    id: str
    policy: str
    change: Callable[[dict], Any]
    expect: str | None  # a fragment of the violation message; None: the rule must pass
    config: dict | None = None
    findings: int = 1  # how many violations the change causes in all


def same(_: dict) -> None:
    pass


def pin_moving_versions(document: dict) -> None:
    record(document, RELEASE, "gpu-tenancy-management-kamaji")["inputs"].update(version="1.0.0")
    record(document, RELEASE, "gpu-tenancy-management-kamaji-crds")["inputs"].update(version="1.0.0")
    for tenant in ("tenant-a", "tenant-b"):
        record(document, RELEASE, f"{tenant}-hami")["inputs"]["values"]["mockDevicePlugin"]["image"].update(
            tag=f"latest@{DIGEST}"
        )


# Things created through a provider built from no TCP: refused, however many tenants the stack knows.
NO_TENANT_PROVIDER_CASES = [
    Case(
        "token-created-through-a-provider-of-no-tenant",
        "tenant-worker-isolation",
        lambda d: record(d, SECRET, "tenant-a-worker-0-bootstrap-token").update(
            provider=extra_provider(d, "elsewhere", like="tenant-a", dependencies=[], server="10.9.9.9:6443")
        ),
        "uses a bootstrap token created through a provider built from no TenantControlPlane (which cluster it reaches, "
        "the stack cannot tell)",
    ),
    Case(
        "hami-through-a-provider-of-no-tenant",
        "hami-on-tenants-only",
        lambda d: record(d, RELEASE, "tenant-a-hami").update(
            provider=extra_provider(d, "elsewhere", like="tenant-a", dependencies=[], server="10.9.9.9:6443")
        ),
        "installed through provider elsewhere, built from no TenantControlPlane",
    ),
    Case(
        "quota-through-no-tenants-provider",
        "gpu-quota-within-inventory",
        lambda d: record(d, QUOTA, "tenant-a-gpu-quota").update(provider=None),
        "GPU quota tenant-a-gpu-quota is created through a provider built from no TenantControlPlane",
    ),
]

CASES = [
    # tenant-worker-isolation
    Case("dev", "tenant-worker-isolation", same, None),
    Case(
        # The endpoint written as a URL is the same endpoint.
        "join-endpoint-as-a-url",
        "tenant-worker-isolation",
        lambda d: env(d, "tenant-a-worker-0-join").update(JOIN_ENDPOINT=f"https://{endpoint_of(d, 'tenant-a')}/"),
        None,
    ),
    Case(
        "join-at-another-tenants-endpoint",
        "tenant-worker-isolation",
        lambda d: env(d, "tenant-a-worker-0-join").update(JOIN_ENDPOINT=endpoint_of(d, "tenant-b")),
        "joins 172.18.255.219:6443, the endpoint of tenant 'tenant-b'",
    ),
    Case(
        "join-at-an-unknown-endpoint",
        "tenant-worker-isolation",
        lambda d: env(d, "tenant-a-worker-0-join").update(JOIN_ENDPOINT="10.9.9.9:6443"),
        "joins 10.9.9.9:6443, not tenant 'tenant-a''s endpoint 172.18.255.230:6443",
    ),
    Case(
        "container-labelled-for-another-tenant",
        "tenant-worker-isolation",
        lambda d: record(d, CONTAINER, "tenant-a-worker-0")["inputs"]["labels"][0].update(value="tenant-b"),
        "labelled gpu-tenancy.io/tenant=tenant-b",
    ),
    Case(
        "join-names-no-tenant",
        "tenant-worker-isolation",
        lambda d: env(d, "tenant-b-worker-0-join").pop("GPU_TENANCY_TENANT"),
        "join tenant-b-worker-0-join names no tenant",
    ),
    Case(
        "join-for-a-tenant-without-control-plane",
        "tenant-worker-isolation",
        lambda d: env(d, "tenant-b-worker-0-join").update(GPU_TENANCY_TENANT="tenant-c"),
        "tenant 'tenant-c', which has no TenantControlPlane",
        findings=2,
    ),
    Case(
        "worker-without-join",
        "tenant-worker-isolation",
        lambda d: remove(d, COMMAND, "tenant-b-worker-0-join"),
        "worker tenant-b-worker-0 joins no tenant",
    ),
    # Both joins are reported; the copied join also keeps tenant-a's token (its label and its
    # cluster) and runs on a container labelled for tenant-a.
    Case("worker-joins-two-tenants", "tenant-worker-isolation", second_join, "joins tenants 'tenant-a', 'tenant-b'", findings=5),
    Case(
        "token-created-in-another-tenant",
        "tenant-worker-isolation",
        lambda d: record(d, SECRET, "tenant-a-worker-0-bootstrap-token").update(
            provider=provider_of(d, SECRET, "tenant-b-worker-0-bootstrap-token")
        ),
        "uses a bootstrap token created through a provider built from tenant 'tenant-b''s control plane",
    ),
    *(
        # A preview in which a TCP's metadata, and so its tenant, is not known yet: a provider built
        # from it is no tenant's as far as the stack knows, which is no finding yet.
        Case("tenant-not-known-yet", policy, lambda d: tcp_metadata_unknown(d, "tenant-a"), None)
        for policy in (
            "tenant-worker-isolation",
            "tenant-provider-isolation",
            "hami-on-tenants-only",
            "gpu-quota-within-inventory",
        )
    ),
    *(
        # ... and one tenant's unknown TCP hides nothing of another tenant's.
        Case(f"{case.id}-beside-an-unknown-tenant", case.policy, both(case.change, tcp_metadata_unknown_b), case.expect)
        for case in NO_TENANT_PROVIDER_CASES
    ),
    *NO_TENANT_PROVIDER_CASES,
    Case(
        "join-runs-in-another-container",
        "tenant-worker-isolation",
        lambda d: record(d, COMMAND, "tenant-b-worker-0-join")["inputs"].update(
            create=record(d, COMMAND, "tenant-b-worker-0-join")["inputs"]["create"].replace(
                "tenant-b-worker-0", "tenant-a-worker-0"
            )
        ),
        "join tenant-b-worker-0-join waits for worker tenant-b-worker-0 but runs in container 'tenant-a-worker-0'",
    ),
    Case(
        "registration-runs-in-another-container",
        "tenant-worker-isolation",
        lambda d: record(d, COMMAND, "tenant-b-worker-0-gpu-registration")["inputs"].update(
            create="docker exec -i -e HAMI_NODE_REGISTER --user root tenant-a-worker-0 sh -s"
        ),
        "GPU registration tenant-b-worker-0-gpu-registration waits for worker tenant-b-worker-0 but runs in container "
        "'tenant-a-worker-0'",
    ),
    Case(
        "join-not-run-in-its-worker",
        "tenant-worker-isolation",
        lambda d: record(d, COMMAND, "tenant-a-worker-0-join")["inputs"].update(create="sh -s"),
        "join tenant-a-worker-0-join waits for worker tenant-a-worker-0 but does not run `docker exec` in it",
    ),
    Case(
        "registration-for-another-tenant",
        "tenant-worker-isolation",
        lambda d: env(d, "tenant-a-worker-0-gpu-registration").update(GPU_TENANCY_TENANT="tenant-b"),
        "is for tenant 'tenant-b' on a worker that joins 'tenant-a'",
    ),
    Case(
        "ssh-worker",
        "tenant-worker-isolation",
        lambda d: ssh_join(d, "gpu-host-1", "tenant-b", "10.0.0.11", endpoint_of(d, "tenant-b")),
        None,
    ),
    Case(
        # policycheck hands the port over as the analyzer does, 22.0: the message still names port 22.
        "ssh-host-in-two-tenants",
        "tenant-worker-isolation",
        one_host_in_both_tenants("10.0.0.11", "10.0.0.11"),
        "worker ssh://10.0.0.11:22 joins tenants 'tenant-a', 'tenant-b'",
        findings=2,
    ),
    Case(
        # One machine, two spellings: names compare case-blind without the root dot, addresses by value.
        "ssh-host-in-two-tenants-spelt-two-ways",
        "tenant-worker-isolation",
        one_host_in_both_tenants("GPU-1.lab.", "gpu-1.lab"),
        "worker ssh://gpu-1.lab:22 joins tenants 'tenant-a', 'tenant-b'",
        findings=2,
    ),
    Case(
        # Every loopback address is the machine running pulumi up.
        "ssh-host-in-two-tenants-as-two-loopback-addresses",
        "tenant-worker-isolation",
        one_host_in_both_tenants("127.0.0.1", "127.0.1.1"),
        "worker ssh://localhost:22 joins tenants 'tenant-a', 'tenant-b'",
        findings=2,
    ),
    Case(
        # An IPv4-mapped IPv6 address reaches the IPv4 host.
        "ssh-host-in-two-tenants-as-ipv4-and-mapped-ipv6",
        "tenant-worker-isolation",
        one_host_in_both_tenants("::ffff:10.0.0.11", "10.0.0.11"),
        "worker ssh://10.0.0.11:22 joins tenants 'tenant-a', 'tenant-b'",
        findings=2,
    ),
    Case(
        "token-created-in-the-management-cluster",
        "tenant-worker-isolation",
        lambda d: record(d, SECRET, "tenant-a-worker-0-bootstrap-token").update(provider=provider_of(d, TCP, "tenant-a")),
        "uses a bootstrap token created in the management cluster",
    ),
    Case(
        "registration-for-another-node",
        "tenant-worker-isolation",
        lambda d: env(d, "tenant-a-worker-0-gpu-registration").update(GPU_TENANCY_NODE="tenant-b-worker-0"),
        "registers node 'tenant-b-worker-0' from worker 'tenant-a-worker-0'",
    ),
    Case(
        "container-labelled-for-another-role",
        "tenant-worker-isolation",
        lambda d: record(d, CONTAINER, "tenant-a-worker-0")["inputs"]["labels"][1].update(value="control-plane"),
        "is labelled gpu-tenancy.io/role=control-plane",
    ),
    # Both joins are reported, though each on its own is in order.
    Case(
        "worker-joins-its-tenant-twice",
        "tenant-worker-isolation",
        lambda d: second_join(d, "tenant-a"),
        "worker tenant-a-worker-0 joins more than once",
        findings=2,
    ),
    # unique-tenant-endpoints
    Case("dev", "unique-tenant-endpoints", same, None),
    Case(
        "two-tenants-one-address",
        "unique-tenant-endpoints",
        lambda d: spec(d, "tenant-b")["networkProfile"].update(address=spec(d, "tenant-a")["networkProfile"]["address"]),
        "tenant 'tenant-b' shares its address 172.18.255.230 with tenant 'tenant-a'",
        findings=2,
    ),
    Case(
        "two-tenants-in-one-namespace",
        "unique-tenant-endpoints",
        lambda d: record(d, TCP, "tenant-b")["inputs"]["metadata"].update(namespace="tenant-a"),
        "tenant 'tenant-b' shares the management cluster namespace 'tenant-a' with tenant 'tenant-a'",
        findings=2,
    ),
    Case(
        "two-tenants-in-the-default-namespace",
        "unique-tenant-endpoints",
        lambda d: [record(d, TCP, tenant)["inputs"]["metadata"].pop("namespace") for tenant in ("tenant-a", "tenant-b")],
        "shares the management cluster namespace 'default' with tenant",
        findings=2,
    ),
    Case(
        "pod-cidr-holds-a-vip",
        "unique-tenant-endpoints",
        lambda d: spec(d, "tenant-b")["networkProfile"].update(podCidrs=["172.18.255.224/28"]),
        "podCidrs 172.18.255.224/28 contains the address 172.18.255.230 of tenant 'tenant-a'",
        findings=2,
    ),
    Case(
        "deprecated-pod-cidr-holds-a-vip",
        "unique-tenant-endpoints",
        lambda d: (
            spec(d, "tenant-b")["networkProfile"].pop("podCidrs"),
            spec(d, "tenant-b")["networkProfile"].update(podCidr="172.18.255.224/28"),
        ),
        "podCidr 172.18.255.224/28 contains the address 172.18.255.230 of tenant 'tenant-a'",
        findings=2,
    ),
    Case(
        # Kamaji's CRD defaults the singular field even when the plural list is set; the list wins.
        "defaulted-singular-beside-the-list",
        "unique-tenant-endpoints",
        lambda d: spec(d, "tenant-b")["networkProfile"].update(podCidr="172.18.255.224/28"),
        None,
    ),
    Case(
        "service-cidr-on-the-node-network",
        "unique-tenant-endpoints",
        lambda d: (kind_network_output(d), spec(d, "tenant-a")["networkProfile"].update(serviceCidrs=["172.18.0.0/24"])),
        "serviceCidrs 172.18.0.0/24 overlaps the node network 172.18.0.0/16",
    ),
    Case(
        "service-cidr-on-the-node-network-of-an-older-kind-script",
        "unique-tenant-endpoints",
        lambda d: (
            kind_network_output(d),
            kind_network_script(d, BARE_INSPECT),
            spec(d, "tenant-a")["networkProfile"].update(serviceCidrs=["172.18.0.0/24"]),
        ),
        "serviceCidrs 172.18.0.0/24 overlaps the node network 172.18.0.0/16",
    ),
    Case(
        # Subnets are what a script prints only when the inspect is its last line.
        "a-script-that-prints-more-after-the-inspect-is-no-subnet",
        "unique-tenant-endpoints",
        lambda d: (
            kind_network_output(d),
            kind_network_script(d, BARE_INSPECT + "\necho 10.0.0.0/8"),
            spec(d, "tenant-a")["networkProfile"].update(serviceCidrs=["172.18.0.0/24"]),
        ),
        None,
    ),
    Case(
        "two-load-balancers-one-address",
        "unique-tenant-endpoints",
        lambda d: [
            (
                spec(d, tenant)["networkProfile"].pop("address"),
                record(d, TCP, tenant)["inputs"].update(status={"controlPlaneEndpoint": "10.1.2.3:6443"}),
            )
            for tenant in ("tenant-a", "tenant-b")
        ],
        "shares its address 10.1.2.3",
        findings=2,
    ),
    Case(
        "pod-cidr-over-a-worker-container",
        "unique-tenant-endpoints",
        # A real run: the container reports its address on kind's network.
        lambda d: (
            record(d, CONTAINER, "tenant-b-worker-0")["inputs"].update(networkData=[{"ipAddress": "172.18.0.3"}]),
            spec(d, "tenant-a")["networkProfile"].update(podCidrs=["172.18.0.0/24"]),
        ),
        "podCidrs 172.18.0.0/24 overlaps worker tenant-b-worker-0 at 172.18.0.3",
    ),
    # konnectivity-required
    Case("dev", "konnectivity-required", same, None),
    Case(
        "no-konnectivity",
        "konnectivity-required",
        lambda d: spec(d, "tenant-a")["addons"].pop("konnectivity"),
        "does not run the Konnectivity addon",
    ),
    Case(
        "konnectivity-null",
        "konnectivity-required",
        lambda d: spec(d, "tenant-b")["addons"].update(konnectivity=None),
        "does not run the Konnectivity addon",
    ),
    # node-restriction
    Case("dev", "node-restriction", same, None),
    Case(
        "kamajis-default-admission-controllers",
        "node-restriction",
        lambda d: spec(d, "tenant-a")["kubernetes"].pop("admissionControllers"),
        "does not enable the NodeRestriction admission plugin",
    ),
    Case(
        "admission-controllers-without-node-restriction",
        "node-restriction",
        lambda d: spec(d, "tenant-b")["kubernetes"]["admissionControllers"].remove("NodeRestriction"),
        "does not enable the NodeRestriction admission plugin",
    ),
    # control-plane-exposure
    Case("dev", "control-plane-exposure", same, None),
    Case(
        "address-outside-the-pool",
        "control-plane-exposure",
        lambda d: vip(d, "tenant-a", "172.18.0.50"),
        "address 172.18.0.50 lies outside the MetalLB pool 172.18.255.200-172.18.255.250",
    ),
    Case(
        # A pool on another cluster announces nothing for this one: MetalLB answers per cluster.
        "address-in-another-clusters-pool",
        "control-plane-exposure",
        lambda d: (
            vip(d, "tenant-a", "172.18.0.50"),
            pool_elsewhere(d, "172.18.0.50/32", provider_of(d, RELEASE, "tenant-b-hami")),  # tenant-b's own cluster
        ),
        "address 172.18.0.50 lies outside the MetalLB pool 172.18.255.200-172.18.255.250",
    ),
    Case(
        "load-balancer-without-address",
        "control-plane-exposure",
        lambda d: spec(d, "tenant-a")["networkProfile"].pop("address"),
        "uses a LoadBalancer without a fixed address",
    ),
    Case(
        "annotation-disagrees",
        "control-plane-exposure",
        lambda d: spec(d, "tenant-a")["controlPlane"]["service"]["additionalMetadata"]["annotations"].update(
            {"metallb.io/loadBalancerIPs": "172.18.255.201"}
        ),
        "asks MetalLB for 172.18.255.201",
    ),
    Case(
        "existing-cluster-load-balancer",
        "control-plane-exposure",
        lambda d: (remove(d, POOL, "gpu-tenancy-management-address-pool"), spec(d, "tenant-a")["networkProfile"].pop("address")),
        None,
    ),
    Case("node-port-in-range", "control-plane-exposure", lambda d: node_port(d, "tenant-a", 31443, 31132), None),
    Case("node-port-at-the-range-ends", "control-plane-exposure", lambda d: node_port(d, "tenant-a", 30000, 32767), None),
    Case(
        # 6443.0 and 8132.0 as the analyzer hands them over; the message names them as integers.
        "node-port-default-ports",
        "control-plane-exposure",
        lambda d: node_port(d, "tenant-a", 6443, 8132),
        "NodePort with spec.networkProfile.port 6443, outside the NodePort range 30000-32767",
        findings=2,
    ),
    Case(
        "node-port-konnectivity-out-of-range",
        "control-plane-exposure",
        lambda d: node_port(d, "tenant-a", 31443, 8132),
        "spec.addons.konnectivity.server.port 8132, outside the NodePort range",
    ),
    Case(
        "node-port-above-the-range",
        "control-plane-exposure",
        lambda d: node_port(d, "tenant-a", 40000, 31132),
        "NodePort with spec.networkProfile.port 40000, outside the NodePort range 30000-32767",
    ),
    Case(
        "node-port-without-address",
        "control-plane-exposure",
        lambda d: (node_port(d, "tenant-b", 31443, 31132), spec(d, "tenant-b")["networkProfile"].pop("address")),
        "uses a NodePort without spec.networkProfile.address",
    ),
    Case(
        "node-port-range-from-config",
        "control-plane-exposure",
        lambda d: node_port(d, "tenant-a", 31443, 31132),
        "outside the NodePort range 32000-32767",
        config={"nodePortMin": 32000},
        findings=2,
    ),
    Case(
        # The engine validates each property alone; the pack itself refuses the pair.
        "node-port-range-inverted-in-config",
        "control-plane-exposure",
        lambda d: node_port(d, "tenant-a", 31443, 31132),
        "tenant 'tenant-a' uses a NodePort, but the pack config's nodePortMin 40000 is above its nodePortMax 30000",
        config={"nodePortMin": 40000, "nodePortMax": 30000},
    ),
    Case(
        "cluster-ip",
        "control-plane-exposure",
        lambda d: spec(d, "tenant-b")["controlPlane"]["service"].update(serviceType="ClusterIP"),
        "exposes its API server as ClusterIP",
    ),
    # pinned-versions
    Case("dev", "pinned-versions", same, None),
    Case(
        # A local packaged chart is the version its file holds: no `version` input to pin.
        "packaged-chart-without-version",
        "pinned-versions",
        lambda d: (
            record(d, RELEASE, "tenant-a-calico")["inputs"].update(chart="./charts/tigera-operator-v3.32.2.tgz"),
            record(d, RELEASE, "tenant-a-calico")["inputs"].pop("version"),
        ),
        None,
    ),
    Case(
        "release-without-version",
        "pinned-versions",
        lambda d: record(d, RELEASE, "tenant-a-hami")["inputs"].pop("version"),
        "Helm chart hami has no explicit version",
    ),
    Case(
        "release-version-range",
        "pinned-versions",
        lambda d: record(d, RELEASE, "gpu-tenancy-management-cert-manager")["inputs"].update(version="~1.21"),
        "version '~1.21' is a range",
    ),
    Case(
        "image-latest",
        "pinned-versions",
        lambda d: record(d, IMAGE, "tenant-b-worker-0-image")["inputs"].update(name="kindest/node:latest"),
        "image kindest/node:latest uses the moving tag 'latest'",
    ),
    Case(
        "image-untagged",
        "pinned-versions",
        lambda d: record(d, IMAGE, "tenant-b-worker-0-image")["inputs"].update(name="localhost:5000/kindest/node"),
        "image localhost:5000/kindest/node has no tag or digest",
    ),
    Case(
        "image-by-digest",
        "pinned-versions",
        lambda d: record(d, IMAGE, "tenant-b-worker-0-image")["inputs"].update(name=f"kindest/node@{DIGEST}"),
        None,
    ),
    Case(
        "helm-value-latest",
        "pinned-versions",
        lambda d: record(d, RELEASE, "tenant-a-hami")["inputs"]["values"]["scheduler"]["kubeScheduler"]["image"].update(
            tag="latest"
        ),
        "values.scheduler.kubeScheduler.image.tag is the moving image tag 'latest'",
    ),
    Case(
        "kind-node-untagged",
        "pinned-versions",
        lambda d: record(d, COMMAND, "gpu-tenancy-management-kind-cluster")["inputs"].update(
            stdin="kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  image: kindest/node\n"
        ),
        "kind node image kindest/node has no tag or digest",
    ),
    Case(
        "image-malformed-digest",
        "pinned-versions",
        lambda d: record(d, IMAGE, "tenant-b-worker-0-image")["inputs"].update(name="kindest/node:v1.36.4@sha256:xyz"),
        "image kindest/node:v1.36.4@sha256:xyz has a malformed digest",
    ),
    Case(
        "kubernetes-version-not-exact",
        "pinned-versions",
        lambda d: spec(d, "tenant-a")["kubernetes"].update(version="v1.36"),
        "Kubernetes version 'v1.36' is not an exact vX.Y.Z",
    ),
    Case(
        "konnectivity-latest",
        "pinned-versions",
        lambda d: spec(d, "tenant-b")["addons"]["konnectivity"]["server"].update(version="latest"),
        "Konnectivity server version is the moving 'latest'",
    ),
    Case(
        "release-latest-prerelease",
        "pinned-versions",
        lambda d: record(d, RELEASE, "gpu-tenancy-management-cert-manager")["inputs"].update(version="1.21.0-latest"),
        "version '1.21.0-latest' is a moving 'latest' build",
    ),
    # pinned-versions-exceptions (advisory)
    # dev: Kamaji's chart and each tenant's mock device plugin tag.
    Case("kamaji-moving-chart", "pinned-versions-exceptions", same, "Helm chart kamaji 0.0.0+latest", findings=4),
    Case("kamaji-crds-moving-chart", "pinned-versions-exceptions", same, "Helm chart kamaji-crds 0.0.0+latest", findings=4),
    Case(
        "mock-device-plugin-latest",
        "pinned-versions-exceptions",
        same,
        "Helm chart hami: values.mockDevicePlugin.image.tag is the moving image tag 'latest'",
        findings=4,
    ),
    Case("everything-pinned", "pinned-versions-exceptions", pin_moving_versions, None),
    Case(
        "mock-device-plugin-other-latest-tag",
        "pinned-versions",
        lambda d: record(d, RELEASE, "tenant-a-hami")["inputs"]["values"]["devicePlugin"].update(image={"tag": "latest"}),
        "values.devicePlugin.image.tag is the moving image tag 'latest'",
    ),
    # privileged-containers-are-nodes
    Case("dev", "privileged-containers-are-nodes", same, None),
    Case(
        "privileged-ubuntu",
        "privileged-containers-are-nodes",
        lambda d: record(d, IMAGE, "tenant-a-worker-0-image")["inputs"].update(name="ubuntu:24.04"),
        "privileged container tenant-a-worker-0 runs ubuntu:24.04, not a Kubernetes node image",
    ),
    Case(
        "privileged-by-reference",
        "privileged-containers-are-nodes",
        lambda d: record(d, CONTAINER, "tenant-b-worker-0")["inputs"].update(image="docker.io/library/busybox:1.36"),
        "runs docker.io/library/busybox:1.36",
    ),
    Case(
        # Docker Hub's own spelling of the node image is the node image.
        "privileged-node-image-with-docker-hub-prefix",
        "privileged-containers-are-nodes",
        lambda d: record(d, IMAGE, "tenant-a-worker-0-image")["inputs"].update(name="docker.io/kindest/node:v1.36.4"),
        None,
    ),
    Case(
        "unprivileged-busybox",
        "privileged-containers-are-nodes",
        lambda d: record(d, CONTAINER, "tenant-b-worker-0")["inputs"].update(image="busybox:1.36", privileged=False),
        None,
    ),
    Case(
        "mirrored-node-image-allowed-by-config",
        "privileged-containers-are-nodes",
        lambda d: record(d, IMAGE, "tenant-a-worker-0-image")["inputs"].update(name="registry.example.com/kindest/node:v1.36.4"),
        None,
        config={"nodeImageRepositories": ["kindest/node", "registry.example.com/kindest/node"]},
    ),
    Case(
        "mirrored-node-image-not-configured",
        "privileged-containers-are-nodes",
        lambda d: record(d, IMAGE, "tenant-a-worker-0-image")["inputs"].update(name="registry.example.com/kindest/node:v1.36.4"),
        "runs registry.example.com/kindest/node:v1.36.4",
    ),
    Case(
        "privileged-image-not-traced",
        "privileged-containers-are-nodes",
        lambda d: untraced_image(d, "tenant-a-worker-0"),
        "privileged container tenant-a-worker-0 runs an image the stack does not name",
    ),
    Case(
        "root-equivalent-container",
        "privileged-containers-are-nodes",
        lambda d: extra_container(
            d,
            "debug",
            privileged=False,
            image="alpine:3.20",
            pidMode="host",
            capabilities={"adds": ["CAP_SYS_ADMIN", "NET_BIND_SERVICE"]},
            volumes=[
                {"hostPath": "/etc/../etc/kubernetes", "containerPath": "/k"},
                {"hostPath": "/var/lib/", "containerPath": "/v"},  # holds /var/lib/docker
                {"hostPath": "/home/me/data", "containerPath": "/home"},
                {"hostPath": "/usr/lib", "containerPath": "/usr/lib", "readOnly": True},  # programs, read-only
                {"hostPath": "/etc/ssl", "containerPath": "/etc/ssl", "readOnly": True},  # the host's secrets are near
                {"containerPath": "/data"},
            ],
            mounts=[
                {"type": "bind", "source": "/", "target": "/host"},
                {"type": "bind", "source": "/usr/local/bin", "target": "/b"},  # writable programs
                {"type": "volume", "source": "cache", "target": "/c"},
                # The local driver's bind: a bind mount under another name.
                {
                    "type": "volume",
                    "target": "/e",
                    "volumeOptions": {"driverOptions": {"type": "none", "o": "bind", "device": "/etc"}},
                },
            ],
        ),
        "container debug runs with pidMode host, capability CAP_SYS_ADMIN, host path /etc/kubernetes, host path /var/lib, "
        "host path /etc/ssl (read-only), host path /, host path /usr/local/bin, host path /etc, as good as privileged",
        findings=2,  # the bind of / holds the engines' sockets too
    ),
    Case(
        # Devices and host paths a node needs, on a node image that is not privileged: nothing to hold against it.
        "unprivileged-node-with-devices",
        "privileged-containers-are-nodes",
        lambda d: extra_container(d, "node", privileged=False, devices=[{"hostPath": "/dev/fuse", "containerPath": "/dev/fuse"}]),
        None,
    ),
    Case(
        "worker-with-the-docker-socket",
        "privileged-containers-are-nodes",
        lambda d: worker_volume(d, "/var/run/docker.sock", "/var/run/docker.sock"),
        "container tenant-a-worker-0 mounts /var/run/docker.sock, the container engine's socket",
    ),
    Case(
        # The directory holds the socket just the same.
        "worker-with-the-run-directory",
        "privileged-containers-are-nodes",
        lambda d: worker_volume(d, "/run/containerd/", "/host-run"),
        "container tenant-a-worker-0 mounts /run/containerd/, a directory of engine sockets",
    ),
    Case(
        "socket-through-a-volume-driver-bind",
        "privileged-containers-are-nodes",
        lambda d: extra_container(
            d,
            "helper",
            privileged=False,
            image="alpine:3.20",
            mounts=[
                {
                    "type": "volume",
                    "target": "/s",
                    "volumeOptions": {"driverOptions": {"type": "none", "o": "bind", "device": "/var/run/docker.sock/."}},
                }
            ],
        ),
        "container helper mounts /var/run/docker.sock/., the container engine's socket",
        findings=2,  # and a host path of /var/run: as good as privileged
    ),
    Case(
        # A named Volume of the stack that the local driver binds, mounted by its name.
        "socket-directory-through-a-named-volume",
        "privileged-containers-are-nodes",
        lambda d: (
            bind_volume(d, "engine", "/var/run"),
            extra_container(
                d,
                "helper",
                privileged=False,
                image="alpine:3.20",
                mounts=[{"type": "volume", "source": "engine", "target": "/s"}],
            ),
        ),
        "container helper mounts /var/run, a directory of engine sockets",
        findings=2,
    ),
    Case(
        "rbind-volume-in-the-volumes-list",
        "privileged-containers-are-nodes",
        lambda d: (
            bind_volume(d, "etc", "/etc", o="rbind,ro"),
            extra_container(
                d, "helper", privileged=False, image="alpine:3.20", volumes=[{"volumeName": "etc", "containerPath": "/e"}]
            ),
        ),
        "container helper runs with host path /etc, as good as privileged",
    ),
    # hami-on-tenants-only
    Case("dev", "hami-on-tenants-only", same, None),
    Case(
        "hami-on-the-management-cluster",
        "hami-on-tenants-only",
        lambda d: record(d, RELEASE, "tenant-a-hami").update(provider=provider_of(d, TCP, "tenant-a")),
        "installed through the management cluster's provider gpu-tenancy-management",
    ),
    Case(
        # A packaged chart is known by its name, a pre-release version in the file name included.
        "packaged-hami-on-the-management-cluster",
        "hami-on-tenants-only",
        lambda d: (
            record(d, RELEASE, "tenant-a-hami").update(provider=provider_of(d, TCP, "tenant-a")),
            record(d, RELEASE, "tenant-a-hami")["inputs"].update(chart="./hami-2.10.0-rc.1.tgz"),
        ),
        "installed through the management cluster's provider gpu-tenancy-management",
    ),
    Case(
        # A second provider from the management cluster's kubeconfig: the same server, no dependencies.
        "hami-through-a-copy-of-the-management-provider",
        "hami-on-tenants-only",
        lambda d: record(d, RELEASE, "tenant-a-hami").update(
            provider=extra_provider(d, "ambient", like="gpu-tenancy-management", dependencies=[])
        ),
        "installed through the management cluster's provider ambient",
    ),
    Case(
        # ... or built from what the kind cluster's Command outputs, through another server name.
        "hami-through-a-provider-built-from-the-kind-cluster",
        "hami-on-tenants-only",
        lambda d: record(d, RELEASE, "tenant-a-hami").update(
            provider=extra_provider(d, "kind", like="gpu-tenancy-management", server="kamaji-control-plane:6443")
        ),
        "installed through the management cluster's provider kind",
    ),
    Case(
        "hami-on-the-default-provider",
        "hami-on-tenants-only",
        lambda d: record(d, RELEASE, "tenant-b-hami").update(provider=None),
        "installed through the default Kubernetes provider",
    ),
    # tenant-provider-isolation
    Case("dev", "tenant-provider-isolation", same, None),
    Case(
        "tenant-provider-built-from-two-control-planes",
        "tenant-provider-isolation",
        # Through tenant-b's TCP itself: AnalyzeStack drops links to reads such as the admin kubeconfig Secret.
        lambda d: record(d, K8S_PROVIDER, "tenant-a")["dependencies"].append(record(d, TCP, "tenant-b")["urn"]),
        "provider tenant-a is built from the control planes of tenants 'tenant-a', 'tenant-b'",
    ),
    Case(
        "tenant-provider-names-another-tenants-endpoint",
        "tenant-provider-isolation",
        lambda d: record(d, K8S_PROVIDER, "tenant-a")["inputs"].update(
            kubeconfig=record(d, K8S_PROVIDER, "tenant-b")["inputs"]["kubeconfig"]
        ),
        "is built from tenant 'tenant-a''s control plane but its kubeconfig names 172.18.255.219:6443, the endpoint of "
        "tenant 'tenant-b'",
    ),
    # gpu-quota-within-inventory
    Case("dev", "gpu-quota-within-inventory", same, None),
    Case(
        "quota-memory-over-inventory",
        "gpu-quota-within-inventory",
        lambda d: record(d, QUOTA, "tenant-a-gpu-quota")["inputs"]["spec"]["hard"].update({"limits.nvidia.com/gpumem": "81921"}),
        "limits.nvidia.com/gpumem=81921 exceeds the 81920 MiB of GPU memory",
    ),
    Case(
        "quota-cores-over-inventory",
        "gpu-quota-within-inventory",
        lambda d: record(d, QUOTA, "tenant-a-gpu-quota")["inputs"]["spec"]["hard"].update({"limits.nvidia.com/gpucores": "200"}),
        "limits.nvidia.com/gpucores=200 exceeds the 100 % of GPU cores",
    ),
    Case(
        "quota-as-a-quantity",
        "gpu-quota-within-inventory",
        lambda d: record(d, QUOTA, "tenant-a-gpu-quota")["inputs"]["spec"]["hard"].update({"limits.nvidia.com/gpumem": "80Gi"}),
        "limits.nvidia.com/gpumem=85899345920 exceeds the 81920 MiB",
    ),
    Case(
        "quota-by-requests-over-inventory",
        "gpu-quota-within-inventory",
        lambda d: record(d, QUOTA, "tenant-a-gpu-quota")["inputs"]["spec"]["hard"].update(
            {"requests.nvidia.com/gpumem": "999999"}
        ),
        "requests.nvidia.com/gpumem=999999 exceeds the 81920 MiB",
    ),
    Case(
        "quota-as-a-quantity-within",
        "gpu-quota-within-inventory",
        # 80Ki is 81920: exactly the A100's memory, as the API server would count it.
        lambda d: record(d, QUOTA, "tenant-a-gpu-quota")["inputs"]["spec"]["hard"].update({"limits.nvidia.com/gpumem": "80Ki"}),
        None,
    ),
    Case(
        "quota-as-a-quantity-just-over",
        "gpu-quota-within-inventory",
        lambda d: record(d, QUOTA, "tenant-a-gpu-quota")["inputs"]["spec"]["hard"].update({"limits.nvidia.com/gpumem": "81Ki"}),
        "limits.nvidia.com/gpumem=82944 exceeds the 81920 MiB",
    ),
    Case(
        "quota-without-registered-cards",
        "gpu-quota-within-inventory",
        lambda d: remove(d, COMMAND, "tenant-a-worker-0-gpu-registration"),
        "limits.nvidia.com/gpumem=81920 exceeds the 0 MiB",
        findings=2,
    ),
    Case("real-device-plugin-counts-at-run-time", "gpu-quota-within-inventory", lambda d: real_devices(d, "tenant-a"), None),
    Case(
        # The mock still registers its cards beside the real plugin: they are what the quota is checked against.
        "both-device-plugins",
        "gpu-quota-within-inventory",
        lambda d: (
            real_devices(d, "tenant-a"),
            record(d, RELEASE, "tenant-a-hami")["inputs"]["values"].update(mockDevicePlugin={"enabled": True}),
        ),
        "limits.nvidia.com/gpumem=81920 exceeds the 0 MiB",
        findings=2,
    ),
    Case(
        "registration-repeated-index",
        "gpu-quota-within-inventory",
        lambda d: registered_device(d, "tenant-b-worker-0", 1, index=0),
        "device [1] repeats or negates the index 0",
    ),
    Case(
        "registration-no-cores",
        "gpu-quota-within-inventory",
        lambda d: registered_device(d, "tenant-b-worker-0", 0, devcore=0),
        "device [0] has devcore 0, not 1-100",
    ),
    Case(
        "registration-not-json",
        "gpu-quota-within-inventory",
        lambda d: set_registration(d, "tenant-b-worker-0", "GPU-0,10,23034,100,NVIDIA-L4,0,true"),
        "hami.io/node-nvidia-register is not JSON",
    ),
    Case(
        "registration-unhealthy-card",
        "gpu-quota-within-inventory",
        lambda d: set_registration(d, "tenant-b-worker-0", [{**registration(d, "tenant-b-worker-0")[0], "health": False}]),
        "device [0] is not healthy",
    ),
    Case(
        "registration-inflated-memory",
        "gpu-quota-within-inventory",
        lambda d: set_registration(d, "tenant-b-worker-0", [{**registration(d, "tenant-b-worker-0")[0], "devmem": 80000}]),
        "claims 80000 MiB; a L4 has 23034 MiB",
    ),
    Case(
        "registration-missing-field",
        "gpu-quota-within-inventory",
        lambda d: set_registration(
            d, "tenant-b-worker-0", [{k: v for k, v in registration(d, "tenant-b-worker-0")[0].items() if k != "count"}]
        ),
        "device [0] lacks 'count'",
    ),
    Case(
        "registration-capacity-disagrees",
        "gpu-quota-within-inventory",
        lambda d: env(d, "tenant-b-worker-0-gpu-registration").update(NVIDIA_GPU_CAPACITY="10"),
        "NVIDIA_GPU_CAPACITY=10, but the devices' counts add up to 20",
    ),
    Case(
        "registration-devcore-out-of-range",
        "gpu-quota-within-inventory",
        lambda d: registered_device(d, "tenant-b-worker-0", 1, devcore=101),
        "device [1] has devcore 101, not 1-100",
    ),
    Case(
        "registration-repeated-device-id",
        "gpu-quota-within-inventory",
        lambda d: registered_device(d, "tenant-b-worker-0", 1, id=registration(d, "tenant-b-worker-0")[0]["id"]),
        "device [1] repeats or lacks the device id 'GPU-",
    ),
    Case(
        "registration-empty-device-id",
        "gpu-quota-within-inventory",
        lambda d: registered_device(d, "tenant-b-worker-0", 0, id=""),
        "device [0] repeats or lacks the device id ''",
    ),
    Case(
        "registration-no-time-slices",
        "gpu-quota-within-inventory",
        lambda d: registered_device(d, "tenant-b-worker-0", 0, count=0),
        "device [0] has count 0",
    ),
    Case(
        "quota-through-two-tenants-providers",
        "gpu-quota-within-inventory",
        lambda d: record(d, K8S_PROVIDER, "tenant-a")["dependencies"].append(record(d, TCP, "tenant-b")["urn"]),
        "GPU quota tenant-a-gpu-quota is created through a provider built from the control planes of tenants 'tenant-a', "
        "'tenant-b'",
    ),
    # shared-datastore (advisory)
    Case(
        "default-datastore",
        "shared-datastore",
        same,
        "tenants tenant-a, tenant-b share Kamaji's default DataStore 'default'",
        findings=2,  # one per tenant
    ),
    Case("dedicated-datastore", "shared-datastore", lambda d: spec(d, "tenant-a").update(dataStore="tenant-a-etcd"), None),
    Case(
        "one-named-datastore-for-two",
        "shared-datastore",
        lambda d: (spec(d, "tenant-a").update(dataStore="team-etcd"), spec(d, "tenant-b").update(dataStore="team-etcd")),
        "tenants tenant-a, tenant-b share the DataStore 'team-etcd'",
        findings=2,
    ),
    # bootstrap-token-hygiene
    Case("dev", "bootstrap-token-hygiene", same, None),
    Case(
        "token-without-expiration",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-a-worker-0").pop("expiration"),
        "has no expiration",
    ),
    Case(
        "token-expiration-not-a-time",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-a-worker-0").update(expiration="tomorrow"),
        "expiration 'tomorrow' is not an RFC 3339 time",
    ),
    Case(
        "token-grants-another-group",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-b-worker-0").update(
            {"auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token,system:masters"}
        ),
        "group 'system:masters'",
    ),
    Case(
        "token-with-another-usage",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-b-worker-0").update({"usage-bootstrap-exec": "true"}),
        "allows usage 'exec'",
    ),
    Case(
        # Any other spelling is no usage: the API server compares with "true" exactly.
        "token-with-another-usage-not-true",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-b-worker-0").update({"usage-bootstrap-exec": "True"}),
        None,
    ),
    Case(
        "token-with-a-blank-expiration",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-a-worker-0").update(expiration="  "),
        "has no expiration",
    ),
    Case(
        # The API server writes stringData over data: what stringData grants is what the token grants.
        "token-groups-in-string-data-over-data",
        "bootstrap-token-hygiene",
        lambda d: (
            record(d, SECRET, "tenant-b-worker-0-bootstrap-token")["inputs"].update(
                data={"auth-extra-groups": base64.b64encode(b"system:bootstrappers:kubeadm:default-node-token").decode()}
            ),
            token(d, "tenant-b-worker-0").update({"auth-extra-groups": "system:masters"}),
        ),
        "group 'system:masters'",
    ),
    Case(
        "token-groups-in-data-under-string-data",
        "bootstrap-token-hygiene",
        lambda d: record(d, SECRET, "tenant-b-worker-0-bootstrap-token")["inputs"].update(
            data={"auth-extra-groups": base64.b64encode(b"system:masters").decode()}
        ),
        None,
    ),
    Case(
        "token-as-output-data", "bootstrap-token-hygiene", lambda d: as_base64_data(d, "tenant-a-worker-0"), "has no expiration"
    ),
    Case(
        "token-unknown-in-preview",
        "bootstrap-token-hygiene",
        lambda d: record(d, SECRET, "tenant-a-worker-0-bootstrap-token")["inputs"].update(stringData=harness.UNKNOWN),
        None,
    ),
    Case(
        "token-outside-kube-system",
        "bootstrap-token-hygiene",
        lambda d: record(d, SECRET, "tenant-a-worker-0-bootstrap-token")["inputs"]["metadata"].update(namespace="default"),
        "bootstrap token Secrets work only in kube-system",
    ),
    Case(
        "token-secret-misnamed",
        "bootstrap-token-hygiene",
        lambda d: record(d, SECRET, "tenant-a-worker-0-bootstrap-token")["inputs"]["metadata"].update(name="join-token"),
        "the Secret is named 'join-token', not 'bootstrap-token-",
    ),
    Case(
        "token-expiration-without-time-zone",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-a-worker-0").update(expiration="2026-12-02T00:00:00"),
        "expiration '2026-12-02T00:00:00' is not an RFC 3339 time",
    ),
    Case(
        "token-secret-malformed",
        "bootstrap-token-hygiene",
        lambda d: token(d, "tenant-b-worker-0").update({"token-secret": "short"}),
        "token-secret is not [a-z0-9]{16}",
    ),
]


@pytest.mark.parametrize(
    ("create", "target"),
    [
        ("docker exec -i -e A -e B tenant-a-worker-0 sh -s", "tenant-a-worker-0"),
        ("docker exec -it --env=A=1 --user root -w /tmp node sh", "node"),
        ("docker exec --env-file f --detach-keys ctrl-x -- node sh", "node"),
        ("docker exec -iu root node sh", "node"),
        ("docker exec -iuroot node sh", "node"),
        ("docker exec -ie A node sh", "node"),
        ("docker container exec -i node sh", "node"),
        ("docker --log-level debug -D exec node sh", "node"),
        ("LC_ALL=C docker exec node sh", "node"),
        # Another engine than the command's DOCKER_HOST, where the container was made.
        ("docker --context other exec node sh", None),
        ("docker -H=unix:///x exec node sh", None),
        ("docker --host=ssh://other exec node sh", None),
        ("DOCKER_HOST=ssh://other docker exec node sh", None),
        ("DOCKER_CONTEXT=other docker exec node sh", None),
        ("docker exec -i", None),
        ("docker run -i node sh", None),
        ("docker exec 'unclosed", None),
        ("sudo docker exec node sh", None),
    ],
)
def test_the_container_docker_exec_runs_in(create: str, target: str | None) -> None:
    assert exec_target(create) == target


TWO_CLUSTERS = """
clusters:
- {name: one, cluster: {server: https://10.0.0.1:6443}}
- {name: two, cluster: {server: "https://[fd00::2]:6443/"}}
contexts:
- {name: first, context: {cluster: one}}
- {name: second, context: {cluster: two}}
current-context: first
"""


@pytest.mark.parametrize(
    ("inputs", "server"),
    [
        ({"kubeconfig": TWO_CLUSTERS}, "10.0.0.1:6443"),
        ({"kubeconfig": TWO_CLUSTERS, "context": "second"}, "[fd00::2]:6443"),  # the provider's context wins
        ({"kubeconfig": TWO_CLUSTERS, "cluster": "two"}, "[fd00::2]:6443"),  # ... and its cluster
        ({"kubeconfig": TWO_CLUSTERS, "context": "second", "cluster": "one"}, "10.0.0.1:6443"),
        ({"kubeconfig": TWO_CLUSTERS, "cluster": "three"}, None),
        ({"kubeconfig": TWO_CLUSTERS, "cluster": UNKNOWN}, None),  # a preview cannot tell yet
        ({"kubeconfig": TWO_CLUSTERS.replace("context: {cluster: one}", "context: {cluster: {x: 1}}")}, None),
        ({"kubeconfig": TWO_CLUSTERS.replace("current-context: first", "current-context: [first]")}, None),
        # client-go refuses a kubeconfig without a current context, even with a single cluster.
        ({"kubeconfig": TWO_CLUSTERS.replace("current-context: first", "").split("- {name: two")[0]}, None),
        ({"kubeconfig": TWO_CLUSTERS.replace("current-context: first", "")}, None),  # client-go would refuse it
        ({"kubeconfig": TWO_CLUSTERS, "context": "third"}, None),
        ({"kubeconfig": "clusters: [unclosed"}, None),
        ({"kubeconfig": "just text"}, None),
        ({}, None),
    ],
)
def test_the_server_a_providers_kubeconfig_names(inputs: dict, server: str | None) -> None:
    provider = ResourceView("urn:pulumi:dev::p::pulumi:providers:kubernetes::x", K8S_PROVIDER, "x", inputs)
    assert kubeconfig_server(provider) == server


def test_every_rule_has_a_passing_and_a_violating_case() -> None:
    for name in POLICY_NAMES:
        cases = [case for case in CASES if case.policy == name]
        assert any(case.expect is None for case in cases), f"{name} has no passing case"
        assert any(case.expect is not None for case in cases), f"{name} has no violating case"


@pytest.mark.parametrize("case", CASES, ids=[f"{case.policy}:{case.id}" for case in CASES])
def test_rule(case: Case, base: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = copy.deepcopy(base)
    case.change(document)
    through_pack = pack_violations(document, case.policy, case.config)
    messages = [message for _, message in through_pack]
    if case.expect is None:
        assert through_pack == []
    else:
        assert through_pack, f"{case.policy} found nothing"
        assert any(case.expect in message for message in messages), messages
        assert len(messages) == case.findings, messages

    extra = []
    if case.config is not None:
        config = tmp_path / "pack-config.json"
        config.write_text(json.dumps({case.policy: case.config}))
        extra = ["--policy-config", str(config)]
    code, lines, _ = offline(document, tmp_path, capsys, *extra)
    found = offline_messages(lines, case.policy)
    assert sorted((urn, message) for _, urn, message in found) == sorted(through_pack)
    level = "advisory" if case.policy in ADVISORY else "mandatory"
    assert all(found_level == level for found_level, _, _ in found)
    if case.expect is not None and level == "mandatory":
        assert code == 1
    if case.expect is None and not any(line.startswith("mandatory ") for line in lines):
        assert code == 0


def test_the_pack_has_the_issues_rules_at_their_levels() -> None:
    assert set(ISSUE_RULES) <= set(POLICY_NAMES)
    assert set(POLICY_NAMES) - set(ISSUE_RULES) == {"pinned-versions-exceptions", "tenant-provider-isolation"}
    for policy in POLICIES:
        expected = EnforcementLevel.ADVISORY if policy.name in ADVISORY else None  # None: the pack's mandatory
        assert policy.enforcement_level == expected, policy.name
    stack_rules = {p.name for p in POLICIES if isinstance(p, StackValidationPolicy)}
    assert stack_rules == {
        "tenant-worker-isolation",
        "tenant-provider-isolation",
        "unique-tenant-endpoints",
        "control-plane-exposure",
        "privileged-containers-are-nodes",
        "hami-on-tenants-only",
        "gpu-quota-within-inventory",
        "shared-datastore",
    }


def test_dev_stack_has_only_the_advisory_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert policycheck.main(["--stack", "dev"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines, "the dev stack's advisories must print"
    assert all(line.startswith("advisory ") for line in lines), lines
    assert {line.split()[1] for line in lines} == {"shared-datastore", "pinned-versions-exceptions"}


def test_a_preview_of_a_fresh_stack_skips_unknowns_without_failing(dev_preview: harness.Render) -> None:
    report = policycheck.check_document(dev_preview.to_json())
    assert report.mandatory == []
    assert not [v for v in report.violations if "can't run policy" in v.message]
    # Resource policies see inputs: the moving Kamaji chart is still reported. Stack policies see
    # no outputs of the control planes yet, so which tenants share a DataStore is unknown.
    assert {v.policy for v in report.violations} == {"pinned-versions-exceptions"}


def test_a_fresh_preview_gives_stack_policies_no_outputs_behind_unconfigured_providers(dev_preview: harness.Render) -> None:
    records = dev_preview.to_json()["resources"]
    outputs = policycheck.engine_outputs(records, {r["urn"]: r["inputs"] for r in records})
    empty = {(r["type"], r["name"]) for r in records if outputs[r["urn"]] == {} and r["inputs"] != {}}
    # The management provider's kubeconfig comes from kind, a tenant's from its TCP: both unknown.
    assert (TCP, "tenant-a") in empty
    assert ("kubernetes:helm.sh/v3:Release", "tenant-b-hami") in empty
    assert ("kubernetes:helm.sh/v3:Release", "gpu-tenancy-management-kamaji") in empty
    # Commands and containers run through providers configured from the stack: theirs echo inputs.
    assert not {kind for kind, _ in empty} & {COMMAND, CONTAINER}


def test_a_fresh_preview_still_checks_the_workers_it_can_see(dev_preview: harness.Render) -> None:
    document = dev_preview.to_json()
    record(document, CONTAINER, "tenant-a-worker-0")["inputs"]["labels"][0].update(value="tenant-b")
    report = policycheck.check_document(document)
    assert [(v.policy, v.message.split(" but ")[1]) for v in report.mandatory] == [
        ("tenant-worker-isolation", "is labelled gpu-tenancy.io/tenant=tenant-b")
    ]


def test_unknowns_anywhere_in_a_control_plane_are_skipped(base: dict) -> None:
    document = copy.deepcopy(base)

    def blank(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: blank(item) for key, item in value.items()}
        if isinstance(value, list):
            return [blank(item) for item in value]
        return harness.UNKNOWN

    for tenant in ("tenant-a", "tenant-b"):
        tcp = record(document, TCP, tenant)
        tcp["inputs"]["spec"] = blank(tcp["inputs"]["spec"])
    report = policycheck.check_document(document)
    assert report.mandatory == []
    assert not [v for v in report.violations if "can't run policy" in v.message]


def test_masked_secrets_are_reported_and_skipped(dev: harness.Render, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "masked.json"
    path.write_text(json.dumps(dev.to_json()))
    assert policycheck.main(["--resources", str(path)]) == 0
    assert "secret value(s) are masked" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{", "is not JSON"),
        ("[]", "expected a document like tools.render prints"),
        ('{"resources": [{"urn": "x"}]}', "resources[0] lacks a string urn, type or name"),
        ('{"resources": [{"urn": "x", "type": "t", "name": "n"}]}', "'x' is not a Pulumi URN"),
    ],
)
def test_unusable_documents_exit_2(content: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = offline(content, tmp_path, capsys)
    assert code == 2
    assert lines == []
    assert error in err


def test_a_missing_file_or_stack_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert policycheck.main(["--resources", str(tmp_path / "absent.json")]) == 2
    assert "no such resources file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        policycheck.main(["--stack", "no-such-stack"])
    assert stopped.value.code == 2


def test_a_refused_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "Pulumi.broken.yaml"
    config.write_text("config:\n  gpu-tenancy:tenants:\n    - name: Tenant_A\n")
    with pytest.raises(SystemExit) as stopped:
        policycheck.main(["--config", str(config)])
    assert stopped.value.code == 2
    assert "Tenant_A" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"no-such-policy": "mandatory"}, "unknown policies no-such-policy"),
        ({"shared-datastore": "blocking"}, "enforcement level must be one of"),
        ({"all": 3}, "all: enforcement level must be one of"),
        ({"control-plane-exposure": {"nodePortMin": "30000"}}, "control-plane-exposure.nodePortMin"),
        ({"bootstrap-token-hygiene": {"allowedGroups": ["system:masters"]}}, "does not match"),
        ([], "must be a JSON object"),
    ],
)
def test_a_bad_pack_config_exits_2(
    config: Any, error: str, base: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pack-config.json"
    path.write_text(json.dumps(config))
    code, lines, err = offline(base, tmp_path, capsys, "--policy-config", str(path))
    assert code == 2
    assert lines == []
    assert error in err


def test_pack_config_sets_levels_as_the_engine_does(base: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pack-config.json"
    path.write_text(json.dumps({"shared-datastore": {"enforcementLevel": "mandatory"}}))
    code, lines, _ = offline(base, tmp_path, capsys, "--policy-config", str(path))
    assert code == 1
    assert {level for level, _, _ in offline_messages(lines, "shared-datastore")} == {"mandatory"}

    # The pack remediates nothing; the engine reports a remediate policy's violations as mandatory.
    path.write_text(json.dumps({"shared-datastore": "remediate"}))
    code, lines, _ = offline(base, tmp_path, capsys, "--policy-config", str(path))
    assert code == 1
    assert {level for level, _, _ in offline_messages(lines, "shared-datastore")} == {"mandatory"}

    # `all` sets every policy's level; a policy's own entry wins over it.
    path.write_text(json.dumps({"all": "disabled", "pinned-versions-exceptions": "advisory"}))
    code, lines, _ = offline(base, tmp_path, capsys, "--policy-config", str(path))
    assert code == 0
    assert lines and {line.split()[1] for line in lines} == {"pinned-versions-exceptions"}


@pytest.fixture(scope="module")
def multihost() -> dict:
    """Issue 6's example: an existing management cluster, SSH workers, real GPUs, dedicated datastores."""
    return harness.render_file(PROJECT_DIR / "Pulumi.example-multihost.yaml", show_secrets=True).to_json()


def remote_joins(document: dict) -> list[dict]:
    joins = [
        item
        for item in document["resources"]
        if item["type"] == REMOTE_COMMAND and "JOIN_ENDPOINT" in item["inputs"]["triggers"][0]
    ]
    assert joins, "the example joins its workers over SSH"
    return joins


def test_the_multihost_example_passes(multihost: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = offline(multihost, tmp_path, capsys)
    assert code == 0
    # Dedicated and named DataStores: no tenants share one; only Kamaji's moving chart is left.
    assert {line.split()[1] for line in lines} == {"pinned-versions-exceptions"}
    for name in (
        "tenant-worker-isolation",
        "tenant-provider-isolation",
        "unique-tenant-endpoints",
        "gpu-quota-within-inventory",
        "hami-on-tenants-only",
    ):
        assert pack_violations(multihost, name) == []


def test_an_ssh_worker_joining_another_tenant(multihost: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = copy.deepcopy(multihost)
    joins = remote_joins(document)
    mine = joins[0]["inputs"]["triggers"][0]
    other = next(
        join["inputs"]["triggers"][0]
        for join in joins
        if join["inputs"]["triggers"][0]["GPU_TENANCY_TENANT"] != mine["GPU_TENANCY_TENANT"]
    )
    mine["JOIN_ENDPOINT"] = other["JOIN_ENDPOINT"]
    expected = f"the endpoint of tenant '{other['GPU_TENANCY_TENANT']}'"
    assert any(expected in message for _, message in pack_violations(document, "tenant-worker-isolation"))
    code, lines, _ = offline(document, tmp_path, capsys)
    assert code == 1
    assert any(expected in message for _, _, message in offline_messages(lines, "tenant-worker-isolation"))


def test_a_pod_cidr_over_an_ssh_worker_host(multihost: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = copy.deepcopy(multihost)
    host = next(
        join["inputs"]["connection"]["host"]
        for join in remote_joins(document)
        if join["inputs"]["connection"]["host"][0].isdigit()
    )
    tcp = next(item for item in document["resources"] if item["type"] == TCP)
    tcp["inputs"]["spec"]["networkProfile"]["podCidrs"] = [f"{host}/16"]
    expected = f"overlaps worker host {host}"
    assert any(expected in message for _, message in pack_violations(document, "unique-tenant-endpoints"))
    code, lines, _ = offline(document, tmp_path, capsys)
    assert code == 1
    assert any(expected in message for _, _, message in offline_messages(lines, "unique-tenant-endpoints"))


def test_the_rules_read_the_programs_own_labels_and_environment(base: dict) -> None:
    """The names the rules rely on (policies/gpu_tenancy_policies/kinds.py) are what the program writes."""
    container = record(base, CONTAINER, "tenant-a-worker-0")["inputs"]
    labels = {item["label"]: item["value"] for item in container["labels"]}
    assert labels[kinds.TENANT_LABEL] == "tenant-a"
    assert labels[kinds.ROLE_LABEL] == kinds.WORKER_ROLE
    join = env(base, "tenant-a-worker-0-join")
    assert join[kinds.ENV_TENANT] == "tenant-a"
    assert join[kinds.ENV_JOIN_ENDPOINT] == endpoint_of(base, "tenant-a")
    registration_env = env(base, "tenant-a-worker-0-gpu-registration")
    assert {kinds.ENV_TENANT, kinds.ENV_NODE, kinds.ENV_REGISTER, kinds.ENV_GPU_CAPACITY} <= set(registration_env)
    assert record(base, TCP, "tenant-a")["inputs"]["metadata"]["labels"][kinds.TENANT_LABEL] == "tenant-a"
    assert kinds.chart_name(record(base, RELEASE, "tenant-a-hami")["inputs"]["chart"]) == kinds.HAMI_CHART
    for provider in (item for item in base["resources"] if item["type"] == K8S_PROVIDER):
        assert provider["name"] != "default"  # the rules treat `default*` providers as the ambient kubeconfig


@pytest.mark.parametrize(
    ("chart", "name"),
    [
        ("hami", "hami"),
        ("project-hami/hami", "hami"),
        ("oci://ghcr.io/charts/hami/", "hami"),
        ("./charts/hami-2.10.0.tgz", "hami"),
        ("hami-2.10.0-rc.1.tgz", "hami"),  # the version starts at the last '-' before a digit
        ("kamaji-etcd-0.11.0.tgz", "kamaji-etcd"),
        ("hami.tgz", "hami"),
        ("", None),
    ],
)
def test_chart_names_as_the_rules_read_them(chart: str, name: str | None) -> None:
    assert kinds.chart_name(chart) == name


def test_a_helm_v4_chart_is_not_refused_for_inputs_the_engine_never_shows(base: dict) -> None:
    # The provider constructs a v4 Chart and registers the component without inputs (helm/v4/chart.go).
    document = copy.deepcopy(base)
    document["resources"].append(
        {
            "urn": "urn:pulumi:dev::gpu-tenancy::kubernetes:helm.sh/v4:Chart::extra",
            "type": "kubernetes:helm.sh/v4:Chart",
            "name": "extra",
            "parent": None,
            "provider": None,
            "dependencies": [],
            "inputs": {},
            "custom": False,
        }
    )
    assert [v for v in policycheck.check_document(document).violations if "extra" in v.urn] == []


def test_stack_policies_see_what_the_program_registered_not_its_reads(base: dict) -> None:
    # The engine keeps no goal state for a read: the admin kubeconfig Secrets are not among the
    # stack's resources, and the tenant providers' links to them are dropped.
    analyzed = policycheck.analyze(base)
    reads = {item["urn"] for item in base["resources"] if "read" in item}
    assert reads and not reads & {resource.urn for resource in analyzed.stack_resources}
    assert all(not reads & {dependency.urn for dependency in resource.dependencies} for resource in analyzed.stack_resources)
    assert len(analyzed.stack_resources) == len(base["resources"]) - len(reads)


def test_policies_get_numbers_as_the_analyzer_decodes_them(base: dict) -> None:
    # pulumi_policy decodes the engine's protobuf numbers as floats: 6443 arrives as 6443.0.
    analyzed = policycheck.analyze(base)
    tcp = next(resource for resource in analyzed.resources if resource.resource_type == TCP)
    port = tcp.props["spec"]["networkProfile"]["port"]
    assert isinstance(port, float) and port == 6443
