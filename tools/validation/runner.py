"""The runner: connect to the stack, run the selected checks in catalogue order, always clean up.

``open_run`` raises ``StackUnavailable`` when the management cluster does not answer (the CLI
exits 2); a tenant that does not answer is reported in its rows instead. ``run_checks`` creates
one scratch namespace per reachable tenant (for the pod checks, and as the marker the isolation
check looks for in the other tenants) and deletes them however the run ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gpu_tenancy.config import StackConfig, Tenant

from .checks import (
    CHECK_IDS,
    SCRATCH_CHECKS,
    check_control_plane,
    check_fractional,
    check_gpu_registration,
    check_isolation,
    check_konnectivity,
    check_management,
    check_oversize,
    check_quota,
    check_tenant_api,
    check_webhook,
    require_kube,
)
from .context import Cleanup, Run, Target, scratch_namespace, wait_for
from .kube import Connector, KubeError
from .outputs import StackOutputs, StackUnavailable, TenantOutputs
from .report import MANAGEMENT, Result, failed, skipped


def open_run(
    stack: str,
    outputs: StackOutputs,
    declared: StackConfig,
    connector: Connector,
    run_id: str,
    **options: Any,
) -> Run:
    """Connect to the management cluster (unreachable: ``StackUnavailable``) and to every tenant."""
    try:
        management = connector(outputs.management_kubeconfig)
        management.server_version()
    except KubeError as error:
        raise StackUnavailable(f"the management cluster API does not answer: {error}") from None
    declared_tenants = {tenant.name: tenant for tenant in declared.tenants}
    targets = [_open_target(tenant, declared_tenants.get(tenant.name), connector, run_id) for tenant in outputs.tenants]
    return Run(stack, run_id, management, targets, connector, declared, **options)


def _open_target(tenant: TenantOutputs, declared: Tenant | None, connector: Connector, run_id: str) -> Target:
    target = Target(tenant, declared, None, scratch=scratch_namespace(run_id, tenant.name))
    try:
        target.kube = connector(tenant.kubeconfig)
        target.version = target.kube.server_version()
    except KubeError as error:
        target.problem = f"the tenant API at {tenant.endpoint} does not answer with its kubeconfig: {error}"
    return target


Body = Callable[[Cleanup], list[Result]]


class Interrupted(KeyboardInterrupt):
    """The run was interrupted and cleaned up; ``leftovers`` is what the cleanup could not delete."""

    def __init__(self, leftovers: Sequence[str]) -> None:
        super().__init__()
        self.leftovers = list(leftovers)


class CleanupAbandoned(KeyboardInterrupt):
    """Interrupted again while cleaning up after an interrupt: nothing more is deleted."""


def _clean_up_after_interrupt(cleanup: Callable[[], list[str]]) -> list[str]:
    try:
        return cleanup()
    except KeyboardInterrupt:
        raise CleanupAbandoned from None


def _leftovers(interrupt: KeyboardInterrupt) -> list[str]:
    return interrupt.leftovers if isinstance(interrupt, Interrupted) else []


def guarded(run: Run, check_ids: Sequence[str], tenant: str, body: Body) -> list[Result]:
    """Run ``body`` for ``check_ids``; errors become failures and cleanup always runs."""
    wanted = [check for check in check_ids if run.wants(check)]
    if not wanted:
        return []
    run.progress(f"{' + '.join(wanted)} [{tenant}]")
    started = run.clock.monotonic()
    cleanup = Cleanup(run.clock, run.settings)
    try:
        results = body(cleanup)
    except KubeError as error:
        results = [failed(check, tenant, f"API error: {error}") for check in check_ids]
    except Exception as error:  # noqa: BLE001 - a bug in one check must not stop the others
        results = [failed(check, tenant, f"internal error: {type(error).__name__}: {error}") for check in check_ids]
    except KeyboardInterrupt as interrupt:
        raise Interrupted([*_leftovers(interrupt), *_clean_up_after_interrupt(cleanup.run)]) from None
    try:
        problems = cleanup.run()
    except KeyboardInterrupt:
        # Interrupted while deleting: delete again (a pod already gone is no error), since the
        # probes outside scratch namespaces (the quota's) go with nothing else.
        raise Interrupted(_clean_up_after_interrupt(cleanup.run)) from None
    seconds = run.clock.monotonic() - started
    results = [replace(r, seconds=seconds) for r in results if r.check in wanted]
    return [r.with_problem("; ".join(problems)) for r in results] if problems else results


PodCheck = Callable[[Run, Target, Cleanup], list[Result]]

# Tenant checks after tenant-api, in order; each with the ids of the rows it produces.
POD_CHECKS: tuple[tuple[tuple[str, ...], PodCheck], ...] = (
    (("konnectivity",), check_konnectivity),
    (("gpu-registration",), lambda run, target, _cleanup: check_gpu_registration(run, target)),
    (("webhook",), check_webhook),
    (("fractional-fit", "fractional-next"), check_fractional),
    (("oversize",), check_oversize),
    (("quota",), check_quota),
)


# Checks of HAMi, which a tenant gets with its first worker (components/tenant.py).
HAMI_CHECKS = frozenset({"gpu-registration", "webhook", "fractional-fit", "fractional-next", "oversize", "quota"})


def _without_workers(run: Run, ids: Sequence[str], target: Target) -> list[Result]:
    reason = "no workers: HAMi comes with the tenant's first worker"
    return [skipped(check, target.name, reason) for check in ids if run.wants(check)]


def _unreachable(run: Run, ids: Sequence[str], target: Target) -> list[Result]:
    reason = f"not run: {target.problem or 'the tenant API does not answer'}"
    # The tenant-api row fails for a tenant that does not answer; a selection without it must
    # fail here instead, or `--check webhook` would pass with the tenant down.
    row = skipped if run.wants("tenant-api") else failed
    return [row(check, target.name, reason) for check in ids if run.wants(check)]


def _undeployed(run: Run) -> list[Result]:
    """Tenants, and workers of deployed tenants, the stack config declares that its outputs do not
    have (not deployed yet): the checks would otherwise judge the cluster against the old config,
    or skip what the missing workers bring (HAMi)."""
    deployed = {target.name for target in run.targets}
    results = [
        failed("outputs", tenant.name, f"declared in Pulumi.{run.stack}.yaml but not in the stack's outputs; run pulumi up")
        for tenant in run.config.tenants
        if tenant.name not in deployed
    ]
    for target in run.targets:
        declared = [worker.name for worker in target.declared.workers] if target.declared is not None else []
        if missing := [name for name in declared if name not in target.outputs.workers]:
            results.append(
                failed(
                    "outputs",
                    target.name,
                    f"workers {', '.join(missing)} declared in Pulumi.{run.stack}.yaml but not in the stack's outputs; "
                    "run pulumi up",
                )
            )
    return results


def _create_scratch(run: Run, target: Target) -> None:
    """The run's namespace in the tenant, once its default ServiceAccount exists (pods need it)."""
    kube = require_kube(target)
    kube.create_namespace(target.scratch, run.labels())

    def account() -> bool | None:
        return True if kube.service_account_exists(target.scratch, "default") else None

    if wait_for(run.clock, run.settings.namespace_timeout, run.settings.poll_interval, account) is None:
        raise KubeError(f"namespace {target.scratch} has no default ServiceAccount after {run.settings.namespace_timeout:.0f}s")
    target.scratch_ready = True


