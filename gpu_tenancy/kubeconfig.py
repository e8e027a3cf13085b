"""Reading the parts of a kubeconfig the program needs (server, cluster CA).

One reading for the program, the policy pack and the live checks: the cluster of the context
asked for, else of the current context, as client-go reads it.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

# libyaml's parser when PyYAML has it: kubeconfigs are read once per tenant per run.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _named(document: dict[str, Any], key: str, field: str) -> dict[str, Any]:
    entries = document.get(key) or []
    if not isinstance(entries, list):
        raise ValueError(f"kubeconfig {key} is not a list")
    return {
        entry["name"]: entry[field]
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get(field), dict)
    }


def current_cluster(document: Any, context: str | None = None, cluster: str | None = None) -> dict[str, Any]:
    """The ``cluster`` entry (server, CA) a parsed kubeconfig points at; ValueError when none is usable.

    ``context`` and ``cluster`` override the file's current context and that context's cluster, as
    the Kubernetes provider's inputs of those names do (client-go's ConfigOverrides).
    """
    if not isinstance(document, dict):
        raise ValueError("kubeconfig is not a mapping")
    clusters = _named(document, "clusters", "cluster")
    contexts = _named(document, "contexts", "context")
    current = context or document.get("current-context")
    if not current:
        # client-go does not fall back to a lone cluster: it refuses the config as empty.
        raise ValueError("kubeconfig has no current context")
    if not isinstance(current, str) or current not in contexts:
        raise ValueError(f"kubeconfig has no context {current!r}")
    name = cluster or contexts[current].get("cluster")
    if not isinstance(name, str) or not name:
        raise ValueError(f"kubeconfig context {current!r} names no cluster")
    if name not in clusters:
        raise ValueError(f"kubeconfig has no cluster {name!r}")
    return clusters[name]


def _current_cluster(kubeconfig: str, context: str | None = None, cluster: str | None = None) -> dict[str, Any]:
    return current_cluster(yaml.load(kubeconfig, Loader=_Loader), context, cluster)


def server(kubeconfig: str, context: str | None = None, cluster: str | None = None) -> str:
    """The server URL; ValueError (or yaml.YAMLError) when the kubeconfig names none."""
    found = _current_cluster(kubeconfig, context, cluster).get("server")
    if not isinstance(found, str) or not found:
        raise ValueError("kubeconfig's cluster has no server")
    return found


def ca_certificate(kubeconfig: str) -> str:
    """The cluster CA (PEM) of the current context, as Kamaji embeds it in admin.conf."""
    data = _current_cluster(kubeconfig).get("certificate-authority-data")
    if not data:
        raise ValueError("kubeconfig carries no certificate-authority-data")
    return base64.b64decode(data).decode()
