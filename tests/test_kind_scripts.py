"""The kind cluster's create and delete scripts, run under sh against stand-ins for kind and docker.

Only a cluster this stack created (its owner file on the node names the stack) is adopted or deleted.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from components import kind_cluster
from gpu_tenancy.docker_host import ENGINE_SCRIPT
from tests.shell import assert_valid_machine_script, executable

OWNER = "6f1c2d3e-0000-4000-8000-00000000abcd"  # the stack's RandomUuid
KUBECONFIG = "apiVersion: v1\n    certificate-authority-data: LIVE-CA\n"  # what the stand-in kind prints
IMAGE = "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"


def run(
    script: str,
    tmp_path: Path,
    *,
    exists: bool,
    owner: str | None,
    security: str = '["name=seccomp,profile=builtin"]',
    context: str = "unix:///var/run/docker.sock",
    docker_host: str | None = None,
    previous_stdout: str | None = None,
    docker_down: bool = False,
    version: str = "Docker version 28.3.2, build 578ccf6",
    running_image: str = IMAGE,
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``script`` with a cluster ``kamaji`` that ``exists`` and whose node holds ``owner``."""
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_dir.mkdir()
    if exists:
        (state / "clusters").write_text("other\nkamaji\n")
    if owner is not None:
        (state / "gpu-tenancy-owner").write_text(f"{owner}\n" if owner else "")
    log = tmp_path / "log"
    executable(
        bin_dir / "kind",
        f"""#!/bin/sh
echo "kind $* provider=${{KIND_EXPERIMENTAL_PROVIDER:-}} network=${{KIND_EXPERIMENTAL_DOCKER_NETWORK:-}}" >> "{log}"
case "$1 $2" in
  "get clusters") {"echo 'failed to list clusters: Cannot connect to the Docker daemon' >&2; exit 1" if docker_down else ""}
    cat "{state}/clusters" 2>/dev/null || true ;;
  "create cluster") cat > "{state}/config"; echo kamaji >> "{state}/clusters" ;;
  "get kubeconfig") printf 'apiVersion: v1\n    certificate-authority-data: LIVE-CA\n' ;;
esac""",
    )
    # docker cp CONTAINER:PATH DEST copies the file out (of a stopped container too); docker exec -i pipes stdin in.
    executable(
        bin_dir / "docker",
        f"""#!/bin/sh
echo "docker $*" >> "{log}"
case "$1" in
  cp) [ "$2" = "kamaji-control-plane:{kind_cluster.OWNER_FILE}" ] && [ -e "{state}/gpu-tenancy-owner" ] || exit 1
      cp "{state}/gpu-tenancy-owner" "$3" ;;
  exec) [ "$3" = kamaji-control-plane ] || exit 1; cat > "{state}/gpu-tenancy-owner" ;;
  info) echo '{security}' ;;
  context) echo '{context}' ;;
  -v) echo '{version}' ;;
  inspect) [ "$4" = kamaji-control-plane ] || exit 1; echo '{running_image}' ;;
esac""",
    )
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "KIND_CLUSTER": "kamaji",
        "KIND_OWNER": OWNER,
        "KIND_NODE_IMAGE": IMAGE,
        "KIND_EXPERIMENTAL_PROVIDER": "podman",
        "KIND_EXPERIMENTAL_DOCKER_NETWORK": "elsewhere",
    }
    if docker_host is not None:
        env["DOCKER_HOST"] = docker_host
    if previous_stdout is not None:  # pulumi-command sets it when it updates or deletes a command it ran
        env["PULUMI_COMMAND_STDOUT"] = previous_stdout
    result = subprocess.run(
        ["sh", "-c", script], input="kind: Cluster\n", env=env, capture_output=True, text=True, timeout=30, check=False
    )
    return result, log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("script", [kind_cluster._CREATE, kind_cluster._DELETE, kind_cluster._INSPECT_NETWORK])
def test_the_scripts_are_posix_and_shellcheck_clean(script: str) -> None:
    assert_valid_machine_script(script)


