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

A scene frame is sent as soon as it is allowed, never at a tick: when its topic was last
sent ``1 / max_rate`` s ago or more it is due at once (the put wakes the sender), and
otherwise it is due at the moment that period ends (the sender waits until then, and the
frame it takes is the newest that came meanwhile). So a frame waits at most until its
topic's period ends, and never when the source is slower than ``max_rate``.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable
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
    """Latest-per-source slots for scene topics and one bounded queue for the others.
    ``clock`` (monotonic seconds) is the time the schedule is kept in; tests pass their
    own to check the schedule without sleeping."""

    def __init__(
        self, max_rate: float = 60.0, queue_size: int = 256, clock: Callable[[], float] = time.monotonic
    ):
        self.max_rate = max_rate
        self.counters = Counters()
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._slots: dict[str, Pending] = {}
        self._queue: collections.deque[Pending] = collections.deque(maxlen=max(1, queue_size))
        self._last_sent: dict[str, float] = {}
        self._interrupted = False

    def _period(self) -> float:
        return 1.0 / self.max_rate if self.max_rate > 0 else 0.0

    def _ready_at(self, topic: str, period: float) -> float:
        """When ``topic``'s next frame may be sent: its last send plus the period."""
        last = self._last_sent.get(topic)
        return -math.inf if last is None else last + period

    def put(self, topic: str, type_name: str, data: bytes, conflate: bool) -> None:
        """From a subscription callback: store and return at once. The sender is woken
        when there is something new for it to do: a queued message, a frame due now, or a
        frame in an empty slot (a new moment to wait for). A frame replacing one that
        waits for its moment wakes nobody: the sender already waits for that moment."""
        now = self._clock()
        item = Pending(topic, type_name, data, now)
        with self._lock:
            counters = self.counters
            counters.received += 1
            if conflate:
                waiting = topic in self._slots
                if waiting:
                    counters.coalesced += 1
                self._slots[topic] = item
                wake = not waiting or now >= self._ready_at(topic, self._period())
            else:
                if len(self._queue) == self._queue.maxlen:
                    counters.dropped += 1  # the deque drops its oldest on append
                self._queue.append(item)
                wake = True
        if wake:
            self._wake.set()

    def _due(self) -> tuple[list[Pending], float | None]:
        """What may be sent now, and when the next waiting frame may be (None: none
        waits); the frames taken are marked sent now."""
        period = self._period()
        due: list[Pending] = []
        next_due = None
        with self._lock:
            self._wake.clear()
            now = self._clock()
            while self._queue:
                due.append(self._queue.popleft())
            for topic in list(self._slots):
                ready_at = self._ready_at(topic, period)
                if now >= ready_at:
                    due.append(self._slots.pop(topic))
                    self._last_sent[topic] = now
                else:
                    next_due = ready_at if next_due is None else min(next_due, ready_at)
        return due, next_due

    def take(self, timeout: float) -> list[Pending]:
        """For the sender thread: what is due, as soon as it is, waiting at most
        ``timeout`` s ([] then). A scene frame is due once ``1 / max_rate`` s passed
        since its topic was last sent; one not due yet stays (a newer one may still
        replace it) and the wait ends at its moment."""
        deadline = self._clock() + timeout
        while True:
            due, next_due = self._due()
            if due or self._interrupted:
                self._interrupted = False
                return due
            now = self._clock()
            if now >= deadline:
                return []
            until = deadline if next_due is None else min(deadline, next_due)
            self._wake.wait(max(0.0, until - now))

    def next_due(self) -> float | None:
        """When the earliest waiting scene frame may be sent (clock time), None when no
        frame waits."""
        period = self._period()
        with self._lock:
            return min((self._ready_at(topic, period) for topic in self._slots), default=None)

    def wake(self) -> None:
        """Lets a waiting :meth:`take` return now, with what is due or [] (shutdown)."""
        self._interrupted = True
        self._wake.set()
