"""Benchmark systems: precomputed scene frames published at a fixed rate.

``replay``: a MocapSystemNode around an adapter that replays precomputed frames (the
framework's path, without the cost of computing the scene).
``bare``: a bare rclpy loop publishing the same frames' messages, built the plain way
(new message objects per frame), with no lifecycle, validity rule, tf or diagnostics.
``floor``: prebuilt message objects, only header and frame number change.
``raw``: the same messages serialized beforehand, published as bytes: nothing left to
do per frame but publish, the least any rclpy publisher can do.

    python -m bench.replay_system {replay,bare,floor,raw} BODIES MARKERS_PER_BODY SKELETONS RATE
"""

from __future__ import annotations

import contextlib
import struct
import sys
import threading
import time

import numpy as np

from mocap4r2_control.adapter import MocapAdapter
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_drivers.simulated.scene import Scene

FRAMES = 240  # distinct frames cycled through


def bench_scene(bodies: int, markers_per_body: int, skeletons: int, rate: float) -> Scene:
    return Scene(
        {
            "seed": 1,
            "rate": rate,
            "latency": 0.0,
            "latency_jitter": 0.0,
            "noise": 0.0005,
            "occlusion": 0.01,
            "dropped_frames": 0.0,
            "unlabeled_markers": 0,
            "generated_bodies": {"count": bodies, "markers_per_body": markers_per_body},
            "skeletons": [{"name": f"human{i}", "id": i + 1} for i in range(skeletons)],
        }
    )


class Pacer:
    """Frame k is due at start + k / rate; a late frame is sent at once (no catch-up skip),
    so a publisher that cannot keep up shows as a lower achieved rate."""

    def __init__(self, rate: float):
        self.period = 1.0 / rate
        self.start = time.perf_counter()
        self.k = 0

    def wait(self, stop: threading.Event | None = None) -> int:
        due = self.start + self.k * self.period
        delay = due - time.perf_counter()
        if delay > 0:
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)
        k = self.k
        self.k += 1
        return k


class ReplayAdapter(MocapAdapter):
    system_type = "bench"
    parameters = (
        ParameterSpec("bodies", 10, "bodies"),
        ParameterSpec("markers_per_body", 10, "markers per body"),
        ParameterSpec("skeletons", 0, "skeletons"),
        ParameterSpec("rate", 1000.0, "Hz"),
    )

    def __init__(self, bodies: int, markers: int, skeletons: int, rate: float):
        self.scene = bench_scene(bodies, markers, skeletons, rate)
        self.frames = [self.scene.frame(k) for k in range(FRAMES)]
        self.rate = rate
        self.pacer: Pacer | None = None
        self._stop = threading.Event()

    @classmethod
    def from_parameters(cls, v):
        return cls(v["bodies"], v["markers_per_body"], v["skeletons"], v["rate"])

    def connect(self) -> AssetNames:
        return self.scene.asset_names()

    @property
    def nominal_rate(self) -> float:
        return self.rate

    def start_streaming(self) -> None:
        self.pacer = Pacer(self.rate)
        self._stop.clear()

    def stop_streaming(self) -> None:
        self._stop.set()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        k = self.pacer.wait(self._stop)
        frame = self.frames[k % FRAMES]
        frame.frame_number = k
        return frame

    def disconnect(self) -> None:
        self._stop.set()


def run_replay(argv: list[str]) -> int:
    from mocap4r2_control.system_node import run_system

    # frames are precomputed in the adapter's constructor, at configure (autostart):
    # the system announces 'active' once they are ready; READY goes out before that
    print("READY", flush=True)
    bodies, markers, skeletons, rate = int(argv[0]), int(argv[1]), int(argv[2]), float(argv[3])
    return run_system(
        ReplayAdapter,
        "bench_system",
        [
            "bench",
            "--ros-args",
            "-r",
            "__ns:=/bench",
            "-p",
            f"bodies:={bodies}",
            "-p",
            f"markers_per_body:={markers}",
            "-p",
            f"skeletons:={skeletons}",
            "-p",
            f"rate:={rate}",
            "-p",
            "autostart:=true",
            "-p",
            "qos_depth:=100",
        ],
    )


