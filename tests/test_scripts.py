"""The host scripts behind `make up`: tool fetching with checksums, and the Pulumi backend choice.

They run for real here against stand-ins for `curl` and `pulumi` placed first on PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from gpu_tenancy import stack_file as stack_file_module
from tests.conftest import PROJECT_DIR
from tests.shell import assert_valid_machine_script, executable, shellcheck
from tools import preflight

BASH = shutil.which("bash") or "/bin/bash"
FETCH = PROJECT_DIR / "scripts" / "fetch-tools.sh"
PULUMI_ENV = PROJECT_DIR / "scripts" / "pulumi-env.sh"


@pytest.fixture
def release_server(tmp_path: Path) -> Path:
    """Files a fake curl serves by URL basename, as GitHub releases would."""
    served = tmp_path / "served"
    served.mkdir()
    return served


def fake_path(tmp_path: Path, served: Path) -> str:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    executable(
        bin_dir / "curl",
        f"""#!/bin/sh
out=""; url=""
while [ $# -gt 0 ]; do case "$1" in --output) out="$2"; shift 2;; -*) shift;; *) url="$1"; shift;; esac; done
echo "$url" >> {served}/requests
cp "{served}/$(basename "$url")" "$out"
""",
    )
    # Only the tools the script needs; no kind or pulumi, so it must fetch them.
    for tool in (
        "uname",
        "tr",
        "cut",
        "awk",
        "sha256sum",
        "tar",
        "mkdir",
        "chmod",
        "mv",
        "rm",
        "ln",
        "cp",
        "basename",
        "cat",
        "gzip",
        "find",
        "mktemp",
    ):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True, check=False).stdout.strip()
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def run_fetch(
    tmp_path: Path, served: Path, host_bin: Path | None = None, kind: str = "v0.33.0"
) -> subprocess.CompletedProcess[str]:
    path = fake_path(tmp_path, served) + (f":{host_bin}" if host_bin else "")
    return subprocess.run(
        [BASH, str(FETCH), str(tmp_path / "tools"), kind, "v3.272.0"],
        env={"PATH": path, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def publish(served: Path, arch: str = "amd64", corrupt: str | None = None) -> None:
    kind = f"kind-{host_os()}-{arch}"
    (served / kind).write_bytes(b"#!/bin/sh\necho kind v0.33.0 go1.24.6 linux/amd64\n")
    digest = hashlib.sha256((served / kind).read_bytes()).hexdigest()
    (served / f"{kind}.sha256sum").write_text(f"{'0' * 64 if corrupt == 'kind' else digest}  {kind}\n")
    pulumi_arch = {"amd64": "x64", "arm64": "arm64"}[arch]
    tree = served / "tree" / "pulumi"
    tree.mkdir(parents=True)
    for binary in ("pulumi", "pulumi-language-python"):
        executable(tree / binary, "#!/bin/sh\necho v3.272.0\n")
    asset = f"pulumi-v3.272.0-{host_os()}-{pulumi_arch}.tar.gz"
    with tarfile.open(served / asset, "w:gz") as archive:
        archive.add(tree, arcname="pulumi")
    digest = hashlib.sha256((served / asset).read_bytes()).hexdigest()
    (served / "pulumi-3.272.0-checksums.txt").write_text(f"{'f' * 64 if corrupt == 'pulumi' else digest}  {asset}\nabc  other\n")


def host_os() -> str:
    """What fetch-tools.sh asks the release servers for: ``uname -s`` in lower case (linux, darwin)."""
    return os.uname().sysname.lower()


def host_arch() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, "amd64")


def test_fetch_tools_verifies_and_installs_kind_and_pulumi(tmp_path: Path, release_server: Path) -> None:
    publish(release_server, host_arch())
    result = run_fetch(tmp_path, release_server)
    assert result.returncode == 0, result.stderr
    bin_dir = tmp_path / "tools" / "bin"
    assert subprocess.run([str(bin_dir / "kind")], capture_output=True, text=True, check=True).stdout.startswith("kind v0.33.0 ")
    assert subprocess.run([str(bin_dir / "pulumi")], capture_output=True, text=True, check=True).stdout == "v3.272.0\n"
    assert (bin_dir / "pulumi-language-python").exists()
    requests = (release_server / "requests").read_text().splitlines()
    assert f"https://github.com/kubernetes-sigs/kind/releases/download/v0.33.0/kind-{host_os()}-{host_arch()}" in requests
    assert "https://github.com/pulumi/pulumi/releases/download/v3.272.0/pulumi-3.272.0-checksums.txt" in requests
    # A second run finds them and fetches nothing.
    (release_server / "requests").unlink()
    assert run_fetch(tmp_path, release_server).returncode == 0
    assert not (release_server / "requests").exists()


def test_fetch_tools_leaves_kind_out_given_no_kind_version(tmp_path: Path, release_server: Path) -> None:
    # A stack on an existing management cluster never runs kind, and its host may reach no GitHub.
    publish(release_server, host_arch())
    result = run_fetch(tmp_path, release_server, kind="")
    assert result.returncode == 0, result.stderr
    assert [name for name in fetched(release_server) if not name.startswith("pulumi-")] == []
    bin_dir = tmp_path / "tools" / "bin"
    assert not (bin_dir / "kind").exists() and (bin_dir / "pulumi").exists()


def host_tools(tmp_path: Path, kind: str, pulumi: str) -> Path:
    """A host's kind and pulumi, reporting these versions as the real ones do."""
    host = tmp_path / "host"
    host.mkdir()
    executable(host / "kind", f"#!/bin/sh\necho kind {kind} go1.22.1 linux/amd64\n")
    executable(host / "pulumi", f"#!/bin/sh\necho {pulumi}\n")
    return host


def fetched(served: Path) -> list[str]:
    requests = served / "requests"
    return [Path(url).name for url in requests.read_text().splitlines()] if requests.exists() else []


@pytest.mark.parametrize(
    ("kind", "pulumi", "expected"),
    [
        ("v0.33.0", "v3.272.0", []),
        ("v0.33.0", "v3.300.1", []),  # a newer CLI runs the pinned SDKs' plugins
        ("v0.26.0", "v3.272.0", ["kind"]),  # node images are built per kind release
        ("v0.34.0", "v3.148.0", ["kind", "pulumi"]),  # e.g. what a CI runner image ships
        ("v0.33.0", "v3.272.0-alpha.1", ["pulumi"]),  # a pre-release comes before its release
        ("v0.33.0", "v3.272.0-rc.1+g1a2b3c", ["pulumi"]),
        ("v0.33.0", "v3.272.0+dirty", []),  # build metadata does not count
        ("v0.33.0", "v3.273.0-alpha.1", []),  # a pre-release of a newer release is newer
    ],
)
def test_host_tools_are_used_only_when_they_fit_the_pins(
    tmp_path: Path, release_server: Path, kind: str, pulumi: str, expected: list[str]
) -> None:
    publish(release_server, host_arch())
    result = run_fetch(tmp_path, release_server, host_tools(tmp_path, kind, pulumi))
    assert result.returncode == 0, result.stderr
    names = fetched(release_server)
    assert ("kind" in expected) == any(name.startswith("kind-") for name in names)
    assert ("pulumi" in expected) == any(name.startswith("pulumi-") for name in names)
    for tool in expected:
        assert f"is not the pinned {tool}" in result.stderr


def test_a_fetched_tool_that_no_longer_fits_its_pin_is_replaced(tmp_path: Path, release_server: Path) -> None:
    publish(release_server, host_arch())
    bin_dir = tmp_path / "tools" / "bin"
    bin_dir.mkdir(parents=True)
    executable(bin_dir / "kind", "#!/bin/sh\necho kind v0.32.0 go1.24.6 linux/amd64\n")
    result = run_fetch(tmp_path, release_server, host_tools(tmp_path, "v0.33.0", "v3.272.0"))
    assert result.returncode == 0, result.stderr
    assert "does not match the pinned version" in result.stderr
    # The host's kind fits, so none is fetched and ours no longer shadows it.
    assert not (bin_dir / "kind").exists() and fetched(release_server) == []


@pytest.mark.parametrize("tool", ["kind", "pulumi"])
def test_fetch_tools_refuses_a_checksum_mismatch(tmp_path: Path, release_server: Path, tool: str) -> None:
    publish(release_server, host_arch(), corrupt=tool)
    result = run_fetch(tmp_path, release_server)
    assert result.returncode == 1
    assert "checksum mismatch" in result.stderr
    assert not (tmp_path / "tools" / "bin" / tool).exists()
    assert left_in_tools(tmp_path) == ({"bin", "bin/kind"} if tool == "pulumi" else {"bin"})


def left_in_tools(tmp_path: Path) -> set[str]:
    tools = tmp_path / "tools"
    return {str(path.relative_to(tools)) for path in tools.rglob("*")}


@pytest.mark.parametrize(
    ("missing", "instead"),
    [
        ("kind-{os}-{arch}", "kind v0.33.0 (exactly"),
        ("kind-{os}-{arch}.sha256sum", "kind v0.33.0 (exactly"),
        ("pulumi-v3.272.0-{os}-{pulumi_arch}.tar.gz", "the Pulumi CLI v3.272.0 or newer"),
        ("pulumi-3.272.0-checksums.txt", "the Pulumi CLI v3.272.0 or newer"),
    ],
)
def test_a_failed_download_leaves_nothing_behind_and_says_what_to_do_instead(
    tmp_path: Path, release_server: Path, missing: str, instead: str
) -> None:
    arch = host_arch()
    publish(release_server, arch)
    name = missing.format(os=host_os(), arch=arch, pulumi_arch={"amd64": "x64", "arm64": "arm64"}[arch])
    (release_server / name).unlink()
    result = run_fetch(tmp_path, release_server)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("could not fetch ")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("could not fetch https://github.com/") and f"/{name}: " in lines[0]
    assert f"put {instead}" in lines[0] and "on PATH instead, or retry" in lines[0]
    # Only what was fetched and verified stays: kind when the Pulumi CLI failed, nothing else.
    assert left_in_tools(tmp_path) == ({"bin", "bin/kind"} if name.startswith("pulumi") else {"bin"})


NO_STACK = "error: no stack named '$3' found"  # what `pulumi stack select` says of a missing stack


def fake_pulumi(
    tmp_path: Path,
    *,
    logged_in: bool,
    stacks: list[str],
    url: str = "https://app.pulumi.com/me",
    select_error: str = NO_STACK,
    outputs: str = "{}",
) -> Path:
    bin_dir = tmp_path / "pulumibin"
    bin_dir.mkdir()
    log = tmp_path / "pulumi.log"
    (tmp_path / "outputs.json").write_text(outputs)
    # `pulumi whoami --json` prints indented JSON with the backend's URL.
    whoami = f"printf '%s\\n' '{{' '  \"user\": \"me\",' '  \"url\": \"{url}\"' '}}'" if logged_in else "exit 1"
    executable(
        bin_dir / "pulumi",
        f"""#!/bin/sh
echo "$* backend=${{PULUMI_BACKEND_URL:-}} passfile=${{PULUMI_CONFIG_PASSPHRASE_FILE:-}}" >> {log}
echo "$1 passphrase=${{PULUMI_CONFIG_PASSPHRASE:-}}" >> {log}.passphrase
echo "$1 set=${{PULUMI_CONFIG_PASSPHRASE+yes}}" >> {log}.passphrase-set
case "$1 $2" in
  "whoami --json") {whoami} ;;
  "stack select")
    for s in {" ".join(stacks) or "none"}; do [ "$s" = "$3" ] && exit 0; done
    echo "{select_error}" >&2; exit 255 ;;
  "stack output") cat {tmp_path / "outputs.json"} ;;
esac
exit 0
""",
    )
    return bin_dir


def run_env(tmp_path: Path, bin_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True, exist_ok=True)
    script = project / "scripts" / "pulumi-env.sh"
    script.write_text(PULUMI_ENV.read_text())
    return subprocess.run(
        [BASH, str(script), *args],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_new_user_gets_a_local_backend_and_a_generated_passphrase(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up", "--stack", "dev")
    assert result.returncode == 0, result.stderr
    project = tmp_path / "project"
    log = (tmp_path / "pulumi.log").read_text().splitlines()
    backend = f"backend=file://{project}/.pulumi-state"
    assert any(line.startswith("stack init dev --secrets-provider passphrase ") and backend in line for line in log)
    assert log[-1].startswith("up --stack dev") and f"passfile={project}/.pulumi-passphrase" in log[-1]
    passphrase = project / ".pulumi-passphrase"
    assert len(passphrase.read_text()) == 64
    assert stat.S_IMODE(passphrase.stat().st_mode) == 0o600
    # The passphrase is generated once.
    before = passphrase.read_text()
    run_env(tmp_path, bin_dir, "dev", "pulumi", "preview")
    assert passphrase.read_text() == before


def test_an_empty_passphrase_file_is_replaced_not_used(tmp_path: Path) -> None:
    # An empty passphrase would leave the stack's secrets as good as unencrypted.
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    passphrase = tmp_path / "project" / ".pulumi-passphrase"
    passphrase.parent.mkdir()
    passphrase.write_text("")
    passphrase.chmod(0o644)
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up", "--stack", "dev")
    assert result.returncode == 0, result.stderr
    assert len(passphrase.read_text()) == 64
    assert stat.S_IMODE(passphrase.stat().st_mode) == 0o600


def test_a_logged_in_user_keeps_their_backend_and_secrets(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path, logged_in=True, stacks=["dev"])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "pulumi.log").read_text()
    assert "backend= " in log and "passfile=" in log.splitlines()[-1] and ".pulumi-passphrase" not in log
    assert "stack init" not in log
    assert not (tmp_path / "project" / ".pulumi-state").exists()


def test_a_stack_in_local_state_stays_there_after_a_login(tmp_path: Path) -> None:
    # `pulumi login` is machine-wide: one made for another project must not move this checkout's
    # stack to a backend without it (a second stack, a second kind cluster).
    state = tmp_path / "project" / ".pulumi-state" / ".pulumi" / "stacks" / "gpu-tenancy"
    state.mkdir(parents=True)
    (state / "dev.json").write_text("{}")
    bin_dir = fake_pulumi(tmp_path, logged_in=True, stacks=["dev"])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "pulumi.log").read_text().splitlines()
    assert not any(line.startswith("whoami") for line in log)
    assert log[-1].startswith("up ") and f"backend=file://{tmp_path / 'project'}/.pulumi-state" in log[-1]
    # What `pulumi stack rm` leaves behind (dev.json.bak) is no stack: the login is followed.
    (state / "dev.json").rename(state / "dev.json.bak")
    run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert "backend= " in (tmp_path / "pulumi.log").read_text().splitlines()[-1]
    # Another stack of the same checkout still follows the login.
    result = run_env(tmp_path, bin_dir, "prod", "pulumi", "up")
    assert "backend= " in (tmp_path / "pulumi.log").read_text().splitlines()[-1]


def test_a_self_managed_backend_the_user_logged_in_to_gets_a_passphrase(tmp_path: Path) -> None:
    # `pulumi login s3://...` (or --local): the backend is the user's, but it has no secrets provider
    # of its own, and `make validate` reads secrets with no terminal to prompt on.
    bin_dir = fake_pulumi(tmp_path, logged_in=True, stacks=[], url="s3://team-state")
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    project = tmp_path / "project"
    log = (tmp_path / "pulumi.log").read_text().splitlines()
    assert f"stack init dev --secrets-provider passphrase backend= passfile={project}/.pulumi-passphrase" in log
    assert not (project / ".pulumi-state").exists()


def stack_file_with_salt(tmp_path: Path) -> Path:
    stack_file = tmp_path / "project" / "Pulumi.dev.yaml"
    stack_file.parent.mkdir(parents=True, exist_ok=True)
    stack_file.write_text("encryptionsalt: v1:c2FsdA==:v1:abc:def\nconfig:\n  gpu-tenancy:tenants: []\n")
    return stack_file


# Pulumi names a stack's file after the last part of a qualified name: org/gpu-tenancy/dev uses Pulumi.dev.yaml.
@pytest.mark.parametrize("stack", ["dev", "org/gpu-tenancy/dev"])
def test_a_salt_made_for_another_passphrase_is_dropped_before_the_stack_is_created(tmp_path: Path, stack: str) -> None:
    # A fresh clone of a repository where someone committed their salt: `stack init` would check the
    # newly generated passphrase against it and fail with "incorrect passphrase".
    stack_file = stack_file_with_salt(tmp_path)
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, stack, "pulumi", "up")
    assert result.returncode == 0, result.stderr
    assert "Pulumi.dev.yaml: dropping an encryptionsalt" in result.stderr
    assert stack_file.read_text() == "config:\n  gpu-tenancy:tenants: []\n"


