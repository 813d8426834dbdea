"""Node `marker_viz`: any system's markers, rigid bodies and skeletons as one MarkerArray.

Sources: the systems announced on /mocap4r2/systems (``discover``) and the namespaces
listed in ``systems`` (``<ns>/markers``, ``<ns>/rigid_bodies``, ``<ns>/skeletons``).
The latest message of each source is drawn at most ``rate`` times per second:

* markers: labeled (green), unlabeled (yellow) and occluded (red, translucent) spheres;
* rigid bodies: x/y/z axes (red/green/blue) with the body name; untracked bodies grey,
  their name marked "(not tracked)";
* skeletons: segments as lines from parent to child, joints as spheres; untracked grey.

Every visual has a stable namespace ``<system>/<kind>`` and id, and a lifetime, so the
display of a system that stops fades out instead of freezing.
"""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import Point
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS, SYSTEMS_TOPIC
from mocap4r2_control.geometry import pose_msg_arrays
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.rotation import quat_rotate
from mocap4r2_interfaces.msg import Markers, MocapSystemInfo, RigidBodies, Skeletons

from .tool_node import ToolNode, run_tool, topic_check

PARAMETERS = (
    ParameterSpec(
        "systems",
        [],
        "Namespaces of systems to draw (e.g. ['/sim']), besides the discovered ones.",
        read_only=True,
    ),
    ParameterSpec("discover", True, "Also draw every system announced on /mocap4r2/systems.", read_only=True),
    ParameterSpec(
        "output_topic",
        "~/markers",
        "visualization_msgs/MarkerArray output topic.",
        check=topic_check("output_topic"),
        read_only=True,
    ),
    ParameterSpec("rate", 30.0, "Largest number of MarkerArrays per second.", min_value=0.1, max_value=500.0),
    ParameterSpec("marker_size", 0.03, "Marker sphere diameter, m.", min_value=0.001, max_value=1.0),
    ParameterSpec("axis_length", 0.15, "Length of a rigid body's axes, m.", min_value=0.001, max_value=10.0),
    ParameterSpec(
        "line_width", 0.01, "Width of axes and skeleton lines, m.", min_value=0.0001, max_value=1.0
    ),
    ParameterSpec("text_size", 0.08, "Height of the body names, m.", min_value=0.001, max_value=2.0),
    ParameterSpec(
        "lifetime",
        1.0,
        "Seconds a drawn item stays without an update (0: forever).",
        min_value=0.0,
        max_value=3600.0,
    ),
    ParameterSpec("show_markers", True, "Draw markers."),
    ParameterSpec("show_bodies", True, "Draw rigid bodies."),
    ParameterSpec("show_skeletons", True, "Draw skeletons."),
)


def _color(r: float, g: float, b: float, a: float = 1.0) -> ColorRGBA:
    return ColorRGBA(r=r, g=g, b=b, a=a)


LABELED = _color(0.1, 0.9, 0.2)
UNLABELED = _color(1.0, 0.85, 0.1)
OCCLUDED = _color(0.9, 0.1, 0.1, 0.35)
UNTRACKED = _color(0.55, 0.55, 0.55, 0.6)
AXES = (_color(0.9, 0.1, 0.1), _color(0.1, 0.8, 0.1), _color(0.1, 0.3, 1.0))
SKELETON = _color(1.0, 0.55, 0.1)
TEXT = _color(1.0, 1.0, 1.0)
_KINDS = {
    "mocap4r2_interfaces/msg/Markers": ("markers", Markers),
    "mocap4r2_interfaces/msg/RigidBodies": ("rigid_bodies", RigidBodies),
    "mocap4r2_interfaces/msg/Skeletons": ("skeletons", Skeletons),
}


