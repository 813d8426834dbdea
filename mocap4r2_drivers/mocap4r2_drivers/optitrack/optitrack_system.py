"""optitrack_system: OptiTrack Motive (NatNet 3.0-4.5, newer read with the 4.5 layout)
behind the mocap4r2 interfaces.

Pure Python (no NatNet SDK binary, so any CPU architecture): the NatNet client of
:mod:`mocap4r2_drivers.optitrack.client` under :class:`MocapSystemNode`. Names come from
Motive's model definitions (asked again when Motive flags a model change), poses are
converted from Motive's Y-up to ROS Z-up unless ``up_axis`` says the stream is Z-up,
and the driver reconnects by itself, logging why no data arrives.
"""

from __future__ import annotations

import logging
import time

from mocap4r2_control.adapter import AdapterError, MocapAdapter
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system

from ..common import ipv4_check, status_fields
from . import protocol as nn
from .client import (
    CONNECTION_TYPES,
    SKELETON_COORDINATES,
    UP_AXES,
    ClientConfig,
    NatNetClient,
    NatNetConnectionError,
)
from .convert import FrameConverter

LOGGER_NAME = "mocap4r2.optitrack"


class OptiTrackAdapter(MocapAdapter):
    """OptiTrack Motive over NatNet: names from its model definitions, reconnects by itself."""

    system_type = "optitrack"
    parameters = (
        ParameterSpec(
            "server_address",
            "127.0.0.1",
            "IPv4 address of the Motive computer (Motive: Streaming > Local Interface).",
            check=ipv4_check("server_address"),
        ),
        ParameterSpec(
            "local_address",
            "auto",
            "IPv4 address of this computer's interface facing Motive; auto: the interface that "
            "routes to server_address.",
            check=ipv4_check("local_address", allow_auto=True),
        ),
        ParameterSpec(
            "connection_type",
            "multicast",
            "multicast or unicast, as Motive's Streaming > Transmission Type (the server's answer "
            "wins, with a warning, when they differ).",
            choices=CONNECTION_TYPES,
        ),
        ParameterSpec(
            "multicast_address",
            nn.DEFAULT_MULTICAST_ADDRESS,
            "Multicast group of the stream (Motive: Streaming > Multicast Interface).",
            check=ipv4_check("multicast_address", multicast=True),
        ),
        ParameterSpec(
            "command_port", nn.DEFAULT_COMMAND_PORT, "Motive's command port.", min_value=1, max_value=65535
        ),
        ParameterSpec("data_port", nn.DEFAULT_DATA_PORT, "Motive's data port.", min_value=1, max_value=65535),
        ParameterSpec(
            "up_axis",
            "y",
            "Up axis of the stream (Motive: Streaming > Up Axis, Y by default). y is converted to "
            "ROS Z-up (REP-103); z is passed through.",
            choices=UP_AXES,
        ),
        ParameterSpec(
            "skeleton_coordinates",
            "global",
            "How Motive streams skeleton bones (Streaming > Skeleton Coordinates): global (world) "
            "or local (relative to the parent bone; the driver composes them).",
            choices=SKELETON_COORDINATES,
        ),
        ParameterSpec(
            "bitstream_version",
            "auto",
            "NatNet bitstream to ask Motive for over unicast (e.g. 4.1); auto: Motive's own. Over "
            "multicast Motive streams its own bitstream whatever a client asks, and this is ignored "
            "(with a warning).",
            choices=("auto", *(str(v) for v in nn.SUPPORTED_VERSIONS)),
        ),
        ParameterSpec(
            "connect_timeout",
            3.0,
            "Seconds configure waits for the server's answers.",
            min_value=0.1,
            max_value=60.0,
        ),
        ParameterSpec(
            "record_on_start",
            False,
            "On a capture session's START, name Motive's take after the session "
            "(SetRecordTakeName) and start recording in Motive; on STOP, stop it.",
        ),
        ParameterSpec(
            "reconnect_after",
            1.0,
            "Seconds without frames after which the driver asks the server again and logs why "
            "no data arrives.",
            min_value=0.1,
            max_value=60.0,
        ),
    )

    def __init__(
        self,
        *,
        server_address: str = "127.0.0.1",
        local_address: str = "auto",
        connection_type: str = "multicast",
        multicast_address: str = nn.DEFAULT_MULTICAST_ADDRESS,
        command_port: int = nn.DEFAULT_COMMAND_PORT,
        data_port: int = nn.DEFAULT_DATA_PORT,
        up_axis: str = "y",
        skeleton_coordinates: str = "global",
        connect_timeout: float = 3.0,
        record_on_start: bool = False,
        reconnect_after: float = 1.0,
        bitstream_version: str = "auto",
    ):
        """Keyword-only, one per parameter (see ``parameters``); ValueError naming the
        first value that cannot be used."""
        self.config = ClientConfig(
            server_address=server_address,
            local_address=local_address,
            connection_type=connection_type,
            multicast_address=multicast_address,
            command_port=int(command_port),
            data_port=int(data_port),
            up_axis=up_axis,
            skeleton_coordinates=skeleton_coordinates,
            reconnect_after=float(reconnect_after),
            bitstream_version=str(bitstream_version),
        )
        self.config.check()
        self.connect_timeout = float(connect_timeout)
        self.record_on_start = bool(record_on_start)
        self.recording_take = ""  # the take Motive records for the current session, if any
        self.client: NatNetClient | None = None
        # frames to MocapFrames; the client keeps its model definitions and clock current
        self.converter = FrameConverter(self.config.up_axis, self.config.skeleton_coordinates)
        self.conversion_errors = 0
        self.log = logging.getLogger(LOGGER_NAME)

    def connect(self) -> AssetNames:
        self.disconnect()
        self.converter = FrameConverter(self.config.up_axis, self.config.skeleton_coordinates)
        client = NatNetClient(self.config, self.log, self.converter)
        try:
            client.connect(self.connect_timeout)
        except NatNetConnectionError as exc:
            client.close()
            raise AdapterError(str(exc)) from exc
        self.client = client
        return self.converter.index.asset_names()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        client = self.client
        if client is None:
            raise AdapterError("not connected")
        frame = client.read(timeout)
        if frame is None:
            return None
        try:
            converted = self.converter.convert(frame)
            # the time since the datagram reached this host (decoding, earlier frames of a
            # burst) is the driver's, not the network's: latency too
            converted.latency += max(time.time() - client.transport.received_at, 0.0)
            return converted
        except (ValueError, IndexError) as exc:  # a decodable but inconsistent frame
            self.conversion_errors += 1
            if self.conversion_errors == 1:
                self.log.error(f"dropped NatNet frame {frame.frame_number} that cannot be converted: {exc}")
            return None

    def session_started(self, session_id: str) -> str:
        if not self.record_on_start:
            return ""
        if self.recording_take:
            if self.recording_take == session_id:
                return f"Motive is recording take {session_id!r}"
            self._motive("StopRecording")
            self.recording_take = ""
        self._motive(f"SetRecordTakeName,{session_id}")
        self._motive("StartRecording")
        self.recording_take = session_id
        return f"Motive is recording take {session_id!r}"

    def session_stopped(self, session_id: str) -> str:
        if not self.recording_take:
            return ""
        take, self.recording_take = self.recording_take, ""
        self._motive("StopRecording")
        return f"Motive stopped recording take {take!r}"

    def _motive(self, command: str) -> None:
        """Send a command to Motive while streaming; AdapterError with Motive's answer
        unless it answers 0 (done)."""
        if self.client is None:
            raise AdapterError(f"cannot send {command} to Motive: not connected")
        answer = self.client.request_while_streaming(command, timeout=self.connect_timeout)
        if answer is None:
            raise AdapterError(f"Motive did not accept {command} (no answer, or an unrecognized request)")
        if answer != 0:
            raise AdapterError(f"Motive answered {answer!r} to {command}")

    def disconnect(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    @property
    def nominal_rate(self) -> float:
        return self.client.frame_rate if self.client is not None else 0.0

    def status(self) -> dict[str, str]:
        client = self.client
        if client is None:
            return {"server": f"{self.config.server_address}:{self.config.command_port} (not connected)"}
        info = client.server_info
        stats = client.stats
        dialog = client.dialog
        skipped = {
            f"skipped_{name.replace(' ', '_')}": f"{count.times} (last {count.last_size} bytes)"
            for name, count in client.housekeeping.skipped_parts.items()
        }
        return status_fields(
            {
                "server": f"{self.config.server_address}:{self.config.command_port}",
                "natnet_version": str(client.version) if client.version else "unknown",
                "bitstream_requested": (
                    self.config.bitstream_version
                    if not client.multicast
                    else f"{self.config.bitstream_version} (multicast: Motive decides)"
                ),
                "connection": (
                    f"multicast {client.multicast_address}:{client.data_port} via {client.local_address}"
                    if client.multicast
                    else f"unicast via {client.local_address}"
                ),
                "frames_received": stats.frames,
                "decode_errors": stats.decode_errors,
                "model_updates": stats.model_updates,
                "reconnects": stats.reconnects,
                "foreign_packets": stats.foreign_packets,
            },
            stats,
            when_set={
                "duplicate_frames": client.duplicates,
                "server_application": (
                    f"{info.app_name} {'.'.join(map(str, info.app_version))}" if info is not None else ""
                ),
                "conversion_errors": self.conversion_errors,
                "bitstream_changes": ", ".join(dialog.changes),
                **skipped,
            },
        )


def main(args: list[str] | None = None) -> int:
    """The optitrack_system executable: the adapter under MocapSystemNode until shutdown."""
    # the NatNet client logs under "mocap4r2.optitrack": MocapSystemNode forwards it
    return run_system(OptiTrackAdapter, "optitrack_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
