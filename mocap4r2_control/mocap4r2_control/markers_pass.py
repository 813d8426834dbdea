"""The frame's markers of an unchanged Markers message in one compiled pass (numba).

Why: in the usual frame (the same labeled markers as in the previous frame, every one seen
before) FrameEncoder only recomputes the validity rule's numbers (``MarkerRule.reapply``)
and writes them into the previous message (``MarkersEncoder.repeat``). As numpy that is a
dozen calls of 1-3 us each whatever the count, about 13 us per frame for 100 markers
(docs/benchmarks.md); as one scalar loop compiled by numba's ``njit`` it is one call.

The pass does what the numpy path does, byte for byte: a marker is measured when the sum
of its coordinates is finite (the numpy path's row sum ``positions @ (1, 1, 1)``, summed
in the same order) and it is not occluded; a measured marker's position is held, the
others keep their last one; the occlusion flag written is "not measured", the residual
-1 when not measured. It only covers the case where every marker is labeled and has been
seen (the rule's ``all_seen``), with the dtypes a MarkerArrays has (float64 positions,
bool flags, float32 residuals, C-contiguous): anything else takes the numpy path, so no
second version is ever compiled in the middle of streaming.

Where it comes from: :func:`load` decorates the pass with numba's cache (``__pycache__``
next to this file, numba's per-user cache directory or NUMBA_CACHE_DIR) and calls it
once with the types of a frame, so a process after the first loads the machine code
instead of compiling it, and neither happens in a frame. Where numba is missing, cannot
cache (a read-only install without a writable cache directory) or fails to compile,
:func:`load` gives None and says why once in the log: the encoder then keeps the numpy
path, which gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .cdr_layout import Array, Buffer, MarkerFields
from .compiled_kernels import KernelLoader

#: columns of :func:`places`: the float64 index of x, y and z, the byte index of the
#: occlusion flag and the float32 index of the residual of each marker
PLACE_COLUMNS = 5

Pass = Callable[[tuple[Array, Array, Array], Array, Array, Array], None]


def markers_pass(frame: tuple[Array, Array, Array], held: Array, places: Array, data: Array) -> None:
    """One frame's markers into a message: ``frame`` is (positions (n, 3) float64,
    occluded (n,) bool, residuals (n,) float32), ``held`` the rule's last positions (n, 3),
    updated in place, ``places`` the marker fields' indices (:func:`places`) and ``data``
    the message's bytes after the encapsulation header (8-byte aligned)."""
    positions, occluded, residuals = frame
    f64 = data.view(np.float64)
    f32 = data.view(np.float32)
    for i in range(positions.shape[0]):
        x = positions[i, 0]
        y = positions[i, 1]
        z = positions[i, 2]
        total = (x + y) + z
        measured = np.isfinite(total) and not occluded[i]
        if measured:
            held[i, 0] = x
            held[i, 1] = y
            held[i, 2] = z
            data[places[i, 3]] = 0
            f32[places[i, 4]] = residuals[i]
        else:
            data[places[i, 3]] = 1
            f32[places[i, 4]] = np.float32(-1.0)
        f64[places[i, 0]] = held[i, 0]
        f64[places[i, 1]] = held[i, 1]
        f64[places[i, 2]] = held[i, 2]


def places(fields: MarkerFields) -> Array:
    """The (n, 5) int64 indices :func:`markers_pass` writes to, from a message's fields."""
    out = np.empty((fields.positions.shape[0], PLACE_COLUMNS), dtype=np.int64)
    out[:, :3] = fields.positions
    out[:, 3] = fields.occluded
    out[:, 4] = fields.residuals
    return out


def fits(positions: Array, occluded: Array, residuals: Array) -> bool:
    """The arrays have the types and layout the pass was compiled for."""
    return (
        positions.dtype == np.float64
        and occluded.dtype == np.bool_
        and residuals.dtype == np.float32
        and positions.flags.c_contiguous
        and occluded.flags.c_contiguous
        and residuals.flags.c_contiguous
    )


def _warm(compiled: Any) -> Pass:
    """Call the pass once with a frame's types (compiles it, or loads it from the cache)."""
    buf = Buffer(64)
    held = np.zeros((1, 3))
    where = np.array([[0, 1, 2, 24, 7]], dtype=np.int64)
    frame = (np.zeros((1, 3)), np.zeros(1, dtype=bool), np.zeros(1, dtype=np.float32))
    compiled(frame, held, where, buf.u8)
    found: Pass = compiled
    return found


_LOADER = KernelLoader(markers_pass, _warm, "markers")


def load() -> Pass | None:
    """The compiled pass, compiled or loaded from numba's cache on the first call of the
    process (logged once, with the time it took); None where it cannot be had (logged
    once, with why): the caller keeps the numpy path."""
    found: Pass | None = _LOADER.load()
    return found


def load_seconds() -> float:
    """How long :func:`load` took in this process (0 before it ran)."""
    return _LOADER.seconds
