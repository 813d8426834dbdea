"""Trajectories from TUM files and rosbag2 bags (sqlite3 and MCAP), without ROS.

TUM format: one pose per line, ``stamp tx ty tz qx qy qz qw`` (seconds, metres,
quaternion x y z w), separated by spaces or commas; lines starting with ``#`` are
comments. The file is read as evo reads it (every row kept), so results compare.

Bags are read with ``rosbags``. Supported topic types, stamped with their header stamp
(the capture time, not the time the bag recorder received them):
  geometry_msgs/PoseStamped, PoseWithCovarianceStamped, TransformStamped,
  nav_msgs/Odometry, tf2_msgs/TFMessage (one parent -> child edge, ``frames``), and
  mocap4r2_interfaces/RigidBodies (one body by name, ``body``; only tracked samples).
Messages may be recorded out of stamp order, so bag trajectories are sorted by stamp.
"""

from __future__ import annotations

import warnings
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mocap4r2_control.timebase import stamp_to_seconds

from .poses import Trajectory, TrajectoryInputError

Values = npt.NDArray[np.float64]
# (stamp, (x, y, z, qx, qy, qz, qw)) of one pose read from a bag message
PoseRow = tuple[float, tuple[float, ...]]

ProgressCallback = Callable[[int, int], None]  # (messages done, messages in total)

SUPPORTED_TYPES = (
    "geometry_msgs/msg/PoseStamped",
    "geometry_msgs/msg/PoseWithCovarianceStamped",
    "geometry_msgs/msg/TransformStamped",
    "nav_msgs/msg/Odometry",
    "tf2_msgs/msg/TFMessage",
    "mocap4r2_interfaces/msg/RigidBodies",
)

_CHUNK = 1 << 20  # bytes read at a time while checking a file is text
MAX_LINE = 1 << 20  # longest run without a newline accepted (a TUM line is < 200 bytes)
# largest TUM file read: about ten million poses. Both readers hold the poses as float64
# (64 bytes a pose) and the fast one briefly the text as well, so this bounds memory
MAX_TUM_BYTES = 1 << 30


# --------------------------------------------------------------------------- TUM
def read_tum(path: str | Path, name: str | None = None) -> Trajectory:
    """Poses of a TUM file. Rows out of time order are sorted and repeated stamps kept,
    both said in the trajectory's ``notes`` (see Trajectory.from_recorded).

    Two readers give the same array: numpy's C reader (two to three times faster, the one a
    million-pose file needs) whenever the file is plain (every ``#`` opens a line), and the
    careful line-by-line reader otherwise, or when the fast one refuses anything; only the
    careful one names the bad line, so every error comes from it."""
    path = Path(path)
    scan = _check_text(path)
    data = parse_tum_fast(path, scan) if scan.plain else None
    if data is None:
        data = parse_tum_careful(path)
    if data.shape[0] == 0:
        raise TrajectoryInputError(f"{path} holds no poses")
    return Trajectory.from_recorded(data[:, 0], data[:, 1:4], data[:, 4:8], name=name or path.name)


@dataclass(frozen=True)
class TextScan:
    """What one pass over a file found, enough to choose a reader."""

    size: int
    comma: bool  # a comma anywhere: the fast reader then splits on commas
    plain: bool  # every '#' is the first byte of a line (whole-line comments only)


