"""Node `worldmodel_server`: a hector-style world model of the tracked bodies of one or
more mocap systems (hector_worldmodel_msgs), for mocap as ground truth of a robot's
object perception.

Names, under the node's namespace, as hector_object_tracker uses them:

* ``worldmodel/objects``: hector_worldmodel_msgs/ObjectModel (reliable, transient local:
  a late subscriber gets the current model), at ``update_rate`` when something changed;
* ``worldmodel/object``: hector_worldmodel_msgs/Object, each object updated since the
  last publication, and at once on a state, name or new-object change;
* ``worldmodel/pose_percept``: a PosePercept per tracked body at ``percept_rate``, for
  an external hector_object_tracker;
* services ``worldmodel/get_object_model``, ``worldmodel/set_object_state``,
  ``worldmodel/set_object_name``, ``worldmodel/add_object``, ``worldmodel/verify_percept``.

The model itself (identity, support, states, verification) is
:mod:`mocap4r2_tools.worldmodel`. A refused request (unknown object id, invalid state) is
logged with the reason and changes nothing; the hector services have no error field, so
SetObjectState/SetObjectName answer empty and AddObject answers the object with state
UNKNOWN and an empty object_id.
"""

from __future__ import annotations

import time

import numpy as np
from geometry_msgs.msg import PoseWithCovariance
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from tf2_msgs.msg import TFMessage

from hector_worldmodel_msgs.msg import Object, ObjectModel, ObjectState, PosePercept
from hector_worldmodel_msgs.srv import AddObject, GetObjectModel, SetObjectName, SetObjectState, VerifyPercept
from mocap4r2_control.geometry import pose_msg_arrays
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.tf_out import TF_QOS, TF_STATIC_QOS
from mocap4r2_control.timebase import stamp_to_seconds, time_msg
from mocap4r2_interfaces.msg import RigidBodies

from .tool_node import ToolNode, run_tool
from .worldmodel import ModelError, Transform, WorldModel, parse_identities, state_name_of

MODEL_QOS = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def _objects_check(value: list) -> str | None:
    try:
        parse_identities(list(value))
    except ModelError as error:
        return str(error)
    return None


def _topics_check(value: list) -> str | None:
    if not value or any(not t or " " in t or t.endswith("/") for t in value):
        return f"rigid_bodies_topics must be a non-empty list of topic names, got {value!r}"
    return None


PARAMETERS = (
    ParameterSpec(
        "rigid_bodies_topics",
        ["rigid_bodies"],
        "RigidBodies topics of the systems whose bodies are objects.",
        check=_topics_check,
        read_only=True,
    ),
    ParameterSpec(
        "objects",
        [],
        "Object identities, one YAML mapping per body: "
        '"{body: robot1, class_id: robot, object_id: r1, name: Robot 1}".',
        check=_objects_check,
        read_only=True,
    ),
    ParameterSpec("default_class_id", "mocap_body", "class_id of bodies not in objects."),
    ParameterSpec("only_configured", False, "Model only the bodies listed in objects.", read_only=True),
    ParameterSpec(
        "timeout",
        1.0,
        "Seconds without tracking before an ACTIVE object becomes INACTIVE.",
        min_value=0.01,
        max_value=3600.0,
    ),
    ParameterSpec(
        "support_window",
        2.0,
        "Seconds of frames the tracking ratio (support) is taken over.",
        min_value=0.05,
        max_value=600.0,
    ),
    ParameterSpec(
        "verify_distance",
        0.3,
        "VerifyPercept: largest distance, m, of a confirming object.",
        min_value=0.0,
        max_value=1000.0,
    ),
    ParameterSpec(
        "update_rate",
        5.0,
        "ObjectModel / Object publications per second at most.",
        min_value=0.1,
        max_value=100.0,
        read_only=True,
    ),
    ParameterSpec(
        "percept_rate",
        10.0,
        "PosePercepts per tracked body per second (0: none).",
        min_value=0.0,
        max_value=200.0,
        read_only=True,
    ),
    ParameterSpec(
        "position_stddev",
        0.005,
        "Position standard deviation in the published covariances, m.",
        min_value=0.0,
        max_value=100.0,
    ),
    ParameterSpec(
        "orientation_stddev",
        0.01,
        "Orientation standard deviation in the covariances, rad.",
        min_value=0.0,
        max_value=10.0,
    ),
    ParameterSpec("qos_reliable", True, "Reliable subscriptions (false: best effort).", read_only=True),
)


