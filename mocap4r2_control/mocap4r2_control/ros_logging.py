"""Python `logging` records of adapters and protocol code, into the ROS log of their node.

Protocol modules (NatNet, QTM RT, ...) must not import rclpy, so they log through
Python's logging under the "mocap4r2" namespace, usually with a module-level logger that
knows no node. One handler on that namespace sends each record to the rclpy logger of
the node whose code is running, so the line reaches /rosout and the console under that
node's name, also when several systems share a process.

Which node is running is a context variable (:mod:`contextvars`) that each node sets:
for the whole of the threads it owns (its reader thread, :meth:`NodeLogRoute.enter`)
and around what the executor runs for it (transitions, control requests,
:meth:`NodeLogRoute.active`; the callbacks of subscriptions and services on the node,
among them an adapter's topic inputs and service offers, :meth:`NodeLogRoute.wrap`). asyncio carries it
into the coroutines and callbacks scheduled from there (``run_coroutine_threadsafe`` and
``call_soon*`` copy the caller's context), so a client running its protocol on an event
loop logs under the node too.
A plain ``threading.Thread`` starts with an empty context (before Python 3.14's
``thread_inherit_context``), so a thread an adapter starts (a client's socket or event
loop thread) would lose the route: the route a thread was started under is therefore
noted when it starts (the one hook this module puts on ``threading.Thread.start``) and
used for the records of a thread whose context has none.

Levels: the node's own logger decides. Records pass Python's "mocap4r2" logger at the
lowest level of the live nodes' loggers (a node started with ``--log-level debug`` lets
debug records through), and each is then written with the rclpy call of its level,
which the routed node's logger filters by its own level: a node at debug shows its
adapter's debug lines, one at info in the same process does not.

A record logged where no node has set the route goes to the only node of the process,
or, with several, to the rclpy logger "mocap4r2" (the console and log files, not a
node's /rosout): never to an arbitrary one of the nodes.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, Protocol, TypeVar

__all__ = ["NAMESPACE", "NodeLogRoute", "RosLogHandler", "RosLogger"]

NAMESPACE = "mocap4r2"

P = ParamSpec("P")
R = TypeVar("R")


class RosLogger(Protocol):
    """What a record is written to: an rclpy ``RcutilsLogger`` (``node.get_logger()``)."""

    def get_effective_level(self) -> object: ...
    def debug(self, message: str) -> object: ...
    def info(self, message: str) -> object: ...
    def warning(self, message: str) -> object: ...
    def error(self, message: str) -> object: ...


_ROUTE: contextvars.ContextVar[NodeLogRoute | None] = contextvars.ContextVar(
    "mocap4r2_log_route", default=None
)


class _Routes:
    """The routes of the process's live nodes, and the logger of records without one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: list[NodeLogRoute] = []
        self._unrouted: RosLogger | None = None

    def add(self, route: NodeLogRoute) -> None:
        with self._lock:
            self._live.append(route)
            _install_handler(self._lowest_level())

    def remove(self, route: NodeLogRoute) -> None:
        with self._lock:
            if route in self._live:
                self._live.remove(route)
            if not self._live:
                _uninstall_handler()
            else:
                logging.getLogger(NAMESPACE).setLevel(self._lowest_level())

    def _lowest_level(self) -> int:
        """The lowest level any live node logs at (rcutils' severities are Python's
        numbers: DEBUG 10, INFO 20, WARN 30, ERROR 40, FATAL 50)."""
        return min((route.level for route in self._live), default=logging.INFO)

    def without_context(self) -> RosLogger:
        """The only live node's logger; with none or several, the process's own."""
        live = tuple(self._live)  # a node may go away meanwhile: look at one state of the list
        if len(live) == 1:
            return live[0].ros_logger
        if self._unrouted is None:
            from rclpy.logging import get_logger

            self._unrouted = get_logger(NAMESPACE)
        return self._unrouted


_ROUTES = _Routes()


