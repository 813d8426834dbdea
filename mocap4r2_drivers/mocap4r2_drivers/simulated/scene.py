"""A deterministic simulated mocap scene (pure numpy, no ROS).

The scene is the single source of synthetic data: the simulated system publishes it
directly, and the NatNet and QTM stand-ins serve it over their vendors' protocols, so
tests can compare what a driver publishes with what the scene produced.

Every frame is a pure function of (scene file, seed, frame index): ``frame(k)`` can be
called in any order, by any process, and gives the same result.

Where the bodies and skeleton roots are comes from simulated/trajectories.py, the
skeletons' segments from simulated/skeleton_motion.py; this module reads the bodies and
turns poses into the frames a mocap system sends (markers, bodies, skeletons).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mocap4r2_control.frame import (
    UNKNOWN_ID,
    AssetNames,
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)

from ..emulation import draw_marker_randomness, observe_markers_batch
from .scene_description import (
    ARM_MARKER_LAYOUT,
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
from .skeleton_motion import SkeletonMotion
from .trajectories import Trajectories, lost_at

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
    "unlabeled_cloud",
]

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

        self.trajectories = Trajectories(len(bodies_cfg) + len(skeletons_cfg))
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
            # one marker is a position-only body: its orientation is not observable and stays
            # the trajectory's; two leave the rotation about their line unobservable
            if layout.ndim != 2 or layout.shape[1] != 3 or layout.shape[0] in (0, 2):
                raise SceneError(
                    f"{where}: markers must be 1 (a position-only body) or 3 or more [x, y, z] points"
                )
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
            self.trajectories.set(row, cfg.get("trajectory", {"type": "static"}), rng, f"{where}: trajectory")
            self._body_loss[row] = tracking_loss(cfg, where)
            self._body_occlusion[row] = probability(cfg, "occlusion", self.occlusion)

        self.skeletons = SkeletonMotion(skeletons_cfg, len(bodies_cfg), self.trajectories, rng)
        arms = arm_specs(config.get("arms"), specs, self.skeletons.specs)
        self.description = SceneDescription(
            bodies=specs, skeletons=self.skeletons.specs, unlabeled_markers=self.unlabeled, arms=arms
        )
        self._prepare_arrays()
        self.batch_size = batch_size_for(self.rate)
        self._cache: tuple[int, list[MocapFrame]] | None = None
        self._pose_cache: tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

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

    def _prepare_arrays(self) -> None:
        bodies = self.description.bodies
        nb = len(bodies)
        counts = np.asarray([b.marker_layout.shape[0] for b in bodies], dtype=np.int64)
        self._marker_body = np.repeat(np.arange(nb), counts)
        self._marker_layout = np.concatenate([b.marker_layout for b in bodies]) if nb else np.zeros((0, 3))
        self._marker_offsets = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(counts, out=self._marker_offsets[1:])
        self._markers_needed = np.minimum(counts, 3)
        self._body_ids = np.asarray([b.id for b in bodies], dtype=np.int32)
        self._body_names = tuple(b.name for b in bodies)
        self._labeled_ids = np.concatenate([b.marker_ids for b in bodies]) if nb else np.zeros(0, np.int32)
        self._labeled_names = tuple(n for b in bodies for n in b.marker_names)
        self._all_names = self._labeled_names + ("",) * self.unlabeled
        self._all_ids = np.concatenate([self._labeled_ids, np.full(self.unlabeled, UNKNOWN_ID, np.int32)])

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

    def poses(self, t: Any) -> tuple[np.ndarray, np.ndarray]:
        """Positions (..., n, 3) and orientations (..., n, 4) of every trajectory row at
        time t (a number, or an array of times for a batch)."""
        return self.trajectories.poses(t)

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

    def body_poses(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Frame k's bodies as :meth:`frame` gives them (positions (n, 3), orientations
        (n, 4), NaN where not valid, and valid (n,)), without computing its markers: for a
        stand-in whose system streams poses only (VRPN). With 50 bodies of 4 markers the
        markers were three quarters of a frame's cost, and the batch computed every fourth
        frame at 1 kHz kept a core busy long enough to delay the client it serves on a
        2-core machine. Batched and cached as :meth:`frame`, its own cache."""
        cache = self._pose_cache
        if cache is None or not cache[0] <= k < cache[0] + len(cache[1][2]):
            cache = self._pose_cache = (k, self._body_batch(k, self.batch_size))
        positions, orientations, valid = cache[1]
        i = k - cache[0]
        return positions[i], orientations[i], valid[i]

    def _body_batch(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`body_poses` of frames first .. first + count - 1: the rule of :meth:`frames`
        (a body is tracked when not lost and with 3 of its markers seen, a single-marker
        body with its one), the occlusion draws made only when some marker can be occluded
        (a draw below a probability of 0 never occludes)."""
        ks = np.arange(first, first + count)
        t = ks / self.rate
        nb = len(self._body_ids)
        pos, quat = self.poses(t)
        lost = lost_at(self._body_loss, t)
        occluded = lost[:, self._marker_body]
        occlusion = self._body_occlusion[self._marker_body]
        if occlusion.size and occlusion.max() > 0.0:
            m = len(self._marker_layout)
            draws = np.empty((count, m))
            for i, k in enumerate(ks.tolist()):  # each frame's own generator, as frames() draws
                _, draws[i] = draw_marker_randomness(np.random.default_rng([self.seed, k]), m, self.noise)
            occluded = occluded | (draws < occlusion)
        bins = (np.arange(count)[:, None] * nb + self._marker_body[None, :])[~occluded]
        visible = np.bincount(bins, minlength=count * nb).reshape(count, nb)
        valid = ~lost & (visible >= self._markers_needed)
        return (
            np.where(valid[..., None], pos[:, :nb], np.nan),
            np.where(valid[..., None], quat[:, :nb], np.nan),
            valid,
        )

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
        lost = lost_at(self._body_loss, t)
        seen = observe_markers_batch(
            self._marker_layout,
            self._marker_body,
            positions=body_pos,
            orientations=body_quat,
            offsets=offsets,
            draws=draws,
            occlusion=self._body_occlusion[self._marker_body],
            hidden=lost,
        )
        # a body is tracked with 3 of its markers seen, a single-marker body with its one
        valid = ~lost & (seen.visible >= self._markers_needed)
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
        skel = self.skeletons.batch(t, pos[:, nb:], quat[:, nb:])

        sk = self.skeletons
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
                    ids=sk.segment_ids,
                    names=sk.segment_names,
                    parent_ids=sk.segment_parents,
                    positions=gp[i],
                    orientations=gq[i],
                    valid=seg_valid[i],
                )
                skeletons = SkeletonArrays(
                    ids=sk.ids,
                    names=sk.names,
                    valid=skel_valid[i],
                    segment_offsets=sk.segment_offsets,
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


def unlabeled_cloud(frame: MocapFrame, seed: int) -> MocapFrame:
    """``frame`` as a system that sends only its point cloud: the markers it sees, with
    UNKNOWN_ID and empty names, in an order drawn from (seed, frame number) so that no
    position in the message tells which body a marker is on; no rigid body, no skeleton.

    The same scene and seed give the same cloud, so the labeled frame of one simulated
    system is the truth of the cloud of another."""
    markers = frame.markers
    seen = np.flatnonzero(~markers.occluded & np.isfinite(markers.positions).all(axis=1))
    order = np.random.default_rng([seed, 0xC10D, frame.frame_number]).permutation(seen)
    n = len(order)
    cloud = MarkerArrays(
        ids=np.full(n, UNKNOWN_ID, np.int32),
        names=("",) * n,
        positions=markers.positions[order],
        occluded=np.zeros(n, dtype=bool),
        residuals=markers.residuals[order],
    )
    return replace(frame, markers=cloud, bodies=BodyArrays(), skeletons=SkeletonArrays())
