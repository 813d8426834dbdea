"""`mocap4r2 calibrate` on files: TUM files (with NaN rows) and a rosbag2 bag of
PoseStamped topics (written by rosbags, read back by the trajectory tools' reader); the
JSON is parsed, the static_transform_publisher line and the URDF <origin> are read back
and rebuild the known transform, bad input exits 1 with the reason, and the verb is
registered in the `mocap4r2` command."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer
from scipy.spatial.transform import Rotation

from mocap4r2_tools import calibrate_command
from mocap4r2_tools.calibration.synthetic import CAMERA, Corruption, arm_scene, drone_body, drone_scene
from mocap4r2_tools.trajectory.io import typestore


def write_tum(path, stamps, positions, orientations) -> None:
    rows = np.column_stack((stamps, positions, orientations))
    np.savetxt(path, rows, fmt="%.9f", header="stamp tx ty tz qx qy qz qw")


@pytest.fixture(scope="module")
def drone_files(tmp_path_factory):
    """A drone body (A) and its camera (B, 40 ms late, noisy, 5 % outliers, 5 NaN rows)."""
    scene = drone_scene(seconds=20.0, rate_a=100.0, rate_b=50.0, corruption=Corruption(seed=11))
    folder = tmp_path_factory.mktemp("tum")
    a, b = scene.a.trajectory, scene.b.trajectory
    write_tum(folder / "body.tum", a.stamps, a.positions, a.orientations)
    positions = b.positions.copy()
    positions[[3, 50, 51, 400, 700]] = np.nan
    write_tum(folder / "camera.tum", b.stamps, positions, b.orientations)
    return folder


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = calibrate_command.main([*argv, "--max-pairs", "300"])
    out, err = capsys.readouterr()
    return code, out, err


def parse_publisher_line(line: str) -> dict[str, str]:
    words = line.split()
    assert words[:4] == ["ros2", "run", "tf2_ros", "static_transform_publisher"]
    return {words[k].lstrip("-"): words[k + 1] for k in range(4, len(words), 2)}


def test_json_transform_publisher_line_and_urdf_origin_give_the_camera_mount(capsys, drone_files):
    code, out, err = run(
        capsys,
        "hand_eye",
        "--a",
        str(drone_files / "body.tum"),
        "--b",
        str(drone_files / "camera.tum"),
        "--a-frames",
        "world",
        "drone1",
        "--b-frames",
        "map",
        "cam0",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["kind"] == "hand_eye" and data["dropped_b"] == 5 and data["dropped_a"] == 0
    assert abs(data["offset_s"] - 0.040) < 0.002
    (x,) = data["transforms"]
    assert (x["parent"], x["child"]) == ("drone1", "cam0")
    assert np.allclose(x["translation"], CAMERA.translation, atol=1.5e-3)
    assert all(0 < s < 2e-3 for s in x["sigma_translation_m"])
    args = parse_publisher_line(x["static_transform_publisher"])
    assert (args["frame-id"], args["child-frame-id"]) == ("drone1", "cam0")
    assert np.allclose([float(args[k]) for k in ("x", "y", "z")], CAMERA.translation, atol=1.5e-3)
    q = np.array([float(args[k]) for k in ("qx", "qy", "qz", "qw")])
    angle = (Rotation.from_quat(q).inv() * Rotation.from_quat(CAMERA.rotation)).magnitude()
    assert math.degrees(angle) < 0.1
    origin = ET.fromstring(x["urdf_origin"])
    assert origin.tag == "origin"
    assert np.allclose([float(v) for v in origin.get("xyz", "").split()], CAMERA.translation, atol=1.5e-3)
    rpy = [float(v) for v in origin.get("rpy", "").split()]
    angle = (Rotation.from_euler("xyz", rpy).inv() * Rotation.from_quat(CAMERA.rotation)).magnitude()
    assert math.degrees(angle) < 0.1


def test_printed_result_and_residual_plots(capsys, drone_files, tmp_path):
    code, out, err = run(
        capsys,
        "hand_eye",
        "--a",
        str(drone_files / "body.tum"),
        "--b",
        str(drone_files / "camera.tum"),
        "--plot",
        str(tmp_path / "plots"),
        "--json",
        str(tmp_path / "result.json"),
    )
    assert code == 0, err
    assert "ros2 run tf2_ros static_transform_publisher" in out and "<origin xyz=" in out
    assert "X: camera in body" in out and "+- " in out
    assert "left out (NaN or untracked): 0 poses of A, 5 of B" in out
    assert json.loads((tmp_path / "result.json").read_text())["pairs"] == 300
    plot = tmp_path / "plots" / "calibration_hand_eye_residuals.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_degenerate_motion_and_missing_input_exit_1_with_the_reason(capsys, tmp_path):
    times = np.arange(0.0, 10.0, 0.02)
    body = drone_body(times)
    yaw = np.column_stack((np.zeros((len(times), 2)), np.sin(times / 2), np.cos(times / 2)))
    write_tum(tmp_path / "a.tum", times, body.translation, yaw)
    write_tum(tmp_path / "b.tum", times, body.translation + 0.1, yaw)
    code, out, err = run(
        capsys, "robot_world", "--a", str(tmp_path / "a.tum"), "--b", str(tmp_path / "b.tum")
    )
    assert code == 1 and out == ""
    assert "rotation about one axis only" in err and "perpendicular to z" in err
    code, _, err = run(capsys, "hand_eye", "--a", str(tmp_path / "a.tum"))
    assert code == 1 and "no stream B" in err
    code, _, err = run(capsys, "hand_eye", "--a", str(tmp_path / "a.tum"), "--b", str(tmp_path / "none.tum"))
    assert code == 1 and "does not exist" in err
    code, _, err = run(
        capsys, "hand_eye", "--a", str(tmp_path / "a.tum"), "--b", str(tmp_path / "b.tum"), "--offset", "soon"
    )
    assert code == 1 and "expected seconds or auto" in err


def _time(store, stamp: float):
    sec = int(np.floor(stamp))
    return store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((stamp - sec) * 1e9)))


def test_robot_world_from_a_bag_of_pose_topics(capsys, tmp_path):
    """Flange poses and the mocap's tool poses recorded as PoseStamped in one MCAP bag,
    three of the tool's poses NaN (left out and counted)."""
    scene = arm_scene(seconds=20.0, rate_a=50.0, rate_b=50.0, corruption=Corruption(seed=4))
    store = typestore()
    T = store.types
    path = tmp_path / "session1"
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        for topic, traj, frame in (
            ("/arm/ee_pose", scene.a.trajectory, "base_link"),
            ("/mocap/tool", scene.b.trajectory, "world"),
        ):
            connection = writer.add_connection(topic, "geometry_msgs/msg/PoseStamped", typestore=store)
            for k, (stamp, p, q) in enumerate(zip(traj.stamps, traj.positions, traj.orientations)):
                if topic == "/mocap/tool" and k in (10, 200, 500):
                    p = (float("nan"),) * 3
                msg = T["geometry_msgs/msg/PoseStamped"](
                    header=T["std_msgs/msg/Header"](stamp=_time(store, stamp + 100.0), frame_id=frame),
                    pose=T["geometry_msgs/msg/Pose"](
                        position=T["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
                        orientation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
                    ),
                )
                writer.write(
                    connection, int((stamp + 100.0) * 1e9), store.serialize_cdr(msg, connection.msgtype)
                )
    code, out, err = run(
        capsys,
        "robot_world",
        "--bag",
        str(path),
        "--a-topic",
        "/arm/ee_pose",
        "--b-topic",
        "/mocap/tool",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    x, base = data["transforms"]
    assert (x["parent"], x["child"]) == ("flange", "tool")
    assert (base["parent"], base["child"]) == ("world", "base_link")
    assert np.allclose(x["translation"], scene.x.translation, atol=3e-3)
    base_in_mocap = scene.y.inverse()
    assert np.allclose(base["translation"], base_in_mocap.translation, atol=5e-3)
    assert all(0 < s < 5e-3 for s in base["sigma_translation_m"])
    assert abs(data["offset_s"] - 0.040) < 0.003
    assert (data["dropped_a"], data["dropped_b"]) == (0, 3)


def test_the_verb_is_registered_in_the_mocap4r2_command():
    exe = shutil.which("mocap4r2")
    if exe is None:
        pytest.fail("the mocap4r2 command is not installed (make setup)")
    done = subprocess.run([exe, "calibrate", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "hand_eye" in done.stdout and "--online" in done.stdout


def test_hand_eye_from_a_recorded_session_rigid_body_and_tf_pairs(capsys, tmp_path):
    """A session's RigidBodies topic (serialized by rclpy, as session_recorder stores it;
    the drone untracked for a second) as A, the camera's poses as TF pairs map -> camera as B."""
    from rclpy.serialization import serialize_message

    from mocap4r2_interfaces.msg import RigidBodies, RigidBody

    scene = drone_scene(seconds=20.0, rate_a=50.0, rate_b=50.0, corruption=Corruption(seed=9))
    store = typestore()
    T = store.types
    path = tmp_path / "session2"
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        bodies = writer.add_connection(
            "/mocap/rigid_bodies", "mocap4r2_interfaces/msg/RigidBodies", typestore=store
        )
        tf = writer.add_connection("/tf", "tf2_msgs/msg/TFMessage", typestore=store)
        a = scene.a.trajectory
        for k, (t, p, q) in enumerate(zip(a.stamps, a.positions, a.orientations)):
            stamp = t + 100.0  # bag times are unsigned
            msg = RigidBodies()
            msg.header.stamp.sec, msg.header.stamp.nanosec = int(stamp), int(round((stamp % 1) * 1e9))
            body = RigidBody(name="drone1", tracking_valid=not 300 <= k < 350)
            body.pose.position.x, body.pose.position.y, body.pose.position.z = (float(v) for v in p)
            o = body.pose.orientation
            o.x, o.y, o.z, o.w = (float(v) for v in q)
            msg.rigid_bodies = [RigidBody(name="table", tracking_valid=True), body]
            writer.write(bodies, int(stamp * 1e9), serialize_message(msg))
        b = scene.b.trajectory
        for t, p, q in zip(b.stamps, b.positions, b.orientations):
            stamp = t + 100.0
            edge = T["geometry_msgs/msg/TransformStamped"](
                header=T["std_msgs/msg/Header"](stamp=_time(store, stamp), frame_id="map"),
                child_frame_id="camera",
                transform=T["geometry_msgs/msg/Transform"](
                    translation=T["geometry_msgs/msg/Vector3"](x=p[0], y=p[1], z=p[2]),
                    rotation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
                ),
            )
            msg = T["tf2_msgs/msg/TFMessage"](transforms=[edge])
            writer.write(tf, int(stamp * 1e9), store.serialize_cdr(msg, tf.msgtype))
    code, out, err = run(
        capsys,
        "hand_eye",
        "--bag",
        str(path),
        "--a-topic",
        "/mocap/rigid_bodies",
        "--a-body",
        "drone1",
        "--b-topic",
        "/tf",
        "--b-tf",
        "map",
        "camera",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    (x,) = data["transforms"]
    assert np.allclose(x["translation"], CAMERA.translation, atol=2e-3)
    assert abs(data["offset_s"] - 0.040) < 0.003
    assert (data["dropped_a"], data["dropped_b"]) == (50, 0)  # the untracked samples, counted