def test_a_new_cluster_is_created_on_dockers_kind_network_and_marked_as_this_stacks(tmp_path: Path) -> None:
    result, log = run(kind_cluster._CREATE, tmp_path, exists=False, owner=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout == KUBECONFIG
    create = next(line for line in log if line.startswith("kind create cluster"))
    assert "--name kamaji --config -" in create
    # The user's kind environment cannot move the cluster to podman or to another network.
    assert create.endswith("provider= network=kind")
    assert (tmp_path / "state" / "config").read_text() == "kind: Cluster\n"
    assert (tmp_path / "state" / "gpu-tenancy-owner").read_text() == f"{OWNER}\n"


def test_this_stacks_cluster_is_adopted_without_a_second_create(tmp_path: Path) -> None:
    result, log = run(kind_cluster._CREATE, tmp_path, exists=True, owner=OWNER)
    assert result.returncode == 0, result.stderr
    assert "adopting it" in result.stderr
    assert not [line for line in log if line.startswith("kind create")]
    assert result.stdout == KUBECONFIG


@pytest.mark.parametrize("previous_stdout", [None, KUBECONFIG])
def test_a_new_node_image_is_refused_rather_than_a_new_cluster(tmp_path: Path, previous_stdout: str | None) -> None:
    # A release with a new default image, or a nodeImage edited: the cluster holds every tenant.
    running = "kindest/node:v1.36.4"
    result, log = run(
        kind_cluster._CREATE, tmp_path, exists=True, owner=OWNER, previous_stdout=previous_stdout, running_image=running
    )
    assert result.returncode == 1
    assert f"kind cluster kamaji runs {running} and this stack asks for {IMAGE}" in result.stderr
    assert f"gpu-tenancy:management.nodeImage: {running}" in result.stderr
    assert "pulumi up --replace" in result.stderr
    assert not [line for line in log if line.startswith(("kind create", "kind delete"))]
    assert result.stdout == ""  # no kubeconfig: the command fails and the state keeps the old one


def test_an_update_whose_cluster_is_gone_is_refused_rather_than_an_empty_cluster(tmp_path: Path) -> None:
    # Its providers would stay (same command id) and nothing would reinstall Kamaji or the tenants.
    result, log = run(kind_cluster._CREATE, tmp_path, exists=False, owner=None, previous_stdout=KUBECONFIG)
    assert result.returncode == 1
    assert "kind cluster kamaji, which this stack created, is gone" in result.stderr
    assert "pulumi up --replace" in result.stderr
    assert not [line for line in log if line.startswith("kind create")]
    assert result.stdout == ""


@pytest.mark.parametrize("owner", [None, "0a0b0c0d-1111-4111-8111-000000000000"])
def test_a_cluster_of_someone_else_or_of_an_unfinished_create_is_refused(tmp_path: Path, owner: str | None) -> None:
    result, log = run(kind_cluster._CREATE, tmp_path, exists=True, owner=owner)
    assert result.returncode == 1
    assert "a kind cluster named kamaji exists but this stack did not create it" in result.stderr
    assert "kind delete cluster --name kamaji" in result.stderr
    assert f"its owner: {owner or 'none, or its creation never finished'}" in result.stderr
    assert not [line for line in log if line.startswith(("kind create", "kind get kubeconfig"))]


@pytest.mark.parametrize(
    ("docker_host", "engine"),
    [(None, "unix:///run/user/1000/docker.sock"), ("tcp://10.0.0.5:2375", "tcp://10.0.0.5:2375")],
)
def test_a_cluster_not_found_names_the_engine_that_was_asked(tmp_path: Path, docker_host: str | None, engine: str) -> None:
    # Made through another docker context, it would be left running and forgotten by the state.
    context = "unix:///run/user/1000/docker.sock"
    result, log = run(kind_cluster._DELETE, tmp_path, exists=False, owner=None, context=context, docker_host=docker_host)
    assert result.returncode == 0, result.stderr
    assert f"kind cluster kamaji is already gone from the docker engine at {engine}; if it was made on another" in result.stderr
    assert not [line for line in log if line.startswith("kind delete")]


def test_destroy_deletes_this_stacks_cluster(tmp_path: Path) -> None:
    result, log = run(kind_cluster._DELETE, tmp_path, exists=True, owner=OWNER)
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("kind delete cluster --name kamaji") and line.endswith("network=kind") for line in log)


def test_destroy_leaves_a_cluster_of_another_stack(tmp_path: Path) -> None:
    result, log = run(kind_cluster._DELETE, tmp_path, exists=True, owner="0a0b0c0d-1111-4111-8111-000000000000")
    assert result.returncode == 0
    assert "belongs to another stack" in result.stderr and "leaving it" in result.stderr
    assert not [line for line in log if line.startswith("kind delete")]


def test_destroy_stops_when_it_cannot_tell_whose_cluster_it_is(tmp_path: Path) -> None:
    # Dropping a live cluster from the state silently would leak it and what it holds.
    result, log = run(kind_cluster._DELETE, tmp_path, exists=True, owner=None)
    assert result.returncode == 1
    assert "cannot read which stack kind cluster kamaji belongs to" in result.stderr
    assert not [line for line in log if line.startswith("kind delete")]


