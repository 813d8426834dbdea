"""A recorded session's messages published as they are (frame_output.FrameOutput, its
pass_through.PassThrough and the replay's attachment, MocapFrame.recorded): only when the
node's parameters make its encoder write the same bytes, with the node's stamp written
in, and compared with the encoder so that a recording the encoder would not write is
caught, logged and encoded from then on.

The node's FrameOutput runs in this process on a node of its own, with real publishers;
what it publishes is taken over DDS by the harness's subscriptions."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from session_fixture import TOPICS, record_session  # noqa: E402

from mocap4r2_control.diagnostics import FrameStatistics  # noqa: E402
from mocap4r2_control.frame import RecordedMessages  # noqa: E402
from mocap4r2_control.frame_output import FrameOutput  # noqa: E402
from mocap4r2_control.system_node import BASE_PARAMETERS  # noqa: E402
from mocap4r2_drivers.replay.replay_system import ReplayAdapter  # noqa: E402

FRAMES = 120
_names = (f"replay_out_{i}" for i in itertools.count())


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return record_session(tmp_path_factory.mktemp("sessions"), frames=FRAMES)


def play(ros, directory: Path, frame_change=None, frames: int = FRAMES, **values: Any):
    """Replay ``directory`` through a FrameOutput with the node's parameters in
    ``values`` (the others their defaults) and take what it publishes; ``frame_change``
    may alter each frame before it is published. Returns the adapter's status at the end
    of the file, the output and the messages per topic."""
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

    base = {spec.name: spec.default for spec in BASE_PARAMETERS}
    replay = {spec.name: spec.default for spec in ReplayAdapter.parameters}
    cfg = {**base, **{k: v for k, v in values.items() if k in base}, "qos_depth": 1000}
    replay.update({k: v for k, v in values.items() if k in replay})
    name = next(_names)
    node = Node(name, namespace=f"/{name}", context=ros.context)
    output = FrameOutput(node, FrameStatistics(), cfg["time_source"])
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    types = {"markers": Markers, "rigid_bodies": RigidBodies, "skeletons": Skeletons}
    got = {t: ros.subscribe(f"/{name}/{t}", types[t], qos) for t in TOPICS}
    adapter = ReplayAdapter.from_parameters({**replay, "file": str(directory), "rate_factor": 0.0})
    try:
        adapter.connect()
        output.open(cfg)
        output.pass_through.decide(cfg, adapter)  # what the node does at configure
        for collector in got.values():
            collector.wait_matched()
        adapter.start_streaming()
        while not adapter.finished:
            frame = adapter.read_frame(0.2)
            if frame is not None:
                if frame_change is not None:
                    frame_change(frame)
                output.publish(frame, time.time())
        messages = {t: got[t].wait_count(frames) for t in TOPICS}
        return {**adapter.status(), **output.pass_through.status()}, output, messages
    finally:
        adapter.disconnect()
        output.close()
        node.destroy_node()


def recorded(written: dict[str, list[bytes]]) -> dict[str, list]:
    """The recorded messages as message objects: what a subscriber takes is compared
    field for field (the floats exactly), as DDS does not carry the padding bytes a
    message's serialization leaves between fields."""
    from rclpy.serialization import deserialize_message

    from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

    types = {"markers": Markers, "rigid_bodies": RigidBodies, "skeletons": Skeletons}
    return {t: [deserialize_message(data, types[t]) for data in ms] for t, ms in written.items()}


def test_a_session_with_its_stamps_is_published_as_recorded_without_encoding(ros, session):
    directory, written, _ = session
    status, output, messages = play(ros, directory, stamps="original")
    assert status["recorded_messages"] == "republished"
    # every frame published from its recorded bytes; the encoder only ran for the
    # comparisons (the first frame, and frames whose structure changed)
    assert output.pass_through.republished == FRAMES and output.pass_through.stopped == ""
    assert 1 <= output.pass_through.compared < FRAMES // 4
    assert messages == recorded(written)
    assert status["frames_republished"] == str(FRAMES) and status["republish_stopped"] == "no"


