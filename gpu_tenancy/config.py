"""The stack configuration contract (namespace ``gpu-tenancy``), validated before any resource exists.

``StackConfig.load(raw)`` takes the stack's config keys as plain values (what
``pulumi.Config().get_object`` returns) and either returns a frozen model or raises
``ConfigError``, whose message names every offending key path and what is allowed.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import socket
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, ClassVar, Final, Literal

import yaml
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from . import addressing, gpus, kubeconfig, versions
from .conventions import KAMAJI_DEFAULT_DATA_STORE
from .versions import kubernetes_minor

CONFIG_NAMESPACE = "gpu-tenancy"

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DOCKER_NETWORK = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
# [registry[:port]/]repository[:tag][@sha256:digest], as the OCI distribution spec allows.
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._/-][a-z0-9]+)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)


# A tenant's name is its namespace in the management cluster: namespaces that exist there already,
# or that the program's charts install into, would be shared with (and deleted with) the tenant.
_RESERVED_TENANT_NAMES: Final = ("default", "cert-manager", "metallb-system", "kamaji-system", "local-path-storage")
# A quota namespace is created in the tenant; these exist already or belong to its charts.
_RESERVED_QUOTA_NAMESPACES: Final = ("tigera-operator", "calico-system", "calico-apiserver")
# A dedicated datastore is the kamaji-etcd release `<tenant>-etcd`, whose pre-delete hook Job is
# `<release>-etcd-teardown` (clastix/kamaji-etcd:charts/kamaji-etcd/templates/etcd_job_postdelete.yaml);
# a Job's name becomes a pod label, at most 63 characters.
_MAX_DEDICATED_TENANT_NAME: Final = 44
# kind names the node container `<cluster>-control-plane`, which becomes the node's hostname label
# (at most 63 characters).
_MAX_KIND_CLUSTER_NAME: Final = 49


class _DuplicateKey(Exception):
    """A JSON object that gives one key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name, value in pairs:
        if name in seen:
            raise _DuplicateKey(name)
        seen[name] = value
    return seen


