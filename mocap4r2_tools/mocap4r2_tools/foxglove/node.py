"""Node `foxglove`: every system's data live in Foxglove, through foxglove-sdk's WebSocket
server (ws://127.0.0.1:8765 by default; Foxglove's "Open connection" -> Foxglove WebSocket).

Sources, like marker_viz's: the systems announced on /mocap4r2/systems (``discover``) and
the namespaces in ``systems``; /tf and /diagnostics. Subscriptions are raw and best
effort: a callback stores the bytes in the :class:`~.feed.Feed` and returns, so a driver
never waits for this node and this node never waits for a client. A sender thread
converts what is due (:mod:`.records`) and logs it on the SDK's channels; the SDK keeps
at most ``client_backlog`` messages per client and drops that client's oldest when it
falls behind, so a slow client loses messages and no one else does.

Topics: ``/foxglove/<ns>/markers``, ``rigid_bodies``, ``skeletons`` (SceneUpdate),
``/foxglove/tf`` (FrameTransforms), ``/foxglove/diagnostics`` (Log),
``/foxglove/stats/<system>`` (rate, latency, dropped frames, tracking ratio, JSON) and
``/foxglove/node`` (this node's own counters, JSON), each logged at its source's header
stamp. See docs/foxglove.md.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import foxglove
from foxglove.websocket import ServerListener
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message

from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS, SYSTEMS_TOPIC
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.tf_out import TF_QOS
from mocap4r2_interfaces.msg import MocapSystemInfo

from ..marker_viz import PARAMETERS as VIZ_PARAMETERS
from ..recorder_writer import message_class, take_waiting
from ..tool_node import ToolNode, run_tool
from . import convert
from .feed import Feed
from .nodelay import set_nodelay
from .records import Record, SchemaSpec, records_raw

_STYLE = ("marker_size", "axis_length", "line_width", "text_size", "lifetime")
PARAMETERS = (
    ParameterSpec(
        "host",
        "127.0.0.1",
        "Address of the WebSocket server (beyond loopback: any client may connect).",
        read_only=True,
    ),
    ParameterSpec(
        "port",
        8765,
        "TCP port of the WebSocket server (0: any free one, logged).",
        min_value=0,
        max_value=65535,
        read_only=True,
    ),
    ParameterSpec(
        "systems",
        [],
        "Namespaces of systems to show (e.g. ['/sim']), besides the discovered ones.",
        read_only=True,
    ),
    ParameterSpec("discover", True, "Also show every system announced on /mocap4r2/systems.", read_only=True),
    ParameterSpec("tf", True, "Forward /tf as FrameTransforms.", read_only=True),
    ParameterSpec("diagnostics", True, "Forward /diagnostics as Log and figures.", read_only=True),
    ParameterSpec(
        "max_rate",
        60.0,
        "Largest number of scene updates per second and source; a newer frame replaces an unsent one "
        "(0: every frame).",
        min_value=0.0,
        max_value=10000.0,
    ),
    ParameterSpec(
        "queue_size",
        256,
        "Messages of /tf and /diagnostics held for the sender before the oldest is dropped.",
        min_value=1,
        max_value=100000,
        read_only=True,
    ),
    ParameterSpec(
        "client_backlog",
        256,
        "Messages held per client before that client's oldest is dropped.",
        min_value=8,
        max_value=100000,
        read_only=True,
    ),
    ParameterSpec(
        "stats_period",
        1.0,
        "Period of this node's counters on /foxglove/node, s.",
        min_value=0.1,
        max_value=3600.0,
    ),
    # what is drawn and how big: marker_viz's parameters, the same names and checks
    *(spec for spec in VIZ_PARAMETERS if spec.name in _STYLE),
)

_SCENE_SUFFIXES = (
    ("markers", convert.MARKERS),
    ("rigid_bodies", convert.RIGID_BODIES),
    ("skeletons", convert.SKELETONS),
)
NODE_TOPIC = f"{convert.PREFIX}/node"


class _Listener(ServerListener):
    """Counts the clients subscribed (the SDK tells subscriptions, not connections), and
    turns Nagle's algorithm off for a client when it subscribes (:mod:`.nodelay`)."""

    def __init__(self) -> None:
        self.clients: dict[int, int] = {}  # client id -> channels subscribed
        self.port = 0  # the server's, once it listens
        self.nodelay = 0  # client connections whose TCP_NODELAY was set
        self._lock = threading.Lock()

    def on_subscribe(self, client: Any, channel: Any) -> None:
        changed = set_nodelay(self.port) if self.port else 0
        with self._lock:
            self.clients[client.id] = self.clients.get(client.id, 0) + 1
            self.nodelay += changed

    def on_unsubscribe(self, client: Any, channel: Any) -> None:
        with self._lock:
            left = self.clients.get(client.id, 0) - 1
            if left > 0:
                self.clients[client.id] = left
            else:
                self.clients.pop(client.id, None)


