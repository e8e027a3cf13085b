"""Reading the parts of a kubeconfig the program needs (server, cluster CA)."""

from __future__ import annotations

import base64

import yaml

# libyaml's parser when PyYAML has it: kubeconfigs are read once per tenant per run.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _current_cluster(kubeconfig: str) -> dict:
    document = yaml.load(kubeconfig, Loader=_Loader)
    clusters = {entry["name"]: entry["cluster"] for entry in document.get("clusters", [])}
    contexts = {entry["name"]: entry["context"] for entry in document.get("contexts", [])}
    current = document.get("current-context")
    if current in contexts:
        return clusters[contexts[current]["cluster"]]
    if len(clusters) == 1:
        return next(iter(clusters.values()))
    raise ValueError("kubeconfig has no current context and more than one cluster")


def server(kubeconfig: str) -> str:
    return _current_cluster(kubeconfig)["server"]


def ca_certificate(kubeconfig: str) -> str:
    """The cluster CA (PEM) of the current context, as Kamaji embeds it in admin.conf."""
    data = _current_cluster(kubeconfig).get("certificate-authority-data")
    if not data:
        raise ValueError("kubeconfig carries no certificate-authority-data")
    return base64.b64decode(data).decode()
