"""What QTM says about its assets: the parameter XML of a GetParameters answer, read into
:class:`QtmParameters` (labels, rigid bodies, skeletons, frame rate, up axis), and which
parameter parts the streamed components need.

QTM's XML differs between protocol versions: up to 1.20 a body's points are child
elements without names, from 1.21 they are attributes carrying the marker (trajectory)
names; skeleton segments either name their ``Parent_ID`` or (1.22+) nest inside their
parent. :func:`parse_parameters` reads every layout, so the adapter works with any QTM
speaking protocol 1.2x.

Pure Python and numpy, without sockets or qtm-rt: the converter (:mod:`.convert`), the
doctor's checks and the benchmarks read parameters without a connection.
:class:`QtmConnectionError` is defined here because this is the lowest module raising it
(parameters that are not XML are a refused request like any other). :mod:`.client`
re-exports every public name of this module: callers of the client import them from there.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np

from mocap4r2_control.frame import NO_PARENT

__all__ = [
    "STREAMABLE",
    "BodySetup",
    "QtmConnectionError",
    "QtmParameters",
    "SkeletonSetup",
    "parameter_parts",
    "parse_parameters",
]

# what the adapter may stream, and the parameter parts each one needs
STREAMABLE = ("6d", "6dres", "3d", "3dres", "3dnolabels", "3dnolabelsres", "skeleton:global")
_PARAMETER_PART = {"6d": "6d", "6dres": "6d", "3d": "3d", "3dres": "3d", "skeleton:global": "skeleton:global"}


class QtmConnectionError(ConnectionError):
    """QTM cannot be reached or refused a request; the message says what to check."""


@dataclass(frozen=True)
class BodySetup:
    """A rigid body as QTM's 6D parameters describe it."""

    name: str
    point_names: tuple[str, ...]  # empty before protocol 1.21 (points had no names)
    points_mm: np.ndarray  # (m, 3) marker layout in the body frame


@dataclass(frozen=True)
class SkeletonSetup:
    """A skeleton as QTM's skeleton parameters describe it."""

    name: str
    segment_ids: np.ndarray  # (s,) int32
    segment_names: tuple[str, ...]
    parent_ids: np.ndarray  # (s,) int32, NO_PARENT for the root


@dataclass(frozen=True)
class QtmParameters:
    """What a GetParameters answer says about the assets (missing parts stay empty)."""

    frequency: float = 0.0
    axis_upwards: str = "+Z"
    labels: tuple[str, ...] = ()
    bodies: tuple[BodySetup, ...] = ()
    skeletons: tuple[SkeletonSetup, ...] = ()


def _text(element: ET.Element | None, default: str = "") -> str:
    return element.text.strip() if element is not None and element.text else default


def _float_attr(element: ET.Element | None, name: str) -> float:
    try:
        return float(element.get(name, "nan")) if element is not None else float("nan")
    except ValueError:
        return float("nan")


def parse_parameters(xml_text: str | bytes) -> QtmParameters:
    """Parse QTM's parameter XML (any subset of General, The_3D, The_6D, Skeletons)."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise QtmConnectionError(f"QTM sent parameters that are not valid XML: {exc}") from exc
    frequency = 0.0
    general = root.find("General")
    if general is not None:
        try:
            frequency = float(_text(general.find("Frequency"), "0"))
        except ValueError:
            frequency = 0.0
    threed = root.find("The_3D")
    labels: tuple[str, ...] = ()
    axis = "+Z"
    if threed is not None:
        axis = _text(threed.find("AxisUpwards"), "+Z").upper()
        labels = tuple(_text(label.find("Name")) for label in threed.findall("Label"))
    bodies = tuple(_parse_body(body) for body in root.findall("The_6D/Body"))
    skeletons = tuple(_parse_skeleton(s) for s in root.findall("Skeletons/Skeleton"))
    return QtmParameters(
        frequency=frequency, axis_upwards=axis, labels=labels, bodies=bodies, skeletons=skeletons
    )


def _parse_body(body: ET.Element) -> BodySetup:
    names: list[str] = []
    points: list[tuple[float, float, float]] = []
    new_points = body.findall("Points/Point")
    if new_points:  # 1.21+: attributes, with the point (trajectory) names
        for point in new_points:
            names.append(point.get("Name", ""))
            points.append((_float_attr(point, "X"), _float_attr(point, "Y"), _float_attr(point, "Z")))
    else:  # up to 1.20: child elements, no names
        for point in body.findall("Point"):
            try:
                x, y, z = (float(_text(point.find(a), "nan")) for a in "XYZ")
                points.append((x, y, z))
            except ValueError:
                points.append((float("nan"),) * 3)
    return BodySetup(
        name=_text(body.find("Name")),
        point_names=tuple(names) if any(names) else (),
        points_mm=np.asarray(points, dtype=float).reshape(-1, 3),
    )


def _parse_skeleton(skeleton: ET.Element) -> SkeletonSetup:
    ids: list[int] = []
    names: list[str] = []
    parents: list[int] = []

    def visit(element: ET.Element, parent: int) -> None:
        for segment in element.findall("Segment"):
            try:
                sid = int(segment.get("ID", ""))
            except ValueError:
                sid = len(ids) + 1  # defensive: QTM always sends IDs
            explicit = segment.get("Parent_ID")
            ids.append(sid)
            names.append(segment.get("Name", ""))
            parents.append(int(explicit) if explicit not in (None, "") else parent)
            visit(segment, sid)  # 1.22+: children nest inside their parent

    container = skeleton.find("Segments")
    visit(container if container is not None else skeleton, NO_PARENT)
    return SkeletonSetup(
        name=skeleton.get("Name", ""),
        segment_ids=np.asarray(ids, dtype=np.int32),
        segment_names=tuple(names),
        parent_ids=np.asarray(parents, dtype=np.int32),
    )


def parameter_parts(components: list[str]) -> list[str]:
    """The GetParameters parts that name the assets of the streamed ``components``."""
    parts = ["general"]
    for component in components:
        part = _PARAMETER_PART.get(component)
        if part and part not in parts:
            parts.append(part)
    return parts
