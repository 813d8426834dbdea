"""QTM data packets to :class:`~mocap4r2_control.frame.MocapFrame`: millimetres to metres,
column-major rotation matrices to quaternions, QTM's up axis to +Z, NaN ("missing") to
tracking_valid false / occluded, and names and 1-based ids from QTM's parameter XML.
Pure numpy on the packet bytes (:mod:`.protocol`); no sockets."""

from __future__ import annotations

import numpy as np

from mocap4r2_control.frame import (
    UNKNOWN_ID,
    AssetNames,
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)
from mocap4r2_control.geometry import UP_AXIS_CONVENTIONS, AxisChange
from mocap4r2_control.rotation import quat_from_matrix

from . import protocol as qp
from .parameters import QtmParameters


def _residuals_m(residuals_mm: np.ndarray) -> np.ndarray:
    """Mm to m; unknown (NaN or negative) residuals become -1."""
    out = np.asarray(residuals_mm, dtype=np.float32) * np.float32(1e-3)
    out[~(out >= 0)] = -1.0  # comparisons with NaN are False
    return out


#: the marker components, the one with residuals first
_LABELED = (qp.ComponentType.MARKERS_3D_RESIDUALS, qp.ComponentType.MARKERS_3D)
_UNLABELED = (qp.ComponentType.MARKERS_3D_NO_LABELS_RESIDUALS, qp.ComponentType.MARKERS_3D_NO_LABELS)


