"""The GitHub workflows against the Actions workflow schema (vendored by check-jsonschema).

What each workflow runs is pinned beside the behaviour it checks (test_policies, test_validate);
this catches what GitHub would reject before running anything: a misspelt key, a wrong type.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.shell import executable, shellcheck

PROJECT_DIR = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((PROJECT_DIR / ".github" / "workflows").glob("*.yml"))


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_there_are_workflows_to_check() -> None:
    assert {path.name for path in WORKFLOWS} >= {"ci.yml", "e2e.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_the_workflow_is_one_github_accepts(workflow: Path) -> None:
    result = check(workflow)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_misspelt_key_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    text = (PROJECT_DIR / ".github" / "workflows" / "ci.yml").read_text()
    assert "runs-on:" in text
    broken.write_text(text.replace("runs-on:", "runs_on:", 1))
    result = check(broken)
    assert result.returncode == 1 and "runs_on" in result.stdout + result.stderr


def run_steps() -> list[tuple[str, str]]:
    """(workflow: step, script) of every `run:` step; ${{ }} expressions become a plain word."""
    steps = []
    for path in WORKFLOWS:
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for number, step in enumerate(job.get("steps", [])):
                if "run" in step:
                    script = re.sub(r"\$\{\{[^}]*\}\}", "EXPRESSION", step["run"])
                    steps.append((f"{path.name}: {step.get('name', number)}", script))
    return steps


@pytest.mark.parametrize(("step", "script"), run_steps(), ids=[step for step, _ in run_steps()])
def test_every_run_step_passes_shellcheck(step: str, script: str) -> None:
    # GitHub runs them with bash -e on ubuntu runners.
    assert shellcheck(script, shell="bash") == "", step


def workflow_steps(name: str) -> list[dict]:
    workflow = yaml.safe_load((PROJECT_DIR / ".github" / "workflows" / name).read_text())
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_a_committed_salt_is_dropped_whenever_no_passphrase_secret_can_match_it() -> None:
    # The CLI takes a stack file's salt to mean passphrase secrets on any backend, Pulumi Cloud too.
    (drop,) = [step for step in workflow_steps("ci.yml") if step.get("name", "").startswith("Drop a committed encryptionsalt")]
    assert drop["if"] == "env.PULUMI_CONFIG_PASSPHRASE == 'gpu-tenancy-ci-throwaway-state'"


def test_the_e2e_diagnostics_go_on_past_a_failing_command(tmp_path: Path) -> None:
    # GitHub runs a step with bash -e: the first failing command used to end it, before the events.
    (diagnostics,) = [step for step in workflow_steps("e2e.yml") if step.get("name") == "Diagnostics"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("docker", "kind", "kubectl"):
        executable(bin_dir / tool, f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/log"\nexit 1\n')
    result = subprocess.run(
        ["bash", "-e", "-c", diagnostics["run"]],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "RUNNER_TEMP": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert "kubectl --kubeconfig" in (tmp_path / "log").read_text().splitlines()[-1]
    assert "get events" in (tmp_path / "log").read_text()
    assert not (tmp_path / "management.kubeconfig").exists(), result.stderr
