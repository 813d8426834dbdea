"""MAVLink transports for the px4_bridge: one interface, two backends.

* ``pymavlink``: MAVLink 2 frames encoded by pymavlink, over ``udpout:``, ``udpin:`` or
  a serial port. The bridge sends its own HEARTBEAT (MAV_TYPE_ONBOARD_CONTROLLER) once a
  second, so a vehicle listening for a companion computer learns its address.
* ``mavsdk``: MAVSDK's Mocap plugin (``mavsdk.plugins.mocap``: ``set_odometry``,
  ``set_vision_position_estimate``, ``set_attitude_position_mocap``), the C library
  bundled in the ``mavsdk`` wheel; MAVSDK does its own heartbeats and vehicle discovery.

A link is "connected" once a HEARTBEAT of an autopilot arrived. :class:`LinkWorker`
owns the link on a thread of its own (connecting blocks for up to ``connect_timeout``
and must never stall the ROS executor), sends the samples in order from a short queue
(``backlog`` samples: a thread starved for a few tens of milliseconds on a loaded
computer loses nothing, while an old pose is dropped rather than sent late; EKF2 places
each sample by its ``time_usec`` anyway), and reconnects whenever the vehicle goes silent.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .frames import quat_to_euler_frd, wxyz
from .stream import VisionSample

MESSAGES = ("odometry", "vision_position_estimate", "att_pos_mocap")
BACKENDS = ("pymavlink", "mavsdk")

# MAVLink enum values used here (common.xml)
MAV_FRAME_BODY_FRD = 12
MAV_FRAME_LOCAL_FRD = 20
MAV_ESTIMATOR_TYPE_MOCAP = 6
MAV_TYPE_ONBOARD_CONTROLLER = 18
MAV_AUTOPILOT_INVALID = 8
MAV_STATE_ACTIVE = 4
# a vehicle silent this long (s) is considered gone (MAVLink's usual heartbeat timeout)
HEARTBEAT_LOSS = 3.0


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

    vehicle = ""  # "system S component C, autopilot A, type T" once connected


class PymavlinkLink(Link):
    backend = "pymavlink"

    def __init__(self, connection: Connection, system_id: int, component_id: int):
        self.connection = connection
        self.system_id = system_id
        self.component_id = component_id
        self._conn = None
        self._last_heartbeat_out = 0.0
        self._last_heartbeat_in = 0.0
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            self._heartbeat()
            if self._receive(blocking_for=0.1):
                return None
        return (
            f"no HEARTBEAT from an autopilot on {self.connection} within {timeout:g} s "
            "(is the vehicle on, the URL right, the port free?)"
        )

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat_out >= 1.0:
            self._last_heartbeat_out = now
            try:
                self._conn.mav.heartbeat_send(
                    MAV_TYPE_ONBOARD_CONTROLLER, MAV_AUTOPILOT_INVALID, 0, 0, MAV_STATE_ACTIVE
                )
            except OSError:
                pass  # nobody listening yet (udpout to a closed port): the next one may pass

    def _receive(self, blocking_for: float = 0.0, budget: int = 200) -> bool:
        """Reads what arrived (at most ``budget`` messages); True when an autopilot's
        HEARTBEAT was among them."""
        seen = False
        for _ in range(budget):
            try:
                msg = self._conn.recv_match(blocking=blocking_for > 0, timeout=blocking_for or None)
            except Exception:  # a malformed datagram or a vanished serial port: skip it
                msg = None
            blocking_for = 0.0
            if msg is None:
                break
            if msg.get_type() == "HEARTBEAT" and msg.autopilot != MAV_AUTOPILOT_INVALID:
                self._last_heartbeat_in = time.monotonic()
                self.vehicle = (
                    f"system {msg.get_srcSystem()} component {msg.get_srcComponent()}, "
                    f"autopilot {msg.autopilot}, type {msg.type}"
                )
                seen = True
        return seen

    def poll(self) -> str | None:
        self._heartbeat()
        self._receive()
        silent = time.monotonic() - self._last_heartbeat_in
        if silent > HEARTBEAT_LOSS:
            return f"no HEARTBEAT from the vehicle for {silent:.1f} s on {self.connection}"
        return None

    def send(self, sample: VisionSample, message: str) -> None:
        mav = self._conn.mav
        x, y, z = (float(v) for v in sample.position)
        try:
            if message == "odometry":
                mav.odometry_send(
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
                    MAV_ESTIMATOR_TYPE_MOCAP,
                    sample.quality,
                )
            elif message == "vision_position_estimate":
                roll, pitch, yaw = quat_to_euler_frd(sample.quat_xyzw)
                mav.vision_position_estimate_send(
                    sample.time_usec, x, y, z, roll, pitch, yaw, sample.pose_covariance, sample.reset_counter
                )
            elif message == "att_pos_mocap":
                mav.att_pos_mocap_send(
                    sample.time_usec, wxyz(sample.quat_xyzw), x, y, z, sample.pose_covariance
                )
            else:
                raise LinkError(f"unknown message {message!r}")
        except OSError as error:
            raise LinkError(f"sending on {self.connection} failed: {error}") from error

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None


class MavsdkLink(Link):
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
        self._mavsdk = None
        self._system = None
        self._mocap = None
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
                    estimator_type=m.Odometry.MavEstimatorType.MOCAP,
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
        self._thread = threading.Thread(target=self._run, name="mavlink_link", daemon=True)

    def start(self) -> None:
        self._thread.start()

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
                    self.vehicle = link.vehicle
                    self._set("connected", f"connected to {link.vehicle}")
                    failure = self._serve(link)
            except Exception as error:  # a backend bug or OS error must not end the thread
                failure = f"{type(error).__name__}: {error}"
            finally:
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
                except LinkError as error:
                    self.errors += 1
                    return str(error)
            gone = link.poll()
            if gone:
                return gone
        return None
