"""Validate the deployed stack against its live clusters and print a pass/fail table.

    python -m tools.validate --stack dev                 (what `make validate` runs)
    python -m tools.validate --list                      (the checks; touches nothing)
    python -m tools.validate --outputs outputs.json --config Pulumi.dev.yaml --check webhook
    python -m tools.validate --stack dev --report validation-report.md --report validation-report.json

It reads the stack's outputs (``pulumi stack output --json --show-secrets``, or ``--outputs``
FILE holding that JSON), connects to the management cluster and to each tenant with their
kubeconfigs (loaded from memory, never printed), and runs the checks of ``--list`` in order:
one table row per check and tenant. GPU expectations come from ``gpu_tenancy.placement`` for
the inventory ``Pulumi.<stack>.yaml`` declares and the usage the tenant already has. Pods the
checks create (``registry.k8s.io/pause:3.10``, labelled ``gpu-tenancy.io/validation-run``) and
the run's namespaces are deleted however a check ends.

Exit status: 0 when no check failed (skipped rows allowed), 1 when one did, 2 with one line on
stderr when there is no reachable deployed stack (no Pulumi CLI, no stack or outputs, bad
outputs or stack config, management API unreachable), 130 when interrupted (after cleaning up).
Every call is bounded by a timeout.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from gpu_tenancy.stack_file import stack_file
from tools import cli
from tools.validation import interrupts
from tools.validation.checks import CATALOGUE, CHECK_IDS
from tools.validation.context import RUN_LABEL, Clock, Settings, SystemClock, new_run_id
from tools.validation.kube import Connector, connect
from tools.validation.outputs import (
    Runner,
    StackOutputs,
    StackUnavailable,
    load_declared,
    parse_outputs,
    read_outputs_file,
    read_pulumi_outputs,
)
from tools.validation.report import exit_code, table, write_report
from tools.validation.runner import Interrupted, open_run, run_checks

PROJECT_DIR = Path(__file__).resolve().parent.parent
UNAVAILABLE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.validate", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--stack", default="dev", help="the deployed stack (default: dev)")
    parser.add_argument("--list", action="store_true", help="print the checks, one per line, and exit")
    parser.add_argument("--outputs", type=Path, help="read the stack outputs JSON from FILE instead of the Pulumi CLI")
    parser.add_argument("--config", type=Path, help="the stack's declared config (default: Pulumi.<stack>.yaml)")
    parser.add_argument("--check", action="append", choices=CHECK_IDS, metavar="ID", help="run only this check (repeatable)")
    parser.add_argument(
        "--report", action="append", type=Path, default=[], metavar="FILE", help="also write the results: .json, .md or text"
    )
    parser.add_argument(
        "--max-fit-pods", type=int, default=Settings.max_fit_pods, help="most probe pods to place before a refusal"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def list_checks(stdout: TextIO) -> None:
    width = max(len(check.id) for check in CATALOGUE)
    for check in CATALOGUE:
        stdout.write(f"{check.id.ljust(width)}  {check.scope.ljust(10)}  {check.proves}\n")


def load_outputs(args: argparse.Namespace, runner: Runner, which: Callable[[str], str | None]) -> StackOutputs:
    if args.outputs is not None:
        return parse_outputs(read_outputs_file(args.outputs), str(args.outputs))
    document = read_pulumi_outputs(args.stack, PROJECT_DIR, run=runner, which=which)
    return parse_outputs(document, f"pulumi stack output --stack {args.stack}")


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    connector: Connector = connect,
    runner: Runner = subprocess.run,
    which: Callable[[str], str | None] = shutil.which,
    clock: Clock | None = None,
    settings: Settings | None = None,
) -> int:
    """The CLI; the keyword arguments are the seams tests replace (cluster, Pulumi CLI, time)."""
    args = build_parser().parse_args(argv)
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    if args.list:
        list_checks(stdout)
        return 0
    if args.max_fit_pods < 1:
        stderr.write("validate: --max-fit-pods must be at least 1\n")
        return UNAVAILABLE
    settings = replace(settings or Settings(), max_fit_pods=args.max_fit_pods)
    try:
        return _validate(args, stdout, stderr, connector, runner, which, clock, settings)
    except Interrupted as interrupted:
        if interrupted.leftovers:
            stderr.write(f"validate: interrupted; the cleanup left: {'; '.join(interrupted.leftovers)}\n")
        else:
            stderr.write("validate: interrupted; the run's probe pods and namespaces were deleted\n")
        return 130
    except KeyboardInterrupt:
        # Before the checks began, or a third signal abandoned the cleanup (CleanupAbandoned).
        stderr.write(f"validate: interrupted; anything the run created carries the label {RUN_LABEL}\n")
        return 130


def _validate(
    args: argparse.Namespace,
    stdout: TextIO,
    stderr: TextIO,
    connector: Connector,
    runner: Runner,
    which: Callable[[str], str | None],
    clock: Clock | None,
    settings: Settings,
) -> int:
    try:
        outputs = load_outputs(args, runner, which)
        declared = load_declared(args.config or stack_file(args.stack))
        run = open_run(
            args.stack,
            outputs,
            declared,
            connector,
            new_run_id(),
            clock=clock or SystemClock(),
            settings=settings,
            selected=frozenset(args.check) if args.check else None,
            progress=(lambda _message: None) if args.quiet else (lambda message: stderr.write(f"validate: {message}\n")),
        )
    except StackUnavailable as error:
        stderr.write(f"validate: {error}\n")
        return UNAVAILABLE
    results = run_checks(run)
    stdout.write(table(results) + "\n")
    code = exit_code(results)
    for path in args.report:
        try:
            write_report(path, results, args.stack, run.run_id)
        except OSError as error:
            stderr.write(f"validate: could not write {path}: {error.strerror or error}\n")
            code = max(code, 1)
    return code


if __name__ == "__main__":
    # A cancelled CI job sends SIGINT, then SIGTERM: both stop the checks and let the cleanup run.
    interrupts.install()
    sys.exit(cli.run(main))
