"""Upstream Helm charts at pinned versions."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy.versions import CHART_REPOSITORIES


def chart(
    name: str,
    release: str,
    chart_key: str,
    version: str,
    namespace: pulumi.Input[str],
    values: pulumi.Input[dict],
    opts: pulumi.ResourceOptions,
    chart_name: str | None = None,
    **kwargs: object,
) -> k8s.helm.v3.Release:
    """A Helm release of an upstream chart at a pinned version.

    ``helm.v3.Release`` rather than ``helm.v4.Chart``: Kamaji, cert-manager, HAMi and the webhook
    cert jobs rely on Helm hooks, which Chart v4 skips, and Chart v4 cannot be previewed against a
    cluster that does not exist yet (pulumi/pulumi-kubernetes#3027).
    """
    return k8s.helm.v3.Release(
        name,
        name=release,
        chart=chart_name or release,
        version=version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=CHART_REPOSITORIES[chart_key]),
        namespace=namespace,
        create_namespace=True,
        values=values,
        opts=opts,
        **kwargs,
    )
