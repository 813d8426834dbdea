"""worldmodel_server end to end: simulated_system streams a scene over real DDS, the
installed worldmodel_server models its bodies; topics and services are used from the
test's node as a hector_object_tracker or a perception pipeline would."""

from __future__ import annotations

import math
import time

import pytest
import yaml
from geometry_msgs.msg import TransformStamped
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from tf2_msgs.msg import TFMessage

from hector_worldmodel_msgs.msg import Object, ObjectModel, ObjectState, PosePercept
from hector_worldmodel_msgs.srv import AddObject, GetObjectModel, SetObjectName, SetObjectState, VerifyPercept
from mocap4r2_control.tf_out import TF_STATIC_QOS
from mocap4r2_control.timebase import stamp_to_seconds
from mocap4r2_interfaces.msg import RigidBodies

TOOLS = "mocap4r2_tools"
NS = "/wm"
CUP = (1.0, 2.0, 0.5)


@pytest.fixture(scope="module")
def scene_path(tmp_path_factory):
    scene = {
        "seed": 3,
        "rate": 100.0,
        "latency": 0.002,
        "latency_jitter": 0.0,
        "noise": 0.0,
        "occlusion": 0.0,
        "dropped_frames": 0.0,
        "unlabeled_markers": 0,
        "rigid_bodies": [
            {"name": "cup", "id": 1, "trajectory": {"type": "static", "position": list(CUP), "yaw": 0.0}},
            {
                "name": "robot1",
                "id": 2,
                "trajectory": {"type": "circle", "center": [0, 0, 0.2], "radius": 1.0, "period": 10.0},
            },
            {
                "name": "blinker",
                "id": 3,
                "trajectory": {"type": "static", "position": [0, -1, 0], "yaw": 0.0},
                "tracking_loss": {"every": 3.0, "duration": 1.5},
            },
        ],
    }
    path = tmp_path_factory.mktemp("wm") / "scene.yaml"
    path.write_text(yaml.safe_dump(scene))
    return path


@pytest.fixture
def world(procs, scene_path):
    sim = procs.start(
        "mocap4r2_drivers",
        "simulated_system",
        name="sim",
        namespace=NS,
        params={"scene": str(scene_path), "autostart": True},
    )
    wm = procs.start(
        TOOLS,
        "worldmodel_server",
        name="worldmodel_server",
        namespace=NS,
        params={
            "rigid_bodies_topics": [f"{NS}/rigid_bodies"],
            "objects": [
                "{body: cup, class_id: cup, name: Red cup}",
                "{body: robot1, class_id: robot, object_id: r1}",
            ],
            "timeout": 0.5,
            "support_window": 1.0,
            "verify_distance": 0.3,
            "update_rate": 10.0,
            "percept_rate": 10.0,
        },
    )
    return sim, wm


def model_of(ros) -> dict[str, Object]:
    response = ros.call(
        GetObjectModel, f"{NS}/worldmodel/get_object_model", GetObjectModel.Request(), timeout=30
    )
    return {o.info.object_id: o for o in response.model.objects}


def wait_model(ros, predicate, describe: str, timeout: float = 30.0) -> dict[str, Object]:
    deadline = time.monotonic() + timeout
    last = {}
    while time.monotonic() < deadline:
        last = model_of(ros)
        if predicate(last):
            return last
        time.sleep(0.1)
    raise AssertionError(
        f"{describe} not reached in {timeout} s; last model: "
        f"{[(k, o.state.state, o.info.name) for k, o in last.items()]}"
    )


def percept(class_id: str, frame: str, xyz) -> VerifyPercept.Request:
    request = VerifyPercept.Request()
    request.percept.header.frame_id = frame
    request.percept.info.class_id = class_id
    p = request.percept.pose.pose.position
    p.x, p.y, p.z = (float(v) for v in xyz)
    request.percept.pose.pose.orientation.w = 1.0
    return request


def verify(ros, request) -> int:
    return ros.call(VerifyPercept, f"{NS}/worldmodel/verify_percept", request, timeout=30).response