class FrameConverter:
    """Turns QTM data packets into MocapFrames, for one set of QTM parameters."""

    def __init__(self, parameters: QtmParameters):
        self.parameters = parameters
        # QTM's Axis_upwards names the up axis of its frame ("+Z" unless set otherwise)
        up = parameters.axis_upwards if parameters.axis_upwards in UP_AXIS_CONVENTIONS else "+Z"
        self.axes = AxisChange(up)

        # names and ids: built once, reused (the node skips name refreshes by identity)
        self.body_names = tuple(b.name for b in parameters.bodies)
        self.body_ids = np.arange(1, len(self.body_names) + 1, dtype=np.int32)
        self.labels = parameters.labels
        self.label_ids = np.arange(1, len(self.labels) + 1, dtype=np.int32)
        label_rows = {name: i for i, name in enumerate(self.labels)}
        rows, counts = [], []
        for body in parameters.bodies:
            mine = [label_rows[n] for n in body.point_names if n in label_rows]
            rows += mine
            counts.append(len(mine))
        self.body_marker_rows = np.asarray(rows, dtype=np.int64)
        self.body_marker_counts = np.asarray(counts, dtype=np.int64)
        self.body_marker_offsets = np.concatenate(([0], np.cumsum(self.body_marker_counts))).astype(np.int64)
        self.body_marker_names = tuple(self.labels[r] for r in rows)

        sk = parameters.skeletons
        self.skeleton_names = tuple(s.name for s in sk)
        self.skeleton_ids = np.arange(1, len(sk) + 1, dtype=np.int32)
        counts = [len(s.segment_ids) for s in sk]
        self.segment_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.segment_ids = np.concatenate([s.segment_ids for s in sk]) if sk else np.zeros(0, np.int32)
        self.segment_parents = np.concatenate([s.parent_ids for s in sk]) if sk else np.zeros(0, np.int32)
        self.segment_names = tuple(n for s in sk for n in s.segment_names)
        # per skeleton: segment ids sorted, to place streamed segments by id
        self._segment_order = [np.argsort(s.segment_ids, kind="stable") for s in sk]
        # names of labeled + unlabeled markers, by (labeled names, unlabeled count); the
        # labeled names are one of a few cached tuples, so their identity is the key
        self._all_names_cache: dict[tuple[int, int], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._fallback_names: dict[tuple[str, int], tuple[str, ...]] = {}
        self.mismatches = 0

    def asset_names(self) -> AssetNames:
        return AssetNames(rigid_bodies=self.body_names, markers=self.labels, skeletons=self.skeleton_names)

    # ------------------------------------------------------------------ helpers
    def _names(self, kind: str, known: tuple[str, ...], count: int) -> tuple[str, ...]:
        """The configured names, or (after QTM changed its settings, until the new
        parameters arrive) generated ones; counted as a mismatch."""
        if count == len(known):
            return known
        self.mismatches += 1
        key = (kind, count)
        names = self._fallback_names.get(key)
        if names is None:
            names = tuple(known[i] if i < len(known) else f"{kind}{i + 1}" for i in range(count))
            if len(self._fallback_names) >= 64:  # bounded whatever counts a peer sends
                self._fallback_names.clear()
            self._fallback_names[key] = names
        return names

    def _z_up(self, positions: np.ndarray, quats: np.ndarray | None = None):
        if self.axes.identity:
            return positions, quats
        return self.axes.positions(positions), None if quats is None else self.axes.orientations(quats)

    # ------------------------------------------------------------------ decoding
    def convert(self, payload: bytes | memoryview) -> MocapFrame:
        packet = qp.decode_frame(payload)
        comps = packet.components
        labeled = self._labeled(comps)
        unlabeled = self._unlabeled(comps)
        bodies = self._bodies(comps, labeled)
        if unlabeled is None:
            markers = labeled if labeled is not None else MarkerArrays()
        elif labeled is None:
            markers = unlabeled
        else:
            markers = MarkerArrays(
                ids=np.concatenate((labeled.ids, unlabeled.ids)),
                names=self._all_names(labeled.names, len(unlabeled)),
                positions=np.concatenate((labeled.positions, unlabeled.positions)),
                occluded=np.concatenate((labeled.occluded, unlabeled.occluded)),
                residuals=np.concatenate((labeled.residuals, unlabeled.residuals)),
            )
        skeletons = self._skeletons(comps)
        return MocapFrame(
            frame_number=packet.frame_number, markers=markers, bodies=bodies, skeletons=skeletons
        )

    def _all_names(self, labeled: tuple[str, ...], unlabeled: int) -> tuple[str, ...]:
        key = (id(labeled), unlabeled)
        hit = self._all_names_cache.get(key)
        if hit is not None and hit[0] is labeled:
            return hit[1]
        names = labeled + ("",) * unlabeled
        if len(self._all_names_cache) >= 64:  # bounded: counts change only with the scene
            self._all_names_cache.clear()
        self._all_names_cache[key] = (labeled, names)
        return names

    def _markers(
        self, comps: dict, types: tuple[qp.ComponentType, ...]
    ) -> tuple[int, np.ndarray, np.ndarray] | None:
        """The markers of the first of ``types`` the packet holds: their count, positions
        (m, Z-up) and residuals (m, -1 unknown); None when it holds none of them."""
        ctype = next((c for c in types if c in comps), None)
        if ctype is None:
            return None
        records = qp.unpack_markers(ctype, comps[ctype])
        n = len(records)
        positions, _ = self._z_up(records["position"].astype(np.float64) * 1e-3)
        residuals = (
            _residuals_m(records["residual"])
            if "residual" in (records.dtype.names or ())
            else np.full(n, -1.0, np.float32)
        )
        return n, positions, residuals

    def _labeled(self, comps: dict) -> MarkerArrays | None:
        found = self._markers(comps, _LABELED)
        if found is None:
            return None
        n, positions, residuals = found
        occluded = ~np.isfinite(positions).all(axis=1)
        residuals[occluded] = -1.0
        ids = self.label_ids if n == len(self.labels) else np.arange(1, n + 1, dtype=np.int32)
        return MarkerArrays(
            ids=ids,
            names=self._names("marker", self.labels, n),
            positions=positions,
            occluded=occluded,
            residuals=residuals,
        )

    def _unlabeled(self, comps: dict) -> MarkerArrays | None:
        found = self._markers(comps, _UNLABELED)
        if found is None:
            return None
        n, positions, residuals = found
        # QTM's ids of unlabeled markers only follow a trajectory for a while: they
        # are not stable identities, so these markers are published as unlabeled
        return MarkerArrays(
            ids=np.full(n, UNKNOWN_ID, np.int32),
            names=("",) * n,
            positions=positions,
            occluded=~np.isfinite(positions).all(axis=1),
            residuals=residuals,
        )

    def _bodies(self, comps: dict, labeled: MarkerArrays | None) -> BodyArrays:
        ctype = next(
            (c for c in (qp.ComponentType.BODIES_6D_RESIDUALS, qp.ComponentType.BODIES_6D) if c in comps),
            None,
        )
        if ctype is None:
            return BodyArrays()
        records = qp.unpack_bodies(ctype, comps[ctype])
        n = len(records)
        positions = records["position"].astype(np.float64) * 1e-3
        rotations = records["rotation"]
        valid = np.isfinite(positions).all(axis=1) & np.isfinite(rotations).all(axis=1)
        quats = np.full((n, 4), np.nan)
        if valid.any():
            quats[valid] = quat_from_matrix(qp.qtm_to_matrices(rotations[valid].astype(np.float64)))
        positions, quats = self._z_up(positions, quats)
        mean_errors = (
            _residuals_m(records["residual"])
            if "residual" in (records.dtype.names or ())
            else np.full(n, -1.0, np.float32)
        )
        names = self._names("body", self.body_names, n)
        ids = self.body_ids if n == len(self.body_names) else np.arange(1, n + 1, dtype=np.int32)
        if labeled is not None and n == len(self.body_names) and len(labeled) == len(self.labels):
            rows = self.body_marker_rows
            markers = MarkerArrays(
                ids=labeled.ids[rows],
                names=self.body_marker_names,
                positions=labeled.positions[rows],
                occluded=labeled.occluded[rows],
                residuals=labeled.residuals[rows],
            )
            offsets = self.body_marker_offsets
        else:
            markers = MarkerArrays()
            offsets = np.zeros(n + 1, dtype=np.int64)
        return BodyArrays(
            ids=ids,
            names=names,
            positions=positions,
            orientations=quats,
            valid=valid,
            mean_errors=mean_errors,
            marker_offsets=offsets,
            markers=markers,
        )

    def _skeletons(self, comps: dict) -> SkeletonArrays:
        data = comps.get(qp.ComponentType.SKELETON)
        if data is None or not self.skeleton_names:
            return SkeletonArrays()
        streamed = qp.unpack_skeletons(data)
        m = len(self.segment_ids)
        positions = np.full((m, 3), np.nan)
        quats = np.full((m, 4), np.nan)
        for i, records in enumerate(streamed[: len(self.skeleton_names)]):
            if len(records) == 0:
                continue  # not seen in this frame
            ids = self.parameters.skeletons[i].segment_ids
            order = self._segment_order[i]
            found = np.searchsorted(ids[order], records["id"])
            found = np.clip(found, 0, len(ids) - 1)
            match = ids[order][found] == records["id"]
            rows = int(self.segment_offsets[i]) + order[found[match]]
            positions[rows] = records["position"][match].astype(np.float64) * 1e-3
            quats[rows] = records["rotation"][match].astype(np.float64)
        positions, quats = self._z_up(positions, quats)
        seg_valid = np.isfinite(positions).all(axis=1) & np.isfinite(quats).all(axis=1)
        skel_valid = np.asarray(
            [seg_valid[a:b].any() for a, b in zip(self.segment_offsets[:-1], self.segment_offsets[1:])],
            dtype=bool,
        )
        segments = SegmentArrays(
            ids=self.segment_ids,
            names=self.segment_names,
            parent_ids=self.segment_parents,
            positions=positions,
            orientations=quats,
            valid=seg_valid,
        )
        return SkeletonArrays(
            ids=self.skeleton_ids,
            names=self.skeleton_names,
            valid=skel_valid,
            segment_offsets=self.segment_offsets,
            segments=segments,
        )
