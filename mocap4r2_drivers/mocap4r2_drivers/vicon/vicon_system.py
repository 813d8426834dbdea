"""vicon_system: Vicon (Nexus, Tracker, Shogun) through the DataStream SDK's Python API.

The adapter only wires the parts together: :mod:`.client` loads the SDK (imported when
the system is configured; a missing SDK makes configure fail with the way to install
it), connects, reconnects and runs the SDK thread; :mod:`.convert` turns the SDK's
frames into MocapFrames. ServerPush by default (the server sends every frame as soon as
it is ready), or ClientPull / ClientPullPreFetch. The stamp is arrival minus
``GetLatencyTotal()``; the axis mapping is a parameter (Vicon's default,
forward/left/up, is ROS's Z-up).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mocap4r2_control.adapter import AdapterError, ConfigurationError, MocapAdapter
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system

from ..common import status_fields
from .client import STREAM_MODES, ClientSettings, ViconClient, load_sdk
from .convert import FrameConverter

DIRECTIONS = {
    "forward": (1, 0, 0),
    "backward": (-1, 0, 0),
    "left": (0, 1, 0),
    "right": (0, -1, 0),
    "up": (0, 0, 1),
    "down": (0, 0, -1),
}


def _check_axes(value: list) -> str | None:
    if len(value) != 3 or any(v not in DIRECTIONS for v in value):
        return f"axis_mapping needs three of {sorted(DIRECTIONS)} for x, y, z, got {value}"
    x, y, z = (np.array(DIRECTIONS[v]) for v in value)
    if abs(np.dot(x, y)) or abs(np.dot(x, z)) or abs(np.dot(y, z)):
        return f"axis_mapping {value}: the axes must be at right angles (the SDK's CoLinearAxes)"
    if not np.array_equal(np.cross(x, y), z):
        return f"axis_mapping {value}: the axes must be right handed (the SDK's LeftHandedAxes)"
    return None


class ViconAdapter(MocapAdapter):
    """Vicon through the DataStream SDK: the SDK thread reads, the converter builds frames."""

    system_type = "vicon"
    parameters = (
        ParameterSpec("host", "127.0.0.1", "Address of the computer running Nexus, Tracker or Shogun."),
        ParameterSpec("port", 801, "DataStream server port (801 by default).", min_value=1, max_value=65535),
        ParameterSpec(
            "stream_mode",
            "server_push",
            "server_push (lowest latency, every frame), client_pull or client_pull_prefetch.",
            choices=tuple(STREAM_MODES),
        ),
        ParameterSpec(
            "axis_mapping",
            ["forward", "left", "up"],
            "Directions of the x, y, z axes (SetAxisMapping); "
            "forward/left/up is Vicon's default and ROS's Z-up.",
            check=_check_axes,
        ),
        ParameterSpec("labeled_markers", True, "Stream the subjects' labeled markers (EnableMarkerData)."),
        ParameterSpec("unlabeled_markers", True, "Stream unlabeled markers (EnableUnlabeledMarkerData)."),
        ParameterSpec("segments_as_skeletons", True, "Also publish multi-segment subjects as skeletons."),
        ParameterSpec(
            "buffer_size", 1, "Frames the SDK buffers (SetBufferSize).", min_value=1, max_value=1000
        ),
        ParameterSpec(
            "connect_timeout",
            5.0,
            "Seconds to wait for the server (the SDK's SetConnectionTimeout) and for its first frame.",
            min_value=0.1,
            max_value=120.0,
        ),
        ParameterSpec(
            "reconnect_period",
            1.0,
            "Seconds between reconnection attempts when the server goes "
            "away; 0: do not reconnect (reading then fails).",
            min_value=0.0,
            max_value=60.0,
        ),
    )

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 801,
        stream_mode: str = "server_push",
        axis_mapping: Sequence[str] = ("forward", "left", "up"),
        labeled_markers: bool = True,
        unlabeled_markers: bool = True,
        segments_as_skeletons: bool = True,
        buffer_size: int = 1,
        connect_timeout: float = 5.0,
        reconnect_period: float = 1.0,
    ):
        """Each argument is the parameter of its name; ConfigurationError for an axis
        mapping that is no right-handed frame."""
        problem = _check_axes(list(axis_mapping))
        if problem:
            raise ConfigurationError(problem)
        self.settings = ClientSettings(
            host=str(host),
            port=int(port),
            stream_mode=stream_mode,
            axis_mapping=(axis_mapping[0], axis_mapping[1], axis_mapping[2]),  # three: checked above
            labeled=bool(labeled_markers),
            unlabeled=bool(unlabeled_markers),
            buffer_size=int(buffer_size),
            connect_timeout=float(connect_timeout),
            reconnect_period=float(reconnect_period),
        )
        self.skeletons = bool(segments_as_skeletons)
        self.sdk_client: ViconClient | None = None
        self.converter: FrameConverter | None = None  # the SDK's frames to MocapFrames, in the SDK thread
        self._last_client: ViconClient | None = None  # kept after disconnect for its counters

    @property
    def address(self) -> str:
        return self.settings.address

    @property
    def counts(self) -> dict[str, int]:
        client = self.sdk_client or self._last_client
        return client.counts if client is not None else {}

    def connect(self) -> AssetNames:
        sdk = load_sdk()
        converter = self.converter = FrameConverter(
            sdk.DataStreamException, self.settings.labeled, self.settings.unlabeled, self.skeletons
        )
        client = self.sdk_client = self._last_client = ViconClient(sdk, self.settings, converter.convert)
        client.on_reconnect = converter.reset
        client.open()
        try:
            frame = converter.convert(client.client)
        except sdk.DataStreamException as exc:
            raise AdapterError(
                f"DataStream server at {self.address}: reading the first frame: "
                f"{getattr(exc, 'message', exc)}"
            ) from exc
        if frame is None:  # the converter has seen no frame before: it never says "already seen" here
            raise AdapterError(f"DataStream server at {self.address}: no first frame")
        return AssetNames(
            rigid_bodies=frame.bodies.names,
            markers=tuple(n for n in frame.markers.names if n),
            skeletons=frame.skeletons.names,
        )

    @property
    def nominal_rate(self) -> float:
        return self.sdk_client.frame_rate if self.sdk_client is not None else 0.0

    def start_streaming(self) -> None:
        if self.sdk_client is None:
            raise AdapterError("not connected")
        self.sdk_client.start()

    def stop_streaming(self) -> None:
        if self.sdk_client is not None:
            self.sdk_client.stop()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        if self.sdk_client is None:
            raise AdapterError("not connected")
        return self.sdk_client.get(timeout)

    def disconnect(self) -> None:
        client, self.sdk_client = self.sdk_client, None
        if client is not None:
            client.close()

    def status(self) -> dict[str, str]:
        client = self.sdk_client or self._last_client
        always: dict[str, object] = {
            "server": self.address,
            "stream_mode": self.settings.stream_mode,
            "connected": client is not None and client.connected,
        }
        if client is None:
            return status_fields(always)
        # the SDK client keeps its own counters (no ClientStats: the SDK does the transport)
        return status_fields(
            {**always, **client.counts},
            when_set={"last_error": client.last_error, "lost_connection": client.lost_because},
        )


def main(args: list[str] | None = None) -> int:
    """The vicon_system executable: the adapter under MocapSystemNode until shutdown."""
    return run_system(ViconAdapter, "vicon_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
