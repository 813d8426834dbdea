"""What a vendor adapter is: connect, read asset names, read frames, disconnect.

An adapter knows its mocap system and nothing of ROS. The
:class:`~mocap4r2_control.system_node.MocapSystemNode` owns one adapter, calls
``connect`` on configure, ``read_frame`` in its reader thread while active, and
``disconnect`` on cleanup and shutdown.

Adapters declare their own parameters as :class:`~mocap4r2_control.parameters.ParameterSpec`; the node
declares them (with descriptions), validates every value, and passes the current values to
``from_parameters`` when it configures. An adapter's constructor takes its parameters by
keyword, each under its parameter's name, so the default ``from_parameters`` is
``cls(**values)``: a constructor that checks a combination of values raises
:class:`ConfigurationError` itself, and nothing copies parameters by hand.

What turns a vendor's data into frames (an adapter's ``converter``) has one of two
shapes, declared below: :class:`FrameConverter` for vendors whose data comes in frames,
:class:`FrameAssembler` for those whose data comes in pieces.

An adapter fed by ROS topics (a simulator bridged into ROS) declares them as plain data,
:class:`TopicInput`, from :meth:`MocapAdapter.topic_inputs`; the node subscribes on its
own behalf (``topic_inputs.py``) and hands each message to the input's ``deliver``. A
ROS service an adapter answers is declared the same way, :class:`ServiceOffer` from
:meth:`MocapAdapter.service_offers`, and created by the node (``service_offers.py``). So
the adapter never holds the node, and what a subscription or a service is (QoS, callback
group, its life from configure to cleanup) is written once, for every such adapter.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable

from .frame import AssetNames, MocapFrame
from .parameters import ParameterSpec


class AdapterError(RuntimeError):
    """A failure the node reports as such (cannot connect, server gone, ...)."""


class ConfigurationError(AdapterError):
    """The adapter's own configuration is wrong (a file, a value): reported in its own
    words, not as a failure to connect."""


VendorFrame = TypeVar("VendorFrame", contravariant=True)


@runtime_checkable
class FrameConverter(Protocol[VendorFrame]):
    """A vendor whose data comes in frames: one frame in the vendor's terms in, one
    :class:`MocapFrame` out, at once. ``VendorFrame`` is what the vendor hands over:
    NatNet's decoded ``FrameOfData`` (optitrack), a QTM RT data packet's bytes (qualisys),
    the DataStream SDK client holding its current frame (vicon).

    ``convert`` returns None where the vendor's frame yields no frame to publish (the
    Vicon SDK without a new frame); a frame that cannot be converted raises the vendor's
    protocol error, which the adapter counts and drops."""

    def convert(self, data: VendorFrame, /) -> MocapFrame | None:
        """The frame ``data`` holds, in the suite's units, axes and names."""


@runtime_checkable
class FrameAssembler(Protocol):
    """A vendor whose data comes in pieces, from which frames are assembled: VRPN sends
    one report per tracker (``add(tracker, report, time)``), Gazebo one pose per model
    (``add(name, stamp, position, orientation, arrival)``). ``add`` takes one piece, in the
    vendor's own terms, so its arguments are the vendor's.

    When a frame is complete is the vendor's own rule, so how frames come out is not
    declared here: VRPN's frame is complete when every body of an instant has reported or
    a read ends (``add`` returns it, ``flush`` at the end of a read), Gazebo's frames are
    due at the emulated rate of the simulation's clock (``advance(now)``). One method for
    both would hide that one is driven by the data and the other by a clock."""

    def add(self, *piece: Any, **details: Any) -> object:
        """Take one piece (a report, a pose) of a frame being assembled."""


@dataclass(frozen=True)
class TopicInput:
    """A ROS topic an adapter reads, as data: the node creates the subscription.

    ``topic`` is resolved by the node (its namespace and remappings apply), ``type_name``
    is the message type in ROS's form (``"tf2_msgs/msg/TFMessage"``), ``depth`` the
    history kept (KEEP_LAST), ``best_effort`` the reliability asked for. Each message is
    handed, deserialized, to ``deliver(topic, message)`` with ``topic`` as declared here,
    on an executor thread: never concurrently with another delivery to the same adapter,
    and possibly while ``connect`` waits (it runs in a transition callback). With ``raw``
    the message is handed over as its serialized bytes (CDR, as rclpy's ``raw=True``), for
    an adapter that reads them itself faster than rclpy would deserialize them.

    Two inputs are the same input when all their fields are equal, ``deliver`` included:
    declare ``deliver`` as a bound method (or keep the same object) so that asking
    ``topic_inputs`` again does not declare a new input."""

    topic: str
    type_name: str
    depth: int
    best_effort: bool
    deliver: Callable[[str, object], None]
    raw: bool = field(default=False, kw_only=True)