def run_bare(argv: list[str], mode: str) -> int:
    import rclpy
    from geometry_msgs.msg import Point, Pose, Quaternion
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from mocap4r2_control.timebase import time_msg
    from mocap4r2_interfaces.msg import Marker, Markers, RigidBodies, RigidBody, Segment, Skeleton, Skeletons

    bodies, markers, skeletons, rate = int(argv[0]), int(argv[1]), int(argv[2]), float(argv[3])
    adapter = ReplayAdapter(bodies, markers, skeletons, rate)
    rclpy.init()
    node = rclpy.create_node("bench_system", namespace="/bench")
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    pubs = [
        node.create_publisher(t, n, qos)
        for t, n in ((Markers, "markers"), (RigidBodies, "rigid_bodies"), (Skeletons, "skeletons"))
    ]

    def marker_list(arrays) -> list:
        pos = np.nan_to_num(arrays.positions).tolist()
        return [
            Marker(id=i, name=n, position=Point(x=p[0], y=p[1], z=p[2]), occluded=o, residual=r)
            for i, n, p, o, r in zip(
                arrays.ids.tolist(), arrays.names, pos, arrays.occluded.tolist(), arrays.residuals.tolist()
            )
        ]

    def pose(p, q) -> Pose:
        return Pose(
            position=Point(x=p[0], y=p[1], z=p[2]), orientation=Quaternion(x=q[0], y=q[1], z=q[2], w=q[3])
        )

    def build(frame):
        header_frame = "world"
        b = frame.bodies
        off = b.marker_offsets
        bpos = np.nan_to_num(b.positions).tolist()
        bq = np.nan_to_num(b.orientations, nan=0.0).tolist()
        body_markers = marker_list(b.markers)
        rb = RigidBodies(
            frame_number=frame.frame_number,
            rigid_bodies=[
                RigidBody(
                    id=i,
                    name=n,
                    tracking_valid=v,
                    pose=pose(p, q),
                    mean_error=e,
                    markers=body_markers[off[j] : off[j + 1]],
                )
                for j, (i, n, v, p, q, e) in enumerate(
                    zip(b.ids.tolist(), b.names, b.valid.tolist(), bpos, bq, b.mean_errors.tolist())
                )
            ],
        )
        mk = Markers(frame_number=frame.frame_number, markers=marker_list(frame.markers))
        s = frame.skeletons
        seg = s.segments
        spos = np.nan_to_num(seg.positions).tolist()
        sq = np.nan_to_num(seg.orientations).tolist()
        segs = [
            Segment(id=i, name=n, parent_id=pa, tracking_valid=v, pose=pose(p, q))
            for i, n, pa, v, p, q in zip(
                seg.ids.tolist(), seg.names, seg.parent_ids.tolist(), seg.valid.tolist(), spos, sq
            )
        ]
        so = s.segment_offsets
        sk = Skeletons(
            frame_number=frame.frame_number,
            skeletons=[
                Skeleton(id=i, name=n, tracking_valid=v, segments=segs[so[j] : so[j + 1]])
                for j, (i, n, v) in enumerate(zip(s.ids.tolist(), s.names, s.valid.tolist()))
            ],
        )
        for msg in (mk, rb, sk):
            msg.header.frame_id = header_frame
        return mk, rb, sk

    prebuilt = [build(f) for f in adapter.frames] if mode in ("floor", "raw") else None
    if mode == "raw":
        from rclpy.serialization import serialize_message

        prebuilt = [tuple(serialize_message(m) for m in msgs) for msgs in prebuilt]
    stop = threading.Event()

    def loop():
        pacer = Pacer(rate)
        while not stop.is_set():
            k = pacer.wait(stop)
            stamp = time_msg()  # the frame's arrival, as MocapSystemNode stamps it
            if mode == "raw":
                # patch stamp and frame number into the serialized bytes, publish them
                for data, pub in zip(prebuilt[k % FRAMES], pubs):
                    out = bytearray(data)
                    struct.pack_into("<iI", out, 4, stamp.sec, stamp.nanosec)
                    (length,) = struct.unpack_from("<I", out, 12)
                    struct.pack_into("<Q", out, 4 + ((12 + length + 7) & ~7), k)
                    pub.publish(bytes(out))
                continue
            if prebuilt is not None:
                msgs = prebuilt[k % FRAMES]
            else:
                frame = adapter.frames[k % FRAMES]
                frame.frame_number = k
                msgs = build(frame)
            for msg, pub in zip(msgs, pubs):
                msg.header.stamp = stamp
                msg.frame_number = k
                pub.publish(msg)

    thread = threading.Thread(target=loop, daemon=True)
    print("READY", flush=True)
    thread.start()
    with contextlib.suppress(KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        rclpy.spin(node)
    stop.set()
    thread.join(2)
    return 0


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "replay":
        sys.exit(run_replay(rest))
    sys.exit(run_bare(rest, mode))