def config_value(text: str, key: str) -> Any:
    """The config value of ``key`` as the program reads it: the CLI hands every value over as
    text, JSON for objects, lists, numbers and booleans, so text that parses as JSON is read as JSON.

    Text Python will not hold as JSON (an integer of thousands of digits, nesting deeper than it
    recurses) stays text, and validation then names the key. JSON text that gives a key twice
    (``pulumi config set network '{"pool": ..., "pool": ...}'``) raises ConfigError: neither may
    silently win, as in a stack file.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as duplicate:
        raise ConfigError([(key, f"gives the key {duplicate.args[0]!r} twice in its JSON; keep one")]) from None
    except (ValueError, RecursionError):
        return text


def misspelt_namespaces(keys: Iterable[str]) -> list[tuple[str, str]]:
    """Config keys in our namespace spelt another way (``gpu_tenancy:tenants``), which the program
    would otherwise ignore, deploying a stack without what they say."""
    return [
        (key, f"is not in the {CONFIG_NAMESPACE} namespace; did you mean {CONFIG_NAMESPACE}:{key.partition(':')[2]}?")
        for key in keys
        if ":" in key and (namespace := key.partition(":")[0]) != CONFIG_NAMESPACE and _resembles_ours(namespace)
    ]


def _resembles_ours(namespace: str) -> bool:
    """Our namespace with other separators or case, or one typo away (``gpu-tennancy``).

    One edit only: a sibling project's namespace (``gpu-tenancy-ops``, ``tenancy``) may share the
    config environment, and refusing it would block every ``pulumi up``.
    """
    normalised = re.sub(r"[\W_]+", "", namespace.lower())
    return _one_edit_apart(normalised, CONFIG_NAMESPACE.replace("-", ""))


def _one_edit_apart(a: str, b: str) -> bool:
    """Equal, or one letter added, dropped, changed or two neighbours swapped."""
    if a == b:
        return True
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        swapped = len(diff) == 2 and diff[1] == diff[0] + 1 and (a[diff[0]], a[diff[1]]) == (b[diff[1]], b[diff[0]])
        return len(diff) == 1 or swapped
    shorter, longer = sorted((a, b), key=len)
    return len(longer) - len(shorter) == 1 and any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))


class ConfigError(Exception):
    """Stack configuration that cannot be deployed; ``problems`` holds (key path, message) pairs."""

    def __init__(self, problems: Iterable[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = [f"  {path}: {message}" if path else f"  {message}" for path, message in self.problems]
        return f"invalid {CONFIG_NAMESPACE} stack configuration:\n" + "\n".join(lines)


def _dns_1035(value: str) -> str:
    if not _DNS_1035.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1035 label: lowercase letters, digits and '-', "
            "starting with a letter, ending with a letter or digit, at most 63 characters"
        )
    return value


def _tenant_name(value: str) -> str:
    if value in _RESERVED_TENANT_NAMES or value.startswith("kube-"):
        raise ValueError(
            f"{value!r} is a namespace the management cluster has already or gives to its services; "
            f"a tenant name must not be kube-* or one of {', '.join(_RESERVED_TENANT_NAMES)}"
        )
    return value


def _quota_namespace(value: str) -> str:
    if value.startswith("kube-") or value in _RESERVED_QUOTA_NAMESPACES:
        raise ValueError(
            f"{value!r} is a namespace every tenant cluster has already or its network chart uses; "
            f"use default or your own, not kube-* or one of {', '.join(_RESERVED_QUOTA_NAMESPACES)}"
        )
    return value


def _kind_cluster_name(value: str) -> str:
    if len(value) > _MAX_KIND_CLUSTER_NAME:
        raise ValueError(
            f"{value!r} is longer than {_MAX_KIND_CLUSTER_NAME} characters: its node "
            f"{value}-control-plane must fit a 63-character label"
        )
    return value


def _strict_address(value: Any) -> Any:
    # pydantic would take an integer as an address (2886926290 is 172.18.255.210).
    if not isinstance(value, str | ipaddress.IPv4Address | ipaddress.IPv4Network):
        raise ValueError("must be written as a string, e.g. 172.18.255.210 or 10.244.0.0/16")
    return value


def _strict_cidr(value: Any) -> Any:
    # ipaddress reads "10.244.0.0" as a /32, which would then be reported as too small.
    if isinstance(value, str) and "/" not in value:
        raise ValueError(f"{value!r} has no prefix length; write a CIDR such as 10.244.0.0/16")
    if isinstance(value, str):
        try:
            ipaddress.IPv4Network(value)
        except ValueError as error:  # pydantic's own message names neither the host bits nor the mask
            try:
                network = ipaddress.IPv4Network(value, strict=False)
            except ValueError:
                raise ValueError(f"{value!r} is not an IPv4 CIDR: {error}") from None
            raise ValueError(f"{value!r} has host bits set: the network is {network}") from None
    return _strict_address(value)


def _pod_cidr(value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    _routable(value)
    # kube-controller-manager cuts a /24 per node out of the cluster CIDR.
    if value.prefixlen > 24:
        raise ValueError(f"{value} is smaller than a /24: the controller-manager gives every node a /24 of it")
    return value


def _service_cidr(value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    _routable(value)
    # Kamaji puts CoreDNS on the 10th address.
    if value.prefixlen > 28:
        raise ValueError(f"{value} is smaller than a /28: Kamaji gives CoreDNS its 10th address")
    return value


# kube-apiserver refuses a service range of more than 20 bits while its legacy bitmap allocator still
# runs: unless MultiCIDRServiceAllocator (on from v1.33) and DisableAllocatorDualWrite (on by
# default from v1.34) are both enabled (cmd/kube-apiserver/app/options/validation.go).
_LEGACY_SERVICE_ALLOCATOR_BEFORE: Final = (1, 34)


# Ranges no load balancer announces and no cluster routes (RFC 6890). ipaddress's is_multicast and
# friends hold for a network only when both its ends are inside, so 224.0.0.0/3 or 169.0.0.0/8 pass them.
_UNROUTABLE: Final = {
    ipaddress.IPv4Network("0.0.0.0/8"): "unspecified",  # RFC 1122: "this host on this network", never a destination
    ipaddress.IPv4Network("127.0.0.0/8"): "loopback",
    ipaddress.IPv4Network("169.254.0.0/16"): "link-local",
    ipaddress.IPv4Network("224.0.0.0/4"): "multicast",
    ipaddress.IPv4Network("240.0.0.0/4"): "reserved",  # the limited broadcast address included
}


def _routable(value: ipaddress.IPv4Network) -> None:
    for special, kind in _UNROUTABLE.items():
        if not value.overlaps(special):
            continue
        if value.subnet_of(special):
            what = "address" if value.prefixlen == 32 else "range"
            shown = value.network_address if value.prefixlen == 32 else value
            raise ValueError(
                f"{shown} is a loopback, link-local, multicast, unspecified or reserved {what}; use a private one (RFC 1918)"
            )
        raise ValueError(f"{value} takes in the {kind} range {special}; use a private one (RFC 1918)")


def _konnectivity(value: str) -> str:
    # An image tag: no build metadata, since '+' is not a tag character.
    if not value.startswith("v") or "+" in value:
        raise ValueError(f"{value!r}: Konnectivity images are tagged vX.Y.Z, e.g. v0.34.0")
    return value


def _dns_1123(value: str) -> str:
    if not _DNS_1123.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


def _kubernetes_version(value: str) -> str:
    if kubernetes_minor(value) > versions.MAX_KUBERNETES_MINOR:
        newest = "v{}.{}".format(*versions.MAX_KUBERNETES_MINOR)
        raise ValueError(f"{value} is newer than Kamaji supports; use {newest}.x or older")
    if kubernetes_minor(value) < versions.MIN_KUBERNETES_MINOR:
        oldest = "v{}.{}".format(*versions.MIN_KUBERNETES_MINOR)
        raise ValueError(f"{value} is older than Kamaji supports for tenants; use {oldest}.0 or newer")
    return value


def _pinned_image(value: str) -> str:
    if not _IMAGE.fullmatch(value) or (":" not in value.rsplit("/", 1)[-1] and "@" not in value):
        raise ValueError(f"{value!r} is not an image with an explicit tag or digest, e.g. kindest/node:v1.36.4")
    if value.split("@", maxsplit=1)[0].endswith(":latest"):
        raise ValueError(f"{value!r} uses the moving tag 'latest'; pin a version or digest")
    return value


def _pool(value: str) -> str:
    for network in addressing.AddressPool.parse(value).networks():
        _routable(network)
    return value


def _routable_address(value: ipaddress.IPv4Address) -> ipaddress.IPv4Address:
    _routable(ipaddress.IPv4Network(value))
    return value


def _data_store(value: str) -> str:
    if value in ("shared", "dedicated"):
        return value
    if len(value) > 253 or not _DNS_1123_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is neither 'shared', 'dedicated' nor the name of a DataStore (a DNS-1123 subdomain)")
    return value


def _docker_network(value: str) -> str:
    if not _DOCKER_NETWORK.fullmatch(value):
        raise ValueError(f"{value!r} is not a docker network name")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _version(value: str) -> str:
    if not versions.EXACT_VERSION.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an exact version: MAJOR.MINOR.PATCH with an optional v, pre-release and "
            "build, e.g. v1.21.2 or 0.0.0+latest (a range would install whatever is newest at each pulumi up)"
        )
    return value


def _chart_at_least(chart: str, oldest: tuple[int, int, int], why: str) -> Callable[[str], str]:
    """A validator refusing versions of ``chart`` older than ``oldest``, the first with ``why``."""

    def check(value: str) -> str:
        if versions.older_than(value, oldest):
            raise ValueError(f"{chart} chart {value} is older than {'.'.join(map(str, oldest))}, the first {why}")
        return value

    return check


# The oldest HAMi chart with what the program relies on: mockDevicePlugin (HAMi#1534) and a
# scheduler that reads the JSON device registration the program writes (from v2.8.0 the only form
# its scheduler parses).
OLDEST_HAMI_CHART: Final = (2, 8, 0)
# HAMi charts write the device config's `vnpus` as a nested object from 2.9.0 on; mock device
# plugin builds up to 1.0.1 read only the flat layout and exit (see versions.DEFAULT_MOCK_DEVICE_PLUGIN_TAG).
NESTED_DEVICE_CONFIG: Final = (2, 9, 0)
_FLAT_CONFIG_MOCK: Final = re.compile(r"v?1\.0\.[01](?:@sha256:[0-9a-f]{64})?")
_hami_chart = _chart_at_least("HAMi", OLDEST_HAMI_CHART, "with the mock device plugin and the JSON device registration")
# The TCP Services ask MetalLB for their VIPs with metallb.io/loadBalancerIPs; older releases read
# only the metallb.universe.tf prefix (MetalLB 0.14.9 release notes, metallb#2495), and with the
# pool's autoAssign off such a Service would never get an address.
OLDEST_METALLB_CHART: Final = (0, 14, 9)
_metallb_chart = _chart_at_least("MetalLB", OLDEST_METALLB_CHART, "that reads the metallb.io/loadBalancerIPs annotation")
# The program installs Calico's CRDs from their own chart, crd.projectcalico.org.v1, first published
# with Calico 3.32 (3.31's upgrade guide still applies operator-crds.yaml with kubectl).
OLDEST_CALICO_CHART: Final = (3, 32, 0)
_calico_chart = _chart_at_least("Calico", OLDEST_CALICO_CHART, "with its CRDs as a chart of their own")
# cert-manager's CRDs come with its chart through crds.enabled, which replaced installCRDs in 1.15
# (cert-manager v1.15.0 release notes; cert-manager/website#1491). An older chart ignores it and
# installs no CRDs, so Kamaji's Issuer and Certificate would fail.
OLDEST_CERT_MANAGER_CHART: Final = (1, 15, 0)
_cert_manager_chart = _chart_at_least("cert-manager", OLDEST_CERT_MANAGER_CHART, "with the crds.enabled value")


# A Docker image tag, optionally with the digest that pins what it names.
_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[0-9a-f]{64})?")


def _image_tag(value: str) -> str:
    if not _IMAGE_TAG.fullmatch(value):
        raise ValueError(f"{value!r} is not an image tag: a tag such as 1.0.2, optionally with @sha256:<64 hex digits>")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_1035)]
HostLabel = Annotated[str, AfterValidator(_dns_1123)]
KubernetesVersion = Annotated[str, AfterValidator(_kubernetes_version)]
PinnedImage = Annotated[str, AfterValidator(_pinned_image)]
ChartVersion = Annotated[str, AfterValidator(_version)]
PodCidr = Annotated[ipaddress.IPv4Network, BeforeValidator(_strict_cidr), AfterValidator(_pod_cidr)]
ServiceCidr = Annotated[ipaddress.IPv4Network, BeforeValidator(_strict_cidr), AfterValidator(_service_cidr)]


class _Model(BaseModel):
    """Config models: camelCase keys, unknown keys rejected with the allowed ones listed."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = [field.alias or name for name, field in cls.model_fields.items()]
            unknown = [key for key in data if key not in allowed]
            if unknown:
                raise ValueError(
                    f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
                )
        return data


