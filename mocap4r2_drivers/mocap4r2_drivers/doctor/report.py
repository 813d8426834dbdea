"""The result of a check, and the table or JSON the doctor prints."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum

from rich.table import Table


class Status(StrEnum):
    """PASS: checked, and it works. WARN: works now but is fragile. FAIL: no data.
    INFO: shown for the reader, nothing to judge (the RMW in use, loopback's link).
    SKIP: could not be checked here (the evidence says why); never counted as a PASS."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    INFO = "INFO"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Check:
    """One finding: what was checked, what was seen, and what to do about it."""

    status: Status
    title: str
    evidence: str
    fix: str = ""
    area: str = ""


def passed(title: str, evidence: str, area: str = "") -> Check:
    """It works, and this is what shows it."""
    return Check(Status.PASS, title, evidence, "", area)


def warned(title: str, evidence: str, fix: str, area: str = "") -> Check:
    """It works now but is fragile, or it cannot be told from here."""
    return Check(Status.WARN, title, evidence, fix, area)


def failed(title: str, evidence: str, fix: str, area: str = "") -> Check:
    """Data will not flow until the fix is applied."""
    return Check(Status.FAIL, title, evidence, fix, area)


def noted(title: str, evidence: str, area: str = "") -> Check:
    """Worth showing, but nothing was judged: no PASS where nothing was checked."""
    return Check(Status.INFO, title, evidence, "", area)


def skipped(title: str, why: str, fix: str = "", area: str = "") -> Check:
    """It could not be checked here; ``why`` says what was missing."""
    return Check(Status.SKIP, title, why, fix, area)


def exit_code(checks: Sequence[Check]) -> int:
    """1 when any check failed, else 0."""
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


_STYLE = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.INFO: "blue",
    Status.SKIP: "dim",
}


def as_table(checks: Sequence[Check]) -> Table:
    """A rich table: area, status, check, evidence, fix."""
    table = Table(title="mocap4r2 doctor", header_style="bold", show_lines=True)
    for column in ("area", "status", "check", "evidence", "fix"):
        table.add_column(column, overflow="fold")
    for c in checks:
        style = _STYLE[c.status]
        table.add_row(c.area, f"[{style}]{c.status.value}[/]", c.title, c.evidence, c.fix or "-")
    return table


def as_json(checks: Sequence[Check]) -> str:
    """One JSON object: every check, and the counts per status."""
    counts = {s.value: sum(1 for c in checks if c.status is s) for s in Status}
    rows = [{**asdict(c), "status": c.status.value} for c in checks]
    return json.dumps({"checks": rows, "counts": counts, "ok": exit_code(checks) == 0}, indent=2)
