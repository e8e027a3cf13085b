"""The host scripts behind `make up`: tool fetching with checksums, and the Pulumi backend choice.

They run for real here against stand-ins for `curl` and `pulumi` placed first on PATH.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR
from tests.shell import assert_valid_machine_script, executable, shellcheck

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
    ):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True, check=False).stdout.strip()
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def run_fetch(tmp_path: Path, served: Path, host_bin: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = fake_path(tmp_path, served) + (f":{host_bin}" if host_bin else "")
    return subprocess.run(
        [BASH, str(FETCH), str(tmp_path / "tools"), "v0.33.0", "v3.272.0"],
        env={"PATH": path, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def publish(served: Path, arch: str = "amd64", corrupt: str | None = None) -> None:
    kind = f"kind-linux-{arch}"
    (served / kind).write_bytes(b"#!/bin/sh\necho kind v0.33.0 go1.24.6 linux/amd64\n")
    digest = hashlib.sha256((served / kind).read_bytes()).hexdigest()
    (served / f"{kind}.sha256sum").write_text(f"{'0' * 64 if corrupt == 'kind' else digest}  {kind}\n")
    pulumi_arch = {"amd64": "x64", "arm64": "arm64"}[arch]
    tree = served / "tree" / "pulumi"
    tree.mkdir(parents=True)
    for binary in ("pulumi", "pulumi-language-python"):
        executable(tree / binary, "#!/bin/sh\necho v3.272.0\n")
    asset = f"pulumi-v3.272.0-linux-{pulumi_arch}.tar.gz"
    with tarfile.open(served / asset, "w:gz") as archive:
        archive.add(tree, arcname="pulumi")
    digest = hashlib.sha256((served / asset).read_bytes()).hexdigest()
    (served / "pulumi-3.272.0-checksums.txt").write_text(f"{'f' * 64 if corrupt == 'pulumi' else digest}  {asset}\nabc  other\n")


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
    assert f"https://github.com/kubernetes-sigs/kind/releases/download/v0.33.0/kind-linux-{host_arch()}" in requests
    assert "https://github.com/pulumi/pulumi/releases/download/v3.272.0/pulumi-3.272.0-checksums.txt" in requests
    # A second run finds them and fetches nothing.
    (release_server / "requests").unlink()
    assert run_fetch(tmp_path, release_server).returncode == 0
    assert not (release_server / "requests").exists()


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


def fake_pulumi(tmp_path: Path, *, logged_in: bool, stacks: list[str], url: str = "https://app.pulumi.com/me") -> Path:
    bin_dir = tmp_path / "pulumibin"
    bin_dir.mkdir()
    log = tmp_path / "pulumi.log"
    # `pulumi whoami --json` prints indented JSON with the backend's URL.
    whoami = f"printf '%s\\n' '{{' '  \"user\": \"me\",' '  \"url\": \"{url}\"' '}}'" if logged_in else "exit 1"
    executable(
        bin_dir / "pulumi",
        f"""#!/bin/sh
echo "$* backend=${{PULUMI_BACKEND_URL:-}} passfile=${{PULUMI_CONFIG_PASSPHRASE_FILE:-}}" >> {log}
echo "$1 passphrase=${{PULUMI_CONFIG_PASSPHRASE:-}}" >> {log}.passphrase
case "$1 $2" in
  "whoami --json") {whoami} ;;
  "stack select") for s in {" ".join(stacks) or "none"}; do [ "$s" = "$3" ] && exit 0; done; exit 255 ;;
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


def test_a_logged_in_user_keeps_their_backend_and_secrets(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path, logged_in=True, stacks=["dev"])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "pulumi.log").read_text()
    assert "backend= " in log and "passfile=" in log.splitlines()[-1] and ".pulumi-passphrase" not in log
    assert "stack init" not in log
    assert not (tmp_path / "project" / ".pulumi-state").exists()


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


def test_a_salt_made_for_another_passphrase_is_dropped_before_the_stack_is_created(tmp_path: Path) -> None:
    # A fresh clone of a repository where someone committed their salt: `stack init` would check the
    # newly generated passphrase against it and fail with "incorrect passphrase".
    stack_file = stack_file_with_salt(tmp_path)
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "dev", "pulumi", "up")
    assert result.returncode == 0, result.stderr
    assert "dropping an encryptionsalt" in result.stderr
    assert stack_file.read_text() == "config:\n  gpu-tenancy:tenants: []\n"


@pytest.mark.parametrize("kept_by", ["the passphrase file", "the user's passphrase"])
def test_a_salt_that_may_match_the_passphrase_is_kept(tmp_path: Path, kept_by: str) -> None:
    # State reset but the passphrase kept, or a passphrase the user chose: the salt may be theirs,
    # and secure values in the file need it.
    stack_file = stack_file_with_salt(tmp_path)
    before = stack_file.read_text()
    env = {}
    if kept_by == "the passphrase file":
        (tmp_path / "project" / ".pulumi-passphrase").write_text("0" * 64)
    else:
        env["PULUMI_CONFIG_PASSPHRASE"] = "theirs"
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    assert run_env(tmp_path, bin_dir, "dev", "pulumi", "up", **env).returncode == 0
    assert stack_file.read_text() == before


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


def test_existing_refuses_to_create_a_stack(tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path, logged_in=False, stacks=[])
    result = run_env(tmp_path, bin_dir, "--existing", "dev", "pulumi", "destroy")
    assert result.returncode == 2
    assert "no stack 'dev'" in result.stderr and "make up" in result.stderr
    assert "stack init" not in (tmp_path / "pulumi.log").read_text()


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