def _check_text(path: Path) -> TextScan:
    """One pass over the file in fixed chunks: a NUL byte anywhere, a run of more than
    MAX_LINE bytes without a newline, or more than MAX_TUM_BYTES, is refused before a
    parser sees the file (a parser would hold such a "line" or file in memory whole)."""
    size = hashes = line_hashes = 0
    comma = False
    try:
        with open(path, "rb") as handle:
            chunk, open_line, after_newline = handle.read(_CHUNK), 0, True
            while chunk:
                nul = chunk.find(b"\0")
                if nul >= 0:
                    raise TrajectoryInputError(
                        f"{path} is not a text file (TUM format expected): NUL byte at offset {size + nul}"
                    )
                newline = chunk.rfind(b"\n")
                open_line = open_line + len(chunk) if newline < 0 else len(chunk) - newline - 1
                if open_line > MAX_LINE:
                    raise TrajectoryInputError(
                        f"{path}: more than {MAX_LINE} bytes without a line break at offset {size} "
                        "(not a TUM file)"
                    )
                if size + len(chunk) > MAX_TUM_BYTES:
                    raise TrajectoryInputError(
                        f"{path} is larger than {MAX_TUM_BYTES:,} bytes, the most read from a TUM file "
                        "(about ten million poses)"
                    )
                chunk_hashes = chunk.count(b"#")
                if chunk_hashes:  # a '#' elsewhere than at a line start is an inline comment
                    hashes += chunk_hashes
                    line_hashes += chunk.count(b"\n#") + (after_newline and chunk[:1] == b"#")
                comma = comma or b"," in chunk
                after_newline = chunk.endswith(b"\n")
                size += len(chunk)
                chunk = handle.read(_CHUNK)
    except OSError as exc:
        raise TrajectoryInputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return TextScan(size, comma, hashes == line_hashes)


