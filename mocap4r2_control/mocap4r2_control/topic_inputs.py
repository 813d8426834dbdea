"""The ROS side of an adapter's topic inputs: the subscriptions a node creates for the
:class:`~mocap4r2_control.adapter.TopicInput` an adapter declares.

They are created on the node itself, so its namespace, remappings and ``use_sim_time``
apply and no node of our own is hidden in the process. All of one adapter's inputs share
one mutually exclusive callback group of their own: the executor can deliver them while a
lifecycle transition (configure waiting for the first messages in ``connect``) occupies
the node's default group, and the adapter never gets two messages at once. Inputs
declared only after ``connect`` (:meth:`TopicSubscriptions.add`) join that group.

A message the adapter's ``deliver`` raises on is dropped, counted per topic (reported
in /diagnostics as ``topic_input_errors``) and logged the first time for its topic: an
exception out of a subscription callback would end the executor's spin, and with it the
node.

What can go wrong in a declaration (a type that does not resolve, a topic name ROS
refuses, a depth below 1) is raised as :class:`~mocap4r2_control.adapter.ConfigurationError`
naming the input, for configure to report; nothing is left subscribed then.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Sequence
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from .adapter import ConfigurationError, TopicInput

__all__ = ["TopicSubscriptions", "interface_type", "message_type"]

LOG = logging.getLogger("mocap4r2.topic_inputs")


def interface_type(type_name: str, kind: str) -> Any:
    """The class of ``"pkg/<kind>/Name"`` (``kind`` "msg" or "srv"); ConfigurationError
    with the reason.

    rosidl_runtime_py's ``get_message``/``get_service`` do the same import but are not
    installed beside rclpy here, so the module is imported directly (``pkg.msg``,
    attribute ``Name``)."""
    what = {"msg": "message", "srv": "service"}[kind]
    parts = type_name.split("/")
    if len(parts) != 3 or parts[1] != kind or not all(p.isidentifier() for p in parts):
        raise ConfigurationError(f"{what} type {type_name!r} is not of the form 'package/{kind}/Name'")
    package, _, name = parts
    try:
        module = importlib.import_module(f"{package}.{kind}")
    except ImportError as exc:
        raise ConfigurationError(
            f"{what} type {type_name!r}: package {package!r} not found ({exc})"
        ) from None
    found = getattr(module, name, None)
    if not isinstance(found, type) or not hasattr(type(found), "__import_type_support__"):
        raise ConfigurationError(f"{what} type {type_name!r}: {package}.{kind} has no {what} {name!r}")
    return found


def message_type(type_name: str) -> Any:
    """The message class of ``"pkg/msg/Name"``; ConfigurationError with the reason."""
    return interface_type(type_name, "msg")


class TopicSubscriptions:
    """The subscriptions of one adapter's inputs on ``node``, from :meth:`open` to :meth:`close`."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._subscriptions: dict[TopicInput, Any] = {}
        self._group: MutuallyExclusiveCallbackGroup | None = None
        self.errors: dict[str, int] = {}  # messages deliver raised on, by declared topic

    def open(self, inputs: Sequence[TopicInput]) -> None:
        """Subscribe to every input (dropping any left from before); ConfigurationError
        naming the input that cannot be subscribed, with nothing left subscribed."""
        self.close()
        self.errors = {}
        self.add(inputs)

    def add(self, inputs: Sequence[TopicInput]) -> None:
        """Subscribe to the inputs not subscribed yet (an input equal to one subscribed is
        the same input), in the group of those before; ConfigurationError as :meth:`open`,
        with nothing left subscribed."""
        try:
            for spec in inputs:
                if spec not in self._subscriptions:
                    if self._group is None:
                        self._group = MutuallyExclusiveCallbackGroup()
                    self._subscriptions[spec] = self._subscribe(spec, self._group)
        except BaseException:
            self.close()
            raise

    def _subscribe(self, spec: TopicInput, group: MutuallyExclusiveCallbackGroup) -> Any:
        if spec.depth < 1:
            raise ConfigurationError(
                f"topic input {spec.topic!r}: depth must be at least 1, got {spec.depth}"
            )
        msg_type = message_type(spec.type_name)
        qos = QoSProfile(
            depth=spec.depth,
            reliability=ReliabilityPolicy.BEST_EFFORT if spec.best_effort else ReliabilityPolicy.RELIABLE,
        )

        def deliver(msg: object, topic: str = spec.topic, to: Any = spec.deliver) -> None:
            try:
                to(topic, msg)
            except Exception as exc:  # noqa: BLE001 - a bad message must not end the spin
                count = self.errors.get(topic, 0) + 1
                self.errors[topic] = count
                if count == 1:
                    LOG.error("dropping a message on %s: the adapter could not take it: %r", topic, exc)

        try:
            return self.node.create_subscription(
                msg_type, spec.topic, deliver, qos, callback_group=group, raw=spec.raw
            )
        except Exception as exc:  # rclpy's name validation (InvalidTopicNameException), ...
            raise ConfigurationError(
                f"cannot subscribe to {spec.topic!r} ({spec.type_name}): {exc}"
            ) from None

    @property
    def count(self) -> int:
        """How many subscriptions are open."""
        return len(self._subscriptions)

    def status(self) -> dict[str, str]:
        """For /diagnostics: the messages dropped because ``deliver`` raised, if any."""
        total = sum(self.errors.values())
        return {"topic_input_errors": str(total)} if total else {}

    def close(self) -> None:
        """Destroy the subscriptions; safe twice and while the node is being destroyed."""
        subscriptions, self._subscriptions = self._subscriptions, {}
        self._group = None
        for subscription in subscriptions.values():
            with contextlib.suppress(Exception):  # the node is being destroyed already
                self.node.destroy_subscription(subscription)
