"""session_recorder: keeps what a capture session captured, as a rosbag2 bag (MCAP).

A member of the control plane like any system (type ``recorder``): START(session_id)
opens ``<output_dir>/<session_id>/`` and records the topics of every system the request
addresses (as announced in their MocapSystemInfo), the ``extra_topics``, and the control
plane itself (/mocap4r2/systems, /mocap4r2/control, /mocap4r2/control_ack); STOP closes
the bag and answers with the path, the duration, the count per topic and the frame gaps
per system.

Subscriptions are raw (the serialized bytes, never a message object) and are created as
soon as a system announces its topics, so they are matched before the session starts.
A callback only appends the bytes and the receive time to the bag's bounded queue; a
writer thread does the disk work (:mod:`mocap4r2_tools.recorder_writer`,
:mod:`mocap4r2_tools.recording.bag_writer`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from lifecycle_msgs.msg import State
from rclpy.serialization import serialize_message

from mocap4r2_control.control_plane import (
    ACK_QOS,
    ACK_TOPIC,
    CONTROL_QOS,
    CONTROL_TOPIC,
    STATE_LABELS,
    SYSTEMS_LISTENER_QOS,
    SYSTEMS_TOPIC,
    ControlPlaneMember,
    Outcome,
)
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_interfaces.msg import Control, MocapSystemInfo

from .recorder_reports import DIAGNOSTICS, SystemReports
from .recorder_writer import RecorderWriter
from .recording.bag_writer import Summary
from .recording.session_id import session_id_problem
from .tool_node import ToolNode

CONTROL_TYPES = {
    SYSTEMS_TOPIC: "mocap4r2_interfaces/msg/MocapSystemInfo",
    CONTROL_TOPIC: "mocap4r2_interfaces/msg/Control",
    ACK_TOPIC: "mocap4r2_interfaces/msg/ControlAck",
}


def _extra_topics_check(value: list) -> str | None:
    bad = [t for t in value if not isinstance(t, str) or not t.startswith("/") or " " in t]
    return f"extra_topics must be fully qualified topic names, got {bad}" if bad else None


SPECS = (
    ParameterSpec(
        "output_dir", "~/mocap4r2_sessions", "Directory that receives one bag directory per session."
    ),
    ParameterSpec(
        "extra_topics",
        [],
        "Further topics recorded in every session (e.g. /tf, /odom).",
        check=_extra_topics_check,
    ),
    ParameterSpec(
        "chunk_size",
        1 << 20,
        "MCAP chunk size in bytes (a chunk is also closed every flush_period).",
        min_value=4096,
        max_value=1 << 28,
    ),
    ParameterSpec(
        "flush_period",
        0.5,
        "Seconds between chunk closes: a crash loses at most this much.",
        min_value=0.05,
        max_value=1.0,
    ),
    ParameterSpec(
        "queue_size",
        200_000,
        "Messages queued for the writer thread at most (then counted as drops).",
        min_value=100,
        max_value=10_000_000,
    ),
    ParameterSpec("compression", "none", "MCAP chunk compression.", choices=("none", "lz4")),
    ParameterSpec(
        "subscription_depth",
        1000,
        "History depth of each recording subscription.",
        min_value=1,
        max_value=100_000,
        read_only=True,
    ),
    ParameterSpec(
        "report_wait",
        2.5,
        "Seconds STOP waits for each system's last /diagnostics report (its dropped frames), at most.",
        min_value=0.0,
        max_value=30.0,
    ),
    ParameterSpec(
        "foxglove_schemas",
        False,
        "Also write the sessions' markers, bodies, skeletons, /tf and /diagnostics in Foxglove's schemas, "
        "in <session>/foxglove/<session>_foxglove.mcap beside the bag.",
    ),
    ParameterSpec(
        "diagnostics_period",
        1.0,
        "Seconds between /diagnostics reports.",
        min_value=0.1,
        max_value=60.0,
        read_only=True,
    ),
)


class _Member(ControlPlaneMember):
    """Keeps the request being handled: the recorder needs its list of systems."""

    request: Control | None = None
    received_ns: int = 0

    def _on_control(self, msg: Control, info=None) -> None:
        # the same two parameters as the base: rclpy passes the MessageInfo it counts
        # lost requests with only to a callback that takes it
        self.request, self.received_ns = msg, time.time_ns()
        super()._on_control(msg, info)


class SessionRecorder(ToolNode):
    """Records the mocap topics of every announced system into one bag per session, started and stopped
    through the control plane like a system: this class answers START and STOP; the
    subscriptions and the bag are a :class:`~mocap4r2_tools.recorder_writer.RecorderWriter`,
    the systems' dropped frames a :class:`~mocap4r2_tools.recorder_reports.SystemReports`."""

    def __init__(self, **kwargs):
        super().__init__("session_recorder", SPECS, **kwargs)
        self._last: Summary | None = None
        self._failure = ""
        self._system_topics: dict[str, list[str]] = {}
        self._session_systems: frozenset[str] = frozenset()
        self._systems: dict[str, MocapSystemInfo] = {}
        self._rate_mark = (time.monotonic(), 0)
        self.writer = RecorderWriter(self, self.value("subscription_depth"))
        self.control = _Member(self, start=self._start, stop=self._stop, describe=self._describe)
        self.create_subscription(MocapSystemInfo, SYSTEMS_TOPIC, self._on_info, SYSTEMS_LISTENER_QOS)
        self.reports = SystemReports(self)
        for topic, type_name in CONTROL_TYPES.items():
            qos = {SYSTEMS_TOPIC: SYSTEMS_LISTENER_QOS, CONTROL_TOPIC: CONTROL_QOS, ACK_TOPIC: ACK_QOS}[topic]
            self.writer.subscribe(topic, type_name, qos)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        self.create_timer(self.value("diagnostics_period"), self._report)
        self.create_timer(1.0, self._resolve_extra_topics)
        self.control.announce()
        self.mark_ready()

    # ------------------------------------------------------------------ systems and topics
    def _on_info(self, info: MocapSystemInfo) -> None:
        if info.system == self.control.system:
            return
        self._systems[info.system] = info
        for topic, type_name in zip(info.topics, info.topic_types):
            if topic and type_name:
                self.writer.subscribe(topic, type_name)
        self._join_recording(info)

    def _join_recording(self, info: MocapSystemInfo) -> None:
        """A system of the session whose announcement reached the recorder only after
        START (discovery is not symmetric: the requester may see a system before the
        recorder does) has its topics added to the recording as soon as it is known."""
        if (
            self.writer.bag is None
            or info.system in self._system_topics
            or info.state.id == State.PRIMARY_STATE_FINALIZED
        ):
            return
        if self._session_systems and info.system not in self._session_systems:
            return
        topics = [t for t in info.topics if t in self.writer.subscribed]
        self._system_topics[info.system] = topics
        new = self.writer.add(topics, info.system)
        if new:
            self.get_logger().info(f"{info.system} joined the recording: {', '.join(new)}")

    def _resolve_extra_topics(self) -> None:
        writer = self.writer
        wanted = [t for t in self.value("extra_topics") if t not in writer.subscribed]
        if not wanted:
            return
        known = dict((name, types) for name, types in self.get_topic_names_and_types())
        for topic in wanted:
            types = known.get(topic)
            if types:
                writer.subscribe(topic, types[0])
                bag = writer.bag
                if bag is not None and topic in writer.recorded and topic not in bag.topics:
                    bag.add_topic(writer.spec(topic))

    # ------------------------------------------------------------------ control plane
    def _describe(self) -> MocapSystemInfo:
        info = MocapSystemInfo()
        info.type = "recorder"
        recording = self.writer.bag is not None
        info.state.id = State.PRIMARY_STATE_ACTIVE if recording else State.PRIMARY_STATE_INACTIVE
        info.state.label = STATE_LABELS[info.state.id]
        info.topics = [DIAGNOSTICS]
        info.topic_types = ["diagnostic_msgs/msg/DiagnosticArray"]
        return info

    def _start(self, session_id: str) -> Outcome:
        current = self.writer.bag
        if current is not None:
            if current.session_id == session_id:
                return Outcome(True, f"already recording to {current.file}")
            return Outcome(False, f"already recording session {current.session_id!r}; stop it first")
        problem = session_id_problem(session_id)
        if problem:
            return Outcome(False, f"not recording: {problem}")
        request = self.control.request
        addressed = [s for s in (request.systems if request is not None else []) if s != self.control.system]
        systems = addressed or [
            name for name, info in self._systems.items() if info.state.id != State.PRIMARY_STATE_FINALIZED
        ]
        system_topics: dict[str, list[str]] = {}
        for name in systems:
            info = self._systems.get(name)
            if info is not None:
                system_topics[name] = [t for t in info.topics if t in self.writer.subscribed]
        topics: dict[str, str] = {t: "" for t in CONTROL_TYPES}
        for name, names in system_topics.items():
            for topic in names:
                topics.setdefault(topic, name)
        for topic in self.value("extra_topics"):
            topics.setdefault(topic, "")
        bag = self.writer.session_bag(
            Path(os.path.expanduser(self.value("output_dir"))),
            session_id,
            topics,
            chunk_size=self.value("chunk_size"),
            flush_period=self.value("flush_period"),
            queue_size=self.value("queue_size"),
            compression=self.value("compression"),
            side=self._foxglove_side() if self.value("foxglove_schemas") else None,
            custom_data={
                "mocap4r2.session_id": session_id,
                "mocap4r2.systems": ",".join(sorted(system_topics)),
            },
        )
        try:
            bag.open()
        except (OSError, ValueError) as exc:
            return Outcome(False, f"not recording: {exc}")
        for warning in bag.schema_warnings:
            self.get_logger().warning(f"recorded without a schema: {warning}")
        # the session describes itself: the systems as they were announced, and this request
        for info in self._systems.values():
            bag.put(SYSTEMS_TOPIC, serialize_message(info), time.time_ns())
        if request is not None:
            bag.put(CONTROL_TOPIC, serialize_message(request), self.control.received_ns)
        self._system_topics = system_topics
        self.reports.start(system_topics)
        self._session_systems = frozenset(addressed)  # empty: every system
        self._failure = ""
        self.writer.record(bag, frozenset(topics))
        self.get_logger().info(f"recording session {session_id!r} to {bag.file} ({len(topics)} topics)")
        return Outcome(True, f"recording to {bag.file}")

    def _foxglove_side(self) -> Any:
        """The Foxglove file beside the session's bag (mocap4r2_tools.foxglove.mcap_file)."""
        from rclpy.serialization import deserialize_message

        from .foxglove.mcap_file import SideFile
        from .recorder_writer import message_class

        return SideFile(lambda data, type_name: deserialize_message(data, message_class(type_name)))

    def _close(self, wait_reports: float = 0.0) -> Summary | None:
        bag = self.writer.detach()
        if bag is None:
            return None
        if wait_reports > 0:
            waiting = [s for s, topics in self._system_topics.items() if any(t in bag.tracks for t in topics)]
            self.reports.wait(waiting, wait_reports)
        summary = bag.close(self.reports.stop(), self._system_topics)
        self._last = summary
        if summary.failure:
            self._failure = f"writing {bag.file} failed: {summary.failure}"
        self.get_logger().info(summary.describe())
        return summary

    def _stop(self) -> Outcome:
        if self.writer.bag is None:
            if self._failure:
                return Outcome(False, self._failure)
            return Outcome(True, "not recording")
        summary = self._close(wait_reports=self.value("report_wait"))
        if summary is None:  # closed meanwhile by another request
            return Outcome(True, "not recording")
        return Outcome(not summary.failure, summary.describe())

    # ------------------------------------------------------------------ diagnostics
    def _report(self) -> None:
        bag = self.writer.bag
        if bag is not None and bag.failure:
            # disk full or a size limit: keep what is on disk, say so until the next session
            self._close()
            self.control.announce()
        status = DiagnosticStatus()
        status.name = "session_recorder"
        status.hardware_id = self.control.system
        values: dict[str, str] = {}
        now = time.monotonic()
        if bag is not None and not bag.failure:
            total = sum(bag.counts.values())
            since, before = self._rate_mark
            rate = (total - before) / max(now - since, 1e-6)
            self._rate_mark = (now, total)
            try:
                size = bag.file.stat().st_size
            except OSError:
                size = 0
            status.level = DiagnosticStatus.OK
            status.message = f"recording {bag.session_id} at {rate:.0f} msg/s"
            values = {
                "session_id": bag.session_id,
                "path": str(bag.file),
                "size_bytes": str(size),
                "messages": str(total),
                "messages_per_s": f"{rate:.1f}",
                "queued": str(bag.queued),
                "queue_drops": str(bag.queue_drops),
            }
        elif self._failure:
            status.level = DiagnosticStatus.ERROR
            status.message = self._failure
        else:
            status.level = DiagnosticStatus.OK
            status.message = "idle"
            self._rate_mark = (now, 0)
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [status]
        self._diagnostics_pub.publish(array)

    def finish(self) -> None:
        """Leaving (Ctrl-C, SIGTERM): close the bag properly and say goodbye."""
        self._close()
        info_describe = self._describe

        def finalized() -> MocapSystemInfo:
            info = info_describe()
            info.state.id = State.PRIMARY_STATE_FINALIZED
            info.state.label = STATE_LABELS[info.state.id]
            return info

        self.control._describe = finalized
        self.control.announce(last=True)
        self.reports.close()


def main(args: list[str] | None = None) -> int:
    """Entry point of the ``session_recorder`` executable; returns the process exit status."""
    # a file size limit must surface as an OSError the recorder reports, not kill it
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from mocap4r2_control.spin import run_node

    # one thread (run_node's SingleThreadedExecutor): far less CPU per callback than the
    # multi-threaded one, which decides whether thousands of messages per second fit
    # (rclpy's experimental EventsExecutor, as shipped with Kilted, let no signal through
    # and served none of these subscriptions here)
    return run_node(SessionRecorder, SessionRecorder.finish, args, threads=1)
