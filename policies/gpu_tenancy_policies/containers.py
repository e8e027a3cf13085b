"""privileged-containers-are-nodes: privileged Docker containers only for Kubernetes node images.

A privileged container is root on the host. The only ones the platform needs are nested
Kubernetes nodes (kindest/node), which need it for systemd, containerd and kubelet. A worker's
``image`` is the id of a RemoteImage, so the rule follows the container's dependency on it to
learn which image that id is. Other settings make a container as good as root on the host
(the host's PID, IPC or network namespace, capabilities such as SYS_ADMIN, devices, bind mounts of
the host's system paths): they count as privileged too. No container, a node included, gets the
container engine's socket: through it, one tenant's worker would drive every other's.
"""

from __future__ import annotations

import posixpath
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


# Capabilities that each amount to root on the host (capabilities(7)); Docker takes them with or without CAP_.
_ROOT_CAPABILITIES = frozenset({"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "DAC_READ_SEARCH", "BPF"})
# Host paths whose bind mount hands over the host, as do their parents (/ and /var included): its
# configuration and secrets, kernel interfaces, devices, and the state of the container engines
# (every container's files, other tenants' workers included) and of kubelet.
_HOST_PATHS = (
    *("/etc", "/root", "/boot", "/proc", "/sys", "/dev", "/run", "/var/run"),
    *("/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet"),
)
# The host's programs: root the next time the host runs one, unless mounted read-only (as a node's /lib/modules).
_PROGRAM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64")
_SOCKETS = ("docker.sock", "containerd.sock", "podman.sock", "crio.sock")
# Where the engines put them: a bind of any of these directories (or of a parent) hands the socket over too.
_SOCKET_PATHS = (
    *("/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock"),
    *("/run/podman/podman.sock", "/var/run/podman/podman.sock", "/run/crio/crio.sock", "/var/run/crio/crio.sock"),
)


def _bound_device(driver_options: object) -> str | None:
    """The host path the local volume driver binds (``o: bind`` or ``rbind``, ``device``), if it does."""
    if not isinstance(driver_options, dict):
        return None
    device = driver_options.get("device")
    binds = {"bind", "rbind"} & {option.strip() for option in str(driver_options.get("o", "")).split(",")}
    return device if binds and isinstance(device, str) and device else None


def _named_volume_binds(stack: StackView) -> dict[str, str]:
    """The stack's docker Volumes that bind a host path, by volume name."""
    found = {}
    for volume in stack.of_type(kinds.VOLUME):
        device = _bound_device(volume.get("driverOpts"))
        name = volume.get("name") or volume.name
        if device is not None and isinstance(name, str):
            found[name] = device
    return found


def _host_paths(container: ResourceView, named: dict[str, str] | None = None) -> list[tuple[str, bool]]:
    """(host path, read-only) of each bind into the container: ``volumes`` with a host path,
    ``mounts`` of type bind, and volumes the local driver binds to a host path (``o: bind`` or
    ``rbind``, ``device``), given inline or as a Volume of the stack (``named``): the same bind
    under another name."""
    named = named or {}
    found = []
    for volume in container.get("volumes", default=[]) or []:
        if not isinstance(volume, dict):
            continue
        volume_name = volume.get("volumeName")
        path = volume.get("hostPath") or (named.get(volume_name) if isinstance(volume_name, str) else None)
        if isinstance(path, str) and path:
            found.append((path, volume.get("readOnly") is True))
    for mount in container.get("mounts", default=[]) or []:
        if not isinstance(mount, dict):
            continue
        read_only = mount.get("readOnly") is True
        if mount.get("type") == "bind" and isinstance(mount.get("source"), str):
            found.append((mount["source"], read_only))
        if mount.get("type") == "volume":
            options = mount.get("volumeOptions")
            device = _bound_device(options.get("driverOptions") if isinstance(options, dict) else None)
            source = mount.get("source")
            device = device or (named.get(source) if isinstance(source, str) else None)
            if device is not None:
                found.append((device, read_only))
    return found


def _hands_over_a_socket(given: str) -> bool:
    """A socket itself, wherever it lies, or a directory holding one where the engines put them."""
    path = _normal(given)
    return path.endswith(_SOCKETS) or any(_within(socket, path) for socket in _SOCKET_PATHS)


def _normal(path: str) -> str:
    """``/var/../etc/`` as ``/etc``: Docker resolves the path on the host (symlinks there stay unknown)."""
    return posixpath.normpath("/" + path).replace("//", "/")


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(f"{directory.rstrip('/')}/")


def _root_equivalents(container: ResourceView, named: dict[str, str]) -> list[str]:
    """What, besides ``privileged``, makes the container root on the host."""
    found = [f"{key} host" for key in ("pidMode", "ipcMode", "networkMode") if container.get(key) == "host"]
    adds = container.get("capabilities", "adds", default=[])
    for capability in adds if isinstance(adds, list) else []:
        if isinstance(capability, str) and capability.upper().removeprefix("CAP_") in _ROOT_CAPABILITIES:
            found.append(f"capability {capability}")
    devices = container.get("devices", default=[])
    for device in devices if isinstance(devices, list) else []:
        path = device.get("hostPath") if isinstance(device, dict) else None
        if isinstance(path, str):
            found.append(f"device {path}")
    for given, read_only in _host_paths(container, named):
        path = _normal(given)
        protected = (*_HOST_PATHS, *(() if read_only else _PROGRAM_PATHS))
        if any(_within(path, directory) or _within(directory, path) for directory in protected):
            found.append(f"host path {path}{' (read-only)' if read_only else ''}")
    return found


def check(stack: StackView, node_repositories: Iterable[str]) -> Iterator[Finding]:
    allowed = {repository(item) for item in node_repositories}
    named = _named_volume_binds(stack)
    for container in stack.of_type(kinds.CONTAINER):
        name = container.get("name") or container.name
        for path, _ in _host_paths(container, named):
            if _hands_over_a_socket(path):
                what = "the container engine's socket" if _normal(path).endswith(_SOCKETS) else "a directory of engine sockets"
                yield Finding(
                    f"container {name} mounts {path}, {what}: whoever runs in it drives every "
                    "container on the host, other tenants' workers included",
                    container.urn,
                )
        if container.get("privileged") is not True:
            reasons = _root_equivalents(container, named)
            names = _image_names(stack, container)
            if reasons and not (names and all(_is_node_image(image, allowed) for image in names)):
                yield Finding(
                    f"container {name} runs with {', '.join(reasons)}, as good as privileged (root on the host); "
                    "only node images may",
                    container.urn,
                )
            continue  # False, unset, or unknown in a preview: nothing more to hold against it yet
        names = _image_names(stack, container)
        if not names:
            if container.get("image") is not UNKNOWN:
                yield Finding(
                    f"privileged container {name} runs an image the stack does not name; only node images may", container.urn
                )
            continue
        for image in names:
            if isinstance(image, str) and not _is_node_image(image, allowed):
                yield Finding(
                    f"privileged container {name} runs {image}, not a Kubernetes node image "
                    f"({', '.join(sorted(allowed))}); privileged is root on the host",
                    container.urn,
                )


def _is_node_image(image: Any, allowed: set[str]) -> bool:
    return isinstance(image, str) and repository(image) in allowed