def test_a_salt_left_beside_our_passphrase_file_is_dropped_when_the_stack_does_not_exist(tmp_path: Path) -> None:
    # The passphrase file survived but the stack did not (state reset, or a salt someone committed
    # since): with no stack and nothing `secure:` in the file, the salt serves nothing, and one
    # made with another passphrase would fail `stack init`.
    stack_file = stack_file_with_salt(tmp_path)
    (tmp_path / "project" / ".pulumi-passphrase").write_text("0" * 64)
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    assert "dropping an encryptionsalt" in result.stderr
    assert stack_file.read_text() == "config:\n  gpu-tenancy:tenants: []\n"
    assert (tmp_path / "project" / ".pulumi-passphrase").read_text() == "0" * 64


@pytest.mark.parametrize("url", ["file://~", "s3://team-state"])
def test_a_stack_another_checkout_made_gets_no_new_passphrase(tmp_path: Path, url: str) -> None:
    # A machine-wide `pulumi login --local`, or a shared bucket: the stack exists, made with another
    # checkout's passphrase; one generated here could never open it.
    bin_dir = fake_pulumi(tmp_path, logged_in=True, stacks=["dev"], url=url)
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "project" / ".pulumi-passphrase").exists()
    assert "set the passphrase stack 'dev' was created with" in result.stderr
    log = (tmp_path / "pulumi.log").read_text().splitlines()
    assert "stack init" not in "\n".join(log) and log[-1].startswith("up ") and "passfile= " in log[-1] + " "


