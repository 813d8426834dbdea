"""A session as session_recorder writes it (SessionBag, the recorder's MCAP writer), of
the frames the simulated system's node publishes (the scene through FrameEncoder, the
node's own encoder), with the stamps the node gives them (split_seconds of a float)."""

from __future__ import annotations

from pathlib import Path

from mocap4r2_control.frame_encoder import FrameEncoder
from mocap4r2_control.timebase import split_seconds
from mocap4r2_drivers.simulated.scene import Scene, default_scene_path
from mocap4r2_tools.recording.bag_writer import SessionBag, TopicSpec

TOPICS = ("markers", "rigid_bodies", "skeletons")
TYPES = {
    "markers": "mocap4r2_interfaces/msg/Markers",
    "rigid_bodies": "mocap4r2_interfaces/msg/RigidBodies",
    "skeletons": "mocap4r2_interfaces/msg/Skeletons",
}


def record_session(
    out: Path,
    session_id: str = "s1",
    frames: int = 240,
    namespace: str = "/sim",
    scene: Scene | None = None,
    origin: float = 1_780_000_000.123456,
    compression: str = "none",
) -> tuple[Path, dict[str, list[bytes]], Scene]:
    """Write the session; returns its folder, the messages written per topic, the scene."""
    scene = scene or Scene.from_file(str(default_scene_path()), seed=5)
    encoder = FrameEncoder("world")
    bag = SessionBag(
        out, session_id, [TopicSpec(f"{namespace}/{t}", TYPES[t]) for t in TOPICS], compression=compression
    )
    bag.open()
    written: dict[str, list[bytes]] = {t: [] for t in TOPICS}
    for k in range(frames):
        capture = origin + k / scene.rate
        encoded = encoder.encode(scene.frame(k), *split_seconds(capture))
        for topic in TOPICS:
            data = getattr(encoded, topic)
            bag.put(f"{namespace}/{topic}", data, int(capture * 1e9) + 1_000_000)
            written[topic].append(data)
    summary = bag.close()
    assert not summary.failure, summary.failure
    return bag.directory, written, scene