NonBlank = Annotated[str, AfterValidator(_not_blank)]


def _at(document: Mapping[str, Any], path: str) -> Any:
    """The value at ``tenants[0].workers[1].ssh.privateKey`` in ``document``, or None."""
    value: Any = document
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        if name and isinstance(value, Mapping):
            value = value.get(name)
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    return value


def secure_placeholder(ciphertext: str) -> str:
    """What the offline tools read where a stack file holds an encrypted (``secure:``) value."""
    return f"<secure value {ciphertext[:12]}…>"


def is_secure_placeholder(value: object) -> bool:
    """Whether ``value`` stands for a value the offline tools could not decrypt: its own checks
    wait for ``pulumi up``, which hands the program the plain value."""
    return isinstance(value, str) and value.startswith("<secure value ") and value.endswith("…>")


def _kubeconfig(value: str) -> str:
    if is_secure_placeholder(value):
        return value
    # The program's provider, the policy pack and the managementKubeconfig output all take the
    # file's contents; pulumi-kubernetes would take a path too, but only fail once it connects.
    try:
        kubeconfig.server(value)
    except ValueError as error:
        reason = str(error)
    except yaml.YAMLError:
        reason = "it is not YAML"  # the parser's message would quote the secret text
    else:
        return value
    raise ValueError(
        f"is not a kubeconfig the management cluster can be reached with ({reason}); give the file's "
        "contents, not its path: pulumi config set --secret --path 'gpu-tenancy:management.kubeconfig' < FILE"
    )


def _ssh_private_key(value: str) -> str:
    if is_secure_placeholder(value):
        return value
    # pulumi-command parses the key with x/crypto's ssh.ParsePrivateKey when it first connects,
    # after the control planes are made: OpenSSH's format or PEM (PKCS #1, PKCS #8, SEC 1).
    data = value.encode()
    try:
        if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
            serialization.load_ssh_private_key(data, password=None)
        else:
            serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography's word for an encrypted key without a password
        raise ValueError(
            "is protected by a passphrase, which the program does not take: give a copy of the key without "
            "one (ssh-keygen -p -N '' -f COPY)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(
            "is not an SSH private key (-----BEGIN ... PRIVATE KEY-----): give the key file's contents, not its "
            "path or the public key: pulumi config set --secret --path '...ssh.privateKey' < KEY_FILE"
        ) from None
    return value


# The login goes to sshd as it is (directory users look like jdoe@corp.example.com): only what
# cannot be one name is refused.
_SSH_USER = re.compile(r"^[^\s:\x00-\x1f\x7f]+$")
# A host name as resolvers take it (underscores included), or an address; never host:port or user@host.
_INET_ATON_PART = re.compile(r"^(?:0[xX][0-9a-fA-F]*|[0-9]+)$")
_SSH_HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$")
# A public key as authorized_keys and known_hosts write it: its type, then its base64 body.
_SSH_PUBLIC_KEY = re.compile(
    r"(?:^|\s)(ssh-(?:ed25519|rsa|dss)|ecdsa-sha2-nistp(?:256|384|521)|sk-\S+)\s+([A-Za-z0-9+/]+={0,2})(?:\s|$)"
)


def _ssh_host(value: str) -> str:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return _ssh_host_name(value)
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        # The same machine as the IPv4 address, which the checks on other hosts and CIDRs compare.
        raise ValueError(f"{value!r} is the IPv4 address {mapped} written as IPv6; write {mapped}")
    if address.is_unspecified or address.is_multicast:
        raise ValueError(f"{value!r} is an unspecified or multicast address, not a machine's")
    for special, kind in _UNROUTABLE.items():
        # Loopback (pulumi up on the host itself) and link-local addresses are machines' own.
        if kind not in ("loopback", "link-local") and address in special:
            raise ValueError(f"{value!r} is in the {kind} range {special}, not a machine's address")
    return value


def _ssh_host_name(value: str) -> str:
    labels = value.removesuffix(".").split(".")
    if len(value) > 253 or not _SSH_HOST.fullmatch(value) or any(len(label) > 63 for label in labels):
        raise ValueError(
            f"{value!r} is neither an IP address nor a host name (labels of at most 63 characters); "
            "give the port as ssh.port and the user as ssh.user"
        )
    if len(labels) <= 4 and all(_INET_ATON_PART.fullmatch(label) for label in labels):
        # RFC 1123 keeps such names out of DNS; the C resolver reads them as addresses (parts with a
        # leading 0 in octal, 0x in hex, fewer than four parts filled in) and Go's as names, so one
        # machine could take two spellings or a join go to the wrong host.
        meant = _inet_aton(value)
        if meant is None:
            raise ValueError(f"{value!r} is not an IPv4 address: four decimal parts of 0-255, without leading zeros")
        raise ValueError(f"{value!r} is {meant} to the C library's resolver and a host name to Go's; write {meant}")
    return value


