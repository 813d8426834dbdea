"""Every mocap4r2 message and the service cross DDS between two processes intact.

Each message is filled with non-default values in every field (arrays of several
elements, nested messages, strings with non-ASCII text), sent to a separate echo
process and compared field by field with what comes back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, Pose, Quaternion
from lifecycle_msgs.msg import State
from std_msgs.msg import Header
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_round_trip

from mocap4r2_interfaces import msg as m
from mocap4r2_interfaces.srv import SetOrigin

ECHO = Path(__file__).resolve().parents[1] / "fixtures" / "echo_node.py"


def header(i: int) -> Header:
    return Header(stamp=Time(sec=1_700_000_000 + i, nanosec=123_456_789 - i), frame_id=f"world_{i}")


def pose(i: int) -> Pose:
    return Pose(
        position=Point(x=1.5 + i, y=-2.25 * i, z=3.125), orientation=Quaternion(x=0.5, y=-0.5, z=0.5, w=0.5)
    )


def marker(i: int) -> m.Marker:
    return m.Marker(
        id=100 + i,
        name=f"robot1:marker_{i}_é",
        position=Point(x=0.1 * i, y=-0.2, z=7.0 + i),
        occluded=i % 2 == 1,
        residual=0.25 + i,
    )


def rigid_body(i: int) -> m.RigidBody:
    return m.RigidBody(
        id=10 + i,
        name=f"body{i}",
        tracking_valid=i % 2 == 0,
        pose=pose(i),
        mean_error=0.5 + i,
        markers=[marker(j) for j in range(3 + i)],
    )


def segment(i: int) -> m.Segment:
    return m.Segment(
        id=i + 1,
        name=f"seg{i}",
        parent_id=i if i else m.Segment.NO_PARENT,
        tracking_valid=i != 2,
        pose=pose(i),
    )


def skeleton(i: int) -> m.Skeleton:
    return m.Skeleton(
        id=i + 4, name=f"walker{i}", tracking_valid=i == 0, segments=[segment(j) for j in range(4)]
    )


def samples() -> dict[str, object]:
    return {
        "Marker": marker(3),
        "Markers": m.Markers(header=header(1), frame_number=2**40 + 5, markers=[marker(i) for i in range(5)]),
        "RigidBody": rigid_body(2),
        "RigidBodies": m.RigidBodies(
            header=header(2), frame_number=123456789012, rigid_bodies=[rigid_body(i) for i in range(3)]
        ),
        "Segment": segment(1),
        "Skeleton": skeleton(1),
        "Skeletons": m.Skeletons(
            header=header(3), frame_number=77, skeletons=[skeleton(i) for i in range(2)]
        ),
        "MocapSystemInfo": m.MocapSystemInfo(
            system="/lab/optitrack_system",
            type="optitrack",
            frame_id="mocap",
            frame_rate=240.5,
            state=State(id=State.PRIMARY_STATE_ACTIVE, label="active"),
            session_id="trial-07",
            topics=["/lab/markers", "/lab/rigid_bodies", "/tf"],
            topic_types=[
                "mocap4r2_interfaces/msg/Markers",
                "mocap4r2_interfaces/msg/RigidBodies",
                "tf2_msgs/msg/TFMessage",
            ],
        ),
        "Control": m.Control(
            command=m.Control.STOP,
            request_id="req-1",
            session_id="trial-07",
            requester="/cli",
            systems=["/a/sim", "/b/sim", "/emg"],
            stamp=Time(sec=5, nanosec=6),
        ),
        "ControlAck": m.ControlAck(
            request_id="req-1",
            session_id="trial-07",
            system="/a/sim",
            command=m.Control.STOP,
            success=False,
            message="deactivate failed",
            stamp=Time(sec=7, nanosec=8),
        ),
        "TrajectoryError": m.TrajectoryError(
            header=header(4),
            samples=4321,
            ate_rmse=0.1,
            ate_mean=0.09,
            ate_max=0.4,
            rpe_trans_rmse=0.02,
            rpe_rot_rmse=0.003,
            aligned=True,
            alignment=pose(5),
        ),
    }


def test_constants_match_the_specification():
    assert m.Marker.UNKNOWN_ID == -1
    assert m.RigidBody.UNKNOWN_ID == -1
    assert m.Skeleton.UNKNOWN_ID == -1
    assert m.Segment.NO_PARENT == -1
    assert (m.Control.START, m.Control.STOP) == (0, 1)


def test_field_types_match_the_specification():
    assert m.Marker.get_fields_and_field_types() == {
        "id": "int32",
        "name": "string",
        "position": "geometry_msgs/Point",
        "occluded": "boolean",
        "residual": "float",
    }
    assert m.RigidBody.get_fields_and_field_types() == {
        "id": "int32",
        "name": "string",
        "tracking_valid": "boolean",
        "pose": "geometry_msgs/Pose",
        "mean_error": "float",
        "markers": "sequence<mocap4r2_interfaces/Marker>",
    }
    assert m.Markers.get_fields_and_field_types()["frame_number"] == "uint64"
    assert m.MocapSystemInfo.get_fields_and_field_types() == {
        "system": "string",
        "type": "string",
        "frame_id": "string",
        "frame_rate": "double",
        "state": "lifecycle_msgs/State",
        "session_id": "string",
        "topics": "sequence<string>",
        "topic_types": "sequence<string>",
    }
    assert m.ControlAck.get_fields_and_field_types()["stamp"] == "builtin_interfaces/Time"
    assert list(m.TrajectoryError.get_fields_and_field_types()) == [
        "header",
        "samples",
        "ate_rmse",
        "ate_mean",
        "ate_max",
        "rpe_trans_rmse",
        "rpe_rot_rmse",
        "aligned",
        "alignment",
    ]
    assert SetOrigin.Request.get_fields_and_field_types() == {
        "use_current": "boolean",
        "origin": "geometry_msgs/Pose",
    }
    assert SetOrigin.Response.get_fields_and_field_types() == {"success": "boolean", "message": "string"}


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    from support import ProcessRunner

    runner = ProcessRunner(tmp_path_factory.mktemp("echo"))
    proc = runner.start_command([sys.executable, str(ECHO)], label="echo")
    assert proc.wait_log("echo ready", timeout=WAIT), proc.log()
    yield proc
    runner.stop_all()


@pytest.mark.parametrize("name", list(samples()))
def test_message_round_trip_between_processes(ros, echo, name):
    sent = samples()[name]
    cls = type(sent)
    received = ros.subscribe(f"/roundtrip/out/{name}", cls)
    pub = ros.publisher(f"/roundtrip/in/{name}", cls)

    # publish until the echo's subscription has matched ours and the message returns
    wait_round_trip(
        lambda: pub.publish(sent), received.snapshot, WAIT, what=f"{name} back from the echo process"
    )
    got = received.wait_for(timeout=WAIT)
    assert got == sent
    assert got is not sent


def test_set_origin_service_between_processes(ros, echo):
    request = SetOrigin.Request(use_current=False, origin=pose(3))
    response = ros.call(SetOrigin, "/roundtrip/set_origin", request, timeout=WAIT)
    assert response.success is True
    assert response.message == "4.5,-6.75,3.125,0.5"
    response = ros.call(SetOrigin, "/roundtrip/set_origin", SetOrigin.Request(use_current=True))
    assert response.success is False
