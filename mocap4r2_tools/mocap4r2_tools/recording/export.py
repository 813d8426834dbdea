"""Exports of a recorded session for biomechanics and spreadsheet tools.

* **C3D** (through the ``c3d`` library): the labeled markers of one system in the POINT
  group with their labels, rate and units (mm). A marker that is occluded in a frame, or
  absent from it, and every marker of a frame the system dropped, is invalid the C3D way
  (residual -1), never a zero position.
* **TRC** (OpenSim's marker file): the same markers in mm with the TRC header fields; a
  missing sample is ``NaN`` (OpenSim's TRC reader takes NaN as missing, and rejects a
  row whose last fields are empty).
* **CSV**: ``<out>_rigid_bodies.csv`` (one row per body and frame) and
  ``<out>_markers.csv`` (one row per marker and frame).

Frames are placed by their frame number (``frame_number - first``), so a dropped frame
keeps its slot and the time axis stays that of the system. The frame rate is the one the
system announced on /mocap4r2/systems in the session, else estimated from the stamps.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMATS = ("c3d", "trc", "csv", "foxglove")
MARKERS = "mocap4r2_interfaces/msg/Markers"
RIGID_BODIES = "mocap4r2_interfaces/msg/RigidBodies"
INFO = "mocap4r2_interfaces/msg/MocapSystemInfo"

Progress = Callable[[int, int], None]


class ExportError(ValueError):
    """A bag that cannot be exported as asked (no such system, no markers, unknown format); the message says
    why."""

    pass


@dataclass
class MarkerTable:
    """Labeled markers of one system: positions in metres, NaN where missing."""

    labels: list[str]
    frame_numbers: np.ndarray  # (frames,) every number from first to last
    stamps: np.ndarray  # (frames,) s, NaN for frames not received
    positions: np.ndarray  # (frames, labels, 3), NaN = missing/occluded
    residuals: np.ndarray  # (frames, labels), m; -1 = invalid
    rate: float


@dataclass
class BagContent:
    """The messages of one system read from a bag, with the topics they came from and the nominal rate."""

    system: str
    markers_topic: str | None
    bodies_topic: str | None
    rate: float = 0.0
    marker_msgs: list = field(default_factory=list)
    body_msgs: list = field(default_factory=list)


def _open(path: Path):
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    return AnyReader([path], default_typestore=get_typestore(Stores.EMPTY))


def _stamp(header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def read_bag(path: str | Path, system: str | None = None, progress: Progress | None = None) -> BagContent:
    """The Markers and RigidBodies messages of one system (its namespace, e.g. /sim)."""
    path = Path(path)
    if not path.exists():
        raise ExportError(f"{path} does not exist")
    with _open(path) as reader:
        by_type: dict[str, list[str]] = {}
        for c in reader.connections:
            by_type.setdefault(c.msgtype, []).append(c.topic)
        namespaces = sorted(
            {t.rsplit("/", 1)[0] or "/" for t in by_type.get(MARKERS, []) + by_type.get(RIGID_BODIES, [])}
        )
        if system is None:
            if len(namespaces) != 1:
                raise ExportError(
                    f"{path} holds {len(namespaces)} systems ({', '.join(namespaces) or 'none'}); "
                    "choose one with --system"
                )
            system = namespaces[0]
        system = "/" + system.strip("/") if system.strip("/") else "/"
        prefix = system.rstrip("/")
        markers = f"{prefix}/markers" if f"{prefix}/markers" in by_type.get(MARKERS, []) else None
        bodies = (
            f"{prefix}/rigid_bodies" if f"{prefix}/rigid_bodies" in by_type.get(RIGID_BODIES, []) else None
        )
        if markers is None and bodies is None:
            raise ExportError(
                f"{path}: no markers or rigid_bodies of {system} (systems: {', '.join(namespaces) or 'none'})"
            )
        content = BagContent(system, markers, bodies)
        wanted = [c for c in reader.connections if c.topic in (markers, bodies) or c.msgtype == INFO]
        total = sum(c.msgcount for c in wanted)
        for done, (connection, _, raw) in enumerate(reader.messages(connections=wanted), start=1):
            msg = reader.deserialize(raw, connection.msgtype)
            if connection.topic == markers:
                content.marker_msgs.append(msg)
            elif connection.topic == bodies:
                content.body_msgs.append(msg)
            elif msg.frame_rate > 0 and msg.topics and any(t in (markers, bodies) for t in msg.topics):
                content.rate = float(msg.frame_rate)
            if progress is not None and (done % 2000 == 0 or done == total):
                progress(done, total)
    return content


def _estimated_rate(msgs: list) -> float:
    if len(msgs) < 2:
        return 0.0
    numbers = np.array([m.frame_number for m in msgs], dtype=np.float64)
    stamps = np.array([_stamp(m.header) for m in msgs])
    dn, dt = np.diff(numbers), np.diff(stamps)
    ok = (dn > 0) & (dt > 0)
    if not ok.any():
        return 0.0
    return float(np.median(dn[ok] / dt[ok]))


def marker_table(content: BagContent) -> MarkerTable:
    """The labeled markers of ``content`` as one table ordered by frame number, NaN where a marker is missing;
    raises ExportError when there are none."""
    msgs = sorted(content.marker_msgs, key=lambda m: m.frame_number)
    if not msgs:
        raise ExportError(f"no markers of {content.system} in the bag")
    labels: list[str] = []
    index: dict[str, int] = {}
    for msg in msgs:
        for marker in msg.markers:
            if marker.name and marker.name not in index:
                index[marker.name] = len(labels)
                labels.append(marker.name)
    if not labels:
        raise ExportError(f"{content.system} recorded no labeled marker")
    first, last = msgs[0].frame_number, msgs[-1].frame_number
    count = int(last - first + 1)
    if count > 50_000_000 // max(1, len(labels)):
        raise ExportError(f"frame numbers {first}..{last} span too many frames to export")
    positions = np.full((count, len(labels), 3), np.nan)
    residuals = np.full((count, len(labels)), -1.0)
    stamps = np.full(count, np.nan)
    for msg in msgs:
        row = int(msg.frame_number - first)
        stamps[row] = _stamp(msg.header)
        for marker in msg.markers:
            col = index.get(marker.name) if marker.name else None
            if col is None or marker.occluded:
                continue
            p = marker.position
            if not (math.isfinite(p.x) and math.isfinite(p.y) and math.isfinite(p.z)):
                continue
            positions[row, col] = (p.x, p.y, p.z)
            residuals[row, col] = marker.residual if marker.residual >= 0 else 0.0
    rate = content.rate or _estimated_rate(msgs)
    if rate <= 0:
        raise ExportError("the frame rate is unknown (no announcement and fewer than two frames)")
    return MarkerTable(labels, np.arange(first, last + 1, dtype=np.int64), stamps, positions, residuals, rate)


def write_c3d(table: MarkerTable, out: Path) -> Path:
    """Write ``table`` as a C3D file in millimetres (the unit motion-analysis tools expect) and return its
    path."""
    import c3d

    writer = c3d.Writer(point_rate=float(table.rate), point_units="mm  ")
    writer.set_point_labels(table.labels)
    analog = np.zeros((0, 0), dtype=np.float32)
    frames = []
    n = len(table.labels)
    for row in range(table.positions.shape[0]):
        points = np.zeros((n, 5), dtype=np.float32)
        valid = ~np.isnan(table.positions[row, :, 0])
        points[valid, :3] = table.positions[row, valid] * 1000.0
        points[valid, 3] = np.minimum(table.residuals[row, valid] * 1000.0, 255.0)
        points[~valid, 3] = -1.0  # invalid the C3D way, whatever the coordinates say
        frames.append((points, analog))
    writer.add_frames(frames)
    with open(out, "wb") as handle:
        writer.write(handle)
    return out


def write_trc(table: MarkerTable, out: Path) -> Path:
    """Write ``table`` as an OpenSim TRC file (tab-separated, millimetres) and return its path."""
    frames, n = table.positions.shape[0], len(table.labels)
    rate = f"{table.rate:.6g}"
    lines = [
        f"PathFileType\t4\t(X/Y/Z)\t{out.name}",
        "DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames",
        f"{rate}\t{rate}\t{frames}\t{n}\tmm\t{rate}\t1\t{frames}",
        "Frame#\tTime\t" + "\t".join(f"{label}\t\t" for label in table.labels).rstrip("\t"),
        "\t\t" + "\t".join(f"X{i}\tY{i}\tZ{i}" for i in range(1, n + 1)),
        "",
    ]
    mm = table.positions * 1000.0
    for row in range(frames):
        fields = [str(row + 1), f"{row / table.rate:.6f}"]
        for col in range(n):
            if np.isnan(mm[row, col, 0]):
                fields += ["NaN", "NaN", "NaN"]
            else:
                fields += [f"{v:.4f}" for v in mm[row, col]]
        lines.append("\t".join(fields))
    out.write_text("\n".join(lines) + "\n")
    return out


def write_csv(content: BagContent, out: Path) -> list[Path]:
    """``<out>_rigid_bodies.csv`` and ``<out>_markers.csv`` (m, s, quaternion x y z w)."""
    base = out.with_suffix("") if out.suffix == ".csv" else out
    written = []
    if content.body_msgs:
        path = base.with_name(base.name + "_rigid_bodies.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                [
                    "frame_number",
                    "stamp",
                    "name",
                    "id",
                    "tracking_valid",
                    "x",
                    "y",
                    "z",
                    "qx",
                    "qy",
                    "qz",
                    "qw",
                    "mean_error",
                ]
            )
            for msg in sorted(content.body_msgs, key=lambda m: m.frame_number):
                stamp = f"{_stamp(msg.header):.9f}"
                for body in msg.rigid_bodies:
                    p, q = body.pose.position, body.pose.orientation
                    w.writerow(
                        [
                            msg.frame_number,
                            stamp,
                            body.name,
                            body.id,
                            int(bool(body.tracking_valid)),
                            repr(p.x),
                            repr(p.y),
                            repr(p.z),
                            repr(q.x),
                            repr(q.y),
                            repr(q.z),
                            repr(q.w),
                            repr(float(body.mean_error)),
                        ]
                    )
        written.append(path)
    if content.marker_msgs:
        path = base.with_name(base.name + "_markers.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["frame_number", "stamp", "name", "id", "occluded", "x", "y", "z", "residual"])
            for msg in sorted(content.marker_msgs, key=lambda m: m.frame_number):
                stamp = f"{_stamp(msg.header):.9f}"
                for marker in msg.markers:
                    p = marker.position
                    w.writerow(
                        [
                            msg.frame_number,
                            stamp,
                            marker.name,
                            marker.id,
                            int(bool(marker.occluded)),
                            repr(p.x),
                            repr(p.y),
                            repr(p.z),
                            repr(float(marker.residual)),
                        ]
                    )
        written.append(path)
    if not written:
        raise ExportError(f"nothing of {content.system} to write")
    return written


def export(
    bag: str | Path,
    fmt: str,
    system: str | None = None,
    out: str | Path | None = None,
    progress: Progress | None = None,
) -> list[Path]:
    """Export the markers (C3D, TRC) or markers and bodies (CSV) of each system in ``bag``, or of ``system``
    only, or the whole session with Foxglove's schemas beside it (foxglove), and return the files written."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    bag = Path(bag)
    if fmt == "foxglove":
        return [_export_foxglove(bag, system, out, progress)]
    content = read_bag(bag, system, progress)
    stem = content.system.strip("/").replace("/", "_") or "system"
    default = (bag if bag.is_dir() else bag.parent) / f"{bag.stem if bag.is_file() else bag.name}_{stem}"
    target = Path(out) if out else default
    if target.is_dir():
        target = target / default.name
    if fmt == "csv":
        return write_csv(content, target)
    table = marker_table(content)
    target = target if target.suffix == f".{fmt}" else target.with_name(target.name + f".{fmt}")
    return [write_c3d(table, target) if fmt == "c3d" else write_trc(table, target)]


def _export_foxglove(
    bag: Path, system: str | None, out: str | Path | None, progress: Progress | None
) -> Path:
    """The session and its Foxglove channels in one MCAP (mocap4r2_tools.foxglove.mcap_file):
    by default ``<session>_foxglove.mcap`` beside the session directory (a second MCAP
    inside it would make it two bags' worth for ``recover``); never over an existing file."""
    from ..foxglove.mcap_file import export_session

    if not bag.exists():
        raise ExportError(f"{bag} does not exist")
    name = (bag.name if bag.is_dir() else bag.stem) + "_foxglove.mcap"
    target = Path(out) if out else bag.parent / name
    if target.is_dir():
        target = target / name
    if target.suffix != ".mcap":
        target = target.with_name(target.name + ".mcap")
    try:
        path, _ = export_session(bag, target, system, progress=progress)
    except FileExistsError:
        raise ExportError(f"{target} exists; an export is never overwritten (give --out)") from None
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    return path
