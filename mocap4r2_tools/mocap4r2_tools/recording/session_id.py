"""A session id arrives from the network (any node may publish a Control request) and
becomes a directory and a file name: it is checked before anything touches the disk."""

from __future__ import annotations

import os
from pathlib import Path

MAX_BYTES = 128


def session_id_problem(session_id: str) -> str | None:
    """Why ``session_id`` cannot name a recording, or None when it can."""
    if not session_id:
        return "the session id is empty (give one, e.g. --session trial-01)"
    try:
        encoded = session_id.encode("utf-8")
    except UnicodeEncodeError:
        return "the session id is not valid UTF-8"
    if len(encoded) > MAX_BYTES:
        return f"the session id is {len(encoded)} bytes long, more than {MAX_BYTES}"
    if "\x00" in session_id:
        return "the session id contains a NUL character"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in session_id):
        return "the session id contains a control character"
    if "/" in session_id or "\\" in session_id:
        return "the session id contains a path separator ('/' or '\\')"
    if ".." in session_id:
        return "the session id contains '..'"
    if session_id in (".",) or session_id.startswith("."):
        return "the session id starts with '.' (a hidden or relative name)"
    if session_id != session_id.strip():
        return "the session id starts or ends with white space"
    return None


def session_dir(output_dir: str | os.PathLike, session_id: str) -> Path:
    """``output_dir/session_id``, after checking the id and that the result is a direct
    child of output_dir (a second line of defence against anything the checks missed)."""
    problem = session_id_problem(session_id)
    if problem:
        raise ValueError(problem)
    base = Path(output_dir).resolve()
    target = (base / session_id).resolve()
    if target.parent != base:
        raise ValueError(f"the session id {session_id!r} would leave the output directory")
    return target
