"""The validity rule of mocap4r2_interfaces, applied once for every system.

A body (segment, marker) that is not tracked in a frame is published with its last
good value and ``tracking_valid: false`` (``occluded: true``), never zeros or NaN.
Values are remembered per stable key (an id from the mocap system), so the rule holds
when entries appear, disappear or change order between frames.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .geometry import MIN_QUATERNION_NORM

# keys come as the vendor sends them (int32, uint16, ...); they are compared as int64
Array = npt.NDArray[Any]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
KeyArray = npt.NDArray[np.int64]


class LastGoodValues:
    """Per-key memory of the last good row of a (n, width) array.

    ``update(keys, values, good)`` stores the good rows and returns (values, seen):
    every row holds the newest good value of its key, and ``seen`` says whether the
    key ever had one (rows never seen hold ``initial``).
    """

    def __init__(self, width: int, initial: Array | None = None) -> None:
        self.width = width
        self.initial: FloatArray = np.zeros(width) if initial is None else np.asarray(initial, dtype=float)
        self.keys: KeyArray = np.zeros(0, dtype=np.int64)
        self._key_bytes = b""  # the keys as bytes: comparing them is the per-frame check
        self.values: FloatArray = np.zeros((0, width))
        self.seen: BoolArray = np.zeros(0, dtype=bool)
        # once every key has been seen, ``seen`` cannot change until the keys do: the
        # per-frame update then skips it (the common case while a system streams)
        self._all_seen = True
        self._archive: dict[int, FloatArray] = {}

    # keys remembered after they vanished (bounded: unlabeled ids may be transient)
    max_archived = 100_000

    def update(self, keys: Array, values: Array, good: BoolArray) -> tuple[FloatArray, BoolArray]:
        # per frame: one bytes comparison of the keys as given (they rarely change while a
        # system streams); the dtype is part of it, so equal bytes of another type count
        # as a change, and only a change converts them
        key_bytes = keys.dtype.char.encode() + keys.tobytes()
        if key_bytes != self._key_bytes:
            self._remap(keys.astype(np.int64, copy=False))
            self._key_bytes = key_bytes
        return self.hold(values, good), self.seen

    def hold(self, values: Array, good: BoolArray) -> FloatArray:
        """``update`` for the keys of the last update (the caller knows they are the
        same): the rows held, without comparing the keys again."""
        # one masked copy, no temporaries (values[good] = values[good] costs three times as much)
        np.copyto(self.values, values, where=good[:, None])
        if not self._all_seen:
            self.seen |= good
            self._all_seen = bool(self.seen.all())
        return self.values

    @property
    def all_seen(self) -> bool:
        """Every key of the latest update has had a good value."""
        return self._all_seen

    def _remap(self, keys: KeyArray) -> None:
        # the set or order of keys changed (an asset appeared or vanished): file what is
        # known under its key, so a body that vanishes for a while keeps its last pose
        for key, value, seen in zip(self.keys.tolist(), self.values, self.seen.tolist()):
            if seen:
                self._archive[key] = value.copy()
        if len(self._archive) > self.max_archived:
            for key in list(self._archive)[: len(self._archive) - self.max_archived]:
                del self._archive[key]
        values = np.tile(self.initial, (keys.shape[0], 1))
        seen = np.zeros(keys.shape[0], dtype=bool)
        for row, key in enumerate(keys.tolist()):
            known = self._archive.get(key)
            if known is not None:
                values[row] = known
                seen[row] = True
        self.keys = np.array(keys, dtype=np.int64, copy=True)
        self.values = values
        self.seen = seen
        self._all_seen = bool(seen.all())


IDENTITY_POSE = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])


def good_poses(positions: Array, orientations: Array, valid: BoolArray) -> tuple[BoolArray, FloatArray]:
    """Rows usable as a pose: flagged valid, finite, with a non-degenerate quaternion.

    Returns (good mask, poses as (n, 7) with normalised quaternions)."""
    # This runs for bodies and segments every frame, on a few rows: the cost is the
    # number of numpy calls, so each check is folded into as few as possible. Row sums go
    # through a matrix product: numpy's axis reductions over 7 columns cost several times
    # more per call.
    n = positions.shape[0]
    poses = np.empty((n, 7))
    poses[:, :3] = positions
    quaternions = poses[:, 3:]
    quaternions[...] = orientations
    squared_norms = (quaternions * quaternions) @ _ONES4
    # The usual frame: every quaternion is unit to rounding (NaN and inf fail the
    # comparison), so none is rescaled and only the positions remain to check. A
    # quaternion already unit is left as it is: its computed norm is 1 give or take an
    # ulp, and dividing by it would move the last bit, so a pose published, recorded and
    # published again (replay) would not be the same bytes.
    off_unit = np.abs(squared_norms - 1.0)
    if (off_unit <= _UNIT_SQUARED_NORM_TOLERANCE).all():
        return valid & np.isfinite(poses @ _ONES7), poses
    # A row is finite when its sum is (inf - inf is NaN), and the squared norm is NaN or
    # inf when a component is NaN or too large to square, so one row sum of the pose plus
    # the squared norm covers position and quaternion.
    good = valid & np.isfinite(poses @ _ONES7 + squared_norms) & (squared_norms > _MIN_SQUARED_NORM)
    # rows that are not good are never used: dividing them by 1 too avoids warnings cheaply
    rescale = good & (off_unit > _UNIT_SQUARED_NORM_TOLERANCE)
    quaternions /= np.sqrt(np.where(rescale, squared_norms, 1.0))[:, None]
    return good, poses


_ONES4 = np.ones(4)
_ONES7 = np.ones(7)
_MIN_SQUARED_NORM = MIN_QUATERNION_NORM**2
#: |q|^2 - 1 of a quaternion normalised in float64 stays within a few machine epsilons
_UNIT_SQUARED_NORM_TOLERANCE = 4 * float(np.finfo(np.float64).eps)


class SubKeys:
    """sub_keys() for the latest (owner ids, offsets), recomputed only when they change
    (they rarely do: the assets of a mocap system are fixed while it streams)."""

    def __init__(self) -> None:
        self._source = (b"", b"")
        self._keys: KeyArray = np.zeros(0, dtype=np.int64)

    def __call__(self, owner_ids: Array, offsets: Array) -> KeyArray:
        source = (
            owner_ids.astype(np.int64, copy=False).tobytes(),
            offsets.astype(np.int64, copy=False).tobytes(),
        )
        if source != self._source:
            self._keys = sub_keys(owner_ids, offsets)
            self._source = source
        return self._keys


def sub_keys(owner_ids: Array, offsets: Array) -> KeyArray:
    """Stable keys for nested rows (a body's markers, a skeleton's segments) from the
    owner's id and the row's index within its owner."""
    counts = np.diff(offsets)
    owners = np.repeat(owner_ids.astype(np.int64), counts)
    index = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], counts)
    keys: KeyArray = (owners << 20) + index
    return keys
