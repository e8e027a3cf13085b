"""pinned-versions and pinned-versions-exceptions: what gets installed is named exactly.

Helm releases need an exact chart version (a range or no version installs whatever is newest at
`pulumi up` time); images need a tag or digest that is not ``latest``. Kamaji's repository publishes
no current chart but its main branch's, and HAMi's mock device plugin no tagged build its chart can use, so Kamaji's
``0.0.0+latest`` and the mock's ``latest`` are acknowledged exceptions: pinned-versions leaves them
to pinned-versions-exceptions, which is advisory by default.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import yaml

from gpu_tenancy.versions import EXACT_VERSION, image_tag

from . import kinds
from .stack import ResourceView
from .values import UNKNOWN

# (chart, version) pairs that move but have no pinned alternative yet, with why.
ACKNOWLEDGED_MOVING_CHARTS: Final = {
    ("kamaji", "0.0.0+latest"): (
        "0.0.0+latest is the only current chart clastix.github.io/charts publishes (its numbered charts are old "
        "stable releases; edge releases are images and Git tags, not charts); it follows Kamaji's main branch, so "
        "two installs may run different Kamaji builds. Pinning needs a chart mirrored at a fixed build"
    ),
    ("kamaji-crds", "0.0.0+latest"): (
        "Kamaji's CRD-only chart is published only as 0.0.0+latest, like Kamaji's own chart; it follows Kamaji's "
        "main branch with it"
    ),
}

# (chart, values path, value) image tags that move but have no pinned alternative yet, with why.
ACKNOWLEDGED_MOVING_VALUES: Final = {
    ("hami", "mockDevicePlugin.image.tag", "latest"): (
        "HAMi's own default, mock 1.0.1, cannot read the chart's device config from 2.9.0 on, and later mock "
        "builds are published only as latest, so two workers may run different mock builds. Pin "
        "latest@sha256:<digest> in gpu-tenancy:versions.mockDevicePlugin"
    ),
}

_KUBERNETES_VERSION = re.compile(r"^v\d+\.\d+\.\d+$")
MOVING_TAG: Final = "latest"


def image_problem(reference: str) -> str | None:
    """Why ``reference`` does not pin an image, or None. Registry ports (host:5000/x) are not tags."""
    digest = reference.strip().partition("@")[2]
    tag = image_tag(reference)
    if tag is not None and tag.lower() == MOVING_TAG:
        return f"image {reference} uses the moving tag '{MOVING_TAG}'"
    if digest:
        return None if re.fullmatch(r"sha256:[0-9a-f]{64}", digest) else f"image {reference} has a malformed digest"
    if not tag:
        return f"image {reference} has no tag or digest, so Docker pulls '{MOVING_TAG}'"
    return None


def _version_problem(version: Any) -> str | None:
    if not isinstance(version, str) or not version.strip():
        return "has no explicit version, so Helm installs the newest chart at each install"
    if not EXACT_VERSION.fullmatch(version.strip()):
        return f"version {version!r} is a range, not an exact chart version"
    metadata = re.split(r"[-+.]", version.strip().lower())
    if MOVING_TAG in metadata:
        return f"version {version!r} is a moving '{MOVING_TAG}' build"
    return None


def _acknowledged(resource: ResourceView) -> str | None:
    key = (kinds.chart_name(resource.get("chart")), resource.get("version"))
    return ACKNOWLEDGED_MOVING_CHARTS.get(key)  # type: ignore[arg-type]


def _walk_values(value: Any, path: str) -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every scalar in Helm values."""
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if isinstance(item, dict | list):
                yield from _walk_values(item, child)
            else:
                yield child, str(key), item
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_values(item, f"{path}[{index}]")


def _acknowledged_values(chart: str | None, values: Any) -> Iterator[tuple[str, str]]:
    """(path, reason) of the acknowledged moving image tags in a release's values."""
    for path, _, item in _walk_values(values, ""):
        reason = ACKNOWLEDGED_MOVING_VALUES.get((chart, path, item))  # type: ignore[arg-type]
        if reason:
            yield path, reason