def test_objects_topics_support_and_states(ros, world):
    _, wm = world
    objects = ros.subscribe(f"{NS}/worldmodel/object", Object)
    percepts = ros.subscribe(f"{NS}/worldmodel/pose_percept", PosePercept)
    model = wait_model(ros, lambda m: {"cup", "r1", "blinker"} <= set(m), "cup, r1 and blinker modelled")
    cup = model["cup"]
    assert (cup.info.class_id, cup.info.name, cup.header.frame_id) == ("cup", "Red cup", "world")
    assert (model["r1"].info.class_id, model["r1"].info.name) == ("robot", "r1")
    assert model["blinker"].info.class_id == "mocap_body"  # not configured: the default class
    p = cup.pose.pose.position
    assert (p.x, p.y, p.z) == pytest.approx(CUP, abs=1e-6)
    # always tracked: support = log-odds of the clipped ratio 0.99
    wait_model(ros, lambda m: m["cup"].info.support == pytest.approx(math.log(99), rel=1e-4), "cup support")
    # the blinker is lost for 1.5 s every 3 s: INACTIVE after 0.5 s, ACTIVE when back
    objects.wait_for(lambda o: o.info.object_id == "blinker" and o.state.state == ObjectState.INACTIVE, 30)
    objects.wait_for(
        lambda o: (
            o.info.object_id == "blinker"
            and o.state.state == ObjectState.ACTIVE
            and o.info.support < math.log(99) - 0.1
        ),
        30,
    )
    # the latched model reaches a late subscriber
    late = ros.subscribe(
        f"{NS}/worldmodel/objects",
        ObjectModel,
        QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        ),
    )
    assert "cup" in [o.info.object_id for o in late.wait_for(timeout=30).objects]
    # a PosePercept per tracked body for an external object tracker
    got = percepts.wait_for(lambda m: m.info.object_id == "cup", 30)
    assert got.info.class_id == "cup" and got.header.frame_id == "world"
    assert got.info.class_support == pytest.approx(math.log(99), rel=1e-3)
    assert (got.pose.pose.position.x, got.pose.pose.position.y) == pytest.approx(CUP[:2], abs=1e-6)
    assert wm.alive()


def test_verify_percept_true_false_and_unrelated_frames(ros, world):
    wait_model(ros, lambda m: "cup" in m and m["cup"].state.state == ObjectState.ACTIVE, "cup ACTIVE")
    assert verify(ros, percept("cup", "world", (1.1, 2.05, 0.5))) == VerifyPercept.Response.CONFIRM
    assert verify(ros, percept("cup", "world", (3.0, 2.0, 0.5))) == VerifyPercept.Response.DISCARD
    assert verify(ros, percept("robot", "world", CUP)) == VerifyPercept.Response.DISCARD  # wrong class here
    assert verify(ros, percept("cup", "camera", (0.0, 0.0, 1.0))) == VerifyPercept.Response.UNKNOWN
    # a camera 1 m above the cup looking down (rotated 180 deg about x): the cup 1 m along its z
    static = ros.publisher("/tf_static", TFMessage, TF_STATIC_QOS)
    edge = TransformStamped()
    edge.header.frame_id, edge.child_frame_id = "world", "camera"
    edge.transform.translation.x, edge.transform.translation.y, edge.transform.translation.z = 1.0, 2.0, 1.5
    edge.transform.rotation.x, edge.transform.rotation.w = 1.0, 0.0
    static.publish(TFMessage(transforms=[edge]))
    deadline = time.monotonic() + 30
    answer = None
    while time.monotonic() < deadline:
        answer = verify(ros, percept("cup", "camera", (0.05, 0.0, 1.0)))
        if answer != VerifyPercept.Response.UNKNOWN:
            break
        time.sleep(0.2)
    assert answer == VerifyPercept.Response.CONFIRM
    assert verify(ros, percept("cup", "camera", (0.0, 0.0, -1.0))) == VerifyPercept.Response.DISCARD