@pytest.mark.parametrize(
    "kept_by", ["the user's passphrase", "the user's empty passphrase", "secure values", "a select error", "an existing stack"]
)
def test_a_salt_that_may_match_the_passphrase_is_kept(tmp_path: Path, kept_by: str) -> None:
    # A passphrase the user chose may be the one that made the salt; secure values in the file need
    # it; a select that failed for another reason is no proof the stack is missing.
    stack_file = stack_file_with_salt(tmp_path)
    env = {}
    select_error, stacks = NO_STACK, []
    if kept_by == "the user's passphrase":
        env["PULUMI_CONFIG_PASSPHRASE"] = "theirs"
    elif kept_by == "the user's empty passphrase":
        env["PULUMI_CONFIG_PASSPHRASE"] = ""
    else:
        (tmp_path / "project" / ".pulumi-passphrase").write_text("0" * 64)
    if kept_by == "secure values":
        stack_file.write_text(stack_file.read_text() + "  gpu-tenancy:token:\n    secure: v1:abc:def\n")
    elif kept_by == "a select error":
        select_error = "error: failed to load checkpoint: permission denied"
    elif kept_by == "an existing stack":
        stacks = ["dev"]
    before = stack_file.read_text()
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=stacks, select_error=select_error)
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up", **env)
    assert result.returncode == 0, result.stderr
    assert stack_file.read_text() == before
    assert "dropping" not in result.stderr
    if kept_by == "secure values":
        assert "keeping its encryptionsalt for its secure: values" in result.stderr


