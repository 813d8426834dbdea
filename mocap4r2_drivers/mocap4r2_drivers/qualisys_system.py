"""qualisys_system: Qualisys Track Manager (QTM) through Qualisys' Python SDK, qtm-rt.

configure connects (protocol version, optional TakeControl) and reads body, label and
skeleton names from QTM's parameter XML; activate asks QTM to stream every frame
(``StreamFrames AllFrames``, not polled) with the configured components. Each data
packet becomes a MocapFrame: millimetres to metres, column-major rotation matrices to
quaternions, NaN (QTM's "missing") to tracking_valid false / occluded (the node then
holds the last value), QTM's frame number as frame_number and QTM's timestamp mapped
to Unix time as the capture stamp. Ids are 1-based positions in QTM's lists (bodies
and labels, as QTM numbers them in its GUI); names always come from QTM.

qtm-rt delivers the packets (framing, commands, events); the components are decoded
with numpy straight from the packet bytes (:mod:`.qtm.protocol`), which costs a few
microseconds per component where building qtm-rt's per-marker tuples costs far more.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Mapping

import numpy as np
from scipy.spatial.transform import Rotation

from mocap4r2_control.adapter import AdapterError, MocapAdapter
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.frame import (
    UNKNOWN_ID,
    AssetNames,
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)
from mocap4r2_control.geometry import quat_from_matrix, quat_multiply
from mocap4r2_control.system_node import run_system

from .qtm import protocol as qp
from .qtm.client import DISCONNECTED, STREAMABLE, QtmClient, QtmError, QtmParameters, TimestampMapper

LOG = logging.getLogger("mocap4r2.qualisys")

DEFAULT_COMPONENTS = ["6dres", "3dres", "3dnolabelsres", "skeleton:global"]
_FAMILIES = {"6d": "6d", "6dres": "6d", "3d": "3d", "3dres": "3d", "3dnolabels": "3dnolabels",
             "3dnolabelsres": "3dnolabels", "skeleton:global": "skeleton"}

# Rotation taking QTM's up axis to +Z (right handed): positions p' = A p.
_UP_AXES = {
    "+Z": np.eye(3),
    "-Z": np.array([[1.0, 0, 0], [0, -1, 0], [0, 0, -1]]),
    "+Y": np.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]]),
    "-Y": np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]),
    "+X": np.array([[0.0, 1, 0], [0, 0, 1], [1, 0, 0]]),
    "-X": np.array([[0.0, 1, 0], [0, 0, -1], [-1, 0, 0]]),
}


def _check_components(values: list) -> str | None:
    unknown = [v for v in values if v not in STREAMABLE]
    if unknown:
        return f"components: unknown {unknown}; choose from {list(STREAMABLE)}"
    families = [_FAMILIES[v] for v in values]
    if len(set(families)) != len(families):
        return f"components: at most one of each kind (6d/6dres, 3d/3dres, ...), got {values}"
    if not values:
        return "components: give at least one component"
    return None


def _check_version(value: str) -> str | None:
    match = re.fullmatch(r"1\.(\d+)", value)
    if not match or not 8 <= int(match.group(1)) <= 99:
        return f"protocol_version must look like 1.25 (1.8 or later, as qtm-rt requires), got {value!r}"
    return None


def _residuals_m(residuals_mm: np.ndarray) -> np.ndarray:
    """mm to m; unknown (NaN or negative) residuals become -1."""
    out = np.asarray(residuals_mm, dtype=np.float32) * np.float32(1e-3)
    out[~(out >= 0)] = -1.0    # comparisons with NaN are False
    return out


class QtmFrameDecoder:
    """Turns QTM data packets into MocapFrames, for one set of QTM parameters."""

    def __init__(self, parameters: QtmParameters):
        self.parameters = parameters
        up = parameters.axis_upwards if parameters.axis_upwards in _UP_AXES else "+Z"
        self.axis = None if up == "+Z" else _UP_AXES[up]
        self._axis_quat = None if self.axis is None else Rotation.from_matrix(self.axis).as_quat()

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
        self._unlabeled_names: dict[int, tuple[str, ...]] = {}
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
            self._fallback_names[key] = names
        return names

    def _z_up(self, positions: np.ndarray, quats: np.ndarray | None = None):
        if self.axis is None:
            return positions, quats
        positions = positions @ self.axis.T
        if quats is not None:
            a = np.broadcast_to(self._axis_quat, quats.shape)
            quats = quat_multiply(quat_multiply(a, quats), a * np.array([-1.0, -1.0, -1.0, 1.0]))
        return positions, quats

    # ------------------------------------------------------------------ decoding
    def decode(self, payload: bytes | memoryview) -> MocapFrame:
        packet = qp.parse_data(payload)
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
                residuals=np.concatenate((labeled.residuals, unlabeled.residuals)))
        skeletons = self._skeletons(comps)
        return MocapFrame(frame_number=packet.frame_number, markers=markers, bodies=bodies, skeletons=skeletons)

    def _all_names(self, labeled: tuple[str, ...], unlabeled: int) -> tuple[str, ...]:
        names = self._unlabeled_names.get(unlabeled)
        if names is None or names[:len(labeled)] != labeled:
            names = labeled + ("",) * unlabeled
            self._unlabeled_names[unlabeled] = names
        return names

    def _labeled(self, comps: dict) -> MarkerArrays | None:
        ctype = next((c for c in (qp.ComponentType.MARKERS_3D_RESIDUALS, qp.ComponentType.MARKERS_3D)
                      if c in comps), None)
        if ctype is None:
            return None
        records = qp.unpack_markers(ctype, comps[ctype])
        n = len(records)
        positions, _ = self._z_up(records["position"].astype(np.float64) * 1e-3)
        occluded = ~np.isfinite(positions).all(axis=1)
        residuals = _residuals_m(records["residual"]) if "residual" in records.dtype.names \
            else np.full(n, -1.0, np.float32)
        residuals[occluded] = -1.0
        ids = self.label_ids if n == len(self.labels) else np.arange(1, n + 1, dtype=np.int32)
        return MarkerArrays(ids=ids, names=self._names("marker", self.labels, n), positions=positions,
                            occluded=occluded, residuals=residuals)

    def _unlabeled(self, comps: dict) -> MarkerArrays | None:
        ctype = next((c for c in (qp.ComponentType.MARKERS_3D_NO_LABELS_RESIDUALS,
                                  qp.ComponentType.MARKERS_3D_NO_LABELS) if c in comps), None)
        if ctype is None:
            return None
        records = qp.unpack_markers(ctype, comps[ctype])
        n = len(records)
        positions, _ = self._z_up(records["position"].astype(np.float64) * 1e-3)
        residuals = _residuals_m(records["residual"]) if "residual" in records.dtype.names \
            else np.full(n, -1.0, np.float32)
        # QTM's ids of unlabeled markers only follow a trajectory for a while: they
        # are not stable identities, so these markers are published as unlabeled
        return MarkerArrays(ids=np.full(n, UNKNOWN_ID, np.int32), names=("",) * n, positions=positions,
                            occluded=~np.isfinite(positions).all(axis=1), residuals=residuals)

    def _bodies(self, comps: dict, labeled: MarkerArrays | None) -> BodyArrays:
        ctype = next((c for c in (qp.ComponentType.BODIES_6D_RESIDUALS, qp.ComponentType.BODIES_6D)
                      if c in comps), None)
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
        mean_errors = _residuals_m(records["residual"]) if "residual" in records.dtype.names \
            else np.full(n, -1.0, np.float32)
        names = self._names("body", self.body_names, n)
        ids = self.body_ids if n == len(self.body_names) else np.arange(1, n + 1, dtype=np.int32)
        if labeled is not None and n == len(self.body_names) and len(labeled) == len(self.labels):
            rows = self.body_marker_rows
            markers = MarkerArrays(ids=labeled.ids[rows], names=self.body_marker_names,
                                   positions=labeled.positions[rows], occluded=labeled.occluded[rows],
                                   residuals=labeled.residuals[rows])
            offsets = self.body_marker_offsets
        else:
            markers = MarkerArrays()
            offsets = np.zeros(n + 1, dtype=np.int64)
        return BodyArrays(ids=ids, names=names, positions=positions, orientations=quats, valid=valid,
                          mean_errors=mean_errors, marker_offsets=offsets, markers=markers)

    def _skeletons(self, comps: dict) -> SkeletonArrays:
        data = comps.get(qp.ComponentType.SKELETON)
        if data is None or not self.skeleton_names:
            return SkeletonArrays()
        streamed = qp.unpack_skeletons(data)
        m = len(self.segment_ids)
        positions = np.full((m, 3), np.nan)
        quats = np.full((m, 4), np.nan)
        for i, records in enumerate(streamed[:len(self.skeleton_names)]):
            if len(records) == 0:
                continue   # not seen in this frame
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
        skel_valid = np.asarray([seg_valid[a:b].any() for a, b in
                                 zip(self.segment_offsets[:-1], self.segment_offsets[1:])], dtype=bool)
        segments = SegmentArrays(ids=self.segment_ids, names=self.segment_names, parent_ids=self.segment_parents,
                                 positions=positions, orientations=quats, valid=seg_valid)
        return SkeletonArrays(ids=self.skeleton_ids, names=self.skeleton_names, valid=skel_valid,
                              segment_offsets=self.segment_offsets, segments=segments)


class QualisysAdapter(MocapAdapter):
    """QTM through qtm-rt: every frame streamed, names from QTM, reconnects by itself."""

    system_type = "qualisys"
    parameters = (
        ParameterSpec("host", "127.0.0.1", "Address of the computer running QTM."),
        ParameterSpec("port", 22222, "QTM's base port (QTM: Project options > Real-Time output); the driver "
                      "talks to the little-endian port, base + 1 (22223 by default).", min_value=1,
                      max_value=65534),
        ParameterSpec("protocol_version", "1.25", "QTM RT protocol version to ask QTM for.", check=_check_version),
        ParameterSpec("components", list(DEFAULT_COMPONENTS),
                      "Data components to stream: one of 6d/6dres (bodies), 3d/3dres (labeled markers), "
                      "3dnolabels/3dnolabelsres (unlabeled markers), skeleton:global.", check=_check_components),
        ParameterSpec("take_control", False, "Take control of QTM (TakeControl) while connected; needed only "
                      "if other clients must not change QTM's settings during a session."),
        ParameterSpec("password", "", "Password for TakeControl, when QTM asks for one."),
        ParameterSpec("connect_timeout", 5.0, "Seconds to wait for QTM's answers.", min_value=0.1, max_value=60.0),
        ParameterSpec("reconnect_period", 1.0, "Seconds between reconnection attempts when QTM goes away; "
                      "0: do not reconnect (reading then fails).", min_value=0.0, max_value=60.0),
    )

    def __init__(self, host: str, port: int, version: str, components: list[str], take_control: bool = False,
                 password: str = "", timeout: float = 5.0, reconnect_period: float = 1.0):
        self.host = host
        self.port = port
        self.version = version
        self.components = list(components)
        self.take_control = take_control
        self.password = password
        self.timeout = timeout
        self.reconnect_period = reconnect_period
        self.client: QtmClient | None = None
        self.decoder: QtmFrameDecoder | None = None
        self.mapper = TimestampMapper()
        self.decode_errors = 0
        self.last_decode_error = ""
        self._lost_reported = False

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> "QualisysAdapter":
        for check, key in ((_check_components, "components"), (_check_version, "protocol_version")):
            problem = check(values[key])
            if problem:
                raise AdapterError(problem)
        return cls(values["host"], int(values["port"]), values["protocol_version"], list(values["components"]),
                   bool(values["take_control"]), values["password"], float(values["connect_timeout"]),
                   float(values["reconnect_period"]))

    def _on_parameters(self, parameters: QtmParameters) -> None:
        # runs in the qtm-rt thread; swapping one reference is atomic for the reader
        self.decoder = QtmFrameDecoder(parameters)

    def connect(self) -> AssetNames:
        self.client = QtmClient(self.host, self.port + 1, self.version, self.components,
                                password=self.password if self.take_control else None, timeout=self.timeout,
                                reconnect_period=self.reconnect_period,
                                on_parameters=self._on_parameters)
        try:
            self.client.connect()
        except QtmError as exc:
            raise AdapterError(str(exc)) from exc
        return self.decoder.asset_names()

    @property
    def nominal_rate(self) -> float:
        return self.decoder.parameters.frequency if self.decoder is not None else 0.0

    def start_streaming(self) -> None:
        try:
            self.client.start_streaming()
        except QtmError as exc:
            raise AdapterError(str(exc)) from exc

    def stop_streaming(self) -> None:
        if self.client is not None:
            self.client.stop_streaming()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        client = self.client
        if client is None:
            raise AdapterError("not connected")
        item = client.get(timeout)
        if item is DISCONNECTED:
            if self.reconnect_period <= 0:
                raise AdapterError(f"QTM at {self.host}:{self.port + 1} went away ({client.stats.last_error})")
            if not self._lost_reported:
                LOG.warning("QTM at %s went away; reconnecting every %.1f s", self.host, self.reconnect_period)
                self._lost_reported = True
            return None
        if item is None:
            if self.reconnect_period <= 0 and not client.connected:
                raise AdapterError(f"QTM at {self.host}:{self.port + 1} is not connected")
            return None
        self._lost_reported = False
        packet, arrival = item
        try:
            frame = self.decoder.decode(packet.data)
        except (qp.ProtocolError, ValueError) as exc:
            # a frame that cannot be decoded is dropped and counted, the stream goes on
            self.decode_errors += 1
            self.last_decode_error = str(exc)
            if self.decode_errors in (1, 10, 100) or self.decode_errors % 1000 == 0:
                LOG.error("dropped an undecodable QTM frame (%d so far): %s", self.decode_errors, exc)
            return None
        frame.capture_time = self.mapper.capture_time(packet.timestamp, arrival)
        return frame

    def disconnect(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def status(self) -> dict[str, str]:
        client = self.client
        out = {"qtm": f"{self.host}:{self.port + 1}", "decode_errors": str(self.decode_errors)}
        if client is not None:
            s = client.stats
            out.update(qtm_version=client.qtm_version, connected=str(client.connected),
                       packets=str(s.packets), packets_dropped_slow_reader=str(s.packets_dropped),
                       reconnects=str(max(s.connects - 1, 0)))
            if s.last_error:
                out["last_error"] = s.last_error
        if self.decoder is not None and self.decoder.mismatches:
            out["name_mismatches"] = str(self.decoder.mismatches)
        if self.last_decode_error:
            out["last_decode_error"] = self.last_decode_error
        return out


def main(args: list[str] | None = None) -> int:
    return run_system(QualisysAdapter, "qualisys_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
