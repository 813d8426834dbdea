"""The control plane of the mocap4r2 architecture: /mocap4r2/systems, /mocap4r2/control,
/mocap4r2/control_ack.

``ControlPlaneMember`` is the system side (used by every MocapSystemNode and by the
AuxiliarSystem): it announces the system and answers START/STOP requests addressed to
it, once per request id. ``ControlClient`` is the requester side used by the CLI, the
TUI, the demo and tests.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lifecycle_msgs.msg import State
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.subscription import MessageInfo

from mocap4r2_interfaces.msg import Control, ControlAck, MocapSystemInfo

from .qos import keep_last
from .timebase import time_msg

SYSTEMS_TOPIC = "/mocap4r2/systems"
CONTROL_TOPIC = "/mocap4r2/control"
ACK_TOPIC = "/mocap4r2/control_ack"

# Every system keeps its last announcement for late joiners.
SYSTEMS_QOS = keep_last(1, transient_local=True)
# A listener's history is shared by every system (the topic has no key), so it must be
# deep enough for all of their replays at once; depth 1 would keep only one system.
SYSTEMS_LISTENER_QOS = keep_last(1000, transient_local=True)
# Requests are not replayed to late joiners: an old START must not start a system that
# comes up later. The history is the request queue of a system (and the requester's send
# queue): a burst of 1000 requests must fit while a system is busy configuring, so it is
# deeper than that; what still overflows is counted from the publishers' sequence numbers.
CONTROL_QOS = keep_last(2048)
# every system answers every request of a burst: a requester may receive systems x burst acks
ACK_QOS = keep_last(4096)

# Limits of a request's fields: over them a request is refused with the reason (and the
# field is neither echoed nor logged), so one request cannot cost megabytes in acks,
# announcements and the log.
MAX_SESSION_ID_BYTES = 128
MAX_SYSTEMS = 256
MAX_REQUEST_ID_BYTES = 128
# A request id is remembered this long, so a repeat within it is never answered twice;
# at most MAX_REMEMBERED ids (about 20 MB); beyond that new requests are refused rather
# than an id forgotten early.
REMEMBER_SECONDS = 600.0
MAX_REMEMBERED = 100_000

COMMAND_NAMES = {Control.START: "START", Control.STOP: "STOP"}
STATE_LABELS = {
    State.PRIMARY_STATE_UNKNOWN: "unknown",
    State.PRIMARY_STATE_UNCONFIGURED: "unconfigured",
    State.PRIMARY_STATE_INACTIVE: "inactive",
    State.PRIMARY_STATE_ACTIVE: "active",
    State.PRIMARY_STATE_FINALIZED: "finalized",
}


@dataclass
class Outcome:
    """What a system's start or stop handler reports back."""

    success: bool
    message: str = ""
    reached_at: float = field(default_factory=time.time)


