"""One BLAS thread while a calibration solves.

The refinement's trust-region steps take the SVD of a tall Jacobian (a few thousand rows,
a dozen columns). OpenBLAS splits such a call over all cores; on a machine whose cores
are busy its threads wait for each other, and one SVD of 1213 x 13 took 130-280 ms
measured here at a load of 5-9 on 2 cores, against 0.5 ms on one thread. The solve is
many small calls, which one thread does best anyway, so while it runs the OpenBLAS
libraries numpy and scipy loaded are set to one thread and restored afterwards (the
thread count is process-wide: a solve running beside other numpy work in the process
slows that for its duration, never changes its results).

Without OpenBLAS (another BLAS, or its symbols not found) nothing is changed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# the setter/getter names of the OpenBLAS builds the numpy and scipy wheels carry, and of
# a system OpenBLAS
_NAMES = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
_LIBRARIES: list[tuple[Any, Any]] | None = None


def _openblas() -> list[tuple[Any, Any]]:
    """(set, get) of every OpenBLAS loaded into this process (found once)."""
    global _LIBRARIES
    if _LIBRARIES is None:
        found: list[tuple[Any, Any]] = []
        try:
            with open("/proc/self/maps") as maps:
                paths = {line.split()[-1] for line in maps if "openblas" in line and "/" in line}
        except OSError:  # not Linux
            paths = set()
        for path in sorted(paths):
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            for setter, getter in _NAMES:
                if hasattr(library, setter) and hasattr(library, getter):
                    found.append((getattr(library, setter), getattr(library, getter)))
                    break
        _LIBRARIES = found
    return _LIBRARIES


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """OpenBLAS on one thread inside the block (see the module doc)."""
    import numpy  # noqa: F401  (loads numpy's OpenBLAS before the search)
    import scipy.linalg  # noqa: F401

    libraries = _openblas()
    before = [get() for _, get in libraries]
    for set_threads, _ in libraries:
        set_threads(1)
    try:
        yield
    finally:
        for (set_threads, _), count in zip(libraries, before):
            set_threads(count)
