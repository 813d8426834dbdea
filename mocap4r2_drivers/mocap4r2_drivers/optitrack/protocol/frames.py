"""NatNet frames of data (NAT_FRAMEOFDATA): decoding into numpy record views, and
encoding (for the stand-in)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .wire import (
    _COUNT_AND_SIZE,
    _I32,
    _PRECISION,
    _SUFFIX_3,
    _U16,
    FRAME_MODELS_CHANGED,
    FRAME_RECORDING,
    MARKER_DTYPE,
    POSITION_SIZE,
    RIGID_BODY_DTYPE,
    MessageId,
    NatNetProtocolError,
    Opaque,
    Skipped,
    Version,
    _Reader,
    _records,
    _Writer,
    empty_markers,
    empty_rigid_bodies,
    pack,
    require_supported,
)


@dataclass
class MarkerSetData:
    """The positions of one marker set in a frame."""

    name: str
    positions: NDArray[Any]  # (n, 3) float32


@dataclass
class SkeletonData:
    """The bones of one skeleton in a frame (rigid-body records)."""

    id: int
    bones: NDArray[Any]  # RIGID_BODY_DTYPE records; bone id = skeleton id << 16 | bone id


@dataclass
class AssetData:
    """The rigid bodies and markers of one asset (NatNet 4.1 trained markersets) in a frame."""

    id: int
    rigid_bodies: NDArray[Any]  # RIGID_BODY_DTYPE
    markers: NDArray[Any]  # MARKER_DTYPE


@dataclass
class AnalogData:
    """A force plate or device: one float32 array (its subframes) per channel."""

    id: int
    channels: list[NDArray[Any]] = field(default_factory=list)


def _zeros3() -> NDArray[Any]:
    return np.zeros((0, 3), dtype=np.float32)


@dataclass
class FrameOfData:
    """A NAT_FRAMEOFDATA. Record arrays view the packet (read-only) after decoding."""

    frame_number: int
    marker_sets: list[MarkerSetData] = field(default_factory=list)
    other_markers: NDArray[Any] = field(default_factory=_zeros3)  # legacy unlabeled positions
    rigid_bodies: NDArray[Any] = field(default_factory=empty_rigid_bodies)
    skeletons: list[SkeletonData] = field(default_factory=list)
    assets: list[AssetData] = field(default_factory=list)  # 4.1+
    labeled_markers: NDArray[Any] = field(default_factory=empty_markers)  # every marker, labeled or not
    force_plates: list[AnalogData] = field(default_factory=list)
    devices: list[AnalogData] = field(default_factory=list)
    timecode: int = 0
    timecode_subframe: int = 0
    timestamp: float = 0.0  # seconds since the server started (software clock)
    stamp_camera_mid_exposure: int = 0  # server clock ticks (ServerInfo.clock_frequency)
    stamp_data_received: int = 0
    stamp_transmit: int = 0
    precision_timestamp_secs: int = 0  # 4.1+, 0 when the server has no precision (PTP) clock
    precision_timestamp_frac_secs: int = 0
    params: int = 0
    # decoded: the sized sections read past (4.5 IMU and GPIO, sections no known version has)
    skipped: tuple[Skipped, ...] = ()
    # encoded: 4.5's IMU and GPIO sections (opaque: their items are not public), then
    # sections no known version has (a "future Motive" of the stand-in's tests)
    imu: Opaque | None = None
    gpio: Opaque | None = None
    extra_sections: list[Opaque] = field(default_factory=list)

    @property
    def is_recording(self) -> bool:
        return bool(self.params & FRAME_RECORDING)

    @property
    def tracked_models_changed(self) -> bool:
        return bool(self.params & FRAME_MODELS_CHANGED)


def _read_analog(r: _Reader, what: str, counts: bool) -> list[AnalogData]:
    n = r.count(what, 8)
    end = r.byte_count(f"{what}s") if counts else None
    out = []
    for _ in range(n):
        item_id = r.int32(f"{what} id")
        channels = r.count(f"{what} channel", 4)
        values = []
        for _ in range(channels):
            frames = r.count(f"{what} channel frame", 4)
            values.append(r.floats(frames, f"{what} channel values"))
        out.append(AnalogData(item_id, values))
    r.check_end(end, f"{what}s")
    return out


def decode_frame(payload: bytes, version: Version) -> FrameOfData:
    """Decode a NAT_FRAMEOFDATA payload of bitstream ``version``."""
    version = require_supported(version)
    r = _Reader(payload if isinstance(payload, bytes) else bytes(payload))
    counts = version.byte_counts
    frame = FrameOfData(frame_number=r.int32("frame number"))

    n = r.count("marker set", 5)
    end = r.byte_count("marker sets") if counts else None
    sets = []
    for _ in range(n):
        name = r.string("marker set name")
        m = r.count("marker set marker", POSITION_SIZE)
        sets.append(MarkerSetData(name, r.floats(3 * m, "marker set positions").reshape(m, 3)))
    frame.marker_sets = sets
    r.check_end(end, "marker sets")

    n = r.count("other marker", POSITION_SIZE)
    end = r.byte_count("other markers") if counts else None
    frame.other_markers = r.floats(3 * n, "other marker positions").reshape(n, 3)
    r.check_end(end, "other markers")

    n = r.count("rigid body", RIGID_BODY_DTYPE.itemsize)
    end = r.byte_count("rigid bodies") if counts else None
    frame.rigid_bodies = r.records(RIGID_BODY_DTYPE, n, "rigid bodies")
    r.check_end(end, "rigid bodies")

    n = r.count("skeleton", 8)
    end = r.byte_count("skeletons") if counts else None
    skeletons = []
    for _ in range(n):
        skeleton_id = r.int32("skeleton id")
        bones = r.count("skeleton bone", RIGID_BODY_DTYPE.itemsize)
        skeletons.append(SkeletonData(skeleton_id, r.records(RIGID_BODY_DTYPE, bones, "skeleton bones")))
    frame.skeletons = skeletons
    r.check_end(end, "skeletons")

    if version.assets:
        n = r.count("asset", 12)
        end = r.byte_count("assets")
        assets = []
        for _ in range(n):
            asset_id = r.int32("asset id")
            bodies = r.count("asset rigid body", RIGID_BODY_DTYPE.itemsize)
            body_records = r.records(RIGID_BODY_DTYPE, bodies, "asset rigid bodies")
            markers = r.count("asset marker", MARKER_DTYPE.itemsize)
            assets.append(
                AssetData(asset_id, body_records, r.records(MARKER_DTYPE, markers, "asset markers"))
            )
        frame.assets = assets
        r.check_end(end, "assets")

    n = r.count("labeled marker", MARKER_DTYPE.itemsize)
    end = r.byte_count("labeled markers") if counts else None
    frame.labeled_markers = r.records(MARKER_DTYPE, n, "labeled markers")
    r.check_end(end, "labeled markers")

    frame.force_plates = _read_analog(r, "force plate", counts)
    frame.devices = _read_analog(r, "device", counts)
    if counts and (version.imu_gpio or r.end - r.pos > SUFFIX_MAX):
        frame.skipped = _skip_sections(r, version)

    (
        frame.timecode,
        frame.timecode_subframe,
        frame.timestamp,
        frame.stamp_camera_mid_exposure,
        frame.stamp_data_received,
        frame.stamp_transmit,
    ) = _SUFFIX_3.unpack_from(r.buf, r.need(_SUFFIX_3.size, "frame suffix"))
    if version.precision_timestamps:
        frame.precision_timestamp_secs, frame.precision_timestamp_frac_secs = _PRECISION.unpack_from(
            r.buf, r.need(_PRECISION.size, "precision timestamp")
        )
    frame.params = r.scalar(_U16, "frame parameters")
    # an end-of-data tag (int32 0) may follow; nothing after the parameters is needed
    return frame


#: the frame suffix of 4.1+: timecode, subframe, timestamp, three clock stamps, precision
#: timestamp, params, then the end-of-data tag Motive sends (4 bytes)
SUFFIX_SIZE = _SUFFIX_3.size + _PRECISION.size + _U16.size
SUFFIX_MAX = SUFFIX_SIZE + 4
#: sized sections after the devices that one frame may hold (4.5 has 2): a bound on the loop
MAX_EXTRA_SECTIONS = 64
_FIRST_EXTRA_SECTION = 9  # sections 1-8: marker sets .. devices; 4.5's IMU and GPIO are 9 and 10


def _skip_section(r: _Reader, name: str, known: bool) -> Skipped:
    """One sized section read past: (count, size) checked against the bytes left, which
    must still hold the frame suffix."""
    pos = r.pos
    if r.end - pos < 8:
        r.need(8, f"{name} count and byte count")
    count, size = _COUNT_AND_SIZE.unpack_from(r.buf, pos)
    pos += 8
    if count < 0 or size < 0 or r.end - pos - size < SUFFIX_SIZE:
        r.pos = pos
        raise r.fail(
            f"{name}: count {count}, byte count {size}: "
            + ("negative" if count < 0 or size < 0 else "leaves no room for the frame suffix")
        )
    r.pos = pos + size
    key = (name, count, size)
    skipped = _SKIPPED.get(key)
    if skipped is None:  # frames repeat their sections' sizes: one tuple for them all
        if len(_SKIPPED) >= _SKIPPED_KEPT:
            _SKIPPED.clear()
        skipped = _SKIPPED[key] = Skipped(name, count, size, known)
    return skipped


_SKIPPED: dict[tuple[str, int, int], Skipped] = {}
_SKIPPED_KEPT = 256


def _skip_sections(r: _Reader, version: Version) -> tuple[Skipped, ...]:
    """The sized sections between the devices and the suffix, read past by their size:
    4.5's IMU and GPIO (always there; their items are not public), then any a newer
    Motive adds. Such a section is recognised by the bytes left: more than the suffix and
    its end tag (a section's count and size alone are 8 bytes, so the two cannot be
    confused)."""
    if version.imu_gpio:
        imu = _skip_section(r, "imu", True)
        gpio = _skip_section(r, "gpio", True)
        if r.end - r.pos <= SUFFIX_MAX:
            return (imu, gpio)
        out = [imu, gpio]
    else:
        out = []
    number = _FIRST_EXTRA_SECTION + len(out)
    while r.end - r.pos > SUFFIX_MAX:
        if len(out) >= MAX_EXTRA_SECTIONS:
            raise r.fail(f"more than {MAX_EXTRA_SECTIONS} sized sections after the devices")
        out.append(_skip_section(r, f"frame section {number}", False))
        number += 1
    return tuple(out)


def _dataset(out: list[bytes], count: int, data: bytes, counts: bool) -> None:
    if counts:
        out.append(_COUNT_AND_SIZE.pack(count, len(data)))
    else:
        out.append(_I32.pack(count))
    out.append(data)


def encode_frame_payload(frame: FrameOfData, version: Version) -> bytes:
    """The NAT_FRAMEOFDATA payload of ``frame`` in bitstream ``version``."""
    version = require_supported(version)
    counts = version.byte_counts
    out = [_I32.pack(int(frame.frame_number))]

    w = _Writer()
    for ms in frame.marker_sets:
        positions = np.asarray(ms.positions, dtype="<f4").reshape(-1, 3)
        w.string(ms.name)
        w.int32(positions.shape[0])
        w.raw(positions.tobytes())
    _dataset(out, len(frame.marker_sets), w.bytes(), counts)

    other = np.asarray(frame.other_markers, dtype="<f4").reshape(-1, 3)
    _dataset(out, other.shape[0], other.tobytes(), counts)

    bodies = _records(frame.rigid_bodies, RIGID_BODY_DTYPE, "rigid bodies")
    _dataset(out, bodies.shape[0], bodies.tobytes(), counts)

    w = _Writer()
    for skeleton in frame.skeletons:
        bones = _records(skeleton.bones, RIGID_BODY_DTYPE, "skeleton bones")
        w.int32(skeleton.id)
        w.int32(bones.shape[0])
        w.raw(bones.tobytes())
    _dataset(out, len(frame.skeletons), w.bytes(), counts)

    if version.assets:
        w = _Writer()
        for asset in frame.assets:
            asset_bodies = _records(asset.rigid_bodies, RIGID_BODY_DTYPE, "asset rigid bodies")
            asset_markers = _records(asset.markers, MARKER_DTYPE, "asset markers")
            w.int32(asset.id)
            w.int32(asset_bodies.shape[0])
            w.raw(asset_bodies.tobytes())
            w.int32(asset_markers.shape[0])
            w.raw(asset_markers.tobytes())
        _dataset(out, len(frame.assets), w.bytes(), counts)

    markers = _records(frame.labeled_markers, MARKER_DTYPE, "labeled markers")
    _dataset(out, markers.shape[0], markers.tobytes(), counts)

    for items in (frame.force_plates, frame.devices):
        w = _Writer()
        for item in items:
            w.int32(item.id)
            w.int32(len(item.channels))
            for channel in item.channels:
                values = np.asarray(channel, dtype="<f4").reshape(-1)
                w.int32(values.shape[0])
                w.raw(values.tobytes())
        _dataset(out, len(items), w.bytes(), counts)

    if version.imu_gpio:
        for section in (frame.imu, frame.gpio):
            if section is None:
                _dataset(out, 0, b"", counts)
            else:
                _dataset(out, section.count, section.data, counts)
    if frame.extra_sections:
        if not counts:
            raise NatNetProtocolError(f"bitstream {version} has no sized sections to carry extra ones")
        for section in frame.extra_sections:
            _dataset(out, section.count, section.data, counts)

    out.append(
        _SUFFIX_3.pack(
            int(frame.timecode),
            int(frame.timecode_subframe),
            float(frame.timestamp),
            int(frame.stamp_camera_mid_exposure),
            int(frame.stamp_data_received),
            int(frame.stamp_transmit),
        )
    )
    if version.precision_timestamps:
        out.append(
            _PRECISION.pack(int(frame.precision_timestamp_secs), int(frame.precision_timestamp_frac_secs))
        )
    out.append(_U16.pack(int(frame.params) & 0xFFFF))
    out.append(_I32.pack(0))  # end-of-data tag, as Motive sends it
    return b"".join(out)


def encode_frame(frame: FrameOfData, version: Version) -> bytes:
    """A NAT_FRAMEOFDATA datagram."""
    return pack(MessageId.FRAMEOFDATA, encode_frame_payload(frame, version))