def test_pulumi_env_runs_on_bash_3_2() -> None:
    # macOS ships bash 3.2, where expanding an empty array under `set -u` aborts ("unbound
    # variable"); ShellCheck does not flag it, so the script keeps to plain variables.
    assert "[@]" not in PULUMI_ENV.read_text() and "[*]" not in PULUMI_ENV.read_text()


def test_a_chosen_passphrase_is_kept(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=["dev"])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up", PULUMI_CONFIG_PASSPHRASE="mine")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "project" / ".pulumi-passphrase").exists()
    # The user's passphrase reaches pulumi, and no passphrase file competes with it.
    assert (tmp_path / "pulumi.log.passphrase").read_text().splitlines()[-1] == "up passphrase=mine"
    assert (tmp_path / "pulumi.log").read_text().splitlines()[-1].endswith(" passfile=")


def test_an_empty_passphrase_the_user_set_is_their_passphrase(tmp_path: Path) -> None:
    # Pulumi's readPassphrase takes PULUMI_CONFIG_PASSPHRASE when it is set (os.LookupEnv), empty or not.
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up", PULUMI_CONFIG_PASSPHRASE="")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "project" / ".pulumi-passphrase").exists()
    assert (tmp_path / "pulumi.log.passphrase-set").read_text().splitlines()[-1] == "up set=yes"
    log = (tmp_path / "pulumi.log").read_text().splitlines()
    assert "stack init dev backend=" in "\n".join(log) and log[-1].endswith(" passfile=")


def test_an_empty_passphrase_file_variable_is_ignored_as_pulumi_ignores_it(tmp_path: Path) -> None:
    # readPassphrase reads PULUMI_CONFIG_PASSPHRASE_FILE only when it is not empty; without the
    # generated file pulumi would have no passphrase at all.
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up", PULUMI_CONFIG_PASSPHRASE_FILE="")
    assert result.returncode == 0, result.stderr
    project = tmp_path / "project"
    assert (project / ".pulumi-passphrase").exists()
    assert (tmp_path / "pulumi.log").read_text().splitlines()[-1].endswith(f" passfile={project}/.pulumi-passphrase")


@pytest.mark.parametrize("fetched", [True, False])
def test_without_the_pulumi_cli_it_says_how_to_get_one(tmp_path: Path, fetched: bool) -> None:
    # Run by hand, .tools/bin is not on PATH; before, a missing CLI read as "not logged in" and the
    # script created .pulumi-state and a passphrase before failing on `stack init`. Through make
    # with nothing fetched yet (make kubeconfig fetches nothing), "run it through make" went round in a circle.
    bin_dir = tmp_path / "nopulumi"
    bin_dir.mkdir()
    for tool in ("dirname", "mkdir", "head", "od", "tr", "grep", "sed", "mv"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "scripts" / "pulumi-env.sh").write_text(PULUMI_ENV.read_text())
    if fetched:
        (project / ".tools" / "bin").mkdir(parents=True)
        executable(project / ".tools" / "bin" / "pulumi", "#!/bin/sh\necho v3.272.0\n")
    result = subprocess.run(
        [BASH, str(project / "scripts" / "pulumi-env.sh"), "dev", "pulumi", "up"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    if fetched:
        assert "the Pulumi CLI is not on PATH: run this through make" in result.stderr
        assert f'prefix PATH="{project}/.tools/bin:$PATH"' in result.stderr
    else:
        assert "the Pulumi CLI is not on PATH and not fetched yet: `make tools` fetches it" in result.stderr
        assert "through make" not in result.stderr
    assert sorted(path.name for path in project.iterdir()) == ([".tools", "scripts"] if fetched else ["scripts"])


def test_existing_refuses_to_create_a_stack(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "--existing", "dev", "pulumi", "destroy")
    assert result.returncode == 2
    assert "no stack 'dev'" in result.stderr and "make up" in result.stderr
    assert "stack init" not in (tmp_path / "pulumi.log").read_text()


def test_existing_creates_no_state_directory_and_no_passphrase(tmp_path: Path) -> None:
    # No local state: there is no stack to find, and nothing is made looking for it.
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=["dev"])
    result = run_env(tmp_path, bin_dir, "--existing", "dev", "pulumi", "destroy")
    assert result.returncode == 2
    assert "no stack 'dev' in this backend" in result.stderr and ".pulumi-state" in result.stderr
    project = tmp_path / "project"
    assert not (project / ".pulumi-state").exists() and not (project / ".pulumi-passphrase").exists()
    assert "destroy" not in (tmp_path / "pulumi.log").read_text()


def test_existing_generates_no_passphrase_for_a_stack_made_without_it(tmp_path: Path) -> None:
    # The stack exists (made elsewhere, or the file was deleted): a passphrase generated now cannot be
    # the one that made it, so none is written, and the note says what to set.
    project = tmp_path / "project"
    (project / ".pulumi-state").mkdir(parents=True)
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=["dev"])
    result = run_env(tmp_path, bin_dir, "--existing", "dev", "pulumi", "stack", "output")
    assert result.returncode == 0, result.stderr
    assert not (project / ".pulumi-passphrase").exists()
    assert (tmp_path / "pulumi.log").read_text().splitlines()[-1].endswith(" passfile=")
    assert "set the passphrase stack 'dev' was created with" in result.stderr


@pytest.mark.parametrize(
    ("pulumi_says", "we_say"),
    [
        ("error: no stack named 'dev' found", "no stack 'dev' in this backend"),
        ("error: failed to load checkpoint: open .pulumi/stacks/gpu-tenancy/dev.json: permission denied", "failed"),
    ],
)
def test_existing_passes_on_why_pulumi_could_not_select_the_stack(tmp_path: Path, pulumi_says: str, we_say: str) -> None:
    (tmp_path / "project" / ".pulumi-state").mkdir(parents=True)
    (tmp_path / "project" / ".pulumi-passphrase").write_text("0" * 64)
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[], select_error=pulumi_says)
    result = run_env(tmp_path, bin_dir, "--existing", "dev", "pulumi", "destroy")
    assert result.returncode == 2
    assert we_say in result.stderr and f"  {pulumi_says}" in result.stderr.splitlines()
    # Only a missing stack is called one.
    assert ("no stack 'dev'" in result.stderr) == ("no stack named" in pulumi_says)
    assert "stack init" not in (tmp_path / "pulumi.log").read_text()