def _inet_aton(value: str) -> str | None:
    """The address the C library's resolver takes ``value`` for, if any."""
    try:
        return socket.inet_ntoa(socket.inet_aton(value))
    except OSError:
        return None


def _ssh_user(value: str) -> str:
    if not _SSH_USER.fullmatch(value):
        raise ValueError(f"{value!r} is not a login name: no spaces, control characters or ':'")
    return value


def _ssh_host_key(value: str) -> str:
    match = _SSH_PUBLIC_KEY.search(value)
    if not match or _key_blob_type(match[2]) != match[1]:
        raise ValueError(
            "is not a public key as known_hosts holds it (a type such as ssh-ed25519, then the base64 key "
            "of that type): copy a line of ssh-keyscan <host>"
        )
    return value


def _key_blob_type(blob: str) -> str | None:
    """The key type an SSH public key blob names first (RFC 4253 6.6: a length-prefixed string)."""
    try:
        raw = base64.b64decode(blob, validate=True)
    except ValueError:
        return None
    length = int.from_bytes(raw[:4], "big")
    return raw[4 : 4 + length].decode("ascii", "replace") if len(raw) >= 4 + length else None


class Management(_Model):
    # kind: the program creates a kind cluster on this Docker host; existing: Kamaji goes into the
    # cluster `kubeconfig` points at.
    mode: Literal["kind", "existing"] = "kind"
    name: Annotated[str, AfterValidator(_dns_1035), AfterValidator(_kind_cluster_name)] = "kamaji"
    node_image: PinnedImage = versions.DEFAULT_NODE_IMAGE
    kubeconfig: Annotated[str, AfterValidator(_not_blank), AfterValidator(_kubeconfig)] | None = Field(None, repr=False)
    # An existing cluster may run cert-manager already; installing a second one fails on its CRDs.
    install_cert_manager: StrictBool = True


class Versions(_Model):
    cert_manager: Annotated[str, AfterValidator(_version), AfterValidator(_cert_manager_chart)] = versions.DEFAULT_CHART_VERSIONS[
        "certManager"
    ]
    metallb: Annotated[str, AfterValidator(_version), AfterValidator(_metallb_chart)] = versions.DEFAULT_CHART_VERSIONS["metallb"]
    kamaji: ChartVersion = versions.DEFAULT_CHART_VERSIONS["kamaji"]
    kamaji_etcd: ChartVersion = versions.DEFAULT_CHART_VERSIONS["kamajiEtcd"]
    hami: Annotated[str, AfterValidator(_version), AfterValidator(_hami_chart)] = versions.DEFAULT_CHART_VERSIONS["hami"]
    calico: Annotated[str, AfterValidator(_version), AfterValidator(_calico_chart)] = versions.DEFAULT_CHART_VERSIONS["calico"]
    # Kamaji pairs Konnectivity with the tenant minor (v0.<minor>.0); pin an older one here when
    # that image is not yet published for the newest Kubernetes minor.
    konnectivity: Annotated[str, AfterValidator(_version), AfterValidator(_konnectivity)] | None = None
    mock_device_plugin: Annotated[str, AfterValidator(_image_tag)] = versions.DEFAULT_MOCK_DEVICE_PLUGIN_TAG

    # Field validators that read an earlier field (``info.data``, absent when that one failed) put
    # the error at the key to change, not at the object holding both.
    @field_validator("mock_device_plugin")
    @classmethod
    def _mock_reads_the_charts_device_config(cls, tag: str, info: ValidationInfo) -> str:
        hami = info.data.get("hami")
        if hami is not None and _FLAT_CONFIG_MOCK.fullmatch(tag) and not versions.older_than(hami, NESTED_DEVICE_CONFIG):
            raise ValueError(
                f"mockDevicePlugin {tag} cannot read the device config HAMi charts write from "
                f"{'.'.join(map(str, NESTED_DEVICE_CONFIG))} on (hami {hami} here; mock-device-plugin#18): "
                "its device plugin exits and no card is registered; use latest, pinned as latest@sha256:<digest>"
            )
        return tag


class Network(_Model):
    pool: Annotated[str, AfterValidator(_pool)] | None = None
    # With an existing management cluster, the docker network from which docker workers reach
    # the tenant endpoints (with kind they join kind's network).
    worker_network: Annotated[str, AfterValidator(_docker_network)] | None = None
    # With an existing management cluster whose nodes are all control planes (a single kubeadm
    # node), MetalLB must announce from them: kubeadm marks them exclude-from-external-load-balancers.
    announce_from_control_planes: StrictBool = False

    @cached_property
    def address_pool(self) -> addressing.AddressPool | None:
        return addressing.AddressPool.parse(self.pool) if self.pool else None


class Gpu(_Model):
    model: str
    count: StrictInt = Field(1, ge=1)

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        if model not in gpus.CATALOGUE:
            raise ValueError(f"unknown GPU model {model!r}; known models: {gpus.known_models()}")
        return model


class SshTarget(_Model):
    """A real host reached over SSH, as root through passwordless sudo."""

    host: Annotated[str, AfterValidator(_ssh_host)]
    user: Annotated[str, AfterValidator(_ssh_user)]
    private_key: Annotated[str, AfterValidator(_not_blank), AfterValidator(_ssh_private_key)] = Field(repr=False)
    port: StrictInt = Field(22, ge=1, le=65535)
    # The host's public key as in known_hosts; without it pulumi-command checks no host key at all.
    host_key: Annotated[str, AfterValidator(_ssh_host_key)] | None = None

    @cached_property
    def address(self) -> ipaddress.IPv4Address | None:
        """The host as an IPv4 address, when it is written as one."""
        try:
            return ipaddress.IPv4Address(self.host)
        except ValueError:
            return None


# The largest GPU servers hold 16 cards; the bound also keeps validation from building millions of
# card models for a typo.
MAX_CARDS_PER_WORKER: Final = 16


class Worker(_Model):
    name: HostLabel
    gpus: list[Gpu] = []
    ssh: SshTarget | None = None

    @field_validator("gpus")
    @classmethod
    def _cards_on_one_machine(cls, declared: list[Gpu]) -> list[Gpu]:
        total = sum(gpu.count for gpu in declared)
        if total > MAX_CARDS_PER_WORKER:
            raise ValueError(f"declare {total} cards on one worker; a machine holds at most {MAX_CARDS_PER_WORKER}")
        return declared

    @cached_property
    def cards(self) -> list[gpus.Card]:
        return gpus.worker_cards(self.name, [(gpu.model, gpu.count) for gpu in self.gpus])


