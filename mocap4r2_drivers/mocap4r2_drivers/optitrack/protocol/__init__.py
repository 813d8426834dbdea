"""OptiTrack NatNet wire protocol, bitstream 3.0, 3.1 and 4.0 to 4.5, and newer ones read
with the 4.5 layout (pure Python + numpy).

Split by concern: :mod:`.wire` (framing, versions, records, bounded reader/writer),
:mod:`.messages` (connect, server info, requests), :mod:`.models` (model definitions)
and :mod:`.frames` (frames of data). Everything public is importable from here.

Every NatNet message is a UDP datagram: ``uint16 message id, uint16 payload size`` then
the payload, little endian. This module encodes and decodes the messages a streaming
client and a Motive-like server exchange: NAT_CONNECT / NAT_SERVERINFO, NAT_REQUEST /
NAT_RESPONSE, NAT_REQUEST_MODELDEF / NAT_MODELDEF and NAT_FRAMEOFDATA.

Differences between the bitstream versions that matter on the wire:
  * 4.0 adds marker names to rigid body descriptions;
  * 4.1 adds a byte count after every dataset count of a frame (and after every dataset
    type of a model definition), asset data and descriptions, and two precision
    timestamp words before the frame parameters.
  * 4.2 adds a rotational offset (quaternion x, y, z, w) after the offset of every
    rigid-body description (so of skeleton bones and asset rigid bodies too); 4.3 and 4.4
    have no public layout change and are read as 4.2.
  * 4.5 adds IMU and GPIO sections (sized, items not public) after the devices of a
    frame, and anchor-marker descriptions: both are skipped by their size and listed in
    ``skipped``.
3.0 and 3.1 share one layout. Anything sized that no known version has (a description
type, a frame section before the suffix) is skipped by its size, so a newer bitstream is
read with the newest layout.

Decoding is bounded: every count and length is checked against the bytes left before
anything is allocated, so a truncated or garbage packet raises
:class:`NatNetProtocolError` (never IndexError, MemoryError or a numpy error). Arrays of
fixed-size records (rigid bodies, markers, positions) are read with one
``np.frombuffer`` each, as structured records that view the packet without copying.
"""

from __future__ import annotations

from .frames import (
    AnalogData,
    AssetData,
    FrameOfData,
    MarkerSetData,
    SkeletonData,
    decode_frame,
    encode_frame,
    encode_frame_payload,
)
from .messages import (
    ConnectRequest,
    ServerInfo,
    decode_connect,
    decode_server_info,
    decode_string,
    encode_connect,
    encode_empty,
    encode_request,
    encode_response,
    encode_server_info,
)
from .models import (
    AssetDescription,
    CameraDescription,
    DeviceDescription,
    ForcePlateDescription,
    MarkerDescription,
    MarkerSetDescription,
    ModelDefinitions,
    RigidBodyDescription,
    SkeletonDescription,
    decode_model_definitions,
    encode_model_definitions,
)
from .wire import (
    ANCHOR_MARKER_DESCRIPTION,
    DEFAULT_COMMAND_PORT,
    DEFAULT_DATA_PORT,
    DEFAULT_MULTICAST_ADDRESS,
    FRAME_BITSTREAM_CHANGED,
    FRAME_MODELS_CHANGED,
    FRAME_RECORDING,
    MARKER_ACTIVE,
    MARKER_DTYPE,
    MARKER_HAS_MODEL,
    MARKER_MODEL_SOLVED,
    MARKER_OCCLUDED,
    MARKER_POINT_CLOUD_SOLVED,
    MARKER_UNLABELED,
    MAX_PAYLOAD,
    NAME_FIELD,
    NEWEST_VERSION,
    OLDEST_VERSION,
    POSITION_SIZE,
    RIGID_BODY_DTYPE,
    RIGID_BODY_TRACKING_VALID,
    SUPPORTED_VERSIONS,
    DescriptorType,
    MessageId,
    NatNetProtocolError,
    Opaque,
    Skipped,
    Version,
    empty_markers,
    empty_rigid_bodies,
    marker_id,
    pack,
    require_supported,
    split_marker_id,
    unpack,
)

__all__ = [
    "ANCHOR_MARKER_DESCRIPTION",
    "NEWEST_VERSION",
    "OLDEST_VERSION",
    "Opaque",
    "Skipped",
    "AnalogData",
    "AssetData",
    "AssetDescription",
    "CameraDescription",
    "ConnectRequest",
    "DEFAULT_COMMAND_PORT",
    "DEFAULT_DATA_PORT",
    "DEFAULT_MULTICAST_ADDRESS",
    "DescriptorType",
    "DeviceDescription",
    "FRAME_BITSTREAM_CHANGED",
    "FRAME_MODELS_CHANGED",
    "FRAME_RECORDING",
    "ForcePlateDescription",
    "FrameOfData",
    "MARKER_ACTIVE",
    "MARKER_DTYPE",
    "MARKER_HAS_MODEL",
    "MARKER_MODEL_SOLVED",
    "MARKER_OCCLUDED",
    "MARKER_POINT_CLOUD_SOLVED",
    "MARKER_UNLABELED",
    "MAX_PAYLOAD",
    "MarkerDescription",
    "MarkerSetData",
    "MarkerSetDescription",
    "MessageId",
    "ModelDefinitions",
    "NAME_FIELD",
    "NatNetProtocolError",
    "POSITION_SIZE",
    "RIGID_BODY_DTYPE",
    "RIGID_BODY_TRACKING_VALID",
    "RigidBodyDescription",
    "SUPPORTED_VERSIONS",
    "ServerInfo",
    "SkeletonData",
    "SkeletonDescription",
    "Version",
    "decode_connect",
    "decode_frame",
    "decode_model_definitions",
    "decode_server_info",
    "decode_string",
    "empty_markers",
    "empty_rigid_bodies",
    "encode_connect",
    "encode_empty",
    "encode_frame",
    "encode_frame_payload",
    "encode_model_definitions",
    "encode_request",
    "encode_response",
    "encode_server_info",
    "marker_id",
    "pack",
    "require_supported",
    "split_marker_id",
    "unpack",
]