USAGE = "usage: scripts/pulumi-env.sh [--existing] <stack> <command> [args...]\n"


@pytest.mark.parametrize(
    "args",
    [[], ["-h"], ["--help"], ["dev"], ["--existing"], ["--existing", "dev"], ["--existing", "--help"], ["dev", "--help"]],
    ids=lambda args: " ".join(args) or "no-arguments",
)
def test_without_a_stack_and_a_command_it_prints_its_usage_and_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    # Before: no arguments said "line 21: 1: stack", -h became a stack (state, passphrase and
    # `pulumi stack init --help`), and a stack alone was created with no command run.
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, *args)
    assert result.returncode == 2
    assert result.stderr.startswith(USAGE) and result.stdout == ""
    assert sorted(path.name for path in (tmp_path / "project").iterdir()) == ["scripts"]
    assert not (tmp_path / "pulumi.log").exists()


@pytest.mark.parametrize("script", [FETCH, PULUMI_ENV, PROJECT_DIR / ".ci" / "run"], ids=lambda path: path.name)
def test_host_scripts_pass_shellcheck(script: Path) -> None:
    assert shellcheck(script.read_text(), shell="bash") == ""


def test_shellcheck_flags_what_sh_n_lets_through() -> None:
    risky = "rm -rf $WORK_DIR/*\n"
    subprocess.run(["sh", "-n"], input=risky.encode(), check=True)
    assert "SC2115" in shellcheck(risky) or "SC2086" in shellcheck(risky)
    with pytest.raises(AssertionError, match="SC2086"):
        assert_valid_machine_script("kubectl label node $NODE gpu=true\n")


@pytest.mark.parametrize("login", ["PULUMI_ACCESS_TOKEN", "credentials.json"])
def test_a_login_that_does_not_answer_stops_instead_of_deploying_locally(tmp_path: Path, login: str) -> None:
    # An expired token or no network: falling back to .pulumi-state would deploy a second copy.
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    env = {}
    if login == "PULUMI_ACCESS_TOKEN":
        env["PULUMI_ACCESS_TOKEN"] = "pul-expired"
    else:
        (tmp_path / ".pulumi").mkdir()
        (tmp_path / ".pulumi" / "credentials.json").write_text('{\n    "current": "https://api.pulumi.com"\n}\n')
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up", **env)
    assert result.returncode == 2
    assert "pulumi whoami failed although a login is configured" in result.stderr
    assert not (tmp_path / "project" / ".pulumi-state").exists()
    assert "stack init" not in (tmp_path / "pulumi.log").read_text()


def test_a_logged_out_credentials_file_still_gets_the_local_backend(tmp_path: Path) -> None:
    # `pulumi logout` leaves credentials.json with an empty "current": no login is configured.
    (tmp_path / ".pulumi").mkdir()
    (tmp_path / ".pulumi" / "credentials.json").write_text('{\n    "current": "",\n    "accessTokens": {}\n}\n')
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "project" / ".pulumi-state").is_dir()


# --- Makefile -------------------------------------------------------------------------------------

MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="GNU make is not installed")


def run_make(
    tmp_path: Path, *args: str, path: str = "", project: Path = PROJECT_DIR, **env: str
) -> subprocess.CompletedProcess[str]:
    """``make ARGS`` in the project, with a clean environment (no MAKEFLAGS of an enclosing make)."""
    return subprocess.run(
        [str(MAKE), "--no-print-directory", *args],
        cwd=project,
        env={"PATH": f"{path}:/usr/bin:/bin" if path else "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def fake_docker(tmp_path: Path, *, info_error: str = "", cgroup: int = 2) -> Path:
    bin_dir = tmp_path / "dockerbin"
    bin_dir.mkdir()
    answer = f"echo '{info_error}' >&2; exit 1" if info_error else "echo 'Server Version: 28.0.0'"
    executable(
        bin_dir / "docker",
        f"""#!/bin/sh
case "$*" in
  "info --format {{{{.CgroupVersion}}}}") echo {cgroup} ;;
  info*) {answer} ;;
esac
""",
    )
    return bin_dir


EXISTING_SSH_ONLY = """config:
  gpu-tenancy:management:
    mode: existing
    kubeconfig: {secure: v1:abc}
  gpu-tenancy:tenants:
  - name: a
    workers:
    - name: w0
      ssh: {host: 10.0.0.11, user: u, privateKey: k}
"""


# A valid config: the docker worker says how it reaches the tenant endpoints.
DOCKER_WORKER_ON_EXISTING = EXISTING_SSH_ONLY.replace("      ssh: {host: 10.0.0.11, user: u, privateKey: k}\n", "") + (
    "  gpu-tenancy:network: {workerNetwork: lab}\n"
)


def readme_inotify_limits() -> dict[str, int]:
    readme = (PROJECT_DIR / "README.md").read_text()
    prerequisites = readme.split("## Prerequisites", 1)[1].split("\n## ", 1)[0]
    return {key: int(value) for key, value in re.findall(r"fs\.inotify\.(max_user_\w+)=(\d+)", prerequisites)}


def test_make_up_checks_docker_before_fetching_tools_or_running_pulumi() -> None:
    # After the virtualenv: it reads the stack's config to tell whether Docker is needed at all.
    makefile = (PROJECT_DIR / "Makefile").read_text()
    prerequisites = re.search(r"^up:([^#\n]*)", makefile, re.MULTILINE)
    assert prerequisites and prerequisites[1].split() == ["venv", "preflight", "tools"]
    # tools reads the stack (does it need kind?) with the virtualenv's Python: make -j or make tools alone.
    tools = re.search(r"^tools:([^#\n]*)", makefile, re.MULTILINE)
    assert tools and tools[1].split() == ["venv"]


@pytest.mark.parametrize(
    ("stack_yaml", "status"),
    [
        (None, 0),  # a new stack: kind, the default
        ("config:\n  gpu-tenancy:tenants: [{name: a}]\n", 0),
        ("config:\n  gpu-tenancy:management: {name: lab}\n", 0),  # mode: kind, the default
        (EXISTING_SSH_ONLY, preflight.DOES_NOT_NEED),
        (DOCKER_WORKER_ON_EXISTING, 0),
        (EXISTING_SSH_ONLY.replace("mode: existing", "mode: kind"), 0),
        ("config:\n  gpu-tenancy:tenants: [{name: A}]\n", 0),  # invalid, and kind: Docker first
        # Invalid, and no Docker needed: pulumi up must get to say why.
        (EXISTING_SSH_ONLY.replace("host: 10.0.0.11", "host: 10.0.0.011"), preflight.DOES_NOT_NEED),
        # JSON text, as the program reads it.
        ('config:\n  gpu-tenancy:management: \'{"mode": "existing"}\'\n', preflight.DOES_NOT_NEED),
        ("config:\n  gpu-tenancy:management: {mode: existing}\n", preflight.DOES_NOT_NEED),  # no workers yet
        # A key given twice in JSON text: pulumi up names it; the checks run meanwhile.
        ('config:\n  gpu-tenancy:management: \'{"mode": "existing", "mode": "kind"}\'\n', 0),
        # Tenants encrypted as a whole: unreadable offline, which is no reason to ask for Docker.
        (
            "config:\n  gpu-tenancy:management: {mode: existing, kubeconfig: {secure: v1:a}}\n"
            "  gpu-tenancy:tenants: {secure: v1:b}\n",
            preflight.DOES_NOT_NEED,
        ),
    ],
)
def test_only_stacks_that_use_docker_get_the_docker_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack_yaml: str | None, status: int
) -> None:
    assert preflight_of(tmp_path, monkeypatch, stack_yaml) == status


def preflight_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack_yaml: str | None, *args: str) -> int:
    """tools.preflight's exit status for stack ``x`` with this stack file (none: a new stack)."""
    if stack_yaml is not None:
        (tmp_path / "Pulumi.x.yaml").write_text(stack_yaml)
    monkeypatch.setattr(stack_file_module, "PROJECT_DIR", tmp_path)
    return preflight.main(["--stack", "x", *args])


