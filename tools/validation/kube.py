"""The suite's only door to Kubernetes: the small ``Kube`` interface the checks use, and ``LiveKube``.

Checks never touch the kubernetes client directly, so tests replace a cluster by a fake of
``Kube``. ``LiveKube`` returns small frozen views instead of client models and turns every
failure into ``KubeError`` (one line, no secrets): ``Unreachable`` when no HTTP answer came,
``TlsRefused`` when the TLS handshake failed, ``ApiRefused`` with the HTTP status otherwise.
Every request carries ``_request_timeout``; exec and logs are bounded too, so nothing hangs.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import ssl
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import urllib3
import websocket
import yaml
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.stream import stream as kube_stream

from gpu_tenancy.kubeconfig import current_cluster

from . import interrupts

# (connect, read) seconds for every request; an API server that answers at all does so quickly.
REQUEST_TIMEOUT: tuple[float, float] = (5.0, 20.0)
# Logs and exec go API server -> Konnectivity -> kubelet; a broken tunnel must not stall the run.
STREAM_TIMEOUT = 30.0
# One retry of a failed connection, not urllib3's default three: the suite reports, it does not wait.
RETRIES = 1
ERROR_CHANNEL = 3


class KubeError(Exception):
    """A Kubernetes call that did not succeed; ``str()`` is one line for the table."""


class Unreachable(KubeError):
    """No HTTP answer: connection refused, unknown host, timeout."""


class TlsRefused(KubeError):
    """The TLS handshake failed, e.g. the server's certificate is not signed by the client's CA."""


class ApiRefused(KubeError):
    """The API server answered with an error status (401, 403, 404, 409, ...)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404


@dataclass(frozen=True)
class NodeView:
    name: str
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodView:
    """A pod's identity and the fields the checks decide on (``limits``: its first container's)."""

    name: str
    namespace: str
    phase: str = "Pending"
    uid: str = ""
    node_name: str | None = None
    scheduler_name: str = "default-scheduler"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class EventView:
    """An event about a pod; ``uid`` is the pod's, since events outlive a deleted pod of the same name."""

    reason: str
    message: str
    component: str = ""
    timestamp: float = 0.0
    uid: str = ""


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    desired: int
    ready: int

    @property
    def ok(self) -> bool:
        return self.ready >= self.desired


class Kube(Protocol):
    """What the checks need from one cluster. Errors are ``KubeError``; reads of a missing object return None."""

    @property
    def server(self) -> str: ...

    def server_version(self) -> str: ...

    def list_nodes(self) -> list[NodeView]: ...

    def list_namespaces(self) -> list[str]: ...

    def create_namespace(self, name: str, labels: Mapping[str, str]) -> None: ...

    def delete_namespace(self, name: str) -> None: ...

    def service_account_exists(self, namespace: str, name: str) -> bool: ...

    def list_workloads(self, namespace: str) -> list[Workload]: ...

    def helm_release_status(self, namespace: str, release: str) -> str | None: ...

    def get_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> dict[str, Any] | None: ...

    def webhook_configuration_exists(self, name: str) -> bool: ...

    def get_resource_quota(self, namespace: str, name: str) -> dict[str, str] | None: ...

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> PodView: ...

    def read_pod(self, namespace: str, name: str) -> PodView | None: ...

    def delete_pod(self, namespace: str, name: str) -> None: ...

    def list_pods(self, namespace: str | None = None, label_selector: str = "") -> list[PodView]: ...

    def pod_events(self, namespace: str, name: str) -> list[EventView]: ...

    def pod_log(self, namespace: str, name: str) -> str: ...

    def pod_exec(self, namespace: str, name: str, command: Sequence[str]) -> str: ...


class Connector(Protocol):
    """Opens a ``Kube`` from a kubeconfig, optionally aimed at another server or without verifying it."""

    def __call__(self, kubeconfig: str, *, server: str | None = None, verify: bool = True) -> Kube: ...


# --- the kubernetes-client implementation ----------------------------------------------------


@dataclass(frozen=True)
class Apis:
    """The client API groups ``LiveKube`` calls; tests pass recorders to see every call's arguments."""

    core: Any
    apps: Any
    custom: Any
    admission: Any
    version: Any


def _one_line(value: object, limit: int = 240) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _api_message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return _one_line(body["message"])
    return _one_line(error.reason or "no reason given")


