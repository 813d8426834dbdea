"""Encoding one mocap frame to serialized messages: mocap4r2_control.cdr vs message objects.

A frame is what MocapSystemNode publishes: Markers, RigidBodies (with their markers),
Skeletons and the TFMessage of the bodies. Configurations: 10 bodies / 100 markers, and
50 bodies / 500 markers / 2 skeletons of 19 segments. Three ways, same arrays:
  * cdr      -- MarkersEncoder & co. (cached layout, numbers written with numpy);
  * build    -- (a) new message objects per frame + rclpy.serialization.serialize_message;
  * refresh  -- (b) message objects allocated once, fields refreshed per frame (what
                frame_messages.py does) + serialize_message.
Also the cost of a layout miss: Markers whose unlabeled tail (empty names) changes
length every frame. Prints microseconds per frame (median of batches) and ratios.

Then FrameEncoder itself (what the node runs per frame: validity rule + cdr) on the numpy
path (``compiled=False``) and through the compiled passes (markers_pass.py: the frame's
markers and the bodies' markers; bodies_pass.py: the bodies' poses), interleaved in the
same run: Markers alone, RigidBodies alone and both; the frames' positions change every
frame (16 frames cycled, 5 % occluded, 1 % NaN), their structure does not.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import TransformStamped
from rclpy.serialization import serialize_message
from tf2_msgs.msg import TFMessage

from mocap4r2_control import bodies_pass, markers_pass
from mocap4r2_control.cdr import MarkersEncoder, RigidBodiesEncoder, SkeletonsEncoder, TFMessageEncoder
from mocap4r2_control.frame import BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.frame_encoder import EncodedFrame, FrameEncoder
from mocap4r2_interfaces.msg import Marker, Markers, RigidBodies, RigidBody, Segment, Skeleton, Skeletons

CONFIGS = [
    ("10 bodies / 100 markers", 10, 10, 0),
    ("50 bodies / 500 markers / 2 skeletons x 19 segments", 50, 10, 2),
]
SEGMENTS = 19
BATCH_SECONDS = 0.25
BATCHES = 5


@dataclass
class Frame:
    """Arrays of one frame, shaped as mocap4r2_control.frame has them."""

    marker_ids: np.ndarray
    marker_names: tuple[str, ...]
    marker_positions: np.ndarray
    marker_occluded: np.ndarray
    marker_residuals: np.ndarray
    body_ids: np.ndarray
    body_names: tuple[str, ...]
    body_valid: np.ndarray
    body_poses: np.ndarray
    body_errors: np.ndarray
    marker_offsets: np.ndarray
    skeleton_ids: np.ndarray
    skeleton_names: tuple[str, ...]
    skeleton_valid: np.ndarray
    segment_offsets: np.ndarray
    segment_ids: np.ndarray
    segment_names: tuple[str, ...]
    segment_parents: np.ndarray
    segment_valid: np.ndarray
    segment_poses: np.ndarray


def make_frame(bodies: int, per_body: int, skeletons: int, seed: int = 0) -> Frame:
    rng = np.random.default_rng(seed)
    markers = bodies * per_body
    segments = skeletons * SEGMENTS

    def poses(count):
        q = rng.normal(size=(count, 4))
        return np.hstack([rng.normal(size=(count, 3)), q / np.linalg.norm(q, axis=1, keepdims=True)])

    return Frame(
        marker_ids=np.arange(markers, dtype=np.int32),
        marker_names=tuple(f"body{i // per_body}:marker{i % per_body}" for i in range(markers)),
        marker_positions=rng.normal(size=(markers, 3)),
        marker_occluded=rng.random(markers) < 0.05,
        marker_residuals=rng.random(markers).astype(np.float32) * 1e-3,
        body_ids=np.arange(1, bodies + 1, dtype=np.int32),
        body_names=tuple(f"body{i}" for i in range(bodies)),
        body_valid=rng.random(bodies) < 0.95,
        body_poses=poses(bodies),
        body_errors=rng.random(bodies).astype(np.float32) * 1e-3,
        marker_offsets=np.arange(bodies + 1, dtype=np.int64) * per_body,
        skeleton_ids=np.arange(skeletons, dtype=np.int32),
        skeleton_names=tuple(f"actor{i}" for i in range(skeletons)),
        skeleton_valid=np.ones(skeletons, dtype=bool),
        segment_offsets=np.arange(skeletons + 1, dtype=np.int64) * SEGMENTS,
        segment_ids=np.tile(np.arange(SEGMENTS, dtype=np.int32), skeletons),
        segment_names=tuple(f"segment{i % SEGMENTS}" for i in range(segments)),
        segment_parents=np.tile(np.arange(-1, SEGMENTS - 1, dtype=np.int32), skeletons),
        segment_valid=np.ones(segments, dtype=bool),
        segment_poses=poses(segments),
    )


# ---------------------------------------------------------------------------- cdr
class CdrWay:
    def __init__(self, frame: Frame):
        self.frame = frame
        self.markers = MarkersEncoder()
        self.bodies = RigidBodiesEncoder()
        self.skeletons = SkeletonsEncoder()
        self.tf = TFMessageEncoder()
        self.children = tuple("mocap/" + n for n in frame.body_names)

    def encode(self, k: int) -> list[bytes]:
        out = [self.markers_message(k), self.bodies_message(k), self.tf_message(k)]
        if len(self.frame.skeleton_names):
            out.append(self.skeletons_message(k))
        return out

    def markers_message(self, k: int) -> bytes:
        f = self.frame
        return self.markers.encode(
            sec=k,
            nanosec=1000 * k,
            frame_id="world",
            frame_number=k,
            ids=f.marker_ids,
            names=f.marker_names,
            positions=f.marker_positions,
            occluded=f.marker_occluded,
            residuals=f.marker_residuals,
        )

    def bodies_message(self, k: int) -> bytes:
        f = self.frame
        return self.bodies.encode(
            sec=k,
            nanosec=1000 * k,
            frame_id="world",
            frame_number=k,
            ids=f.body_ids,
            names=f.body_names,
            valid=f.body_valid,
            poses=f.body_poses,
            mean_errors=f.body_errors,
            marker_offsets=f.marker_offsets,
            marker_ids=f.marker_ids,
            marker_names=f.marker_names,
            marker_positions=f.marker_positions,
            marker_occluded=f.marker_occluded,
            marker_residuals=f.marker_residuals,
        )

    def tf_message(self, k: int) -> bytes:
        return self.tf.encode(
            sec=k,
            nanosec=1000 * k,
            frame_id="world",
            child_frame_ids=self.children,
            poses=self.frame.body_poses,
        )

    def skeletons_message(self, k: int) -> bytes:
        f = self.frame
        return self.skeletons.encode(
            sec=k,
            nanosec=1000 * k,
            frame_id="world",
            frame_number=k,
            ids=f.skeleton_ids,
            names=f.skeleton_names,
            valid=f.skeleton_valid,
            segment_offsets=f.segment_offsets,
            segment_ids=f.segment_ids,
            segment_names=f.segment_names,
            segment_parent_ids=f.segment_parents,
            segment_valid=f.segment_valid,
            segment_poses=f.segment_poses,
        )


# ---------------------------------------------------------------------------- message objects
def _set_marker(m: Marker, mid, name, pos, occ, res) -> None:
    m.id = mid
    if name is not None:
        m.name = name
    p = m.position
    p.x, p.y, p.z = pos
    m.occluded = occ
    m.residual = res


def _set_pose(pose, row) -> None:
    p, q = pose.position, pose.orientation
    p.x, p.y, p.z, q.x, q.y, q.z, q.w = row


class ObjectsWay:
    """Message objects + serialize_message; ``reuse`` keeps them from frame to frame."""

    def __init__(self, frame: Frame, reuse: bool):
        self.frame = frame
        self.reuse = reuse
        self.children = tuple("mocap/" + n for n in frame.body_names)
        self.msgs: tuple | None = None

    def _fresh(self):
        f = self.frame
        markers = Markers()
        markers.markers = [Marker(name=n) for n in f.marker_names]
        bodies = RigidBodies()
        bodies.rigid_bodies = [RigidBody(name=n) for n in f.body_names]
        offs = f.marker_offsets.tolist()
        for i, body in enumerate(bodies.rigid_bodies):
            body.markers = [Marker(name=n) for n in f.marker_names[offs[i] : offs[i + 1]]]
        skeletons = Skeletons()
        soffs = f.segment_offsets.tolist()
        skeletons.skeletons = [Skeleton(name=n) for n in f.skeleton_names]
        for i, sk in enumerate(skeletons.skeletons):
            sk.segments = [Segment(name=n) for n in f.segment_names[soffs[i] : soffs[i + 1]]]
        tf = TFMessage()
        tf.transforms = [TransformStamped(child_frame_id=c) for c in self.children]
        for msg in (markers, bodies, skeletons):
            msg.header.frame_id = "world"
        for t in tf.transforms:
            t.header.frame_id = "world"
        return markers, bodies, skeletons, tf

    def encode(self, k: int) -> list[bytes]:
        if self.msgs is None or not self.reuse:
            self.msgs = self._fresh()
        markers, bodies, skeletons, tf = self.msgs
        f = self.frame
        m_rows = list(
            zip(
                f.marker_ids.tolist(),
                f.marker_positions.tolist(),
                f.marker_occluded.tolist(),
                f.marker_residuals.tolist(),
            )
        )
        for msg in (markers, bodies, skeletons):
            msg.header.stamp.sec, msg.header.stamp.nanosec, msg.frame_number = k, 1000 * k, k
        for m, (mid, pos, occ, res) in zip(markers.markers, m_rows):
            _set_marker(m, mid, None, pos, occ, res)
        offs = f.marker_offsets.tolist()
        poses = f.body_poses.tolist()
        for i, (body, bid, ok, pose, err) in enumerate(
            zip(
                bodies.rigid_bodies, f.body_ids.tolist(), f.body_valid.tolist(), poses, f.body_errors.tolist()
            )
        ):
            body.id, body.tracking_valid, body.mean_error = bid, ok, err
            _set_pose(body.pose, pose)
            for m, (mid, pos, occ, res) in zip(body.markers, m_rows[offs[i] : offs[i + 1]]):
                _set_marker(m, mid, None, pos, occ, res)
        for t, pose in zip(tf.transforms, poses):
            t.header.stamp.sec, t.header.stamp.nanosec = k, 1000 * k
            tr, rot = t.transform.translation, t.transform.rotation
            tr.x, tr.y, tr.z, rot.x, rot.y, rot.z, rot.w = pose
        out = [serialize_message(markers), serialize_message(bodies), serialize_message(tf)]
        if len(f.skeleton_names):
            soffs = f.segment_offsets.tolist()
            seg_rows = list(
                zip(
                    f.segment_ids.tolist(),
                    f.segment_parents.tolist(),
                    f.segment_valid.tolist(),
                    f.segment_poses.tolist(),
                )
            )
            for i, (sk, sid, ok) in enumerate(
                zip(skeletons.skeletons, f.skeleton_ids.tolist(), f.skeleton_valid.tolist())
            ):
                sk.id, sk.tracking_valid = sid, ok
                for seg, (segid, parent, s_ok, pose) in zip(sk.segments, seg_rows[soffs[i] : soffs[i + 1]]):
                    seg.id, seg.parent_id, seg.tracking_valid = segid, parent, s_ok
                    _set_pose(seg.pose, pose)
            out.append(serialize_message(skeletons))
        return out


# ---------------------------------------------------------------------------- timing
def measure(ways: Mapping[str, Callable[[int], object]]) -> dict[str, tuple[float, float]]:
    """Microseconds per call of each way: (median, best) over batches. The ways' batches
    are interleaved, so a load change on the (shared) machine hits them all alike."""
    sizes = {}
    for name, fn in ways.items():
        fn(0)  # first call: layouts, allocations
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.05:
            calls += 1
            fn(calls)
        sizes[name] = max(1, int(BATCH_SECONDS * calls / (time.perf_counter() - start)))
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(BATCHES):
        for name, fn in ways.items():
            n = sizes[name]
            t0 = time.perf_counter()
            for k in range(n):
                fn(k)
            samples[name].append((time.perf_counter() - t0) / n * 1e6)
    return {name: (statistics.median(v), min(v)) for name, v in samples.items()}


def _check_equal(frame: Frame) -> None:
    """The cdr bytes deserialize to what the objects hold (a guard against timing wrong code)."""
    from rclpy.serialization import deserialize_message

    ours = CdrWay(frame).encode(7)
    theirs = ObjectsWay(frame, reuse=False).encode(7)
    for raw, ref, msg_type in zip(ours, theirs, (Markers, RigidBodies, TFMessage, Skeletons)):
        if deserialize_message(raw, msg_type) != deserialize_message(ref, msg_type) or len(raw) != len(ref):
            raise AssertionError(f"{msg_type.__name__}: cdr output differs from serialize_message")


def _markers_layout_changes(frame: Frame) -> tuple[float, float, float]:
    """Markers = labeled names + a tail of 0..63 unlabeled ones (empty names) whose length
    changes every frame. Per-frame cost (1) cycling among 16 lengths with the same tuple
    objects (cache hits), (2) among 64 lengths, the names tuple rebuilt every frame (more
    lengths than the cache holds: served by the layout's spare room), (3) a labeled name
    changes every frame (a new layout every frame: the full cost of a miss)."""
    labeled = frame.marker_names
    n0 = len(labeled)
    rng = np.random.default_rng(1)
    pos = rng.normal(size=(n0 + 64, 3))
    ids = np.concatenate([frame.marker_ids, np.full(64, -1, dtype=np.int32)])
    occ = np.zeros(n0 + 64, dtype=bool)
    res = np.zeros(n0 + 64, dtype=np.float32)
    names_by_tail = [labeled + ("",) * t for t in range(64)]

    def run(names_of: Callable[[int], tuple[str, ...]]):
        encoder = MarkersEncoder()

        def one(k: int) -> bytes:
            names = names_of(k)
            n = len(names)
            return encoder.encode(
                sec=k,
                nanosec=0,
                frame_id="world",
                frame_number=k,
                ids=ids[:n],
                names=names,
                positions=pos[:n],
                occluded=occ[:n],
                residuals=res[:n],
            )

        return one

    counter = iter(range(10**9))
    times = measure(
        {
            "hits": run(lambda k: names_by_tail[k % 16]),
            "spare": run(lambda k: labeled + ("",) * (k % 64)),
            "miss": run(lambda k: labeled[:-1] + (f"renamed{next(counter)}",) + ("",) * (k % 8)),
        }
    )
    return times["hits"][0], times["spare"][0], times["miss"][0]


def _mocap_frames(frame: Frame, count: int = 16) -> list[MocapFrame]:
    """``count`` MocapFrames of ``frame``'s markers and bodies (no skeletons), positions
    moving from frame to frame, some markers occluded or NaN."""
    rng = np.random.default_rng(2)
    markers = len(frame.marker_ids)
    out = []
    for k in range(count):
        positions = frame.marker_positions + rng.normal(scale=1e-3, size=(markers, 3))
        positions[rng.random(markers) < 0.01] = np.nan
        occluded = rng.random(markers) < 0.05
        arrays = MarkerArrays(
            frame.marker_ids, frame.marker_names, positions, occluded, frame.marker_residuals
        )
        bodies = BodyArrays.build(
            frame.body_ids,
            frame.body_names,
            frame.body_poses[:, :3] + k * 1e-4,
            frame.body_poses[:, 3:],
            valid=frame.body_valid,
            mean_errors=frame.body_errors,
            markers=arrays,
            marker_counts=np.diff(frame.marker_offsets),
        )
        out.append(MocapFrame(frame_number=k, markers=arrays, bodies=bodies))
    return out


def _encode_one(encoder: FrameEncoder, frames: list[MocapFrame]) -> Callable[[int], EncodedFrame]:
    return lambda k: encoder.encode(frames[k % len(frames)], 1, k)


#: FrameEncoder scopes compared: (name, label, markers topic, rigid_bodies topic)
_SCOPES = (
    ("markers", "Markers alone", True, False),
    ("bodies", "RigidBodies alone", False, True),
    ("frame", "Markers + RigidBodies", True, True),
)


def _encoder_ways(frame: Frame) -> dict[str, Callable[[int], object]]:
    """FrameEncoder.encode per frame, numpy path and compiled pass: the frame's markers
    alone, the bodies (RigidBodies with their markers + empty Skeletons) alone and the
    whole frame (Markers + RigidBodies + empty Skeletons)."""
    frames = _mocap_frames(frame)
    ways: dict[str, Callable[[int], object]] = {}
    for name, compiled in (("numpy", False), ("compiled", True)):
        for scope, _, markers, bodies in _SCOPES:
            encoder = FrameEncoder(
                "world", markers=markers, rigid_bodies=bodies, skeletons=bodies, compiled=compiled
            )
            if encoder.compiled != compiled or (bodies and encoder.compiled_poses != compiled):
                raise AssertionError(f"the compiled passes are not available: {name} not measured")
            ways[f"{scope} {name}"] = _encode_one(encoder, frames)
    # the same bytes, frame for frame (a guard against timing wrong code)
    for k in range(2 * len(frames)):
        for scope, *_ in _SCOPES:
            new, old = ways[f"{scope} compiled"](k), ways[f"{scope} numpy"](k)
            assert isinstance(new, EncodedFrame) and isinstance(old, EncodedFrame)
            if (new.markers, new.rigid_bodies) != (old.markers, old.rigid_bodies):
                raise AssertionError(f"compiled markers pass: other bytes than numpy's ({scope}, frame {k})")
    return ways


def _compare_encoder(frame: Frame) -> None:
    times = measure(_encoder_ways(frame))
    for scope, label, *_ in _SCOPES:
        old, new = times[f"{scope} numpy"], times[f"{scope} compiled"]
        print(
            f"  FrameEncoder.encode, {label:22s} numpy {old[0]:6.1f} ({old[1]:.1f}), compiled pass "
            f"{new[0]:6.1f} ({new[1]:.1f}): {old[0] - new[0]:+.1f} us saved, {new[0] / old[0]:.2f}x"
        )


def run() -> None:
    print(f"microseconds per frame, median (best) of {BATCHES} interleaved batches; ratios of medians")
    if markers_pass.load() is None or bodies_pass.load() is None:
        print("(the compiled passes are not available here: FrameEncoder's comparison is left out)")
    else:
        print(
            f"(compiled markers pass loaded in {markers_pass.load_seconds():.2f} s, body poses pass in "
            f"{bodies_pass.load_seconds():.2f} s, before timing)"
        )
    for title, bodies, per_body, skeletons in CONFIGS:
        frame = make_frame(bodies, per_body, skeletons)
        _check_equal(frame)
        times = measure(
            {
                "cdr": CdrWay(frame).encode,
                "build": ObjectsWay(frame, reuse=False).encode,
                "refresh": ObjectsWay(frame, reuse=True).encode,
            }
        )
        cdr = times["cdr"][0]
        print(f"\n{title} (Markers + RigidBodies + TF{' + Skeletons' if skeletons else ''}):")
        for key, label in (
            ("cdr", "cdr encoders"),
            ("build", "(a) build objects + serialize_message"),
            ("refresh", "(b) refresh objects + serialize_message"),
        ):
            median, best = times[key]
            ratio = "" if key == "cdr" else f"   {median / cdr:6.1f}x the cdr time"
            print(f"  {label:40s} {median:9.1f} ({best:.1f}){ratio}")
        way = CdrWay(frame)
        parts = {
            "Markers": way.markers_message,
            "RigidBodies": way.bodies_message,
            "TFMessage": way.tf_message,
        }
        if skeletons:
            parts["Skeletons"] = way.skeletons_message
        print(
            "  cdr per message: "
            + ", ".join(
                f"{name} {median:.1f} ({best:.1f})" for name, (median, best) in measure(parts).items()
            )
        )
        hit, spare, miss = _markers_layout_changes(frame)
        print(
            f"  Markers + 0..63 unlabeled, count changing every frame: {hit:.1f} (16 counts, cache hits), "
            f"{spare:.1f} (64 counts, new tuple each frame: spare room)"
        )
        print(f"  Markers with a new layout every frame (a name changes): {miss:.1f}")
        if markers_pass.load() is not None and bodies_pass.load() is not None:
            _compare_encoder(frame)


if __name__ == "__main__":
    run()