class Quota(_Model):
    gpumem: StrictInt = Field(ge=0, description="MiB, summed over the tenant's GPU pods")
    gpucores: StrictInt = Field(ge=0, description="percent of a card, summed over the tenant's GPU pods")
    namespace: Annotated[str, AfterValidator(_dns_1035), AfterValidator(_quota_namespace)] = "default"


class Tenant(_Model):
    name: Annotated[str, AfterValidator(_dns_1035), AfterValidator(_tenant_name)]
    kubernetes_version: KubernetesVersion = versions.DEFAULT_KUBERNETES_VERSION
    vip: Annotated[ipaddress.IPv4Address, BeforeValidator(_strict_address), AfterValidator(_routable_address)] | None = None
    pod_cidr: PodCidr = ipaddress.IPv4Network("10.244.0.0/16")
    service_cidr: ServiceCidr = ipaddress.IPv4Network("10.96.0.0/16")
    workers: list[Worker] = []
    quota: Quota | None = None
    # shared: Kamaji's default DataStore; dedicated: a kamaji-etcd of the tenant's own; any other
    # value names an existing DataStore.
    data_store: Annotated[str, AfterValidator(_data_store)] = "shared"
    # mock: HAMi's mock device plugin advertises the declared cards; nvidia: the real plugin.
    gpu_mode: Literal["mock", "nvidia"] = "mock"

    @field_validator("service_cidr")
    @classmethod
    def _service_range_for_the_version(cls, cidr: ipaddress.IPv4Network, info: ValidationInfo) -> ipaddress.IPv4Network:
        version = info.data.get("kubernetes_version")
        if version is not None and kubernetes_minor(version) < _LEGACY_SERVICE_ALLOCATOR_BEFORE and cidr.prefixlen < 12:
            raise ValueError(
                f"{cidr} is larger than a /12, the most kube-apiserver {version} takes (v1.34 lifts the limit; kubernetesVersion)"
            )
        return cidr

    @property
    def cards(self) -> list[gpus.Card]:
        return [card for worker in self.workers for card in worker.cards]

    @property
    def cidrs(self) -> tuple[tuple[str, ipaddress.IPv4Network], ...]:
        """The tenant's networks by config key, for the checks that apply to both."""
        return (("podCidr", self.pod_cidr), ("serviceCidr", self.service_cidr))