def _values_problems(chart: str | None, values: Any, source: str) -> Iterator[str]:
    """Image tags set in Helm values: a chart's own default follows its (pinned) version, ``latest`` does not."""
    acknowledged = {path for path, _ in _acknowledged_values(chart, values)}
    for path, key, item in _walk_values(values, ""):
        if not isinstance(item, str) or path in acknowledged:
            continue
        lowered = key.lower()
        if lowered.endswith("tag") and item.strip().lower() == MOVING_TAG:
            yield f"{source}.{path} is the moving image tag '{MOVING_TAG}'"
        elif lowered == "image" and item.strip():
            problem = image_problem(item)
            if problem:
                yield f"{source}.{path}: {problem}"


def _asset_text(asset: Any) -> str | None:
    """A StringAsset's text: pulumi_policy hands over a ``StringAsset``, a render records ``{"text": ...}``."""
    text = asset.get("text") if isinstance(asset, dict) else getattr(asset, "text", None)
    return text if isinstance(text, str) else None


def _value_sources(resource: ResourceView) -> Iterator[tuple[str, Any]]:
    """(name, values) of each source of a release's values: ``values``, and each ``valueYamlFiles``
    text, each checked as if alone (a file's moving tag counts even where ``values`` may override it).
    A FileAsset's path is read where the CLI runs, not here."""
    values = resource.get("values", default={})
    if values is not UNKNOWN:
        yield "values", values
    files = resource.get("valueYamlFiles", default=[])
    for index, asset in enumerate(files if isinstance(files, list) else []):
        text = _asset_text(asset)
        try:
            loaded = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            continue  # Helm refuses the file itself
        if isinstance(loaded, dict):
            yield f"valueYamlFiles[{index}]", loaded


def _kind_config_images(stdin: Any) -> list[str]:
    """Node images in a kind cluster config passed on a command's stdin."""
    if not isinstance(stdin, str) or "kind.x-k8s.io" not in stdin:
        return []
    try:
        document = yaml.safe_load(stdin)
    except yaml.YAMLError:
        return []
    if not isinstance(document, dict) or document.get("kind") != "Cluster":
        return []
    nodes = document.get("nodes") or []
    return [node["image"] for node in nodes if isinstance(node, dict) and isinstance(node.get("image"), str)]


def check(resource: ResourceView) -> Iterator[str]:
    if resource.type in kinds.HELM_TYPES:
        chart = resource.get("chart")
        label = f"Helm chart {kinds.chart_name(chart) or chart}"
        version = resource.get("version")
        if version is not UNKNOWN and not (isinstance(chart, str) and chart.endswith(".tgz")) and not _acknowledged(resource):
            problem = _version_problem(version)
            if problem:
                yield f"{label} {problem}"
        for source, values in _value_sources(resource):
            for problem in _values_problems(kinds.chart_name(chart), values, source):
                yield f"{label}: {problem}"
    elif resource.type == kinds.REMOTE_IMAGE:
        name = resource.get("name")
        if isinstance(name, str):
            problem = image_problem(name)
            if problem:
                yield problem
    elif resource.type == kinds.CONTAINER:
        image = resource.get("image")
        # An image id (sha256:…) is content-addressed; the RemoteImage that produced it is checked itself.
        if isinstance(image, str) and image and not image.startswith("sha256:"):
            problem = image_problem(image)
            if problem:
                yield problem
    elif resource.type in kinds.COMMAND_TYPES:
        for image in _kind_config_images(resource.get("stdin")):
            problem = image_problem(image)
            if problem:
                yield f"kind node {problem}"
    elif resource.type == kinds.TENANT_CONTROL_PLANE:
        version = resource.get("spec", "kubernetes", "version")
        if isinstance(version, str) and not _KUBERNETES_VERSION.match(version):
            yield f"Kubernetes version {version!r} is not an exact vX.Y.Z: the control-plane images follow it"
        for part in ("server", "agent"):
            pinned = resource.get("spec", "addons", "konnectivity", part, "version")
            if isinstance(pinned, str) and pinned.strip().lower() == MOVING_TAG:
                yield f"Konnectivity {part} version is the moving '{MOVING_TAG}'"


def check_exceptions(resource: ResourceView) -> Iterator[str]:
    if resource.type in kinds.HELM_TYPES:
        chart = kinds.chart_name(resource.get("chart"))
        reason = _acknowledged(resource)
        if reason:
            yield f"Helm chart {chart} {resource.get('version')}: {reason}"
        for source, values in _value_sources(resource):
            for path, reason in _acknowledged_values(chart, values):
                yield f"Helm chart {chart}: {source}.{path} is the moving image tag '{MOVING_TAG}': {reason}"