@pytest.mark.parametrize("script", ["create", "delete"])
def test_a_docker_that_does_not_answer_is_not_a_missing_cluster(tmp_path: Path, script: str) -> None:
    result, log = run(getattr(kind_cluster, f"_{script.upper()}"), tmp_path, exists=True, owner=OWNER, docker_down=True)
    assert result.returncode != 0
    assert "already gone" not in result.stderr
    assert not [line for line in log if line.startswith(("kind create", "kind delete"))]


def test_an_update_of_this_stacks_command_marks_the_cluster_it_already_has(tmp_path: Path) -> None:
    # A stack whose cluster predates the owner file (or whose owner changed) updates, never replaces.
    result, log = run(kind_cluster._CREATE, tmp_path, exists=True, owner=None, previous_stdout=KUBECONFIG)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "state" / "gpu-tenancy-owner").read_text() == f"{OWNER}\n"
    assert not [line for line in log if line.startswith("kind create")]


@pytest.mark.parametrize("owner", [None, "0a0b0c0d-1111-4111-8111-000000000000"])
def test_an_update_does_not_claim_a_cluster_that_is_not_the_one_in_its_state(tmp_path: Path, owner: str | None) -> None:
    # Same name, another cluster (another CA): someone else's, made after this stack's was deleted.
    previous = "apiVersion: v1\n    certificate-authority-data: OLD-CA\n"
    result, _ = run(kind_cluster._CREATE, tmp_path, exists=True, owner=owner, previous_stdout=previous)
    assert result.returncode == 1
    assert "exists but this stack did not create it" in result.stderr
    marker = tmp_path / "state" / "gpu-tenancy-owner"
    assert (marker.read_text() if marker.exists() else None) == (f"{owner}\n" if owner else None)


def test_destroy_stops_on_an_empty_owner_file(tmp_path: Path) -> None:
    # What an interrupted mark leaves: not "another stack's" (which destroy would leave and forget).
    result, log = run(kind_cluster._DELETE, tmp_path, exists=True, owner="")
    assert result.returncode == 1
    assert "cannot read which stack kind cluster kamaji belongs to" in result.stderr
    assert not [line for line in log if line.startswith("kind delete")]


@pytest.mark.parametrize(
    ("docker_host", "context"),
    [
        (None, "tcp://10.0.0.5:2376"),  # `docker context use` of a remote engine
        ("ssh://me@builder", "unix:///var/run/docker.sock"),  # DOCKER_HOST wins over the context
    ],
)
def test_kind_refuses_a_remote_engine_and_checks_the_one_the_workers_get(
    tmp_path: Path, docker_host: str | None, context: str
) -> None:
    (tmp_path / "kind").mkdir()
    (tmp_path / "workers").mkdir()
    kind, log = run(kind_cluster._CREATE, tmp_path / "kind", exists=False, owner=None, context=context, docker_host=docker_host)
    assert kind.returncode == 1
    assert not [line for line in log if line.startswith("kind create")]
    # The worker containers' engine (components/docker_host.py) is resolved the same way.
    workers, _ = run(ENGINE_SCRIPT, tmp_path / "workers", exists=False, owner=None, context=context, docker_host=docker_host)
    assert workers.returncode == 0, workers.stderr
    endpoint = workers.stdout.splitlines()[0]
    assert endpoint == (docker_host or context)
    assert f"error: the docker engine at {endpoint} is not on this machine" in kind.stderr


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("podman version 4.3.1", "error: `docker` here is not Docker's CLI (podman version 4.3.1): kind would take another"),
        ("nerdctl version 2.1.2", "error: `docker` here is not Docker's CLI (nerdctl version 2.1.2): kind would take another"),
        ("", "error: `docker -v` answers nothing here: install Docker Engine or Docker Desktop"),
    ],
)
def test_kind_refuses_a_docker_command_that_is_not_dockers(tmp_path: Path, version: str, message: str) -> None:
    # podman-docker: kind reads `docker -v` and silently takes its Podman (or nerdctl) provider,
    # whose `network inspect` and `info` the program's templates cannot read; rootless Podman
    # slipped past the rootless check too.
    result, log = run(kind_cluster._CREATE, tmp_path, exists=False, owner=None, version=version)
    assert result.returncode == 1
    assert message in result.stderr
    assert not [line for line in log if line.startswith("kind ")]


def test_kind_refuses_a_rootless_engine(tmp_path: Path) -> None:
    result, log = run(
        kind_cluster._CREATE,
        tmp_path,
        exists=False,
        owner=None,
        security='["name=seccomp,profile=builtin","name=rootless"]',
        context="unix:///run/user/1000/docker.sock",
    )
    assert result.returncode == 1
    assert "error: this docker engine is rootless" in result.stderr
    assert not [line for line in log if line.startswith("kind create")]