class StackConfig(_Model):
    """The whole ``gpu-tenancy:*`` namespace of one stack."""

    KEYS: ClassVar[tuple[str, ...]] = ("management", "versions", "network", "tenants")

    management: Management = Management()
    versions: Versions = Versions()
    network: Network = Network()
    tenants: list[Tenant] = []

    @classmethod
    def load(cls, raw: dict[str, Any], secret_keys: Collection[str] = ()) -> StackConfig:
        """Validate the stack's ``gpu-tenancy`` keys (without the namespace prefix).

        ``secret_keys``: the keys the stack marks secret (a secret anywhere in them): text given
        where an object or list belongs under them is never repeated in an error.
        """
        try:
            config = cls.model_validate(raw)
        except ValidationError as error:
            raise ConfigError(_pydantic_problems(error, secret_keys)) from None
        problems = list(config._cross_checks())
        if problems:
            raise ConfigError(problems)
        return config

    def plaintext_secrets(self, secret_keys: Collection[str], stack_file: Mapping[str, Any] | None = None) -> list[str]:
        """The secrets this config holds in plain text, by path: under a key the stack does not
        mark secret, or written out in ``stack_file`` (its ``gpu-tenancy`` keys as read offline,
        encrypted values as placeholders) at their own path. A secret set with ``--path`` marks its
        whole top-level key, so only the file tells a plain key beside an encrypted one."""
        secrets = []
        if self.management.kubeconfig is not None:
            secrets.append(("management.kubeconfig", self.management.kubeconfig))
        secrets.extend((f"{path}.privateKey", ssh.private_key) for path, ssh in self._ssh_targets())
        return [
            path
            for path, value in secrets
            if path.split(".")[0].split("[")[0] not in secret_keys
            or (stack_file is not None and not is_secure_placeholder(value) and _at(stack_file, path) == value)
        ]

    def tenant(self, name: str) -> Tenant:
        return next(tenant for tenant in self.tenants if tenant.name == name)

    def _cross_checks(self) -> Iterable[tuple[str, str]]:
        yield from self._management()
        yield from self._data_stores()
        yield from self._workers()
        yield from self._mock_node_memory()
        yield from self._unique_names()
        yield from self._vips()
        yield from self._cidrs()
        yield from self._quotas()

    def _management(self) -> Iterable[tuple[str, str]]:
        if self.management.mode == "existing" and self.management.kubeconfig is None:
            yield (
                "management.kubeconfig",
                "is required when management.mode is existing (the management cluster's kubeconfig, as a secret)",
            )
        if self.management.mode == "existing" and self.network.announce_from_control_planes and self.network.pool is None:
            yield (
                "network.announceFromControlPlanes",
                (
                    "needs network.pool: without a pool the program installs no MetalLB "
                    "(the cluster's own load balancer serves the VIPs)"
                ),
            )
        if self.management.mode == "existing":
            # Keys of the kind cluster, which an existing cluster does not have: set, they would do nothing.
            for field, key in (("name", "name"), ("node_image", "nodeImage")):
                if field in self.management.model_fields_set:
                    yield f"management.{key}", "is only used with management.mode kind; an existing cluster has its own"
        if self.management.mode == "kind":
            if not self.management.install_cert_manager:
                yield (
                    "management.installCertManager",
                    "can be false only with management.mode existing; the kind cluster this stack creates has no cert-manager",
                )
            if self.management.kubeconfig is not None:
                yield "management.kubeconfig", "is only used with management.mode existing; kind mode creates its own cluster"
            if self.network.announce_from_control_planes:
                yield (
                    "network.announceFromControlPlanes",
                    "is only used with management.mode existing; kind's one node always announces the VIPs",
                )
            if self.network.worker_network is not None:
                yield (
                    "network.workerNetwork",
                    "is only used with management.mode existing; with kind, docker workers join kind's network",
                )

    def _data_stores(self) -> Iterable[tuple[str, str]]:
        # A dedicated DataStore is the kamaji-etcd release `<tenant>-etcd`, made and removed with its tenant.
        dedicated = {f"{other.name}-etcd": j for j, other in enumerate(self.tenants) if other.data_store == "dedicated"}
        for i, tenant in enumerate(self.tenants):
            if tenant.data_store == "dedicated" and len(tenant.name) > _MAX_DEDICATED_TENANT_NAME:
                yield (
                    f"tenants[{i}].name",
                    (
                        f"{tenant.name!r} is longer than {_MAX_DEDICATED_TENANT_NAME} characters, the most a tenant with "
                        f"dataStore dedicated may have: its etcd is the Helm release and StatefulSet {tenant.name}-etcd"
                    ),
                )
            owner = dedicated.get(tenant.data_store)
            if owner is not None and owner != i:
                yield (
                    f"tenants[{i}].dataStore",
                    (
                        f"{tenant.data_store!r} is the dedicated DataStore of tenants[{owner}], created and removed with "
                        "that tenant; use shared, dedicated, or a DataStore this stack does not manage"
                    ),
                )
            if self.management.mode == "kind" and tenant.data_store not in ("shared", "dedicated"):
                yield (
                    f"tenants[{i}].dataStore",
                    (
                        f"'{KAMAJI_DEFAULT_DATA_STORE}' is Kamaji's default DataStore, which shared uses: write shared"
                        if tenant.data_store == KAMAJI_DEFAULT_DATA_STORE
                        else f"{tenant.data_store!r} names an existing DataStore, but the kind management cluster this "
                        "stack creates has only Kamaji's default one: use shared or dedicated"
                    ),
                )

    def _workers(self) -> Iterable[tuple[str, str]]:
        for i, tenant in enumerate(self.tenants):
            if len({worker.ssh is None for worker in tenant.workers}) > 1:
                yield (
                    f"tenants[{i}].workers",
                    (
                        "mix docker workers and ssh hosts: the tenant's kubelet and kube-proxy settings are one "
                        "per tenant, and docker workers need kind's nested-node ones (swap, eviction, conntrack) "
                        "that real hosts must not get; put them in separate tenants"
                    ),
                )
            for j, worker in enumerate(tenant.workers):
                if worker.ssh is not None:
                    continue
                path = f"tenants[{i}].workers[{j}]"
                if len(worker.name) < 2:
                    # moby's container names: [a-zA-Z0-9][a-zA-Z0-9_.-]+ (daemon/names/names.go).
                    yield (
                        f"{path}.name",
                        f"{worker.name!r} is one character; a docker worker's name is its container's, which "
                        "Docker requires to have two or more",
                    )
                if self.management.mode == "existing" and self.network.worker_network is None:
                    yield (
                        path,
                        (
                            "is a docker worker (no ssh) but the management cluster is an existing one: set "
                            "network.workerNetwork to the docker network from which the tenant endpoints are reachable, "
                            "or give the worker ssh"
                        ),
                    )
                if tenant.gpu_mode == "nvidia" and worker.gpus:
                    yield (
                        path,
                        (
                            "is a docker worker with gpus under gpuMode nvidia: a kindest/node container has no GPU for "
                            "the real device plugin; give it ssh to a GPU host, or use gpuMode mock"
                        ),
                    )

    def _mock_node_memory(self) -> Iterable[tuple[str, str]]:
        limit = gpus.mock_memory_limit_mib()
        for i, tenant in enumerate(self.tenants):
            if tenant.gpu_mode != "mock":
                continue
            for j, worker in enumerate(tenant.workers):
                memory, _ = gpus.inventory_totals(worker.cards)
                if memory > limit:
                    yield (
                        f"tenants[{i}].workers[{j}].gpus",
                        (
                            f"declare {memory} MiB of GPU memory on one node; under gpuMode mock at most {limit} MiB fit: "
                            "HAMi's mock device plugin lists one kubelet device per MiB and kubelet accepts a 4 MiB list, "
                            "beyond which the node shows no nvidia.com/gpumem. Spread the cards over more workers"
                        ),
                    )

    def _unique_names(self) -> Iterable[tuple[str, str]]:
        seen: dict[str, int] = {}
        for i, tenant in enumerate(self.tenants):
            if tenant.name in seen:
                yield f"tenants[{i}].name", f"{tenant.name!r} is already used by tenants[{seen[tenant.name]}]"
            seen.setdefault(tenant.name, i)
        # Workers become docker containers and node names, so their names share one namespace
        # with the kind node container (when there is one).
        owners: dict[str, str] = {}
        if self.management.mode == "kind":
            owners[f"{self.management.name}-control-plane"] = "the kind management node"
        for i, tenant in enumerate(self.tenants):
            for j, worker in enumerate(tenant.workers):
                path = f"tenants[{i}].workers[{j}].name"
                if worker.name in owners:
                    yield path, f"{worker.name!r} is already used by {owners[worker.name]}; worker names are unique per stack"
                owners.setdefault(worker.name, path)
        # One machine is one node of one tenant: joined twice, the second join resets the first.
        hosts: dict[tuple[str, int], str] = {}
        for path, ssh in self._ssh_targets():
            target = (addressing.host_identity(ssh.host), ssh.port)
            if target in hosts:
                yield (
                    f"{path}.host",
                    f"{addressing.join_host_port(ssh.host, ssh.port)} is already the host of {hosts[target]}; "
                    "a machine joins one tenant once",
                )
            hosts.setdefault(target, path.removesuffix(".ssh"))

    def _ssh_targets(self) -> Iterator[tuple[str, SshTarget]]:
        for i, tenant in enumerate(self.tenants):
            for j, worker in enumerate(tenant.workers):
                if worker.ssh is not None:
                    yield f"tenants[{i}].workers[{j}].ssh", worker.ssh

    def _host_addresses(self) -> dict[ipaddress.IPv4Address, str]:
        """SSH hosts written as IPv4 addresses, with the worker each belongs to."""
        return {ssh.address: path.removesuffix(".ssh") for path, ssh in self._ssh_targets() if ssh.address is not None}

    def _vips(self) -> Iterable[tuple[str, str]]:
        pool = self.network.address_pool
        hosts = self._host_addresses()
        seen: dict[ipaddress.IPv4Address, int] = {}
        problems: list[tuple[str, str]] = []
        for i, tenant in enumerate(self.tenants):
            if tenant.vip is None:
                continue
            if tenant.vip in seen:
                problems.append((f"tenants[{i}].vip", f"{tenant.vip} is already the VIP of tenants[{seen[tenant.vip]}]"))
            seen.setdefault(tenant.vip, i)
            if pool is not None and tenant.vip not in pool:
                problems.append((f"tenants[{i}].vip", f"{tenant.vip} lies outside the MetalLB pool {pool} (network.pool)"))
            if pool is None and self.management.mode == "kind" and not addressing.may_lie_in_a_derived_pool(tenant.vip):
                problems.append(
                    (
                        f"tenants[{i}].vip",
                        f"{tenant.vip} cannot lie in the MetalLB pool derived from the kind network (.200-.250 of its "
                        "last /24); pin network.pool around it, or leave vip unset",
                    )
                )
            if tenant.vip in hosts:
                problems.append((f"tenants[{i}].vip", f"{tenant.vip} is the address of {hosts[tenant.vip]}'s host"))
        if pool is not None:
            problems.extend(
                ("network.pool", f"{pool} contains {address}, the address of {owner}'s host; MetalLB would announce it")
                for address, owner in hosts.items()
                if address in pool
            )
        if pool is not None and len(self.tenants) > len(pool):
            size = f"{len(pool)} address" + ("es" if len(pool) > 1 else "")
            problems.append(
                ("network.pool", f"{pool} holds {size}, too few for a VIP of each of the {len(self.tenants)} tenants")
            )
        if pool is not None and not problems:
            try:
                addressing.assign_vips(pool, [(t.name, t.vip) for t in self.tenants])
            except addressing.VipClashError as error:
                problems.extend(vip_clash_problems(self.tenants, error.clashes, lambda offset: str(pool.address(offset))))
        if pool is None and self.management.mode == "kind" and len(self.tenants) > addressing.DERIVED_POOL_SIZE:
            problems.append(
                (
                    "tenants",
                    (
                        f"{len(self.tenants)} tenants need more VIPs than the {addressing.DERIVED_POOL_SIZE} of the pool "
                        "derived from the kind network (.200-.250 of its last /24); set network.pool to a larger range"
                    ),
                )
            )
        if pool is None and self.management.mode == "kind" and not problems:
            # The kind network, and so the pool's addresses, exist only once kind has made them; the
            # pool's size and where a pinned VIP lies in it (checked above) are known now.
            offsets = [(t.name, _derived_pool_offset(t.vip)) for t in self.tenants]
            problems.extend(
                vip_clash_problems(
                    self.tenants,
                    addressing.vip_clashes(addressing.DERIVED_POOL_SIZE, offsets),
                    lambda offset: f".{addressing.DERIVED_POOL_START + offset}",
                )
            )
        return problems

    def _cidrs(self) -> Iterable[tuple[str, str]]:
        pool = self.network.address_pool
        vips = self.known_vips()
        hosts = self._host_addresses()
        for i, tenant in enumerate(self.tenants):
            if tenant.pod_cidr.overlaps(tenant.service_cidr):
                yield f"tenants[{i}].serviceCidr", f"{tenant.service_cidr} overlaps podCidr {tenant.pod_cidr}"
            for key, cidr in tenant.cidrs:
                if pool is not None and pool.overlaps(cidr):
                    yield f"tenants[{i}].{key}", f"{cidr} overlaps the MetalLB pool {pool} on the node network"
                # The tenant's nodes would route their own addresses into the pod or service network,
                # and another tenant's hosts (on the same machine network) out of reach.
                yield from (
                    (f"tenants[{i}].{key}", f"{cidr} contains {address}, the host of {worker}")
                    for address, worker in hosts.items()
                    if address in cidr
                )
        yield from _cidrs_holding_vips(self.tenants, vips)

    def _quotas(self) -> Iterable[tuple[str, str]]:
        for i, tenant in enumerate(self.tenants):
            if tenant.quota is None:
                continue
            memory, cores = gpus.inventory_totals(tenant.cards)
            if tenant.quota.gpumem > memory:
                yield (
                    f"tenants[{i}].quota.gpumem",
                    (f"{tenant.quota.gpumem} MiB exceeds the tenant's GPU memory ({memory} MiB on its workers)"),
                )
            if tenant.quota.gpucores > cores:
                yield (
                    f"tenants[{i}].quota.gpucores",
                    (f"{tenant.quota.gpucores}% exceeds the tenant's GPU cores ({cores}% = 100 per card)"),
                )

    def known_vips(self) -> dict[str, ipaddress.IPv4Address]:
        """VIPs known before deployment: all of them with a pinned pool, else the pinned ones."""
        pool = self.network.address_pool
        if pool is not None:
            try:
                return addressing.assign_vips(pool, [(t.name, t.vip) for t in self.tenants])
            except ValueError:
                pass
        return {t.name: t.vip for t in self.tenants if t.vip is not None}