@dataclass(frozen=True)
class ServiceOffer:
    """A ROS service an adapter answers, as data: the node creates the service.

    ``name`` is resolved by the node (``"~/teach"`` is under the node's name),
    ``type_name`` is the service type in ROS's form (``"std_srvs/srv/Trigger"``). Each
    request is handed to ``handle(request, response)``, which fills ``response`` and
    returns it, on an executor thread of the service's own (it may wait for what topic
    inputs deliver meanwhile). An exception out of ``handle`` is logged by the node and
    answered as a failure where the type has ``success`` and ``message`` fields."""

    name: str
    type_name: str
    handle: Callable[[Any, Any], Any]


class MocapAdapter(abc.ABC):
    """One mocap system behind the neutral frame type.

    Subclasses set ``system_type`` (MocapSystemInfo.type: "optitrack", "sim", ...) and
    ``parameters``, and implement the four methods. ``read_frame`` is called from the
    node's reader thread only; ``connect``/``disconnect`` from the executor, never
    concurrently with ``read_frame``.
    """

    system_type: ClassVar[str] = "unknown"
    parameters: ClassVar[Sequence[ParameterSpec]] = ()
    #: False where the system's frames never hold markers (VRPN's trackers): the node then
    #: does not load the encoder's compiled markers pass, time of every start for nothing
    frames_have_markers: ClassVar[bool] = True

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> Self:
        """Build an adapter from the current values of ``parameters``: the constructor,
        given each parameter by its name (a value not given keeps the constructor's
        default). Override only where the values are not the constructor's arguments."""
        return cls(**{spec.name: values[spec.name] for spec in cls.parameters if spec.name in values})

    @abc.abstractmethod
    def connect(self) -> AssetNames:
        """Connect to the system and return the names of its assets.

        Raise AdapterError (or any exception) with a reason a user can act on."""

    @abc.abstractmethod
    def read_frame(self, timeout: float) -> MocapFrame | None:
        """The next frame, blocking at most ``timeout`` seconds; None when none came.

        Raise AdapterError when the connection is lost for good; a frame that cannot be
        decoded is dropped by the adapter (it counts and logs it) rather than raised."""

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Release sockets, SDK handles and threads. Must be safe to call twice."""

    def topic_inputs(self) -> Sequence[TopicInput]:
        """The ROS topics this adapter reads (none by default), asked on configure twice.

        The node subscribes to them before ``connect`` (so ``connect`` may wait for the
        first messages), asks again once ``connect`` succeeded and subscribes the inputs
        not subscribed yet (topics known only from what ``connect`` read, such as the
        simulated scene's arms), and unsubscribes all on cleanup, shutdown, error, or
        when configure fails; an unknown type or a bad topic name fails configure with
        the reason."""
        return ()

    def service_offers(self) -> Sequence[ServiceOffer]:
        """The ROS services this adapter answers (none by default), asked when
        :meth:`topic_inputs` is, created and destroyed when its inputs are subscribed and
        unsubscribed; an offer of a name already created is not created again."""
        return ()

    def parameters_changed(self, values: Mapping[str, Any]) -> Collection[str]:
        """Called while configured with the new values of this adapter's own parameters
        just set (already validated); returns the names the adapter took at once. The
        others apply at the next configure, through :meth:`from_parameters`, which is
        the rule (the default takes none): only a value read per request, such as what a
        service offer teaches, may be taken here."""
        return ()

    @property
    def nominal_rate(self) -> float:
        """Nominal frame rate in Hz, 0 when unknown."""
        return 0.0

    def start_streaming(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called on activate before the reader thread starts (optional)."""

    def stop_streaming(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called on deactivate after the reader thread stopped (optional)."""

    def session_started(self, session_id: str) -> str:
        """Called once a control-plane START made the system active (optional).

        A vendor with its own recording (Motive's takes, QTM's measurements) starts it
        here, named after the session, when the user asked for it. Returns a note for
        the ack ("" for none); raise AdapterError with the vendor's words to fail it."""
        return ""

    def session_stopped(self, session_id: str) -> str:
        """Called on a control-plane STOP before the system deactivates (optional): stop
        and save the vendor's recording. Same contract as :meth:`session_started`."""
        return ""

    def status(self) -> dict[str, str]:
        """Extra key/values for /diagnostics (e.g. decode errors, server version)."""
        return {}
