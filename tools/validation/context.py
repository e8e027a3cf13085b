"""The state of one validation run: settings, tenants, time, and the cleanup each check owns.

Every wait is bounded by ``Settings`` and measured on a ``Clock``, so that tests can run the
checks' polling loops in no time. A check registers what it creates with its ``Cleanup`` before
creating it; the runner deletes it all when the check ends and waits until deleted pods are gone
(HAMi releases their cards only then).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from gpu_tenancy.config import StackConfig, Tenant

from .expect import DEFAULT_MAX_FIT_PODS
from .kube import Connector, Kube, KubeError
from .outputs import TenantOutputs

RUN_LABEL = "gpu-tenancy.io/validation-run"


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class Settings:
    """Bounds of every wait, in seconds, and of the probe count."""

    poll_interval: float = 2.0
    start_timeout: float = 180.0  # a pause pod Running (first image pull on a fresh node)
    land_timeout: float = 120.0  # a probe placed and bound (HAMi's node lock expires after 2s)
    event_timeout: float = 90.0  # a FailedScheduling event carrying the model's reasons
    gone_timeout: float = 90.0  # deleted pods gone, so HAMi releases their cards
    namespace_timeout: float = 60.0  # the scratch namespace's default ServiceAccount
    registration_timeout: float = 60.0  # recent mock device plugins re-read nodes every 30s
    max_fit_pods: int = DEFAULT_MAX_FIT_PODS


@dataclass
class Target:
    """One tenant under validation: its outputs, its declared config and its cluster."""

    outputs: TenantOutputs
    declared: Tenant | None
    kube: Kube | None
    version: str | None = None
    problem: str = ""
    scratch: str = ""
    scratch_ready: bool = False

    @property
    def name(self) -> str:
        return self.outputs.name


@dataclass
class Run:
    stack: str
    run_id: str
    management: Kube
    targets: list[Target]
    connector: Connector
    config: StackConfig = field(default_factory=StackConfig)  # the stack's declared configuration
    clock: Clock = field(default_factory=SystemClock)
    settings: Settings = Settings()
    selected: frozenset[str] | None = None  # None: every check
    progress: Callable[[str], None] = lambda _message: None

    def wants(self, check: str) -> bool:
        return self.selected is None or check in self.selected

    def labels(self) -> dict[str, str]:
        """Labels of everything the run creates, so that leftovers can be found by run id."""
        return {RUN_LABEL: self.run_id}


T = TypeVar("T")


def wait_for(clock: Clock, timeout: float, interval: float, probe: Callable[[], T | None]) -> T | None:
    """``probe()`` until it returns something other than None, or None once ``timeout`` has passed."""
    deadline = clock.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return None
        clock.sleep(min(interval, remaining))


def new_run_id() -> str:
    return secrets.token_hex(3)


def scratch_namespace(run_id: str, tenant: str) -> str:
    """Per tenant, so that it doubles as the marker the isolation check looks for elsewhere.

    A name too long for a namespace keeps a digest of the whole tenant name: two tenants sharing
    a long prefix must not share a marker.
    """
    name = f"validate-{run_id}-{tenant}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:8]
    return f"{name[: 63 - len(digest) - 1].rstrip('-')}-{digest}"


class Cleanup:
    """What one check created; ``run()`` deletes it all and says what could not be deleted."""

    def __init__(self, clock: Clock, settings: Settings) -> None:
        self._clock = clock
        self._settings = settings
        self._pods: list[tuple[Kube, str, str]] = []

    def pod(self, kube: Kube, namespace: str, name: str) -> None:
        """Register before creating, so that a create whose answer was lost is still cleaned up."""
        self._pods.append((kube, namespace, name))

    def run(self) -> list[str]:
        problems: list[str] = []
        for kube, namespace, name in self._pods:
            try:
                kube.delete_pod(namespace, name)
            except KubeError as error:
                problems.append(f"cleanup: could not delete pod {namespace}/{name}: {error}")

        def all_gone() -> bool | None:
            left = [(k, ns, n) for k, ns, n in self._pods if k.read_pod(ns, n) is not None]
            return True if not left else None

        try:
            if self._pods and wait_for(self._clock, self._settings.gone_timeout, self._settings.poll_interval, all_gone) is None:
                problems.append(f"cleanup: probe pods still present after {self._settings.gone_timeout:.0f}s")
        except KubeError as error:
            problems.append(f"cleanup: could not confirm the probe pods are gone: {error}")
        self._pods.clear()
        return problems