@pytest.mark.parametrize(
    ("stack_yaml", "status"),
    [
        (None, 0),
        ("config:\n  gpu-tenancy:management: {name: lab}\n", 0),  # mode: kind, the default
        ("config:\n  gpu-tenancy:management: existing\n", 0),  # unreadable: fetch it
        (EXISTING_SSH_ONLY, preflight.DOES_NOT_NEED),
        (DOCKER_WORKER_ON_EXISTING, preflight.DOES_NOT_NEED),  # docker, but no kind
        ('config:\n  gpu-tenancy:management: \'{"mode": "existing"}\'\n', preflight.DOES_NOT_NEED),
    ],
)
def test_only_stacks_with_a_kind_cluster_need_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack_yaml: str | None, status: int
) -> None:
    assert preflight_of(tmp_path, monkeypatch, stack_yaml, "--needs", "kind") == status


@pytest.mark.parametrize(
    ("stack_yaml", "status"),
    [
        (None, 0),
        ("config:\n  gpu-tenancy:management: {name: lab}\n", 0),  # kind's node: v1.36.4
        ("config:\n  gpu-tenancy:management: {nodeImage: 'kindest/node:v1.34.3'}\n", preflight.DOES_NOT_NEED),
        ("config:\n  gpu-tenancy:management: {nodeImage: 'kindest/node:v1.34.3@sha256:ab'}\n", preflight.DOES_NOT_NEED),
        ("config:\n  gpu-tenancy:management: {nodeImage: 'lab:5000/node'}\n", 0),  # no version to read
        (EXISTING_SSH_ONLY, preflight.DOES_NOT_NEED),
        (DOCKER_WORKER_ON_EXISTING, 0),  # a docker worker of the default version
        (
            DOCKER_WORKER_ON_EXISTING.replace("  - name: a\n", "  - name: a\n    kubernetesVersion: v1.34.3\n"),
            preflight.DOES_NOT_NEED,
        ),
        (DOCKER_WORKER_ON_EXISTING.replace("  - name: a\n", "  - name: a\n    kubernetesVersion: v1.35.0\n"), 0),
        (EXISTING_SSH_ONLY.replace("  - name: a\n", "  - name: a\n    kubernetesVersion: v1.36.4\n"), preflight.DOES_NOT_NEED),
    ],
)
def test_only_kubelets_of_135_and_newer_in_docker_need_a_cgroup_v2_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack_yaml: str | None, status: int
) -> None:
    assert preflight_of(tmp_path, monkeypatch, stack_yaml, "--needs", "cgroup-v2") == status


@needs_make
@pytest.mark.parametrize(("stack", "cgroup", "passes"), [("dev", 1, False), ("dev", 2, True), ("example-multihost", 1, True)])
def test_preflight_stops_on_a_cgroup_v1_engine_where_a_kubelet_needs_v2(
    tmp_path: Path, stack: str, cgroup: int, passes: bool
) -> None:
    inotify = tmp_path / "no-inotify"  # not Linux: the inotify check has nothing to read
    result = run_make(
        tmp_path, "preflight", f"STACK={stack}", f"INOTIFY_DIR={inotify}", path=str(fake_docker(tmp_path, cgroup=cgroup))
    )
    if passes:
        assert result.returncode == 0, result.stderr
        assert "cgroup v1" not in result.stderr
    else:
        assert result.returncode != 0
        assert "error: the Docker engine runs on cgroup v1, on which the kubelet of Kubernetes 1.35 and newer" in result.stderr
        assert "systemd.unified_cgroup_hierarchy=1" in result.stderr


def project_with_stack(tmp_path: Path, stack: str, stack_yaml: str) -> Path:
    """A copy of what ``make preflight`` reads, with one more stack file (the project's own stays untouched)."""
    project = tmp_path / "project"
    for directory in ("gpu_tenancy", "tools"):
        shutil.copytree(PROJECT_DIR / directory, project / directory, ignore=shutil.ignore_patterns("__pycache__"))
    # Copies keep their times: the virtualenv, newer than its requirements, is not made again.
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt", "policies/requirements.txt"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_DIR / name, project / name)
    (project / ".venv").symlink_to(PROJECT_DIR / ".venv")
    (project / f"Pulumi.{stack}.yaml").write_text(stack_yaml)
    return project


@needs_make
@pytest.mark.parametrize(("version", "passes"), [("v1.34.3", True), ("v1.35.0", False)])
def test_preflight_lets_a_cgroup_v1_engine_run_kubelets_older_than_135(tmp_path: Path, version: str, passes: bool) -> None:
    old_kind = (
        "config:\n"
        f"  gpu-tenancy:management: {{nodeImage: 'kindest/node:v1.34.3'}}\n"
        f"  gpu-tenancy:tenants: [{{name: a, kubernetesVersion: {version}, workers: [{{name: w0}}]}}]\n"
    )
    project = project_with_stack(tmp_path, "old", old_kind)
    docker = str(fake_docker(tmp_path, cgroup=1))
    result = run_make(tmp_path, "preflight", "STACK=old", f"INOTIFY_DIR={tmp_path / 'none'}", path=docker, project=project)
    assert (result.returncode == 0) is passes, result.stderr
    assert ("error: the Docker engine runs on cgroup v1" in result.stderr) is not passes


