"""Repair the include paths that the ROS 2 PyPI wheels hard-code in their CMake exports.

The wheels were built under /opt/python/cpXY-cpXY; their exported targets name that
interpreter's include directory and numpy's, which do not exist here, and CMake refuses
targets with missing include directories. We rewrite them to this interpreter's paths.
Idempotent: a second run finds nothing to change.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

import numpy

BUILDER = re.compile(
    r"/opt/python/cp3\d+-cp3\d+/(include/python3\.\d+|lib/python3\.\d+/site-packages/numpy/_core/include)"
)


def replacement(match: re.Match[str]) -> str:
    if match.group(1).startswith("include/"):
        return sysconfig.get_paths()["include"]
    return numpy.get_include()


def main(prefix: str) -> int:
    changed = 0
    for path in Path(prefix, "share").glob("*/cmake/*.cmake"):
        text = path.read_text()
        new = BUILDER.sub(replacement, text)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"[setup] fixed wheel include paths in {changed} CMake files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else sys.prefix))