def _scratch_result(run: Run, target: Target, ids: Sequence[str]) -> list[Result] | None:
    """Failures for checks that need a scratch namespace the run could not create."""
    if target.scratch_ready or not SCRATCH_CHECKS.intersection(ids):
        return None
    return [failed(check, target.name, f"no scratch namespace: {target.problem}") for check in ids if run.wants(check)]


def _delete_scratch(created: Sequence[Target]) -> list[Result]:
    results = []
    for target in created:
        try:
            require_kube(target).delete_namespace(target.scratch)
        except KubeError as error:
            results.append(failed("cleanup", target.name, f"could not delete namespace {target.scratch}: {error}"))
    return results


def run_checks(run: Run) -> list[Result]:
    """Every selected check, in catalogue order; scratch namespaces are removed however it ends."""
    results = _undeployed(run) + guarded(run, ["management"], MANAGEMENT, lambda _cleanup: check_management(run))
    for target in run.targets:
        results += guarded(run, ["control-plane"], target.name, lambda _c, t=target: check_control_plane(run, t))
    for target in run.targets:
        results += guarded(run, ["tenant-api"], target.name, lambda _c, t=target: check_tenant_api(run, t))
    reachable = [target for target in run.targets if target.version is not None]
    created: list[Target] = []
    interrupted: KeyboardInterrupt | None = None
    try:
        if any(run.wants(check) for check in SCRATCH_CHECKS):
            for target in reachable:
                try:
                    created.append(target)
                    _create_scratch(run, target)
                except KubeError as error:
                    target.problem = f"could not create namespace {target.scratch}: {error}"
        for target in run.targets:
            if target.version is None:
                results += _unreachable(run, ["isolation"], target)
                continue
            results += _scratch_result(run, target, ["isolation"]) or guarded(
                run, ["isolation"], target.name, lambda _c, t=target: check_isolation(run, t)
            )
        for target in run.targets:
            for ids, check in POD_CHECKS:
                if target.version is None:
                    results += _unreachable(run, ids, target)
                    continue
                if not target.outputs.workers and HAMI_CHECKS.issuperset(ids):
                    results += _without_workers(run, ids, target)
                    continue
                results += _scratch_result(run, target, ids) or guarded(
                    run, ids, target.name, lambda cleanup, t=target, c=check: c(run, t, cleanup)
                )
    except CleanupAbandoned:
        raise
    except KeyboardInterrupt as interrupt:
        interrupted = interrupt
    except BaseException:
        _delete_scratch(created)
        raise
    if interrupted is None:
        try:
            return _in_table_order(run, results + _delete_scratch(created))
        except KeyboardInterrupt as interrupt:  # during the deletion itself: the same cleanup as above
            interrupted = interrupt
    deleted = _clean_up_after_interrupt(lambda: [row.detail for row in _delete_scratch(created)])
    raise Interrupted([*_leftovers(interrupted), *deleted]) from None


def _in_table_order(run: Run, results: list[Result]) -> list[Result]:
    """Catalogue order, tenants in stack order within a check (they ran tenant by tenant); cleanup last."""
    tenants = [MANAGEMENT, *(target.name for target in run.targets)]

    def key(result: Result) -> tuple[int, int]:
        check = CHECK_IDS.index(result.check) if result.check in CHECK_IDS else len(CHECK_IDS)
        return check, tenants.index(result.tenant) if result.tenant in tenants else len(tenants)

    return sorted(results, key=key)
