"""What is wrong with a file replay cannot read, in the user's terms.

The libraries that read recordings report damage in their own words ("File magic is
invalid.", "unpack requires a buffer of 2 bytes"), and one piece of advice does not fit
every damage: ``mocap4r2 recover`` rebuilds an MCAP file whose recorder died before
closing it, and nothing else. So when a reader fails, the file's own structure is looked
at (its size, its first and last bytes, the sections its header declares) and the
message says which of these it is: an empty file, a file of another kind, a file cut
short (where), with the way to repair it only where there is one. The library's words
follow in brackets, for a bug report.

Pure Python: reads at most a few kilobytes of the file, never the whole of it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import yaml

MCAP_MAGIC = b"\x89MCAP0\r\n"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: the bag files by suffix: the bytes they start with, and what they are called
_KINDS = {
    ".mcap": (MCAP_MAGIC, "an MCAP file"),
    ".db3": (SQLITE_MAGIC, "an SQLite database (a .db3 bag is one)"),
}
C3D_BLOCK = 512
C3D_MAGIC = 0x50  # the second byte of a C3D file
C3D_PROCESSORS = {84: "<", 85: "<", 86: ">"}  # Intel, DEC (little-endian words), MIPS


def _head(path: Path, size: int) -> bytes:
    with path.open("rb") as handle:
        return handle.read(size)


def _tail(path: Path, size: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(max(path.stat().st_size - size, 0))
        return handle.read(size)


def _bytes(data: bytes) -> str:
    return " ".join(f"{b:02x}" for b in data) or "nothing"


def _empty(path: Path) -> str | None:
    if path.is_file() and path.stat().st_size == 0:
        return f"{path} is an empty file (0 bytes): nothing was ever written to it"
    return None


def bag_damage(path: Path, detail: str) -> str:
    """Why the bag at ``path`` (a folder, an .mcap or a .db3) cannot be read; ``detail``
    is the reading library's own message."""
    said = f"(rosbags: {detail})"
    if path.is_dir():
        files = sorted(p.name for p in path.iterdir() if p.suffix in (".mcap", ".db3"))
        if not (path / "metadata.yaml").is_file():
            if any(name.endswith(".mcap") for name in files):
                return (
                    f"{path} has no metadata.yaml: its recorder stopped before finishing the bag; "
                    f"'mocap4r2 recover {path}' rebuilds it from its .mcap {said}"
                )
            return f"{path} is not a rosbag2 bag: it holds no metadata.yaml and no .mcap or .db3 file {said}"
        try:
            yaml.safe_load((path / "metadata.yaml").read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return f"{path}: its metadata.yaml is damaged (not readable YAML) {said}"
        if not files:
            return f"{path} has a metadata.yaml but none of its .mcap or .db3 files {said}"
        for name in files:  # the first damaged file of the bag says what is wrong
            found = _file_damage(path / name, said)
            if found is not None:
                return found
        return f"{path} is a bag folder whose metadata.yaml or files cannot be read {said}"
    found = _file_damage(path, said)
    if found is not None:
        return found
    if path.suffix.lower() in (".mcap", ".db3"):
        return f"{path} is a complete {path.suffix[1:]} file whose records are damaged {said}"
    return f"{path} is not a bag: replay reads a bag folder, an .mcap, a .db3 or a .c3d {said}"


def _file_damage(path: Path, said: str) -> str | None:
    """What is wrong with one .mcap or .db3 file by its first and last bytes; None when
    they are right (or the file is of neither kind)."""
    empty = _empty(path)
    if empty is not None:
        return f"{empty} {said}"
    kind = _KINDS.get(path.suffix.lower())
    if kind is None:
        return None
    magic, what = kind
    head = _head(path, len(magic))
    if head != magic:
        return (
            f"{path} is not {what}: it starts with {_bytes(head[:8])}, not its magic bytes; "
            f"it is another kind of file, or not a recording at all {said}"
        )
    if magic == MCAP_MAGIC and _tail(path, len(MCAP_MAGIC)) != MCAP_MAGIC:
        return (
            f"{path} is an MCAP file cut short (it has no footer: its recorder stopped before "
            f"closing it); 'mocap4r2 recover {path}' rebuilds what it holds {said}"
        )
    return None


def c3d_damage(path: Path, detail: str) -> str:
    """Why the C3D file at ``path`` cannot be read, from the sections its header
    declares (a 512-byte header, the parameter section, the data); ``detail`` is the c3d
    library's own message."""
    said = f"(c3d: {detail})"
    empty = _empty(path)
    if empty is not None:
        return f"{empty} {said}"
    size = path.stat().st_size
    head = _head(path, C3D_BLOCK)
    if len(head) < 2 or head[1] != C3D_MAGIC:
        second = f"{head[1]:#04x}" if len(head) >= 2 else "missing"
        return f"{path} is not a C3D file: its second byte is {second}, a C3D's is {C3D_MAGIC:#04x} {said}"
    if size < C3D_BLOCK:
        return f"{path} is cut short inside its header: {size} of its 512 bytes are there {said}"
    start = (head[0] - 1) * C3D_BLOCK
    if head[0] < 2:
        return f"{path}: its header puts the parameter section at block {head[0]}, inside the header {said}"
    if size <= start:
        return f"{path} is cut short before its parameter section (block {head[0]}, byte {start}) {said}"
    if size < start + 4:
        return (
            f"{path} is cut short inside its parameter section: {size - start} bytes of it are "
            f"there, not even its 4-byte header {said}"
        )
    section = _head(path, start + 4)[start:]
    blocks, processor = section[2], section[3]
    end = start + blocks * C3D_BLOCK
    if size < end:
        return (
            f"{path} is cut short inside its parameter section: {size - start} of its "
            f"{blocks * C3D_BLOCK} bytes are there (the file ends at byte {size}) {said}"
        )
    order = C3D_PROCESSORS.get(processor)
    if order is None:
        return f"{path}: its parameter section names an unknown processor type {processor} {said}"
    (data_block,) = struct.unpack_from(order + "H", head, 16)
    if size < (data_block - 1) * C3D_BLOCK:
        return f"{path} is cut short before its data (block {data_block}): it ends at byte {size} {said}"
    return f"{path} is a C3D file whose parameters or data cannot be read {said}"
