"""Vicon DataStream frames to MocapFrame.

* each segment is a rigid body, named ``subject`` when the subject has a single segment
  and ``subject/segment`` otherwise; multi-segment subjects are also skeletons (segment
  ids 1..n in the SDK's order, parents from GetSegmentParentName, "" for the root);
* labeled markers ``subject:marker`` with their occlusion flags, attached to the body of
  their parent segment; unlabeled markers with id -1;
* an occluded segment or marker is NaN (the node holds the last pose): the SDK reports
  zeros for it, which must never reach a message;
* millimetres become metres; a frame number already converted gives None (ClientPull
  can return the same frame again);
* the DataStream has no ids: ids are ``stable_id`` of the names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mocap4r2_control.frame import (
    NO_PARENT,
    UNKNOWN_ID,
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)

from ..common import stable_id


@dataclass
class SubjectLayout:
    """What the stream says about one subject, cached while its names do not change."""

    name: str
    segments: tuple[str, ...]
    parents: tuple[int, ...]  # parent segment index per segment, -1 for the root
    markers: tuple[str, ...]
    marker_segments: tuple[int, ...]


class FrameConverter:
    """Reads the SDK client's current frame into a MocapFrame (called in the SDK thread)."""

    def __init__(
        self,
        exception: type[BaseException],
        labeled: bool = True,
        unlabeled: bool = True,
        skeletons: bool = True,
    ):
        self.exception = exception
        self.labeled = labeled
        self.unlabeled = unlabeled
        self.skeletons = skeletons
        self._layouts: dict[str, SubjectLayout] = {}
        self._names_cache: dict[tuple, tuple] = {}
        self._last_frame_number: int | None = None

    def reset(self) -> None:
        """A new connection: frame numbers may start again."""
        self._last_frame_number = None

    def _layout(self, client, subject: str) -> SubjectLayout:
        segments = tuple(client.GetSegmentNames(subject))
        markers = tuple(client.GetMarkerNames(subject)) if self.labeled else ()
        cached = self._layouts.get(subject)
        marker_names = tuple(m[0] for m in markers)
        if cached is not None and cached.segments == segments and cached.markers == marker_names:
            return cached
        index = {s: i for i, s in enumerate(segments)}
        parents = []
        for segment in segments:
            try:
                parent = client.GetSegmentParentName(subject, segment)
            except self.exception:
                parent = ""  # the root has no parent
            parents.append(index.get(parent, -1))
        layout = SubjectLayout(
            subject, segments, tuple(parents), marker_names, tuple(index.get(m[1], 0) for m in markers)
        )
        self._layouts[subject] = layout
        return layout

    def _names(self, key: tuple, build) -> tuple:
        """A names tuple reused while the asset set does not change (the node skips
        refreshing name strings when it gets the same tuple object)."""
        names = self._names_cache.get(key)
        if names is None:
            if len(self._names_cache) > 64:
                self._names_cache.clear()
            names = self._names_cache[key] = tuple(build())
        return names

    def convert(self, client) -> MocapFrame | None:
        """The SDK's current frame as a MocapFrame, None for a frame already seen."""
        number = int(client.GetFrameNumber())
        if number == self._last_frame_number:
            return None
        self._last_frame_number = number
        layouts = [self._layout(client, s) for s in client.GetSubjectNames()]

        body_names: list[str] = []
        body_pos, body_quat, body_valid, body_markers = [], [], [], []
        marker_names: list[str] = []
        marker_pos, marker_occ = [], []
        skeleton_rows = []
        for layout in layouts:
            single = len(layout.segments) == 1
            first_marker = len(marker_names)
            for name in layout.markers:
                (x, y, z), occluded = client.GetMarkerGlobalTranslation(layout.name, name)
                marker_names.append(f"{layout.name}:{name}")
                marker_pos.append((x, y, z))
                marker_occ.append(bool(occluded))
            first_body = len(body_names)
            for i, segment in enumerate(layout.segments):
                t, t_occluded = client.GetSegmentGlobalTranslation(layout.name, segment)
                q, q_occluded = client.GetSegmentGlobalRotationQuaternion(layout.name, segment)
                body_names.append(layout.name if single else f"{layout.name}/{segment}")
                body_pos.append(t)
                body_quat.append(q)
                body_valid.append(not (t_occluded or q_occluded))
                body_markers.append(
                    [first_marker + j for j, s in enumerate(layout.marker_segments) if s == i]
                )
            if self.skeletons and not single:
                skeleton_rows.append((layout, first_body))

        body_names_t = self._names(("bodies", *body_names), lambda: body_names)
        valid = np.asarray(body_valid, dtype=bool)
        positions = np.asarray(body_pos, dtype=float).reshape(-1, 3) * 1e-3
        orientations = np.asarray(body_quat, dtype=float).reshape(-1, 4)
        positions[~valid] = np.nan  # the SDK reports zeros for an occluded segment
        orientations[~valid] = np.nan

        labeled_pos = np.asarray(marker_pos, dtype=float).reshape(-1, 3) * 1e-3
        labeled_occ = np.asarray(marker_occ, dtype=bool)
        labeled_pos[labeled_occ] = np.nan
        labeled_names = self._names(("markers", *marker_names), lambda: marker_names)
        labeled_ids = np.asarray([stable_id(n) for n in labeled_names], dtype=np.int32)

        rows = [r for rows_ in body_markers for r in rows_]
        counts = [len(r) for r in body_markers]
        body_marker_arrays = MarkerArrays(
            ids=labeled_ids[rows] if rows else np.zeros(0, np.int32),
            names=self._names(
                ("body_markers", *rows, *labeled_names), lambda: (labeled_names[r] for r in rows)
            ),
            positions=labeled_pos[rows] if rows else np.zeros((0, 3)),
            occluded=labeled_occ[rows] if rows else np.zeros(0, bool),
            residuals=np.full(len(rows), -1.0, np.float32),
        )
        bodies = BodyArrays.build(
            ids=[stable_id(n) for n in body_names_t],
            names=body_names_t,
            positions=positions,
            orientations=orientations,
            valid=valid,
            markers=body_marker_arrays,
            marker_counts=counts,
        )
        bodies.names = body_names_t

        unlabeled_pos: np.ndarray = np.zeros((0, 3))
        if self.unlabeled:
            strays = client.GetUnlabeledMarkers()
            unlabeled_pos = np.asarray([p for p, _ in strays], dtype=float).reshape(-1, 3) * 1e-3
        n_un = unlabeled_pos.shape[0]
        markers = MarkerArrays(
            ids=np.concatenate((labeled_ids, np.full(n_un, UNKNOWN_ID, np.int32))),
            names=self._names(("all_markers", n_un, *labeled_names), lambda: labeled_names + ("",) * n_un),
            positions=np.concatenate((labeled_pos, unlabeled_pos)),
            occluded=np.concatenate((labeled_occ, np.zeros(n_un, bool))),
            residuals=np.full(len(labeled_names) + n_un, -1.0, np.float32),
        )

        skeletons = self._skeleton_arrays(skeleton_rows, positions, orientations, valid)
        try:
            latency = max(float(client.GetLatencyTotal()), 0.0)
        except self.exception:
            latency = 0.0
        return MocapFrame(
            frame_number=number,
            markers=markers,
            bodies=bodies,
            skeletons=skeletons,
            latency=latency,
            system_time=self._system_time(client, number),
        )

    def _system_time(self, client, number: int) -> float | None:
        """The capture instant on Vicon's clock: the frame number times the frame period
        (frames are captured exactly one period apart; the node's clock model maps them
        to the host clock). None when the SDK gives no usable rate."""
        try:
            rate = float(client.GetFrameRate())
        except (self.exception, TypeError, ValueError):
            return None
        return number / rate if 0.0 < rate < 1e6 else None

    def _skeleton_arrays(self, rows, positions, orientations, valid) -> SkeletonArrays:
        if not rows:
            return SkeletonArrays()
        take: list[int] = []
        ids: list[int] = []
        parents, seg_names, counts = [], [], []
        for layout, first in rows:
            n = len(layout.segments)
            take += range(first, first + n)
            ids += range(1, n + 1)
            parents += [p + 1 if p >= 0 else NO_PARENT for p in layout.parents]
            seg_names += layout.segments
            counts.append(n)
        take_a = np.asarray(take)
        seg_valid = valid[take_a]
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        names = self._names(("skeletons", *(r[0].name for r in rows)), lambda: (r[0].name for r in rows))
        segments = SegmentArrays(
            ids=np.asarray(ids, np.int32),
            names=self._names(("segments", *seg_names), lambda: seg_names),
            parent_ids=np.asarray(parents, np.int32),
            positions=positions[take_a],
            orientations=orientations[take_a],
            valid=seg_valid,
        )
        return SkeletonArrays(
            ids=np.asarray([stable_id(n) for n in names], np.int32),
            names=names,
            valid=np.asarray([seg_valid[a:b].any() for a, b in zip(offsets[:-1], offsets[1:])], bool),
            segment_offsets=offsets,
            segments=segments,
        )