class ControlPlaneMember:
    """The system side of the control plane.

    ``start(session_id)`` and ``stop()`` are the system's handlers; ``describe()`` gives
    the MocapSystemInfo to announce (its ``system`` is filled here). Requests are
    handled in the executor thread that delivers them.
    """

    def __init__(
        self,
        node: Node,
        *,
        start: Callable[[str], Outcome],
        stop: Callable[[], Outcome],
        describe: Callable[[], MocapSystemInfo],
        remember_seconds: float = REMEMBER_SECONDS,
        max_remembered: int = MAX_REMEMBERED,
    ):
        self.node = node
        self.system = node.get_fully_qualified_name()
        self._start = start
        self._stop = stop
        self._describe = describe
        # request id -> monotonic time of its answer, oldest first
        self._answered: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._remember_seconds = remember_seconds
        self._max_remembered = max_remembered
        self._lock = threading.Lock()
        # last publication sequence number per requester (a gap is a request the queue lost)
        self._last_sequence: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._logged: set[str] = set()
        self.lost = 0  # requests that never reached this system (queue overflow)
        self.refused = 0  # requests refused for a limit (sizes, too many remembered ids)
        self.session_id = ""
        self._info_pub = node.create_publisher(MocapSystemInfo, SYSTEMS_TOPIC, SYSTEMS_QOS)
        self._ack_pub = node.create_publisher(ControlAck, ACK_TOPIC, ACK_QOS)
        self._sub = node.create_subscription(Control, CONTROL_TOPIC, self._on_control, CONTROL_QOS)

    def counters(self) -> dict[str, int]:
        """For diagnostics: requests lost before this system could read them, and refused."""
        return {"control_requests_lost": self.lost, "control_requests_refused": self.refused}

    def announce(self, last: bool = False) -> MocapSystemInfo:
        """Publish the current MocapSystemInfo. ``last``: the process is about to exit,
        so wait (briefly) until every listener has acknowledged it, or it may be lost
        with the participant."""
        info = self._describe()
        info.system = self.system
        info.session_id = self.session_id
        self._info_pub.publish(info)
        if last:
            self._info_pub.wait_for_all_acked(Duration(seconds=1.0))
        return info

    def addressed(self, msg: Control) -> bool:
        return not msg.systems or self.system in msg.systems

    def _on_control(self, msg: Control, info: MessageInfo) -> None:
        # two parameters: rclpy then passes the MessageInfo (publication sequence numbers)
        # never let a bad request take the node down
        try:
            self._count_lost(info)
            self._handle(msg)
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            self.node.get_logger().error(f"control request {_short(msg.request_id)!r} failed: {exc!r}")
            self._ack(msg, Outcome(False, f"internal error: {exc}"))

    def _log_once(self, kind: str, text: str) -> None:
        """Each kind of bad request is logged once; the counters keep the rest."""
        if kind not in self._logged:
            self._logged.add(kind)
            self.node.get_logger().warning(text + " (logged once; counted in diagnostics)")

    def _count_lost(self, info: MessageInfo | None) -> None:
        """A gap in a requester's publication sequence numbers is requests that the queue
        dropped (DDS middlewares without sequence numbers report 0: nothing counted)."""
        if not info:
            return
        sequence = info.get("publication_sequence_number") or 0
        gid = (info.get("publisher_gid") or {}).get("data")
        if not sequence or gid is None:
            return
        gid = bytes(gid)
        last = self._last_sequence.pop(gid, None)
        self._last_sequence[gid] = sequence
        while len(self._last_sequence) > 64:
            self._last_sequence.popitem(last=False)
        if last is not None and sequence > last + 1:
            self.lost += sequence - last - 1
            self._log_once(
                "lost",
                f"{sequence - last - 1} control requests were lost before this system could "
                f"read them (its queue holds {CONTROL_QOS.depth})",
            )

    def _limit_problem(self, msg: Control) -> str | None:
        if len(msg.session_id.encode()) > MAX_SESSION_ID_BYTES:
            return (
                f"session_id is {len(msg.session_id.encode())} bytes, at most {MAX_SESSION_ID_BYTES} allowed"
            )
        if len(msg.systems) > MAX_SYSTEMS:
            return f"systems lists {len(msg.systems)} entries, at most {MAX_SYSTEMS} allowed"
        return None

    def _remember(self, request_id: str) -> str | None:
        """Records an answer to ``request_id``: None, or why it is not answered."""
        now = time.monotonic()
        with self._lock:
            answered = self._answered
            while answered:
                when = next(iter(answered.values()))
                if now - when <= self._remember_seconds:
                    break
                answered.popitem(last=False)
            if request_id in answered:
                return "repeat"
            if len(answered) >= self._max_remembered:
                return "full"
            answered[request_id] = now
        return None

    def _handle(self, msg: Control) -> None:
        if not self.addressed(msg):
            return
        log = self.node.get_logger()
        if not msg.request_id:
            log.warning(
                f"ignoring a control request from {_short(msg.requester) or 'unknown'} without request_id "
                "(an answer could not be matched to it)"
            )
            return
        if len(msg.request_id.encode()) > MAX_REQUEST_ID_BYTES:
            # an answer would have to echo it: ignored, counted
            self.refused += 1
            self._log_once(
                "request_id",
                f"ignoring control requests whose request_id is over "
                f"{MAX_REQUEST_ID_BYTES} bytes ({len(msg.request_id.encode())} bytes)",
            )
            return
        seen = self._remember(msg.request_id)
        if seen == "repeat":
            log.info(f"request {msg.request_id} was already answered; ignoring the repeat")
            return
        if seen == "full":
            self.refused += 1
            self._log_once(
                "full",
                f"{self._max_remembered} request ids answered in the last "
                f"{self._remember_seconds:.0f} s; refusing more",
            )
            self._ack(
                msg,
                Outcome(
                    False, f"too many requests: {self._max_remembered} in {self._remember_seconds:.0f} s"
                ),
                echo_session=False,
            )
            return
        problem = self._limit_problem(msg)
        if problem is not None:
            self.refused += 1
            self._log_once(
                "limits", f"refusing request {msg.request_id} from {_short(msg.requester)}: {problem}"
            )
            self._ack(msg, Outcome(False, problem), echo_session=False)
            return
        command = COMMAND_NAMES.get(msg.command)
        if command is None:
            log.warning(f"request {msg.request_id}: unknown command {msg.command}")
            self._ack(
                msg,
                Outcome(False, f"unknown command {msg.command} (START={Control.START}, STOP={Control.STOP})"),
            )
            return
        log.info(
            f"{command} requested by {_short(msg.requester) or 'unknown'} (request {msg.request_id}, "
            f"session {msg.session_id!r})"
        )
        if msg.command == Control.START:
            # set before starting, so the 'active' announcement already names the session
            previous, self.session_id = self.session_id, msg.session_id
            outcome = self._start(msg.session_id)
            if not outcome.success:
                self.session_id = previous
        else:
            outcome = self._stop()
        self._ack(msg, outcome)
        self.announce()

    def _ack(self, msg: Control, outcome: Outcome, echo_session: bool = True) -> None:
        ack = ControlAck()
        ack.request_id = msg.request_id
        within = len(msg.session_id.encode()) <= MAX_SESSION_ID_BYTES
        ack.session_id = msg.session_id if echo_session and within else ""
        ack.system = self.system
        ack.command = msg.command
        ack.success = outcome.success
        ack.message = outcome.message
        ack.stamp = time_msg(outcome.reached_at)
        self._ack_pub.publish(ack)

    def destroy(self) -> None:
        self.node.destroy_subscription(self._sub)
        self.node.destroy_publisher(self._ack_pub)
        self.node.destroy_publisher(self._info_pub)


