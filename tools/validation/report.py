"""Results, the pass/fail table and the report files (plain text, Markdown or JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

PASS = "PASS"
FAIL = "FAIL"
SKIP = "SKIP"
MANAGEMENT = "-"  # the tenant column of checks about the management cluster itself


@dataclass(frozen=True)
class Result:
    """One row: a check on one tenant (or on the management cluster)."""

    check: str
    tenant: str
    status: str
    detail: str
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def with_problem(self, problem: str) -> Result:
        """This result failed by ``problem`` too (e.g. it could not clean up)."""
        detail = f"{self.detail}; {problem}" if self.detail else problem
        return replace(self, status=FAIL, detail=detail)


def passed(check: str, tenant: str, detail: str) -> Result:
    return Result(check, tenant, PASS, detail)


def failed(check: str, tenant: str, detail: str) -> Result:
    return Result(check, tenant, FAIL, detail)


def skipped(check: str, tenant: str, detail: str) -> Result:
    return Result(check, tenant, SKIP, detail)


def exit_code(results: Sequence[Result]) -> int:
    """0 when nothing failed (skips included), 1 otherwise."""
    return 1 if any(result.failed for result in results) else 0


def summary(results: Sequence[Result]) -> str:
    counts = {status: sum(1 for r in results if r.status == status) for status in (PASS, FAIL, SKIP)}
    verdict = "FAILED" if counts[FAIL] else "PASSED"
    return f"{verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"


HEADER = ("CHECK", "TENANT", "RESULT", "DETAIL")


def _rows(results: Sequence[Result]) -> list[tuple[str, str, str, str]]:
    return [(r.check, r.tenant, r.status, r.detail) for r in results]


def table(results: Sequence[Result]) -> str:
    """Aligned columns, one row per check and tenant, then the summary line."""
    rows = [HEADER, *_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join([*(row[i].ljust(widths[i]) for i in range(3)), row[3]]).rstrip() for row in rows]
    return "\n".join([*lines, "", summary(results)])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(results: Sequence[Result], stack: str) -> str:
    lines = [
        f"## Validation of stack `{stack}`",
        "",
        "| Check | Tenant | Result | Detail |",
        "|---|---|---|---|",
        *(f"| {_cell(c)} | {_cell(t)} | {s} | {_cell(d)} |" for c, t, s, d in _rows(results)),
        "",
        f"**{summary(results)}**",
    ]
    return "\n".join(lines) + "\n"


def as_json(results: Sequence[Result], stack: str, run_id: str) -> str:
    document = {
        "stack": stack,
        "runId": run_id,
        "passed": exit_code(results) == 0,
        "summary": summary(results),
        "results": [
            {"check": r.check, "tenant": r.tenant, "status": r.status, "detail": r.detail, "seconds": round(r.seconds, 1)}
            for r in results
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def write_report(path: Path, results: Sequence[Result], stack: str, run_id: str) -> None:
    """``.json`` → JSON, ``.md`` → Markdown, anything else → the plain table."""
    if path.suffix == ".json":
        text = as_json(results, stack, run_id)
    elif path.suffix == ".md":
        text = markdown(results, stack)
    else:
        text = table(results) + "\n"
    path.write_text(text)
