"""A deterministic simulated mocap scene (pure numpy, no ROS).

The scene is the single source of synthetic data: the simulated system publishes it
directly, and the NatNet and QTM stand-ins serve it over their vendors' protocols, so
tests can compare what a driver publishes with what the scene produced.

Every frame is a pure function of (scene file, seed, frame index): ``frame(k)`` can be
called in any order, by any process, and gives the same result.

Trajectories are sums of sinusoids per axis, ``c + sum_j a_j sin(w_j t + phi_j)``,
which covers circle, figure-eight, static and a smooth bounded random walk, and lets
one vectorised evaluation serve every body of the scene.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

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
from mocap4r2_control.rotation import quat_from_axis_angle, quat_from_yaw, quat_multiply, quat_rotate

from ..emulation import draw_marker_randomness, observe_markers_batch
from .scene_description import (
    ARM_MARKER_LAYOUT,
    HUMAN_SEGMENTS,
    ArmSpec,
    BodySpec,
    SceneDescription,
    SceneError,
    SkeletonSpec,
    arm_specs,
    default_layout,
    default_scene_path,
    entry_name,
    expand_generated,
    non_negative,
    number,
    positive,
    probability,
    tracking_loss,
)

# the scene's vocabulary, importable from here as from scene_description
__all__ = [
    "ARM_MARKER_LAYOUT",
    "BATCH_SIZE",
    "ArmSpec",
    "BodySpec",
    "Scene",
    "SceneDescription",
    "SceneError",
    "SkeletonSpec",
    "batch_size_for",
    "default_scene_path",
]

TRAJECTORY_TYPES = ("circle", "figure_eight", "random_walk", "static")
_TERMS = 4  # sinusoid terms per axis
# Frames computed together by Scene.frame, at most: large enough that numpy's per-call
# overhead is shared by many frames (the scene streams at up to 2 kHz), small enough to
# bound memory (a few hundred kB for the demo scene) and the work wasted on a random
# access. A batch spans at most BATCH_SPAN seconds of the stream: computing it stalls a
# real-time reader, which must not fall behind by more frames than it may buffer (at
# 100 Hz a batch is 3 frames, at 2 kHz 64).
BATCH_SIZE = 64
BATCH_SPAN = 0.032


def batch_size_for(rate: float) -> int:
    """The batch size of a scene streamed at ``rate`` Hz."""
    return int(min(BATCH_SIZE, max(1, round(rate * BATCH_SPAN))))


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


class Scene:
    """A simulated mocap scene loaded from a YAML description (see config/demo_scene.yaml)."""

    def __init__(self, config: dict[str, Any], seed: int | None = None):
        if not isinstance(config, dict):
            raise SceneError("a scene is a mapping with rigid_bodies, skeletons, ...")
        self.config = config
        self.seed = int(config.get("seed", 0) if seed is None else seed)
        self.rate = positive(config, "rate", 100.0, maximum=10000.0)
        self.latency = non_negative(config, "latency", 0.005)
        self.latency_jitter = non_negative(config, "latency_jitter", 0.0005)
        self.noise = non_negative(config, "noise", 0.0003)
        self.occlusion = probability(config, "occlusion", 0.0)
        self.drop_probability = probability(config, "dropped_frames", 0.0)
        self.unlabeled = int(non_negative(config, "unlabeled_markers", 0))
        volume = np.asarray(config.get("volume", [[-3, -3, 0], [3, 3, 2.5]]), dtype=float)
        if volume.shape != (2, 3) or np.any(volume[1] <= volume[0]):
            raise SceneError("volume must be [[xmin, ymin, zmin], [xmax, ymax, zmax]]")
        self.volume = volume
        rng = np.random.default_rng([self.seed, 0xB0D1E5])

        bodies_cfg = config.get("rigid_bodies", []) or []
        skeletons_cfg = config.get("skeletons", []) or []
        if not isinstance(bodies_cfg, list) or not isinstance(skeletons_cfg, list):
            raise SceneError("rigid_bodies and skeletons must be lists")
        bodies_cfg = expand_generated(config, bodies_cfg)

        n_traj = len(bodies_cfg) + len(skeletons_cfg)
        self._center = np.zeros((n_traj, 3))
        self._amp = np.zeros((n_traj, _TERMS, 3))
        self._freq = np.zeros((n_traj, _TERMS, 3))
        self._phase = np.zeros((n_traj, _TERMS, 3))
        self._yaw0 = np.zeros(n_traj)
        self._yaw_rate = np.zeros(n_traj)
        self._heading = np.zeros(n_traj, dtype=bool)  # yaw follows the velocity
        self._tilt = np.zeros(n_traj)  # roll/pitch wobble amplitude, rad

        specs: list[BodySpec] = []
        used_ids: set[int] = set()
        self._body_loss = np.zeros((len(bodies_cfg), 2))
        self._body_occlusion = np.zeros(len(bodies_cfg))
        for row, cfg in enumerate(bodies_cfg):
            name = entry_name(cfg, f"rigid_bodies[{row}]")
            where = f"rigid_bodies[{row}] ({name})"
            body_id = int(number(cfg, "id", row + 1, where))
            if body_id in used_ids or body_id < 0:
                raise SceneError(f"{where}: id {body_id} is negative or used twice")
            used_ids.add(body_id)
            layout = np.asarray(cfg.get("markers", default_layout(rng)), dtype=float)
            if layout.ndim != 2 or layout.shape[1] != 3 or layout.shape[0] < 3:
                raise SceneError(f"{where}: markers must be 3 or more [x, y, z] points")
            m = layout.shape[0]
            specs.append(
                BodySpec(
                    id=body_id,
                    name=name,
                    marker_ids=np.asarray([body_id * 1000 + i + 1 for i in range(m)], dtype=np.int32),
                    marker_names=tuple(f"{name}:marker{i + 1}" for i in range(m)),
                    marker_layout=layout,
                )
            )
            self._set_trajectory(row, cfg.get("trajectory", {"type": "static"}), rng, f"{where}: trajectory")
            self._body_loss[row] = tracking_loss(cfg, where)
            self._body_occlusion[row] = probability(cfg, "occlusion", self.occlusion)

        skeletons: list[_Skeleton] = []
        skel_ids: set[int] = set()
        for i, cfg in enumerate(skeletons_cfg):
            name = entry_name(cfg, f"skeletons[{i}]")
            where = f"skeletons[{i}] ({name})"
            skel_id = int(number(cfg, "id", i + 1, where))
            if skel_id in skel_ids or skel_id < 0:
                raise SceneError(f"{where}: id {skel_id} is negative or used twice")
            skel_ids.add(skel_id)
            if cfg.get("template", "human") != "human":
                raise SceneError(f"{where}: template: only 'human' exists")
            row = len(bodies_cfg) + i
            self._set_trajectory(row, cfg.get("trajectory", {"type": "static"}), rng, f"{where}: trajectory")
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
        arms = arm_specs(config.get("arms"), specs, [s.spec for s in skeletons])
        self.description = SceneDescription(
            bodies=specs, skeletons=[s.spec for s in skeletons], unlabeled_markers=self.unlabeled, arms=arms
        )
        self._prepare_arrays()
        self.batch_size = batch_size_for(self.rate)
        self._cache: tuple[int, list[MocapFrame]] | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_file(cls, path: str | Path, seed: int | None = None) -> Scene:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise SceneError(f"cannot read scene {path}: {exc.strerror}") from exc
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SceneError(f"scene {path} is not valid YAML: {exc}") from exc
        try:
            return cls(config or {}, seed=seed)
        except SceneError as exc:  # say which file: a launch may load several
            raise SceneError(f"scene {path}: {exc}") from None
        except (TypeError, ValueError) as exc:  # a list or number of the wrong shape or type
            raise SceneError(f"scene {path}: {exc}") from None

    def _set_trajectory(self, row: int, cfg: dict[str, Any], rng: np.random.Generator, name: str) -> None:
        if not isinstance(cfg, dict):
            raise SceneError(f"{name} must be a mapping with a type")
        kind = cfg.get("type", "static")
        center = np.asarray(cfg.get("center", cfg.get("position", [0.0, 0.0, 1.0])), dtype=float)
        if center.shape != (3,):
            raise SceneError(f"{name}: center must be [x, y, z]")
        self._center[row] = center
        period = number(cfg, "period", 10.0, name)
        if kind != "static" and period <= 0:
            raise SceneError(f"{name}: period must be > 0")
        w = 2 * math.pi / period if kind != "static" else 0.0
        phase0 = number(cfg, "phase", 0.0, name)
        self._yaw0[row] = number(cfg, "yaw", 0.0, name)
        self._tilt[row] = number(cfg, "tilt", 0.0, name)
        if kind == "circle":
            r = number(cfg, "radius", 1.0, name)
            self._amp[row, 0] = (r, r, 0.0)
            self._freq[row, 0] = (w, w, 0.0)
            self._phase[row, 0] = (phase0 + math.pi / 2, phase0, 0.0)
            self._heading[row] = bool(cfg.get("heading", True))
        elif kind == "figure_eight":
            sx, sy = (float(v) for v in cfg.get("size", [2.0, 1.0]))
            self._amp[row, 0] = (sx / 2, sy / 2, 0.0)
            self._freq[row, 0] = (w, 2 * w, 0.0)
            self._phase[row, 0] = (phase0, 2 * phase0, 0.0)
            self._heading[row] = bool(cfg.get("heading", True))
        elif kind == "random_walk":
            # a smooth bounded wander: random frequencies and phases per axis and term
            extent = np.asarray(cfg.get("extent", [1.0, 1.0, 0.3]), dtype=float)
            weights = rng.uniform(0.2, 1.0, size=(_TERMS, 3))
            weights /= weights.sum(axis=0)
            self._amp[row] = weights * extent
            self._freq[row] = w * rng.uniform(0.5, 2.5, size=(_TERMS, 3))
            self._phase[row] = rng.uniform(0, 2 * math.pi, size=(_TERMS, 3))
            self._yaw_rate[row] = number(cfg, "yaw_rate", 0.3, name)
        elif kind == "static":
            self._yaw_rate[row] = 0.0
        else:
            raise SceneError(f"{name}: unknown type {kind!r} (one of {', '.join(TRAJECTORY_TYPES)})")

    def _prepare_arrays(self) -> None:
        bodies = self.description.bodies
        nb = len(bodies)
        counts = np.asarray([b.marker_layout.shape[0] for b in bodies], dtype=np.int64)
        self._marker_body = np.repeat(np.arange(nb), counts)
        self._marker_layout = np.concatenate([b.marker_layout for b in bodies]) if nb else np.zeros((0, 3))
        self._marker_offsets = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(counts, out=self._marker_offsets[1:])
        self._body_ids = np.asarray([b.id for b in bodies], dtype=np.int32)
        self._body_names = tuple(b.name for b in bodies)
        self._labeled_ids = np.concatenate([b.marker_ids for b in bodies]) if nb else np.zeros(0, np.int32)
        self._labeled_names = tuple(n for b in bodies for n in b.marker_names)
        self._all_names = self._labeled_names + ("",) * self.unlabeled
        self._all_ids = np.concatenate([self._labeled_ids, np.full(self.unlabeled, UNKNOWN_ID, np.int32)])
        self._skel_ids = np.asarray([s.spec.id for s in self._skeletons], dtype=np.int32)
        self._skel_names = tuple(s.spec.name for s in self._skeletons)
        seg_counts = [len(s.spec.segment_ids) for s in self._skeletons]
        self._seg_offsets = np.zeros(len(seg_counts) + 1, dtype=np.int64)
        np.cumsum(seg_counts, out=self._seg_offsets[1:])
        if self._skeletons:
            self._seg_ids = np.concatenate([s.spec.segment_ids for s in self._skeletons])
            self._seg_parents = np.concatenate([s.spec.parent_ids for s in self._skeletons])
        else:
            self._seg_ids = np.zeros(0, np.int32)
            self._seg_parents = np.zeros(0, np.int32)
        self._seg_names = tuple(n for s in self._skeletons for n in s.spec.segment_names)
        self._prepare_kinematics()

    def _prepare_kinematics(self) -> None:
        sks = self._skeletons
        if not sks:
            return
        first_traj = len(self.description.bodies)
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
                    np.asarray(s.parent_rows) >= 0, np.asarray(s.parent_rows) + int(self._seg_offsets[i]), -1
                )
                for i, s in enumerate(sks)
            ]
        )
        depth = np.zeros(len(parent), dtype=int)
        for row in range(len(parent)):  # parents precede children in the template
            depth[row] = 0 if parent[row] < 0 else depth[parent[row]] + 1
        roots = np.flatnonzero(depth == 0)
        levels = [(roots, np.asarray([sks[i].trajectory - first_traj for i in self._seg_skeleton[roots]]))]
        for d in range(1, int(depth.max()) + 1):
            rows = np.flatnonzero(depth == d)
            levels.append((rows, parent[rows]))
        self._fk_levels = levels

    # ------------------------------------------------------------------ queries
    def asset_names(self) -> AssetNames:
        return self.description.asset_names()

    def time_of(self, k: int) -> float:
        """Scene time in seconds of frame k."""
        return k / self.rate

    def is_dropped(self, k: int) -> bool:
        """Whether the system 'loses' frame k (its number is skipped on the wire)."""
        if self.drop_probability <= 0.0 or k == 0:
            return False
        return bool(np.random.default_rng([self.seed, 0xD0, k]).random() < self.drop_probability)

    def poses(self, t) -> tuple[np.ndarray, np.ndarray]:
        """Positions (..., n, 3) and orientations (..., n, 4) of every trajectory row at
        time t (a number, or an array of times for a batch)."""
        t = np.asarray(t, dtype=float)
        arg = self._freq * t[..., None, None, None] + self._phase
        pos = self._center + np.sum(self._amp * np.sin(arg), axis=-2)
        vel = np.sum(self._amp * self._freq * np.cos(arg), axis=-2)
        yaw = self._yaw0 + self._yaw_rate * t[..., None]
        moving = self._heading & (np.hypot(vel[..., 0], vel[..., 1]) > 1e-9)
        yaw = np.where(moving, np.arctan2(vel[..., 1], vel[..., 0]) + self._yaw0, yaw)
        quat = quat_from_yaw(yaw)
        if np.any(self._tilt):
            roll = self._tilt * np.sin(1.3 * t[..., None] + np.arange(len(self._yaw0)))
            quat = quat_multiply(quat, quat_from_axis_angle([1.0, 0.0, 0.0], roll))
        return pos, quat

    def frame(self, k: int) -> MocapFrame:
        """Frame k (frame_number k) as a MocapFrame; invalid rows hold NaN, as many
        vendors send them, so consumers must apply the hold-last-value rule.

        Frames are computed ``batch_size`` at a time (see :meth:`frames`) and the newest
        batch is kept, so reading frames in order costs one vectorised batch per
        ``batch_size`` frames; any k may still be asked for, in any order."""
        cache = self._cache
        if cache is None or not cache[0] <= k < cache[0] + len(cache[1]):
            cache = self._cache = (k, self.frames(k, self.batch_size))
        return cache[1][k - cache[0]]

    def frames(self, first: int, count: int) -> list[MocapFrame]:
        """Frames first .. first + count - 1, computed together.

        Every random draw of frame k comes from its own generator seeded (seed, k), in
        the same order whatever the batch, so a frame does not depend on the batch it was
        computed in: ``frames(k, 1)[0]`` equals ``frames(k - 5, 64)[5]``."""
        if count < 1:
            return []
        ks = np.arange(first, first + count)
        t = ks / self.rate
        nb = len(self._body_ids)
        m = len(self._marker_layout)
        offsets = np.empty((count, m, 3))
        draws = np.empty((count, m))
        strays = np.empty((count, self.unlabeled, 3))
        latency = np.full(count, self.latency)
        for i, k in enumerate(ks.tolist()):  # the per-frame part: only the random draws
            rng = np.random.default_rng([self.seed, k])
            offsets[i], draws[i] = draw_marker_randomness(rng, m, self.noise)
            if self.unlabeled:
                # the doubles rng.uniform(low, high) would draw, scaled below for the batch
                # (the same values: uniform computes low + (high - low) * draw)
                strays[i] = rng.random((self.unlabeled, 3))
            if self.latency_jitter:
                latency[i] += rng.uniform(-1, 1) * self.latency_jitter
        np.maximum(latency, 0.0, out=latency)
        if self.unlabeled:
            strays = self.volume[0] + (self.volume[1] - self.volume[0]) * strays

        pos, quat = self.poses(t)
        body_pos, body_quat = pos[:, :nb], quat[:, :nb]
        lost = _lost(self._body_loss, t)
        seen = observe_markers_batch(
            self._marker_layout,
            self._marker_body,
            body_pos,
            body_quat,
            offsets,
            draws,
            self._body_occlusion[self._marker_body],
            lost,
        )
        valid = seen.valid
        out_pos = np.where(valid[..., None], body_pos, np.nan)
        out_quat = np.where(valid[..., None], body_quat, np.nan)
        if self.unlabeled:
            all_pos = np.concatenate([seen.positions, strays], axis=1)
            all_occ = np.concatenate([seen.occluded, np.zeros((count, self.unlabeled), bool)], axis=1)
            all_res = np.concatenate(
                [seen.residuals, np.full((count, self.unlabeled), -1.0, np.float32)], axis=1
            )
        else:
            all_pos, all_occ, all_res = seen.positions, seen.occluded, seen.residuals
        skel = self._skeleton_batch(t, pos[:, nb:], quat[:, nb:])

        out = []
        for i, k in enumerate(ks.tolist()):
            body_markers = MarkerArrays(
                ids=self._labeled_ids,
                names=self._labeled_names,
                positions=seen.positions[i],
                occluded=seen.occluded[i],
                residuals=seen.residuals[i],
            )
            bodies = BodyArrays(
                ids=self._body_ids,
                names=self._body_names,
                positions=out_pos[i],
                orientations=out_quat[i],
                valid=valid[i],
                mean_errors=seen.mean_errors[i],
                marker_offsets=self._marker_offsets,
                markers=body_markers,
            )
            markers = MarkerArrays(
                ids=self._all_ids,
                names=self._all_names,
                positions=all_pos[i],
                occluded=all_occ[i],
                residuals=all_res[i],
            )
            if skel is None:
                skeletons = SkeletonArrays()
            else:
                gp, gq, skel_valid, seg_valid = skel
                segments = SegmentArrays(
                    ids=self._seg_ids,
                    names=self._seg_names,
                    parent_ids=self._seg_parents,
                    positions=gp[i],
                    orientations=gq[i],
                    valid=seg_valid[i],
                )
                skeletons = SkeletonArrays(
                    ids=self._skel_ids,
                    names=self._skel_names,
                    valid=skel_valid[i],
                    segment_offsets=self._seg_offsets,
                    segments=segments,
                )
            out.append(
                MocapFrame(
                    frame_number=k,
                    markers=markers,
                    bodies=bodies,
                    skeletons=skeletons,
                    latency=float(latency[i]),
                )
            )
        return out

    def _skeleton_batch(self, t: np.ndarray, root_pos: np.ndarray, root_quat: np.ndarray):
        """Segment poses (B, s, 3), (B, s, 4) and validity of skeletons and segments at
        the times t (B,); None when the scene has no skeleton."""
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
        skel_valid = ~_lost(self._skel_loss, t)
        seg_valid = skel_valid[:, self._seg_skeleton]
        gp[~seg_valid] = np.nan
        gq[~seg_valid] = np.nan
        return gp, gq, skel_valid, seg_valid


def _lost(loss: np.ndarray, t) -> np.ndarray:
    """Rows of (every, duration): lost during the last `duration` s of each `every` s;
    (rows,) for a time t, (B, rows) for B times."""
    every = loss[:, 0]
    duration = loss[:, 1]
    t = np.asarray(t, dtype=float)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        phase = np.where(every > 0, np.mod(t, np.where(every > 0, every, 1.0)), -1.0)
    return (every > 0) & (phase >= every - duration)
