"""readers.py against real files: a session as session_recorder writes it, a C3D written by
`mocap4r2 export`, a C3D written by ezc3d directly, the vendor C3D files of
../shared/data/c3d (BTS, Optotrak, Qualisys: used from there, never copied), and damaged
or unsuitable files refused with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from session_fixture import TOPICS, record_session  # noqa: E402
from shared_data import require_shared  # noqa: E402  (test/fixtures)

from mocap4r2_control.frame_encoder import FrameEncoder  # noqa: E402
from mocap4r2_control.timebase import split_seconds  # noqa: E402
from mocap4r2_drivers.replay.convert import seconds_for_stamp  # noqa: E402
from mocap4r2_drivers.replay.readers import ReplayFileError, open_source  # noqa: E402


@pytest.fixture
def c3d_dir() -> Path:
    """The vendor C3D files of ../shared/data/c3d (skips in a clone without them; fails under CI)."""
    return require_shared("data", "c3d", checks="reading the BTS, Optotrak and Qualisys vendor C3D files")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return record_session(tmp_path_factory.mktemp("sessions"))


@pytest.mark.parametrize("chunked", [True, False], ids=["chunk-by-chunk", "rosbags"])
def test_a_session_replayed_with_its_stamps_gives_the_recorded_messages(session, chunked):
    directory, written, _ = session
    source = open_source(directory, "/sim")
    assert source.info.frame_count == len(written["markers"])
    assert source.info.names.rigid_bodies == ("drone1", "robot1", "wand", "table")
    # the recorder's file is read chunk by chunk; through rosbags it must read the same
    assert source.mcap_file is not None
    if not chunked:
        source.mcap_file = None
    encoder = FrameEncoder("world")
    frames = list(source.frames())
    assert len(frames) == len(written["markers"])
    identical = {t: 0 for t in TOPICS}
    for i, timed in enumerate(frames):
        encoded = encoder.encode(timed.frame, *split_seconds(seconds_for_stamp(timed.sec, timed.nanosec)))
        for topic in TOPICS:
            identical[topic] += getattr(encoded, topic) == written[topic][i]
    # byte for byte, skeletons included: their segment orientations pass the node's
    # quaternion normalisation a second time, which must leave a unit quaternion as it is
    assert identical == {t: len(frames) for t in TOPICS}
    assert [t.frame.frame_number for t in frames] == list(range(len(frames)))
    assert frames[-1].offset == pytest.approx((len(frames) - 1) / 120.0, abs=1e-6)


def test_start_and_end_pick_seconds_of_the_file(session):
    directory, written, _ = session
    source = open_source(directory / "s1_0.mcap", "sim")
    frames = list(source.frames(0.5, 1.0))
    assert frames[0].frame.frame_number == 60 and frames[-1].frame.frame_number == 120


def test_a_c3d_written_by_mocap4r2_export_replays_to_float32_precision(session, tmp_path):
    from mocap4r2_tools.recording.export import marker_table, read_bag, write_c3d

    directory, written, _ = session
    table = marker_table(read_bag(directory, "/sim"))
    out = write_c3d(table, tmp_path / "s1.c3d")
    source = open_source(out)
    assert list(source.info.names.markers) == table.labels
    assert source.info.rate == pytest.approx(table.rate, rel=1e-6)
    frames = list(source.frames())
    assert len(frames) == len(table.frame_numbers)
    got = np.stack([f.frame.markers.positions for f in frames])
    seen = ~np.isnan(table.positions[..., 0])
    occluded = np.stack([f.frame.markers.occluded for f in frames])
    assert (occluded == ~seen).all()
    # mm in float32 in the file: float32 precision of the millimetre values
    np.testing.assert_allclose(
        got[seen], table.positions[seen], rtol=0, atol=4e-7 * np.abs(table.positions[seen]).max() + 1e-9
    )
    assert np.isnan(got[~seen]).all()


def test_a_c3d_written_by_ezc3d_replays_with_its_names_units_and_axes(tmp_path):
    ezc3d = pytest.importorskip("ezc3d")
    rng = np.random.default_rng(2)
    frames, labels = 50, ["head", "l_hand", "r_hand"]
    # a Y-up recording in centimetres: the head 170 cm up
    truth = rng.normal(0.0, 5.0, (frames, 3, 3)) + np.array([[10, 170, 20], [-30, 100, 0], [30, 100, 0]])
    c3d = ezc3d.c3d()
    c3d["parameters"]["POINT"]["RATE"]["value"] = [250.0]
    c3d["parameters"]["POINT"]["LABELS"]["value"] = labels
    c3d["parameters"]["POINT"]["UNITS"]["value"] = ["cm"]
    points = np.ones((4, 3, frames))
    points[:3] = truth.transpose(2, 1, 0)
    c3d["data"]["points"] = points
    c3d["data"]["meta_points"] = {
        "residuals": np.zeros((1, 3, frames)),
        "camera_masks": np.zeros((7, 3, frames), dtype=bool),
    }
    c3d["data"]["meta_points"]["residuals"][0, 1, 10:20] = -1.0  # l_hand unseen there
    path = tmp_path / "ez.c3d"
    c3d.write(str(path))
    source = open_source(path, up_axis="y")
    assert source.info.names.markers == tuple(labels)
    assert source.info.rate == 250.0
    assert source.info.details["units"] == "cm"
    got = [f.frame for f in source.frames()]
    assert len(got) == frames
    assert got[0].markers.ids.tolist() == [0, 1, 2]
    head = np.stack([f.markers.positions[0] for f in got])
    # y up -> z up: (x, y, z) -> (x, -z, y), cm -> m
    np.testing.assert_allclose(
        head, np.stack([truth[:, 0, 0], -truth[:, 0, 2], truth[:, 0, 1]], axis=1) / 100, atol=1e-6
    )
    assert 1.5 < head[:, 2].mean() < 1.9
    occluded = np.stack([f.markers.occluded for f in got])
    assert occluded[10:20, 1].all() and occluded.sum() == 10


@pytest.mark.parametrize(
    ("name", "up", "count", "rate", "first_label", "unseen"),
    [
        ("BTS", "y", 675, 100.0, "c7", 0.516),
        ("Optotrak", "z", 29, 30.0, "Marker_1", None),
        ("Qualisys", "z", 340, 200.0, "L_IAS", 0.0),
    ],
)
def test_the_vendor_files_replay_with_labels_in_metres_unseen_points_occluded(
    name, up, count, rate, first_label, unseen, c3d_dir
):
    source = open_source(c3d_dir / f"{name}.c3d", up_axis=up)
    info = source.info
    assert info.frame_count == count and info.rate == rate
    assert info.names.markers[0] == first_label
    assert info.details["units"] == "mm"
    frames = [f.frame for f in source.frames()]
    positions = np.stack([f.markers.positions for f in frames])
    occluded = np.stack([f.markers.occluded for f in frames])
    assert np.isnan(positions[occluded]).all() and np.isfinite(positions[~occluded]).all()
    if unseen is not None:
        assert occluded.mean() == pytest.approx(unseen, abs=0.005)
    if name != "Optotrak":  # a standing person: metres, about 1.3-1.5 m tall, on the floor
        assert 1.2 < np.nanmax(positions[..., 2]) < 1.6
        assert -0.1 < np.nanmin(positions[..., 2]) < 0.2


def test_the_screen_hints_are_reported_not_trusted(c3d_dir):
    source = open_source(c3d_dir / "Qualisys.c3d")
    assert source.info.details["y_screen"] == "-Z"
    assert source.info.details["up_axis"] == "+Z"
    assert int(source.info.details["analog_channels_ignored"]) > 0


def test_bodies_are_fitted_to_their_markers(c3d_dir):
    bodies = {"pelvis": ["L_IAS", "R_IAS", "L_IPS", "R_IPS"]}
    source = open_source(c3d_dir / "Qualisys.c3d", bodies=bodies)
    assert source.info.names.rigid_bodies == ("pelvis",)
    frames = [f.frame for f in source.frames()]
    for frame in frames[::17]:
        b = frame.bodies
        assert b.valid[0]
        cols = [frame.markers.names.index(label) for label in bodies["pelvis"]]
        # the body sits at the centroid of its markers (the layout's origin)
        np.testing.assert_allclose(b.positions[0], frame.markers.positions[cols].mean(axis=0), atol=0.01)
        assert 0 <= b.mean_errors[0] < 0.01
        assert b.markers.names == tuple(bodies["pelvis"])
        frame.check()


@pytest.mark.parametrize(
    ("bodies", "words"),
    [
        ({"pelvis": ["L_IAS", "R_IAS", "NOPE"]}, "NOPE, not labels"),
        ({"stick": ["L_IAS", "R_IAS"]}, "at least 3"),
    ],
)
def test_bad_bodies_are_refused_with_the_reason(bodies, words, c3d_dir):
    with pytest.raises(ReplayFileError, match=words):
        open_source(c3d_dir / "Qualisys.c3d", bodies=bodies)


def test_a_truncated_c3d_is_refused(tmp_path, c3d_dir):
    data = (c3d_dir / "BTS.c3d").read_bytes()
    for cut, words in ((300, "cut short inside its header"), (len(data) // 2 + 3, "truncated")):
        path = tmp_path / f"cut{cut}.c3d"
        path.write_bytes(data[:cut])
        with pytest.raises(ReplayFileError, match=words):
            open_source(path)


def test_a_truncated_session_is_refused_with_the_way_to_repair_it(session, tmp_path):
    directory, _, _ = session
    data = (directory / "s1_0.mcap").read_bytes()
    path = tmp_path / "cut.mcap"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ReplayFileError, match="mocap4r2 recover"):
        open_source(path)


def test_a_bag_without_mocap_topics_and_a_wrong_source_are_refused(session, tmp_path):
    directory, _, _ = session
    with pytest.raises(ReplayFileError, match="no mocap topics under /vicon"):
        open_source(directory, "/vicon")
    from mocap4r2_tools.recording.bag_writer import SessionBag, TopicSpec

    bag = SessionBag(tmp_path, "other", [TopicSpec("/chatter", "std_msgs/msg/String")])
    bag.open()
    bag.put("/chatter", b"\x00\x01\x00\x00\x03\x00\x00\x00hi\x00", 1_000)
    bag.close()
    with pytest.raises(ReplayFileError, match="has no mocap topics"):
        open_source(tmp_path / "other")
    with pytest.raises(ReplayFileError, match="does not exist"):
        open_source(tmp_path / "nothing.c3d")


def _foreign_bag(path: Path, storage: str, kind: str) -> list[tuple[int, dict[str, tuple[float, ...]]]]:
    """A bag as other drivers record it, written by rosbags (not by us): vrpn_mocap-style
    PoseStamped per body, or /tf. Returns the poses written per stamp."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.LATEST)
    PoseStamped = store.types["geometry_msgs/msg/PoseStamped"]
    Header = store.types["std_msgs/msg/Header"]
    Time = store.types["builtin_interfaces/msg/Time"]
    Pose = store.types["geometry_msgs/msg/Pose"]
    Point = store.types["geometry_msgs/msg/Point"]
    Quaternion = store.types["geometry_msgs/msg/Quaternion"]
    TFMessage = store.types["tf2_msgs/msg/TFMessage"]
    TransformStamped = store.types["geometry_msgs/msg/TransformStamped"]
    Transform = store.types["geometry_msgs/msg/Transform"]
    Vector3 = store.types["geometry_msgs/msg/Vector3"]
    plugin = StoragePlugin.SQLITE3 if storage == "sqlite3" else StoragePlugin.MCAP
    truth = []
    with Writer(path, version=8, storage_plugin=plugin) as writer:
        if kind == "poses":
            conns = {
                b: writer.add_connection(f"/vrpn/{b}/pose", PoseStamped.__msgtype__, typestore=store)
                for b in ("a", "b")
            }
        else:
            tf = writer.add_connection("/tf", TFMessage.__msgtype__, typestore=store)
        for k in range(30):
            sec, nanosec = 1_700_000_000 + k // 100, (k % 100) * 10_000_000
            stamp = Time(sec=sec, nanosec=nanosec)
            poses = {
                "a": (float(k), 0.0, 1.0, 0.0, 0.0, 0.0, 1.0),
                "b": (0.0, float(-k), 2.0, 0.0, 0.0, 1.0, 0.0),
            }
            if k % 10 == 5:
                del poses["b"]  # b not seen at this stamp
            truth.append((k, poses))
            ns = sec * 1_000_000_000 + nanosec
            msgs = {
                b: (Point(x=p[0], y=p[1], z=p[2]), Quaternion(x=p[3], y=p[4], z=p[5], w=p[6]))
                for b, p in poses.items()
            }
            if kind == "poses":
                for b, (pt, q) in msgs.items():
                    msg = PoseStamped(
                        header=Header(stamp=stamp, frame_id="world"), pose=Pose(position=pt, orientation=q)
                    )
                    writer.write(conns[b], ns, store.serialize_cdr(msg, PoseStamped.__msgtype__))
            else:
                transforms = [
                    TransformStamped(
                        header=Header(stamp=stamp, frame_id="world"),
                        child_frame_id=b,
                        transform=Transform(translation=Vector3(x=pt.x, y=pt.y, z=pt.z), rotation=q),
                    )
                    for b, (pt, q) in msgs.items()
                ]
                writer.write(
                    tf, ns, store.serialize_cdr(TFMessage(transforms=transforms), TFMessage.__msgtype__)
                )
    return truth


@pytest.mark.parametrize(("storage", "kind"), [("sqlite3", "poses"), ("mcap", "tf"), ("sqlite3", "tf")])
def test_bags_of_other_drivers_poses_and_tf_become_bodies(tmp_path, storage, kind):
    truth = _foreign_bag(tmp_path / "bag", storage, kind)
    source = open_source(tmp_path / "bag")
    assert source.info.names.rigid_bodies == ("a", "b")
    frames = list(source.frames())
    assert len(frames) == len(truth)
    for timed, (k, poses) in zip(frames, truth):
        b = timed.frame.bodies
        assert timed.frame.frame_number == k
        assert timed.offset == pytest.approx(k * 0.01, abs=1e-9)
        for row, name in enumerate(("a", "b")):
            if name in poses:
                assert b.valid[row]
                assert b.positions[row].tolist() == list(poses[name][:3])
                assert b.orientations[row].tolist() == list(poses[name][3:])
            else:
                assert not b.valid[row]
        timed.frame.check()
