"""`mocap4r2 eval`: TUM files and rosbag2 bags (sqlite3 and MCAP, written with rosbags),
JSON output, plots, and clear errors on bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer
from scipy.spatial.transform import Rotation

from mocap4r2_tools import eval_command as eval_cli
from mocap4r2_tools.trajectory import EvalOptions, Trajectory, evaluate
from mocap4r2_tools.trajectory.io import bag_topics, read_bag, read_tum, typestore, write_tum
from mocap4r2_tools.trajectory.report import PLOT_FILES

ROOT = Path(__file__).resolve().parents[2]
FRAME = Rotation.from_euler("xyz", [0.02, -0.03, 0.8])
SHIFT = np.array([0.5, -1.0, 0.1])


def ground_truth() -> Trajectory:
    t = 1_700_000_000.0 + np.arange(0.0, 10.0, 0.01)  # 100 Hz, Unix-like stamps
    s = t - t[0]
    pos = np.c_[1.5 * np.cos(0.6 * s), np.sin(1.2 * s), 0.3 + 0.05 * np.sin(s)]
    rot = Rotation.from_rotvec(np.c_[0.05 * np.sin(s), 0.05 * np.cos(s), 0.6 * s + np.pi / 2])
    return Trajectory.build(t, pos, rot.as_quat())


def estimate(gt: Trajectory) -> Trajectory:
    """20 Hz, in the odometry frame, with noise."""
    rng = np.random.default_rng(9)
    rows = np.arange(0, len(gt), 5)
    inv = FRAME.inv()
    pos = inv.apply(gt.positions[rows] - SHIFT) + rng.normal(0, 0.01, (rows.size, 3))
    rot = (
        inv
        * Rotation.from_quat(gt.orientations)[rows]
        * Rotation.from_rotvec(rng.normal(0, 0.01, (rows.size, 3)))
    )
    return Trajectory.build(gt.stamps[rows] + 0.001, pos, rot.as_quat())


@pytest.fixture(scope="module")
def trajectories():
    gt = ground_truth()
    return gt, estimate(gt)


# ------------------------------------------------------------------ bag writing (as a recorder would)
def _time(store, stamp: float):
    sec = int(np.floor(stamp))
    return store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((stamp - sec) * 1e9)))


def _header(store, stamp: float, frame: str):
    return store.types["std_msgs/msg/Header"](stamp=_time(store, stamp), frame_id=frame)


def _pose(store, p, q):
    T = store.types
    return T["geometry_msgs/msg/Pose"](
        position=T["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
        orientation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
    )


def rigid_bodies_cdr(stamp: float, robot_pose, valid: bool) -> bytes:
    """RigidBodies serialized by rclpy itself: the bytes a real recorder stores."""
    from rclpy.serialization import serialize_message

    from mocap4r2_interfaces.msg import RigidBodies, RigidBody

    msg = RigidBodies()
    msg.header.stamp.sec = int(np.floor(stamp))
    msg.header.stamp.nanosec = int(round((stamp - np.floor(stamp)) * 1e9))
    msg.header.frame_id = "world"
    for name, (p, q), tracked in (
        ("table", ((1.0, 2.0, 0.7), (0, 0, 0, 1)), True),
        ("robot1", robot_pose, valid),
    ):
        body = RigidBody()
        body.name = name
        body.tracking_valid = tracked
        (body.pose.position.x, body.pose.position.y, body.pose.position.z) = (float(v) for v in p)
        (
            body.pose.orientation.x,
            body.pose.orientation.y,
            body.pose.orientation.z,
            body.pose.orientation.w,
        ) = (float(v) for v in q)
        msg.rigid_bodies.append(body)
    return bytes(serialize_message(msg))


def write_bag(
    path: Path, plugin: StoragePlugin, gt: Trajectory, est: Trajectory, lost_rows=(), shuffle=False
):
    store = typestore()
    T = store.types
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        c_rb = writer.add_connection(
            "/sim/rigid_bodies", "mocap4r2_interfaces/msg/RigidBodies", typestore=store
        )
        c_odom = writer.add_connection("/odom", "nav_msgs/msg/Odometry", typestore=store)
        c_pose = writer.add_connection("/pose", "geometry_msgs/msg/PoseStamped", typestore=store)
        c_tf = writer.add_connection("/tf", "tf2_msgs/msg/TFMessage", typestore=store)
        records = []
        for i in range(len(gt)):
            records.append(
                (
                    gt.stamps[i],
                    c_rb,
                    rigid_bodies_cdr(gt.stamps[i], (gt.positions[i], gt.orientations[i]), i not in lost_rows),
                )
            )
        order = np.arange(len(est))
        if shuffle:  # late messages: recorded after newer ones
            order[10:20] = order[10:20][::-1]
        zeros = np.zeros(36)
        for position, k in enumerate(order):
            stamp, p, q = est.stamps[k], est.positions[k], est.orientations[k]
            header = _header(store, stamp, "odom")
            odom = T["nav_msgs/msg/Odometry"](
                header=header,
                child_frame_id="base_link",
                pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=_pose(store, p, q), covariance=zeros),
                twist=T["geometry_msgs/msg/TwistWithCovariance"](
                    twist=T["geometry_msgs/msg/Twist"](
                        linear=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
                        angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
                    ),
                    covariance=zeros,
                ),
            )
            pose = T["geometry_msgs/msg/PoseStamped"](header=header, pose=_pose(store, p, q))
            edge = T["geometry_msgs/msg/TransformStamped"](
                header=header,
                child_frame_id="base_link",
                transform=T["geometry_msgs/msg/Transform"](
                    translation=T["geometry_msgs/msg/Vector3"](x=p[0], y=p[1], z=p[2]),
                    rotation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
                ),
            )
            other = T["geometry_msgs/msg/TransformStamped"](
                header=_header(store, stamp, "base_link"),
                child_frame_id="camera",
                transform=T["geometry_msgs/msg/Transform"](
                    translation=T["geometry_msgs/msg/Vector3"](x=0.1, y=0.0, z=0.2),
                    rotation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                ),
            )
            tf = T["tf2_msgs/msg/TFMessage"](transforms=[other, edge])
            # recorded in arrival order: a late message carries an older header stamp
            arrival = est.stamps[position] + 0.002
            records.append((arrival + 1e-6 * len(records), c_odom, store.serialize_cdr(odom, c_odom.msgtype)))
            records.append((arrival, c_pose, store.serialize_cdr(pose, c_pose.msgtype)))
            records.append((arrival, c_tf, store.serialize_cdr(tf, c_tf.msgtype)))
        for stamp, connection, raw in records:
            writer.write(connection, int(stamp * 1e9), raw)
    return path


@pytest.fixture(scope="module", params=["sqlite3", "mcap"])
def bag(request, tmp_path_factory, trajectories):
    gt, est = trajectories
    plugin = StoragePlugin.SQLITE3 if request.param == "sqlite3" else StoragePlugin.MCAP
    path = tmp_path_factory.mktemp(request.param) / "run1"
    return write_bag(path, plugin, gt, est, lost_rows=set(range(300, 350)), shuffle=True)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = eval_cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def files(gt: Path, est: Path) -> list[str]:
    """The arguments that evaluate the estimate file ``est`` against the ground truth ``gt``."""
    return ["--gt", str(gt), "--est", str(est)]


def from_bag(
    bag: Path, est_topic: str, body: str | None = "robot1", gt_topic="/sim/rigid_bodies"
) -> list[str]:
    """The arguments that evaluate ``est_topic`` of ``bag`` against the rigid body ``body``
    (None: no --body) of ``gt_topic``."""
    body_args = ["--body", body] if body is not None else []
    return ["--bag", str(bag), "--gt-topic", gt_topic, *body_args, "--est-topic", est_topic]


# ------------------------------------------------------------------ TUM files
def test_tum_round_trip_and_json_equal_to_the_core(tmp_path, trajectories, capsys):
    gt, est = trajectories
    write_tum(tmp_path / "gt.tum", gt)
    write_tum(tmp_path / "est.tum", est)
    back = read_tum(tmp_path / "gt.tum")
    assert np.allclose(back.positions, gt.positions, atol=1e-11) and np.allclose(
        back.stamps, gt.stamps, atol=1e-9
    )
    code, out, _ = run_cli(
        capsys,
        *files(tmp_path / "gt.tum", tmp_path / "est.tum"),
        *("--align", "se3", "--rpe-delta", "0.5", "--rpe-unit", "m", "--json"),
    )
    assert code == 0
    data = json.loads(out)
    expected = evaluate(
        read_tum(tmp_path / "gt.tum"),
        read_tum(tmp_path / "est.tum"),
        EvalOptions(align="se3", rpe_delta=0.5, rpe_unit="m"),
    )
    assert data["samples"] == len(est) == 200
    assert data["ate_rmse"] == pytest.approx(expected.ate_stats.rmse, abs=1e-12)
    assert data["rpe_rot_rmse"] == pytest.approx(expected.rpe_rot_stats.rmse, abs=1e-12)
    # the noise put in: ~1 cm per axis, so ~1.7 cm ATE
    assert 0.012 < data["ate_rmse"] < 0.025
    # every TrajectoryError field, plus median/std/min/sse
    for key in (
        "samples",
        "ate_rmse",
        "ate_mean",
        "ate_max",
        "rpe_trans_rmse",
        "rpe_rot_rmse",
        "aligned",
        "alignment",
        "ate_median",
        "ate_std",
        "ate_min",
        "ate_sse",
    ):
        assert key in data, key
    assert data["aligned"] is True
    q = data["alignment"]["orientation"]
    recovered = Rotation.from_quat([q["x"], q["y"], q["z"], q["w"]])
    assert (recovered.inv() * FRAME).magnitude() < 0.01
    p = data["alignment"]["position"]
    assert np.allclose([p["x"], p["y"], p["z"]], SHIFT, atol=0.01)


def test_tum_with_commas_comments_and_bad_lines(tmp_path, capsys):
    good = tmp_path / "good.txt"
    good.write_text("# stamp x y z qx qy qz qw\n0,0,0,0,0,0,0,1\n\n1.0 1 0 0 0 0 0 1\n")
    assert len(read_tum(good)) == 2
    bad = tmp_path / "bad.txt"
    bad.write_text("0 0 0 0 0 0 0 1\n1 1 0 0 0 0 1\n")
    code, out, err = run_cli(capsys, "--gt", str(bad), "--est", str(good))
    assert code == 1
    assert "bad.txt:2: 7 fields, a TUM line has 8" in err
    bad.write_text("0 0 0 0 0 0 0 1 5\n1 1 0 0 0 0 1\n")  # 9 + 7 fields: 16 values, still wrong
    code, out, err = run_cli(capsys, "--gt", str(bad), "--est", str(good))
    assert code == 1 and "bad.txt:1: 9 fields" in err
    bad.write_text("0 0 0 0 0 0 0 1\n1 1 0 0 0 0 0 x1\n")
    code, _, err = run_cli(capsys, "--gt", str(bad), "--est", str(good))
    assert code == 1 and "bad.txt:2:" in err and "x1" in err
    binary = tmp_path / "photo.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    code, _, err = run_cli(capsys, "--gt", str(binary), "--est", str(good))
    assert code == 1 and "not a text file" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a header\n")
    code, _, err = run_cli(capsys, "--gt", str(empty), "--est", str(good))
    assert code == 1 and "holds no poses" in err
    unsorted = tmp_path / "unsorted.txt"
    unsorted.write_text("1 0 0 0 0 0 0 1\n0 1 0 0 0 0 0 1\n")
    # out of order is sorted with a warning (real datasets have such rows; see
    # test_eval_real_inputs), then evaluated
    code, _, err = run_cli(capsys, "--gt", str(unsorted), "--est", str(good), "--align", "none")
    assert code == 0 and "warning: ground truth: 1 rows are earlier than the row before" in err


def test_errors_are_clear_and_never_tracebacks(tmp_path, capsys, trajectories):
    gt, est = trajectories
    write_tum(tmp_path / "gt.tum", gt)
    static = Trajectory.build(est.stamps, np.zeros((len(est), 3)))
    write_tum(tmp_path / "static.tum", static)
    code, _, err = run_cli(capsys, *files(tmp_path / "gt.tum", tmp_path / "static.tum"))
    assert code == 1 and "estimate positions do not move" in err
    code, _, err = run_cli(capsys, *files(tmp_path / "gt.tum", tmp_path / "nothing.tum"))
    assert code == 1 and "does not exist" in err
    code, _, err = run_cli(capsys, *files(tmp_path / "gt.tum", tmp_path / "static.tum"), "--offset", "100")
    assert code == 1 and "no estimate stamp is within max_diff" in err
    code, _, err = run_cli(capsys, "--gt", str(tmp_path / "gt.tum"))
    assert code == 1 and "no estimate" in err
    code, _, err = run_cli(capsys, *files(tmp_path / "gt.tum", tmp_path / "gt.tum"), "--rpe-delta", "2.5")
    assert code == 1 and "whole number" in err


# ------------------------------------------------------------------ bags
def test_bag_topics_are_read_as_recorded(bag, trajectories):
    gt, est = trajectories
    topics = bag_topics(bag)
    assert topics["/sim/rigid_bodies"] == "mocap4r2_interfaces/msg/RigidBodies"
    body = read_bag(bag, "/sim/rigid_bodies", body="robot1")
    # the 50 untracked samples are not ground truth
    keep = np.setdiff1d(np.arange(len(gt)), np.arange(300, 350))
    assert len(body) == len(keep)
    assert np.allclose(body.stamps, gt.stamps[keep], atol=1e-9)
    assert np.array_equal(body.positions, gt.positions[keep])
    from rosbags.rosbag2 import Reader

    with Reader(bag) as reader:  # in the bag, late messages come after newer ones
        conns = [c for c in reader.connections if c.topic == "/pose"]
        headers = [
            typestore().deserialize_cdr(raw, "geometry_msgs/msg/PoseStamped").header
            for _, _, raw in reader.messages(connections=conns)
        ]
    recorded = [h.stamp.sec + h.stamp.nanosec * 1e-9 for h in headers]
    assert len(recorded) == len(est) and recorded != sorted(recorded)
    for topic, kwargs in (("/odom", {}), ("/pose", {}), ("/tf", {"frames": ("odom", "base_link")})):
        traj = read_bag(bag, topic, **kwargs)
        assert len(traj) == len(est), topic
        assert np.array_equal(traj.positions, est.positions), topic  # sorted back into stamp order
        assert np.allclose(traj.orientations, est.orientations, atol=1e-15), topic


@pytest.mark.parametrize("est_topic,extra", [("/odom", []), ("/tf", ["--est-frames", "odom", "base_link"])])
def test_eval_from_a_bag_equals_the_core_on_the_same_data(bag, trajectories, capsys, est_topic, extra):
    gt, est = trajectories
    code, out, err = run_cli(
        capsys,
        *from_bag(bag, est_topic),
        *extra,
        "--align",
        "posyaw",
        "--association",
        "interpolate",
        "--max-diff",
        "0.02",
        "--rpe-delta",
        "1",
        "--rpe-unit",
        "s",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    keep = np.setdiff1d(np.arange(len(gt)), np.arange(300, 350))
    expected = evaluate(
        gt.take(keep),
        est,
        EvalOptions(align="posyaw", association="interpolate", max_diff=0.02, rpe_delta=1.0, rpe_unit="s"),
    )
    assert data["samples"] == len(expected.association)
    assert len(est) - 12 <= data["samples"] < len(est)  # estimates in the tracking gap are left out
    for key, value in (
        ("ate_rmse", expected.ate_stats.rmse),
        ("ate_max", expected.ate_stats.max),
        ("rpe_trans_rmse", expected.rpe_trans_stats.rmse),
        ("rpe_rot_rmse", expected.rpe_rot_stats.rmse),
    ):
        assert data[key] == pytest.approx(value, abs=1e-12), key


def test_bag_errors_name_what_exists(bag, capsys):
    code, _, err = run_cli(capsys, *from_bag(bag, "/odom", body=None, gt_topic="/nope"))
    assert (
        code == 1
        and "no topic '/nope'" in err
        and "/sim/rigid_bodies (mocap4r2_interfaces/msg/RigidBodies)" in err
    )
    code, _, err = run_cli(capsys, *from_bag(bag, "/odom", body="robot9"))
    assert code == 1 and "no body named 'robot9'" in err and "robot1" in err and "table" in err
    code, _, err = run_cli(capsys, *from_bag(bag, "/odom", body=None))
    assert code == 1 and "body name" in err
    code, _, err = run_cli(capsys, *from_bag(bag, "/tf"), "--est-frames", "map", "base_link")
    assert code == 1 and "no transform map -> base_link" in err
    code, _, err = run_cli(capsys, *from_bag(Path(str(bag) + "_missing"), "/b", body=None, gt_topic="/a"))
    assert code == 1 and "does not exist" in err


def test_plots_json_file_and_summary(tmp_path, bag, capsys):
    plots = tmp_path / "plots"
    out_json = tmp_path / "result.json"
    code, out, err = run_cli(
        capsys,
        *from_bag(bag, "/pose"),
        "--align",
        "se3",
        "--plot",
        str(plots),
        "--json",
        str(out_json),
    )
    assert code == 0, err
    assert "ATE rmse" in out and "plots:" in out
    assert json.loads(out_json.read_text())["aligned"] is True
    for name in PLOT_FILES:
        png = plots / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, name


def test_command_line_entry_points(tmp_path, trajectories):
    """`python -m mocap4r2_tools.eval_command` and the `mocap4r2 eval` verb, as real processes."""
    gt, est = trajectories
    write_tum(tmp_path / "gt.tum", gt)
    write_tum(tmp_path / "est.tum", est)
    args = [*files(tmp_path / "gt.tum", tmp_path / "est.tum"), "--json"]
    module = subprocess.run(
        [sys.executable, "-m", "mocap4r2_tools.eval_command", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert module.returncode == 0, module.stderr
    verb = shutil.which("mocap4r2") or str(ROOT / "install" / "mocap4r2_tools" / "bin" / "mocap4r2")
    if not os.path.exists(verb):
        pytest.fail("the mocap4r2 command is not installed: run `make setup`")
    cli = subprocess.run([verb, "eval", *args], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(module.stdout)["ate_rmse"] == json.loads(cli.stdout)["ate_rmse"] > 0
    progress = subprocess.run(
        [sys.executable, "-m", "mocap4r2_tools.eval_command", *args[:-1], "--progress", "always"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert progress.returncode == 0 and "evaluating" in progress.stderr


# ------------------------------------------------------------------ time offset
def test_offset_auto_finds_and_reports_the_offset(tmp_path, trajectories, capsys):
    """An estimate stamped 37 ms late: --offset auto finds -0.037 s (the estimate here has
    1 cm noise at 20 Hz for 10 s, so within 2 ms; the 0.5 ms target is test_time_offset's),
    --json gives it as top-level t_offset, the summary says it, and the ATE is that of
    the same estimate stamped right."""
    gt, est = trajectories
    late = est.with_stamps(est.stamps + 0.036)  # estimate() already adds 1 ms
    write_tum(tmp_path / "gt.tum", gt)
    write_tum(tmp_path / "late.tum", late)
    write_tum(tmp_path / "right.tum", est.with_stamps(est.stamps - 0.001))
    base = ["--gt", str(tmp_path / "gt.tum"), "--association", "interpolate"]
    code, out, _ = run_cli(capsys, *base, "--est", str(tmp_path / "late.tum"), "--offset", "auto", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["t_offset"] == pytest.approx(-0.037, abs=0.002)
    assert data["options"]["offset"] == data["t_offset"] == data["time_offset"]["offset"]
    # this ground truth turns at a steady rate: only its speed tells the offset
    assert data["time_offset"]["signals"] == ["speed"]
    code, out, _ = run_cli(capsys, *base, "--est", str(tmp_path / "right.tum"), "--json")
    right = json.loads(out)
    assert right["t_offset"] == 0.0
    assert data["ate_rmse"] == pytest.approx(right["ate_rmse"], rel=0.02)
    code, out, _ = run_cli(capsys, *base, "--est", str(tmp_path / "late.tum"), "--offset", "AUTO")
    assert code == 0 and "time offset (auto)" in out and "ms added to the estimate stamps" in out
    code, out, _ = run_cli(capsys, *base, "--est", str(tmp_path / "late.tum"), "--offset", "0.02", "--json")
    assert json.loads(out)["t_offset"] == 0.02 and "time_offset" not in json.loads(out)


def test_offset_auto_refuses_what_it_cannot_see(tmp_path, trajectories, capsys):
    gt, est = trajectories
    still = Trajectory.build(gt.stamps, np.ones((len(gt), 3)))
    write_tum(tmp_path / "still.tum", still)
    write_tum(tmp_path / "still_est.tum", still.take(slice(None, None, 5)))
    code, out, err = run_cli(
        capsys, *files(tmp_path / "still.tum", tmp_path / "still_est.tum"), "--offset", "auto"
    )
    assert code == 1 and out == ""
    assert "does not move enough for a time offset to be seen" in err and "no offset applied" in err
    write_tum(tmp_path / "gt.tum", gt)
    write_tum(tmp_path / "far.tum", est.with_stamps(est.stamps + 0.6))
    far = files(tmp_path / "gt.tum", tmp_path / "far.tum")
    code, _, err = run_cli(capsys, *far, "--offset", "auto", "--offset-window", "0.3")
    assert code == 1 and "edge of the search window" in err
    code, _, err = run_cli(capsys, *far, "--offset", "auto", "--offset-window", "-1")
    assert code == 1 and "--offset-window must be > 0" in err
    for bad, reason in (("soon", "expected seconds or auto"), ("nan", "must be finite")):
        with pytest.raises(SystemExit) as exit_info:
            eval_cli.main([*far, "--offset", bad])
        assert exit_info.value.code == 2 and reason in capsys.readouterr().err