def _short(text: str, limit: int = 64) -> str:
    """A field from the wire, cut for a log line."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass
class ControlResult:
    """What one START/STOP request got back: the acks that arrived before the timeout and the systems that
    were expected to answer."""

    request_id: str
    command: int
    acks: list[ControlAck]
    expected: list[str]

    @property
    def missing(self) -> list[str]:
        answered = {a.system for a in self.acks}
        return [s for s in self.expected if s not in answered]

    @property
    def ok(self) -> bool:
        return bool(self.expected) and not self.missing and all(a.success for a in self.acks)


class ControlClient:
    """Requester side of the control plane on a given node (spun elsewhere).

    ``systems()`` lists the systems announced on /mocap4r2/systems (late joiners get each
    system's last announcement); ``start``/``stop`` publish a request and wait for the
    ack of every addressed system.
    """

    def __init__(self, node: Node):
        self.node = node
        self._lock = threading.Condition()
        self._systems: dict[str, MocapSystemInfo] = {}
        self._system_seen: dict[str, float] = {}
        self._acks: dict[str, list[ControlAck]] = collections.defaultdict(list)
        self._control_pub = node.create_publisher(Control, CONTROL_TOPIC, CONTROL_QOS)
        self._systems_sub = node.create_subscription(
            MocapSystemInfo, SYSTEMS_TOPIC, self._on_info, SYSTEMS_LISTENER_QOS
        )
        self._ack_sub = node.create_subscription(ControlAck, ACK_TOPIC, self._on_ack, ACK_QOS)

    def _on_info(self, info: MocapSystemInfo) -> None:
        with self._lock:
            self._systems[info.system] = info
            self._system_seen[info.system] = time.monotonic()
            self._lock.notify_all()

    def _on_ack(self, ack: ControlAck) -> None:
        with self._lock:
            self._acks[ack.request_id].append(ack)
            self._lock.notify_all()

    # ---------------------------------------------------------------- discovery
    def systems(self, wait: float = 0.0, include_finalized: bool = False) -> dict[str, MocapSystemInfo]:
        """Known systems after waiting ``wait`` seconds for announcements to arrive."""
        if wait > 0:
            time.sleep(wait)
        with self._lock:
            return {
                k: v
                for k, v in sorted(self._systems.items())
                if include_finalized or v.state.id != State.PRIMARY_STATE_FINALIZED
            }

    def wait_for_systems(
        self,
        names: Iterable[str] = (),
        count: int = 1,
        timeout: float = 5.0,
        settle: float = 1.0,
        min_wait: float = 0.0,
    ) -> dict[str, MocapSystemInfo]:
        """Wait until the named systems (or at least ``count`` systems) are known, then
        until no new system has appeared for ``settle`` seconds (discovery delivers the
        late-joiner replay of each system separately), and at least ``min_wait`` seconds
        in all (to list every system, as opposed to waiting for given ones)."""
        names = list(names)
        start = time.monotonic()
        deadline = start + max(timeout, min_wait)
        with self._lock:
            while True:
                known = self._systems
                satisfied = all(n in known for n in names) if names else len(known) >= count
                now = time.monotonic()
                last_new = max(self._system_seen.values(), default=start)
                if satisfied and now - max(last_new, start) >= settle and now - start >= min_wait:
                    break
                if now >= deadline and (satisfied or now >= deadline + settle):
                    break
                self._lock.wait(0.05)
        return self.systems()

    # ---------------------------------------------------------------- requests
    def request(
        self,
        command: int,
        systems: Iterable[str] = (),
        *,
        session_id: str = "",
        timeout: float = 10.0,
        expected: Iterable[str] | None = None,
        request_id: str | None = None,
    ) -> ControlResult:
        """Publish one request and wait for the acks of ``expected`` systems (default:
        the addressed ones, or every known non-finalized system when none is named)."""
        systems = list(systems)
        if expected is None:
            expected = systems or list(self.systems().keys())
        expected = list(expected)
        msg = Control()
        msg.command = command
        msg.request_id = request_id or uuid.uuid4().hex
        msg.session_id = session_id
        msg.requester = self.node.get_fully_qualified_name()
        msg.systems = systems
        msg.stamp = time_msg()
        self._control_pub.publish(msg)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                answered = {a.system for a in self._acks.get(msg.request_id, [])}
                if expected and all(s in answered for s in expected):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            acks = list(self._acks.get(msg.request_id, []))
        return ControlResult(request_id=msg.request_id, command=command, acks=acks, expected=expected)

    def start(
        self, systems: Iterable[str] = (), session_id: str = "", timeout: float = 10.0
    ) -> ControlResult:
        return self.request(Control.START, systems, session_id=session_id, timeout=timeout)

    def stop(self, systems: Iterable[str] = (), session_id: str = "", timeout: float = 10.0) -> ControlResult:
        return self.request(Control.STOP, systems, session_id=session_id, timeout=timeout)

    def destroy(self) -> None:
        self.node.destroy_subscription(self._systems_sub)
        self.node.destroy_subscription(self._ack_sub)
        self.node.destroy_publisher(self._control_pub)


class ControlSession:
    """A ControlClient with its own rclpy context, node and spinning thread, for
    programs that are not nodes themselves (the CLI, the demo, scripts)::

        with ControlSession() as client:
            client.wait_for_systems(count=1)
            result = client.start(session_id="trial-01")
    """

    def __init__(self, node_name: str | None = None, args: list[str] | None = None):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self._rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(args=args, context=self.context)
        name = node_name or f"mocap4r2_client_{uuid.uuid4().hex[:8]}"
        self.node = rclpy.create_node(name, context=self.context)
        self.client = ControlClient(self.node)
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="mocap4r2-client", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        # the context may be shut down while spinning: that ends the thread, nothing to report
        with contextlib.suppress(Exception):
            self._executor.spin()

    def __enter__(self) -> ControlClient:
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        if self.context.ok():
            self._rclpy.shutdown(context=self.context)
        self._thread.join(timeout=2.0)
