"""ros2msg schemas with their dependencies, from the installed ``.msg`` files.

rosbag2's MCAP storage stores each type as the text of its ``.msg`` file followed by
the text of every message type it uses, each introduced by a line of 80 ``=`` and a
``MSG: package/Name`` line. ``ros2 bag play``, Foxglove and rosbags decode a bag from
these texts alone, without the message packages installed.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

SEPARATOR = "=" * 80
PRIMITIVES = frozenset(
    {
        "bool",
        "byte",
        "char",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "string",
        "wstring",
    }
)
_BOUND = re.compile(r"<=\d+$")


class SchemaError(LookupError):
    """A message type whose definition cannot be found, so its schema cannot be written into the bag."""

    pass


def split_type(type_name: str) -> tuple[str, str]:
    """'pkg/msg/Name' or 'pkg/Name' -> ('pkg', 'Name')."""
    parts = type_name.split("/")
    if len(parts) == 3 and parts[1] == "msg":
        return parts[0], parts[2]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise SchemaError(f"{type_name!r} is not a message type name (package/msg/Name)")


def share_msg_finder(prefixes: list[str] | None = None) -> Callable[[str, str], str]:
    """A function (package, Name) -> the text of share/<package>/msg/<Name>.msg, looked
    up in the ament prefixes (AMENT_PREFIX_PATH), then in the interpreter's prefix (ROS 2
    from Python wheels installs its share/ there without registering it with ament)."""
    if prefixes is None:
        prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
        prefixes += [p for p in (sys.prefix, sys.base_prefix) if p not in prefixes]

    def find(package: str, name: str) -> str:
        for prefix in prefixes:
            path = Path(prefix) / "share" / package / "msg" / f"{name}.msg"
            if path.is_file():
                return path.read_text()
        raise SchemaError(f"no {package}/msg/{name}.msg under {prefixes or 'AMENT_PREFIX_PATH (empty)'}")

    return find


def _field_types(text: str, package: str) -> list[tuple[str, str]]:
    """The non-primitive field types of a .msg text as (package, Name)."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) < 2 or "=" in parts[1] or "=" in parts[0]:
            continue  # a constant: always primitive
        base = _BOUND.sub("", parts[0].split("[", 1)[0])
        if base in PRIMITIVES:
            continue
        if base == "Header":
            found.append(("std_msgs", "Header"))
        elif "/" in base:
            found.append(split_type(base))
        else:
            found.append((package, base))
    return found


def ros2msg_schema(type_name: str, find: Callable[[str, str], str]) -> str:
    """The ros2msg text of ``type_name`` with every dependency, each once, depth first."""
    package, name = split_type(type_name)
    main = find(package, name)
    parts = [main.rstrip("\n")]
    seen = {(package, name)}
    pending = list(reversed(_field_types(main, package)))
    while pending:
        dep = pending.pop()
        if dep in seen:
            continue
        seen.add(dep)
        text = find(*dep)
        parts.append(f"{SEPARATOR}\nMSG: {dep[0]}/{dep[1]}\n{text.rstrip(chr(10))}")
        pending.extend(reversed(_field_types(text, dep[0])))
    return "\n".join(parts) + "\n"
