"""Run the real ``__main__.py`` under Pulumi's mock runtime and record what the engine would see.

This is what ``tools.render`` prints and what the tests assert on: every registered or read
resource with its parent, provider, the URNs it waits for (explicit ``depends_on`` plus every
resource whose outputs flow into its inputs, as the SDK reports them to the engine) and its
inputs, plus the stack outputs.

Each run happens in a fresh ``contextvars.Context``: the Pulumi SDK keeps its settings, config and
root stack in context variables, so one process can render many configs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import copy
import gc
import heapq
import json
import runpy
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi
from google.protobuf import struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as pulumi_resource_runtime
from pulumi.runtime import rpc
from pulumi.runtime.proto import resource_pb2, source_pb2
from pulumi.runtime.settings import SETTINGS, get_root_resource
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from gpu_tenancy.config import CONFIG_NAMESPACE, ConfigError
from gpu_tenancy.stack_file import read_stack_file, stack_file

from . import mock_cloud

PROJECT_DIR = Path(__file__).resolve().parent.parent
SECRET = "[secret]"
UNKNOWN = "[unknown]"


class RenderError(Exception):
    """The program refused the configuration (exit status 2 in the CLIs).

    ``registered`` holds the resources the program had already registered: a refusal that comes
    late (from a live value) must come before anything that depends on the refused value.
    """

    def __init__(self, message: str, registered: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.registered = registered or []


@dataclass
class Render:
    stack: str
    resources: list[dict[str, Any]]
    outputs: dict[str, Any]
    preview: bool = False
    _by_urn: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """A deep copy: callers may change it without touching this render."""
        return copy.deepcopy({"stack": self.stack, "resources": self.resources, "outputs": self.outputs})

    def find(self, type_: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.resources if (type_ is None or r["type"] == type_) and (name is None or r["name"] == name)]

    def one(self, type_: str | None = None, name: str | None = None) -> dict[str, Any]:
        found = self.find(type_, name)
        if len(found) != 1:
            raise LookupError(f"expected one {type_ or 'resource'} named {name!r}, found {len(found)}")
        return found[0]

    def by_urn(self, urn: str) -> dict[str, Any]:
        if not self._by_urn:
            self._by_urn = {r["urn"]: r for r in self.resources}
        return self._by_urn[urn]

    def waits_for(self, resource: dict[str, Any], other: dict[str, Any]) -> bool:
        """Whether ``resource`` transitively waits for ``other`` in the engine's graph."""
        seen, todo = set(), list(resource["dependencies"])
        while todo:
            urn = todo.pop()
            if urn == other["urn"]:
                return True
            if urn not in seen:
                seen.add(urn)
                todo.extend(self.by_urn(urn)["dependencies"])
        return False