class WorldModelNode(ToolNode):
    """The hector world-model server fed by mocap: the configured rigid bodies become objects, percepts and
    services as hector_worldmodel offers them."""

    def __init__(self, **kwargs):
        super().__init__("worldmodel_server", PARAMETERS, **kwargs)
        cfg = self.values()
        self.model = WorldModel(
            parse_identities(cfg["objects"]),
            default_class_id=cfg["default_class_id"],
            only_configured=cfg["only_configured"],
            timeout=cfg["timeout"],
            support_window=cfg["support_window"],
        )
        self._apply_config()
        self._dirty: set[str] = set()
        self._model_dirty = True
        qos = QoSProfile(
            depth=100,
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        self._sources = []
        for topic in cfg["rigid_bodies_topics"]:
            source = self.resolve_topic_name(topic)
            self._sources.append(source)
            self.create_subscription(RigidBodies, topic, lambda msg, s=source: self._on_bodies(s, msg), qos)
        self.create_subscription(TFMessage, "/tf", self._on_tf, TF_QOS)
        self.create_subscription(TFMessage, "/tf_static", self._on_tf, TF_STATIC_QOS)
        self._model_pub = self.create_publisher(ObjectModel, "worldmodel/objects", MODEL_QOS)
        self._object_pub = self.create_publisher(Object, "worldmodel/object", 100)
        self._percept_pub = self.create_publisher(PosePercept, "worldmodel/pose_percept", 100)
        self.create_service(GetObjectModel, "worldmodel/get_object_model", self._on_get_model)
        self.create_service(SetObjectState, "worldmodel/set_object_state", self._on_set_state)
        self.create_service(SetObjectName, "worldmodel/set_object_name", self._on_set_name)
        self.create_service(AddObject, "worldmodel/add_object", self._on_add_object)
        self.create_service(VerifyPercept, "worldmodel/verify_percept", self._on_verify)
        self.create_timer(1.0 / cfg["update_rate"], self._on_update)
        if cfg["percept_rate"] > 0:
            self.create_timer(1.0 / cfg["percept_rate"], self._on_percepts)
        self.mark_ready()
        self._publish_model()
        self.get_logger().info(
            f"world model of the bodies on {', '.join(self._sources)}; "
            f"{len(self.model.identities)} configured identities"
        )

    def _apply_config(self) -> None:
        cfg = self.values()
        self.model.default_class_id = cfg["default_class_id"]
        self.model.timeout = cfg["timeout"]
        self.model.support_window = cfg["support_window"]
        self.verify_distance = cfg["verify_distance"]
        self.position_stddev = cfg["position_stddev"]
        self.orientation_stddev = cfg["orientation_stddev"]

    def on_parameters_changed(self, names: set[str]) -> None:
        self._apply_config()
        self.get_logger().info(f"{', '.join(sorted(names))} changed")

    # ------------------------------------------------------------------ input
    def _on_bodies(self, source: str, msg: RigidBodies) -> None:
        now = time.monotonic()
        stamp = stamp_to_seconds(msg.header.stamp)
        for body in msg.rigid_bodies[:1000]:
            pose = pose_msg_arrays(body.pose) if body.tracking_valid else None
            tracked = pose is not None
            obj, changed = self.model.update_body(
                source,
                frame_id=msg.header.frame_id,
                body=body.name,
                tracked=tracked,
                position=pose[0] if pose is not None else None,
                orientation=pose[1] if pose is not None else None,
                stamp=stamp,
                now=now,
            )
            if obj is None:
                continue
            if changed:
                self.get_logger().info(f"object {obj.object_id!r} {state_name_of(obj.state)}")
                self._object_pub.publish(self._object_msg(obj))
                self._model_dirty = True
            elif obj.state >= 0:
                self._dirty.add(obj.object_id)

    def _on_tf(self, msg: TFMessage) -> None:
        for edge in msg.transforms[:1000]:
            pose = pose_msg_arrays(edge.transform)
            if pose is None:
                continue
            self.model.frames.set(edge.header.frame_id, edge.child_frame_id, Transform(pose[0], pose[1]))

    # ------------------------------------------------------------------ output
    def _covariance(self) -> list[float]:
        diagonal = [self.position_stddev**2] * 3 + [self.orientation_stddev**2] * 3
        return [float(v) for v in np.diag(diagonal).ravel()]

    def _pose_msg(self, obj) -> PoseWithCovariance:
        pose = PoseWithCovariance()
        p, q = pose.pose.position, pose.pose.orientation
        p.x, p.y, p.z = (float(v) for v in obj.position)
        q.x, q.y, q.z, q.w = (float(v) for v in obj.orientation)
        pose.covariance = self._covariance()
        return pose

    def _object_msg(self, obj) -> Object:
        msg = Object()
        msg.header.stamp = time_msg(obj.stamp) if obj.stamp > 0 else self.get_clock().now().to_msg()
        msg.header.frame_id = obj.frame_id
        msg.pose = self._pose_msg(obj)
        msg.info.class_id, msg.info.object_id, msg.info.name = obj.class_id, obj.object_id, obj.name
        msg.info.support = float(obj.support)
        msg.state = ObjectState(state=int(obj.state))
        return msg

    def _model_msg(self) -> ObjectModel:
        msg = ObjectModel()
        msg.header.stamp = self.get_clock().now().to_msg()
        frames = {o.frame_id for o in self.model.objects.values()}
        msg.header.frame_id = frames.pop() if len(frames) == 1 else ""
        msg.objects = [
            self._object_msg(o) for o in sorted(self.model.objects.values(), key=lambda o: o.object_id)
        ]
        return msg

    def _publish_model(self) -> None:
        self._model_pub.publish(self._model_msg())
        self._model_dirty = False

    def _on_update(self) -> None:
        for obj in self.model.tick(time.monotonic()):
            self.get_logger().info(
                f"object {obj.object_id!r} INACTIVE: not tracked for {self.model.timeout:g} s"
            )
            self._dirty.add(obj.object_id)
        if self._dirty:
            for object_id in sorted(self._dirty):
                dirty = self.model.objects.get(object_id)
                if dirty is not None:
                    self._object_pub.publish(self._object_msg(dirty))
            self._dirty.clear()
            self._model_dirty = True
        if self._model_dirty:
            self._publish_model()

    def _on_percepts(self) -> None:
        for obj in self.model.objects.values():
            if obj.static or not obj.tracked or obj.state < 0:
                continue
            msg = PosePercept()
            msg.header.stamp = time_msg(obj.stamp)
            msg.header.frame_id = obj.frame_id
            msg.pose = self._pose_msg(obj)
            info = msg.info
            info.class_id, info.object_id, info.name = obj.class_id, obj.object_id, obj.name
            info.class_support = info.object_support = float(obj.support)
            self._percept_pub.publish(msg)

    # ------------------------------------------------------------------ services
    def _refuse(self, service: str, error: ModelError) -> None:
        self.get_logger().error(f"{service} refused: {error}")

    def _changed(self, obj) -> None:
        self._object_pub.publish(self._object_msg(obj))
        self._publish_model()

    def _on_get_model(self, request, response):
        response.model = self._model_msg()
        return response

    def _on_set_state(self, request, response):
        try:
            obj = self.model.set_state(request.object_id, int(request.new_state.state))
        except ModelError as error:
            self._refuse("set_object_state", error)
            return response
        self.get_logger().info(
            f"object {obj.object_id!r} set to {state_name_of(obj.state)}"
            + (" (updates disabled)" if obj.state < 0 else "")
        )
        self._changed(obj)
        return response

    def _on_set_name(self, request, response):
        try:
            obj = self.model.set_name(request.object_id, request.name)
        except ModelError as error:
            self._refuse("set_object_name", error)
            return response
        self.get_logger().info(f"object {obj.object_id!r} named {obj.name!r}")
        self._changed(obj)
        return response

    def _on_add_object(self, request, response):
        o = request.object
        if request.map_to_next_obstacle:
            self.get_logger().warning(
                "add_object: map_to_next_obstacle needs a map this server does not have; "
                "the pose is used as given"
            )
        p, q = o.pose.pose.position, o.pose.pose.orientation
        try:
            obj = self.model.add_object(
                o.info.object_id,
                class_id=o.info.class_id,
                name=o.info.name,
                frame_id=o.header.frame_id,
                position=(p.x, p.y, p.z),
                orientation=(q.x, q.y, q.z, q.w),
                state=int(o.state.state),
                stamp=stamp_to_seconds(o.header.stamp),
            )
        except ModelError as error:
            self._refuse("add_object", error)
            response.object = o
            response.object.info.object_id = ""
            response.object.state = ObjectState(state=ObjectState.UNKNOWN)
            return response
        self.get_logger().info(f"object {obj.object_id!r} of class {obj.class_id!r} added by hand")
        response.object = self._object_msg(obj)
        self._changed(obj)
        return response

    def _on_verify(self, request, response):
        percept = request.percept
        p = percept.pose.pose.position
        answer, reason = self.model.verify(
            percept.info.class_id, percept.header.frame_id, (p.x, p.y, p.z), self.verify_distance
        )
        response.response = answer
        names = {
            VerifyPercept.Response.CONFIRM: "CONFIRM",
            VerifyPercept.Response.DISCARD: "DISCARD",
            VerifyPercept.Response.UNKNOWN: "UNKNOWN",
        }
        self.get_logger().info(
            f"verify_percept {percept.info.class_id!r} in {percept.header.frame_id!r}: "
            f"{names[answer]} ({reason})"
        )
        return response


def main(args=None) -> int:
    """Entry point of the ``worldmodel_server`` executable; returns the process exit status."""
    return run_tool(WorldModelNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
