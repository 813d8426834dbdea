"""The two pose streams of a calibration, cleaned, and the pose pairs taken from them.

A stream is what a reader gives (a TUM file, a bag topic, a recorded session's body):
rows that are not poses (NaN, a zero quaternion, an untracked body) are left out and
counted, never guessed. Pairs are made by the trajectory tools' interpolating
association: stream B's stamps, moved by the time offset into A's clock, with A
interpolated there (positions linearly, orientations by slerp), and only where an A pose
lies within ``max_gap`` of the stamp, so a tracking gap is never bridged.

Time base, as in :mod:`mocap4r2_tools.trajectory.association`: B's stamp ``t`` is A's
time ``t + offset``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mocap4r2_control.geometry import MIN_QUATERNION_NORM, Transform
from mocap4r2_control.rotation import FloatArray, row_norms

from ..trajectory.association import associate, interpolate
from ..trajectory.poses import Trajectory
from .errors import CalibrationError


@dataclass(frozen=True, eq=False)
class Stream:
    """A cleaned pose stream and how many rows were left out of it."""

    trajectory: Trajectory
    dropped: int  # rows that were NaN, not a rotation or marked untracked
    total: int  # rows given

    @property
    def name(self) -> str:
        return self.trajectory.name

    def poses(self) -> Transform:
        return Transform(self.trajectory.positions, self.trajectory.orientations)


def clean_stream(
    stamps: npt.ArrayLike,
    positions: npt.ArrayLike,
    orientations: npt.ArrayLike,
    name: str,
    tracked: npt.ArrayLike | None = None,
) -> Stream:
    """The usable rows as a trajectory (sorted by stamp), and the count of rows left out:
    a non-finite stamp, position or quaternion, a quaternion too short to be a rotation,
    or ``tracked`` false."""
    stamps = np.asarray(stamps, dtype=np.float64).reshape(-1)
    positions = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
    orientations = np.asarray(orientations, dtype=np.float64).reshape(-1, 4)
    n = stamps.shape[0]
    if positions.shape[0] != n or orientations.shape[0] != n:
        raise CalibrationError(
            f"{name}: {n} stamps, {positions.shape[0]} positions and {orientations.shape[0]} orientations"
        )
    with np.errstate(invalid="ignore"):
        norms = row_norms(np.nan_to_num(orientations, nan=0.0, posinf=0.0, neginf=0.0))
    ok = (
        np.isfinite(stamps)
        & np.isfinite(positions).all(axis=1)
        & np.isfinite(orientations).all(axis=1)
        & (norms > MIN_QUATERNION_NORM)
    )
    if tracked is not None:
        ok &= np.asarray(tracked, dtype=bool).reshape(-1)
    if not ok.any():
        raise CalibrationError(f"{name}: none of its {n} poses is usable (NaN, zero quaternion or untracked)")
    traj = Trajectory.from_recorded(stamps[ok], positions[ok], orientations[ok], name=name)
    return Stream(traj, int(n - ok.sum()), n)


def from_trajectory(traj: Trajectory) -> Stream:
    """A reader's trajectory (already free of NaN rows) as a stream."""
    return Stream(traj, 0, len(traj))


@dataclass(frozen=True, eq=False)
class PairSet:
    """B's poses and stamps (B's own clock) of the pairs, and A's poses at those stamps
    moved by ``offset``."""

    stamps: FloatArray  # (n,) B's stamps, s
    a: Transform
    b: Transform
    offset: float

    def __len__(self) -> int:
        return int(self.stamps.shape[0])

    def take(self, rows: npt.ArrayLike) -> PairSet:
        rows = np.asarray(rows)
        return PairSet(self.stamps[rows], self.a.take(rows), self.b.take(rows), self.offset)


def overlap(a: Trajectory, b: Trajectory, offset: float) -> float:
    """Seconds both streams span, with B moved by ``offset`` (negative: a gap between)."""
    return float(min(a.stamps[-1], b.stamps[-1] + offset) - max(a.stamps[0], b.stamps[0] + offset))


def check_overlap(a: Trajectory, b: Trajectory, offset: float) -> None:
    """CalibrationError naming both time spans when the streams do not overlap."""
    if overlap(a, b, offset) <= 0.0:
        raise CalibrationError(
            f"the streams do not overlap in time: {a.name or 'A'} spans "
            f"[{a.stamps[0]:.3f}, {a.stamps[-1]:.3f}] s, "
            f"{b.name or 'B'} [{b.stamps[0] + offset:.3f}, {b.stamps[-1] + offset:.3f}] s (stamps + offset "
            f"{offset:+.3f} s). Record both during the same motion, or give the offset between their clocks"
        )


def median_step(stamps: FloatArray) -> float:
    """The median step between increasing stamps (0 for fewer than two)."""
    steps = np.diff(stamps)
    steps = steps[steps > 0]
    return float(np.median(steps)) if steps.size else 0.0


def make_pairs(a: Trajectory, b: Trajectory, offset: float, max_gap: float, max_pairs: int) -> PairSet:
    """Pairs at B's stamps (at most ``max_pairs``, evenly spread over the recording)."""
    check_overlap(a, b, offset)
    found = associate(a, b, max_diff=max_gap, offset=offset, method="interpolate")
    rows: npt.NDArray[np.intp] = np.arange(len(found))
    if rows.size > max_pairs:
        rows = np.unique(np.linspace(0, rows.size - 1, max_pairs).round().astype(np.intp))
    stamps = found.est.stamps[rows] - offset
    a_poses = Transform(found.gt.positions[rows], found.gt.orientations[rows])
    b_poses = Transform(found.est.positions[rows], found.est.orientations[rows])
    return PairSet(stamps, a_poses, b_poses, offset)


def a_at(a: Trajectory, stamps: FloatArray, offset: float) -> Transform:
    """A's poses at B's ``stamps`` moved by ``offset`` (interpolated as the association does)."""
    found = interpolate(a, stamps + offset)
    return Transform(found.positions, found.orientations)
