"""MAVLink transports for the px4_bridge: one interface, two backends.

* ``pymavlink``: MAVLink 2 frames encoded by pymavlink, over ``udpout:``, ``udpin:`` or
  a serial port. The bridge sends its own HEARTBEAT (MAV_TYPE_ONBOARD_CONTROLLER) once a
  second, so a vehicle listening for a companion computer learns its address.
* ``mavsdk``: MAVSDK's Mocap plugin (``mavsdk.plugins.mocap``: ``set_odometry``,
  ``set_vision_position_estimate``, ``set_attitude_position_mocap``), the C library
  bundled in the ``mavsdk`` wheel; MAVSDK does its own heartbeats and vehicle discovery.

Time: PX4 converts a sample's ``time_usec`` to its own clock through MAVLink TIMESYNC
(:mod:`.timesync`), and stamps samples with their arrival time until that has converged.
The pymavlink backend answers the vehicle's TIMESYNC requests on a reader thread of its
own, at once, with the host's system clock (the clock of ROS stamps), and sends the
capture stamp as ``time_usec``. The MAVSDK backend enables MAVSDK's timesync
(``System.enable_timesync``): MAVSDK then moves its "autopilot time" onto the vehicle's
clock, answers the vehicle's requests with it, and converts the ``time_usec`` it is
given, which must be on the host's system clock (Unix time), to that autopilot time.

A link is "connected" once a HEARTBEAT of an autopilot arrived. :class:`LinkWorker`
owns the link on a thread of its own (connecting blocks for up to ``connect_timeout``
and must never stall the ROS executor), sends the samples in order from a short queue
(``backlog`` samples: a thread starved for a few tens of milliseconds on a loaded
computer loses nothing, while an old pose is dropped rather than sent late; EKF2 places
each sample by its ``time_usec`` anyway), and reconnects whenever the vehicle goes silent.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mocap4r2_control.timebase import HOST_OFFSET_CHECK_S, SYSTEM_CLOCK, HostClock, HostOffset

from .frames import quat_to_euler_frd, wxyz
from .stream import VisionSample
from .timesync import DelayWindow, TimesyncPeer

MESSAGES = ("odometry", "vision_position_estimate", "att_pos_mocap")
BACKENDS = ("pymavlink", "mavsdk")

# MAVLink enum values used here (common.xml)
MAV_FRAME_BODY_FRD = 12
MAV_FRAME_LOCAL_FRD = 20
# ODOMETRY's estimator_type decides where PX4 puts it (mavlink_receiver.cpp,
# handle_message_odometry): VISION (like UNKNOWN, NAIVE, VIO) becomes
# vehicle_visual_odometry, the external vision EKF2 fuses; MOCAP becomes
# vehicle_mocap_odometry, which EKF2 does not read. So mocap is sent as VISION.
MAV_ESTIMATOR_TYPE_VISION = 2
MAV_TYPE_ONBOARD_CONTROLLER = 18
MAV_AUTOPILOT_INVALID = 8
MAV_STATE_ACTIVE = 4
# a vehicle silent this long (s) is considered gone (MAVLink's usual heartbeat timeout)
HEARTBEAT_LOSS = 3.0
# how often (s) the pymavlink backend asks the vehicle's time itself, for /diagnostics
TIMESYNC_REQUEST_PERIOD = 0.1


class LinkError(Exception):
    """A link that cannot send; the message says why."""


@dataclass(frozen=True)
class Connection:
    """A parsed MAVLink URL: ``udpout:host:port``, ``udpin:host:port`` (``//`` after the
    colon accepted), ``serial:/dev/ttyX[:baud]`` or a bare device path."""

    kind: str  # udpout | udpin | serial
    host: str = ""
    port: int = 0
    device: str = ""
    baud: int = 57600

    @classmethod
    def parse(cls, url: str) -> Connection:
        text = url.strip()
        if text.startswith("/dev/"):
            text = "serial:" + text
        kind, sep, rest = text.partition(":")
        if not sep:
            raise ValueError(
                f"connection {url!r}: expected udpout:HOST:PORT, udpin:HOST:PORT or serial:DEVICE[:BAUD]"
            )
        rest = rest[2:] if rest.startswith("//") and kind != "serial" else rest
        if kind == "serial":
            rest = rest[2:] if rest.startswith("///") else rest
            device, _, baud = rest.rpartition(":") if ":" in rest else (rest, "", "")
            if not device.startswith("/"):
                raise ValueError(f"connection {url!r}: the serial device must be a path like /dev/ttyACM0")
            if baud and not baud.isdigit():
                raise ValueError(f"connection {url!r}: baud rate {baud!r} is not a number")
            return cls("serial", device=device, baud=int(baud) if baud else 57600)
        if kind not in ("udpout", "udpin"):
            raise ValueError(f"connection {url!r}: unknown scheme {kind!r} (udpout, udpin or serial)")
        host, _, port = rest.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"connection {url!r}: expected {kind}:HOST:PORT")
        return cls(kind, host=host, port=int(port))

    def pymavlink_device(self) -> str:
        return self.device if self.kind == "serial" else f"{self.kind}:{self.host}:{self.port}"

    def mavsdk_url(self) -> str:
        if self.kind == "serial":
            return f"serial://{self.device}:{self.baud}"
        return f"{self.kind}://{self.host}:{self.port}"

    def __str__(self) -> str:
        return (
            f"serial:{self.device}:{self.baud}"
            if self.kind == "serial"
            else f"{self.kind}:{self.host}:{self.port}"
        )


def connection_check(value: str) -> str | None:
    """ParameterSpec check of the ``connection`` parameter."""
    try:
        Connection.parse(value)
    except ValueError as error:
        return str(error)
    return None


class Link:
    """What the worker needs from a transport."""

    backend = ""

    def open(self, timeout: float, stop: threading.Event | None = None) -> str | None:
        """Connect and wait up to ``timeout`` s for an autopilot's HEARTBEAT: None when
        one came, else the reason. Returns early once ``stop`` is set (the node is
        leaving and must not wait out the timeout)."""
        raise NotImplementedError

    def poll(self) -> str | None:
        """Service the link; None while the vehicle is there, else why it is gone."""
        raise NotImplementedError

    def send(self, sample: VisionSample, message: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def timesync(self) -> dict[str, str]:
        """What /diagnostics says about time synchronisation with the vehicle."""
        return {}

    vehicle = ""  # "system S component C, autopilot A, type T" once connected


class PymavlinkLink(Link):
    """MAVLink 2 through pymavlink: HEARTBEAT, TIMESYNC and the samples, encoded here."""

    backend = "pymavlink"

    def __init__(
        self, connection: Connection, system_id: int, component_id: int, clock: HostClock | None = None
    ):
        self.connection = connection
        self.system_id = system_id
        self.component_id = component_id
        # TIMESYNC is answered on the host clock (time_usec's clock); a step of it is
        # found against the monotonic clock and told to the peer, which drops its
        # readings and follows PX4's reaction (Px4TimesyncState)
        self.clock = clock if clock is not None else SYSTEM_CLOCK
        self._host_offset = HostOffset(self.clock)
        self._conn: Any = None
        self._send_lock = threading.Lock()  # the reader thread answers TIMESYNC while samples go out
        self._closing = threading.Event()
        self._heartbeat_seen = threading.Event()
        self._reader: threading.Thread | None = None
        self._last_heartbeat_out = 0.0
        self._last_heartbeat_in = 0.0
        self._last_request = 0.0
        self.peer = TimesyncPeer()
        self.vehicle = ""

    def open(self, timeout: float, stop: threading.Event | None = None) -> str | None:
        os.environ["MAVLINK20"] = "1"  # before pymavlink picks its dialect: MAVLink 2 frames
        from pymavlink import mavutil

        try:
            self._conn = mavutil.mavlink_connection(
                self.connection.pymavlink_device(),
                baud=self.connection.baud,
                source_system=self.system_id,
                source_component=self.component_id,
                dialect="common",
                autoreconnect=False,
            )
        except Exception as error:  # OSError, serial errors: reported, retried by the worker
            return f"cannot open {self.connection}: {error}"
        # TIMESYNC answers must leave within milliseconds of the request (PX4 drops those
        # with a round trip of 10 ms or more), whatever the sending side is doing: the
        # link is read on a thread of its own.
        self._reader = threading.Thread(target=self._read, name="mavlink_reader", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            self._heartbeat()
            if self._heartbeat_seen.wait(0.1):
                return None
        return (
            f"no HEARTBEAT from an autopilot on {self.connection} within {timeout:g} s "
            "(is the vehicle on, the URL right, the port free?)"
        )

    def _send(self, kind: str, *fields: Any) -> None:
        with self._send_lock:
            getattr(self._conn.mav, f"{kind}_send")(*fields)

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat_out >= 1.0:
            self._last_heartbeat_out = now
            # nobody may listen yet (udpout to a closed port): the next one may pass
            with contextlib.suppress(OSError):
                self._send(
                    "heartbeat", MAV_TYPE_ONBOARD_CONTROLLER, MAV_AUTOPILOT_INVALID, 0, 0, MAV_STATE_ACTIVE
                )

    def _read(self) -> None:
        conn = self._conn
        while not self._closing.is_set():
            try:
                msg = conn.recv_match(blocking=True, timeout=0.02)
            except Exception:  # a malformed datagram or a vanished serial port: skip it
                if self._closing.is_set():
                    break
                msg = None
                time.sleep(0.005)  # a port that keeps failing must not spin a core
            arrival_ns = self._host_ns()
            if msg is not None:
                kind = msg.get_type()
                if kind == "TIMESYNC":
                    self._on_timesync(msg, arrival_ns)
                elif kind == "HEARTBEAT" and msg.autopilot != MAV_AUTOPILOT_INVALID:
                    self._last_heartbeat_in = time.monotonic()
                    self.vehicle = (
                        f"system {msg.get_srcSystem()} component {msg.get_srcComponent()}, "
                        f"autopilot {msg.autopilot}, type {msg.type}"
                    )
                    self._heartbeat_seen.set()
            if (
                self._heartbeat_seen.is_set()
                and time.monotonic() - self._last_request >= TIMESYNC_REQUEST_PERIOD
            ):
                self._last_request = time.monotonic()
                request = self.peer.request(self._host_ns())
                self._send_timesync(request.tc1, request.ts1)

    def _host_ns(self) -> int:
        clock = self.clock
        return time.time_ns() if clock is SYSTEM_CLOCK else round(clock.host() * 1e9)

    def _on_timesync(self, msg: Any, arrival_ns: int) -> None:
        try:
            tc1, ts1 = int(msg.tc1), int(msg.ts1)
        except (TypeError, ValueError):
            return
        offset = self._host_offset
        seen = arrival_ns * 1e-9 - self.clock.monotonic()
        if abs(seen - offset.offset) > HOST_OFFSET_CHECK_S:
            step = offset.check()
            if step:
                self.peer.host_stepped(round(step * 1e9))
                arrival_ns = self._host_ns()  # read on the old clock: read again
        reply = self.peer.on_timesync(tc1, ts1, arrival_ns, self._host_ns())
        if reply is not None:
            self._send_timesync(reply.tc1, reply.ts1)

    def _send_timesync(self, tc1: int, ts1: int) -> None:
        # the vehicle asks again; a lost answer is one sample fewer
        with contextlib.suppress(OSError):
            self._send("timesync", tc1, ts1)

    def poll(self) -> str | None:
        self._heartbeat()
        silent = time.monotonic() - self._last_heartbeat_in
        if silent > HEARTBEAT_LOSS:
            return f"no HEARTBEAT from the vehicle for {silent:.1f} s on {self.connection}"
        if self._reader is not None and not self._reader.is_alive():
            return f"the reader of {self.connection} stopped"
        return None

    def send(self, sample: VisionSample, message: str) -> None:
        x, y, z = (float(v) for v in sample.position)
        try:
            if message == "odometry":
                self._send(
                    "odometry",
                    sample.time_usec,
                    MAV_FRAME_LOCAL_FRD,
                    MAV_FRAME_BODY_FRD,
                    x,
                    y,
                    z,
                    wxyz(sample.quat_xyzw),
                    *sample.velocity,
                    *sample.angular_velocity,
                    sample.pose_covariance,
                    sample.velocity_covariance,
                    sample.reset_counter,
                    MAV_ESTIMATOR_TYPE_VISION,
                    sample.quality,
                )
            elif message == "vision_position_estimate":
                roll, pitch, yaw = quat_to_euler_frd(sample.quat_xyzw)
                self._send(
                    "vision_position_estimate",
                    sample.time_usec,
                    x,
                    y,
                    z,
                    roll,
                    pitch,
                    yaw,
                    sample.pose_covariance,
                    sample.reset_counter,
                )
            elif message == "att_pos_mocap":
                self._send(
                    "att_pos_mocap", sample.time_usec, wxyz(sample.quat_xyzw), x, y, z, sample.pose_covariance
                )
            else:
                raise LinkError(f"unknown message {message!r}")
        except OSError as error:
            raise LinkError(f"sending on {self.connection} failed: {error}") from error

    def timesync(self) -> dict[str, str]:
        peer = self.peer
        rtt, offset = peer.rtt_ms, peer.offset_s
        return {
            "timesync": "answered by the bridge (host system clock)",
            "timesync_converged": str(peer.vehicle_converged).lower(),
            "px4_timesync": peer.px4_state(),
            "host_clock_steps": str(self._host_offset.steps),
            "timesync_requests_answered": str(peer.requests_answered),
            "timesync_rtt_ms": f"{rtt:.3f}" if rtt is not None else "",
            "timesync_offset_s": f"{offset:.6f}" if offset is not None else "",
            # answers off the previous offset by more than a jump: the vehicle rebooted or
            # its clock was set; the offset filter restarted each time
            "timesync_clock_jumps": str(peer.clock_jumps),
        }

    def close(self) -> None:
        self._closing.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(2.0)
        if self._conn is not None:
            with contextlib.suppress(Exception):  # already closed by a vanished port
                self._conn.close()
            self._conn = None


class MavsdkLink(Link):
    """MAVSDK's Mocap plugin; MAVSDK does heartbeats, discovery and timesync."""

    backend = "mavsdk"
    _log_routed = False

    def __init__(
        self,
        connection: Connection,
        system_id: int,
        component_id: int,
        log: Callable[[str], None] | None = None,
    ):
        self.connection = connection
        self.system_id = system_id
        self.component_id = component_id
        self._log = log
        # MAVSDK's wrappers (untyped ctypes objects) once opened
        self._mavsdk: Any = None
        self._system: Any = None
        self._mocap: Any = None
        self.vehicle = ""

    def _route_log(self) -> None:
        """MAVSDK's C library prints every debug line to stdout; keep warnings and errors,
        through the node's logger."""
        if MavsdkLink._log_routed:
            return
        from mavsdk import LogLevel, log_subscribe

        log = self._log

        def on_log(level, message, _file, _line):
            if level >= LogLevel.WARN and log is not None:
                log(f"MAVSDK: {message}")
            return True

        log_subscribe(on_log)
        MavsdkLink._log_routed = True

    def open(self, timeout: float, stop: threading.Event | None = None) -> str | None:
        from mavsdk import ConnectionResult, Mavsdk
        from mavsdk.mavsdk import Configuration
        from mavsdk.plugins.mocap.mocap import Mocap

        self._route_log()
        self._mavsdk = Mavsdk(Configuration.create_manual(self.system_id, self.component_id, True))
        result = self._mavsdk.add_any_connection(self.connection.mavsdk_url())
        if result != ConnectionResult.SUCCESS:
            return f"MAVSDK cannot open {self.connection.mavsdk_url()}: {ConnectionResult(result).name}"
        # in short slices, so a node that is leaving does not wait out the timeout
        deadline = time.monotonic() + timeout
        system = None
        while system is None and not (stop is not None and stop.is_set()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            system = self._mavsdk.first_autopilot(min(0.25, remaining))
        if system is None:
            return (
                f"no HEARTBEAT from an autopilot on {self.connection.mavsdk_url()} within {timeout:g} s "
                "(is the vehicle on, the URL right, the port free?)"
            )
        self._system = system
        # MAVSDK's timesync: it asks the vehicle's time every 5 s and moves its
        # "autopilot time" onto the vehicle's clock, answers the vehicle's own requests
        # with that time once it has a sample, and converts every time_usec the Mocap
        # plugin is given from the system clock to autopilot time. Without it the
        # vehicle's requests go unanswered and PX4 stamps every sample on arrival.
        system.enable_timesync()
        self._mocap = Mocap(system)
        self.vehicle = f"system {system.get_system_id()} (MAVSDK)"
        return None

    def poll(self) -> str | None:
        if self._system is None or not self._system.is_connected():
            return f"MAVSDK lost the vehicle on {self.connection.mavsdk_url()} (no HEARTBEAT)"
        return None

    def send(self, sample: VisionSample, message: str) -> None:
        from mavsdk.plugins.mocap import mocap as m

        position = m.PositionBody(*(float(v) for v in sample.position))
        covariance = m.Covariance(list(sample.pose_covariance))
        try:
            if message == "odometry":
                odometry = m.Odometry(
                    time_usec=sample.time_usec,
                    frame_id=m.Odometry.MavFrame.LOCAL_FRD,
                    position_body=position,
                    q=m.Quaternion(*wxyz(sample.quat_xyzw)),
                    speed_body=m.SpeedBody(*sample.velocity),
                    angular_velocity_body=m.AngularVelocityBody(*sample.angular_velocity),
                    pose_covariance=covariance,
                    velocity_covariance=m.Covariance(list(sample.velocity_covariance)),
                    reset_counter=sample.reset_counter,
                    # VISION, not MOCAP: see MAV_ESTIMATOR_TYPE_VISION
                    estimator_type=m.Odometry.MavEstimatorType.VISION,
                    quality_percent=sample.quality,
                )
                self._mocap.set_odometry(odometry)
            elif message == "vision_position_estimate":
                roll, pitch, yaw = quat_to_euler_frd(sample.quat_xyzw)
                self._mocap.set_vision_position_estimate(
                    m.VisionPositionEstimate(
                        time_usec=sample.time_usec,
                        position_body=position,
                        angle_body=m.AngleBody(roll, pitch, yaw),
                        pose_covariance=covariance,
                    )
                )
            elif message == "att_pos_mocap":
                self._mocap.set_attitude_position_mocap(
                    m.AttitudePositionMocap(
                        time_usec=sample.time_usec,
                        q=m.Quaternion(*wxyz(sample.quat_xyzw)),
                        position_body=position,
                        pose_covariance=covariance,
                    )
                )
            else:
                raise LinkError(f"unknown message {message!r}")
        except m.MocapError as error:
            raise LinkError(f"MAVSDK refused the {message}: {error}") from error

    def timesync(self) -> dict[str, str]:
        # MAVSDK keeps its clock offset and round trips to itself (no API gives them)
        return {
            "timesync": "MAVSDK (enable_timesync; time_usec given on the system clock)",
            "timesync_converged": "",
            "timesync_requests_answered": "",
            "timesync_rtt_ms": "",
            "timesync_offset_s": "",
            "timesync_clock_jumps": "",
        }

    def close(self) -> None:
        if self._mavsdk is not None:
            self._mavsdk.destroy()  # releases the system and the plugin with it
        self._mavsdk = self._system = self._mocap = None


def make_link(
    backend: str,
    connection: Connection,
    system_id: int,
    component_id: int,
    log: Callable[[str], None] | None = None,
) -> Link:
    """The link of ``backend`` (pymavlink or mavsdk) on ``connection``."""
    if backend == "pymavlink":
        return PymavlinkLink(connection, system_id, component_id)
    if backend == "mavsdk":
        return MavsdkLink(connection, system_id, component_id, log)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


class LinkWorker:
    """Owns a link on its own thread: connects, reconnects, sends the newest sample."""

    def __init__(
        self,
        factory: Callable[[], Link],
        connect_timeout: float,
        message: str,
        retry_delay: float = 1.0,
        backlog: int = 8,
    ):
        self._factory = factory
        self.connect_timeout = connect_timeout
        self.message = message
        self.retry_delay = retry_delay
        self._cond = threading.Condition()
        self._pending: deque[VisionSample] = deque()
        self.backlog = backlog
        self._stop = threading.Event()
        self.state = "connecting"  # connecting | connected | retrying | stopped
        self.reason = "connecting"
        self.vehicle = ""
        self.sent = 0
        self.dropped = 0  # samples not sent: no vehicle, or the backlog full
        self.attempts = 0
        self.errors = 0
        self.ev_delay = DelayWindow()  # capture stamp to the moment the sample left, s
        self._link: Link | None = None
        self._thread = threading.Thread(target=self._run, name="mavlink_link", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def timesync(self) -> dict[str, str]:
        """The link's timesync figures while connected (empty values otherwise)."""
        link = self._link
        return link.timesync() if link is not None else {}

    def submit(self, sample: VisionSample) -> None:
        with self._cond:
            if self.state != "connected":
                self.dropped += 1
                return
            if len(self._pending) >= self.backlog:
                self._pending.popleft()  # the oldest: the flight controller wants the newest
                self.dropped += 1
            self._pending.append(sample)
            self._cond.notify()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.state = "stopped"

    def _set(self, state: str, reason: str) -> None:
        with self._cond:
            self.state = state
            self.reason = reason
            if state != "connected":
                self._pending.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.attempts += 1
            link = self._factory()
            try:
                failure = link.open(self.connect_timeout, self._stop)
                if failure is None:
                    self._link = link
                    self.vehicle = link.vehicle
                    self._set("connected", f"connected to {link.vehicle}")
                    failure = self._serve(link)
            except Exception as error:  # a backend bug or OS error must not end the thread
                failure = f"{type(error).__name__}: {error}"
            finally:
                self._link = None
                link.close()
            if self._stop.is_set():
                break
            self._set("retrying", failure or "link closed")
            self._stop.wait(self.retry_delay)

    def _serve(self, link: Link) -> str | None:
        while not self._stop.is_set():
            with self._cond:
                if not self._pending:
                    self._cond.wait(0.05)
                sample = self._pending.popleft() if self._pending else None
            if sample is not None:
                try:
                    link.send(sample, self.message)
                    self.sent += 1
                    self.ev_delay.add(time.time() - sample.time_usec * 1e-6)
                except LinkError as error:
                    self.errors += 1
                    return str(error)
            gone = link.poll()
            if gone:
                return gone
        return None
