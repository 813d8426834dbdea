"""NatNet frames to :class:`~mocap4r2_control.frame.MocapFrame`: names and ids from the
model definitions, Motive's Y-up to ROS's Z-up, and skeleton bones from parent-relative
to world poses. Pure numpy, no sockets: the client feeds it decoded frames."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mocap4r2_control.frame import (
    NO_PARENT,
    UNKNOWN_ID,
    AssetNames,
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)
from mocap4r2_control.geometry import AxisChange
from mocap4r2_control.rotation import quat_multiply, quat_rotate

from . import protocol as nn
from .protocol import FrameOfData, ModelDefinitions

_IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])


@dataclass
class _SkeletonModel:
    name: str
    bone_ids: np.ndarray  # (s,) description order
    bone_names: tuple[str, ...]
    parent_ids: np.ndarray  # (s,) NO_PARENT for roots
    parent_rows: np.ndarray  # (s,) row of the parent in this skeleton, -1 for roots
    levels: list[np.ndarray]  # rows by depth, roots first (for local -> global)
    # (s, 4) x y z w: each bone's rotational offset from its parent (NatNet 4.2+); None
    # when every one is the identity (older bitstreams, or a skeleton without any)
    rest_rotations: np.ndarray | None = None


@dataclass
class ModelIndex:
    """What the model definitions say about names, marker labels and bone hierarchies."""

    body_names: dict[int, str] = field(default_factory=dict)
    marker_names: dict[tuple[int, int], str] = field(default_factory=dict)  # (body id, member) -> name
    skeletons: dict[int, _SkeletonModel] = field(default_factory=dict)
    generation: int = 0

    @classmethod
    def build(cls, defs: ModelDefinitions, generation: int = 0) -> ModelIndex:
        index = cls(generation=generation)
        set_names = {ms.name: ms.marker_names for ms in defs.marker_sets}
        for body in defs.rigid_bodies:
            index.body_names[body.id] = body.name
            names = [n for n in body.marker_names]
            fallback = set_names.get(body.name, ())
            for member in range(1, len(body.marker_positions) + 1):
                label = (
                    names[member - 1]
                    if member <= len(names) and names[member - 1]
                    else (fallback[member - 1] if member <= len(fallback) else f"Marker{member}")
                )
                index.marker_names[(body.id, member)] = f"{body.name}:{label}"
        for asset in defs.assets:
            # an asset's (trained markerset's) bodies and markers, named after the asset;
            # published with ids asset id << 16 | their own (no clash with rigid bodies)
            for body in asset.rigid_bodies:
                index.body_names[int(asset_body_ids(asset.id, body.id))] = f"{asset.name}:{body.name}"
            for marker in asset.markers:
                index.marker_names[(asset.id & 0xFFFF, marker.id & 0xFFFF)] = f"{asset.name}:{marker.name}"
        for skeleton in defs.skeletons:
            ids = np.asarray([b.id for b in skeleton.bones], dtype=np.int32)
            parents = np.asarray([b.parent_id for b in skeleton.bones], dtype=np.int32)
            known = np.isin(parents, ids) & (parents != ids)
            parents = np.where(known, parents, NO_PARENT).astype(np.int32)
            row_of = {int(b): r for r, b in enumerate(ids)}
            parent_rows = np.asarray([row_of.get(int(p), -1) for p in parents], dtype=np.int64)
            rest = np.asarray([b.orientation for b in skeleton.bones], dtype=np.float64).reshape(-1, 4)
            identity = np.all(rest == _IDENTITY, axis=1) | ~np.all(np.isfinite(rest), axis=1)
            index.skeletons[skeleton.id] = _SkeletonModel(
                skeleton.name,
                ids,
                tuple(b.name for b in skeleton.bones),
                parents,
                parent_rows,
                _depth_levels(parent_rows),
                None if identity.all() else np.where(identity[:, None], _IDENTITY, rest),
            )
        return index

    def asset_names(self) -> AssetNames:
        return AssetNames(
            rigid_bodies=tuple(self.body_names.values()),
            markers=tuple(self.marker_names.values()),
            skeletons=tuple(s.name for s in self.skeletons.values()),
        )


def _depth_levels(parent_rows: np.ndarray) -> list[np.ndarray]:
    depth = np.full(parent_rows.shape[0], -1, dtype=np.int64)
    depth[parent_rows < 0] = 0
    for _ in range(parent_rows.shape[0]):  # bounded: a cycle leaves rows at -1 (treated as roots)
        pending = (depth < 0) & (depth[np.maximum(parent_rows, 0)] >= 0) & (parent_rows >= 0)
        if not pending.any():
            break
        depth[pending] = depth[parent_rows[pending]] + 1
    depth[depth < 0] = 0
    return [np.flatnonzero(depth == d) for d in range(int(depth.max()) + 1)] if depth.size else []


@dataclass
class _Layout:
    """What only changes when the set of bodies or markers changes: ids, names, and
    which markers belong to which body. Cached from frame to frame."""

    marker_ids: np.ndarray
    marker_names: tuple[str, ...]
    body_ids: np.ndarray
    body_names: tuple[str, ...]
    body_marker_rows: np.ndarray  # rows of the body markers in the labeled marker list
    body_marker_offsets: np.ndarray
    body_marker_ids: np.ndarray
    body_marker_names: tuple[str, ...]


class FrameConverter:
    """NatNet frames to neutral MocapFrames: names from the model definitions, axes to
    Z-up, bone poses to global, markers grouped by body, latency from the server clock."""

    def __init__(self, up_axis: str = "y", skeleton_coordinates: str = "global"):
        self.y_up = up_axis == "y"
        self.axes = AxisChange("+Y" if self.y_up else "+Z")
        self.local_bones = skeleton_coordinates == "local"
        self.index = ModelIndex()
        self.clock_frequency = 0
        self.unknown_ids: set[int] = set()  # body/skeleton ids the model definitions lack
        self._layout_key: tuple[bytes, bytes, bytes] | None = None
        self._layout: _Layout | None = None
        self._bone_names: dict[tuple[int, bytes], tuple[str, ...]] = {}

    def set_models(self, index: ModelIndex) -> None:
        self.index = index
        self._layout_key = None
        self._bone_names.clear()
        self.unknown_ids.clear()

    def _positions(self, positions: np.ndarray) -> np.ndarray:
        return self.axes.positions(positions)  # float32 records -> float64 rows

    def _orientations(self, orientations: np.ndarray) -> np.ndarray:
        return self.axes.orientations(orientations)

    def latency(self, frame: FrameOfData) -> float:
        """System latency (mid-exposure to transmit) from the server clock, s; 0 if unknown."""
        freq = self.clock_frequency
        if freq <= 0 or frame.stamp_transmit <= 0:
            return 0.0
        start = frame.stamp_camera_mid_exposure or frame.stamp_data_received
        if not 0 < start <= frame.stamp_transmit:
            return 0.0
        return (frame.stamp_transmit - start) / freq

    def system_time(self, frame: FrameOfData) -> float:
        """The capture instant on Motive's clock, s: the mid-exposure timestamp over the
        server's clock frequency (NatNet 3+), else the frame's software timestamp. Passed
        on as read: the node's clock model counts and sets aside a value that is not sane."""
        freq = self.clock_frequency
        if freq > 0 and frame.stamp_camera_mid_exposure > 0:
            return frame.stamp_camera_mid_exposure / freq
        return float(frame.timestamp)

    def convert(self, frame: FrameOfData) -> MocapFrame:
        # values come from the wire: NaN, signalling NaN or inf are passed on as they are
        # (the node holds the last good value), without floating-point warnings
        with np.errstate(all="ignore"):
            return self._convert(frame)

    def _convert(self, frame: FrameOfData) -> MocapFrame:
        rb = frame.rigid_bodies
        lm = frame.labeled_markers
        if frame.assets:
            rb, lm = _with_assets(frame, rb, lm)
        layout = self._layout_for(rb, lm)
        if len(lm) == 0 and len(frame.other_markers):
            # an old configuration: unlabeled positions only in the legacy list
            n = len(frame.other_markers)
            markers = MarkerArrays(
                ids=np.full(n, UNKNOWN_ID, np.int32),
                names=("",) * n,
                positions=self._positions(frame.other_markers),
                occluded=np.zeros(n, bool),
                residuals=np.full(n, -1.0, np.float32),
            )
        else:
            markers = MarkerArrays(
                ids=layout.marker_ids,
                names=layout.marker_names,
                positions=self._positions(lm["position"]),
                occluded=(lm["params"] & nn.MARKER_OCCLUDED) != 0,
                residuals=lm["residual"].astype(np.float32),
            )
        rows = layout.body_marker_rows  # empty when there are no labeled markers
        body_markers = MarkerArrays(
            ids=layout.body_marker_ids,
            names=layout.body_marker_names,
            positions=markers.positions[rows],
            occluded=markers.occluded[rows],
            residuals=markers.residuals[rows],
        )
        bodies = BodyArrays(
            ids=layout.body_ids,
            names=layout.body_names,
            positions=self._positions(rb["position"]),
            orientations=self._orientations(rb["orientation"]),
            valid=(rb["params"] & nn.RIGID_BODY_TRACKING_VALID) != 0,
            mean_errors=rb["mean_error"].astype(np.float32),
            marker_offsets=layout.body_marker_offsets,
            markers=body_markers,
        )
        return MocapFrame(
            frame_number=max(int(frame.frame_number), 0),
            markers=markers,
            bodies=bodies,
            skeletons=self._skeletons(frame),
            latency=self.latency(frame),
            system_time=self.system_time(frame),
        )

    # ------------------------------------------------------------------ layout
    def _layout_for(self, rb: np.ndarray, lm: np.ndarray) -> _Layout:
        key = (rb["id"].tobytes(), lm["id"].tobytes(), (lm["params"] & nn.MARKER_UNLABELED).tobytes())
        if key != self._layout_key or self._layout is None:
            self._layout = self._build_layout(
                rb["id"].astype(np.int32),
                lm["id"].astype(np.int32),
                (lm["params"] & nn.MARKER_UNLABELED) != 0,
            )
            self._layout_key = key
        return self._layout

    def _build_layout(
        self, body_ids: np.ndarray, raw_marker_ids: np.ndarray, unlabeled: np.ndarray
    ) -> _Layout:
        model, member = nn.split_marker_id(raw_marker_ids)
        labeled = (model > 0) & ~unlabeled
        marker_ids = np.where(labeled, raw_marker_ids, UNKNOWN_ID).astype(np.int32)
        names = self._marker_names(model, member, labeled)
        nb = body_ids.shape[0]
        # the markers of each body: labeled markers whose model id is the body's id, by member
        body_row = _rows_of(body_ids, model)
        mine = labeled & (body_row >= 0)
        picked = np.flatnonzero(mine)
        picked = picked[np.lexsort((member[picked], body_row[picked]))]
        offsets = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(np.bincount(body_row[picked], minlength=nb), out=offsets[1:])
        return _Layout(
            marker_ids=marker_ids,
            marker_names=names,
            body_ids=body_ids,
            body_names=tuple(self._body_name(i) for i in body_ids.tolist()),
            body_marker_rows=picked,
            body_marker_offsets=offsets,
            body_marker_ids=marker_ids[picked],
            body_marker_names=tuple(names[i] for i in picked.tolist()),
        )

    def _body_name(self, body_id: int) -> str:
        name = self.index.body_names.get(body_id)
        if name is None:
            self.unknown_ids.add(body_id)
            return f"rigid_body_{body_id}"
        return name

    def _marker_names(self, model: np.ndarray, member: np.ndarray, labeled: np.ndarray) -> tuple[str, ...]:
        table = self.index.marker_names
        out = []
        for m, k, is_labeled in zip(model.tolist(), member.tolist(), labeled.tolist()):
            if not is_labeled:
                out.append("")
            else:
                name = table.get((m, k))
                out.append(name if name is not None else f"{self._body_name(m)}:Marker{k}")
        return tuple(out)

    # ------------------------------------------------------------------ skeletons
    def _skeletons(self, frame: FrameOfData) -> SkeletonArrays:
        if not frame.skeletons:
            return SkeletonArrays()
        skel_ids, skel_names, skel_valid, counts = [], [], [], []
        seg_names: list[str] = []
        seg_ids, seg_parents, seg_pos, seg_quat, seg_valid = [], [], [], [], []
        for skeleton in frame.skeletons:
            model = self.index.skeletons.get(skeleton.id)
            bones = skeleton.bones
            bone_ids = (bones["id"] & 0xFFFF).astype(np.int32)
            position = bones["position"].astype(np.float64)
            orientation = bones["orientation"].astype(np.float64)
            valid = (bones["params"] & nn.RIGID_BODY_TRACKING_VALID) != 0
            if model is None:
                self.unknown_ids.add(skeleton.id)
                names = tuple(f"bone_{i}" for i in bone_ids.tolist())
                parents = np.full(bone_ids.shape, NO_PARENT, np.int32)
                name = f"skeleton_{skeleton.id}"
            else:
                name = model.name
                rows = _rows_of(model.bone_ids, bone_ids)
                key = (skeleton.id, bone_ids.tobytes())
                cached = self._bone_names.get(key)
                if cached is None:
                    if len(self._bone_names) > 256:
                        self._bone_names.clear()
                    cached = self._bone_names[key] = tuple(
                        model.bone_names[r] if r >= 0 else f"bone_{b}"
                        for r, b in zip(rows.tolist(), bone_ids.tolist())
                    )
                names = cached
                parents = np.where(rows >= 0, model.parent_ids[np.maximum(rows, 0)], NO_PARENT).astype(
                    np.int32
                )
                if self.local_bones:
                    position, orientation = _local_to_global(model, rows, position, orientation)
            skel_ids.append(skeleton.id)
            skel_names.append(name)
            skel_valid.append(bool(valid.any()))
            counts.append(bone_ids.shape[0])
            seg_ids.append(bone_ids)
            seg_names.extend(names)
            seg_parents.append(parents)
            seg_pos.append(position)
            seg_quat.append(orientation)
            seg_valid.append(valid)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        segments = SegmentArrays(
            ids=np.concatenate(seg_ids),
            names=tuple(seg_names),
            parent_ids=np.concatenate(seg_parents),
            positions=self._positions(np.concatenate(seg_pos)),
            orientations=self._orientations(np.concatenate(seg_quat)),
            valid=np.concatenate(seg_valid),
        )
        return SkeletonArrays(
            ids=np.asarray(skel_ids, np.int32),
            names=tuple(skel_names),
            valid=np.asarray(skel_valid, bool),
            segment_offsets=offsets,
            segments=segments,
        )


