"""MocapFrame -> Markers / RigidBodies / Skeletons messages, on the hot path.

Messages are allocated once and refreshed in place (building hundreds of Marker
objects per frame costs about ten times more than refreshing them); name strings are
refreshed only when the adapter hands over a different names tuple. The validity rule
(hold the last good value) is applied here, so no NaN from a vendor reaches a message.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import TransformStamped
from mocap4r2_interfaces.msg import (
    Marker,
    Markers,
    RigidBodies,
    RigidBody,
    Segment,
    Skeleton,
    Skeletons,
)

from .frame import UNKNOWN_ID, MarkerArrays, MocapFrame
from .hold_last import IDENTITY_POSE, LastGoodValues, good_poses, sub_keys


def _grow(pool: list, count: int, factory) -> list:
    while len(pool) < count:
        pool.append(factory())
    return pool[:count]


@dataclass
class FrameCounts:
    """What one published frame contained (for diagnostics)."""

    bodies_valid: np.ndarray   # validity per body row, after the rule
    body_ids: np.ndarray
    body_names: tuple[str, ...]
    markers: int
    bodies: int
    skeletons: int


class MarkerListFiller:
    """Refreshes a list of Marker messages from MarkerArrays, holding occluded markers
    at their last position (keyed by ``keys``); markers with no position ever known
    (never seen, or unlabeled and not finite) are left out."""

    def __init__(self):
        self.pool: list[Marker] = []
        self.last = LastGoodValues(3)
        self._names: tuple[str, ...] | None = None
        self._layout: tuple[int, ...] | None = None

    def fill(self, arrays: MarkerArrays, keys: np.ndarray) -> list[Marker]:
        positions = arrays.positions
        finite = np.isfinite(positions).all(axis=1)
        labeled = arrays.ids != UNKNOWN_ID
        good = finite & ~arrays.occluded
        held, seen = self.last.update(keys, positions, good & labeled)
        # unlabeled markers have no identity to hold: they show only when measured
        keep = np.where(labeled, seen, finite)
        out_pos = np.where(labeled[:, None], held, positions)
        occluded = arrays.occluded | ~finite
        rows = np.flatnonzero(keep) if not keep.all() else None
        if rows is not None:
            out_pos = out_pos[rows]
            occluded = occluded[rows]
            ids = arrays.ids[rows]
            residuals = arrays.residuals[rows]
        else:
            ids = arrays.ids
            residuals = arrays.residuals
        n = out_pos.shape[0]
        markers = _grow(self.pool, n, Marker)
        layout = (n,) if rows is None else tuple(rows.tolist())
        # identity first: adapters reuse their names tuple; slices compare equal cheaply
        if layout != self._layout or (arrays.names is not self._names and arrays.names != self._names):
            names = arrays.names if rows is None else [arrays.names[i] for i in rows.tolist()]
            for msg, name in zip(markers, names):
                msg.name = name
            self._names = arrays.names
            self._layout = layout
        residuals = np.where(occluded, -1.0, residuals)
        for msg, mid, (x, y, z), occ, res in zip(markers, ids.tolist(), out_pos.tolist(),
                                                 occluded.tolist(), residuals.tolist()):
            msg.id = mid
            point = msg.position
            point.x = x
            point.y = y
            point.z = z
            msg.occluded = occ
            msg.residual = res
        return markers


class FrameMessages:
    """Preallocated messages of one system and the state of the validity rule."""

    def __init__(self, frame_id: str, tf_prefix: str = ""):
        self.markers_msg = Markers()
        self.bodies_msg = RigidBodies()
        self.skeletons_msg = Skeletons()
        for msg in (self.markers_msg, self.bodies_msg, self.skeletons_msg):
            msg.header.frame_id = frame_id
        self.frame_id = frame_id
        self.tf_prefix = tf_prefix
        self._frame_markers = MarkerListFiller()
        self._body_pool: list[RigidBody] = []
        self._body_marker_fillers: list[MarkerListFiller] = []
        self._body_last = LastGoodValues(7, IDENTITY_POSE)
        self._body_names: tuple[str, ...] | None = None
        self._skeleton_pool: list[Skeleton] = []
        self._segment_pools: list[list[Segment]] = []
        self._segment_last = LastGoodValues(7, IDENTITY_POSE)
        self._skeleton_names: tuple | None = None
        self._tf_pool: list[TransformStamped] = []

    def reset(self) -> None:
        """Forget held values (a new connection may renumber assets)."""
        self.__init__(self.frame_id, self.tf_prefix)

    # ------------------------------------------------------------------ markers
    def fill_markers(self, frame: MocapFrame) -> Markers:
        msg = self.markers_msg
        msg.frame_number = frame.frame_number
        msg.markers = self._frame_markers.fill(frame.markers, frame.markers.ids.astype(np.int64))
        return msg

    # ------------------------------------------------------------------ rigid bodies
    def fill_bodies(self, frame: MocapFrame, with_markers: bool = True) -> tuple[RigidBodies, np.ndarray, np.ndarray]:
        """Returns the message, the validity per body and the (n, 7) poses published."""
        bodies = frame.bodies
        n = len(bodies)
        msg = self.bodies_msg
        msg.frame_number = frame.frame_number
        good, poses = good_poses(bodies.positions, bodies.orientations, bodies.valid)
        held, _ = self._body_last.update(bodies.ids.astype(np.int64), poses, good)
        items = _grow(self._body_pool, n, RigidBody)
        if bodies.names is not self._body_names:
            for item, name in zip(items, bodies.names):
                item.name = name
            self._body_names = bodies.names
        mean_errors = np.where(good, bodies.mean_errors, -1.0).tolist()
        for item, bid, ok, pose, err in zip(items, bodies.ids.tolist(), good.tolist(), held.tolist(), mean_errors):
            item.id = bid
            item.tracking_valid = ok
            p = item.pose.position
            p.x, p.y, p.z = pose[0], pose[1], pose[2]
            q = item.pose.orientation
            q.x, q.y, q.z, q.w = pose[3], pose[4], pose[5], pose[6]
            item.mean_error = err
        if with_markers and len(bodies.markers):
            self._fill_body_markers(frame, items)
        elif not with_markers:
            for item in items:
                if item.markers:
                    item.markers = []
        msg.rigid_bodies = items
        return msg, good, held

    def _fill_body_markers(self, frame: MocapFrame, items: list[RigidBody]) -> None:
        bodies = frame.bodies
        offsets = bodies.marker_offsets
        # one filler per body row: each keeps its body's marker names and held positions
        fillers = _grow(self._body_marker_fillers, len(items), MarkerListFiller)
        keys = sub_keys(bodies.ids, offsets)
        markers = bodies.markers
        for i, (item, filler) in enumerate(zip(items, fillers)):
            a, b = int(offsets[i]), int(offsets[i + 1])
            if a == b:
                if item.markers:
                    item.markers = []
                continue
            part = MarkerArrays(ids=markers.ids[a:b], names=markers.names[a:b],
                                positions=markers.positions[a:b], occluded=markers.occluded[a:b],
                                residuals=markers.residuals[a:b])
            item.markers = filler.fill(part, keys[a:b])

    # ------------------------------------------------------------------ skeletons
    def fill_skeletons(self, frame: MocapFrame) -> Skeletons:
        sk = frame.skeletons
        msg = self.skeletons_msg
        msg.frame_number = frame.frame_number
        seg = sk.segments
        good, poses = good_poses(seg.positions, seg.orientations, seg.valid)
        keys = sub_keys(sk.ids, sk.segment_offsets)
        held, _ = self._segment_last.update(keys, poses, good)
        items = _grow(self._skeleton_pool, len(sk), Skeleton)
        names_changed = sk.names is not self._skeleton_names
        while len(self._segment_pools) < len(items):
            self._segment_pools.append([])
        for i, (item, sid, ok) in enumerate(zip(items, sk.ids.tolist(), sk.valid.tolist())):
            a, b = int(sk.segment_offsets[i]), int(sk.segment_offsets[i + 1])
            item.id = sid
            item.tracking_valid = ok
            segments = _grow(self._segment_pools[i], b - a, Segment)
            if names_changed:
                item.name = sk.names[i]
                for s, name in zip(segments, seg.names[a:b]):
                    s.name = name
            for s, segid, parent, s_ok, pose in zip(segments, seg.ids[a:b].tolist(), seg.parent_ids[a:b].tolist(),
                                                     good[a:b].tolist(), held[a:b].tolist()):
                s.id = segid
                s.parent_id = parent
                s.tracking_valid = s_ok
                p = s.pose.position
                p.x, p.y, p.z = pose[0], pose[1], pose[2]
                q = s.pose.orientation
                q.x, q.y, q.z, q.w = pose[3], pose[4], pose[5], pose[6]
            item.segments = segments
        self._skeleton_names = sk.names
        msg.skeletons = items
        return msg

    # ------------------------------------------------------------------ tf
    def transforms(self, frame: MocapFrame, good: np.ndarray, poses: np.ndarray, stamp) -> list[TransformStamped]:
        """frame_id -> tf_prefix + name for every body tracked in this frame."""
        rows = np.flatnonzero(good).tolist()
        out = _grow(self._tf_pool, len(rows), TransformStamped)
        names = frame.bodies.names
        for t, row in zip(out, rows):
            t.header.stamp = stamp
            t.header.frame_id = self.frame_id
            t.child_frame_id = self.tf_prefix + names[row]
            x, y, z, qx, qy, qz, qw = poses[row].tolist()
            tr = t.transform.translation
            tr.x, tr.y, tr.z = x, y, z
            rot = t.transform.rotation
            rot.x, rot.y, rot.z, rot.w = qx, qy, qz, qw
        return out
