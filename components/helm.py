"""Upstream Helm charts at pinned versions."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy.versions import CHART_REPOSITORIES

FIRST_INSTALL_TIMEOUT_SECONDS = 900


def chart(
    name: str,
    release: str,
    chart_key: str,
    version: str,
    namespace: pulumi.Input[str],
    values: pulumi.Input[dict],
    opts: pulumi.ResourceOptions,
    chart_name: str | None = None,
    unset: Sequence[str] = (),
    **kwargs: object,
) -> k8s.helm.v3.Release:
    """A Helm release of an upstream chart at a pinned version.

    ``helm.v3.Release`` rather than ``helm.v4.Chart``: Kamaji, cert-manager, HAMi and the webhook
    cert jobs rely on Helm hooks, which Chart v4 skips, and Chart v4 cannot be previewed against a
    cluster that does not exist yet (pulumi/pulumi-kubernetes#3027).

    ``unset`` names top-level chart defaults to remove, as ``--set key=null`` does. They go in a
    values file: the Python SDK drops a ``None`` in ``values`` before the provider sees it, so
    ``allow_null_values`` cannot carry it, while the provider keeps the nulls of a values file
    from v4.30 on (pulumi/pulumi-kubernetes#3811, #4293).
    """
    # Helm waits 300 s by default; a first install on a laptop pulls every image of the chart
    # (cert-manager's and MetalLB's right after kind create, together), which can take longer.
    kwargs.setdefault("timeout", FIRST_INSTALL_TIMEOUT_SECONDS)
    if unset:
        kwargs["value_yaml_files"] = [pulumi.StringAsset("".join(f"{key}: null\n" for key in unset))]
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