@needs_make
@pytest.mark.parametrize(("stack", "fetches_kind"), [("example-multihost", False), ("dev", True)])
def test_make_tools_fetches_kind_only_for_a_stack_that_runs_it(
    tmp_path: Path, release_server: Path, stack: str, fetches_kind: bool
) -> None:
    publish(release_server, host_arch())
    tools = tmp_path / "tools"
    result = run_make(tmp_path, "tools", f"STACK={stack}", f"TOOLS={tools}", path=fake_path(tmp_path, release_server))
    assert result.returncode == 0, result.stderr
    assert (tools / "bin" / "kind").exists() == fetches_kind
    assert (tools / "bin" / "pulumi").exists()
    assert ("kind is not fetched" in result.stderr) != fetches_kind


@needs_make
def test_preflight_leaves_docker_alone_for_a_stack_that_runs_nothing_here(tmp_path: Path) -> None:
    error = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    docker = str(fake_docker(tmp_path, info_error=error))
    result = run_make(tmp_path, "preflight", "STACK=example-multihost", path=docker)
    assert result.returncode == 0, result.stderr
    assert "Pulumi.example-multihost.yaml: an existing management cluster and SSH workers only" in result.stderr
    assert "docker info failed" not in result.stderr
    dev = run_make(tmp_path, "preflight", "STACK=dev", path=docker)
    assert dev.returncode != 0 and f"docker info failed: {error}" in dev.stderr


@needs_make
@pytest.mark.parametrize(
    "error",
    [
        "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock",
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    ],
)
def test_preflight_fails_when_the_docker_daemon_does_not_answer(tmp_path: Path, error: str) -> None:
    # `command -v docker` alone let a stopped daemon or a missing docker group through to pulumi up.
    result = run_make(tmp_path, "preflight", path=str(fake_docker(tmp_path, info_error=error)))
    assert result.returncode != 0
    assert f"docker info failed: {error}" in result.stderr
    assert "systemctl start docker" in result.stderr and "docker group" in result.stderr


@needs_make
@pytest.mark.parametrize("check", ["fail", "warn"])
@pytest.mark.parametrize("limits", ["low", "enough", "absent"])
def test_preflight_stops_below_the_readme_inotify_limits_unless_told_to_warn(tmp_path: Path, limits: str, check: str) -> None:
    # Below them workers fail much later, with messages that do not name inotify.
    wanted = readme_inotify_limits()
    assert set(wanted) == {"max_user_instances", "max_user_watches"}
    inotify = tmp_path / "inotify"
    if limits != "absent":  # not Linux
        inotify.mkdir()
        for key, want in wanted.items():
            (inotify / key).write_text(f"{want - 1 if limits == 'low' else want}\n")
    extra = [] if check == "fail" else ["INOTIFY_CHECK=warn"]
    result = run_make(tmp_path, "preflight", f"INOTIFY_DIR={inotify}", *extra, path=str(fake_docker(tmp_path)))
    level = "error" if check == "fail" else "warning"
    messages = [line for line in result.stderr.splitlines() if line.startswith(f"{level}: fs.inotify.")]
    if limits == "low":
        assert len(messages) == 2
        for key, want in wanted.items():
            assert any(f"fs.inotify.{key} is {want - 1}, below {want}" in line for line in messages)
            assert any(f"sudo sysctl fs.inotify.{key}={want}" in line for line in messages)
    else:
        assert messages == []
    if limits == "low" and check == "fail":
        assert result.returncode != 0
        assert "make up INOTIFY_CHECK=warn" in result.stderr
    else:
        assert result.returncode == 0, result.stderr


@needs_make
def test_make_names_a_missing_python_once(tmp_path: Path) -> None:
    result = run_make(tmp_path, "venv", "PYTHON=python3.99-missing", f"VENV={tmp_path / 'venv'}")
    assert result.returncode != 0
    assert "command not found" not in result.stderr
    assert result.stderr.count("python3.99-missing not found") == 1
    assert "make up PYTHON=python3.12" in result.stderr
    assert not (tmp_path / "venv").exists()


@needs_make
def test_make_refuses_an_old_python_naming_its_version(tmp_path: Path) -> None:
    bin_dir = tmp_path / "oldpython"
    bin_dir.mkdir()
    executable(bin_dir / "python3.10", '#!/bin/sh\ncase "$*" in *python_version*) echo 3.10.12 ;; *) exit 1 ;; esac\n')
    result = run_make(tmp_path, "venv", "PYTHON=python3.10", f"VENV={tmp_path / 'venv'}", path=str(bin_dir))
    assert result.returncode != 0
    assert "Python 3.11+ is required; python3.10 is 3.10.12" in result.stderr
    assert "make up PYTHON=python3.12" in result.stderr
    assert not (tmp_path / "venv").exists()


@needs_make
def test_make_help_documents_the_variables(tmp_path: Path) -> None:
    result = run_make(tmp_path, "help")
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "STACK=dev" in lines and "PYTHON=python3" in lines and "kubeconfig" in lines
    assert "make destroy UP_FLAGS= asks" in lines["UP_FLAGS=--yes"]


needs_venv = pytest.mark.skipif(not (PROJECT_DIR / ".venv" / "bin" / "python").exists(), reason="needs the project's .venv")


def fresh_python(tmp_path: Path) -> Path:
    """A $(PYTHON) whose ``-m venv`` makes a virtualenv as chatty on stdout as pip on a first run."""
    bin_dir = tmp_path / "freshpython"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    executable(
        python,
        f"""#!/bin/sh
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\necho "Successfully installed $*"\\n' > "$3/bin/pip"
  printf '#!/bin/sh\\nexec {sys.executable} "$@"\\n' > "$3/bin/python"
  chmod +x "$3/bin/pip" "$3/bin/python"
  echo "created virtual environment"
  exit 0
fi
exec {sys.executable} "$@"
""",
    )
    return python


@needs_make
@needs_venv
@pytest.mark.parametrize("venv", ["present", "fresh"])
def test_make_render_prints_only_the_json(tmp_path: Path, venv: str) -> None:
    # `make render > render.json`: no echoed command line, and on a fresh clone nothing from
    # making the virtualenv, on stdout.
    extra = [] if venv == "present" else [f"PYTHON={fresh_python(tmp_path)}", f"VENV={tmp_path / 'venv'}"]
    result = run_make(tmp_path, "render", *extra)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stack"] == "dev"
    if venv == "fresh":
        assert (tmp_path / "venv" / ".installed").exists()
        assert "Successfully installed" in result.stderr and "created virtual environment" in result.stderr