class FoxgloveNode(ToolNode):
    """Serves the systems' markers, bodies, skeletons, /tf and /diagnostics to Foxglove."""

    def __init__(self, **kwargs: Any):
        super().__init__("foxglove", PARAMETERS, **kwargs)
        # what destroy_node releases exists from the start: rclpy destroys a node whose
        # __init__ failed (a busy port) too
        self._stop = threading.Event()
        self._sender: threading.Thread | None = None
        self._server: Any = None
        cfg = self.values()
        self._style = self._make_style()
        self.feed = Feed(cfg["max_rate"], cfg["queue_size"])
        self._stats_period = cfg["stats_period"]
        self._sdk_context = foxglove.Context()
        self._channels: dict[str, foxglove.Channel] = {}
        self._listener = _Listener()
        try:
            self._server = foxglove.start_server(
                name="mocap4r2",
                host=cfg["host"],
                port=cfg["port"],
                context=self._sdk_context,
                server_listener=self._listener,
                message_backlog_size=cfg["client_backlog"],
            )
        except Exception as exc:  # the SDK's error for a busy port or a bad address
            raise RuntimeError(
                f"cannot serve a Foxglove WebSocket on {cfg['host']}:{cfg['port']}: {exc}"
            ) from None
        self.port = self._server.port
        self._listener.port = self.port
        self._node_channel = self._channel(
            NODE_TOPIC,
            SchemaSpec(
                "mocap4r2.FoxgloveNode", "jsonschema", json.dumps({"type": "object"}).encode(), "json"
            ),
        )
        self._subscribed: set[str] = set()
        self._qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
        for ns in cfg["systems"]:
            base = ns.rstrip("/")
            for suffix, type_name in _SCENE_SUFFIXES:
                self._subscribe(f"{base}/{suffix}", type_name)
        if cfg["discover"]:
            self.create_subscription(MocapSystemInfo, SYSTEMS_TOPIC, self._on_system, SYSTEMS_LISTENER_QOS)
        if cfg["tf"]:
            self._subscribe("/tf", convert.TF, TF_QOS)
        if cfg["diagnostics"]:
            self._subscribe("/diagnostics", convert.DIAGNOSTICS, 100)
        self._sender = threading.Thread(target=self._send_loop, name="foxglove-sender", daemon=True)
        self._sender.start()
        self.mark_ready()
        self.get_logger().info(
            f"serving Foxglove WebSocket on ws://{cfg['host']}:{self.port} "
            f"({', '.join(cfg['systems']) or 'no fixed system'}"
            + (" and every announced system" if cfg["discover"] else "")
            + ")"
        )

    def _make_style(self) -> convert.Style:
        cfg = self.values()
        return convert.Style(
            marker_size=cfg["marker_size"],
            axis_length=cfg["axis_length"],
            line_width=cfg["line_width"],
            text_size=cfg["text_size"],
            lifetime=cfg["lifetime"],
        )

    def on_parameters_changed(self, names: set[str]) -> None:
        self._style = self._make_style()
        self.feed.max_rate = self.value("max_rate")
        self._stats_period = self.value("stats_period")

    # ------------------------------------------------------------------ sources
    def _on_system(self, info: MocapSystemInfo) -> None:
        for topic, type_name in zip(info.topics, info.topic_types):
            if convert.source_kind(type_name) == "scene":
                self._subscribe(topic, type_name)

    def _subscribe(self, topic: str, type_name: str, qos: Any = None) -> None:
        topic = self.resolve_topic_name(topic)
        if topic in self._subscribed:
            return
        self._subscribed.add(topic)
        cls = message_class(type_name)
        conflate = convert.source_kind(type_name) == "scene"
        feed = self.feed
        holder: list[Any] = []

        def received(data: bytes) -> None:
            feed.put(topic, type_name, data, conflate)
            for waiting in take_waiting(holder[0], cls):  # one callback for all that waits
                feed.put(topic, type_name, waiting, conflate)

        try:
            holder.append(self.create_subscription(cls, topic, received, qos or self._qos, raw=True))
        except Exception as exc:  # e.g. the topic exists here with another type
            self.get_logger().error(f"cannot show {topic}: {exc}")
            return
        self.get_logger().info(f"showing {topic}")

    # ------------------------------------------------------------------ sending
    def _channel(self, topic: str, schema: SchemaSpec) -> foxglove.Channel:
        channel = self._channels.get(topic)
        if channel is None:
            channel = foxglove.Channel(
                topic,
                schema=foxglove.Schema(name=schema.name, encoding=schema.encoding, data=schema.data),
                message_encoding=schema.message_encoding,
                context=self._sdk_context,
            )
            self._channels[topic] = channel
        return channel

    def _send_loop(self) -> None:
        """The sender thread: converts and logs what the feed has due, and the counters
        every ``stats_period`` (from this thread, so a report follows exactly the records
        it counts on every client's connection)."""
        counters = self.feed.counters
        next_report = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_report:
                self._report()
                next_report = now + self._stats_period
            for item in self.feed.take(min(0.2, max(0.0, next_report - now))):
                try:
                    out: list[Record] = records_raw(
                        item.topic, item.type_name, item.data, _deserialize, self._style
                    )
                except Exception as exc:  # noqa: BLE001 - a malformed message is counted, never fatal
                    counters.bad += 1
                    self.get_logger().warning(
                        f"{item.topic}: cannot convert ({exc})", throttle_duration_sec=5.0
                    )
                    continue
                for record in out:
                    self._channel(record.topic, record.schema).log(record.data, log_time=record.log_time)
                    counters.sent += 1
                    counters.per_topic[record.topic] = counters.per_topic.get(record.topic, 0) + 1

    def _report(self) -> None:
        figures = self.feed.counters.as_dict()
        figures["clients"] = len(self._listener.clients)
        figures["nodelay_connections"] = self._listener.nodelay
        figures["timestamp"] = {"sec": int(time.time()), "nsec": 0}
        self._node_channel.log(json.dumps(figures).encode(), log_time=time.time_ns())
        if figures["bad"] or figures["dropped"]:
            self.get_logger().warning(f"counters: {figures}", throttle_duration_sec=30.0)

    def destroy_node(self) -> None:
        self._stop.set()
        if self._sender is not None:
            self.feed.wake()
            self._sender.join(timeout=2.0)
        if self._server is not None:
            self._server.stop()
        super().destroy_node()


def _deserialize(data: bytes, type_name: str) -> Any:
    return deserialize_message(data, message_class(type_name))


def main(args: list[str] | None = None) -> int:
    """Entry point of the ``foxglove`` executable; returns the process exit status."""
    return run_tool(FoxgloveNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
