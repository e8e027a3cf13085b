"""Every version gpu-tenancy pins, in one place.

Stack config may override the chart versions under ``gpu-tenancy:versions``; the Makefile reads
the host tool versions from here too, so a bump is a one-line change.
"""

from __future__ import annotations

import re
from typing import Final

_NUMBER = r"(0|[1-9][0-9]*)"  # ASCII digits only: \d would take any script's
_KUBE_VERSION: Final = re.compile(rf"v{_NUMBER}\.{_NUMBER}\.{_NUMBER}")
# SemVer 2.0 as Helm takes an exact chart version: optional v, MAJOR.MINOR.PATCH, pre-release,
# build metadata. Helm reads anything else (``~2.10``, ``>=2.8``, ``2.10``) as a range and installs
# whatever newest chart matches at ``pulumi up`` time.
EXACT_VERSION: Final = re.compile(rf"v?{_NUMBER}\.{_NUMBER}\.{_NUMBER}(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def image_tag(reference: str) -> str | None:
    """The tag of an image reference (``kindest/node:v1.36.4@sha256:...`` -> ``v1.36.4``), or None.

    Only the last path part carries a tag: ``lab:5000/node`` has a registry port and no tag.
    """
    last = reference.strip().partition("@")[0].rsplit("/", 1)[-1]
    return last.partition(":")[2] if ":" in last else None


def kubernetes_minor(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a ``vX.Y.Z`` Kubernetes version; ValueError for anything else."""
    match = _KUBE_VERSION.fullmatch(version)
    if not match:
        raise ValueError(f"{version!r} is not a Kubernetes version of the form vX.Y.Z, e.g. v1.36.4")
    return int(match[1]), int(match[2])


def older_than(version: str, floor: tuple[int, int, int]) -> bool:
    """Whether exact ``version`` precedes release ``floor``; a pre-release of the floor does."""
    match = EXACT_VERSION.fullmatch(version)
    if not match:
        raise ValueError(f"{version!r} is not an exact version")
    release = (int(match[1]), int(match[2]), int(match[3]))
    return release < floor or (release == floor and match[4] is not None)


# Kubernetes: the default tenant version and the newest minor Kamaji can run.
# clastix/kamaji:internal/upgrade/kubeadm_version.go sets KubeadmVersion = "v1.36.0", and the
# TenantControlPlane webhook rejects anything with a greater major.minor.
DEFAULT_KUBERNETES_VERSION: Final = "v1.36.4"
MAX_KUBERNETES_MINOR: Final = (1, 36)
# The oldest tenant minor Kamaji documents (docs/content/reference/versioning.md: tenants
# v1.30.0 and later); its webhook has no lower bound, so older versions fail only at runtime.
MIN_KUBERNETES_MINOR: Final = (1, 30)

# kindest/node images are built per kind release; v1.36.4 is the release image of kind v0.33.0.
# kind re-tags images between releases and asks for them by digest: the management cluster's
# default is that release's build, and so are the worker containers of tenants at that version.
NODE_IMAGE_REPOSITORY: Final = "kindest/node"
DEFAULT_NODE_IMAGE_DIGEST: Final = "sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
DEFAULT_NODE_IMAGE: Final = f"{NODE_IMAGE_REPOSITORY}:{DEFAULT_KUBERNETES_VERSION}@{DEFAULT_NODE_IMAGE_DIGEST}"


def node_image(kubernetes_version: str) -> str:
    """The kindest/node image a docker worker at ``kubernetes_version`` runs.

    By digest at the default version; any other version by tag, since no digest of it is pinned here.
    """
    if kubernetes_version == DEFAULT_KUBERNETES_VERSION:
        return DEFAULT_NODE_IMAGE
    return f"{NODE_IMAGE_REPOSITORY}:{kubernetes_version}"


# Kamaji's repository publishes its current chart, and its CRD-only chart, only as this moving version.
KAMAJI_MOVING_CHART: Final = "0.0.0+latest"
# Helm charts: defaults of ``gpu-tenancy:versions``.
DEFAULT_CHART_VERSIONS: Final = {
    "certManager": "v1.21.2",
    "metallb": "v0.16.1",
    "kamaji": KAMAJI_MOVING_CHART,
    "kamajiEtcd": "0.17.0",
    "hami": "2.10.0",
    "calico": "v3.32.2",
}

# HAMi's mock device plugin image tag: the default of ``gpu-tenancy:versions.mockDevicePlugin``.
# HAMi charts from 2.9.0 (2.10.0 included) default to mock 1.0.1, which cannot read the chart's
# own device config (``vnpus`` became a nested object) and exits: no card is ever registered.
# mock-device-plugin#18 reads both layouts, but the project publishes builds after 1.0.1 only
# as ``latest`` (its CI pushes nothing else), so ``latest`` is an acknowledged moving tag; pin
# ``latest@sha256:<digest>`` in stack config for repeatable installs.
DEFAULT_MOCK_DEVICE_PLUGIN_TAG: Final = "latest"

CHART_REPOSITORIES: Final = {
    "certManager": "https://charts.jetstack.io",
    "metallb": "https://metallb.github.io/metallb",
    "kamaji": "https://clastix.github.io/charts",
    "kamajiEtcd": "https://clastix.github.io/charts",
    "hami": "https://project-hami.github.io/HAMi/",
    "calico": "https://docs.tigera.io/calico/charts",
}

# Host tools `make up` fetches when they are not on PATH.
KIND_VERSION: Final = "v0.33.0"
PULUMI_CLI_VERSION: Final = "v3.272.0"

# Kubernetes node packages for SSH workers come from pkgs.k8s.io, one repository per minor.
KUBERNETES_PACKAGE_REPOSITORY: Final = "https://pkgs.k8s.io/core:/stable:"

# Images referenced by our own manifests (charts pin the rest).
KUBE_SCHEDULER_REGISTRY: Final = "registry.k8s.io"
KUBE_SCHEDULER_REPOSITORY: Final = "kube-scheduler"
