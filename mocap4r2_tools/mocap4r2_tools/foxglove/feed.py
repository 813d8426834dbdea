"""What stands between the subscriptions and the Foxglove sinks: bounded, and waiting for
nobody. No rclpy here (the deserializer is passed in), so it is tested alone.

A subscription callback only stores the serialized bytes (:meth:`Feed.put`, O(1), never
blocks). Scene sources (Markers, RigidBodies, Skeletons) keep one slot each: a newer
message replaces one not sent yet, counted as ``coalesced``; Foxglove draws the latest
frame at the display's rate, so the newest pose is what matters, and the memory is one
message per source whatever the rates. /tf and /diagnostics keep every message in a
bounded queue (/tf: each publisher has its own children, so none may replace another's);
when it is full the oldest is dropped and counted. The sender thread (:meth:`Feed.take`)
takes what is due, at most ``max_rate`` times a second per scene source (0: every
message), and converts it outside every callback.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Counters:
    """What the feed did since start: messages received, scene messages replaced before
    they were sent (``coalesced``), queued messages dropped because their queue was full,
    messages that could not be converted (``bad``), and records handed to the sinks."""

    received: int = 0
    coalesced: int = 0
    dropped: int = 0
    bad: int = 0
    sent: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "coalesced": self.coalesced,
            "dropped": self.dropped,
            "bad": self.bad,
            "sent": self.sent,
            "sent_per_topic": dict(self.per_topic),
        }


@dataclass
class Pending:
    """One message waiting: its topic, ROS type name, serialized bytes and arrival
    (monotonic s)."""

    topic: str
    type_name: str
    data: bytes
    arrival: float


class Feed:
    """Latest-per-source slots for scene topics and one bounded queue for the others."""

    def __init__(self, max_rate: float = 60.0, queue_size: int = 256):
        self.max_rate = max_rate
        self.counters = Counters()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._slots: dict[str, Pending] = {}
        self._queue: collections.deque[Pending] = collections.deque(maxlen=max(1, queue_size))
        self._last_sent: dict[str, float] = {}

    def put(self, topic: str, type_name: str, data: bytes, conflate: bool) -> None:
        """From a subscription callback: store and return at once."""
        item = Pending(topic, type_name, data, time.monotonic())
        with self._lock:
            counters = self.counters
            counters.received += 1
            if conflate:
                if topic in self._slots:
                    counters.coalesced += 1
                self._slots[topic] = item
            else:
                if len(self._queue) == self._queue.maxlen:
                    counters.dropped += 1  # the deque drops its oldest on append
                self._queue.append(item)
        self._wake.set()

    def take(self, timeout: float) -> list[Pending]:
        """For the sender thread: what is due now, waiting up to ``timeout`` s for
        something to come. A scene slot is due once ``1 / max_rate`` s passed since its
        topic was last sent; a slot not due yet stays (and may still be replaced)."""
        self._wake.wait(timeout)
        now = time.monotonic()
        period = 1.0 / self.max_rate if self.max_rate > 0 else 0.0
        due: list[Pending] = []
        next_due = None
        with self._lock:
            self._wake.clear()
            while self._queue:
                due.append(self._queue.popleft())
            for topic in list(self._slots):
                ready_at = self._last_sent.get(topic, -1e18) + period
                if now >= ready_at:
                    due.append(self._slots.pop(topic))
                    self._last_sent[topic] = now
                else:
                    next_due = ready_at if next_due is None else min(next_due, ready_at)
        if next_due is not None and not due:
            # something is waiting for its period: sleep until then rather than spin
            time.sleep(min(timeout, max(0.0, next_due - time.monotonic())))
            self._wake.set()
        elif next_due is not None:
            self._wake.set()
        return due

    def wake(self) -> None:
        """Lets a waiting :meth:`take` return (shutdown)."""
        self._wake.set()
