"""MocapFrame -> serialized Markers / RigidBodies / Skeletons / TFMessage, on the hot path.

Two steps per frame, both vectorised:
  1. the validity rule of the interfaces (hold the last good value, never NaN; see
     hold_last.py) turns the adapter's arrays into the arrays to publish;
  2. the CDR encoders (cdr.py) write those arrays straight into message bytes, which
     rclpy publishes as they are. Building or refreshing message objects instead costs
     tens of times more for hundreds of markers (bench/bench_cdr.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cdr import MarkersEncoder, RigidBodiesEncoder, SkeletonsEncoder, TFMessageEncoder
from .frame import UNKNOWN_ID, MarkerArrays, MocapFrame
from .hold_last import IDENTITY_POSE, LastGoodValues, SubKeys, good_poses

_ONES3 = np.ones(3)
_NO_SEGMENTS = (np.zeros(0, dtype=bool), np.zeros((0, 7)))


def _same_names(names, cached) -> bool:
    # identity first: adapters hand over the same tuple frame after frame
    return names is cached or (cached is not None and tuple(names) == cached)


@dataclass
class PublishedMarkers:
    """Markers after the validity rule: what goes into a message."""

    ids: np.ndarray
    names: tuple[str, ...]
    positions: np.ndarray
    occluded: np.ndarray
    residuals: np.ndarray
    kept: np.ndarray | None   # rows of the input kept (None: all)


class MarkerRule:
    """Occluded labeled markers keep their last position (per key); markers with no
    position ever known (labeled and never seen, or unlabeled and not finite) are left
    out. The kept names are cached so unchanged frames pass the same tuple on."""

    def __init__(self):
        self.last = LastGoodValues(3)
        self._source: tuple[str, ...] | None = None
        self._rows = b""
        self._names: tuple[str, ...] = ()
        self._ids_bytes: bytes | None = None
        self._labeled = np.zeros(0, dtype=bool)
        self._all_labeled = True

    def apply(self, arrays: MarkerArrays, keys: np.ndarray) -> PublishedMarkers:
        positions = arrays.positions
        # row sums through a matrix product: NaN or inf in a row makes its sum non-finite
        # (inf - inf is NaN), at a fraction of the cost of an axis reduction over 3 columns
        finite = np.isfinite(positions @ _ONES3)
        ids_bytes = arrays.ids.tobytes()
        # which markers are labeled changes with the ids only (the length check tells
        # apart equal bytes of another dtype)
        if ids_bytes != self._ids_bytes or arrays.ids.shape != self._labeled.shape:
            self._labeled = arrays.ids != UNKNOWN_ID
            self._all_labeled = bool(self._labeled.all())
            self._ids_bytes = ids_bytes
        labeled, all_labeled = self._labeled, self._all_labeled
        measured = finite & ~arrays.occluded
        held, seen = self.last.update(keys, positions, measured if all_labeled else measured & labeled)
        occluded = ~measured
        # with every marker labeled (the usual case), the held positions are the output
        out_pos = held if all_labeled else np.where(labeled[:, None], held, positions)
        residuals = np.where(occluded, np.float32(-1.0), arrays.residuals).astype(np.float32, copy=False)
        if all_labeled and self.last.all_seen:  # every marker has a position: all are kept
            return PublishedMarkers(arrays.ids, arrays.names, out_pos, occluded, residuals, None)
        keep = seen if all_labeled else np.where(labeled, seen, finite)
        if keep.all():
            return PublishedMarkers(arrays.ids, arrays.names, out_pos, occluded, residuals, None)
        rows = np.flatnonzero(keep)
        rows_bytes = rows.tobytes()
        if rows_bytes != self._rows or not _same_names(arrays.names, self._source):
            self._names = tuple(arrays.names[i] for i in rows.tolist())
            self._source, self._rows = arrays.names, rows_bytes
        return PublishedMarkers(arrays.ids[rows], self._names, out_pos[rows], occluded[rows], residuals[rows], rows)


@dataclass
class EncodedFrame:
    markers: bytes | None
    rigid_bodies: bytes | None
    skeletons: bytes | None
    tf: bytes | None
    body_valid: np.ndarray      # the validity published for each body row
    body_poses: np.ndarray      # (n, 7) poses published


class FrameEncoder:
    """The per-system state of the validity rule and the encoders of its topics."""

    def __init__(self, frame_id: str, tf_prefix: str = "", *, markers: bool = True, rigid_bodies: bool = True,
                 body_markers: bool = True, skeletons: bool = True, tf: bool = False):
        self.frame_id = frame_id
        self.tf_prefix = tf_prefix
        self.enabled = {"markers": markers, "rigid_bodies": rigid_bodies, "skeletons": skeletons, "tf": tf}
        self.body_markers = body_markers
        self._markers = MarkersEncoder()
        self._bodies = RigidBodiesEncoder()
        self._skeletons = SkeletonsEncoder()
        self._tf = TFMessageEncoder()
        self._frame_markers = MarkerRule()
        self._body_marker_rule = MarkerRule()
        self._body_last = LastGoodValues(7, IDENTITY_POSE)
        self._segment_last = LastGoodValues(7, IDENTITY_POSE)
        self._body_marker_keys = SubKeys()
        self._segment_keys = SubKeys()
        self._child_source: tuple[str, ...] | None = None
        self._child_rows = b""
        self._child_names: tuple[str, ...] = ()

    def encode(self, frame: MocapFrame, sec: int, nanosec: int) -> EncodedFrame:
        number = frame.frame_number
        markers = self._encode_markers(frame, sec, nanosec) if self.enabled["markers"] else None
        bodies = frame.bodies
        good, poses = good_poses(bodies.positions, bodies.orientations, bodies.valid)
        held, _ = self._body_last.update(bodies.ids.astype(np.int64), poses, good)
        rigid_bodies = None
        if self.enabled["rigid_bodies"]:
            mean_errors = np.where(good, bodies.mean_errors, np.float32(-1.0))
            if self.body_markers and len(bodies.markers):
                bm = self._body_marker_rule.apply(bodies.markers, self._body_marker_keys(bodies.ids, bodies.marker_offsets))
                offsets = bodies.marker_offsets
                if bm.kept is not None:
                    # recount each body's markers after leaving out the never-seen ones
                    owner = np.repeat(np.arange(len(bodies)), np.diff(offsets))[bm.kept]
                    offsets = np.zeros(len(bodies) + 1, dtype=np.int64)
                    np.cumsum(np.bincount(owner, minlength=len(bodies)), out=offsets[1:])
            else:
                bm = PublishedMarkers(np.zeros(0, np.int32), (), np.zeros((0, 3)), np.zeros(0, bool),
                                      np.zeros(0, np.float32), None)
                offsets = np.zeros(len(bodies) + 1, dtype=np.int64)
            rigid_bodies = self._bodies.encode(
                sec, nanosec, self.frame_id, number, bodies.ids, bodies.names, good, held, mean_errors,
                offsets, bm.ids, bm.names, bm.positions, bm.occluded, bm.residuals)
        skeletons = self._encode_skeletons(frame, sec, nanosec) if self.enabled["skeletons"] else None
        tf = self._encode_tf(frame, good, held, sec, nanosec) if self.enabled["tf"] else None
        return EncodedFrame(markers, rigid_bodies, skeletons, tf, good, held)

    def _encode_markers(self, frame: MocapFrame, sec: int, nanosec: int) -> bytes:
        m = self._frame_markers.apply(frame.markers, frame.markers.ids.astype(np.int64))
        return self._markers.encode(sec, nanosec, self.frame_id, frame.frame_number, m.ids, m.names,
                                    m.positions, m.occluded, m.residuals)

    def _encode_skeletons(self, frame: MocapFrame, sec: int, nanosec: int) -> bytes:
        sk = frame.skeletons
        if not len(sk):   # most systems stream no skeletons: an empty message each frame
            return self._skeletons.encode_empty(sec, nanosec, self.frame_id, frame.frame_number)
        seg = sk.segments
        if len(seg):
            good, poses = good_poses(seg.positions, seg.orientations, seg.valid)
            held, _ = self._segment_last.update(self._segment_keys(sk.ids, sk.segment_offsets), poses, good)
        else:  # skeletons without segments: nothing to hold
            good, held = _NO_SEGMENTS
        return self._skeletons.encode(sec, nanosec, self.frame_id, frame.frame_number, sk.ids, sk.names,
                                      sk.valid, sk.segment_offsets, seg.ids, seg.names, seg.parent_ids, good, held)

    def _encode_tf(self, frame: MocapFrame, good: np.ndarray, poses: np.ndarray, sec: int,
                   nanosec: int) -> bytes | None:
        """frame_id -> tf_prefix + name for every body tracked in this frame."""
        rows = np.flatnonzero(good)
        if rows.size == 0:
            return None
        names = frame.bodies.names
        rows_bytes = rows.tobytes()
        if rows_bytes != self._child_rows or not _same_names(names, self._child_source):
            self._child_names = tuple(self.tf_prefix + names[i] for i in rows.tolist())
            self._child_source, self._child_rows = names, rows_bytes
        return self._tf.encode(sec, nanosec, self.frame_id, self._child_names, poses[rows])