def _derived_pool_offset(vip: ipaddress.IPv4Address | None) -> int | None:
    """A pinned VIP's offset in the derived pool (.200-.250 of a /24), by its last octet."""
    return None if vip is None else (int(vip) & 0xFF) - addressing.DERIVED_POOL_START


def vip_clash_problems(
    tenants: list[Tenant], clashes: list[addressing.VipClash], describe: Callable[[int], str]
) -> list[tuple[str, str]]:
    """One problem per tenant whose derived VIP another tenant has, with how to settle it."""
    problems = []
    for clash in clashes:
        tenant, holder = tenants[clash.tenant], tenants[clash.holder]
        other = f"tenants[{clash.holder}] ({holder.name!r})"
        address = describe(clash.offset)
        text = (
            f"{tenant.name!r} derives the VIP {address} from its name, which {other} pins"
            if clash.holder_pinned
            else f"{tenant.name!r} and {other} both derive the VIP {address} from their names"
        )
        text += "; two tenants cannot share one. Pin vip on whichever is not deployed yet"
        if clash.free is not None:
            text += f", to a free address such as {describe(clash.free)}"
        if clash.moved_to is not None:
            # Deployed by a release that moved the later tenant on, it must be pinned where it runs:
            # the old rule's answer holds only if no tenant was added before it since.
            where = describe(clash.moved_to)
            text += (
                f". If both are deployed, pin {tenant.name!r} where it runs, its stack output tenants.{tenant.name}.endpoint"
                f" (earlier releases moved it on: to {where} if no tenant was added before it since)"
            )
        problems.append((f"tenants[{clash.tenant}].vip", text))
    return problems


@dataclass(frozen=True)
class AddressPlan:
    """Where MetalLB announces and which VIP each tenant's API server gets."""

    pool: addressing.AddressPool | None  # None: the cluster's own LoadBalancer assigns addresses
    vips: dict[str, ipaddress.IPv4Address]  # tenants without one get theirs from that LoadBalancer
    node_network: ipaddress.IPv4Network | None = None