def translate(error: BaseException) -> KubeError:
    """The ``KubeError`` for anything the kubernetes client or urllib3 raised."""
    if isinstance(error, KubeError):
        return error
    if isinstance(error, ApiException):
        if not error.status:
            # The websocket path (exec) reports every failure as status 0 with the text as reason.
            return KubeError(_one_line(error.reason or "websocket failure"))
        return ApiRefused(int(error.status), _api_message(error))
    reason = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason else error
    if isinstance(reason, urllib3.exceptions.SSLError | ssl.SSLError):
        return TlsRefused(f"TLS handshake failed: {_one_line(reason)}")
    return Unreachable(f"no answer: {_one_line(reason)}")


_CLIENT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, websocket.WebSocketException)


def _timestamp(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


class LiveKube:
    """``Kube`` over the kubernetes Python client, one instance per cluster and credential."""

    def __init__(
        self,
        apis: Apis,
        server: str,
        *,
        insecure: bool = False,
        request_timeout: tuple[float, float] = REQUEST_TIMEOUT,
        stream_timeout: float = STREAM_TIMEOUT,
        streamer: Callable[..., Any] = kube_stream,
    ) -> None:
        self._apis = apis
        self._server = server
        self._insecure = insecure
        self._timeout = request_timeout
        self._stream_timeout = stream_timeout
        self._stream = streamer

    @property
    def server(self) -> str:
        return self._server

    @contextmanager
    def _guard(self) -> Iterator[None]:
        with warnings.catch_warnings():
            if self._insecure:
                # The isolation probe skips verification on purpose; one warning per request is noise.
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            before = interrupts.received()
            try:
                yield
            except _CLIENT_ERRORS as error:
                # The client wraps an interrupt during an exec handshake as ApiException(status=0).
                if interrupts.raised_since(before):
                    raise KeyboardInterrupt from None
                raise translate(error) from None

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._guard():
            return method(*args, _request_timeout=self._timeout, **kwargs)

    def _read(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A read whose 404 means "absent" (None) rather than an error."""
        try:
            return self._call(method, *args, **kwargs)
        except ApiRefused as error:
            if error.not_found:
                return None
            raise

    def server_version(self) -> str:
        return self._call(self._apis.version.get_code).git_version

    def list_nodes(self) -> list[NodeView]:
        return [_node_view(node) for node in self._call(self._apis.core.list_node).items]

    def list_namespaces(self) -> list[str]:
        return [ns.metadata.name for ns in self._call(self._apis.core.list_namespace).items]

    def create_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}
        self._call(self._apis.core.create_namespace, body)

    def delete_namespace(self, name: str) -> None:
        self._read(self._apis.core.delete_namespace, name)

    def service_account_exists(self, namespace: str, name: str) -> bool:
        return self._read(self._apis.core.read_namespaced_service_account, name, namespace) is not None

    def list_workloads(self, namespace: str) -> list[Workload]:
        apps = self._apis.apps
        deployments = self._call(apps.list_namespaced_deployment, namespace).items
        daemonsets = self._call(apps.list_namespaced_daemon_set, namespace).items
        statefulsets = self._call(apps.list_namespaced_stateful_set, namespace).items
        return [
            *(_replicated("Deployment", item) for item in deployments),
            *(_daemonset(item) for item in daemonsets),
            *(_replicated("StatefulSet", item) for item in statefulsets),
        ]

    def helm_release_status(self, namespace: str, release: str) -> str | None:
        # Helm 3 keeps each revision in a Secret labelled owner=helm, name, version and status.
        secrets = self._call(self._apis.core.list_namespaced_secret, namespace, label_selector=f"owner=helm,name={release}")
        revisions = [item.metadata.labels or {} for item in secrets.items]
        if not revisions:
            return None
        latest = max(revisions, key=lambda labels: int(labels.get("version", "0") or 0))
        return latest.get("status")

    def get_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
        return self._read(self._apis.custom.get_namespaced_custom_object, group, version, namespace, plural, name)

    def webhook_configuration_exists(self, name: str) -> bool:
        return self._read(self._apis.admission.read_mutating_webhook_configuration, name) is not None

    def get_resource_quota(self, namespace: str, name: str) -> dict[str, str] | None:
        quota = self._read(self._apis.core.read_namespaced_resource_quota, name, namespace)
        if quota is None:
            return None
        return {key: str(value) for key, value in ((quota.spec and quota.spec.hard) or {}).items()}

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> PodView:
        return _pod_view(self._call(self._apis.core.create_namespaced_pod, namespace, dict(manifest)))

    def read_pod(self, namespace: str, name: str) -> PodView | None:
        pod = self._read(self._apis.core.read_namespaced_pod, name, namespace)
        return None if pod is None else _pod_view(pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        # Grace 0: test pods run pause, and HAMi releases their cards only once they are gone.
        self._read(self._apis.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)

    def list_pods(self, namespace: str | None = None, label_selector: str = "") -> list[PodView]:
        core = self._apis.core
        if namespace is None:
            pods = self._call(core.list_pod_for_all_namespaces, label_selector=label_selector)
        else:
            pods = self._call(core.list_namespaced_pod, namespace, label_selector=label_selector)
        return [_pod_view(pod) for pod in pods.items]

    def pod_events(self, namespace: str, name: str) -> list[EventView]:
        events = self._call(self._apis.core.list_namespaced_event, namespace, field_selector=f"involvedObject.name={name}")
        return [_event_view(event) for event in events.items]

    def pod_log(self, namespace: str, name: str) -> str:
        return self._call(self._apis.core.read_namespaced_pod_log, name, namespace) or ""

    def pod_exec(self, namespace: str, name: str, command: Sequence[str]) -> str:
        """stdout+stderr of ``command``; KubeError when it cannot run or exits non-zero."""
        with self._guard():
            # Without a socket timeout the websocket handshake itself could wait forever.
            websocket.setdefaulttimeout(self._stream_timeout)
            session = self._stream(
                self._apis.core.connect_get_namespaced_pod_exec,
                name,
                namespace,
                command=list(command),
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                _preload_content=False,
                _request_timeout=self._stream_timeout,
            )
            try:
                session.run_forever(timeout=self._stream_timeout)
                if session.is_open():
                    raise KubeError(f"exec did not finish within {self._stream_timeout:.0f}s")
                status = session.read_channel(ERROR_CHANNEL)
                output = session.read_all()
            finally:
                session.close()
        _raise_for_exec_status(status)
        return output


def _raise_for_exec_status(status: str) -> None:
    """The exec error channel carries a v1 Status; anything but Success is a failure."""
    if not status:
        return
    try:
        document = yaml.safe_load(status)
    except yaml.YAMLError:
        raise KubeError(f"exec: unreadable status {_one_line(status)}") from None
    if isinstance(document, dict) and document.get("status") != "Success":
        raise KubeError(f"exec failed: {_one_line(document.get('message') or document)}")


def _node_view(node: Any) -> NodeView:
    status = node.status
    conditions = (status.conditions if status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return NodeView(
        name=node.metadata.name,
        ready=ready,
        labels=dict(node.metadata.labels or {}),
        annotations=dict(node.metadata.annotations or {}),
        capacity={k: str(v) for k, v in ((status and status.capacity) or {}).items()},
        allocatable={k: str(v) for k, v in ((status and status.allocatable) or {}).items()},
    )


def _pod_view(pod: Any) -> PodView:
    containers = (pod.spec and pod.spec.containers) or []
    resources = containers[0].resources if containers else None
    limits = (resources and resources.limits) or {}
    status = pod.status
    return PodView(
        name=pod.metadata.name,
        namespace=pod.metadata.namespace,
        phase=(status and status.phase) or "Pending",
        uid=pod.metadata.uid or "",
        node_name=pod.spec.node_name if pod.spec else None,
        scheduler_name=(pod.spec and pod.spec.scheduler_name) or "default-scheduler",
        annotations=dict(pod.metadata.annotations or {}),
        labels=dict(pod.metadata.labels or {}),
        limits={k: str(v) for k, v in limits.items()},
        reason=(status and status.reason) or "",
        message=(status and status.message) or "",
    )


def _event_view(event: Any) -> EventView:
    # An events.k8s.io event (kube-scheduler's) seen as core/v1 has no lastTimestamp; its eventTime is
    # its first occurrence and repeats go to series.lastObservedTime.
    series = event.series
    when = event.last_timestamp or (series and series.last_observed_time) or event.event_time or event.metadata.creation_timestamp
    component = (event.source and event.source.component) or event.reporting_component or ""
    uid = (event.involved_object and event.involved_object.uid) or ""
    return EventView(event.reason or "", event.message or "", component, _timestamp(when), uid)


def _replicated(kind: str, item: Any) -> Workload:
    desired = item.spec.replicas if item.spec and item.spec.replicas is not None else 1
    ready = (item.status and item.status.ready_replicas) or 0
    return Workload(kind, item.metadata.namespace, item.metadata.name, desired, ready)


def _daemonset(item: Any) -> Workload:
    status = item.status
    desired = (status and status.desired_number_scheduled) or 0
    ready = (status and status.number_ready) or 0
    return Workload("DaemonSet", item.metadata.namespace, item.metadata.name, desired, ready)


# --- opening a cluster -----------------------------------------------------------------------


def _current_cluster(document: dict[str, Any]) -> dict[str, Any]:
    try:
        return current_cluster(document)
    except ValueError as error:
        raise KubeError(f"the kubeconfig names no usable current cluster ({error})") from None


def retarget(kubeconfig: Mapping[str, Any], server: str | None, verify: bool) -> dict[str, Any]:
    """A copy of ``kubeconfig`` aimed at ``server``, trusting no server certificate if not ``verify``.

    Credentials stay as they are: the isolation check presents one tenant's client certificate
    to another tenant's API server.
    """
    document = copy.deepcopy(dict(kubeconfig))
    cluster = _current_cluster(document)
    if server is not None:
        cluster["server"] = server
    if not verify:
        cluster.pop("certificate-authority-data", None)
        cluster.pop("certificate-authority", None)
        cluster["insecure-skip-tls-verify"] = True
    return document


def no_proxy(environ: Mapping[str, str]) -> str | None:
    """NO_PROXY as kubectl reads it, for the client, which drops it (kubernetes-client/python#2460).

    Go reads NO_PROXY before no_proxy. The entries are stripped: the client splits the list on
    commas for exec's websocket without stripping, and " 172.18.0.0/16" matches nothing there.
    """
    raw = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    return ",".join(entry.strip() for entry in raw.split(",") if entry.strip()) or None


def https_proxy(environ: Mapping[str, str], endpoint: str) -> str | None:
    """The proxy Go's proxy selection (kubectl, the Pulumi provider) takes for an https server.

    That is HTTPS_PROXY, else https_proxy, and never one for loopback; the client instead lets
    HTTP_PROXY and http_proxy override them (kubernetes/client/configuration.py), so with both set
    it would send the tenants' TLS through another proxy than kubectl does. As Go, a proxy given
    without a scheme is an http:// one.
    """
    if endpoint.startswith("http://"):
        raw = environ.get("HTTP_PROXY") or environ.get("http_proxy") or ""
    else:
        raw = environ.get("HTTPS_PROXY") or environ.get("https_proxy") or ""
    if not raw or _is_loopback(urllib3.util.parse_url(endpoint).host):
        return None
    return raw if "://" in raw else f"http://{raw}"


# A NO_PROXY list for the client that no host matches (.invalid is reserved, RFC 2606).
NO_PROXY_MATCHES_NOTHING = "proxy-url.invalid"


def cluster_proxy(proxy_url: str) -> str:
    """A kubeconfig's ``proxy-url`` as the client takes it: http(s) only, with the port Go would default."""
    parsed = urllib3.util.parse_url(proxy_url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise KubeError(f"proxy-url {parsed.scheme or proxy_url}:// proxies are not supported here; use an http(s) proxy")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed._replace(port=port).url


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def connect(kubeconfig: str, *, server: str | None = None, verify: bool = True) -> LiveKube:
    """A ``LiveKube`` from kubeconfig text, loaded from a dict (nothing written but the client's 0600 cert files)."""
    try:
        document = yaml.safe_load(kubeconfig)
    except yaml.YAMLError:
        raise KubeError("the kubeconfig is not YAML") from None
    if not isinstance(document, dict):
        raise KubeError("the kubeconfig is not a YAML mapping")
    configuration = type.__call__(client.Configuration)
    configuration.retries = RETRIES
    configuration.no_proxy = no_proxy(os.environ)
    try:
        document = retarget(document, server, verify)
        cluster = _current_cluster(document)
        endpoint = str(cluster["server"])
        # A cluster's proxy-url wins over the environment, NO_PROXY included, as in kubectl (client-go
        # sets the transport's Proxy to it); the Python client never reads it itself.
        if proxy_url := cluster.get("proxy-url"):
            configuration.proxy = cluster_proxy(str(proxy_url))
            # Not None: exec's websocket then reads NO_PROXY from the environment itself.
            configuration.no_proxy = NO_PROXY_MATCHES_NOTHING
        else:
            configuration.proxy = https_proxy(os.environ, endpoint)
        api_client = kube_config.new_client_from_config_dict(document, persist_config=False, client_configuration=configuration)
    except (ConfigException, ValueError, KeyError, TypeError, AttributeError) as error:
        # The message could quote the kubeconfig; its type is enough to say it is unusable.
        raise KubeError(f"the kubeconfig is unusable ({type(error).__name__})") from None
    apis = Apis(
        core=client.CoreV1Api(api_client),
        apps=client.AppsV1Api(api_client),
        custom=client.CustomObjectsApi(api_client),
        admission=client.AdmissionregistrationV1Api(api_client),
        version=client.VersionApi(api_client),
    )
    return LiveKube(apis, endpoint, insecure=not verify)