class MarkerVizNode(ToolNode):
    """Draws the markers, rigid bodies and skeletons of every announced system as RViz MarkerArrays, at a
    bounded rate whatever the mocap rate."""

    def __init__(self, **kwargs):
        super().__init__("marker_viz", PARAMETERS, **kwargs)
        cfg = self.values()
        self._latest: dict[str, object] = {}  # topic -> latest message
        self._dirty = False
        self._subscribed: set[str] = set()
        self._qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
        self._pub = self.create_publisher(MarkerArray, cfg["output_topic"], 10)
        for ns in cfg["systems"]:
            base = ns.rstrip("/")
            for suffix, kind in (
                ("markers", Markers),
                ("rigid_bodies", RigidBodies),
                ("skeletons", Skeletons),
            ):
                self._subscribe(f"{base}/{suffix}", kind)
        if cfg["discover"]:
            self.create_subscription(MocapSystemInfo, SYSTEMS_TOPIC, self._on_system, SYSTEMS_LISTENER_QOS)
        self._timer = self.create_timer(1.0 / cfg["rate"], self._publish)
        self.published = 0
        self.mark_ready()
        self.get_logger().info(
            f"drawing {', '.join(cfg['systems']) or 'no fixed system'}"
            + (" and every announced system" if cfg["discover"] else "")
            + f" on {self.resolve_topic_name(cfg['output_topic'])}"
        )

    def on_parameters_changed(self, names: set[str]) -> None:
        if "rate" in names:
            self._timer.cancel()
            self.destroy_timer(self._timer)
            self._timer = self.create_timer(1.0 / self.value("rate"), self._publish)
        self._dirty = True

    # ------------------------------------------------------------------ sources
    def _on_system(self, info: MocapSystemInfo) -> None:
        for topic, type_name in zip(info.topics, info.topic_types):
            kind = _KINDS.get(type_name)
            if kind is not None:
                self._subscribe(topic, kind[1])

    def _subscribe(self, topic: str, msg_type) -> None:
        topic = self.resolve_topic_name(topic)
        if topic in self._subscribed:
            return
        self._subscribed.add(topic)
        try:
            self.create_subscription(msg_type, topic, lambda msg, t=topic: self._store(t, msg), self._qos)
        except Exception as exc:  # e.g. the topic exists here with another type
            self.get_logger().error(f"cannot draw {topic}: {exc}")
            return
        self.get_logger().info(f"drawing {topic}")

    def _store(self, topic: str, msg) -> None:
        self._latest[topic] = msg
        self._dirty = True
        if self._timer.is_canceled():  # asleep since nothing came: draw within a period
            self._timer.reset()

    # ------------------------------------------------------------------ drawing
    def _publish(self) -> None:
        if not self._dirty:
            # nothing new: sleep until a message comes (_store), rather than waking the
            # executor `rate` times a second for nothing
            self._timer.cancel()
            return
        self._dirty = False
        cfg = self.values()
        lifetime = Duration(sec=int(cfg["lifetime"]), nanosec=int((cfg["lifetime"] % 1.0) * 1e9))
        out = MarkerArray()
        for topic, msg in sorted(self._latest.items()):
            system = topic.rsplit("/", 1)[0].strip("/") or "root"
            if isinstance(msg, Markers) and cfg["show_markers"]:
                out.markers.extend(draw_markers(msg, system, cfg))
            elif isinstance(msg, RigidBodies) and cfg["show_bodies"]:
                out.markers.extend(draw_bodies(msg, system, cfg))
            elif isinstance(msg, Skeletons) and cfg["show_skeletons"]:
                out.markers.extend(draw_skeletons(msg, system, cfg))
        for marker in out.markers:
            marker.lifetime = lifetime
        if out.markers:
            self._pub.publish(out)
            self.published += 1


def _base(header, ns: str, marker_id: int, kind: int) -> Marker:
    m = Marker()
    m.header = header
    m.ns = ns
    m.id = marker_id
    m.type = kind
    m.action = Marker.ADD
    m.pose.orientation.w = 1.0
    m.frame_locked = False
    return m


def _point(x: float, y: float, z: float) -> Point:
    return Point(x=float(x), y=float(y), z=float(z))


