"""privileged-containers-are-nodes: privileged Docker containers only for Kubernetes node images.

A privileged container is root on the host. The only ones the platform needs are nested
Kubernetes nodes (kindest/node), which need it for systemd, containerd and kubelet. A worker's
``image`` is the id of a RemoteImage, so the rule follows the container's dependency on it to
learn which image that id is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from . import kinds
from .findings import Finding
from .stack import ResourceView, StackView
from .values import UNKNOWN

_DEFAULT_REGISTRY_PREFIXES = ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/")


def repository(reference: str) -> str:
    """``kindest/node`` for ``docker.io/kindest/node:v1.36.4@sha256:…``; Docker Hub prefixes dropped."""
    name = reference.strip().partition("@")[0]
    head, _, last = name.rpartition("/")
    last = last.partition(":")[0]
    name = f"{head}/{last}" if head else last
    for prefix in _DEFAULT_REGISTRY_PREFIXES:
        if name.startswith(prefix):
            return name.removeprefix(prefix)
    return name


def _image_names(stack: StackView, container: ResourceView) -> list[Any]:
    image = container.get("image")
    if isinstance(image, str) and image and not image.startswith("sha256:"):
        return [image]
    linked = [stack.by_urn[urn] for urn in container.property_dependencies.get("image", ()) if urn in stack.by_urn]
    images = [item for item in linked if item.type == kinds.REMOTE_IMAGE] or stack.dependencies(container, kinds.REMOTE_IMAGE)
    if not images and isinstance(image, str):
        # A real run: the image id is an output of the RemoteImage that pulled it.
        images = [item for item in stack.of_type(kinds.REMOTE_IMAGE) if image in (item.get("imageId"), item.get("repoDigest"))]
    return [item.get("name") for item in images]


def check(stack: StackView, node_repositories: Iterable[str]) -> Iterator[Finding]:
    allowed = {repository(item) for item in node_repositories}
    for container in stack.of_type(kinds.CONTAINER):
        if container.get("privileged") is not True:
            continue  # False, unset, or unknown in a preview: nothing to hold against it yet
        name = container.get("name") or container.name
        names = _image_names(stack, container)
        if not names:
            if container.get("image") is not UNKNOWN:
                yield Finding(
                    f"privileged container {name} runs an image the stack does not name; only node images may", container.urn
                )
            continue
        for image in names:
            if isinstance(image, str) and repository(image) not in allowed:
                yield Finding(
                    f"privileged container {name} runs {image}, not a Kubernetes node image "
                    f"({', '.join(sorted(allowed))}); privileged is root on the host",
                    container.urn,
                )