def address_plan(config: StackConfig, node_subnets: str | None = None) -> AddressPlan:
    """Plan the pool and VIPs, checking what needs the live node network when it is known.

    ``node_subnets`` is what ``docker network inspect kind`` reports as IPAM subnets; it exists
    only once kind has created its network, so a preview on an empty host passes None and these
    checks run again on ``pulumi up`` before any tenant resource is created.
    """
    problems: list[tuple[str, str]] = []
    subnet = None
    if node_subnets is not None:
        try:
            subnet = addressing.ipv4_subnet(node_subnets)
        except ValueError as error:
            raise ConfigError([("network", str(error))]) from None
    pool = config.network.address_pool
    if pool is None:
        if subnet is None:
            if config.management.mode == "existing":
                # No MetalLB: the existing cluster's LoadBalancer implementation hands out addresses.
                return AddressPlan(None, {t.name: t.vip for t in config.tenants if t.vip is not None})
            raise ConfigError([("network.pool", "is required when no kind network provides one")])
        try:
            pool = addressing.pool_for_subnet(subnet)
        except ValueError as error:
            raise ConfigError([("network.pool", str(error))]) from None
        for i, tenant in enumerate(config.tenants):
            if tenant.vip is not None and tenant.vip not in pool:
                problems.append(
                    (
                        f"tenants[{i}].vip",
                        f"{tenant.vip} lies outside the MetalLB pool {pool} derived from the kind network {subnet}",
                    )
                )
        # A pinned pool is checked against the SSH hosts up front; a derived one only now.
        problems.extend(
            (
                f"{worker}.ssh.host",
                f"{address} lies in the MetalLB pool {pool} derived from the kind network {subnet}: a tenant VIP "
                "could take the host's address; give the host another address, or pin network.pool around it",
            )
            for address, worker in config._host_addresses().items()
            if address in pool
        )
    elif subnet is not None and not all(part.subnet_of(subnet) for part in pool.networks()):
        problems.append(("network.pool", f"{pool} is not inside the kind network {subnet}, where MetalLB answers ARP"))
    elif subnet is not None:
        problems.extend(
            ("network.pool", f"{pool} contains {address}, {what} of the kind network {subnet}; MetalLB must not announce it")
            for address, what in addressing.reserved_addresses(subnet).items()
            if address in pool
        )
        floor = addressing.first_free_of_containers(subnet)
        if pool.first < floor:
            example = f", e.g. {addressing.pool_for_subnet(subnet)}" if subnet.prefixlen <= 24 else ""
            problems.append(
                (
                    "network.pool",
                    (
                        f"{pool} starts in the lower half of the kind network {subnet}, where Docker gives containers "
                        f"(kind's node, the workers) their addresses from the bottom up; start it at {floor} or above{example}"
                    ),
                )
            )
    if subnet is not None:
        for i, tenant in enumerate(config.tenants):
            for key, cidr in tenant.cidrs:
                if cidr.overlaps(subnet):
                    problems.append((f"tenants[{i}].{key}", f"{cidr} overlaps the node network {subnet}"))
    if problems:
        raise ConfigError(problems)
    try:
        vips = addressing.assign_vips(pool, [(t.name, t.vip) for t in config.tenants])
    except addressing.VipClashError as error:
        derived = pool
        clashes = vip_clash_problems(config.tenants, error.clashes, lambda offset: str(derived.address(offset)))
        raise ConfigError(clashes) from None
    problems.extend(_cidrs_holding_vips(config.tenants, vips))
    if problems:
        raise ConfigError(problems)
    return AddressPlan(pool, vips, subnet)


def _cidrs_holding_vips(tenants: list[Tenant], vips: dict[str, ipaddress.IPv4Address]) -> list[tuple[str, str]]:
    """A tenant network containing any tenant's API address would shadow that API server."""
    return [
        (f"tenants[{i}].{key}", f"{cidr} contains {owner}'s VIP {vip}")
        for i, tenant in enumerate(tenants)
        for key, cidr in tenant.cidrs
        for owner, vip in vips.items()
        if vip in cidr
    ]


# Keys whose values are secrets, and whole objects set as text (`pulumi config set --secret
# management "$(cat kubeconfig)"` without --path): an error about them never echoes the value.
_SECRET_KEYS: Final = ("kubeconfig", "privateKey", "hostKey", "ssh")


def _may_hold_a_secret(location: tuple[Any, ...]) -> bool:
    return len(location) == 1 or location[-1] in _SECRET_KEYS


_SHAPES: Final = {"model_type": "an object of keys", "dict_type": "an object of keys", "list_type": "a list"}


def _yaml_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "null"
    return "a number or boolean" if isinstance(value, bool | int | float) else "text"


def _not_text(value: Any, shown: bool) -> str:
    """Why a value that should be text is not, in YAML's terms: an unquoted version is a number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and shown:
        return (
            f"must be text, not the number {value!r}: quote it as you mean it "
            "(YAML reads an unquoted 2.10 as the number 2.1 and 1.30 as 1.3)"
        )
    kind = "a boolean" if isinstance(value, bool) else _yaml_kind(value)
    return f"must be text, not {kind}" + ("; quote it" if kind in ("a boolean", "a number or boolean") else "")


def _pydantic_problems(error: ValidationError, secret_keys: Collection[str]) -> list[tuple[str, str]]:
    problems = []
    for item in error.errors(include_url=False):
        path = ""
        for part in item["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = item["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if item["type"] == "missing":
            message = "is required"
            problems.append((path, message))
            continue
        if is_secure_placeholder(item.get("input")):
            # `pulumi up` hands the program the plain value; only the offline tools read this.
            problems.append(
                (
                    path,
                    "is encrypted (secure:), which the offline tools cannot decrypt to check it (pulumi up can); "
                    "to check it offline, set it without --secret",
                )
            )
            continue
        if item["type"] in _SHAPES:
            # pydantic names Python classes ("a valid dictionary or instance of Tenant"); say it in YAML's terms.
            message = f"must be {_SHAPES[item['type']]}, not {_yaml_kind(item.get('input'))}"
            # A secret set with --path makes its whole top-level key secret for the program, so the
            # other values of that key stay quoted in errors. Not text where an object belongs:
            # `pulumi config set --secret --path 'gpu-tenancy:tenants[0].workers[0]' "$(cat worker.json)"`
            # hands the program a worker, its SSH key with it, as one text.
            if item["loc"][0] in secret_keys:
                problems.append((path, message))
                continue
        if item["type"] == "string_type":
            problems.append((path, _not_text(item.get("input"), shown=not _may_hold_a_secret(item["loc"]))))
            continue
        given = item.get("input")
        if isinstance(given, str | int | float) and not _may_hold_a_secret(item["loc"]):
            # A value thousands of characters long is named by its start.
            shown = repr(given) if len(repr(given)) <= 80 else repr(f"{str(given)[:70]}...")
            if repr(given) in message:
                message = message.replace(repr(given), shown)
            elif not re.search(rf"(?<![\w./]){re.escape(str(given))}(?![\w./])", message):  # named already, unquoted
                message = f"{message} (got {shown})"
        problems.append((path, message))
    return problems
