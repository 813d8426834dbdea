"""The NatNet view of a simulated scene, as natnet_simulator serves it: Motive's model
definitions and frames of data for the scene, in Motive's conventions (Y-up by default,
labeled marker ids = body id << 16 | member, unlabeled markers with model id 0, bone ids
= skeleton id << 16 | bone id in world or parent coordinates, a lost body's zero pose).
Pure Python + numpy, no sockets."""

from __future__ import annotations

import struct

import numpy as np

from mocap4r2_control.frame import MocapFrame
from mocap4r2_control.geometry import AxisChange
from mocap4r2_control.rotation import quat_from_axis_angle, quat_multiply, quat_rotate

from ..simulated import scene as scene_module
from . import protocol as nn
from .protocol import FrameOfData, ModelDefinitions

MARKER_SIZE = 0.014  # metres, a common passive marker
ASSET_ID = 9  # the stand-in's asset (``--assets``)
ASSET_TYPE_TRAINED_MARKERSET = 1
#: the stand-in's IMU and GPIO items: layouts of its own (Motive's are not public; a client
#: skips the sections by their size whatever they hold)
IMU_ITEM = struct.Struct("<i6f")
GPIO_ITEM = struct.Struct("<BB")
FUTURE_SECTION_BYTES = b"a future Motive's section\0" + bytes(range(16))
UNLABELED_ID_BASE = 50000  # point-cloud ids of unlabeled markers (model id 0)