def _plain(value: Any, show_secrets: bool) -> Any:
    """Engine values as JSON: secrets masked unless asked, unknowns marked."""
    if rpc.is_rpc_secret(value):
        inner = _plain(value["value"], show_secrets=True)
        # A secret not known yet reveals nothing, and what is unknown matters to readers (policycheck).
        return inner if show_secrets or inner == UNKNOWN else SECRET
    if isinstance(value, Unknown) or (isinstance(value, str) and value == rpc.UNKNOWN):
        return UNKNOWN
    if isinstance(value, Mapping):
        return {key: _plain(item, show_secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, show_secrets) for item in value]
    if isinstance(value, pulumi.Asset | pulumi.Archive):
        return _asset(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire format has only doubles; the providers restore integers
    return value


def _asset(value: pulumi.Asset | pulumi.Archive) -> dict[str, Any]:
    """An asset or archive as what it carries: its text, path, URI or members."""
    for attribute in ("text", "path", "uri"):
        if isinstance(getattr(value, attribute, None), str):
            return {attribute: getattr(value, attribute)}
    return {"assets": {name: _asset(member) for name, member in getattr(value, "assets", {}).items()}}


def _deserialize(value: Any) -> Any:
    """Protobuf inputs as Python values, keeping explicit nulls.

    The SDK's own ``deserialize_properties`` drops null map entries; the engine does not, and a
    null is meaningful input to a provider.
    """
    if isinstance(value, struct_pb2.Value):
        kind = value.WhichOneof("kind")
        if kind == "struct_value":
            return _deserialize(value.struct_value)
        if kind == "list_value":
            return [_deserialize(item) for item in value.list_value.values]
        return None if kind == "null_value" else getattr(value, kind)
    if rpc._special_sig_key in value.fields:
        if value[rpc._special_sig_key] == rpc._special_secret_sig:
            return rpc.wrap_rpc_secret(_deserialize(value.fields["value"]))
        return rpc.deserialize_properties(value)
    return {key: _deserialize(item) for key, item in value.fields.items()}


PROVIDER_TYPE_PREFIX = "pulumi:providers:"


def _holds_unknown(value: Any) -> bool:
    """Whether decoded engine values hold an unknown anywhere (secrets included)."""
    if isinstance(value, str):
        return value == rpc.UNKNOWN
    if isinstance(value, Mapping):
        return any(_holds_unknown(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_unknown(item) for item in value)
    return False


def _urn_of(reference: str) -> str:
    """Provider references are ``<urn>::<id>``."""
    return reference.rsplit("::", 1)[0] if reference else ""


class _Cloud(pulumi_mocks.Mocks):
    """Computed outputs a real engine would return; nothing at all in preview, like a fresh stack."""

    def __init__(self, preview: bool) -> None:
        self.preview = preview
        self.tenant_planes: dict[str, dict[str, Any]] = {}

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, None]:
        # The program must not look anything up at program time: on an empty host (a pull-request
        # preview) such an invoke fails. Everything live flows as outputs of the resources that make it.
        raise AssertionError(f"unexpected invoke {args.token}; read live values from resource outputs")

    def computes(self, type_: str, custom: bool) -> bool:
        """Whether a registration's state is more than its inputs (a handler below, not in preview)."""
        return custom and not self.preview and hasattr(self, "_" + type_.rsplit(":", 1)[-1])

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict]:
        resource_id, computed = self.computed(args)
        return resource_id, {**args.inputs, **computed}

    def new_id(self, name: str, type_: str, custom: bool) -> str:
        """The id the engine reports for a new resource: none in a preview, which creates nothing.

        The SDK then resolves the resource's ``id`` as unknown. A new provider's is left known: it
        only ever shows in provider references, which the records name by URN.
        """
        if self.preview and custom and not type_.startswith(PROVIDER_TYPE_PREFIX):
            return ""
        return f"{name}-id"

    def computed(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict]:
        """The id and the properties the provider adds to (or changes in) the inputs."""
        resource_id = args.resource_id or self.new_id(args.name, args.typ, args.custom is not False)
        if self.preview and not args.resource_id:
            return resource_id, {}
        handler = getattr(self, "_" + args.typ.rsplit(":", 1)[-1], None) if args.custom is not False else None
        return resource_id, (handler(args) or {}) if handler is not None else {}

    def _Command(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        # `kind get kubeconfig`, `docker network inspect kind` and `docker info`, the only commands
        # whose output the program reads.
        if args.name.endswith("-kind-cluster"):
            return {"stdout": mock_cloud.kubeconfig(args.inputs["environment"]["KIND_CLUSTER"], mock_cloud.MANAGEMENT_API)}
        if args.name.endswith("-kind-network"):
            return {"stdout": mock_cloud.KIND_SUBNETS + "\n"}
        if args.name.endswith("-docker-info"):  # the engine's endpoint, then its `docker info` line
            return {"stdout": f"unix:///var/run/docker.sock\n{mock_cloud.DOCKER_INFO}\n"}
        return {"stdout": "", "stderr": ""}

    def _TenantControlPlane(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        metadata, spec = args.inputs["metadata"], args.inputs["spec"]
        self.tenant_planes[f"{metadata['namespace']}/{metadata['name']}"] = spec
        return {
            # The API server gives every object a uid.
            "metadata": {**metadata, "uid": mock_uid(metadata["namespace"], metadata["name"])},
            "status": {
                "controlPlaneEndpoint": mock_cloud.control_plane_endpoint(metadata["name"], spec),
                "kubeconfig": {"admin": {"secretName": f"{metadata['name']}-admin-kubeconfig"}},
                "kubernetesResources": {"version": {"status": "Ready", "version": spec["kubernetes"]["version"]}},
                "storage": {"driver": "etcd", "dataStoreName": spec["dataStore"]},
                "addons": {name: {"enabled": True} for name in spec.get("addons", {})},
            },
        }

    def _Secret(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        if not args.resource_id or not args.resource_id.endswith("-admin-kubeconfig"):
            return {}
        namespace, name = args.resource_id.split("/", 1)
        tenant = name.removesuffix("-admin-kubeconfig")
        endpoint = mock_cloud.control_plane_endpoint(tenant, self.tenant_planes[f"{namespace}/{tenant}"])
        server = f"https://{endpoint}"
        # Kamaji writes both: admin.conf (kubeadm:cluster-admins) and super-admin.conf (system:masters).
        data = {
            "admin.conf": _b64(mock_cloud.kubeconfig(tenant, server)),
            "super-admin.conf": _b64(mock_cloud.kubeconfig(tenant, server, user="kubernetes-super-admin")),
        }
        return {"metadata": {"name": name, "namespace": namespace}, "data": data}

    def _RandomUuid(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        return {"result": str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-tenancy:{args.name}"))}

    def _RandomString(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        return {"result": mock_cloud.random_string(args.name, args.inputs)}

    def _Offset(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        return {"rfc3339": "2026-12-02T00:00:00Z"}

    def _RemoteImage(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        name = args.inputs["name"]
        return {"imageId": "sha256:" + mock_cloud.fake_id("image", name), "repoDigest": mock_cloud.repo_digest(name)}


def mock_uid(namespace: str, name: str) -> str:
    """The uid the mock API server gives an object: stable, so that renders stay identical."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class _Monitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, recording each request as the engine would receive it."""

    def __init__(self, cloud: _Cloud) -> None:
        super().__init__(cloud)
        self.records: list[dict[str, Any]] = []
        # Providers an unknown input leaves unconfigured in a preview (a fresh stack's kind and
        # tenant providers, whose kubeconfigs come from resources not created yet).
        self.unconfigured: set[str] = set()

    def _record(self, request: Any, urn: str, read_id: str | None = None) -> dict[str, Any]:
        record = {
            "urn": urn,
            "type": request.type,
            "name": request.name,
            "parent": request.parent or None,
            "provider": _urn_of(request.provider) or None,
            "dependencies": sorted(set(getattr(request, "dependencies", []) or [])),
            "inputs": _deserialize(request.properties if read_id else request.object),
            "custom": bool(getattr(request, "custom", True)),
        }
        options = _lifecycle_options(request)
        if options:
            record["options"] = options
        if read_id is not None:
            # In a preview the id of a read can be unknown; the engine then defers the read.
            record["read"] = UNKNOWN if read_id == rpc.UNKNOWN else read_id
        self.records.append(record)
        return record

    def RegisterResource(self, request: Any) -> Any:
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            return resource_pb2.RegisterResourceResponse(urn=urn)
        record = self._record(request, urn)
        if self.mocks.preview and request.type.startswith(PROVIDER_TYPE_PREFIX) and _holds_unknown(record["inputs"]):
            self.unconfigured.add(urn)
        if request.custom and record["provider"] in self.unconfigured:
            return resource_pb2.RegisterResourceResponse(urn=urn, id=self._nothing(urn, request.importId))
        if not self.mocks.computes(request.type, request.custom):
            # The state is the inputs: hand the request's own struct back instead of decoding it
            # for the mock and encoding it again (a tenth of a render).
            resource_id = request.importId or self.mocks.new_id(request.name, request.type, request.custom)
            self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, resource_id, record["inputs"])
            return resource_pb2.RegisterResourceResponse(urn=urn, id=resource_id, object=request.object)
        resource_id, state = self._new(request, urn, request.object, record["inputs"], request.importId, request.custom or False)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=resource_id, object=state)

    def ReadResource(self, request: Any) -> Any:
        urn = self.make_urn(request.parent, request.type, request.name)
        record = self._record(request, urn, read_id=request.id)
        if record["provider"] in self.unconfigured:
            self._nothing(urn, request.id)
            return resource_pb2.ReadResourceResponse(urn=urn)
        _, state = self._new(request, urn, request.properties, record["inputs"], request.id, custom=None)
        return resource_pb2.ReadResourceResponse(urn=urn, properties=state)

    def _nothing(self, urn: str, resource_id: str) -> str:
        """What an unconfigured provider answers in a preview: no properties, so the SDK resolves
        every output as unknown (pulumi/pulumi pkg/resource/plugin/provider_plugin.go, ``Create``
        and ``Read`` when the provider's config is not known)."""
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, resource_id, {})
        return resource_id

    def _new(
        self, request: Any, urn: str, wire: struct_pb2.Struct, inputs: dict[str, Any], resource_id: str, custom: bool | None
    ) -> tuple[str, struct_pb2.Struct]:
        """The mock's id and state for a registered or read resource, kept as the SDK's monitor keeps them.

        The state goes back as the request's own struct with the computed properties set on it:
        decoding the inputs again for the mock and encoding the whole state anew cost a sixteenth
        of a render, for the handful of properties a handler adds.
        """
        args = pulumi_mocks.MockResourceArgs(
            typ=request.type, name=request.name, inputs=inputs, provider=request.provider, resource_id=resource_id, custom=custom
        )
        resource_id, computed = self.mocks.computed(args)
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, resource_id, {**inputs, **computed})
        state = struct_pb2.Struct()
        state.CopyFrom(wire)
        # A handler's values are plain (strings, numbers, lists, maps), which is all Struct.update takes.
        state.update(computed)
        return resource_id, state


# Resource options that change what `pulumi up` or `destroy` does to a resource, or what its state
# keeps in plain text, as the engine receives them; a record lists those that are set.
_LIFECYCLE_OPTIONS = (
    "protect",
    "retainOnDelete",
    "deleteBeforeReplace",
    "replaceOnChanges",
    "ignoreChanges",
    "deletedWith",
    "additionalSecretOutputs",
)


def _lifecycle_options(request: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    # Aliases as the SDK sends them to a monitor that takes alias specs: the old names.
    aliases = [alias.spec.name for alias in getattr(request, "aliases", []) if alias.HasField("spec") and alias.spec.name]
    aliases += list(getattr(request, "aliasURNs", []))
    if aliases:
        found["aliases"] = aliases
    for option in _LIFECYCLE_OPTIONS:
        value = getattr(request, option, None)
        if value:
            found[option] = list(value) if not isinstance(value, bool | str) else value
    timeouts = getattr(request, "customTimeouts", None)
    if timeouts is not None:
        set_timeouts = {name: getattr(timeouts, name) for name in ("create", "update", "delete") if getattr(timeouts, name)}
        if set_timeouts:
            found["customTimeouts"] = set_timeouts
    return found


def load_stack_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """Config of a ``Pulumi.<stack>.yaml`` as the CLI hands it to the program: JSON strings."""
    try:
        values, secret_keys = read_stack_file(path)
    except ConfigError as error:  # not YAML, not a stack file, or our namespace misspelt
        raise RenderError(str(error)) from None
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in values.items()}, secret_keys


def render(
    config: dict[str, str],
    *,
    stack: str = "dev",
    secret_keys: list[str] | None = None,
    preview: bool = False,
    show_secrets: bool = False,
    program: Callable[[], None] | None = None,
) -> Render:
    """Run the program once against ``config`` (``"gpu-tenancy:key" -> value`` strings).

    ``program`` replaces the project's ``__main__.py``; ``tools.bench`` uses it to measure the
    SDK's own cost per resource with resources that have nothing to serialise.
    """
    with _collector_paused():
        return contextvars.Context().run(
            _render, config, stack, secret_keys or [], preview, show_secrets, program or _project_program
        )


def _project_program() -> None:
    runpy.run_path(str(PROJECT_DIR), run_name="__main__")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out of a run.

    The provider SDKs leave hundreds of thousands of long-lived objects behind at import; every
    full collection triggered by a run's allocations walks them all, which cost 40 % of a render.
    Freezing moves them out of the collector's sight; the run's own garbage is collected after.
    """
    was_enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def render_stack(stack: str = "dev", **kwargs: Any) -> Render:
    config, secret_keys = load_stack_file(stack_file(stack))
    return render(config, stack=stack, secret_keys=secret_keys, **kwargs)


def render_file(path: Path, **kwargs: Any) -> Render:
    config, secret_keys = load_stack_file(path)
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml") or "dev"
    # The program reads its stack file for the plain-text secret warning; here that is ``path``,
    # wherever it lies, as the CLI's --config-file would make it.
    with mock.patch("components.stack_config.stack_file", lambda _stack: path):
        return render(config, stack=stack, secret_keys=secret_keys, **kwargs)


class _InlineLoop(asyncio.SelectorEventLoop):
    """An event loop that runs the SDK's monitor calls where they are made.

    The mock monitor is synchronous and the SDK's ``_sync_await`` is re-entrant, so threads buy
    nothing here; without them renders are faster, ordered, and leave no per-thread event loops
    behind (the workaround pulumi/pulumi#7663 discusses for hanging mock tests). The result comes
    back as a finished future, so the awaiting registration goes on at once rather than after a
    wake-up through the loop's self-pipe (a fiftieth of a render's instructions).
    """

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future:
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting coroutine
            future.set_exception(error)
        return future


def _quiet_aborted_outputs(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """After a config error aborts a run, every output derived from the failed one carries the
    same error; their "never retrieved" reports would only repeat the message already raised."""
    if not isinstance(context.get("exception"), pulumi.RunError):
        loop.default_exception_handler(context)


def _no_stack_trace() -> source_pb2.StackTrace:
    return source_pb2.StackTrace()


def _no_debug_log(*_args: Any, **_kwargs: Any) -> None:
    pass


_sdk_create_urn = pulumi_resource_runtime.create_urn


def _create_urn(
    name: pulumi.Input[str],
    type_: pulumi.Input[str],
    parent: Any = None,
    project: str | None = None,
    stack: str | None = None,
) -> pulumi.Output[str]:
    """The SDK's ``create_urn``, computed at once when every part is a plain string.

    The SDK computes each registration's URN this way only for runs without a monitor, and
    discards it here; its two ``apply`` steps per resource were a tenth of a render. Aliases
    reach the SDK's own version whenever a part is an output or a resource.
    """
    if not (isinstance(name, str) and isinstance(type_, str) and (parent is None or isinstance(parent, str))):
        return _sdk_create_urn(name, type_, parent, project, stack)
    if parent is not None:
        prefix = parent[: parent.rfind("::")] + "$"
    else:
        stack = pulumi.get_stack() if stack is None else stack
        project = pulumi.get_project() if project is None else project
        prefix = f"urn:pulumi:{stack}::{project}::"
    return pulumi.Output.from_input(f"{prefix}{type_}::{name}")


def _render(
    config: dict[str, str], stack: str, secret_keys: list[str], preview: bool, show_secrets: bool, program: Callable[[], None]
) -> Render:
    # A loop per run: a run aborted by a config error leaves the program's pending tasks behind,
    # and they must not wake up inside the next run.
    loop = _InlineLoop()
    asyncio.set_event_loop(loop)
    loop.set_exception_handler(_quiet_aborted_outputs)
    # The SDK walks the Python stack (reading source lines) on every registration to tell the CLI
    # where a resource was declared; nothing here shows it, and it is a third of a render's time.
    trace_patch = mock.patch.object(pulumi_resource_runtime, "_get_stack_trace", _no_stack_trace)
    urn_patch = mock.patch.object(pulumi_resource_runtime, "create_urn", _create_urn)
    # The mock engine hands debug messages to the root logger and nothing here shows them;
    # building a LogRequest for each of the SDK's several per registration cost a fiftieth.
    debug_patch = mock.patch.object(pulumi.log, "debug", _no_debug_log)
    try:
        with trace_patch, urn_patch, debug_patch:
            return _run_program(config, stack, secret_keys, preview, show_secrets, program)
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.gather(*asyncio.all_tasks(loop), return_exceptions=True))
        loop.close()
        asyncio.set_event_loop(None)


def _run_program(
    config: dict[str, str], stack: str, secret_keys: list[str], preview: bool, show_secrets: bool, program: Callable[[], None]
) -> Render:
    cloud = _Cloud(preview)
    monitor = _Monitor(cloud)
    pulumi.runtime.set_mocks(cloud, project=CONFIG_NAMESPACE, stack=stack, preview=preview, monitor=monitor)
    # set_mocks leaves the pending-outputs set as it was; a fresh one per run, as
    # pulumi.runtime.test clears it, keeps an aborted run's outputs out of the next.
    SETTINGS.outputs = set()
    pulumi.runtime.set_all_config(config, secret_keys)
    try:
        _sync_await(run_pulumi_func(program))
    except pulumi.RunError as error:
        raise RenderError(str(error), monitor.records) from None
    outputs = _sync_await(_resolve(dict(get_root_resource().outputs), show_secrets))
    resources = [{**record, "inputs": _plain(record["inputs"], show_secrets)} for record in _in_dependency_order(monitor.records)]
    return Render(stack, resources, outputs, preview)


def _in_dependency_order(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with every resource after its parent, provider and dependencies, ties by URN.

    Registration order is that too, but which of two resources that become ready together
    registers first depends on the event loop's history; the render must not.
    """
    by_urn = {record["urn"]: record for record in records}
    waits = {
        urn: {other for other in (*record["dependencies"], record["parent"], record["provider"]) if other in by_urn}
        for urn, record in by_urn.items()
    }
    dependents: dict[str, list[str]] = {urn: [] for urn in by_urn}
    for urn, others in waits.items():
        for other in others:
            dependents[other].append(urn)
    ready = [urn for urn, others in waits.items() if not others]
    heapq.heapify(ready)
    ordered = []
    while ready:
        urn = heapq.heappop(ready)
        ordered.append(by_urn[urn])
        for dependent in dependents[urn]:
            waits[dependent].discard(urn)
            if not waits[dependent]:
                heapq.heappush(ready, dependent)
    return ordered


async def _resolve(value: Any, show_secrets: bool) -> Any:
    if isinstance(value, pulumi.Output):
        if not await value.is_known():
            return UNKNOWN
        if await value.is_secret() and not show_secrets:
            return SECRET
        return await _resolve(await value.future(), show_secrets)
    if isinstance(value, Mapping):
        return {key: await _resolve(item, show_secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [await _resolve(item, show_secrets) for item in value]
    return value