def asset_body_ids(asset_id: int, body_ids: object) -> np.ndarray:
    """The ids an asset's rigid bodies are published with: asset id << 16 | body id."""
    return ((np.int64(asset_id) & 0xFFFF) << 16 | (np.asarray(body_ids, np.int64) & 0xFFFF)).astype(np.int32)


def _with_assets(frame: FrameOfData, rb: np.ndarray, lm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frame's rigid bodies and markers with its assets' (NatNet 4.1+): asset bodies
    appended as rigid bodies (ids from :func:`asset_body_ids`), asset markers appended
    unless the labeled marker list already has them (by id)."""
    bodies = [rb]
    markers = [lm]
    for asset in frame.assets:
        if len(asset.rigid_bodies):
            records = asset.rigid_bodies.copy()
            records["id"] = asset_body_ids(asset.id, records["id"])
            bodies.append(records)
        if len(asset.markers):
            markers.append(asset.markers)
    extra = np.concatenate(markers[1:]) if len(markers) > 1 else lm[:0]
    if len(extra):
        extra = extra[~np.isin(extra["id"], lm["id"])]
    return np.concatenate(bodies), np.concatenate((lm, extra))


def _rows_of(table: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Row of each value in ``table`` (unique ids), -1 when absent."""
    if table.size == 0:
        return np.full(values.shape, -1, np.int64)
    order = np.argsort(table, kind="stable")
    pos = np.minimum(np.searchsorted(table[order], values), table.size - 1)
    rows = order[pos]
    return np.where(table[rows] == values, rows, -1)


def _local_to_global(model: _SkeletonModel, rows: np.ndarray, position: np.ndarray, orientation: np.ndarray):
    """Compose bone poses given relative to their parents into world poses, one tree depth
    at a time (vectorised over the bones of a depth).

    The rotational offset of NatNet 4.2 (Motive 3.2+: the bones' rest orientation
    relative to their parent, from the model definitions) comes between the parent's
    orientation and the bone's streamed local rotation, which is relative to that rest
    orientation: world = parent * offset * local. Identity offsets (older bitstreams)
    leave the composition as it was. World (global) bone poses need no offset: Motive
    has composed them."""
    rest = model.rest_rotations
    if rest is not None:
        present = rows >= 0
        orientation = orientation.copy()
        orientation[present] = quat_multiply(rest[rows[present]], orientation[present])
    n = model.bone_ids.shape[0]
    frame_row = np.full(n, -1, np.int64)  # description row -> row in this frame
    present = rows >= 0
    frame_row[rows[present]] = np.flatnonzero(present)
    gp = position.copy()
    gq = orientation.copy()
    for level in model.levels[1:]:
        child = frame_row[level]
        parent = frame_row[model.parent_rows[level]]
        ok = (child >= 0) & (parent >= 0)
        child, parent = child[ok], parent[ok]
        gp[child] = gp[parent] + quat_rotate(gq[parent], position[child])
        gq[child] = quat_multiply(gq[parent], orientation[child])
    return gp, gq
