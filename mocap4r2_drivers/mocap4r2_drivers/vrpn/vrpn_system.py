"""vrpn_system: the trackers of any VRPN server (Vicon Tracker, OptiTrack Motive,
PhaseSpace, ART DTrack, NOKOV, vrpn_server, ...) as rigid bodies, in pure Python.

configure connects (by vrpn's UDP connection request, or ``tcp://`` directly with
``connection: tcp``) and reads the senders the server announces; the reader thread
then waits on the sockets and publishes each frame the moment its reports have
arrived (:mod:`.convert` says how reports form frames), never on a timer. The frame's
``system_time`` is the VRPN message time, the server's clock, which the node maps to
the host clock. A lost or broken connection (a server that went away, a hostile one)
is reported with its reason and reconnected every ``reconnect_period`` s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from mocap4r2_control.adapter import AdapterError, ConfigurationError, MocapAdapter
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.geometry import UP_AXIS_CONVENTIONS
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system

from ..common import status_fields
from . import protocol as vp
from .client import VrpnClient, VrpnConnectionError
from .convert import DeliveredFrames, FrameAssembler, parse_body_names

LOG = logging.getLogger("mocap4r2.vrpn")
# longest a frame is held for the rest of its reports, which the server was still sending
# when a read ended (a full datagram, a cut message): they come microseconds later; a lost
# datagram must not hold the frame until the next one
CONTINUATION_WAIT = 0.002


def _check_host(value: str) -> str | None:
    if not value or len(value) > 253 or not all(c.isalnum() or c in ".-" for c in value):
        return f"host must be a host name or IPv4 address (no scheme; see 'connection'), got {value!r}"
    return None


def _check_body_names(value: list[str]) -> str | None:
    try:
        parse_body_names(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check_trackers(value: list[str]) -> str | None:
    bad = [t for t in value if not t or len(t.encode()) >= vp.MAX_NAME]
    if bad:
        return f"trackers must be VRPN sender names (1-99 bytes), got {bad[:3]}"
    if len(set(value)) != len(value):
        return "trackers must not repeat a name"
    return None


class VrpnAdapter(MocapAdapter):
    """A VRPN server's trackers; reconnects by itself."""

    system_type = "vrpn"
    frames_have_markers = False  # trackers only: VRPN streams no markers
    parameters = (
        ParameterSpec("host", "127.0.0.1", "Address of the VRPN server.", check=_check_host),
        ParameterSpec("port", vp.DEFAULT_PORT, "VRPN server port.", min_value=1, max_value=65535),
        ParameterSpec(
            "connection",
            "udp",
            "udp: vrpn's default (a UDP request, the server connects back over TCP, reports "
            "come by UDP); tcp: connect directly, everything over TCP (tcp://host:port, "
            "through firewalls and NAT).",
            choices=("udp", "tcp"),
        ),
        ParameterSpec(
            "trackers",
            [],
            "VRPN trackers (sender names) to publish as bodies; ids are their places in this "
            "list. Empty: every sender the server announces but 'VRPN Control', ids in the "
            "order of the announcements.",
            check=_check_trackers,
        ),
        ParameterSpec(
            "multi_sensor",
            False,
            "Each sensor n of a tracker T is a body 'T/n' (id 1000 * tracker id + n); "
            "otherwise only sensor 0 is read.",
        ),
        ParameterSpec(
            "body_names",
            [],
            "Names for bodies instead of 'T' or 'T/n': entries 'Tracker0/1=left_hand'.",
            check=_check_body_names,
        ),
        ParameterSpec(
            "up_axis",
            "+Z",
            "The server's up axis (Motive streams +Y unless told otherwise).",
            choices=tuple(UP_AXIS_CONVENTIONS),
        ),
        ParameterSpec(
            "untracked_after",
            0.1,
            "A body that has not reported for this long (s, server clock) is untracked.",
            min_value=0.0,
            max_value=60.0,
        ),
        ParameterSpec(
            "connect_timeout",
            5.0,
            "Seconds to wait for the server to connect.",
            min_value=0.1,
            max_value=60.0,
        ),
        ParameterSpec(
            "reconnect_period",
            1.0,
            "Seconds between reconnection attempts; 0: do not reconnect (reading then fails).",
            min_value=0.0,
            max_value=60.0,
        ),
        ParameterSpec(
            "silence_timeout",
            3.0,
            "Seconds without anything from the server (no report, no answer to the ping sent "
            "every second) after which the connection is dropped and made again; 0: never.",
            min_value=0.0,
            max_value=600.0,
        ),
    )

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = vp.DEFAULT_PORT,
        connection: str = "udp",
        trackers: Sequence[str] = (),
        multi_sensor: bool = False,
        body_names: Sequence[str] = (),
        up_axis: str = "+Z",
        untracked_after: float = 0.1,
        connect_timeout: float = 5.0,
        reconnect_period: float = 1.0,
        silence_timeout: float = 3.0,
        continuation_wait: float = CONTINUATION_WAIT,
    ) -> None:
        """Each argument is the parameter of its name (``continuation_wait`` is not one:
        tests shorten it); ConfigurationError for a host, trackers or body names the
        parameters' checks refuse."""
        problem = _check_host(host) or _check_trackers(list(trackers)) or _check_body_names(list(body_names))
        if problem:
            raise ConfigurationError(problem)
        tcp_only = connection == "tcp"
        self.where = f"{'tcp://' if tcp_only else ''}{host}:{port}"
        self.reconnect_period = reconnect_period
        self.client = VrpnClient(
            str(host),
            int(port),
            tcp_only=tcp_only,
            timeout=connect_timeout,
            silence_timeout=silence_timeout,
            pose_blocks=True,
        )
        self.converter = FrameAssembler(
            list(trackers), multi_sensor, parse_body_names(list(body_names)), untracked_after, up_axis
        )
        self.frames = DeliveredFrames(self.converter, self.client.stats)
        self.continuation_wait = continuation_wait
        # monotonic time until which a frame whose rest the server is still sending is held
        self._held_until: float | None = None
        self._next_attempt = 0.0
        self._lost_reported = False
        self.reconnects = 0

    # ------------------------------------------------------------------ lifecycle
    def connect(self) -> AssetNames:
        try:
            announced = self.client.connect()
        except VrpnConnectionError as exc:
            raise AdapterError(str(exc)) from exc
        self.converter.announce(announced)
        self.client.names.senders_changed = False
        return AssetNames(rigid_bodies=self.converter.asset_names(announced))

    def start_streaming(self) -> None:
        """On activate: reports that queued in the sockets while inactive are dropped,
        so the first frame published is a current one."""
        self.frames.clear()
        self.converter.flush()
        self._held_until = None
        if self.client.connected:
            try:
                dropped = self.client.drain()
            except VrpnConnectionError as exc:
                self._lost(str(exc))
                return
            if dropped:
                LOG.info("dropped %d reports that arrived while inactive", dropped)

    def disconnect(self) -> None:
        self.client.close()
        self.frames.clear()

    # ------------------------------------------------------------------ reading
    def read_frame(self, timeout: float) -> MocapFrame | None:
        if self.frames.queue:
            return self._handed_over(self.frames.pop())
        client = self.client
        if not client.connected:
            self._reconnect(timeout)
            return None
        held = self._held_until
        wait = timeout if held is None else min(timeout, max(held - time.monotonic(), 0.0))
        try:
            delivered = client.read(wait)
        except VrpnConnectionError as exc:
            self._held_until = None
            self._lost(str(exc))
            return None
        if client.names.senders_changed:
            client.names.senders_changed = False
            self.converter.announce(client.trackers())
        self.frames.add(delivered, end_of_read=False)
        # the rest of a frame the server is still sending is waited for, a little
        now = time.monotonic()
        if not (client.continues and self.converter.pending) or (held is not None and now >= held):
            self._held_until = None
            self.frames.flush()
        elif held is None:
            self._held_until = now + self.continuation_wait
        self._lost_reported = False
        return self._handed_over(self.frames.pop())

    def _handed_over(self, frame: MocapFrame | None) -> MocapFrame | None:
        """``frame`` with the time since its bytes reached this host in its latency: the
        node stamps a frame at its hand-over minus its latency, and the frames of one read
        (a burst) are handed over one publish apart. They came with the newest bytes read,
        or the datagrams just before them (microseconds apart in a burst)."""
        if frame is not None:
            frame.latency += max(time.time() - self.client.transport.received_at, 0.0)
        return frame

    def _lost(self, reason: str) -> None:
        if self.reconnect_period <= 0:
            raise AdapterError(f"VRPN server {self.where}: {reason}")
        if not self._lost_reported:
            LOG.warning(
                "VRPN server %s: %s; reconnecting every %.1f s", self.where, reason, self.reconnect_period
            )
            self._lost_reported = True
        self._next_attempt = time.monotonic() + self.reconnect_period

    def _reconnect(self, timeout: float) -> None:
        wait = self._next_attempt - time.monotonic()
        if self.reconnect_period <= 0:
            raise AdapterError(f"VRPN server {self.where} is not connected")
        if wait > 0:
            time.sleep(min(wait, timeout))
            return
        # one attempt bounded by the read timeout (at least 0.5 s for the server to call
        # back), so a deactivate is never kept waiting long
        saved = self.client.timeout
        self.client.timeout = min(saved, max(timeout, 0.5))
        try:
            announced = self.client.connect()
        except VrpnConnectionError as exc:
            self.client.stats.last_error = str(exc)
            self._next_attempt = time.monotonic() + self.reconnect_period
            return
        finally:
            self.client.timeout = saved
        self.reconnects += 1
        self.converter.announce(announced)
        LOG.info("reconnected to VRPN server %s", self.where)
        self._lost_reported = False

    def status(self) -> dict[str, str]:
        client = self.client
        converter = self.converter
        return status_fields(
            {
                "vrpn": self.where,
                "server_version": client.server_version,
                "connected": client.connected,
                "trackers_announced": len(client.trackers()),
                "reconnects": self.reconnects,
                "decode_errors": client.stats.decode_errors + self.frames.report_errors,
            },
            client.stats,
            when_set={
                "reports_ignored": converter.ignored_reports,
                "reports_rejected": converter.rejected_reports,
                "frames_split": converter.frames_split,
                "frames_lost_slow_reader": self.frames.frames_lost,
                "velocity_reports": self.frames.velocity_reports,
            },
        )


def main(args: list[str] | None = None) -> int:
    """The vrpn_system executable."""
    return run_system(VrpnAdapter, "vrpn_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
