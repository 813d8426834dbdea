r"""`mocap4r2 calibrate`: where a camera, a robot or a second mocap system sits, with its uncertainty.

Two pose streams, A and B, each a TUM file or a topic of a rosbag2 bag (a recorded
session: its RigidBodies topic with ``--a-body``; PoseStamped, Odometry, TransformStamped;
TF pairs with ``--a-tf PARENT CHILD``), and the problem:

    mocap4r2 calibrate hand_eye --a body.tum --b camera.tum
    mocap4r2 calibrate robot_world --bag session1 --a-topic /arm/ee_pose \
        --b-topic /mocap/rigid_bodies --b-body tool --plot out/
    mocap4r2 calibrate frame_to_frame --a optitrack.tum --b vicon.tum --json result.json
    mocap4r2 calibrate hand_eye --online --a-topic /mocap/drone/pose --b-topic /vio/pose

hand_eye (A X = X B): A is a body (flange) in a fixed frame, B the camera (tool) in its
own fixed frame; X is the camera in the body. robot_world (A X = Y B): A is the flange in
the robot base, B the tracked tool in the mocap frame; X is the tool in the flange, Y the
mocap frame in the base (printed inverted: the base in the mocap frame). frame_to_frame
(A = X B): one body seen by two systems; X is B's frame in A's.

The time offset between the streams (s added to B's stamps) is found (``offset auto``)
and refined with the transform, unless ``--offset S --fixed-offset`` is given. Prints the
transforms as ``static_transform_publisher`` lines and URDF ``<origin>`` with standard
deviations, or JSON (``--json``); ``--plot DIR`` writes residual plots. ``--online``
collects pairs from two live PoseStamped topics, says what motion is still missing until
it suffices, then publishes the result on /tf_static (and updates it as pairs come).
See docs/calibration.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .calibration import (
    CalibrationError,
    CalibrationOptions,
    Stream,
    calibrate,
    clean_stream,
    from_trajectory,
)
from .calibration.motion import MIN_ROTATION_DEG
from .calibration.refine import LOSSES
from .calibration.report import DEFAULT_FRAMES, Frames, summary_lines, to_dict, transforms, write_plots
from .calibration.solve import KINDS, Calibration
from .cli import run_verb, verb_parser
from .eval_command import is_bag
from .trajectory.io import parse_tum_careful, read_bag, read_tum, typestore
from .trajectory.poses import TrajectoryInputError
from .trajectory.time_offset import DEFAULT_WINDOW


class CalibrateCommand:
    """The ``calibrate`` verb: its arguments and what it runs."""

    help = "hand-eye, robot-world or frame-to-frame calibration from two pose streams, with uncertainty"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("kind", choices=KINDS, help="the problem: A X = X B, A X = Y B or A = X B")
        src = parser.add_argument_group("inputs (A and B)")
        src.add_argument("--a", type=Path, help="stream A: TUM file or bag (with --a-topic)")
        src.add_argument("--b", type=Path, help="stream B: TUM file or bag (with --b-topic)")
        src.add_argument("--bag", type=Path, help="rosbag2 bag or recorded session for both topics")
        for side in ("a", "b"):
            src.add_argument(
                f"--{side}-topic", help=f"topic of stream {side.upper()} (bag, or live with --online)"
            )
            src.add_argument(f"--{side}-body", help="rigid body name when the topic carries RigidBodies")
            src.add_argument(
                f"--{side}-tf", nargs=2, metavar=("PARENT", "CHILD"), help="TF edge when the topic carries TF"
            )
            src.add_argument(
                f"--{side}-frames",
                nargs=2,
                metavar=("PARENT", "CHILD"),
                help=f"frame names of stream {side.upper()}'s poses, for the printed transforms",
            )
        cal = parser.add_argument_group("calibration")
        cal.add_argument(
            "--offset",
            default="auto",
            help="s added to B's stamps, or auto: found from the data (default auto)",
        )
        cal.add_argument(
            "--fixed-offset", action="store_true", help="keep --offset as given instead of refining it"
        )
        cal.add_argument(
            "--offset-window",
            type=float,
            default=DEFAULT_WINDOW,
            metavar="S",
            help="offset auto searches +-S s",
        )
        cal.add_argument("--max-pairs", type=int, default=2000, help="pose pairs used at most (default 2000)")
        cal.add_argument("--loss", choices=LOSSES, default="cauchy", help="robust loss (default cauchy)")
        cal.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples (default 200)")
        cal.add_argument(
            "--min-rotation",
            type=float,
            default=MIN_ROTATION_DEG,
            metavar="DEG",
            help=f"rms rotation needed about two axes (default {MIN_ROTATION_DEG:g} deg)",
        )
        out = parser.add_argument_group("output")
        out.add_argument(
            "--json", nargs="?", const="-", metavar="FILE", help="the result as JSON (stdout without FILE)"
        )
        out.add_argument("--plot", type=Path, metavar="DIR", help="write residual plots into DIR")
        live = parser.add_argument_group("online")
        live.add_argument("--online", action="store_true", help="collect pairs from live PoseStamped topics")
        live.add_argument(
            "--update", type=float, default=2.0, metavar="S", help="try again every S s (default 2)"
        )
        live.add_argument(
            "--duration", type=float, default=0.0, metavar="S", help="stop after S s (default: Ctrl-C)"
        )

    def main(self, args: argparse.Namespace) -> int:
        try:
            options = _options(args)
            frames = _frames(args)
            if args.online:
                return run_online(args, options, frames)
            a = _load(
                args.a, args.bag, topic=args.a_topic, body=args.a_body, tf=args.a_tf, what="A", flag="a"
            )
            b = _load(
                args.b, args.bag, topic=args.b_topic, body=args.b_body, tf=args.b_tf, what="B", flag="b"
            )
            for note in a.trajectory.notes + b.trajectory.notes:
                print(f"mocap4r2 calibrate: warning: {note}", file=sys.stderr)
            result = calibrate(a, b, options)
            _output(result, frames, args)
            return 0
        except TrajectoryInputError as exc:  # CalibrationError too: says what is missing
            print(f"mocap4r2 calibrate: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0


def _options(args: argparse.Namespace) -> CalibrationOptions:
    text = str(args.offset).strip().lower()
    if text == "auto":
        if args.fixed_offset:
            raise CalibrationError("--fixed-offset needs a number of seconds for --offset, not auto")
        offset = None
    else:
        try:
            offset = float(text)
        except ValueError:
            raise CalibrationError(f"--offset: expected seconds or auto, not {args.offset!r}") from None
    if not (math.isfinite(args.update) and args.update > 0):
        raise CalibrationError(f"--update must be > 0 s, not {args.update}")
    if args.bootstrap < 0:
        raise CalibrationError(f"--bootstrap must be >= 0, not {args.bootstrap}")
    return CalibrationOptions(
        kind=args.kind,
        offset=offset,
        estimate_offset=not args.fixed_offset,
        offset_window=args.offset_window,
        max_pairs=args.max_pairs,
        loss=args.loss,
        bootstrap=args.bootstrap,
        min_rotation_deg=args.min_rotation,
    )


def _frames(args: argparse.Namespace) -> Frames:
    default = DEFAULT_FRAMES[args.kind]
    a = args.a_frames or (default.a_parent, default.a_child)
    b = args.b_frames or (default.b_parent, default.b_child)
    return Frames(a[0], a[1], b[0], b[1])


def _load(path: Path | None, bag: Path | None, *, topic, body, tf, what: str, flag: str) -> Stream:
    source = path or bag
    if source is None:
        raise CalibrationError(f"no stream {what}: give --{flag} FILE, or --bag BAG with --{flag}-topic")
    if not source.exists():
        raise CalibrationError(f"stream {what}: {source} does not exist")
    if not is_bag(source):
        if topic:
            raise CalibrationError(f"--{flag}-topic applies to bags, and {source} is a TUM file")
        return _read_tum(source, what)
    if not topic:
        raise CalibrationError(f"stream {what} comes from the bag {source}: give --{flag}-topic")
    frames = tuple(tf) if tf else None
    try:
        stream = from_trajectory(read_bag(source, topic, body=body, frames=frames, name=what))
    except TrajectoryInputError as exc:
        if "not finite" not in str(exc) and "not a rotation" not in str(exc):
            raise
        stream = _read_bag_rows(source, topic, body, frames, what)
    if body:  # a RigidBodies topic: the reader leaves the untracked samples out; count them
        untracked = _untracked_samples(source, topic, body)
        stream = Stream(stream.trajectory, untracked, stream.total + untracked)
    return stream


def _read_bag_rows(bag: Path, topic: str, body: str | None, frames, name: str) -> Stream:
    """The poses of a bag topic some of which are NaN or not rotations (the trajectory
    reader refuses those, as an evaluation should): read with the reader's own per-type
    extraction, then cleaned here, the bad rows left out and counted."""
    from rosbags.rosbag2 import Reader

    from .trajectory.io import _extractor, _store_for

    stamps: list[float] = []
    rows: list[tuple[float, ...]] = []
    with Reader(bag) as reader:
        connections = [c for c in reader.connections if c.topic == topic]
        store = _store_for(connections)
        extract = _extractor(connections[0].msgtype, body, frames, set())
        for connection, _, raw in reader.messages(connections=connections):
            for stamp, pose in extract(store.deserialize_cdr(raw, connection.msgtype)):
                stamps.append(stamp)
                rows.append(pose)
    values = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    order = np.argsort(np.asarray(stamps), kind="stable")
    return clean_stream(np.asarray(stamps)[order], values[order, 0:3], values[order, 3:7], name)


def _untracked_samples(bag: Path, topic: str, body: str) -> int:
    """Messages on ``topic`` (RigidBodies) in which ``body`` is present but not tracked."""
    from rosbags.rosbag2 import Reader

    store = typestore()
    count = 0
    with Reader(bag) as reader:
        connections = [c for c in reader.connections if c.topic == topic]
        for connection, _, raw in reader.messages(connections=connections):
            msg = store.deserialize_cdr(raw, connection.msgtype)
            count += any(rb.name == body and not rb.tracking_valid for rb in msg.rigid_bodies)
    return count


def _read_tum(path: Path, name: str) -> Stream:
    """A TUM file as a stream; rows that are NaN or not a rotation are left out and
    counted (the trajectory reader refuses them, which suits an evaluation, not this)."""
    try:
        return from_trajectory(read_tum(path, name=name))
    except TrajectoryInputError as exc:
        if "not finite" not in str(exc) and "not a rotation" not in str(exc):
            raise
    values = parse_tum_careful(path)
    return clean_stream(values[:, 0], values[:, 1:4], values[:, 4:8], name)


def _output(result: Calibration, frames: Frames, args: argparse.Namespace) -> None:
    data = to_dict(result, frames)
    written = write_plots(result, args.plot) if args.plot else []
    if written:
        data["plots"] = [str(p) for p in written]
    if args.json == "-":
        print(json.dumps(data, indent=2))
        return
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    print("\n".join(summary_lines(result, frames)))
    if written:
        print("plots: " + ", ".join(str(p) for p in written))


# --------------------------------------------------------------------------- online
def run_online(args: argparse.Namespace, options: CalibrationOptions, frames: Frames) -> int:
    """Collect pairs from two PoseStamped topics until stopped; publish each result on /tf_static."""
    if not args.a_topic or not args.b_topic:
        raise CalibrationError("--online needs --a-topic and --b-topic (geometry_msgs/PoseStamped)")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init()
    node = online_node(args.a_topic, args.b_topic, options, frames, args.update)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    deadline = time.monotonic() + args.duration if args.duration > 0 else math.inf
    try:
        while rclpy.ok() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        result = node.result
        executor.remove_node(node)
        node.destroy_node()
        rclpy.try_shutdown()
    if result is None:
        print(f"mocap4r2 calibrate: no result: {node.waiting_for}", file=sys.stderr)
        return 1
    _output(result, frames, args)
    return 0


def online_node(
    a_topic: str, b_topic: str, options: CalibrationOptions, frames: Frames, update: float
) -> Any:
    """The online node (rclpy is imported only here, when it runs)."""
    return _online_node_class()(a_topic, b_topic, options, frames, update)


def _online_node_class() -> Any:
    from geometry_msgs.msg import PoseStamped, TransformStamped
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from mocap4r2_control.tf_out import TF_STATIC_QOS
    from mocap4r2_control.timebase import stamp_to_seconds, time_msg

    from .calibration.online import PairCollector

    class _Node(Node):
        """Subscribes A and B, tries every ``update`` s, publishes the result on /tf_static."""

        def __init__(self, a_topic, b_topic, options, frames, update):
            super().__init__("mocap4r2_calibrate")
            self.options, self.frames = options, frames
            self.collector = PairCollector()
            self.result: Calibration | None = None
            self.waiting_for = "no poses yet"
            qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.BEST_EFFORT)
            self.create_subscription(
                PoseStamped, a_topic, lambda m: self._on_pose(m, self.collector.add_a), qos
            )
            self.create_subscription(
                PoseStamped, b_topic, lambda m: self._on_pose(m, self.collector.add_b), qos
            )
            try:  # tf2_ros where installed; the same topic, type and QoS elsewhere
                from tf2_ros import StaticTransformBroadcaster

                self._broadcaster: Any = StaticTransformBroadcaster(self)
                self._publisher = None
            except ImportError:
                from tf2_msgs.msg import TFMessage

                self._broadcaster = None
                self._tf_message = TFMessage
                self._publisher = self.create_publisher(TFMessage, "/tf_static", TF_STATIC_QOS)
            self._transform_type = TransformStamped
            self._time_msg = time_msg
            self._stamp_to_seconds = stamp_to_seconds
            self.create_timer(update, self._try)
            self.get_logger().info(f"collecting {options.kind} pairs: A {a_topic}, B {b_topic}")

        def _on_pose(self, msg, add) -> None:
            p, q = msg.pose.position, msg.pose.orientation
            add(self._stamp_to_seconds(msg.header.stamp), (p.x, p.y, p.z), (q.x, q.y, q.z, q.w))

        def _try(self) -> None:
            try:
                attempt = self.collector.attempt(self.options)
            except Exception as exc:  # noqa: BLE001 - a failed try must not end the node: said, retried
                self.get_logger().error(f"calibration failed ({type(exc).__name__}: {exc}); trying again")
                return
            if attempt.calibration is None:
                if attempt.waiting_for != self.waiting_for:
                    self.get_logger().info(f"not yet: {attempt.waiting_for}")
                self.waiting_for = attempt.waiting_for
                return
            first = self.result is None
            self.result = attempt.calibration
            self.waiting_for = ""
            if first:
                self.get_logger().info("motion sufficient: publishing the result on /tf_static")
            self.get_logger().info("\n".join(summary_lines(self.result, self.frames)))
            self._publish(self.result)

        def _publish(self, result: Calibration) -> None:
            stamp = self._time_msg()
            out = []
            for t in transforms(result, self.frames):
                msg = self._transform_type()
                msg.header.stamp = stamp
                msg.header.frame_id = t.parent
                msg.child_frame_id = t.child
                tr, q = msg.transform.translation, msg.transform.rotation
                tr.x, tr.y, tr.z = (float(v) for v in t.pose.translation)
                q.x, q.y, q.z, q.w = (float(v) for v in t.pose.rotation)
                out.append(msg)
            if self._broadcaster is not None:
                self._broadcaster.sendTransform(out)
            else:
                assert self._publisher is not None
                self._publisher.publish(self._tf_message(transforms=out))

    return _Node


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mocap4r2 calibrate`` on its own."""
    return verb_parser("calibrate", CalibrateCommand(), __doc__)


def main(argv: list[str] | None = None) -> int:
    """``mocap4r2 calibrate`` as a function: exit status."""
    return run_verb("calibrate", CalibrateCommand(), argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
