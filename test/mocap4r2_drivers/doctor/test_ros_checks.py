"""The doctor's ROS checks: the environment, the announced systems' states, and a QoS
mismatch made real (a reliable subscriber on a best-effort publisher, over real DDS)."""

from __future__ import annotations

import uuid

from lifecycle_msgs.msg import State
from rclpy.qos import QoSProfile, ReliabilityPolicy
from support import wait_for  # test/fixtures
from tf2_msgs.msg import TFMessage

from mocap4r2_drivers.doctor.report import Status
from mocap4r2_drivers.doctor.ros_checks import (
    check_environment,
    check_publishers,
    check_qos,
    check_systems,
    data_topics,
)
from mocap4r2_interfaces.msg import MocapSystemInfo, RigidBodies


def test_environment():
    ok = check_environment(
        {"ROS_DOMAIN_ID": "7", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}, "rmw_fastrtps_cpp"
    )
    # the domain id is judged; the discovery range and the RMW are shown, not judged
    assert [c.status for c in ok] == [Status.PASS, Status.INFO, Status.INFO]
    assert "rmw_fastrtps_cpp" in ok[2].evidence
    bad = check_environment({"ROS_DOMAIN_ID": "lab"}, "rmw_fastrtps_cpp")
    assert bad[0].status is Status.FAIL and "'lab'" in bad[0].evidence
    mixed = check_environment(
        {"ROS_LOCALHOST_ONLY": "1", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}, "rmw_fastrtps_cpp"
    )
    assert mixed[1].status is Status.WARN and "unset ROS_LOCALHOST_ONLY" in mixed[1].fix


def _info(name: str, label: str, state_id: int) -> MocapSystemInfo:
    return MocapSystemInfo(
        system=name, type="optitrack", frame_rate=120.0, state=State(id=state_id, label=label)
    )


def test_system_states_name_their_fix():
    checks = check_systems(
        {
            "/lab/a": _info("/lab/a", "active", State.PRIMARY_STATE_ACTIVE),
            "/lab/b": _info("/lab/b", "unconfigured", State.PRIMARY_STATE_UNCONFIGURED),
            "/lab/c": _info("/lab/c", "inactive", State.PRIMARY_STATE_INACTIVE),
        }
    )
    assert [c.status for c in checks] == [Status.PASS, Status.WARN, Status.WARN]
    assert checks[1].evidence.startswith("unconfigured") and "mocap4r2 start" in checks[1].fix
    none = check_systems({})
    assert none[0].status is Status.WARN and "ROS_DOMAIN_ID" in none[0].fix


def test_reliable_subscriber_on_best_effort_publisher(ros):
    topic = f"/doctor_{uuid.uuid4().hex[:6]}/rigid_bodies"
    best_effort = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
    ros.publisher(topic, RigidBodies, best_effort)
    ros.subscribe(topic, RigidBodies, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    wait_for(
        lambda: (
            ros.node.get_publishers_info_by_topic(topic) and ros.node.get_subscriptions_info_by_topic(topic)
        ),
        10.0,
        what="the test's own endpoints in the graph",
    )
    assert topic in data_topics(ros.node, {})
    [check] = check_qos(ros.node, [topic])
    assert check.status is Status.FAIL
    assert "RELIABLE" in check.evidence and "BEST_EFFORT" in check.evidence
    assert "qos_profile_sensor_data" in check.fix and "qos_reliable: true" in check.fix

    matching = f"/doctor_{uuid.uuid4().hex[:6]}/rigid_bodies"
    ros.publisher(matching, RigidBodies, best_effort)
    ros.subscribe(matching, RigidBodies, best_effort)
    wait_for(lambda: ros.node.get_subscriptions_info_by_topic(matching), 10.0, what="endpoints")
    [check] = check_qos(ros.node, [matching])
    assert check.status is Status.PASS and "compatible" in check.evidence


def test_gazebo_pose_topics_need_a_publisher(ros):
    bridged = f"/model/doctor_{uuid.uuid4().hex[:6]}/pose"
    missing = f"/model/doctor_{uuid.uuid4().hex[:6]}/pose"
    ros.publisher(bridged, TFMessage)  # stands for ros_gz_bridge's output
    wait_for(lambda: ros.node.get_publishers_info_by_topic(bridged), 10.0, what="the publisher in the graph")
    found, absent = check_publishers(ros.node, [bridged, missing], "Gazebo poses", "bridge it")
    assert found.status is Status.PASS and ros.node.get_name() in found.evidence
    assert absent.status is Status.FAIL and absent.evidence == f"no node publishes {missing}"
    assert absent.fix == "bridge it"
