"""A timed pose sequence (numpy arrays) and the validation every evaluation relies on.

Quaternions are ``x, y, z, w`` rows (geometry_msgs order), positions in metres,
stamps in seconds. A :class:`Trajectory` is immutable once built: every operation
returns a new one, so an association or alignment never changes its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import FloatArray, row_norms


class TrajectoryInputError(ValueError):
    """Input that cannot be evaluated (wrong shapes, NaN, unsorted stamps, ...), with the reason."""


@dataclass(frozen=True, eq=False)
class Trajectory:
    """Stamped poses of one body (see the module doc); build it with :meth:`build`."""

    stamps: FloatArray  # (n,) seconds, increasing (a recorded file may repeat one: from_recorded)
    positions: FloatArray  # (n, 3) metres
    orientations: FloatArray  # (n, 4) unit quaternions x, y, z, w
    name: str = ""
    notes: tuple[str, ...] = ()  # what a reader changed or tolerated, for the user to see

    @classmethod
    def build(
        cls,
        stamps: npt.ArrayLike,
        positions: npt.ArrayLike,
        orientations: npt.ArrayLike | None = None,
        name: str = "",
        require_sorted: bool = True,
    ) -> Trajectory:
        """Validated trajectory; orientations default to identity and are normalised.

        With ``require_sorted`` (the default) unsorted or duplicate stamps are refused with
        the offending rows named; a reader whose sources may arrive out of order sorts first
        with :meth:`sorted_by_time`.
        """
        label = f"{name}: " if name else ""
        stamps = np.asarray(stamps, dtype=np.float64).reshape(-1)
        positions = np.asarray(positions, dtype=np.float64)
        n = stamps.shape[0]
        if positions.shape != (n, 3):
            raise TrajectoryInputError(f"{label}positions have shape {positions.shape}, expected ({n}, 3)")
        if orientations is None:
            orientations = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
        orientations = np.asarray(orientations, dtype=np.float64)
        if orientations.shape != (n, 4):
            raise TrajectoryInputError(
                f"{label}orientations have shape {orientations.shape}, expected ({n}, 4)"
            )
        for what, values in (("stamps", stamps), ("positions", positions), ("orientations", orientations)):
            bad = ~np.isfinite(values)
            if bad.any():
                row = int(np.flatnonzero(bad.reshape(n, -1).any(axis=1))[0])
                raise TrajectoryInputError(f"{label}{what} of row {row} are not finite")
        norms = row_norms(orientations)
        if n and norms.min() < 1e-6:
            row = int(np.argmin(norms))
            raise TrajectoryInputError(f"{label}orientation of row {row} is not a rotation (zero quaternion)")
        orientations = orientations / norms[:, None] if n else orientations
        if require_sorted:
            _check_increasing(stamps, label)
        return cls(stamps, positions, orientations, name)

    @classmethod
    def sorted_by_time(
        cls,
        stamps: npt.ArrayLike,
        positions: npt.ArrayLike,
        orientations: npt.ArrayLike | None = None,
        name: str = "",
    ) -> Trajectory:
        """Built after a stable sort by stamp; duplicate stamps are still refused."""
        stamps = np.asarray(stamps, dtype=np.float64).reshape(-1)
        order = np.argsort(stamps, kind="stable")
        positions = np.asarray(positions, dtype=np.float64)[order]
        if orientations is not None:
            orientations = np.asarray(orientations, dtype=np.float64)[order]
        return cls.build(stamps[order], positions, orientations, name)

    @classmethod
    def from_recorded(
        cls,
        stamps: npt.ArrayLike,
        positions: npt.ArrayLike,
        orientations: npt.ArrayLike | None = None,
        name: str = "",
    ) -> Trajectory:
        """A trajectory as a dataset ships it: rows out of time order are sorted (stable),
        repeated stamps are kept, and ``notes`` says what was found.

        Repeated stamps are kept because that is what evo (the usual reference) does: it
        reads every row and associates each on its own, so keeping them gives the same
        pairs and the same ATE. Each row stays a separate pose; nothing is averaged.
        """
        label = f"{name}: " if name else ""
        stamps = np.asarray(stamps, dtype=np.float64).reshape(-1)
        positions = np.asarray(positions, dtype=np.float64)
        notes: list[str] = []
        steps = np.diff(stamps)
        back = np.flatnonzero(steps < 0.0)
        if back.size:
            row = int(back[0]) + 1
            notes.append(
                f"{label}{back.size} rows are earlier than the row before them (first: row {row}, "
                f"{stamps[row]:.9f} s following {stamps[row - 1]:.9f} s); rows reordered by stamp"
            )
            order = np.argsort(stamps, kind="stable")
            if positions.shape[:1] == stamps.shape:  # else build() names the wrong shape
                positions = positions[order]
            if orientations is not None:
                rows = np.asarray(orientations, dtype=np.float64)
                if rows.shape[:1] == stamps.shape:  # else build() names the wrong shape
                    orientations = rows[order]
            stamps = stamps[order]
        same = np.flatnonzero(np.diff(stamps) == 0.0)
        if same.size:
            row = int(same[0])
            notes.append(
                f"{label}{same.size} duplicate stamp{'s' if same.size > 1 else ''} (first: "
                f"duplicate stamp {stamps[row]:.9f} s at rows {row} and {row + 1} after sorting); "
                "kept, each row associated on its own as evo does"
            )
        traj = cls.build(stamps, positions, orientations, name, require_sorted=False)
        return cls(traj.stamps, traj.positions, traj.orientations, name, tuple(notes))

    def __len__(self) -> int:
        return int(self.stamps.shape[0])

    def take(self, rows: npt.NDArray[np.integer[Any]] | npt.NDArray[np.bool_] | slice) -> Trajectory:
        """Rows ``rows`` (index array, slice or mask); stamps may then repeat, which is fine
        for an associated copy but never for an input.

        Consecutive index rows (every pose paired, the usual case of two streams at one
        rate) are taken as a slice: views instead of three gathered copies, about a
        quarter of an ATE on 100 k pairs. Nothing writes into a Trajectory's arrays, so
        sharing them with the input is safe."""
        if isinstance(rows, np.ndarray) and rows.dtype.kind in "iu" and _is_run(rows):
            rows = slice(int(rows[0]), int(rows[0]) + rows.shape[0])
        return Trajectory(self.stamps[rows], self.positions[rows], self.orientations[rows], self.name)

    def with_stamps(self, stamps: FloatArray) -> Trajectory:
        return Trajectory(np.asarray(stamps, dtype=np.float64), self.positions, self.orientations, self.name)

    @property
    def duration(self) -> float:
        return float(self.stamps[-1] - self.stamps[0]) if len(self) else 0.0


def _is_run(rows: npt.NDArray[Any]) -> bool:
    """Whether ``rows`` is first, first + 1, ..., first + n - 1 (n >= 1, no negatives)."""
    n = rows.shape[0]
    if rows.ndim != 1 or n == 0 or rows[0] < 0 or int(rows[-1]) - int(rows[0]) != n - 1:
        return False
    return bool(n == 1 or np.all(np.diff(rows) == 1))


def _check_increasing(stamps: FloatArray, label: str) -> None:
    if stamps.shape[0] < 2:
        return
    steps = np.diff(stamps)
    bad = np.flatnonzero(steps <= 0.0)
    if bad.size == 0:
        return
    row = int(bad[0])
    if steps[row] == 0.0:
        raise TrajectoryInputError(
            f"{label}duplicate stamp {stamps[row]:.9f} s at rows {row} and {row + 1} "
            f"({bad.size} non-increasing steps in all)"
        )
    raise TrajectoryInputError(
        f"{label}stamps are not sorted: row {row + 1} ({stamps[row + 1]:.9f} s) is earlier than "
        f"row {row} ({stamps[row]:.9f} s) ({bad.size} non-increasing steps in all)"
    )
