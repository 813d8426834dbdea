"""The writing half of ``session_recorder``: its raw subscriptions and the session's bag.

Subscriptions are raw (the serialized bytes, never a message object) and are created as
soon as a topic is known, so they are matched before a session starts. A callback only
appends the bytes and the receive time to the bag's bounded queue when its topic is
recorded; the bag's writer thread does the disk work
(:mod:`mocap4r2_tools.recording.bag_writer`).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from mocap4r2_control.qos import keep_last

from .recording.bag_writer import SessionBag, TopicSpec, qos_profile

#: messages one callback takes from its subscription at most (the rest: next callback)
_BATCH = 256


def take_waiting(subscription: Any, cls: Any, limit: int = _BATCH) -> Iterator[bytes]:
    """The serialized messages already waiting on a raw ``subscription`` (up to
    ``limit``), taken without going back to the executor: the executor costs far more per
    callback than a raw callback's own work, so one callback takes them all."""
    handle = subscription.handle
    for _ in range(limit):
        with handle:
            taken = handle.take_message(cls, True)
        if taken is None:
            return
        yield taken[0]


def message_class(type_name: str) -> Any:
    """The installed message class of a type name (``pkg/msg/Name``)."""
    package, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


class RecorderWriter:
    """Raw subscriptions by topic, and the bag (while a session records) that the
    recorded ones write to."""

    def __init__(self, node: Node, depth: int):
        self.node = node
        self.depth = depth
        self.bag: SessionBag | None = None
        self.recorded: frozenset[str] = frozenset()
        self.subscribed: dict[str, str] = {}  # topic -> type
        self._qos: dict[str, QoSProfile] = {}
        self._subs: list[Any] = []

    def qos_for(self, topic: str) -> QoSProfile:
        """Match the publishers: reliable unless one of them is best effort, transient
        local only if all of them are (rosbag2 chooses the same way)."""
        infos = self.node.get_publishers_info_by_topic(topic)
        reliable = all(i.qos_profile.reliability != ReliabilityPolicy.BEST_EFFORT for i in infos)
        latched = bool(infos) and all(
            i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos
        )
        return keep_last(self.depth, reliable=reliable, transient_local=latched)

    def subscribe(self, topic: str, type_name: str, qos: QoSProfile | None = None) -> None:
        log = self.node.get_logger()
        if topic in self.subscribed:
            if self.subscribed[topic] != type_name:
                log.warning(
                    f"{topic} announced as {type_name}, already recorded as "
                    f"{self.subscribed[topic]}; keeping the first"
                )
            return
        try:
            cls = message_class(type_name)
        except (ImportError, AttributeError, ValueError) as exc:
            log.error(f"cannot record {topic}: type {type_name!r} is not installed ({exc})")
            return
        qos = qos or self.qos_for(topic)

        holder: list[Any] = []

        def received(data: bytes, topic: str = topic) -> None:
            # the hot path: no deserialization, no disk, never blocks. The executor costs
            # far more per callback than the rest, so one callback also takes every other
            # message already waiting on this subscription (up to a batch).
            bag = self.bag
            record = bag is not None and topic in self.recorded
            if record and bag is not None:
                bag.put(topic, data, time.time_ns())
            for waiting in take_waiting(holder[0], cls):
                if record and bag is not None:
                    bag.put(topic, waiting, time.time_ns())

        sub = self.node.create_subscription(cls, topic, received, qos, raw=True)
        holder.append(sub)
        self._subs.append(sub)
        self.subscribed[topic] = type_name
        self._qos[topic] = qos

    def spec(self, topic: str, system: str = "") -> TopicSpec:
        """How ``topic`` is written in the bag: its type and the QoS it was received with."""
        qos = self._qos.get(topic)
        reliable = qos is None or qos.reliability != ReliabilityPolicy.BEST_EFFORT
        latched = qos is not None and qos.durability == DurabilityPolicy.TRANSIENT_LOCAL
        depth = qos.depth if qos is not None else 10
        return TopicSpec(topic, self.subscribed[topic], qos_profile(reliable, latched, depth), system)

    def session_bag(
        self, output_dir: Path, session_id: str, topics: dict[str, str], **options: Any
    ) -> SessionBag:
        """A bag (not opened yet) of the subscribed ``topics`` (topic -> system);
        ``options`` are SessionBag's."""
        specs = [self.spec(t, s) for t, s in topics.items() if t in self.subscribed]
        return SessionBag(output_dir, session_id, specs, **options)

    def record(self, bag: SessionBag, topics: frozenset[str]) -> None:
        """From now on the callbacks of ``topics`` write to ``bag``."""
        self.recorded = topics
        self.bag = bag

    def add(self, topics: list[str], system: str = "") -> list[str]:
        """Record ``topics`` too in the open bag; returns those that were not recorded yet."""
        bag = self.bag
        if bag is None:
            return []
        new = [t for t in topics if t not in self.recorded]
        for topic in new:
            bag.add_topic(self.spec(topic, system))
        self.recorded = self.recorded | frozenset(new)
        return new

    def detach(self) -> SessionBag | None:
        """Stop recording; the bag (None when none was open) is the caller's to close."""
        bag, self.bag = self.bag, None
        self.recorded = frozenset()
        return bag
