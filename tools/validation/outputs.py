"""The deployed stack as the suite sees it: its Pulumi outputs and its declared configuration.

Outputs come from ``pulumi stack output --json --show-secrets`` (or a file holding that JSON), in
the shape ``__main__.py`` exports: ``managementKubeconfig`` and ``tenants`` = ``{name: {kubeconfig,
endpoint, kubernetesVersion, namespace, workers, gpus}}``. Whatever keeps the suite from reaching a
deployed stack raises ``StackUnavailable`` with one line saying why; the CLI prints it and exits 2.
Kubeconfigs are secrets: they are kept out of ``repr`` and out of every message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from gpu_tenancy.config import ConfigError, StackConfig
from gpu_tenancy.stack_file import is_file, load_stack_config

# `pulumi stack output` reads local state in well under a second; a minute covers a slow backend.
PULUMI_TIMEOUT = 60.0


class StackUnavailable(Exception):
    """No reachable deployed stack; ``str()`` is the single line the CLI prints before exit 2."""


@dataclass(frozen=True)
class GpuOutput:
    model: str
    count: int
    memory_mib: int


@dataclass(frozen=True)
class TenantOutputs:
    name: str
    kubeconfig: str = field(repr=False)
    endpoint: str
    kubernetes_version: str
    namespace: str
    workers: tuple[str, ...]
    gpus: Mapping[str, tuple[GpuOutput, ...]]

    @property
    def vip(self) -> str:
        return urlparse(self.endpoint).hostname or ""


@dataclass(frozen=True)
class StackOutputs:
    management_kubeconfig: str = field(repr=False)
    tenants: tuple[TenantOutputs, ...]

    def tenant(self, name: str) -> TenantOutputs:
        return next(tenant for tenant in self.tenants if tenant.name == name)


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def _first_line(text: str, limit: int = 200) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def read_pulumi_outputs(
    stack: str,
    cwd: Path,
    run: Runner = subprocess.run,
    which: Callable[[str], str | None] = shutil.which,
    timeout: float = PULUMI_TIMEOUT,
) -> object:
    """The stack's outputs as JSON, secrets shown, from the Pulumi CLI in ``cwd``."""
    if which("pulumi") is None:
        raise StackUnavailable("the Pulumi CLI is not on PATH: run `make validate` (it fetches it) or install pulumi")
    command = ["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", stack]
    try:
        # UTF-8 whatever the locale (a C locale would fail on any non-ASCII output); no stdin, so
        # the CLI can never wait on a prompt.
        done = run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            encoding="utf-8",
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StackUnavailable(f"`pulumi stack output --stack {stack}` did not answer within {timeout:.0f}s") from None
    except OSError as error:
        raise StackUnavailable(f"could not run the Pulumi CLI: {error}") from None
    if done.returncode != 0:
        # Only the first line: Pulumi's errors never carry secret values, but keep the line short.
        reason = _first_line(done.stderr) or f"exit status {done.returncode}"
        raise StackUnavailable(f"`pulumi stack output --stack {stack}` failed: {reason}")
    try:
        return json.loads(done.stdout or "{}")
    except (ValueError, RecursionError):  # not JSON, or JSON this reader cannot hold
        raise StackUnavailable(f"`pulumi stack output --stack {stack}` did not print JSON") from None


def read_outputs_file(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))  # as `pulumi stack output --json` writes it
    except OSError as error:
        raise StackUnavailable(f"cannot read stack outputs from {path}: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise StackUnavailable(f"{path} is not JSON: {error.msg} at line {error.lineno}") from None
    except UnicodeDecodeError as error:
        raise StackUnavailable(f"{path} is not UTF-8 text: byte {error.start} cannot be decoded") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise StackUnavailable(f"cannot read stack outputs from {path}: {error}") from None
    except RecursionError:
        raise StackUnavailable(f"cannot read stack outputs from {path}: it is nested too deeply") from None


def _require(condition: bool, where: str, what: str, source: str) -> None:
    if not condition:
        raise StackUnavailable(f"the stack outputs ({source}) lack a valid {where}: expected {what}; is the stack deployed?")


def _text(document: Mapping[str, Any], key: str, where: str, source: str) -> str:
    value = document.get(key)
    _require(isinstance(value, str) and bool(value.strip()), f"{where}.{key}", "a non-empty string", source)
    return value


def _gpus(raw: object, where: str, source: str) -> dict[str, tuple[GpuOutput, ...]]:
    _require(isinstance(raw, dict), where, "an object of worker: [gpus]", source)
    gpus: dict[str, tuple[GpuOutput, ...]] = {}
    for worker, entries in raw.items():
        _require(isinstance(entries, list), f"{where}.{worker}", "a list", source)
        parsed = []
        for i, entry in enumerate(entries):
            ok = isinstance(entry, dict) and isinstance(entry.get("model"), str)
            ok = ok and all(isinstance(entry.get(key), int) for key in ("count", "memoryMiB"))
            _require(ok, f"{where}.{worker}[{i}]", "{model, count, memoryMiB}", source)
            parsed.append(GpuOutput(entry["model"], entry["count"], entry["memoryMiB"]))
        gpus[worker] = tuple(parsed)
    return gpus


def _tenant(name: str, raw: object, source: str) -> TenantOutputs:
    where = f"tenants.{name}"
    _require(isinstance(raw, dict), where, "an object", source)
    endpoint = _text(raw, "endpoint", where, source)
    try:
        parsed = urlparse(endpoint)
        https = parsed.scheme == "https" and bool(parsed.hostname)
    except ValueError:  # an unclosed IPv6 bracket: https://[::1:6443
        https = False
    _require(https, f"{where}.endpoint", "https://VIP:PORT", source)
    workers = raw.get("workers")
    _require(
        isinstance(workers, list) and all(isinstance(w, str) and w for w in workers),
        f"{where}.workers",
        "a list of names",
        source,
    )
    return TenantOutputs(
        name=name,
        kubeconfig=_text(raw, "kubeconfig", where, source),
        endpoint=endpoint,
        kubernetes_version=_text(raw, "kubernetesVersion", where, source),
        namespace=_text(raw, "namespace", where, source),
        workers=tuple(workers),
        gpus=_gpus(raw.get("gpus", {}), f"{where}.gpus", source),
    )


def parse_outputs(document: object, source: str) -> StackOutputs:
    """Validate the outputs document; ``source`` names where it came from, for the message."""
    if not isinstance(document, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(document), "a number")
        raise StackUnavailable(f"expected a JSON object of stack outputs ({source}), not {kind}")
    if not document:
        raise StackUnavailable(f"the stack has no outputs ({source}): deploy it first with `make up`")
    management = _text(document, "managementKubeconfig", "outputs", source)
    tenants = document.get("tenants")
    _require(isinstance(tenants, dict), "outputs.tenants", "an object of tenant: {...}", source)
    return StackOutputs(management, tuple(_tenant(name, raw, source) for name, raw in tenants.items()))


def load_declared(path: Path) -> StackConfig:
    """The stack's declared ``gpu-tenancy`` config, the inventory the expectations are computed for."""
    if not is_file(path):
        raise StackUnavailable(f"no stack config file {path}: the expectations need the stack's declared inventory")
    try:
        return load_stack_config(path)
    except ConfigError as error:
        problems = "; ".join(f"{where}: {message}" if where else message for where, message in error.problems)
        raise StackUnavailable(f"{path.name} is not a valid stack configuration: {problems}") from None
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise StackUnavailable(f"cannot read {path}: {_first_line(str(error))}") from None
