"""`mocap4r2 teach`: a body's marker layout taught from the live cloud and written into a
bodies file (tracking/teach.py does the work; docs/tracking.md says how to use it).

    mocap4r2 teach --markers-topic /cloud/markers --name cf17 --out bodies.yaml --near 0 0 0.05

Hold the body still at the place: the markers within --radius of it are read for
--seconds, matched frame to frame, averaged, and written as layout and body <name>
(origin at their centroid, axes by PCA or the world's, initial_position where it stands).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tracking.teach import Teacher


class TeachCommand:
    """``mocap4r2 teach``."""

    help = "teach a body's marker layout from the live cloud into a bodies file"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--markers-topic", required=True, help="Markers topic of the system that sees the body"
        )
        parser.add_argument("--name", required=True, help="name of the new layout and body")
        parser.add_argument(
            "--out", required=True, type=Path, help="bodies file to add them to (created if missing)"
        )
        parser.add_argument(
            "--near",
            nargs=3,
            type=float,
            metavar=("X", "Y", "Z"),
            help="where the body is (default: the only cluster)",
        )
        parser.add_argument("--radius", type=float, default=0.15, help="cluster radius around the place, m")
        parser.add_argument("--seconds", type=float, default=1.0, help="how long to average")
        parser.add_argument("--axes", choices=("pca", "world"), default="pca", help="body axes")
        parser.add_argument(
            "--timeout", type=float, default=10.0, help="give up when no frame comes for this long"
        )

    def main(self, args: argparse.Namespace) -> int:
        import numpy as np

        from .tracking.teach import Teacher, TeachError, write_body

        if not args.name or ":" in args.name:
            print("mocap4r2 teach: error: --name must be non-empty and without ':'", file=sys.stderr)
            return 2
        if not (0.0 < args.radius <= 10.0 and 0.0 < args.seconds <= 600.0):
            print(
                "mocap4r2 teach: error: --radius must be in (0, 10] m, --seconds in (0, 600]", file=sys.stderr
            )
            return 2
        near = None if args.near is None else np.asarray(args.near, dtype=np.float64)
        if near is not None and not np.isfinite(near).all():
            print("mocap4r2 teach: error: --near must be finite", file=sys.stderr)
            return 2
        teacher = Teacher(near=near, radius=args.radius)
        frames = _collect(args.markers_topic, args.seconds, args.timeout, teacher)
        if frames is None:
            print(
                f"mocap4r2 teach: error: no frame on {args.markers_topic} in {args.timeout:g} s",
                file=sys.stderr,
            )
            return 1
        try:
            layout, position = teacher.layout(args.axes)
            write_body(args.out, args.name, layout, position)
        except TeachError as exc:
            print(f"mocap4r2 teach: error: {exc}", file=sys.stderr)
            return 1
        print(
            f"taught {args.name!r}: {len(layout)} markers from {teacher.frames} of {frames} frames "
            f"at {np.round(position, 4).tolist()} -> {args.out}"
        )
        if teacher.skipped:
            print(f"  frames skipped: {teacher.skipped}")
        return 0


def _collect(topic: str, seconds: float, timeout: float, teacher: Teacher) -> int | None:
    """Feed the teacher every frame of ``topic`` for ``seconds`` after the first; the number
    of frames read, None when none came within ``timeout``."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from mocap4r2_interfaces.msg import Markers

    from .tracking.markers_cdr import MarkersDecodeError, decode_markers

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("mocap4r2_teach", context=context, start_parameter_services=False)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    frames = 0
    first: float | None = None

    def on_markers(data: bytes) -> None:
        nonlocal frames, first
        try:
            markers = decode_markers(data)
        except MarkersDecodeError:
            return
        if first is None:
            first = time.monotonic()
        frames += 1
        teacher.add(markers.positions[~markers.occluded])

    node.create_subscription(
        Markers, topic, on_markers, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE), raw=True
    )
    started = time.monotonic()
    try:
        while True:
            executor.spin_once(timeout_sec=0.05)
            now = time.monotonic()
            if first is None and now - started > timeout:
                return None
            if first is not None and now - first >= seconds:
                return frames
    finally:
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