class SceneStream:
    """The NatNet view of a Scene: model definitions and frames of data, in Motive's
    conventions (axis, ids, zero pose of lost bodies)."""

    def __init__(
        self,
        scene: scene_module.Scene,
        *,
        up_axis: str = "y",
        skeleton_coordinates: str = "global",
        future: bool = False,
        rotational_offsets: bool = False,
        assets: bool = False,
    ):
        self.scene = scene
        self.future = future  # a "future Motive": an unknown sized section in every frame
        # a trained markerset (NatNet 4.1+ asset) made of the first rigid body and its markers
        self.assets = assets and bool(scene.description.bodies)
        self.y_up = up_axis == "y"
        self.axes = AxisChange("+Y" if self.y_up else "+Z").inverse()  # Z-up scene -> stream
        self.local_bones = skeleton_coordinates == "local"
        desc = scene.description
        self.body_names = [b.name for b in desc.bodies]
        self.body_ids = np.asarray([b.id for b in desc.bodies], dtype=np.int32)
        counts = [len(b.marker_ids) for b in desc.bodies]
        self.marker_body = np.repeat(np.arange(len(desc.bodies)), counts)
        self.marker_member = (
            np.concatenate([np.arange(1, c + 1) for c in counts]) if counts else np.zeros(0, int)
        )
        self.labeled_ids = (
            nn.marker_id(self.body_ids[self.marker_body], self.marker_member)
            if counts
            else np.zeros(0, np.int32)
        )
        self.unlabeled_ids = nn.marker_id(0, UNLABELED_ID_BASE + np.arange(desc.unlabeled_markers))
        skeletons = desc.skeletons
        self.bone_ids = (
            np.concatenate(
                [np.asarray(s.id, np.int64) << 16 | s.segment_ids.astype(np.int64) for s in skeletons]
            ).astype(np.int32)
            if skeletons
            else np.zeros(0, np.int32)
        )
        # parent row of each bone in the concatenated bone arrays (-1 for roots)
        parent_rows = []
        start = 0
        for s in skeletons:
            row_of = {int(b): start + r for r, b in enumerate(s.segment_ids)}
            parent_rows += [row_of.get(int(p), -1) for p in s.parent_ids]
            start += len(s.segment_ids)
        self.bone_parent_rows = np.asarray(parent_rows, dtype=np.int64)
        # the bones' rest orientation relative to their parent (Z-up scene frame), as a
        # Motive 3.2+ (bitstream 4.2) describes it: local bone rotations are streamed
        # relative to it. Identity for an older Motive. Made up, deterministic, varied.
        rows = np.arange(self.bone_ids.shape[0])
        self.bone_rest = (
            quat_from_axis_angle(
                np.stack([0.3 + 0.0 * rows, 0.2 * (rows % 3), np.ones_like(rows, float)], axis=1),
                0.15 * (1 + rows % 4),
            )
            if rotational_offsets
            else np.tile([0.0, 0.0, 0.0, 1.0], (rows.shape[0], 1))
        )
        self.generation = 0

    # ------------------------------------------------------------------ axes
    # the scene is Z-up; Motive streams Y-up unless told otherwise
    def _positions(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=float).reshape(-1, 3)
        return self.axes.positions(p)

    def _orientations(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=float).reshape(-1, 4)
        return self.axes.orientations(q)

    # ------------------------------------------------------------------ models
    def rename_body(self, body_id: int, name: str) -> bool:
        rows = np.flatnonzero(self.body_ids == body_id)
        if rows.size == 0 or not name or "\0" in name or "," in name:
            return False
        self.body_names[int(rows[0])] = name
        self.generation += 1
        return True

    def model_definitions(self) -> ModelDefinitions:
        desc = self.scene.description
        defs = ModelDefinitions()
        for body, name in zip(desc.bodies, self.body_names):
            labels = tuple(n.split(":", 1)[-1] for n in body.marker_names)
            defs.marker_sets.append(nn.MarkerSetDescription(name, labels))
            defs.rigid_bodies.append(
                nn.RigidBodyDescription(
                    name=name,
                    id=body.id,
                    parent_id=-1,
                    offset=np.zeros(3, np.float32),
                    marker_positions=self._positions(body.marker_layout).astype(np.float32),
                    marker_labels=np.zeros(len(labels), np.int32),
                    marker_names=labels,
                )
            )
        first = 0  # row of the skeleton's first bone in the concatenated bone arrays
        for skeleton in desc.skeletons:
            offsets = self._positions(skeleton.offsets).astype(np.float32)
            rest = self._orientations(self.bone_rest[first : first + len(skeleton.segment_ids)])
            first += len(skeleton.segment_ids)
            bones = [
                nn.RigidBodyDescription(
                    name=str(n), id=int(i), parent_id=int(p), offset=offsets[r], orientation=rest[r]
                )
                for r, (n, i, p) in enumerate(
                    zip(skeleton.segment_names, skeleton.segment_ids, skeleton.parent_ids)
                )
            ]
            defs.skeletons.append(nn.SkeletonDescription(skeleton.name, skeleton.id, bones))
        if self.assets:
            owner = defs.rigid_bodies[0]
            defs.assets.append(
                nn.AssetDescription(
                    f"{owner.name}_markerset",
                    ASSET_TYPE_TRAINED_MARKERSET,
                    ASSET_ID,
                    [owner],
                    [
                        nn.MarkerDescription(name, member, position, MARKER_SIZE, 0)
                        for member, (name, position) in enumerate(
                            zip(owner.marker_names, owner.marker_positions), start=1
                        )
                    ],
                )
            )
        return defs

    # ------------------------------------------------------------------ frames
    def frame_of_data(self, k: int, frame: MocapFrame | None = None) -> FrameOfData:
        scene = self.scene
        frame = scene.frame(k) if frame is None else frame
        bodies = frame.bodies
        nb = len(bodies)

        rb = nn.empty_rigid_bodies(nb)
        rb["id"] = bodies.ids
        valid = bodies.valid
        rb["position"] = np.where(valid[:, None], self._positions(np.nan_to_num(bodies.positions)), 0.0)
        rb["orientation"] = np.where(
            valid[:, None], self._orientations(np.nan_to_num(bodies.orientations)), 0.0
        )
        rb["mean_error"] = bodies.mean_errors
        rb["params"] = np.where(valid, nn.RIGID_BODY_TRACKING_VALID, 0)

        body_markers = bodies.markers
        positions = self._positions(body_markers.positions).astype(np.float32)
        offsets = bodies.marker_offsets.tolist()
        sets = [
            nn.MarkerSetData(self.body_names[i], positions[offsets[i] : offsets[i + 1]]) for i in range(nb)
        ]

        nl = len(body_markers)
        strays = frame.markers.positions[nl:]
        lm = nn.empty_markers(nl + len(strays))
        lm["id"][:nl] = self.labeled_ids
        lm["id"][nl:] = self.unlabeled_ids[: len(strays)]
        lm["position"][:nl] = positions
        lm["position"][nl:] = self._positions(strays)
        lm["size"] = MARKER_SIZE
        lm["params"][:nl] = np.where(body_markers.occluded, nn.MARKER_OCCLUDED, 0) | nn.MARKER_HAS_MODEL
        lm["params"][nl:] = nn.MARKER_UNLABELED
        lm["residual"][:nl] = body_markers.residuals
        lm["residual"][nl:] = frame.markers.residuals[nl:]

        out = FrameOfData(
            frame_number=k,
            marker_sets=sets,
            other_markers=self._positions(strays).astype(np.float32),
            rigid_bodies=rb,
            labeled_markers=lm,
            timestamp=scene.time_of(k),
            # 4.5's IMU and GPIO sections (only written from 4.5 on): opaque contents that
            # change with the frame, so that skipping them is exercised for real
            imu=nn.Opaque(0, 1, IMU_ITEM.pack(k, k * 0.001, 0.0, 9.81, 0.0, 0.0, 0.0)),
            gpio=nn.Opaque(0, 1, GPIO_ITEM.pack(k & 0xFF, 0)),
            extra_sections=[nn.Opaque(0, 2, FUTURE_SECTION_BYTES)] if self.future else [],
        )
        if self.assets:  # the first body and its markers, as the asset's
            first = int(offsets[1]) if nb else 0
            asset_markers = lm[:first].copy()
            asset_markers["id"] = nn.marker_id(ASSET_ID, self.marker_member[:first])
            out.assets = [nn.AssetData(ASSET_ID, rb[:1].copy(), asset_markers)]
        skeletons = frame.skeletons
        if len(skeletons):
            seg = skeletons.segments
            pos, quat = np.nan_to_num(seg.positions), np.nan_to_num(seg.orientations)
            if self.local_bones:
                pos, quat = self._to_parent_frames(pos, quat)
            bones = nn.empty_rigid_bodies(len(seg))
            bones["id"] = self.bone_ids
            bones["position"] = np.where(seg.valid[:, None], self._positions(pos), 0.0)
            bones["orientation"] = np.where(seg.valid[:, None], self._orientations(quat), 0.0)
            bones["params"] = np.where(seg.valid, nn.RIGID_BODY_TRACKING_VALID, 0)
            so = skeletons.segment_offsets
            out.skeletons = [
                nn.SkeletonData(int(sid), bones[so[i] : so[i + 1]])
                for i, sid in enumerate(skeletons.ids.tolist())
            ]
        return out

    def _to_parent_frames(self, pos: np.ndarray, quat: np.ndarray):
        """World bone poses to poses relative to each bone's parent (roots stay world),
        the rotation relative to the bone's rest orientation in its parent
        (``bone_rest``: parent * rest * local = world)."""
        parents = self.bone_parent_rows
        child = parents >= 0
        p = parents[child]
        conj = np.array([-1.0, -1.0, -1.0, 1.0])
        inv = quat[p] * conj
        local_pos = pos.copy()
        local_quat = quat.copy()
        local_pos[child] = quat_rotate(inv, pos[child] - pos[p])
        local_quat[child] = quat_multiply(inv, quat[child])
        return local_pos, quat_multiply(self.bone_rest * conj, local_quat)
