"""What the live system would answer, for running the program under Pulumi's mock runtime.

Every value here is a documented stand-in for something only a real host knows:

* kind's docker network is 172.18.0.0/16 (gateway 172.18.0.1), as kind's first network usually is
  on a host whose default bridge is 172.17.0.0/16; it is reported dual-stack, as on hosts with
  IPv6, so the program's IPv4 selection is exercised.
* kubeconfigs carry a real CA and client certificate generated per cluster. Keys are derived from
  the cluster name and ECDSA signatures are deterministic (RFC 6979), so two renders of one config
  are byte-identical.
* the docker engine is a Linux host's usual one: overlay2 on ext4, rootful, so worker containers
  need neither /dev/mapper nor /dev/fuse (tests swap DOCKER_INFO for other engines).
* TenantControlPlanes report Ready with their kubeconfig Secret, as Kamaji's status does; one
  without a requested address gets a TEST-NET-3 address from "the cluster's LoadBalancer".
* Random strings, timestamps and ids are derived from resource names.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import string
from functools import cache
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

KIND_SUBNETS = "172.18.0.0/16 fc00:f853:ccd:e793::/64"
KIND_GATEWAY = "172.18.0.1"
# `docker info --format gpu_tenancy.docker_host.INFO_FORMAT` on Docker Engine 28 with overlay2 on ext4.
DOCKER_INFO = (
    '{"driver":"overlay2","driverStatus":[["Backing Filesystem","extfs"],["Supports d_type","true"],'
    '["Using metacopy","false"],["Native Overlay Diff","true"],["userxattr","false"]],'
    '"securityOptions":["name=apparmor","name=seccomp,profile=builtin","name=cgroupns"]}'
)
MANAGEMENT_API = "https://127.0.0.1:40123"
EPOCH = "2026-12-01T00:00:00Z"
_NOT_BEFORE = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
_NOT_AFTER = datetime.datetime(2036, 1, 1, tzinfo=datetime.UTC)


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("/".join(parts).encode()).digest()


def _key(seed: str) -> ec.EllipticCurvePrivateKey:
    order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # P-256 group order
    return ec.derive_private_key(int.from_bytes(_digest("key", seed), "big") % (order - 1) + 1, ec.SECP256R1())


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, ca: bool
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(int.from_bytes(_digest("serial", subject)[:16], "big") >> 1)
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    return builder.sign(issuer_key, hashes.SHA256(), ecdsa_deterministic=True)


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


@cache
def kubeconfig(cluster: str, server: str, user: str = "kubernetes-admin") -> str:
    """A kubeconfig with a real CA and a client certificate it signed, stable per cluster name."""
    ca_key = _key(f"{cluster}/ca")
    ca = _certificate("kubernetes", ca_key, "kubernetes", ca_key, ca=True)
    client_key = _key(f"{cluster}/{user}")
    client = _certificate(user, client_key, "kubernetes", ca_key, ca=False)
    key_pem = client_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(_pem(ca))}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(_pem(client)), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    }
    return yaml.dump(document, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def control_plane_endpoint(tenant: str, spec: dict[str, Any]) -> str:
    """What Kamaji reports: the requested address, or else one the cluster's LoadBalancer assigned
    (a TEST-NET-3 address, 203.0.113.0/24, derived from the tenant's name)."""
    profile = spec["networkProfile"]
    address = profile.get("address") or f"203.0.113.{_digest('lb', tenant)[0] % 254 + 1}"
    return f"{address}:{int(profile.get('port') or 6443)}"


def random_string(name: str, inputs: dict[str, Any]) -> str:
    alphabet = ""
    if inputs.get("lower", True):
        alphabet += string.ascii_lowercase
    if inputs.get("upper", True):
        alphabet += string.ascii_uppercase
    if inputs.get("numeric", True):
        alphabet += string.digits
    stream = _digest("random", name) * 4
    return "".join(alphabet[byte % len(alphabet)] for byte in stream[: int(inputs["length"])])


def fake_id(kind: str, name: str) -> str:
    return hashlib.sha256(f"{kind}/{name}".encode()).hexdigest()


def repo_digest(image: str) -> str:
    """What the docker provider reports as an image's ``repoDigest``: ``repository@sha256:<digest>``."""
    repository, _, digest = image.partition("@")
    if ":" in repository.rsplit("/", 1)[-1]:  # a tag, not a registry's port
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}@{digest or 'sha256:' + fake_id('digest', image)}"
