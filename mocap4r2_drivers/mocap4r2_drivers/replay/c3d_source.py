"""C3D files as a replay source (``c3d``): labeled points as markers (id = label index),
negative residuals occluded, ``POINT:UNITS`` to metres, the vertical axis from ``up_axis``
(``POINT:X_SCREEN``/``Y_SCREEN`` are reported, not trusted: vendors set them
inconsistently), rigid bodies fitted to the markers named in ``bodies`` with the shared
Kabsch fit, analog channels counted and ignored. The file is read whole at open, within
a budget, so a configure fails with the reason and playing never touches the disk."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mocap4r2_control.frame import AssetNames, BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.geometry import AxisChange
from mocap4r2_control.rotation import quat_rotate

from ..common import stable_id
from ..emulation import fit_pose
from .damage import c3d_damage
from .source import ReplayFileError, ReplaySource, SourceInfo, TimedFrame

#: C3D files are read whole at configure: a budget for the points (float64 values)
MAX_C3D_VALUES = 200_000_000
UP_AXES = {"z": "+Z", "-z": "-Z", "y": "+Y", "-y": "-Y", "x": "+X", "-x": "-X"}
_UNIT_SCALE = {"mm": 1e-3, "cm": 1e-2, "m": 1.0, "dm": 0.1}


def _parameter(reader: Any, name: str) -> Any:
    try:
        return reader.get(name)
    except Exception:  # noqa: BLE001 - the c3d library raises KeyError or returns None by version
        return None


class C3DSource(ReplaySource):
    """A C3D file, read whole at open: markers from the labeled points, fitted bodies."""

    def __init__(self, path: Path, up_axis: str, bodies: Mapping[str, Sequence[str]]) -> None:
        self.path = path
        key = up_axis.strip().lower()
        if key not in UP_AXES:
            raise ReplayFileError(f"up_axis must be one of {sorted(UP_AXES)}, got {up_axis!r}")
        self.axes = AxisChange(UP_AXES[key])
        try:
            self._read(path)
        except ReplayFileError:
            raise
        except Exception as exc:  # noqa: BLE001 - the c3d library raises many kinds on damage
            raise ReplayFileError(c3d_damage(path, f"{type(exc).__name__}: {exc}")) from None
        self._fit_bodies(bodies)

    def _read(self, path: Path) -> None:
        import c3d

        with open(path, "rb") as handle, warnings.catch_warnings():
            # the library warns about absent analog data: analog channels are only counted
            warnings.simplefilter("ignore", UserWarning)
            reader = c3d.Reader(handle)
            n = int(reader.point_used)
            first, last = int(reader.first_frame), int(reader.last_frame)
            count = last - first + 1
            if n <= 0:
                raise ReplayFileError(f"{path} holds no points (POINT:USED is {n})")
            if count <= 0 or count * n * 3 > MAX_C3D_VALUES:
                raise ReplayFileError(f"{path}: {count} frames of {n} points is outside what replay reads")
            rate = float(reader.point_rate)
            if not (math.isfinite(rate) and rate > 0):
                raise ReplayFileError(f"{path}: POINT:RATE is {rate}, not a frame rate")
            raw_labels = reader.point_labels
            labels = [str(s).strip() for s in (raw_labels if raw_labels is not None else [])][:n]
            labels += [f"point_{i}" for i in range(len(labels), n)]
            units_param = _parameter(reader, "POINT:UNITS")
            # some exporters write one unit per point ("mm  mm  mm ..."): the first counts
            units = (units_param.string_value.split() or ["mm"])[0] if units_param is not None else "mm"
            scale = _UNIT_SCALE.get(units.lower())
            if scale is None:
                raise ReplayFileError(f"{path}: POINT:UNITS {units!r} is not one of {sorted(_UNIT_SCALE)}")
            screens = {}
            for axis in ("X_SCREEN", "Y_SCREEN"):
                param = _parameter(reader, f"POINT:{axis}")
                screens[axis] = param.string_value.strip() if param is not None else "absent"
            analog_channels = int(reader.analog_used)
            positions: np.ndarray = np.full((count, n, 3), np.nan)
            residuals: np.ndarray = np.full((count, n), -1.0, dtype=np.float32)
            read = 0
            for i, (_, points, _) in enumerate(reader.read_frames(copy=False)):
                if i >= count:
                    break
                positions[i] = points[:, :3]
                residuals[i] = points[:, 3]
                read += 1
            if read < count:
                # exporters write wrong frame counts (an Optotrak file in the wild says 1149
                # for its 29): a data block holding whole frames is what the file has, a
                # frame cut in the middle is a file cut short
                size = 4 if reader.point_scale < 0 else 2
                per_frame = size * (4 * n + int(reader.analog_used) * int(reader.analog_per_frame))
                data = path.stat().st_size - 512 * (int(reader.header.data_block) - 1)
                if read == 0 or per_frame <= 0 or data % per_frame:
                    raise ReplayFileError(
                        f"{path} is truncated: {read} of {count} frames could be read, the last one cut short"
                    )
                count = read
                positions, residuals = positions[:read], residuals[:read]
        occluded = ~(residuals >= 0) | ~np.all(np.isfinite(positions), axis=2)
        positions = self.axes.positions(positions * scale)
        positions[occluded] = np.nan
        self.labels = tuple(labels)
        self.positions = positions
        self.occluded = occluded
        # a C3D residual is in the file's units; the frame's in metres
        self.residuals = np.where(occluded, -1.0, residuals * scale).astype(np.float32)
        self.first_frame = first
        unseen = float(occluded.mean()) if occluded.size else 0.0
        self.info = SourceInfo(
            kind="c3d",
            rate=rate,
            frame_count=count,
            duration=(count - 1) / rate,
            names=AssetNames(markers=self.labels),
            details={
                "units": units,
                "up_axis": self.axes.up,
                "x_screen": screens["X_SCREEN"],
                "y_screen": screens["Y_SCREEN"],
                "analog_channels_ignored": str(analog_channels),
                "frames_in_header": str(last - first + 1),
                "unseen_fraction": f"{unseen:.3f}",
            },
        )

    def _fit_bodies(self, bodies: Mapping[str, Sequence[str]]) -> None:
        index = {label: i for i, label in enumerate(self.labels)}
        self.body_names: tuple[str, ...] = tuple(bodies)
        self.body_markers: list[np.ndarray] = []
        self.layouts: list[np.ndarray] = []
        for name, labels in bodies.items():
            unknown = [label for label in labels if label not in index]
            if unknown:
                raise ReplayFileError(
                    f"bodies: {name} names {', '.join(unknown)}, not labels of {self.path.name} "
                    f"(labels: {', '.join(self.labels[:20])}{'...' if len(self.labels) > 20 else ''})"
                )
            if len(labels) < 3:
                raise ReplayFileError(f"bodies: {name} needs at least 3 marker labels, got {len(labels)}")
            cols = np.array([index[label] for label in labels], dtype=np.int64)
            seen = ~self.occluded[:, cols].any(axis=1)
            if not seen.any():
                raise ReplayFileError(f"bodies: {name}: its markers are never all seen at once, no layout")
            # the body frame: at the markers' centroid, with the world axes, in the first
            # frame that sees them all
            ref = self.positions[int(np.argmax(seen)), cols]
            self.body_markers.append(cols)
            self.layouts.append(ref - ref.mean(axis=0))
        self.info.names = AssetNames(rigid_bodies=self.body_names, markers=self.labels)
        self._ids = np.arange(len(self.labels), dtype=np.int32)
        self._body_ids = [stable_id(name) for name in self.body_names]

    def frames(self, start: float = 0.0, end: float = math.inf) -> Iterator[TimedFrame]:
        rate = self.info.rate
        lo = max(0, math.ceil(start * rate - 1e-9))
        hi = min(self.info.frame_count, math.floor(end * rate + 1e-9) + 1) if math.isfinite(end) else None
        hi = self.info.frame_count if hi is None else hi
        for i in range(lo, hi):
            t = i / rate
            sec = int(t // 1)
            yield TimedFrame(t, sec, int(round((t - sec) * 1e9)), self._frame(i))

    def _frame(self, i: int) -> MocapFrame:
        occluded = self.occluded[i]
        markers = MarkerArrays(
            ids=self._ids,
            names=self.labels,
            positions=self.positions[i],
            occluded=occluded,
            residuals=self.residuals[i],
        )
        frame = MocapFrame(self.first_frame + i, markers=markers)
        if self.body_names:
            n = len(self.body_names)
            positions = np.full((n, 3), np.nan)
            orientations = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
            valid = np.zeros(n, dtype=bool)
            errors = np.full(n, -1.0, dtype=np.float32)
            counts = []
            body_cols = []
            for b, (cols, layout) in enumerate(zip(self.body_markers, self.layouts)):
                observed = self.positions[i, cols]
                fit = fit_pose(layout, observed)
                counts.append(len(cols))
                body_cols.append(cols)
                if fit is None:
                    continue
                positions[b], orientations[b] = fit
                valid[b] = True
                rot_layout = quat_rotate(fit[1], layout) + fit[0]
                err = np.linalg.norm(rot_layout - observed, axis=1)
                errors[b] = float(np.nanmean(err))
            cols_all = np.concatenate(body_cols)
            frame.bodies = BodyArrays.build(
                self._body_ids,
                self.body_names,
                positions,
                orientations,
                valid=valid,
                mean_errors=errors,
                markers=MarkerArrays(
                    ids=self._ids[cols_all],
                    names=tuple(self.labels[c] for c in cols_all),
                    positions=self.positions[i, cols_all],
                    occluded=occluded[cols_all],
                    residuals=self.residuals[i, cols_all],
                ),
                marker_counts=counts,
            )
        return frame