def test_a_replay_from_a_frame_with_a_held_marker_is_published_as_recorded(ros, session):
    """Replayed from frame 8, whose one occluded marker carries the position the recorder
    held: the encoder never saw that marker in this replay (it would leave it out), yet
    the first frame's comparison agrees, as it encodes the frame with every row good
    first, and every frame is published as recorded."""
    directory, written, _ = session
    first = 8
    status, output, messages = play(
        ros, directory, frames=FRAMES - first, stamps="original", start=(first - 0.5) / 120.0
    )
    held = recorded(written)
    occluded = [m for m in held["markers"][first].markers if m.occluded]
    assert len(occluded) == 1 and np.isfinite(occluded[0].position.x)  # held, not NaN
    assert status["republish_stopped"] == "no" and output.pass_through.republished == FRAMES - first
    assert messages == {t: held[t][first:] for t in TOPICS}


def test_another_frame_id_than_the_recording_is_encoded_with_the_parameter(ros, session):
    directory, written, _ = session
    status, output, messages = play(ros, directory, stamps="original", frame_id="lab")
    assert status["recorded_messages"] == "frame_id is 'lab', the recorded markers say 'world'"
    assert output.pass_through.republished == 0 and output.pass_through.compared == 0
    for topic in TOPICS:
        assert [m.header.frame_id for m in messages[topic]] == ["lab"] * FRAMES
        assert [m.frame_number for m in messages[topic]] == list(range(FRAMES))
    # the rest as recorded: the same messages but for the frame_id
    expected = recorded(written)
    for topic in TOPICS:
        for msg in expected[topic]:
            msg.header.frame_id = "lab"
        assert messages[topic] == expected[topic], topic


def test_publish_tf_is_encoded(ros, session):
    directory, _, _ = session
    status, output, _ = play(ros, directory, stamps="original", publish_tf=True)
    assert status["recorded_messages"].startswith("publish_tf is true")
    assert output.pass_through.republished == 0


def test_stamps_now_rebase_the_stamp_and_leave_every_other_byte_as_recorded(ros, session):
    directory, written, _ = session
    started = time.time()
    status, output, messages = play(ros, directory, stamps="now")
    assert output.pass_through.republished == FRAMES
    expected = recorded(written)
    for topic in TOPICS:
        stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in messages[topic]]
        # now: stamped on arrival (rate_factor 0), after the replay started, never backwards
        assert started <= stamps[0] <= time.time()
        assert all(b >= a for a, b in zip(stamps, stamps[1:]))
        # every other field as recorded
        for msg, rec in zip(messages[topic], expected[topic]):
            assert msg.header.stamp != rec.header.stamp
            msg.header.stamp = rec.header.stamp
        assert messages[topic] == expected[topic], topic


def test_a_recording_the_encoder_would_not_write_is_caught_logged_and_encoded(ros, session, capfd):
    """Frame 0's recorded rigid_bodies say body 0 is not tracked, with a mean error: the
    encoder writes -1 as the mean error of a body not tracked. The comparison on the
    first frame sees it, says why once, and every frame is encoded from then on."""
    directory, written, _ = session

    def untrack_body_0(frame) -> None:
        if frame.frame_number != 0:
            return
        data = bytearray(frame.recorded.rigid_bodies)
        # body 0's tracking_valid: after the encapsulation (4), the header (stamp 8,
        # frame_id 4 + 6 'world\0', 6 to align to 8), frame_number (8), the count (4),
        # id (4) and name (4 + 7 'drone1\0')
        valid_at = 4 + 8 + 4 + 6 + 6 + 8 + 4 + 4 + 4 + 7
        assert data[valid_at] == 1
        data[valid_at] = 0
        frame.bodies.valid[0] = False
        frame.recorded = RecordedMessages(frame.recorded.markers, bytes(data), frame.recorded.skeletons)

    status, output, messages = play(ros, directory, frame_change=untrack_body_0, stamps="original")
    reason = output.pass_through.stopped
    assert reason.startswith("the recorded rigid_bodies of frame 0 are not what the encoder writes")
    assert output.pass_through.republished == 0
    assert status["republish_stopped"] == reason
    log = capfd.readouterr()
    assert (log.out + log.err).count("publishing recorded messages as they are stopped") == 1
    # encoded: body 0 of frame 0 published as not tracked, its mean error -1
    first = messages["rigid_bodies"][0].rigid_bodies[0]
    assert not first.tracking_valid and first.mean_error == -1.0
    # and the other frames as recorded, by the encoder
    assert messages["rigid_bodies"][1:] == recorded(written)["rigid_bodies"][1:]