class RosLogHandler(logging.Handler):
    """Writes each "mocap4r2.*" record to the rclpy logger of the node running the code
    that logged it (see the module docstring), as ``[<logger without 'mocap4r2.'>] text``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            route = _ROUTE.get()
            if route is None:  # a thread an adapter started: the route it was started under
                route = getattr(threading.current_thread(), _THREAD_ROUTE, None)
            ros_logger = route.ros_logger if route is not None else _ROUTES.without_context()
            source = record.name.split(".", 1)[1] if "." in record.name else record.name
            text = f"[{source}] {record.getMessage()}"
            if record.levelno >= logging.ERROR:
                ros_logger.error(text)
            elif record.levelno >= logging.WARNING:
                ros_logger.warning(text)
            elif record.levelno >= logging.INFO:
                ros_logger.info(text)
            else:
                ros_logger.debug(text)
        except Exception:  # noqa: BLE001 - logging must never break the reader thread
            self.handleError(record)


def _uninstall_handler() -> None:
    """No node is left: "mocap4r2.*" records go back to Python's own logging (the
    application's handlers, pytest's capture) instead of an rclpy logger nobody reads."""
    logger = logging.getLogger(NAMESPACE)
    for handler in [h for h in logger.handlers if isinstance(h, RosLogHandler)]:
        logger.removeHandler(handler)
    logger.propagate = True


#: the attribute of a started thread that holds the route it was started under
_THREAD_ROUTE = "_mocap4r2_log_route"


def _note_route_at_start(start: Callable[[threading.Thread], None]) -> Callable[[threading.Thread], None]:
    @functools.wraps(start)
    def noting(thread: threading.Thread) -> None:
        route = _ROUTE.get()
        if route is not None:
            setattr(thread, _THREAD_ROUTE, route)
        start(thread)

    noting.__mocap4r2_noting__ = True  # type: ignore[attr-defined]
    return noting


def _install_thread_hook() -> None:
    """Threads started from now on remember the route they were started under (once per
    process; a no-op where Thread.start is hooked already)."""
    start = threading.Thread.start
    if not getattr(start, "__mocap4r2_noting__", False):
        threading.Thread.start = _note_route_at_start(start)  # type: ignore[method-assign,assignment]


def _install_handler(level: int) -> None:
    """One handler on the namespace for the whole process, however many nodes."""
    _install_thread_hook()
    logger = logging.getLogger(NAMESPACE)
    if not any(isinstance(h, RosLogHandler) for h in logger.handlers):
        logger.addHandler(RosLogHandler())
    logger.setLevel(level)
    logger.propagate = False


class NodeLogRoute:
    """The route of one node's "mocap4r2.*" records to its rclpy logger.

    A node makes one at construction and :meth:`close` s it when destroyed; in between,
    code it runs inside :meth:`active` (or in a thread that called :meth:`enter`) logs
    under its name."""

    def __init__(self, ros_logger: RosLogger, level: int | None = None):
        """``level``: the lowest level of records let through for this node; by default
        its logger's own (``--log-level``, or a level set for its name before)."""
        self.ros_logger = ros_logger
        self.level = int(level if level is not None else _level_of(ros_logger))
        _ROUTES.add(self)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Records logged inside go to this node (nested routes restore the outer one)."""
        token = _ROUTE.set(self)
        try:
            yield
        finally:
            _ROUTE.reset(token)

    def wrap(self, callback: Callable[P, R]) -> Callable[P, R]:
        """``callback`` running inside :meth:`active`: for what the executor calls on the
        node's behalf (its subscriptions and an adapter's service offers). The
        wrapper keeps the callback's signature for introspection (rclpy counts its
        parameters to decide whether to pass the message info)."""

        @functools.wraps(callback)
        def routed(*args: P.args, **kwargs: P.kwargs) -> R:
            token = _ROUTE.set(self)
            try:
                return callback(*args, **kwargs)
            finally:
                _ROUTE.reset(token)

        return routed

    def enter(self) -> None:
        """Records logged from now on in the calling thread's context go to this node:
        for the first call of a thread the node owns (a thread starts with an empty context)."""
        _ROUTE.set(self)

    def close(self) -> None:
        """The node is going away: it no longer receives records logged without a route."""
        _ROUTES.remove(self)


def _level_of(ros_logger: RosLogger) -> int:
    """The effective level of an rclpy logger as a Python level (UNSET counts as INFO)."""
    try:
        level = int(ros_logger.get_effective_level())  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - a logger without levels: INFO, as before
        return logging.INFO
    return level if level > 0 else logging.INFO