def draw_markers(msg: Markers, system: str, cfg: dict) -> list[Marker]:
    """RViz spheres for a Markers message, one list per kind (labeled, unlabeled, occluded) so each can be
    shown or hidden in RViz."""
    groups: dict[str, tuple[list[Point], ColorRGBA]] = {
        "labeled_markers": ([], LABELED),
        "unlabeled_markers": ([], UNLABELED),
        "occluded_markers": ([], OCCLUDED),
    }
    for marker in msg.markers:
        if marker.occluded:
            key = "occluded_markers"
        elif marker.id == -1 and not marker.name:
            key = "unlabeled_markers"
        else:
            key = "labeled_markers"
        p = marker.position
        groups[key][0].append(p)
    out = []
    for name, (points, color) in groups.items():
        m = _base(msg.header, f"{system}/{name}", 0, Marker.SPHERE_LIST)
        if not points:
            m.action = Marker.DELETE
        m.points = points
        m.scale.x = m.scale.y = m.scale.z = cfg["marker_size"]
        m.color = color
        out.append(m)
    return out


def draw_bodies(msg: RigidBodies, system: str, cfg: dict) -> list[Marker]:
    """RViz axes for each rigid body with a usable pose; ids of bodies without one are kept apart from the
    system's ids."""
    out = []
    length = cfg["axis_length"]
    for index, body in enumerate(msg.rigid_bodies):
        marker_id = body.id if body.id >= 0 else 100_000 + index
        pose = pose_msg_arrays(body.pose)
        if pose is None:
            continue  # nothing sensible to draw
        origin, quat = pose
        tips = quat_rotate(np.broadcast_to(quat, (3, 4)), np.eye(3) * length) + origin
        axes = _base(msg.header, f"{system}/bodies", marker_id, Marker.LINE_LIST)
        axes.scale.x = cfg["line_width"]
        start = _point(*origin)
        for axis in range(3):
            axes.points += [start, _point(*tips[axis])]
            color = AXES[axis] if body.tracking_valid else UNTRACKED
            axes.colors += [color, color]
        axes.color = AXES[0] if body.tracking_valid else UNTRACKED
        label = _base(msg.header, f"{system}/body_names", marker_id, Marker.TEXT_VIEW_FACING)
        label.pose.position = _point(origin[0], origin[1], origin[2] + length + cfg["text_size"])
        label.scale.z = cfg["text_size"]
        label.color = TEXT if body.tracking_valid else UNTRACKED
        label.text = body.name if body.tracking_valid else f"{body.name} (not tracked)"
        out += [axes, label]
    return out


def draw_skeletons(msg: Skeletons, system: str, cfg: dict) -> list[Marker]:
    """RViz line lists joining each skeleton segment to its parent."""
    out = []
    for index, skeleton in enumerate(msg.skeletons):
        marker_id = skeleton.id if skeleton.id >= 0 else 100_000 + index
        positions = {s.id: s.pose.position for s in skeleton.segments}
        lines = _base(msg.header, f"{system}/skeletons", marker_id, Marker.LINE_LIST)
        lines.scale.x = cfg["line_width"]
        joints = _base(msg.header, f"{system}/skeleton_joints", marker_id, Marker.SPHERE_LIST)
        joints.scale.x = joints.scale.y = joints.scale.z = cfg["marker_size"]
        for segment in skeleton.segments:
            tracked = skeleton.tracking_valid and segment.tracking_valid
            color = SKELETON if tracked else UNTRACKED
            joints.points.append(segment.pose.position)
            joints.colors.append(color)
            parent = positions.get(segment.parent_id)
            if parent is not None:
                lines.points += [parent, segment.pose.position]
                lines.colors += [color, color]
        lines.color = joints.color = SKELETON if skeleton.tracking_valid else UNTRACKED
        for m in (lines, joints):
            if not m.points:
                m.action = Marker.DELETE
        out += [lines, joints]
    return out


def main(args=None) -> int:
    """Entry point of the ``marker_viz`` executable; returns the process exit status."""
    return run_tool(MarkerVizNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
