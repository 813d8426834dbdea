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

What can go wrong in a spec (a type that does not resolve, a topic name ROS
refuses, a depth below 1) is raised as :class:`~mocap4r2_control.adapter.ConfigurationError`
naming the input, for configure to report; nothing is left subscribed then.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from .adapter import ConfigurationError, TopicInput
from .declared_entities import DeclaredEntities

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


class TopicSubscriptions(DeclaredEntities[TopicInput]):
    """The subscriptions of one adapter's inputs on ``node``, from :meth:`open` to :meth:`close`."""

    STATUS_KEY = "topic_input_errors"

    def __init__(self, node: Node) -> None:
        super().__init__(node, LOG)
        self._group: MutuallyExclusiveCallbackGroup | None = None

    def _create(self, spec: TopicInput) -> Any:
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
                self._count_error(topic, f"dropping a message on {topic}: the adapter could not take it", exc)

        if self._group is None:  # inputs added after connect join the group of those before
            self._group = MutuallyExclusiveCallbackGroup()
        try:
            return self.node.create_subscription(
                msg_type, spec.topic, deliver, qos, callback_group=self._group, raw=spec.raw
            )
        except Exception as exc:  # rclpy's name validation (InvalidTopicNameException), ...
            raise ConfigurationError(
                f"cannot subscribe to {spec.topic!r} ({spec.type_name}): {exc}"
            ) from None

    def _destroy(self, entity: Any) -> None:
        self.node.destroy_subscription(entity)

    def _closed(self) -> None:
        self._group = None
