"""Shared fixtures: the dev stack rendered once per session through the real program."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tools import harness

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEV_CONFIG: dict[str, Any] = {
    key.split(":", 1)[1]: value for key, value in yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())["config"].items()
}


def dev_config() -> dict[str, Any]:
    """A fresh copy of Pulumi.dev.yaml's gpu-tenancy keys, to derive variants from."""
    return copy.deepcopy(DEV_CONFIG)


def render_config(config: dict[str, Any], **kwargs: Any) -> harness.Render:
    """Render the real program with ``gpu-tenancy:<key>`` set from ``config``."""
    return harness.render({f"gpu-tenancy:{key}": json.dumps(value) for key, value in config.items()}, **kwargs)


@pytest.fixture(scope="session")
def dev() -> harness.Render:
    render = harness.render_stack("dev")
    assert len(render.resources) > 50, "the dev stack must register its resources"
    return render


@pytest.fixture(scope="session")
def dev_secrets() -> harness.Render:
    return harness.render_stack("dev", show_secrets=True)


@pytest.fixture(scope="session")
def dev_preview() -> harness.Render:
    return harness.render_stack("dev", preview=True)


# An SSH private key and a management kubeconfig config validation accepts (it parses both).
SSH_KEY = (
    ed25519.Ed25519PrivateKey.from_private_bytes(bytes(32))
    .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    .decode()
)
MGMT_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: mgmt, cluster: {server: "https://10.0.100.2:6443"}}]
contexts: [{name: mgmt, context: {cluster: mgmt, user: admin}}]
current-context: mgmt
users: [{name: admin, user: {token: placeholder}}]
"""

COMMAND = "command:local:Command"
RELEASE = "kubernetes:helm.sh/v3:Release"
TCP = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
SECRET = "kubernetes:core/v1:Secret"
CONTAINER = "docker:index/container:Container"
K8S_PROVIDER = "pulumi:providers:kubernetes"
