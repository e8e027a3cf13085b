"""The docker engine of the workers: which one it is, as the docker CLI resolves it, and what its
containers need there, decided as kind decides. The engine script runs under sh against a stand-in
docker CLI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gpu_tenancy.docker_host import ENGINE_SCRIPT, INFO_FORMAT, Engine, NodeMounts, engine, node_mounts, userns_remap
from tests.shell import assert_valid_machine_script, executable
from tools import mock_cloud

ROOTFUL = "unix:///var/run/docker.sock"
ROOTLESS = "unix:///run/user/1000/docker.sock"


def info(driver: str, backing: str | None = None, security: list[str] | None = None) -> str:
    status = [["Backing Filesystem", backing], ["Supports d_type", "true"]] if backing else None
    return json.dumps({"driver": driver, "driverStatus": status, "securityOptions": security})


@pytest.mark.parametrize(
    ("engine_info", "expected"),
    [
        (mock_cloud.DOCKER_INFO, NodeMounts()),
        (info("overlay2", "extfs"), NodeMounts()),
        (info("overlay2", "xfs"), NodeMounts(dev_mapper=True)),
        (info("overlay2", "btrfs"), NodeMounts(dev_mapper=True)),
        (info("btrfs"), NodeMounts(dev_mapper=True)),
        (info("zfs"), NodeMounts(dev_mapper=True)),
        (info("devicemapper"), NodeMounts(dev_mapper=True)),
        # Docker's containerd image store reports a snapshotter and no backing filesystem.
        (json.dumps({"driver": "overlayfs", "driverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}), NodeMounts()),
        (info("overlay2", "extfs", ["name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"]), NodeMounts(fuse=True)),
        (info("fuse-overlayfs", None, ["name=rootless"]), NodeMounts(fuse=True)),
        # Only a whole option field counts (kind splits each option on commas).
        (info("overlay2", "extfs", ["name=seccomp,profile=name=rootless-like"]), NodeMounts()),
    ],
)
def test_node_mounts(engine_info: str, expected: NodeMounts) -> None:
    assert node_mounts(engine_info) == expected


@pytest.mark.parametrize(
    ("security", "expected"),
    [
        # dockerd --userns-remap=default adds "name=userns" to SecurityOptions (moby's API docs).
        (["name=apparmor", "name=seccomp,profile=builtin", "name=userns", "name=cgroupns"], True),
        (["name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"], False),
        (json.loads(mock_cloud.DOCKER_INFO)["securityOptions"], False),
        (None, False),
    ],
)
def test_userns_remap_is_read_from_the_security_options(security: list[str] | None, expected: bool) -> None:
    assert userns_remap(info("overlay2", "extfs", security)) is expected


def test_the_engine_is_its_endpoint_and_its_facts() -> None:
    output = f"{ROOTLESS}\n{info('overlay2', 'xfs', ['name=userns'])}\n"
    assert engine(output) == Engine(endpoint=ROOTLESS, node_mounts=NodeMounts(dev_mapper=True), userns_remap=True)


def run_engine_script(
    tmp_path: Path,
    *,
    docker_host: str | None = None,
    docker_context: str | None = None,
    current: str = ROOTFUL,
    contexts: dict[str, str] | None = None,
    engines: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ENGINE_SCRIPT with a docker CLI whose current context points at ``current``.

    ``engines`` maps endpoints to the ID of the engine answering there (default: one engine at
    each endpoint named; any other endpoint does not answer).
    """
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    named = "\n".join(f'      {name}) echo "{host}" ;;' for name, host in (contexts or {}).items())
    answering = engines if engines is not None else {ROOTFUL: "ROOTFUL-ID", ROOTLESS: "ROOTLESS-ID"}
    ids = "\n".join(f'      "{endpoint}") echo "{engine_id}" ;;' for endpoint, engine_id in answering.items())
    # `docker context inspect [NAME] --format …` prints the endpoint of NAME or of the current
    # context; `docker info` reports which engine it was pointed at.
    executable(
        bin_dir / "docker",
        f"""#!/bin/sh
echo "DOCKER_HOST=${{DOCKER_HOST:-}} docker $*" >> "{log}"
case "$1 $2" in
  "context inspect")
    case "$3" in
      --format) echo "{current}" ;;
{named}
      *) echo "context \\"$3\\" does not exist" >&2; exit 1 ;;
    esac ;;
  "info --format")
    if [ "$3" = '{{{{.ID}}}}' ]; then
      case "${{DOCKER_HOST:-}}" in
{ids}
        *) echo "Cannot connect to the Docker daemon at ${{DOCKER_HOST:-}}" >&2; exit 1 ;;
      esac
    else
      echo '{mock_cloud.DOCKER_INFO}'
    fi ;;
esac""",
    )
    env = {key: value for key, value in os.environ.items() if key not in ("DOCKER_HOST", "DOCKER_CONTEXT")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    if docker_host is not None:
        env["DOCKER_HOST"] = docker_host
    if docker_context is not None:
        env["DOCKER_CONTEXT"] = docker_context
    result = subprocess.run(["sh", "-c", ENGINE_SCRIPT], env=env, capture_output=True, text=True, timeout=30, check=False)
    return result, log.read_text().splitlines() if log.exists() else []


def test_the_engine_script_is_posix_and_shellcheck_clean() -> None:
    assert_valid_machine_script(ENGINE_SCRIPT)


def test_the_engine_is_the_current_contexts_as_for_the_docker_cli(tmp_path: Path) -> None:
    # `docker context use rootless`, no DOCKER_HOST, and the default socket leads to that engine too.
    result, log = run_engine_script(tmp_path, current=ROOTLESS, engines={ROOTLESS: "ROOTLESS-ID", ROOTFUL: "ROOTLESS-ID"})
    assert result.returncode == 0, result.stderr
    assert engine(result.stdout) == Engine(ROOTLESS, NodeMounts(), userns_remap=False)
    # docker info asks that same engine, not the default socket.
    assert [line for line in log if " docker info " in line][-1] == f"DOCKER_HOST={ROOTLESS} docker info --format {INFO_FORMAT}"


def test_a_context_pulumis_provider_cannot_follow_stops_the_run_naming_the_docker_host_to_export(tmp_path: Path) -> None:
    # `docker context use rootless` without DOCKER_HOST: the CLI reaches the rootless engine, Pulumi's
    # docker provider the default socket, where the rootful engine answers (or none does).
    for engines in ({ROOTFUL: "ROOTFUL-ID", ROOTLESS: "ROOTLESS-ID"}, {ROOTLESS: "ROOTLESS-ID"}):
        (tmp_path / str(len(engines))).mkdir()
        result, log = run_engine_script(tmp_path / str(len(engines)), current=ROOTLESS, engines=engines)
        assert result.returncode == 1
        assert f"would use {ROOTFUL}: export DOCKER_HOST={ROOTLESS}" in result.stderr
        assert result.stdout == ""
        assert not [line for line in log if INFO_FORMAT in line]


def test_one_engine_at_two_sockets_is_one_engine(tmp_path: Path) -> None:
    # Docker Desktop's context names its own socket and links /var/run/docker.sock to it.
    desktop = "unix:///Users/me/.docker/run/docker.sock"
    result, _ = run_engine_script(tmp_path, current=desktop, engines={desktop: "DESKTOP-ID", ROOTFUL: "DESKTOP-ID"})
    assert result.returncode == 0, result.stderr
    assert engine(result.stdout).endpoint == desktop


def test_docker_host_wins_over_the_context_as_for_the_docker_cli(tmp_path: Path) -> None:
    remote = "ssh://builder@10.0.0.5"
    result, log = run_engine_script(tmp_path, docker_host=remote, current=ROOTLESS, engines={remote: "REMOTE-ID"})
    assert result.returncode == 0, result.stderr
    assert engine(result.stdout).endpoint == "ssh://builder@10.0.0.5"
    assert not [line for line in log if " context " in line]


@pytest.mark.parametrize(
    ("docker_host_value", "docker_context", "ok"),
    [
        (None, "rootless", True),  # the CLI and Pulumi's provider both follow DOCKER_CONTEXT
        (ROOTLESS, "rootless", True),  # the same engine twice
        (ROOTFUL, "rootless", False),  # the CLI would follow DOCKER_HOST, the provider DOCKER_CONTEXT
    ],
)
def test_docker_host_and_docker_context_must_name_one_engine(
    tmp_path: Path, docker_host_value: str | None, docker_context: str, ok: bool
) -> None:
    result, _ = run_engine_script(
        tmp_path,
        docker_host=docker_host_value,
        docker_context=docker_context,
        current=ROOTLESS if docker_host_value is None else ROOTFUL,
        contexts={"rootless": ROOTLESS},
    )
    if ok:
        assert result.returncode == 0, result.stderr
        assert engine(result.stdout).endpoint == ROOTLESS
    else:
        assert result.returncode == 1
        assert "name different docker engines" in result.stderr and "unset one of them" in result.stderr
        assert result.stdout == ""


def test_an_engine_that_cannot_be_told_stops_the_script(tmp_path: Path) -> None:
    result, log = run_engine_script(tmp_path, current="")
    assert result.returncode == 1
    assert "cannot tell which docker engine to use" in result.stderr
    assert not [line for line in log if " docker info " in line]