def parse_tum_fast(path: Path, scan: TextScan) -> Values | None:
    """(n, 8) values by numpy's C reader, or None when it refuses the file (the careful
    reader then names the line). Only for files whose comments are whole lines: numpy
    would also accept a comment after the values, which the careful reader refuses."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty file warns; it is refused by the caller
            data = np.loadtxt(
                path,
                comments="#",
                delimiter="," if scan.comma else None,
                ndmin=2,
                dtype=np.float64,
                encoding="utf-8-sig",
            )
    except (ValueError, UnicodeDecodeError):
        return None
    if data.shape[1] != 8:
        return None if data.size else np.zeros((0, 8))
    return data


def parse_tum_careful(path: Path) -> Values:
    """(n, 8) values, one line at a time: spaces and commas mixed, blank and comment lines;
    TrajectoryInputError naming the file and line of the first bad line. Memory is the
    values only (8 bytes each), never a list of the file's lines."""
    values = array("d")
    number = 0
    try:
        # universal newlines (CRLF, CR); a UTF-8 byte order mark is skipped, as evo does
        with open(path, encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                stripped = line.strip()
                if not stripped or stripped.startswith("#"):
                    continue
                fields = stripped.replace(",", " ").split()
                if len(fields) != 8:
                    raise TrajectoryInputError(
                        f"{path}:{number}: {len(fields)} fields, "
                        "a TUM line has 8 (stamp tx ty tz qx qy qz qw)"
                    )
                try:
                    values.extend(map(float, fields))
                except ValueError as exc:
                    raise TrajectoryInputError(f"{path}:{number}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TrajectoryInputError(
            f"{path} is not a text file (TUM format expected): not UTF-8 (after line {number})"
        ) from exc
    except OSError as exc:
        raise TrajectoryInputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return np.frombuffer(values, dtype=np.float64).reshape(-1, 8)


def write_tum(path: str | Path, traj: Trajectory) -> None:
    """Write ``traj`` as a TUM file (stamp tx ty tz qx qy qz qw), nanosecond stamps kept."""
    data = np.column_stack((traj.stamps, traj.positions, traj.orientations))
    np.savetxt(path, data, fmt=["%.9f"] + ["%.12g"] * 7, header="stamp tx ty tz qx qy qz qw")


# --------------------------------------------------------------------------- types
_TYPESTORE = None


def interfaces_msg_dir() -> Path:
    """mocap4r2_interfaces/msg: the installed share dir, else the source checkout."""
    try:
        from ament_index_python.packages import get_package_share_directory

        path = Path(get_package_share_directory("mocap4r2_interfaces")) / "msg"
        if path.is_dir():
            return path
    except Exception:  # not found through ament: a source checkout
        pass
    path = Path(__file__).resolve().parents[3] / "mocap4r2_interfaces" / "msg"
    if not path.is_dir():
        raise TrajectoryInputError("cannot find the mocap4r2_interfaces message definitions")
    return path


def typestore() -> Any:  # rosbags.typesys.store.Typestore (rosbags is imported lazily)
    """A rosbags typestore with ROS 2 Kilted's types plus mocap4r2_interfaces."""
    global _TYPESTORE
    if _TYPESTORE is None:
        from rosbags.typesys import Stores, get_types_from_msg, get_typestore

        store = get_typestore(Stores.ROS2_KILTED)
        types: dict[str, Any] = {}
        for msg in sorted(interfaces_msg_dir().glob("*.msg")):
            types.update(get_types_from_msg(msg.read_text(), f"mocap4r2_interfaces/msg/{msg.stem}"))
        store.register(types)
        _TYPESTORE = store
    return _TYPESTORE


# --------------------------------------------------------------------------- bags
def bag_topics(path: str | Path) -> dict[str, str]:
    """Topic -> message type of a bag."""
    with _open_bag(path) as reader:
        return {c.topic: c.msgtype for c in reader.connections}


def read_bag(
    path: str | Path,
    topic: str,
    *,
    body: str | None = None,
    frames: tuple[str, str] | None = None,
    progress: ProgressCallback | None = None,
    name: str | None = None,
) -> Trajectory:
    """The trajectory on ``topic`` of a rosbag2 bag (directory, .db3 or .mcap file)."""
    with _open_bag(path) as reader:
        connections = [c for c in reader.connections if c.topic == topic]
        if not connections:
            known = ", ".join(f"{c.topic} ({c.msgtype})" for c in reader.connections) or "none"
            raise TrajectoryInputError(f"{path}: no topic {topic!r}; topics: {known}")
        msgtype = connections[0].msgtype
        if msgtype not in SUPPORTED_TYPES:
            raise TrajectoryInputError(
                f"{path}: topic {topic} has type {msgtype}, which is not a pose (supported: "
                f"{', '.join(SUPPORTED_TYPES)})"
            )
        if msgtype.endswith("/RigidBodies") and not body:
            raise TrajectoryInputError(f"topic {topic} carries rigid bodies: say which one with a body name")
        if msgtype.endswith("/TFMessage") and not frames:
            raise TrajectoryInputError(f"topic {topic} carries TF: give the parent and child frame")
        store = _store_for(connections)
        total = sum(c.msgcount for c in connections)
        names_seen: set[str] = set()
        extract = _extractor(msgtype, body, frames, names_seen)
        stamps: list[float] = []
        poses: list[tuple[float, ...]] = []
        skipped = 0
        for done, (connection, _, raw) in enumerate(reader.messages(connections=connections), start=1):
            try:
                msg = store.deserialize_cdr(raw, connection.msgtype)
            except Exception as exc:  # a corrupt record: say where instead of a stack trace
                raise TrajectoryInputError(
                    f"{path}: message {done} on {topic} cannot be decoded: {exc}"
                ) from exc
            found = False
            for stamp, pose in extract(msg):
                stamps.append(stamp)
                poses.append(pose)
                found = True
            skipped += not found
            if progress is not None and (done % 5000 == 0 or done == total):
                progress(done, total)
    label = name or f"{topic}" + (f" [{body}]" if body else "") + (
        f" [{frames[0]}->{frames[1]}]" if frames else ""
    )
    if not stamps:
        raise TrajectoryInputError(
            _nothing_found(
                path, topic, msgtype=msgtype, body=body, frames=frames, total=total, names_seen=names_seen
            )
        )
    values = np.asarray(poses, dtype=np.float64)
    # recorders may store messages out of stamp order: sorted, and said in ``notes``
    return Trajectory.from_recorded(stamps, values[:, 0:3], values[:, 3:7], name=label)


def _nothing_found(
    path: str | Path,
    topic: str,
    *,
    msgtype: str,
    body: str | None,
    frames: tuple[str, str] | None,
    total: int,
    names_seen: set[str],
) -> str:
    if msgtype.endswith("/RigidBodies"):
        if body not in names_seen:
            known = ", ".join(sorted(names_seen)) or "none"
            return f"{path}: no body named {body!r} on {topic} (bodies: {known})"
        return f"{path}: body {body!r} is never tracked on {topic} ({total} messages)"
    if msgtype.endswith("/TFMessage") and frames is not None:
        return f"{path}: no transform {frames[0]} -> {frames[1]} on {topic} ({total} messages)"
    return f"{path}: no messages on {topic}"


@contextmanager
def _open_bag(path: str | Path) -> Iterator[Any]:  # yields a rosbags Reader
    """An open rosbags Reader; TrajectoryInputError when the path is not a readable bag."""
    from rosbags.rosbag2 import Reader

    try:
        reader = Reader(Path(path))
    except FileNotFoundError as exc:
        raise TrajectoryInputError(f"no bag at {path}") from exc
    except Exception as exc:  # rosbags raises its own errors for unreadable bags
        raise TrajectoryInputError(f"{path} is not a rosbag2 bag: {exc}") from exc
    try:
        reader.open()
    except Exception as exc:
        raise TrajectoryInputError(f"cannot open bag {path}: {exc}") from exc
    try:
        yield reader
    finally:
        reader.close()


def _store_for(connections: list[Any]) -> Any:
    """Our typestore, plus any type the bag defines that it lacks."""
    from rosbags.interfaces import MessageDefinitionFormat
    from rosbags.typesys import get_types_from_idl, get_types_from_msg

    store = typestore()
    missing = [c for c in connections if c.msgtype not in store.types]
    for connection in missing:
        msgdef = connection.msgdef
        if msgdef.format == MessageDefinitionFormat.MSG:
            store.register(get_types_from_msg(msgdef.data, connection.msgtype))
        elif msgdef.format == MessageDefinitionFormat.IDL:
            store.register(get_types_from_idl(msgdef.data))
        else:
            raise TrajectoryInputError(f"the bag does not define {connection.msgtype} and it is unknown here")
    return store


def _stamp(header: Any) -> float:
    return stamp_to_seconds(header.stamp)


def _pose(pose: Any) -> tuple[float, ...]:
    p, q = pose.position, pose.orientation
    return (p.x, p.y, p.z, q.x, q.y, q.z, q.w)


def _transform(tf: Any) -> tuple[float, ...]:
    p, q = tf.translation, tf.rotation
    return (p.x, p.y, p.z, q.x, q.y, q.z, q.w)


def _extractor(
    msgtype: str, body: str | None, frames: tuple[str, str] | None, names_seen: set[str]
) -> Callable[[Any], Iterator[PoseRow]]:
    short = msgtype.rsplit("/", 1)[-1]
    if short == "PoseStamped":
        return lambda m: iter(((_stamp(m.header), _pose(m.pose)),))
    if short in ("PoseWithCovarianceStamped", "Odometry"):
        return lambda m: iter(((_stamp(m.header), _pose(m.pose.pose)),))
    if short == "TransformStamped":
        return lambda m: iter(((_stamp(m.header), _transform(m.transform)),))
    if short == "TFMessage":
        if frames is None:
            raise TrajectoryInputError("a TFMessage topic needs the parent and child frame")
        parent, child = (f.lstrip("/") for f in frames)

        def from_tf(m: Any) -> Iterator[PoseRow]:
            for tf in m.transforms:
                if tf.child_frame_id.lstrip("/") == child and tf.header.frame_id.lstrip("/") == parent:
                    yield _stamp(tf.header), _transform(tf.transform)

        return from_tf

    def from_bodies(m: Any) -> Iterator[PoseRow]:
        for rb in m.rigid_bodies:
            if rb.name == body:
                if rb.tracking_valid:
                    yield _stamp(m.header), _pose(rb.pose)
                break
        else:  # only when the body is missing, to name the bodies there are
            names_seen.update(rb.name for rb in m.rigid_bodies)
            return
        if body is not None:
            names_seen.add(body)

    return from_bodies
