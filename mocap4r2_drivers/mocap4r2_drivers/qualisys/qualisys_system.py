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
with numpy straight from the packet bytes (:mod:`.protocol`, :mod:`.convert`), which costs a few
microseconds per component where building qtm-rt's per-marker tuples costs far more.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence

from mocap4r2_control.adapter import AdapterError, ConfigurationError, MocapAdapter
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system

from ..common import ClientStats, reject_input, status_fields
from . import protocol as qp
from .client import DISCONNECTED, STREAMABLE, QtmClient, QtmConnectionError, QtmParameters, TimestampMapper
from .convert import FrameConverter

LOG = logging.getLogger("mocap4r2.qualisys")

DEFAULT_COMPONENTS = ["6dres", "3dres", "3dnolabelsres", "skeleton:global"]
_FAMILIES = {
    "6d": "6d",
    "6dres": "6d",
    "3d": "3d",
    "3dres": "3d",
    "3dnolabels": "3dnolabels",
    "3dnolabelsres": "3dnolabels",
    "skeleton:global": "skeleton",
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


class QualisysAdapter(MocapAdapter):
    """QTM through qtm-rt: every frame streamed, names from QTM, reconnects by itself."""

    system_type = "qualisys"
    parameters = (
        ParameterSpec("host", "127.0.0.1", "Address of the computer running QTM."),
        ParameterSpec(
            "port",
            22222,
            "QTM's base port (QTM: Project options > Real-Time output); the driver "
            "talks to the little-endian port, base + 1 (22223 by default).",
            min_value=1,
            max_value=65534,
        ),
        ParameterSpec(
            "protocol_version", "1.25", "QTM RT protocol version to ask QTM for.", check=_check_version
        ),
        ParameterSpec(
            "components",
            list(DEFAULT_COMPONENTS),
            "Data components to stream: one of 6d/6dres (bodies), 3d/3dres (labeled markers), "
            "3dnolabels/3dnolabelsres (unlabeled markers), skeleton:global.",
            check=_check_components,
        ),
        ParameterSpec(
            "take_control",
            False,
            "Take control of QTM (TakeControl) while connected; needed only "
            "if other clients must not change QTM's settings during a session.",
        ),
        ParameterSpec("password", "", "Password for TakeControl, when QTM asks for one."),
        ParameterSpec(
            "record_on_start",
            False,
            "On a capture session's START, start a capture in QTM (taking control with "
            "password if needed); on STOP, stop it and save it as <session_id>.qtm.",
        ),
        ParameterSpec(
            "connect_timeout", 5.0, "Seconds to wait for QTM's answers.", min_value=0.1, max_value=60.0
        ),
        ParameterSpec(
            "reconnect_period",
            1.0,
            "Seconds between reconnection attempts when QTM goes away; "
            "0: do not reconnect (reading then fails).",
            min_value=0.0,
            max_value=60.0,
        ),
        ParameterSpec(
            "reconnect_after",
            2.0,
            "Seconds without any data from a streaming QTM after which the "
            "driver drops the connection and reconnects (a QTM that keeps the socket open but "
            "sends nothing); 0: never.",
            min_value=0.0,
            max_value=60.0,
        ),
    )

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 22222,
        protocol_version: str = "1.25",
        components: Sequence[str] = DEFAULT_COMPONENTS,
        take_control: bool = False,
        password: str = "",
        connect_timeout: float = 5.0,
        reconnect_period: float = 1.0,
        record_on_start: bool = False,
        reconnect_after: float = 2.0,
    ):
        """Each argument is the parameter of its name; ConfigurationError for components
        or a protocol version the parameters' checks refuse."""
        problem = _check_components(list(components)) or _check_version(protocol_version)
        if problem:
            raise ConfigurationError(problem)
        version, timeout = protocol_version, connect_timeout
        self.record_on_start = record_on_start
        self.capture_session = ""  # the session QTM is capturing for, if any
        self.host = host
        self.port = port
        self.version = version
        self.components = list(components)
        self.take_control = take_control
        self.password = password
        self.timeout = timeout
        self.reconnect_period = reconnect_period
        self.reconnect_after = reconnect_after
        self.client: QtmClient | None = None
        self.converter: FrameConverter | None = None
        self.mapper = TimestampMapper()
        self.decode_errors = 0
        self.last_decode_error = ""
        self.frame_stats = ClientStats()  # frames the converter refused, by kind (logged once each)
        self._lost_reported = False

    def session_started(self, session_id: str) -> str:
        if not self.record_on_start:
            return ""
        if self.capture_session == session_id:
            return f"QTM is capturing for session {session_id!r}"
        if self.client is None:
            raise AdapterError("cannot start a capture in QTM: not connected")
        if self.capture_session:
            self.session_stopped(self.capture_session)
        try:
            self.client.capture.start(self.password)
        except QtmConnectionError as exc:
            raise AdapterError(str(exc)) from exc
        self.capture_session = session_id
        return f"QTM is capturing for session {session_id!r}"

    def session_stopped(self, session_id: str) -> str:
        if not self.capture_session:
            return ""
        filename = f"{self.capture_session}.qtm"
        self.capture_session = ""
        if self.client is None:
            raise AdapterError(f"cannot stop and save {filename} in QTM: not connected")
        try:
            answer = self.client.capture.stop_and_save(filename)
        except QtmConnectionError as exc:
            raise AdapterError(str(exc)) from exc
        return f"QTM: {answer}"

    def _on_parameters(self, parameters: QtmParameters) -> None:
        # runs in the qtm-rt thread; swapping one reference is atomic for the reader
        self.converter = FrameConverter(parameters)

    def connect(self) -> AssetNames:
        self.client = QtmClient(
            self.host,
            self.port + 1,
            self.version,
            self.components,
            password=self.password if self.take_control else None,
            timeout=self.timeout,
            reconnect_period=self.reconnect_period,
            reconnect_after=self.reconnect_after,
            on_parameters=self._on_parameters,
        )
        try:
            self.client.connect()
        except QtmConnectionError as exc:
            raise AdapterError(str(exc)) from exc
        if self.converter is None:  # connect() reads the parameters, which make the converter
            raise AdapterError("QTM sent no parameters")
        return self.converter.asset_names()

    @property
    def nominal_rate(self) -> float:
        return self.converter.parameters.frequency if self.converter is not None else 0.0

    def start_streaming(self) -> None:
        if self.client is None:
            raise AdapterError("not connected")
        try:
            self.client.start_streaming()
        except QtmConnectionError as exc:
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
                raise AdapterError(
                    f"QTM at {self.host}:{self.port + 1} went away ({client.stats.last_error})"
                )
            if not self._lost_reported:
                LOG.warning(
                    "QTM at %s went away; reconnecting every %.1f s", self.host, self.reconnect_period
                )
                self._lost_reported = True
            return None
        if item is None:
            if self.reconnect_period <= 0 and not client.connected:
                raise AdapterError(f"QTM at {self.host}:{self.port + 1} is not connected")
            return None
        self._lost_reported = False
        packet, arrival = item
        converter = self.converter
        if converter is None:  # not before the parameters: connect() waited for them
            return None
        try:
            frame = converter.convert(packet.data)
        except (qp.QtmProtocolError, ValueError) as exc:
            # a frame that cannot be decoded is dropped and counted, the stream goes on
            self.decode_errors += 1
            self.last_decode_error = str(exc)
            reject_input(self.frame_stats, LOG, "undecodable_frame", f"an undecodable QTM frame ({exc})")
            return None
        frame.capture_time = self.mapper.capture_time(packet.timestamp, arrival)
        # QTM's clock for the node's clock model, and the time the packet spent in the
        # driver (qtm-rt, the queue, decoding) as latency: QTM itself reports none
        frame.system_time = packet.timestamp * 1e-6
        frame.latency = max(time.time() - arrival, 0.0)
        return frame

    def disconnect(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def status(self) -> dict[str, str]:
        client = self.client
        always: dict[str, object] = {
            "qtm": f"{self.host}:{self.port + 1}",
            "decode_errors": self.decode_errors,
        }
        if client is not None:
            s = client.stats
            always.update(
                # frames our converter dropped, plus packets dropped before qtm-rt saw them
                decode_errors=self.decode_errors + s.decode_errors,
                qtm_version=client.qtm_version,
                connected=client.connected,
                packets=s.frames,
                packets_dropped_slow_reader=s.dropped,
                reconnects=max(s.connects - 1, 0),
                watchdog_reconnects=client.watchdog_reconnects,
            )
        return status_fields(
            always,
            client.stats if client is not None else None,
            when_set={
                "name_mismatches": self.converter.mismatches if self.converter is not None else 0,
                "last_decode_error": self.last_decode_error,
            },
        )


def main(args: list[str] | None = None) -> int:
    """The qualisys_system executable: the adapter under MocapSystemNode until shutdown."""
    return run_system(QualisysAdapter, "qualisys_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
