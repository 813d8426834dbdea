"""The result of a check, and the table or JSON the doctor prints.

The table is plain text (the standard library only): the doctor is part of the drivers,
which a robot installs without the terminal libraries the `mocap4r2` command uses.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum


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


# ANSI SGR codes of each status, used only when the caller asks for colour
_COLOUR = {
    Status.PASS: "32",  # green
    Status.WARN: "33",  # yellow
    Status.FAIL: "1;31",  # bold red
    Status.INFO: "34",  # blue
    Status.SKIP: "2",  # dim
}
COLUMNS = ("area", "status", "check", "evidence", "fix")
_GAP = "  "
# the narrowest a wrapped column (evidence, fix) is made on a narrow terminal
_MIN_WRAPPED = 20


def as_text(checks: Sequence[Check], *, colour: bool = False, width: int | None = None) -> str:
    """The table the doctor prints: a title, then one row per check in aligned columns
    (area, status, check, evidence, fix).

    ``width`` None (a file or a pipe) keeps each check on one line, for grep; a terminal's
    width wraps the evidence and the fix inside their columns. ``colour`` wraps each status
    in its ANSI colour (the caller decides: a terminal, and NO_COLOR not set)."""
    rows = [(c.area, c.status.value, c.title, c.evidence, c.fix or "-") for c in checks]
    widths = [
        max([len(name), *(max(map(len, row[i].splitlines() or [""])) for row in rows)])
        for i, name in enumerate(COLUMNS)
    ]
    if width is not None:
        fixed = sum(widths[:3]) + len(_GAP) * (len(COLUMNS) - 1)
        room = max(width - fixed, 2 * _MIN_WRAPPED)
        # the fix gets up to a third of what is left, the evidence the rest
        widths[4] = min(widths[4], max(_MIN_WRAPPED, room // 3))
        widths[3] = min(widths[3], max(_MIN_WRAPPED, room - widths[4]))
    lines = ["mocap4r2 doctor", _line(COLUMNS, widths), _line(["-" * w for w in widths], widths)]
    for row, check in zip(rows, checks, strict=True):
        cells = [
            _wrap(text, w) if width is not None else text.splitlines() or [""]
            for text, w in zip(row, widths, strict=True)
        ]
        for k in range(max(map(len, cells))):
            parts = [cell[k] if k < len(cell) else "" for cell in cells]
            painted = _COLOUR[check.status] if colour and k == 0 else None
            lines.append(_line(parts, widths, painted))
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` (its own line breaks kept; a word longer than
    the column is cut, as a terminal would)."""
    out: list[str] = []
    for paragraph in text.splitlines() or [""]:
        out += textwrap.wrap(paragraph, width) or [""]
    return out


def _line(parts: Sequence[str], widths: Sequence[int], status_colour: str | None = None) -> str:
    """One line of the table: each part padded to its column (the last not padded), the
    status in ``status_colour`` (an ANSI SGR code) when one is given."""
    cells = [part.ljust(w) for part, w in zip(parts, widths, strict=True)]
    if status_colour is not None:
        status = parts[1]
        cells[1] = f"\x1b[{status_colour}m{status}\x1b[0m" + " " * (widths[1] - len(status))
    return _GAP.join(cells).rstrip()


def as_json(checks: Sequence[Check]) -> str:
    """One JSON object: every check, and the counts per status."""
    counts = {s.value: sum(1 for c in checks if c.status is s) for s in Status}
    rows = [{**asdict(c), "status": c.status.value} for c in checks]
    return json.dumps({"checks": rows, "counts": counts, "ok": exit_code(checks) == 0}, indent=2)
