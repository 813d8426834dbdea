"""NatNet model definitions (NAT_MODELDEF): the asset descriptions a client needs to
name what a frame carries."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .wire import (
    _I4,
    _I32,
    ANCHOR_MARKER_DESCRIPTION,
    DescriptorType,
    MessageId,
    NatNetProtocolError,
    Opaque,
    Skipped,
    Version,
    _Reader,
    _Writer,
    pack,
    require_supported,
)


@dataclass
class MarkerSetDescription:
    """A marker set: its name and the names of its markers."""

    name: str
    marker_names: tuple[str, ...] = ()


@dataclass
class RigidBodyDescription:
    """A rigid body, or a bone of a skeleton or asset (then ``id`` is the bone id)."""

    name: str
    id: int
    parent_id: int = -1
    offset: NDArray[Any] = field(default_factory=lambda: np.zeros(3, dtype=np.float32))  # from the parent
    # 4.2+: the rotational offset from the parent (x, y, z, w), identity before
    orientation: NDArray[Any] = field(default_factory=lambda: np.array([0, 0, 0, 1], dtype=np.float32))
    marker_positions: NDArray[Any] = field(default_factory=lambda: np.zeros((0, 3), dtype=np.float32))
    marker_labels: NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # active labels
    marker_names: tuple[str, ...] = ()  # 4.0+; empty strings when the stream has none


@dataclass
class SkeletonDescription:
    """A skeleton: its name, id and bones (rigid-body descriptions)."""

    name: str
    id: int
    bones: list[RigidBodyDescription] = field(default_factory=list)


@dataclass
class MarkerDescription:
    """A marker of an asset description."""

    name: str
    id: int
    position: NDArray[Any] = field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    size: float = 0.0
    params: int = 0


@dataclass
class AssetDescription:
    """An asset (NatNet 4.1): its rigid bodies and markers."""

    name: str
    asset_type: int
    id: int
    rigid_bodies: list[RigidBodyDescription] = field(default_factory=list)
    markers: list[MarkerDescription] = field(default_factory=list)


@dataclass
class ForcePlateDescription:
    """A force plate as Motive describes it (kept, not used by the driver)."""

    id: int
    serial: str
    width: float = 0.0
    length: float = 0.0
    origin: NDArray[Any] = field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    calibration: NDArray[Any] = field(default_factory=lambda: np.zeros((12, 12), dtype=np.float32))
    corners: NDArray[Any] = field(default_factory=lambda: np.zeros((4, 3), dtype=np.float32))
    plate_type: int = 0
    channel_data_type: int = 0
    channel_names: tuple[str, ...] = ()


@dataclass
class DeviceDescription:
    """A peripheral device as Motive describes it (kept, not used by the driver)."""

    id: int
    name: str
    serial: str = ""
    device_type: int = 0
    channel_data_type: int = 0
    channel_names: tuple[str, ...] = ()


@dataclass
class CameraDescription:
    """A camera and its pose (kept, not used by the driver)."""

    name: str
    position: NDArray[Any] = field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    orientation: NDArray[Any] = field(default_factory=lambda: np.array([0, 0, 0, 1], dtype=np.float32))


@dataclass
class ModelDefinitions:
    """A NAT_MODELDEF, by dataset type (each list in the order the server sent it)."""

    marker_sets: list[MarkerSetDescription] = field(default_factory=list)
    rigid_bodies: list[RigidBodyDescription] = field(default_factory=list)
    skeletons: list[SkeletonDescription] = field(default_factory=list)
    force_plates: list[ForcePlateDescription] = field(default_factory=list)
    devices: list[DeviceDescription] = field(default_factory=list)
    cameras: list[CameraDescription] = field(default_factory=list)
    assets: list[AssetDescription] = field(default_factory=list)
    # decoded: the descriptions read past by their size (4.5 anchor markers, unknown types)
    skipped: list[Skipped] = field(default_factory=list)
    # encoded after the others (the stand-in's anchor markers, a "future Motive"'s types)
    opaque: list[Opaque] = field(default_factory=list)


_IDENTITY = np.array([0, 0, 0, 1], dtype=np.float32)
_IDENTITY.flags.writeable = False


def _read_rigid_body_description(r: _Reader, version: Version) -> RigidBodyDescription:
    name = r.string("rigid body name")
    body_id = r.int32("rigid body id")
    parent = r.int32("rigid body parent id")
    offset = r.floats(3, "rigid body offset")
    orientation = r.floats(4, "rigid body orientation") if version.description_orientation else _IDENTITY
    n = r.count("rigid body marker", 16 + (1 if version.rigid_body_marker_names else 0))
    positions = r.floats(3 * n, "rigid body marker positions").reshape(n, 3)
    labels = np.frombuffer(r.buf, dtype=_I4, count=n, offset=r.need(4 * n, "rigid body marker labels"))
    if version.rigid_body_marker_names:
        names = tuple(r.string("rigid body marker name") for _ in range(n))
    else:
        names = ("",) * n
    return RigidBodyDescription(name, body_id, parent, offset, orientation, positions, labels, names)


def _write_rigid_body_description(w: _Writer, body: RigidBodyDescription, version: Version) -> None:
    w.string(body.name)
    w.int32(body.id)
    w.int32(body.parent_id)
    w.floats(body.offset, 3, f"rigid body {body.name!r} offset")
    if version.description_orientation:
        w.floats(body.orientation, 4, f"rigid body {body.name!r} orientation")
    positions = np.asarray(body.marker_positions, dtype="<f4").reshape(-1, 3)
    n = positions.shape[0]
    w.int32(n)
    w.raw(positions.tobytes())
    labels = np.asarray(body.marker_labels, dtype="<i4").reshape(-1)
    if labels.shape[0] != n:
        raise NatNetProtocolError(
            f"rigid body {body.name!r}: {labels.shape[0]} marker labels for {n} markers"
        )
    w.raw(labels.tobytes())
    if version.rigid_body_marker_names:
        names = tuple(body.marker_names) or ("",) * n
        if len(names) != n:
            raise NatNetProtocolError(f"rigid body {body.name!r}: {len(names)} marker names for {n} markers")
        for name in names:
            w.string(name)


def _read_marker_set_description(r: _Reader, version: Version) -> MarkerSetDescription:
    name = r.string("marker set name")
    n = r.count("marker set marker", 1)
    return MarkerSetDescription(name, tuple(r.string("marker name") for _ in range(n)))


def _read_skeleton_description(r: _Reader, version: Version) -> SkeletonDescription:
    name = r.string("skeleton name")
    skeleton_id = r.int32("skeleton id")
    n = r.count("skeleton bone", 25 + (16 if version.description_orientation else 0))
    return SkeletonDescription(
        name, skeleton_id, [_read_rigid_body_description(r, version) for _ in range(n)]
    )


def _read_force_plate_description(r: _Reader, version: Version) -> ForcePlateDescription:
    plate_id = r.int32("force plate id")
    serial = r.string("force plate serial")
    width, length = (float(v) for v in r.floats(2, "force plate size"))
    origin = r.floats(3, "force plate origin")
    calibration = r.floats(144, "force plate calibration").reshape(12, 12)
    corners = r.floats(12, "force plate corners").reshape(4, 3)
    plate_type = r.int32("force plate type")
    data_type = r.int32("force plate channel data type")
    n = r.count("force plate channel", 1)
    names = tuple(r.string("force plate channel name") for _ in range(n))
    return ForcePlateDescription(
        plate_id, serial, width, length, origin, calibration, corners, plate_type, data_type, names
    )


def _read_device_description(r: _Reader, version: Version) -> DeviceDescription:
    device_id = r.int32("device id")
    name = r.string("device name")
    serial = r.string("device serial")
    device_type = r.int32("device type")
    data_type = r.int32("device channel data type")
    n = r.count("device channel", 1)
    return DeviceDescription(
        device_id,
        name,
        serial,
        device_type,
        data_type,
        tuple(r.string("device channel name") for _ in range(n)),
    )


def _read_camera_description(r: _Reader, version: Version) -> CameraDescription:
    name = r.string("camera name")
    return CameraDescription(name, r.floats(3, "camera position"), r.floats(4, "camera orientation"))


_MARKER_DESCRIPTION = struct.Struct("<i3ffh")


def _read_asset_description(r: _Reader, version: Version) -> AssetDescription:
    name = r.string("asset name")
    asset_type = r.int32("asset type")
    asset_id = r.int32("asset id")
    n = r.count("asset rigid body", 25 + (16 if version.description_orientation else 0))
    bodies = [_read_rigid_body_description(r, version) for _ in range(n)]
    m = r.count("asset marker", 1 + _MARKER_DESCRIPTION.size)
    markers = []
    for _ in range(m):
        marker_name = r.string("asset marker name")
        mid, x, y, z, size, params = _MARKER_DESCRIPTION.unpack_from(
            r.buf, r.need(_MARKER_DESCRIPTION.size, "asset marker")
        )
        markers.append(
            MarkerDescription(marker_name, mid, np.array([x, y, z], dtype=np.float32), size, params)
        )
    return AssetDescription(name, asset_type, asset_id, bodies, markers)


# dataset type -> (the ModelDefinitions list it goes to, its reader)
_DESCRIPTION_READERS: dict[int, tuple[str, Callable[[_Reader, Version], object]]] = {
    DescriptorType.MARKER_SET: ("marker_sets", _read_marker_set_description),
    DescriptorType.RIGID_BODY: ("rigid_bodies", _read_rigid_body_description),
    DescriptorType.SKELETON: ("skeletons", _read_skeleton_description),
    DescriptorType.FORCE_PLATE: ("force_plates", _read_force_plate_description),
    DescriptorType.DEVICE: ("devices", _read_device_description),
    DescriptorType.CAMERA: ("cameras", _read_camera_description),
    DescriptorType.ASSET: ("assets", _read_asset_description),
}


def decode_model_definitions(payload: bytes, version: Version) -> ModelDefinitions:
    """Decode a NAT_MODELDEF payload of bitstream ``version``.

    From 4.1 every description is sized: one of a type we do not read (4.5's anchor
    markers, or a type no known version has) is skipped by its size and listed in
    ``skipped``; one whose content does not end where its size says refuses the packet."""
    version = require_supported(version)
    r = _Reader(bytes(payload))
    defs = ModelDefinitions()
    n = r.count("dataset", 8 if version.byte_counts else 4)
    for i in range(n):
        kind = r.int32("dataset type")
        end = r.byte_count(f"dataset {i}") if version.byte_counts else None
        entry = _DESCRIPTION_READERS.get(kind)
        if entry is None:
            if end is None:  # without a byte count an unknown dataset cannot be skipped
                raise r.fail(f"unknown dataset type {kind} in model definitions")
            known = kind == ANCHOR_MARKER_DESCRIPTION and version.imu_gpio
            name = "anchor_marker" if known else f"description type {kind}"
            defs.skipped.append(Skipped(name, 1, end - r.pos, known))
            r.pos = end
            continue
        attribute, reader = entry
        if end is not None:
            sub = _Reader(r.buf, r.pos, end)
            getattr(defs, attribute).append(reader(sub, version))
            sub.check_end(end, f"dataset {i} ({DescriptorType(kind).name.lower()})")
            r.pos = end
        else:
            getattr(defs, attribute).append(reader(r, version))
    return defs


def encode_model_definitions(defs: ModelDefinitions, version: Version) -> bytes:
    """A NAT_MODELDEF datagram of bitstream ``version``."""
    version = require_supported(version)
    datasets: list[tuple[int, bytes]] = []
    for ms in defs.marker_sets:
        w = _Writer()
        w.string(ms.name)
        w.int32(len(ms.marker_names))
        for name in ms.marker_names:
            w.string(name)
        datasets.append((DescriptorType.MARKER_SET, w.bytes()))
    for body in defs.rigid_bodies:
        w = _Writer()
        _write_rigid_body_description(w, body, version)
        datasets.append((DescriptorType.RIGID_BODY, w.bytes()))
    for skeleton in defs.skeletons:
        w = _Writer()
        w.string(skeleton.name)
        w.int32(skeleton.id)
        w.int32(len(skeleton.bones))
        for bone in skeleton.bones:
            _write_rigid_body_description(w, bone, version)
        datasets.append((DescriptorType.SKELETON, w.bytes()))
    for plate in defs.force_plates:
        w = _Writer()
        w.int32(plate.id)
        w.string(plate.serial)
        w.floats([plate.width, plate.length], 2, "force plate size")
        w.floats(plate.origin, 3, "force plate origin")
        w.floats(plate.calibration, 144, "force plate calibration")
        w.floats(plate.corners, 12, "force plate corners")
        w.int32(plate.plate_type)
        w.int32(plate.channel_data_type)
        w.int32(len(plate.channel_names))
        for name in plate.channel_names:
            w.string(name)
        datasets.append((DescriptorType.FORCE_PLATE, w.bytes()))
    for device in defs.devices:
        w = _Writer()
        w.int32(device.id)
        w.string(device.name)
        w.string(device.serial)
        w.int32(device.device_type)
        w.int32(device.channel_data_type)
        w.int32(len(device.channel_names))
        for name in device.channel_names:
            w.string(name)
        datasets.append((DescriptorType.DEVICE, w.bytes()))
    for camera in defs.cameras:
        w = _Writer()
        w.string(camera.name)
        w.floats(camera.position, 3, "camera position")
        w.floats(camera.orientation, 4, "camera orientation")
        datasets.append((DescriptorType.CAMERA, w.bytes()))
    for asset in defs.assets if version.assets else ():  # assets exist from 4.1 on
        w = _Writer()
        w.string(asset.name)
        w.int32(asset.asset_type)
        w.int32(asset.id)
        w.int32(len(asset.rigid_bodies))
        for body in asset.rigid_bodies:
            _write_rigid_body_description(w, body, version)
        w.int32(len(asset.markers))
        for marker in asset.markers:
            w.string(marker.name)
            x, y, z = (float(v) for v in np.asarray(marker.position).reshape(3))
            w.raw(_MARKER_DESCRIPTION.pack(marker.id, x, y, z, float(marker.size), int(marker.params)))
        datasets.append((DescriptorType.ASSET, w.bytes()))
    if defs.opaque and not version.byte_counts:
        raise NatNetProtocolError(f"bitstream {version} has no sized descriptions to carry opaque ones")
    datasets.extend((item.kind, item.data) for item in defs.opaque)
    out = [_I32.pack(len(datasets))]
    for kind, data in datasets:
        out.append(_I32.pack(int(kind)))
        if version.byte_counts:
            out.append(_I32.pack(len(data)))
        out.append(data)
    return pack(MessageId.MODELDEF, b"".join(out))


# ---------------------------------------------------------------------------- frame of data