@needs_make
@needs_venv
def test_make_policy_prints_only_the_findings(tmp_path: Path) -> None:
    result = run_make(tmp_path, "policy")
    assert result.returncode == 0, result.stderr
    assert "tools.policycheck" not in result.stdout
    assert all(line.split(" ", 1)[0] in {"advisory", "mandatory"} for line in result.stdout.splitlines())


TOOL_RUNS = {
    "render": ["--stack", "dev"],
    "policycheck": ["--stack", "dev"],
    "gpuplan": ["--stack", "dev", "--pods", "examples/pods/fractional.yaml"],
    "validate": ["--list"],
    "preflight": ["--stack", "dev"],
}


def run_tool(tool: str, stdout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROJECT_DIR / ".venv" / "bin" / "python"), "-m", f"tools.{tool}", *TOOL_RUNS[tool]],
        cwd=PROJECT_DIR,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )


@needs_venv
@pytest.mark.parametrize("tool", [tool for tool in TOOL_RUNS if tool != "preflight"])
def test_a_tool_into_a_closed_pipe_exits_without_a_traceback(tool: str) -> None:
    # `python -m tools.render --stack dev | head -1`: the reader is gone before the output ends.
    # Here it is gone before the first byte, so the write fails whatever the pipe's size. Not 1
    # (policycheck's "a mandatory policy is violated") nor 2 (gpuplan's "malformed input").
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = run_tool(tool, write_end)
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr and "error:" not in result.stderr
    assert result.returncode == 141


@needs_venv
@pytest.mark.parametrize("tool", list(TOOL_RUNS))
def test_a_tool_started_with_stdout_closed_says_so(tool: str) -> None:
    # `python -m tools.render >&-`: Python then has no sys.stdout at all.
    result = subprocess.run(
        ["sh", "-c", f'exec "$0" -m tools.{tool} "$@" >&-', str(PROJECT_DIR / ".venv" / "bin" / "python"), *TOOL_RUNS[tool]],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "error: stdout is closed; redirect it to a file or /dev/null instead"


@needs_make
@pytest.mark.parametrize("target", ["up", "preview"])
def test_make_up_and_preview_stop_for_a_stack_with_no_config_file(tmp_path: Path, target: str) -> None:
    # A mistyped STACK was taken for a new Docker stack, created with the default config and deployed.
    result = run_make(tmp_path, "-n", target, "STACK=devv")
    assert result.returncode != 0 and result.stdout == ""
    assert "no Pulumi.devv.yaml in this project: check STACK, or create the stack's config first" in result.stderr
    assert "cp Pulumi.dev.yaml Pulumi.devv.yaml" in result.stderr
    assert "scripts/pulumi-env.sh devv pulumi config set" in result.stderr
    # Stacks with a config file go on, as do the targets that need an existing stack.
    for args in ([target], [target, "STACK=example-multihost"], ["destroy", "STACK=devv"], ["validate", "STACK=devv"]):
        dry_run = run_make(tmp_path, "-n", *args)
        assert dry_run.returncode == 0, (args, dry_run.stderr)


@needs_make
def test_make_up_stops_for_a_stack_with_no_config_file_before_asking_docker(tmp_path: Path) -> None:
    bin_dir = tmp_path / "dockerbin"
    bin_dir.mkdir()
    executable(bin_dir / "docker", f'#!/bin/sh\necho "$*" >> {tmp_path / "docker.log"}; exit 1\n')
    result = run_make(tmp_path, "up", "STACK=devv", path=str(bin_dir))
    assert result.returncode != 0
    assert "no Pulumi.devv.yaml in this project" in result.stderr
    assert not (tmp_path / "docker.log").exists()


TENANT_KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters:\n- name: tenant-a\n"


@needs_make
@pytest.mark.skipif(not (PROJECT_DIR / ".venv" / "bin" / "python").exists(), reason="needs the project's .venv")
@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-c", ""])
def test_make_kubeconfig_prints_a_tenants_kubeconfig_from_the_stack_outputs(tmp_path: Path, tenant: str) -> None:
    outputs = {"tenant-a": {"kubeconfig": TENANT_KUBECONFIG}, "tenant-b": {"kubeconfig": "other"}}
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=["dev"], outputs=json.dumps(outputs))
    # A backend and passphrase of the user's own: pulumi-env.sh creates nothing in the project.
    env = {"PULUMI_BACKEND_URL": f"file://{tmp_path}/state", "PULUMI_CONFIG_PASSPHRASE": "x"}
    result = run_make(tmp_path, "kubeconfig", f"TENANT={tenant}", f"TOOLS={tmp_path}/no-tools", path=str(bin_dir), **env)
    if tenant == "tenant-a":
        assert result.returncode == 0, result.stderr
        assert result.stdout == TENANT_KUBECONFIG
        log = (tmp_path / "pulumi.log").read_text()
        assert "stack output tenants --show-secrets --json --stack dev" in log
    elif tenant:
        assert result.returncode != 0 and result.stdout == ""
        assert "no tenant 'tenant-c' in the stack outputs; tenants: tenant-a, tenant-b" in result.stderr
    else:
        assert result.returncode != 0 and "usage: make kubeconfig TENANT=<name>" in result.stderr


def test_pytest_reports_why_tests_skip() -> None:
    # CI's fresh clone has no ../shared/schemas: the fidelity tests skip, and the summary says why.
    addopts = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-rs" in addopts.split()


@pytest.mark.parametrize(
    "tenants",
    [
        "{secure: v1:b}",
        "[{secure: v1:b}]",
        "[{name: a, workers: {secure: v1:b}}]",
        "[{name: a, workers: [{secure: v1:b}]}]",
    ],
)
def test_preflight_says_it_cannot_read_encrypted_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tenants: str
) -> None:
    # No reason to ask an SSH-only stack for Docker, but no claim that nothing runs there either.
    management = "{mode: existing, kubeconfig: {secure: v1:a}}"
    stack_yaml = f"config:\n  gpu-tenancy:management: {management}\n  gpu-tenancy:tenants: {tenants}\n"
    assert preflight_of(tmp_path, monkeypatch, stack_yaml) == preflight.DOES_NOT_NEED
    err = capsys.readouterr().err
    assert "workers encrypted as a whole cannot be read here, so whether any runs in Docker is unknown" in err
    assert "nothing runs on this host's Docker" not in err
