"""Arms in a simulated scene: link poses received from a ROS topic, seen as a mocap
system would see them (pure numpy, no ROS: the adapter feeds it messages' arrays).

For each arm of the scene (``arms:`` in the scene YAML) a frame gets:

* a rigid body ``<name>_ee``: the scene's marker layout for arms on the end effector
  (the last link pose), observed with the scene's noise and occlusion like any scene
  body, and its pose *fitted* to the markers seen, as a mocap system does: the end
  effector's tip pose plus the error the noise makes, not the true pose;
* a skeleton ``<name>`` with one segment ``<name>_link<i>`` per link (the link tip poses
  as received; parents chain base to end effector).

Which link poses a frame uses: the newest received when the frame is read (no
interpolation: an arm publishes at tens of Hz, the scene may stream at kHz, and holding
the newest is what a mocap system tracking a real arm sees between arm updates). Before
any link poses arrive, or when the newest came more than the arm's ``timeout`` ago, the
arm's body and skeleton are not tracked (``valid`` False, NaN rows: the system node
publishes the last good pose with tracking_valid false).

Links: the number N is learned from the first message (1..MAX_LINKS). A later message
with another number of poses is refused (counted, and the arm goes stale), so segment
names and ids never change while a scene runs; before the first message the skeleton
has no segments.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from mocap4r2_control.frame import (
    NO_PARENT,
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)
from mocap4r2_control.geometry import pose_is_usable

from ..common import stable_id
from ..emulation import fit_pose, observe_markers
from .scene import ArmSpec, Scene

MAX_LINKS = 6
_IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])


class LinkPosesRefused(ValueError):
    """Link poses an arm cannot use, with the reason."""


@dataclass
class _ArmState:
    spec: ArmSpec
    positions: np.ndarray | None = None  # (N, 3) newest link tips
    orientations: np.ndarray | None = None  # (N, 4)
    received: float | None = None  # monotonic time of the newest
    links: int = 0  # N, 0 until the first message
    messages: int = 0
    refused: int = 0


class SceneArms:
    """The arms of one scene: ``receive`` link poses (any thread), ``compose`` them into
    the scene's frames (the reading thread)."""

    def __init__(self, scene: Scene):
        self.scene = scene
        self.arms = [_ArmState(spec) for spec in scene.description.arms]
        self._lock = threading.Lock()
        specs = [a.spec for a in self.arms]
        self._layout = np.concatenate([s.marker_layout for s in specs]) if specs else np.zeros((0, 3))
        counts = [len(s.marker_layout) for s in specs]
        self._marker_arm = np.repeat(np.arange(len(specs)), counts)
        self._marker_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._body_ids = np.asarray([s.body_id for s in specs], dtype=np.int32)
        self._body_names = tuple(s.body_name for s in specs)
        self._marker_ids = np.concatenate([s.marker_ids for s in specs]) if specs else np.zeros(0, np.int32)
        self._marker_names = tuple(n for s in specs for n in s.marker_names)
        self._skel_ids = np.asarray([s.skeleton_id for s in specs], dtype=np.int32)
        self._skel_names = tuple(s.name for s in specs)
        self._occlusion = scene.occlusion
        self._names_cache: dict = {}  # merged name tuples, kept identical frame to frame

    def __len__(self) -> int:
        return len(self.arms)

    def receive(self, index: int, positions, orientations, now: float) -> None:
        """Link tips (N, 3) and orientations (N, 4, x y z w) of arm ``index``, the end
        effector last, received at monotonic time ``now``. Raises LinkPosesRefused (and
        keeps the previous poses) for poses that cannot be used."""
        arm = self.arms[index]
        try:
            p = np.asarray(positions, dtype=float).reshape(-1, 3)
            q = np.asarray(orientations, dtype=float).reshape(-1, 4)
        except ValueError:
            p = q = np.zeros((0, 3))
        with self._lock:
            n = len(p)
            reason = None
            if n == 0 or n != len(q):
                reason = "no link poses"
            elif n > MAX_LINKS:
                reason = f"{n} link poses, at most {MAX_LINKS} are supported"
            elif arm.links and n != arm.links:
                reason = f"{n} link poses where the first message had {arm.links}"
            elif not all(pose_is_usable(p[i], q[i]) for i in range(n)):
                reason = "a link pose is not finite or its quaternion is too short to normalise"
            if reason is not None:
                arm.refused += 1
                raise LinkPosesRefused(f"arm {arm.spec.name!r} ({arm.spec.link_poses_topic}): {reason}")
            arm.links = n
            arm.positions = p.copy()
            arm.orientations = q / np.linalg.norm(q, axis=1, keepdims=True)
            arm.received = now
            arm.messages += 1

    def counters(self) -> dict[str, str]:
        with self._lock:
            return {
                f"arm {a.spec.name}": f"{a.messages} link pose messages, {a.refused} refused, {a.links} links"
                for a in self.arms
            }

    def compose(self, frame: MocapFrame, now: float) -> MocapFrame:
        """``frame`` (the scene's own bodies and skeletons) with the arms added, as seen at
        monotonic time ``now``. ``frame`` is not modified."""
        if not self.arms:
            return frame
        with self._lock:
            states = [
                (
                    a.positions,
                    a.orientations,
                    a.links,
                    a.received is not None and now - a.received <= a.spec.timeout,
                )
                for a in self.arms
            ]
        na = len(states)
        fresh = np.asarray([s[3] for s in states], dtype=bool)
        tip_pos = np.zeros((na, 3))
        tip_quat = np.tile(_IDENTITY, (na, 1))
        for i, (p, q, _, _) in enumerate(states):
            if p is not None and q is not None:
                tip_pos[i], tip_quat[i] = p[-1], q[-1]
        # the arms' draws come from a generator of their own, so the scene's bodies stay
        # the same frames with or without arms
        rng = np.random.default_rng([self.scene.seed, 0xA12, frame.frame_number])
        seen = observe_markers(
            rng,
            self._layout,
            marker_body=self._marker_arm,
            positions=tip_pos,
            orientations=tip_quat,
            noise=self.scene.noise,
            occlusion=self._occlusion,
            hidden=~fresh,
        )
        body_pos = np.full((na, 3), np.nan)
        body_quat = np.full((na, 4), np.nan)
        valid = seen.valid.copy()
        for i in np.flatnonzero(valid):
            rows = slice(self._marker_offsets[i], self._marker_offsets[i + 1])
            fit = fit_pose(self._layout[rows], seen.positions[rows])
            if fit is None:
                valid[i] = False
            else:
                body_pos[i], body_quat[i] = fit

        links = tuple(s[2] for s in states)
        names = self._names(frame, links)
        bodies = frame.bodies
        n_native = len(bodies.markers)
        arm_markers = MarkerArrays(
            ids=self._marker_ids,
            names=self._marker_names,
            positions=seen.positions,
            occluded=seen.occluded,
            residuals=seen.residuals,
        )
        body_markers = _concat_markers(bodies.markers, arm_markers, names["body_markers"])
        new_bodies = BodyArrays(
            ids=np.concatenate([bodies.ids, self._body_ids]),
            names=names["bodies"],
            positions=np.concatenate([bodies.positions, body_pos]),
            orientations=np.concatenate([bodies.orientations, body_quat]),
            valid=np.concatenate([bodies.valid, valid]),
            mean_errors=np.concatenate([bodies.mean_errors, seen.mean_errors]),
            marker_offsets=np.concatenate(
                [bodies.marker_offsets, bodies.marker_offsets[-1] + self._marker_offsets[1:]]
            ),
            markers=body_markers,
        )
        # every marker of the frame: the scene's labeled ones, the arms', then the strays
        all_markers = frame.markers
        head = _slice_markers(all_markers, 0, n_native)
        tail = _slice_markers(all_markers, n_native, len(all_markers))
        markers = _concat_markers(_concat_markers(head, arm_markers, None), tail, names["markers"])

        seg_pos, seg_quat, seg_valid = [], [], []
        for p, q, n, ok in states:
            if n:
                seg_pos.append(p if ok else np.full((n, 3), np.nan))
                seg_quat.append(q if ok else np.full((n, 4), np.nan))
                seg_valid.append(np.full(n, ok))
        sk = frame.skeletons
        seg = sk.segments
        counts = np.asarray(links, dtype=np.int64)
        skeletons = SkeletonArrays(
            ids=np.concatenate([sk.ids, self._skel_ids]),
            names=names["skeletons"],
            valid=np.concatenate([sk.valid, fresh & (counts > 0)]),
            segment_offsets=np.concatenate([sk.segment_offsets, sk.segment_offsets[-1] + np.cumsum(counts)]),
            segments=SegmentArrays(
                ids=np.concatenate([seg.ids, names["segment_ids"]]),
                names=names["segments"],
                parent_ids=np.concatenate([seg.parent_ids, names["segment_parents"]]),
                positions=np.concatenate([seg.positions] + seg_pos),
                orientations=np.concatenate([seg.orientations] + seg_quat),
                valid=np.concatenate([seg.valid] + seg_valid),
            ),
        )
        return MocapFrame(
            frame_number=frame.frame_number,
            markers=markers,
            bodies=new_bodies,
            skeletons=skeletons,
            capture_time=frame.capture_time,
            latency=frame.latency,
        )

    def _names(self, frame: MocapFrame, links: tuple[int, ...]) -> dict:
        """Merged names and segment ids, the same objects for as long as the scene's
        names and the arms' link counts stay (the publisher then skips refreshing them)."""
        key = (
            id(frame.bodies.names),
            id(frame.markers.names),
            id(frame.skeletons.names),
            id(frame.skeletons.segments.names),
            links,
        )
        cached = self._names_cache.get(key)
        if cached is not None:
            return cached
        seg_names, seg_ids, seg_parents = [], [], []
        for spec, n in zip((a.spec for a in self.arms), links):
            ids = [stable_id(f"{spec.name}_link{i + 1}") for i in range(n)]
            seg_names += [f"{spec.name}_link{i + 1}" for i in range(n)]
            seg_ids += ids
            seg_parents += ([NO_PARENT] + ids[:-1]) if n else []
        n_native = len(frame.bodies.markers)
        cached = {
            "bodies": frame.bodies.names + self._body_names,
            "body_markers": frame.bodies.markers.names + self._marker_names,
            "markers": frame.markers.names[:n_native] + self._marker_names + frame.markers.names[n_native:],
            "skeletons": frame.skeletons.names + self._skel_names,
            "segments": frame.skeletons.segments.names + tuple(seg_names),
            "segment_ids": np.asarray(seg_ids, dtype=np.int32),
            "segment_parents": np.asarray(seg_parents, dtype=np.int32),
        }
        if len(self._names_cache) > 16:  # link counts are learned once: a few keys at most
            self._names_cache.clear()
        self._names_cache[key] = cached
        return cached


def _slice_markers(m: MarkerArrays, a: int, b: int) -> MarkerArrays:
    return MarkerArrays(
        ids=m.ids[a:b],
        names=m.names[a:b],
        positions=m.positions[a:b],
        occluded=m.occluded[a:b],
        residuals=m.residuals[a:b],
    )


def _concat_markers(a: MarkerArrays, b: MarkerArrays, names: tuple[str, ...] | None) -> MarkerArrays:
    return MarkerArrays(
        ids=np.concatenate([a.ids, b.ids]),
        names=names if names is not None else a.names + b.names,
        positions=np.concatenate([a.positions, b.positions]),
        occluded=np.concatenate([a.occluded, b.occluded]),
        residuals=np.concatenate([a.residuals, b.residuals]),
    )
