"""What `mocap4r2 sessions` lists: each bag directory of a recorder's output_dir, from its
metadata.yaml (or, for a session whose recorder died, the fact that it needs recovering)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

FRAME_TYPES = (
    "mocap4r2_interfaces/msg/Markers",
    "mocap4r2_interfaces/msg/RigidBodies",
    "mocap4r2_interfaces/msg/Skeletons",
)


@dataclass
class SessionInfo:
    """One recorded session as listed by ``mocap4r2 sessions``."""

    session: str
    path: str
    start_ns: int = 0
    duration: float = 0.0
    systems: list[str] = field(default_factory=list)
    messages: int = 0
    size: int = 0
    state: str = "complete"

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def start_text(self) -> str:
        if not self.start_ns:
            return "-"
        return dt.datetime.fromtimestamp(self.start_ns / 1e9).isoformat(sep=" ", timespec="seconds")

    @property
    def size_text(self) -> str:
        size = float(self.size)
        for unit in ("B", "KiB", "MiB", "GiB"):
            if size < 1024 or unit == "GiB":
                return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
            size /= 1024
        return f"{size:.1f} TiB"


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def read_session(directory: Path) -> SessionInfo | None:
    """The session recorded in ``directory`` from its metadata.yaml, or a partial entry when only the MCAP
    file exists (an unfinished recording), or None when it holds no bag."""
    meta_path = directory / "metadata.yaml"
    if not meta_path.is_file():
        if any(directory.glob("*.mcap")):
            return SessionInfo(
                session=directory.name,
                path=str(directory),
                size=_size(directory),
                state="unfinished (mocap4r2 recover)",
            )
        return None
    try:
        info = yaml.safe_load(meta_path.read_text())["rosbag2_bagfile_information"]
    except (yaml.YAMLError, KeyError, TypeError, OSError):
        return SessionInfo(
            session=directory.name,
            path=str(directory),
            size=_size(directory),
            state="unreadable metadata.yaml",
        )
    custom = info.get("custom_data") or {}
    topics = info.get("topics_with_message_count") or []
    systems = [s for s in (custom.get("mocap4r2.systems") or "").split(",") if s]
    if not systems:  # a bag from elsewhere: the namespaces of its frame topics
        systems = sorted(
            {
                t["topic_metadata"]["name"].rsplit("/", 1)[0]
                for t in topics
                if t["topic_metadata"]["type"] in FRAME_TYPES
            }
        )
    return SessionInfo(
        session=custom.get("mocap4r2.session_id", directory.name),
        path=str(directory),
        start_ns=int(info.get("starting_time", {}).get("nanoseconds_since_epoch", 0)),
        duration=int(info.get("duration", {}).get("nanoseconds", 0)) / 1e9,
        systems=systems,
        messages=int(info.get("message_count", 0)),
        size=_size(directory),
        state="recovered" if custom.get("mocap4r2.recovered") else "complete",
    )


def list_sessions(directory: Path) -> list[SessionInfo]:
    """The sessions recorded under ``directory``, oldest first."""
    found = [read_session(d) for d in sorted(directory.iterdir()) if d.is_dir()]
    return sorted((s for s in found if s is not None), key=lambda s: (s.start_ns, s.session))
