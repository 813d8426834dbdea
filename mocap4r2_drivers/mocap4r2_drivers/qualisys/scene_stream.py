"""The QTM view of a simulated scene, as qtm_simulator serves it: the parameter XML QTM
answers GetParameters with (the layouts before and after protocol 1.21 and 1.22), and the
data components of each frame (3D, 6D, skeletons, with or without residuals), encoded once
per frame whatever the number of clients. Pure Python + numpy, no sockets."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from mocap4r2_control.frame import UNKNOWN_ID, MocapFrame
from mocap4r2_control.rotation import quat_multiply, quat_normalize, quat_rotate, quat_to_matrix

from ..simulated.scene import Scene
from . import protocol as qp
from .protocol import ComponentType


def version_tuple(text: str) -> tuple[int, int]:
    """The protocol version "1.25" as (1, 25)."""
    major, minor = text.split(".")
    return int(major), int(minor)


# ====================================================================== parameters XML
def _fmt(value: float) -> str:
    return f"{float(value):.6f}"


def _general_xml(parent: ET.Element, scene: Scene) -> None:
    general = ET.SubElement(parent, "General")
    rate = scene.rate
    ET.SubElement(general, "Frequency").text = str(int(rate)) if float(rate).is_integer() else repr(rate)
    ET.SubElement(general, "Capture_Time").text = "0.000000"
    for key in (
        "Start_On_External_Trigger",
        "Start_On_Trigger_NO",
        "Start_On_Trigger_NC",
        "Start_On_Trigger_Software",
    ):
        ET.SubElement(general, key).text = "False"


def _threed_xml(parent: ET.Element, scene: Scene) -> None:
    threed = ET.SubElement(parent, "The_3D")
    ET.SubElement(threed, "AxisUpwards").text = "+Z"
    ET.SubElement(threed, "CalibrationTime").text = "2024-01-01 00:00:00"
    labels = [name for body in scene.description.bodies for name in body.marker_names]
    ET.SubElement(threed, "Labels").text = str(len(labels))
    for name in labels:
        label = ET.SubElement(threed, "Label")
        ET.SubElement(label, "Name").text = name
        ET.SubElement(label, "RGBColor").text = "65280"
        ET.SubElement(label, "Trajectory_Type").text = "Measured"
    ET.SubElement(threed, "Bones")


def _sixd_xml(parent: ET.Element, scene: Scene, version: tuple[int, int]) -> None:
    sixd = ET.SubElement(parent, "The_6D")
    bodies = scene.description.bodies
    if version < (1, 21):
        # the layout before 1.21: a body count and child elements per point
        ET.SubElement(sixd, "Bodies").text = str(len(bodies))
    for body in bodies:
        element = ET.SubElement(sixd, "Body")
        ET.SubElement(element, "Name").text = body.name
        points_mm = body.marker_layout * 1000.0
        if version < (1, 21):
            ET.SubElement(element, "RGBColor").text = "16711680"
            for point in points_mm:
                p = ET.SubElement(element, "Point")
                for axis, value in zip("XYZ", point):
                    ET.SubElement(p, axis).text = _fmt(value)
            continue
        ET.SubElement(element, "Enabled").text = "true"
        ET.SubElement(element, "Color", R="255", G="0", B="0")
        ET.SubElement(element, "MaximumResidual").text = "10.000000"
        ET.SubElement(element, "MinimumMarkersInBody").text = "3"
        ET.SubElement(element, "BoneLengthTolerance").text = "5.000000"
        ET.SubElement(element, "Filter", Preset="No filter")
        points = ET.SubElement(element, "Points")
        for name, point in zip(body.marker_names, points_mm):
            ET.SubElement(
                points,
                "Point",
                X=_fmt(point[0]),
                Y=_fmt(point[1]),
                Z=_fmt(point[2]),
                Virtual="0",
                PhysicalId="0",
                Name=name,
            )
        ET.SubElement(
            element, "Data_origin", X="0.000000", Y="0.000000", Z="0.000000", Relative_body="0"
        ).text = "0"
        ET.SubElement(
            element,
            "Data_orientation",
            R11="1.000000",
            R12="0.000000",
            R13="0.000000",
            R21="0.000000",
            R22="1.000000",
            R23="0.000000",
            R31="0.000000",
            R32="0.000000",
            R33="1.000000",
            Relative_body="0",
        ).text = "0"
    if version < (1, 21):
        euler = ET.SubElement(sixd, "Euler")
        for key, value in (("First", "Roll"), ("Second", "Pitch"), ("Third", "Yaw")):
            ET.SubElement(euler, key).text = value


def _skeleton_xml(parent: ET.Element, scene: Scene, version: tuple[int, int]) -> None:
    skeletons = ET.SubElement(parent, "Skeletons")
    for spec in scene.description.skeletons:
        skeleton = ET.SubElement(skeletons, "Skeleton", Name=spec.name)
        ids = spec.segment_ids.tolist()
        parents = spec.parent_ids.tolist()
        offsets_mm = spec.offsets * 1000.0
        if version < (1, 22):
            # flat list with Parent_ID attributes (omitted for the root)
            for sid, name, parent_id, offset in zip(ids, spec.segment_names, parents, offsets_mm):
                attrs = {"Name": name, "ID": str(sid)}
                if parent_id >= 0:
                    attrs["Parent_ID"] = str(parent_id)
                segment = ET.SubElement(skeleton, "Segment", attrs)
                ET.SubElement(segment, "Position", X=_fmt(offset[0]), Y=_fmt(offset[1]), Z=_fmt(offset[2]))
                ET.SubElement(segment, "Rotation", X="0.000000", Y="0.000000", Z="0.000000", W="1.000000")
            continue
        # 1.22 and later: segments nest inside their parent
        ET.SubElement(skeleton, "Solver").text = "Global Optimization"
        ET.SubElement(skeleton, "Scale").text = "1.000000"
        container = ET.SubElement(skeleton, "Segments")
        elements: dict[int, ET.Element] = {}
        for sid, name, parent_id, offset in zip(ids, spec.segment_names, parents, offsets_mm):
            holder = elements.get(parent_id, container)
            segment = ET.SubElement(holder, "Segment", Name=name, ID=str(sid))
            ET.SubElement(segment, "Solver").text = "Global Optimization"
            for tag in ("Transform", "DefaultTransform"):
                transform = ET.SubElement(segment, tag)
                ET.SubElement(transform, "Position", X=_fmt(offset[0]), Y=_fmt(offset[1]), Z=_fmt(offset[2]))
                ET.SubElement(transform, "Rotation", X="0.000000", Y="0.000000", Z="0.000000", W="1.000000")
            ET.SubElement(segment, "DegreesOfFreedom")
            ET.SubElement(segment, "Endpoint", X="0.000000", Y="0.000000", Z="0.000000")
            ET.SubElement(segment, "Markers")
            ET.SubElement(segment, "RigidBodies")
            elements[sid] = segment


def parameters_xml(scene: Scene, parts: list[str], version: str) -> str:
    """The XML QTM answers GetParameters with, for the given (lower-case) parts."""
    vt = version_tuple(version)
    root = ET.Element(f"QTM_Parameters_Ver_{version}")
    for part in parts:
        if part == "general":
            _general_xml(root, scene)
        elif part == "3d":
            _threed_xml(root, scene)
        elif part == "6d":
            _sixd_xml(root, scene, vt)
        elif part in ("skeleton", "skeleton:global"):
            _skeleton_xml(root, scene, vt)
    ET.indent(root, space="    ")
    return ET.tostring(root, encoding="unicode")


# ====================================================================== frames
class SceneStream:
    """A scene as QTM data components (what NatNet's SceneStream is for NAT_FRAMEOFDATA):
    encodes the components of one scene frame, each at most once per frame."""

    def __init__(self, scene: Scene):
        self.scene = scene
        skeletons = scene.description.skeletons
        self._segment_counts = [len(s.segment_ids) for s in skeletons]
        # parent row of each segment within all segments, -1 for roots (local skeletons)
        parent_rows = []
        start = 0
        for spec in skeletons:
            index = {int(sid): start + i for i, sid in enumerate(spec.segment_ids.tolist())}
            parent_rows += [index.get(int(p), -1) for p in spec.parent_ids.tolist()]
            start += len(spec.segment_ids)
        self._parent_rows = np.asarray(parent_rows, dtype=np.int64)
        self._frame: tuple[int, MocapFrame] | None = None  # (k, frame k) of the last frame asked for
        self._cache: dict[str, bytes] = {}

    def frame(self, k: int) -> MocapFrame:
        """Frame k of the scene (the components cached are those of this frame)."""
        cached = self._frame
        if cached is None or cached[0] != k:
            cached = self._frame = (k, self.scene.frame(k))
            self._cache = {}
        return cached[1]

    def component(self, k: int, name: str) -> bytes:
        frame = self.frame(k)
        packed = self._cache.get(name)
        if packed is None:
            packed = self._encode(frame, name)
            self._cache[name] = packed
        return packed

    def packet(self, k: int, names: list[str], timestamp: int | None = None) -> bytes:
        """Frame k's data packet; ``timestamp`` in microseconds (default: k periods)."""
        if timestamp is None:
            timestamp = int(round(k * 1e6 / self.scene.rate))
        return qp.encode_frame(timestamp, k, [self.component(k, name) for name in names])

    # ------------------------------------------------------------------ components
    def _encode(self, frame: MocapFrame, name: str) -> bytes:
        ctype = qp.COMPONENT_NAMES[name]
        if ctype in (ComponentType.MARKERS_3D, ComponentType.MARKERS_3D_RESIDUALS):
            labeled = frame.bodies.markers  # in the order of the 3D labels
            return qp.pack_markers(
                ctype, labeled.positions * 1000.0, residuals_mm=_residuals_mm(labeled.residuals)
            )
        if ctype in qp.MARKER_DTYPES:
            rows = frame.markers.ids == UNKNOWN_ID
            positions = frame.markers.positions[rows]
            return qp.pack_markers(
                ctype,
                positions * 1000.0,
                residuals_mm=_residuals_mm(frame.markers.residuals[rows]),
                ids=np.arange(1, positions.shape[0] + 1, dtype=np.int32),
            )
        if ctype in qp.BODY_DTYPES:
            bodies = frame.bodies
            rotations = np.full((len(bodies), 9), np.nan)
            good = bodies.valid & np.isfinite(bodies.orientations).all(axis=1)
            if good.any():
                rotations[good] = qp.matrices_to_qtm(
                    quat_to_matrix(quat_normalize(bodies.orientations[good]))
                )
            positions = np.where(good[:, None], bodies.positions * 1000.0, np.nan)
            return qp.pack_bodies(ctype, positions, rotations, residuals_mm=_residuals_mm(bodies.mean_errors))
        if ctype == ComponentType.SKELETON:
            return self._skeletons(frame, global_coordinates=name.endswith(":global"))
        raise ValueError(f"component {name} cannot be encoded")

    def _skeletons(self, frame: MocapFrame, global_coordinates: bool) -> bytes:
        sk = frame.skeletons
        seg = sk.segments
        positions = seg.positions
        orientations = seg.orientations
        if not global_coordinates and len(seg):
            # local coordinates: each segment relative to its parent (roots stay global)
            rows = np.flatnonzero(self._parent_rows >= 0)
            parents = self._parent_rows[rows]
            inverse = orientations[parents] * np.array([-1.0, -1.0, -1.0, 1.0])
            positions = positions.copy()
            orientations = orientations.copy()
            positions[rows] = quat_rotate(inverse, seg.positions[rows] - seg.positions[parents])
            orientations[rows] = quat_multiply(inverse, seg.orientations[rows])
        out: list[np.ndarray | None] = []
        for i in range(len(sk)):
            if not sk.valid[i]:
                out.append(None)
                continue
            a, b = int(sk.segment_offsets[i]), int(sk.segment_offsets[i + 1])
            records = np.zeros(b - a, dtype=qp.SEGMENT_DTYPE)
            records["id"] = seg.ids[a:b]
            records["position"] = positions[a:b] * 1000.0
            records["rotation"] = orientations[a:b]
            out.append(records)
        return qp.pack_skeletons(out)


def _residuals_mm(residuals_m: np.ndarray) -> np.ndarray:
    """Residuals in mm; unknown (negative) ones stay -1."""
    r = np.asarray(residuals_m, dtype=np.float64)
    return np.where(r >= 0, r * 1000.0, -1.0)
