"""The bodies' poses of an unchanged RigidBodies message in one compiled pass (numba).

Why: in the usual frame FrameEncoder's bodies cost, besides their markers (markers_pass.py),
``good_poses`` (which rows are a pose, quaternions normalised), holding the last good
poses and writing validity, poses and mean errors into the previous message: a dozen
numpy calls whatever the count. As one scalar loop compiled by numba's ``njit`` it is
one call.

The pass gives ``good_poses`` + hold + ``RigidBodiesEncoder.restamp``'s numbers byte for
byte, or nothing:

* a row's squared quaternion norm is summed in the order numpy's matrix product sums it
  on this machine: its BLAS kernel pairs the four squares, which pairing depends on the
  CPU's kernel, and a single row is summed another way (on the development machine
  ``(0+2)+(1+3)`` for two rows or more, ``((0+1)+2)+3`` for one). :func:`load` finds
  both orders by comparing the pass with ``good_poses`` itself on probe frames, and gives
  None (numpy then) when no order agrees, so the unit test, the rescaling and the
  degenerate test see numpy's bits;
* finiteness is that of numpy's row sums, which no summation order changes as long as
  no partial sum can overflow: a valid row whose coordinates are all finite and one of
  them beyond 2**500 in magnitude (where an order could matter) makes the pass give up
  the frame before it writes anything, and numpy runs;
* the pass holds the good rows; which keys have been seen is left to the caller
  (``LastGoodValues.hold`` of the held rows onto themselves while some never were).

Loaded like the markers pass (compiled_kernels.KernelLoader: numba's cache, once per process,
when the node is built; None and one warning where numba cannot be had), then checked (about 0.05 s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .cdr_layout import POSE_WIDTH, Array, Buffer
from .compiled_kernels import KernelLoader
from .hold_last import _MIN_SQUARED_NORM, _UNIT_SQUARED_NORM_TOLERANCE, good_poses

#: columns of :func:`places`: the float64 indices of x, y, z, qx, qy, qz, qw, the byte
#: index of tracking_valid and the float32 index of mean_error of each body
PLACE_COLUMNS = POSE_WIDTH + 2
#: a coordinate beyond this may make a row sum overflow in one order and not another
_SAFE = 2.0**500
#: the pairings of the four squares numpy's matrix product may use (see :func:`load`)
ORDERS = ("((0+1)+2)+3", "(0+2)+(1+3)", "(0+1)+(2+3)")

#: (positions (n, 3) float64, orientations (n, 4) float64 x y z w, valid (n,) bool,
#: mean_errors (n,) float32)
Bodies = tuple[Array, Array, Array, Array]
#: (places (n, 9) int64 from :func:`places`, the message's bytes after the encapsulation)
Message = tuple[Array, Array]
Kernel = Callable[[Bodies, Array, Message, Array, int], bool]


def bodies_pass(bodies: Bodies, held: Array, message: Message, good: Array, order: int) -> bool:
    """One frame's bodies into a message: ``held`` the last good poses (n, 7), updated in
    place; ``message`` is (places, data): ``places`` the body fields' indices
    (:func:`places`; a negative mean_error index: none is written, nor ``errors`` read, as
    for a skeleton's segments, whose ``good_poses`` + hold + ``SkeletonsEncoder.repeat``
    this pass also is) and ``data`` the message's bytes after the encapsulation header
    (8-byte aligned); ``good`` (n,) bool, written: the validity published. False, with
    nothing held or written, when the frame must go through numpy. Five positional
    parameters (the places and bytes as one tuple): numba binds no keyword-only ones."""
    positions, orientations, valid, errors = bodies
    places, data = message
    n = positions.shape[0]
    norms = np.empty(n)
    usual = True  # good_poses' "every quaternion unit to rounding"
    for i in range(n):
        s0 = orientations[i, 0] * orientations[i, 0]
        s1 = orientations[i, 1] * orientations[i, 1]
        s2 = orientations[i, 2] * orientations[i, 2]
        s3 = orientations[i, 3] * orientations[i, 3]
        if order == 0:
            norm = ((s0 + s1) + s2) + s3
        elif order == 1:
            norm = (s0 + s2) + (s1 + s3)
        else:
            norm = (s0 + s1) + (s2 + s3)
        norms[i] = norm
        if not abs(norm - 1.0) <= _UNIT_SQUARED_NORM_TOLERANCE:  # NaN is not unit either
            usual = False
    for i in range(n):
        finite = True
        safe = True
        for j in range(7):
            value = positions[i, j] if j < 3 else orientations[i, j - 3]
            if not np.isfinite(value):
                finite = False
            elif abs(value) > _SAFE:
                safe = False
        if not valid[i] or not finite:
            good[i] = False
        elif not safe:
            return False
        else:
            good[i] = usual or norms[i] > _MIN_SQUARED_NORM
    f64 = data.view(np.float64)
    f32 = data.view(np.float32)
    for i in range(n):
        if good[i]:
            held[i, 0] = positions[i, 0]
            held[i, 1] = positions[i, 1]
            held[i, 2] = positions[i, 2]
            norm = norms[i]
            rescale = not usual and abs(norm - 1.0) > _UNIT_SQUARED_NORM_TOLERANCE
            scale = np.sqrt(norm) if rescale else 1.0
            for j in range(4):
                held[i, 3 + j] = orientations[i, j] / scale
            data[places[i, 7]] = 1
            if places[i, 8] >= 0:  # (skeleton segments have no mean error: -1)
                f32[places[i, 8]] = errors[i]
        else:
            data[places[i, 7]] = 0
            if places[i, 8] >= 0:
                f32[places[i, 8]] = np.float32(-1.0)
        for j in range(7):
            f64[places[i, j]] = held[i, j]
    return True


def places(poses: Array, valid: Array, errors: Array | None) -> Array:
    """The (n, 9) int64 indices :func:`bodies_pass` writes to, from a layout's fields
    (``errors`` None: a message without mean errors, a Skeletons message's segments)."""
    out = np.empty((poses.shape[0], PLACE_COLUMNS), dtype=np.int64)
    out[:, :POSE_WIDTH] = poses
    out[:, POSE_WIDTH] = valid
    out[:, POSE_WIDTH + 1] = -1 if errors is None else errors
    return out


#: the mean errors handed to the pass with :func:`places` of ``errors`` None (never read)
NO_ERRORS = np.zeros(0, dtype=np.float32)


def fits(positions: Array, orientations: Array, valid: Array, errors: Array) -> bool:
    """The arrays have the types and layout the pass was compiled for (read-only arrays
    are another type to numba: a second version would be compiled in a frame)."""
    return (
        positions.dtype == np.float64
        and orientations.dtype == np.float64
        and valid.dtype == np.bool_
        and errors.dtype == np.float32
        and positions.flags.c_contiguous
        and orientations.flags.c_contiguous
        and valid.flags.c_contiguous
        and errors.flags.c_contiguous
        and positions.flags.writeable
        and orientations.flags.writeable
        and valid.flags.writeable
        and errors.flags.writeable
    )


@dataclass(frozen=True, slots=True)
class BodiesPass:
    """The compiled pass and the summation orders that give numpy's squared norms here,
    for one body and for more."""

    kernel: Kernel
    single: int
    many: int

    def __call__(self, bodies: Bodies, held: Array, places: Array, data: Array, good: Array) -> bool:
        order = self.single if held.shape[0] == 1 else self.many
        return self.kernel(bodies, held, (places, data), good, order)


#: the probe frames' body counts: one body many times (one frame has few rows to tell
#: the orders apart), then 2 to 64 bodies and a few hundred
SINGLE_COUNTS = (1,) * 300
MANY_COUNTS = (*range(2, 65), 100, 257, 1000)


def _probe(rng: np.random.Generator, n: int, mix: int) -> Bodies:
    """Bodies as adapters send them. ``mix`` 0: unit quaternions (good_poses' usual frame);
    1: every quaternion off unit (from float32, or scaled: rescaled by good_poses, where
    the orders differ most); 2: unit, float32, scaled, zero and NaN quaternions, invalid
    rows."""
    orientations = rng.normal(size=(n, 4))
    orientations /= np.sqrt((orientations * orientations).sum(axis=1))[:, None]
    kind = rng.integers(1, 3, size=n) if mix == 1 else rng.integers(0, 5 if mix == 2 else 1, size=n)
    orientations[kind == 1] = orientations[kind == 1].astype(np.float32)
    orientations[kind == 2] *= rng.uniform(0.5, 2.0, size=(int((kind == 2).sum()), 1))
    orientations[kind == 3] = 0.0
    orientations[kind == 4, 1] = np.nan
    valid = rng.random(n) < (0.9 if mix == 2 else 1.0)
    errors = rng.random(n).astype(np.float32)
    return rng.normal(scale=5.0, size=(n, 3)), orientations, valid, errors


def agrees(compiled: Kernel, order: int, counts: tuple[int, ...], seed: int = 0) -> bool:
    """The pass with ``order`` gives good_poses' validity and poses on probe frames of
    ``counts`` bodies, three mixes each (:func:`_probe`)."""
    rng = np.random.default_rng(seed)
    for n in counts:
        for mix in range(3):
            bodies = _probe(rng, n, mix)
            expected_good, expected = good_poses(bodies[0], bodies[1], bodies[2])
            buf = Buffer(n * PLACE_COLUMNS * 8)
            where = np.arange(n * PLACE_COLUMNS, dtype=np.int64).reshape(n, PLACE_COLUMNS)
            where[:, POSE_WIDTH] *= 8
            where[:, POSE_WIDTH + 1] *= 2
            held, good = np.zeros((n, POSE_WIDTH)), np.empty(n, dtype=bool)
            if not compiled(bodies, held, (where, buf.u8), good, order):
                return False
            if not np.array_equal(good, expected_good):
                return False
            if held[good].tobytes() != expected[expected_good].tobytes():
                return False
    return True


def _order(compiled: Kernel, counts: tuple[int, ...], what: str) -> int:
    for order in range(len(ORDERS)):
        if agrees(compiled, order, counts):
            return order
    raise RuntimeError(f"no summation order of {ORDERS} gives numpy's squared norms of {what} here")


def _prepare(compiled: Kernel) -> BodiesPass:
    single = _order(compiled, SINGLE_COUNTS, "one body")
    return BodiesPass(compiled, single, _order(compiled, MANY_COUNTS, "several bodies"))


_LOADER = KernelLoader(bodies_pass, _prepare, "body poses")


def load() -> BodiesPass | None:
    """The compiled pass with numpy's summation order, compiled or loaded from numba's
    cache and checked against good_poses on the first call of the process (logged once);
    None where it cannot be had (logged once, with why): the caller keeps numpy."""
    found: BodiesPass | None = _LOADER.load()
    return found


def load_seconds() -> float:
    """How long :func:`load` took in this process (0 before it ran)."""
    return _LOADER.seconds