SUBNETS = "172.18.0.0/16 fc00:f853:ccd:e793::/64 \n"


@pytest.fixture
def api_port() -> Iterator[int]:
    """A port kind's node serves its API on (6443 in the script; any free port here)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def inspect_network(
    tmp_path: Path, node_ip: str, port: int = kind_cluster.NODE_API_PORT, python: str | None = None, path: str | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the kind network's script with a stand-in docker whose node ``kamaji-control-plane`` has ``node_ip``.

    ``port`` replaces 6443 in the script; ``python`` is the body of a stand-in python3 (the real one otherwise).
    """
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    executable(
        bin_dir / "docker",
        f"""#!/bin/sh
echo "docker $*" >> "{log}"
case "$1 $2" in
  "inspect --format") [ "$4" = kamaji-control-plane ] || exit 1; echo "{node_ip}" ;;
  "network inspect") printf '{SUBNETS}' ;;
esac""",
    )
    executable(bin_dir / "sleep", f'#!/bin/sh\necho "sleep $*" >> "{log}"')  # retries without the wait
    if python is not None:
        executable(bin_dir / "python3", f'#!/bin/sh\necho "python3" >> "{log}"\n{python}')
    env = {"PATH": path or f"{bin_dir}:{os.environ['PATH']}", "KIND_CLUSTER": "kamaji"}
    script = kind_cluster._INSPECT_NETWORK.replace(str(kind_cluster.NODE_API_PORT), str(port))
    result = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)
    return result, log.read_text().splitlines() if log.exists() else []


def test_the_kind_networks_subnets_come_once_this_machine_reaches_kinds_node(tmp_path: Path, api_port: int) -> None:
    result, log = inspect_network(tmp_path, "127.0.0.1", api_port)
    assert result.returncode == 0, result.stderr
    assert result.stdout == SUBNETS
    assert log[0].startswith("docker inspect --format ") and '.NetworkSettings.Networks "kind"' in log[0]
    assert log[1:] == ["docker network inspect kind --format {{range .IPAM.Config}}{{.Subnet}} {{end}}"]


def test_a_refusal_is_an_answer_from_the_node(tmp_path: Path, closed_port: int) -> None:
    # Right after a reboot the node is up before its API server: the route is there all the same.
    result, log = inspect_network(tmp_path, "127.0.0.1", closed_port)
    assert result.returncode == 0, result.stderr
    assert result.stdout == SUBNETS
    assert not [line for line in log if line.startswith("sleep")]


def test_a_kind_network_this_machine_cannot_reach_stops_the_run_before_any_vip(tmp_path: Path) -> None:
    # Docker Desktop's VM, Colima: the node's address leads nowhere from here and the connection times out.
    result, log = inspect_network(tmp_path, "172.18.0.2", python='echo "timed out" >&2; exit 1')
    assert result.returncode == 1
    assert "error: this machine cannot reach the docker network kind: kind's node kamaji-control-plane" in result.stderr
    assert "at 172.18.0.2:6443 does not answer (timed out)" in result.stderr
    assert "docker-mac-net-connect" in result.stderr
    assert result.stdout == ""
    # Three attempts, two waits between them, and no subnets for MetalLB's pool.
    assert log.count("python3") == 3
    assert [line for line in log if line.startswith("sleep")] == ["sleep 2", "sleep 2"]
    assert not [line for line in log if line.startswith("docker network")]


def test_the_probe_fails_on_what_is_not_a_refusal() -> None:
    # The real snippet, with a name that never resolves (RFC 6761 .invalid): an error that is no
    # refusal fails, and its reason is what the script's message shows.
    probe = kind_cluster._CONNECT.replace(str(kind_cluster.NODE_API_PORT), "1")
    result = subprocess.run(
        [sys.executable, "-c", probe, "not-a-host.invalid"], check=False, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 1 and result.stderr.strip()


def test_a_node_without_an_address_on_the_kind_network_is_named(tmp_path: Path) -> None:
    result, log = inspect_network(tmp_path, "")
    assert result.returncode == 1
    assert (
        "error: kind's node kamaji-control-plane has no IPv4 address on the docker network kind "
        "(a stopped node has none: docker start kamaji-control-plane)"
    ) in result.stderr
    assert not [line for line in log if line.startswith("docker network")]


def test_without_python_the_route_check_says_what_is_missing(tmp_path: Path) -> None:
    # Only the stand-ins on PATH: no python3 to open the socket with.
    result, _ = inspect_network(tmp_path, "127.0.0.1", path=str(tmp_path / "bin"))
    assert result.returncode == 1
    assert "error: python3 is not on PATH" in result.stderr
