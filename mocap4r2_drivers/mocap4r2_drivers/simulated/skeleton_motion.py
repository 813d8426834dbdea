"""The skeletons of a scene: read from its ``skeletons:`` entries, animated by forward
kinematics from their root trajectories (pure numpy, no ROS).

Each skeleton is the human template (scene_description.HUMAN_SEGMENTS) whose segments
swing about their axes at the skeleton's step rate, a walking gait; the root follows the
skeleton's trajectory row. The poses of all segments of all skeletons for a batch of
times are computed one tree depth at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mocap4r2_control.frame import NO_PARENT
from mocap4r2_control.rotation import quat_from_axis_angle, quat_multiply, quat_rotate

from .scene_description import HUMAN_SEGMENTS, SceneError, SkeletonSpec, entry_name, number, tracking_loss
from .trajectories import Trajectories, lost_at


@dataclass
class _Skeleton:
    spec: SkeletonSpec
    trajectory: int  # row in the trajectory tables
    parent_rows: list[int]  # parent's row in this skeleton or -1
    swing_axes: np.ndarray  # (s, 3)
    swing_amp: np.ndarray  # (s,)
    swing_phase: np.ndarray  # (s,)
    step_rate: float  # gait cycles per second
    loss: tuple[float, float]  # (every, duration) seconds, (0, 0) = never lost


class SkeletonMotion:
    """The skeletons of a scene and their segment poses over time."""

    def __init__(
        self, entries: list[Any], first_row: int, trajectories: Trajectories, rng: np.random.Generator
    ):
        """``entries`` are the scene's ``skeletons:``; skeleton i follows trajectory row
        ``first_row + i``, which is set here (drawing from ``rng``)."""
        skeletons: list[_Skeleton] = []
        skel_ids: set[int] = set()
        for i, cfg in enumerate(entries):
            name = entry_name(cfg, f"skeletons[{i}]")
            where = f"skeletons[{i}] ({name})"
            skel_id = int(number(cfg, "id", i + 1, where))
            if skel_id in skel_ids or skel_id < 0:
                raise SceneError(f"{where}: id {skel_id} is negative or used twice")
            skel_ids.add(skel_id)
            if cfg.get("template", "human") != "human":
                raise SceneError(f"{where}: template: only 'human' exists")
            row = first_row + i
            trajectories.set(row, cfg.get("trajectory", {"type": "static"}), rng, f"{where}: trajectory")
            names = tuple(s[0] for s in HUMAN_SEGMENTS)
            index = {n: j for j, n in enumerate(names)}
            seg_ids = np.arange(1, len(HUMAN_SEGMENTS) + 1, dtype=np.int32)
            parents = np.asarray(
                [seg_ids[index[s[1]]] if s[1] else NO_PARENT for s in HUMAN_SEGMENTS], dtype=np.int32
            )
            spec = SkeletonSpec(
                id=skel_id,
                name=name,
                segment_ids=seg_ids,
                segment_names=names,
                parent_ids=parents,
                offsets=np.asarray([s[2] for s in HUMAN_SEGMENTS], dtype=float),
            )
            skeletons.append(
                _Skeleton(
                    spec=spec,
                    trajectory=row,
                    parent_rows=[index[s[1]] if s[1] else -1 for s in HUMAN_SEGMENTS],
                    swing_axes=np.asarray([s[3] or (1, 0, 0) for s in HUMAN_SEGMENTS], dtype=float),
                    swing_amp=np.asarray([s[4] for s in HUMAN_SEGMENTS]),
                    swing_phase=np.asarray([s[5] for s in HUMAN_SEGMENTS]),
                    step_rate=number(cfg, "step_rate", 0.9, where),
                    loss=tracking_loss(cfg, where),
                )
            )
        self._skeletons = skeletons
        self.first_row = first_row
        self.specs = [s.spec for s in skeletons]
        self._prepare_arrays()

    def _prepare_arrays(self) -> None:
        sks = self._skeletons
        self.ids = np.asarray([s.spec.id for s in sks], dtype=np.int32)
        self.names = tuple(s.spec.name for s in sks)
        seg_counts = [len(s.spec.segment_ids) for s in sks]
        self.segment_offsets = np.zeros(len(seg_counts) + 1, dtype=np.int64)
        np.cumsum(seg_counts, out=self.segment_offsets[1:])
        if sks:
            self.segment_ids = np.concatenate([s.spec.segment_ids for s in sks])
            self.segment_parents = np.concatenate([s.spec.parent_ids for s in sks])
        else:
            self.segment_ids = np.zeros(0, np.int32)
            self.segment_parents = np.zeros(0, np.int32)
        self.segment_names = tuple(n for s in sks for n in s.spec.segment_names)
        self._prepare_kinematics()

    def _prepare_kinematics(self) -> None:
        sks = self._skeletons
        if not sks:
            return
        self._swing_axes = np.concatenate([s.swing_axes for s in sks])
        self._swing_amp = np.concatenate([s.swing_amp for s in sks])
        self._swing_phase = np.concatenate([s.swing_phase for s in sks])
        self._seg_step_rate = np.concatenate([np.full(len(s.parent_rows), s.step_rate) for s in sks])
        self._seg_local = np.concatenate([s.spec.offsets for s in sks])
        self._seg_skeleton = np.repeat(np.arange(len(sks)), [len(s.parent_rows) for s in sks])
        self._skel_loss = np.asarray([s.loss for s in sks], dtype=float)
        parent = np.concatenate(
            [
                np.where(
                    np.asarray(s.parent_rows) >= 0,
                    np.asarray(s.parent_rows) + int(self.segment_offsets[i]),
                    -1,
                )
                for i, s in enumerate(sks)
            ]
        )
        depth = np.zeros(len(parent), dtype=int)
        for row in range(len(parent)):  # parents precede children in the template
            depth[row] = 0 if parent[row] < 0 else depth[parent[row]] + 1
        roots = np.flatnonzero(depth == 0)
        owners = np.asarray([sks[i].trajectory - self.first_row for i in self._seg_skeleton[roots]])
        levels = [(roots, owners)]
        for d in range(1, int(depth.max()) + 1):
            rows = np.flatnonzero(depth == d)
            levels.append((rows, parent[rows]))
        self._fk_levels = levels

    def batch(self, t: np.ndarray, root_pos: np.ndarray, root_quat: np.ndarray) -> Any:
        """Segment poses (B, s, 3), (B, s, 4) and validity of skeletons and segments at
        the times t (B,), the skeletons' roots at ``root_pos``/``root_quat`` (B, k, ...);
        None when the scene has no skeleton."""
        if not self._skeletons:
            return None
        # forward kinematics one tree depth at a time, vectorised over skeletons and frames
        angles = self._swing_amp * np.sin(2 * math.pi * self._seg_step_rate * t[:, None] + self._swing_phase)
        local_q = quat_from_axis_angle(self._swing_axes, angles)
        gq = np.empty_like(local_q)
        gp = np.empty(local_q.shape[:-1] + (3,))
        roots, owner = self._fk_levels[0]
        gq[:, roots] = quat_multiply(root_quat[:, owner], local_q[:, roots])
        gp[:, roots] = root_pos[:, owner] + quat_rotate(root_quat[:, owner], self._seg_local[roots])
        for rows, parents in self._fk_levels[1:]:
            gq[:, rows] = quat_multiply(gq[:, parents], local_q[:, rows])
            gp[:, rows] = gp[:, parents] + quat_rotate(gq[:, parents], self._seg_local[rows])
        skel_valid = ~lost_at(self._skel_loss, t)
        seg_valid = skel_valid[:, self._seg_skeleton]
        gp[~seg_valid] = np.nan
        gq[~seg_valid] = np.nan
        return gp, gq, skel_valid, seg_valid