def test_services_change_state_and_name_and_refuse_bad_requests(ros, world):
    _, wm = world
    wait_model(ros, lambda m: "cup" in m and "r1" in m, "cup and r1 modelled")
    request = SetObjectState.Request(object_id="cup", new_state=ObjectState(state=ObjectState.CONFIRMED))
    ros.call(SetObjectState, f"{NS}/worldmodel/set_object_state", request)
    frozen = wait_model(ros, lambda m: m["cup"].state.state == ObjectState.CONFIRMED, "cup CONFIRMED")["cup"]
    ros.call(
        SetObjectName, f"{NS}/worldmodel/set_object_name", SetObjectName.Request(object_id="r1", name="Robby")
    )
    wait_model(ros, lambda m: m["r1"].info.name == "Robby", "r1 renamed")
    # a CONFIRMED object is no longer updated: frames 0.3 s newer arrive, its stamp stays
    frames = ros.subscribe(f"{NS}/rigid_bodies", RigidBodies)
    frozen_at = stamp_to_seconds(frozen.header.stamp)
    frames.wait_for(lambda m: stamp_to_seconds(m.header.stamp) > frozen_at + 0.3, 30)
    wait_model(
        ros, lambda m: m["r1"].header.stamp != frozen.header.stamp, "r1 updated after the newer frames"
    )
    assert model_of(ros)["cup"].header.stamp == frozen.header.stamp

    ros.call(
        SetObjectState,
        f"{NS}/worldmodel/set_object_state",
        SetObjectState.Request(object_id="nope", new_state=ObjectState(state=ObjectState.DISCARDED)),
    )
    ros.call(
        SetObjectState,
        f"{NS}/worldmodel/set_object_state",
        SetObjectState.Request(object_id="r1", new_state=ObjectState(state=10)),
    )
    ros.call(
        SetObjectName, f"{NS}/worldmodel/set_object_name", SetObjectName.Request(object_id="ghost", name="x")
    )
    assert wm.wait_log("set_object_state refused: unknown object_id 'nope'", 10), wm.log()[-2000:]
    assert wm.wait_log("set_object_state refused: invalid state 10", 10)
    assert wm.wait_log("set_object_name refused: unknown object_id 'ghost'", 10)
    model = model_of(ros)
    assert "nope" not in model and model["r1"].state.state == ObjectState.ACTIVE

    add = AddObject.Request()
    add.object.header.frame_id = "world"
    add.object.info.class_id, add.object.info.name = "door", "Lab door"
    add.object.pose.pose.position.x, add.object.pose.pose.position.y = -2.0, 0.0
    add.object.pose.pose.orientation.w = 1.0
    added = ros.call(AddObject, f"{NS}/worldmodel/add_object", add).object
    assert added.info.object_id == "door_1" and added.state.state == ObjectState.ACTIVE
    assert "door_1" in model_of(ros)
    assert verify(ros, percept("door", "world", (-2.1, 0.0, 0.0))) == VerifyPercept.Response.CONFIRM
    add.object.info.object_id = "r1"  # a tracked body cannot be replaced by hand
    refused = ros.call(AddObject, f"{NS}/worldmodel/add_object", add).object
    assert refused.info.object_id == "" and refused.state.state == ObjectState.UNKNOWN
    assert wm.wait_log("add_object refused: object_id 'r1' is a tracked mocap body", 10)
    assert wm.alive()


def test_shipped_config_is_valid(procs):
    """config/worldmodel.yaml: only declared parameters, every value valid, and the node
    started with it takes it without an error."""
    from support import ROOT

    from mocap4r2_tools import worldmodel_server

    values = yaml.safe_load((ROOT / "config" / "worldmodel.yaml").read_text())["worldmodel_server"][
        "ros__parameters"
    ]
    specs = {spec.name: spec for spec in worldmodel_server.PARAMETERS}
    assert set(values) <= set(specs), set(values) - set(specs)
    for name, value in values.items():
        assert specs[name].validate(value) is None, (name, specs[name].validate(value))
    proc = procs.start(
        TOOLS,
        "worldmodel_server",
        ros=False,
        args=["--ros-args", "--params-file", str(ROOT / "config" / "worldmodel.yaml")],
    )
    assert proc.wait_log("world model of the bodies on /sim/rigid_bodies; 4 configured identities", 20), (
        proc.log()
    )
    assert "[ERROR]" not in proc.log() and proc.alive()
