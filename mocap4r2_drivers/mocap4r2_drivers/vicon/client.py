"""The Vicon DataStream SDK side of vicon_system: loading the SDK, naming its errors,
connecting (and reconnecting), and the one thread that calls it.

Written against the behaviour of Vicon's Python wrapper, ``vicon_dssdk.ViconDataStream``:

* every failing call raises ``DataStreamException(code, additional='')``, whose
  ``.message`` is the name of the result code ("NoFrame", "NotConnected", ...) and whose
  ``.additional`` is extra text; the codes themselves are ints of the native module and
  the wrapper has no public enum of them, so errors are told apart by ``.message``;
* ``GetFrame()`` returns False when the server has no frame for us (it does not raise);
* ``SetStreamMode`` and ``SetAxisMapping`` take members of the ``Client.StreamMode`` and
  ``Client.AxisMapping`` Enums (they look them up in a dict: a plain int is a KeyError);
* ``GetFrameRate()`` raises NoFrame until a first frame has been fetched;
* ``Connect("host")`` uses port 801 when none is given, and blocks for the SDK's
  connection timeout (``SetConnectionTimeout``, milliseconds, 5000 by default; older
  wrappers do not have it).

GetFrame blocks until the server has a frame and takes no timeout, so a dedicated SDK
thread calls the SDK and hands converted frames to the reader through a bounded queue.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mocap4r2_control.adapter import AdapterError

from ..common import ClientStats, reject_input

LOG = logging.getLogger("mocap4r2.vicon")

SDK_MISSING = (
    "the Vicon DataStream SDK's Python binding (the vicon_dssdk package) is not installed in this "
    "Python environment. It comes with Vicon's DataStream SDK (free download from vicon.com), whose "
    "installer puts the package folder at <SDK>/Win64/Python/vicon_dssdk (by default under "
    "C:\\Program Files\\Vicon\\DataStream SDK) together with install_vicon_dssdk.bat: install it with "
    '`python -m pip install "<SDK>/Win64/Python/vicon_dssdk"` from the Python that runs ROS. Every '
    "published build of this binding we know of is for Windows; on Linux or macOS use the SDK's "
    "Python folder only if your SDK download contains one for that platform, then configure again"
)

STREAM_MODES = {
    "server_push": "EServerPush",
    "client_pull": "EClientPull",
    "client_pull_prefetch": "EClientPullPreFetch",
}
# result codes after which the connection is gone (by their names, DataStreamException.message)
LOST_CONNECTION = frozenset({"NotConnected", "ClientConnectionFailed", "NullClient", "InvalidOperation"})


def load_sdk():
    """The ViconDataStream module of the SDK, or AdapterError saying how to install it."""
    try:
        from vicon_dssdk import ViconDataStream
    except ImportError as exc:
        raise AdapterError(f"{SDK_MISSING} ({exc})") from exc
    return ViconDataStream


def error_name(exc: BaseException) -> str:
    """The result code's name of a DataStreamException ("NoFrame", ...), from ``.message``."""
    message = getattr(exc, "message", None)
    if isinstance(message, str) and message:
        return message
    return type(exc).__name__


def describe(exc: BaseException) -> str:
    """Name plus the wrapper's additional text, for logs and diagnostics."""
    extra = getattr(exc, "additional", "")
    return f"{error_name(exc)} ({extra})" if extra else error_name(exc)


@dataclass(frozen=True)
class ClientSettings:
    """Where the DataStream server is and how to stream from it (the adapter's parameters)."""

    host: str
    port: int
    stream_mode: str = "server_push"
    axis_mapping: tuple[str, str, str] = ("forward", "left", "up")
    labeled: bool = True
    unlabeled: bool = True
    buffer_size: int = 1
    connect_timeout: float = 5.0
    reconnect_period: float = 1.0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class ViconClient:
    """One SDK Client: connect, set up, run the SDK thread, reconnect.

    ``convert(client)`` turns the SDK's current frame into a frame object (or None for a
    frame already seen); it runs in the SDK thread, and an exception from it drops that
    frame only (counted in ``counts["bad_frames"]``)."""

    def __init__(self, sdk, settings: ClientSettings, convert: Callable):
        self.sdk = sdk
        self.settings = settings
        self.convert = convert
        self.client = sdk.Client()
        self.frame_rate = 0.0
        self.connected = False
        self.last_error = ""
        self.lost_because = ""  # why the connection was last lost, for diagnostics
        self.counts = {
            "frames": 0,
            "duplicates": 0,
            "sdk_errors": 0,
            "bad_frames": 0,
            "reconnects": 0,
            "dropped_slow_reader": 0,
        }
        self.rejected = ClientStats()  # frames that could not be converted, logged once
        self.on_reconnect: Callable[[], None] | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=64)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failed: AdapterError | None = None

    @property
    def address(self) -> str:
        return self.settings.address

    # ------------------------------------------------------------------ connection
    def open(self) -> None:
        """Connect, set the client up and wait for a first frame (raises AdapterError)."""
        try:
            self._open()
            self._first_frame()
        except self.sdk.DataStreamException as exc:
            raise AdapterError(f"DataStream server at {self.address}: {describe(exc)}") from exc
        try:
            self.frame_rate = float(self.client.GetFrameRate())
        except self.sdk.DataStreamException as exc:
            LOG.info("GetFrameRate: %s", describe(exc))
            self.frame_rate = 0.0

    def _open(self) -> None:
        s = self.settings
        timeout_ms = max(int(s.connect_timeout * 1000), 1)
        if hasattr(self.client, "SetConnectionTimeout"):
            # Connect blocks for this long (5 s by default): connect_timeout is honoured only
            # when the SDK is told
            self.client.SetConnectionTimeout(timeout_ms)
        deadline = time.monotonic() + s.connect_timeout
        while True:
            try:
                self.client.Connect(self.address)
                break
            except self.sdk.DataStreamException as exc:
                self.last_error = describe(exc)
                if error_name(exc) == "ClientAlreadyConnected":
                    break
                if time.monotonic() > deadline or self._stop.is_set():
                    raise
                self._stop.wait(0.2)
        self.client.EnableSegmentData()
        if s.labeled:
            self.client.EnableMarkerData()
        if s.unlabeled:
            self.client.EnableUnlabeledMarkerData()
        self.client.SetBufferSize(s.buffer_size)
        self.client.SetStreamMode(getattr(self.sdk.Client.StreamMode, STREAM_MODES[s.stream_mode]))
        directions = self.sdk.Client.AxisMapping
        self.client.SetAxisMapping(*(getattr(directions, "E" + d.capitalize()) for d in s.axis_mapping))
        self.connected = True

    def _first_frame(self) -> None:
        # subject names exist only once a frame has arrived; GetFrame says False until then
        deadline = time.monotonic() + self.settings.connect_timeout
        while not self.client.GetFrame():
            if time.monotonic() > deadline:
                raise AdapterError(
                    f"no frame from the DataStream server at {self.address} within "
                    f"{self.settings.connect_timeout:g} s (is it streaming?)"
                )
            time.sleep(0.01)

    def close(self) -> None:
        self.stop()
        self._disconnect()

    def _disconnect(self) -> None:
        if self.connected:
            self.connected = False
            try:
                self.client.Disconnect()
            except Exception as exc:  # noqa: BLE001 - the server may be gone already
                LOG.debug("Disconnect: %s", exc)

    # ------------------------------------------------------------------ the SDK thread
    def start(self) -> None:
        while not self._queue.empty():  # frames of an earlier activation are old news
            self._queue.get_nowait()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vicon-sdk", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=max(2.0, 3.0 / max(self.frame_rate, 1.0)))
            if thread.is_alive():
                # GetFrame (or Connect) is blocked: disconnecting releases it
                LOG.warning("the SDK thread is blocked in the SDK; disconnecting to release it")
                self._disconnect()
                thread.join(timeout=2.0)

    def get(self, timeout: float):
        """The next converted frame, None after ``timeout``; AdapterError once lost for good."""
        if self._failed is not None:
            raise self._failed
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, AdapterError):
            self._failed = item
            raise item
        frame, received = item
        # the time since GetFrame returned (conversion, the queue) is latency too: the
        # node stamps arrival - latency, and this part is ours, not the network's
        frame.latency += max(time.time() - received, 0.0)
        return frame

    def _put(self, item) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with contextlib.suppress(queue.Empty):
                self._queue.get_nowait()  # the oldest frame goes: the stream is real time
            self.counts["dropped_slow_reader"] += 1
            self._queue.put_nowait(item)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.connected:
                if not self._reconnect():
                    return
                continue
            try:
                if not self.client.GetFrame():  # NoFrame: nothing new yet
                    self._stop.wait(0.001)
                    continue
                received = time.time()
                frame = self.convert(self.client)
            except self.sdk.DataStreamException as exc:
                name = error_name(exc)
                if name == "NoFrame":  # a getter between frames
                    self._stop.wait(0.001)
                    continue
                self.counts["sdk_errors"] += 1
                self.last_error = describe(exc)
                if name in LOST_CONNECTION or not self._is_connected():
                    self._lost()
                continue
            except Exception as exc:  # noqa: BLE001 - a frame that cannot be converted is dropped
                self.counts["bad_frames"] += 1
                self.last_error = f"bad frame: {exc!r}"
                reject_input(
                    self.rejected, LOG, "bad_frame", f"a frame that could not be converted ({exc!r})"
                )
                continue
            if frame is None:
                self.counts["duplicates"] += 1
                continue
            self.counts["frames"] += 1
            self._put((frame, received))

    def _is_connected(self) -> bool:
        try:
            return bool(self.client.IsConnected())
        except Exception:  # noqa: BLE001 - a dead client
            return False

    def _lost(self) -> None:
        self.lost_because = self.last_error
        LOG.warning("DataStream server at %s went away (%s)", self.address, self.last_error)
        self._disconnect()
        if self.settings.reconnect_period <= 0:
            self._put(AdapterError(f"DataStream server at {self.address} went away ({self.last_error})"))

    def _reconnect(self) -> bool:
        if self.settings.reconnect_period <= 0:
            self._stop.wait(0.1)
            return not self._stop.is_set()
        if self._stop.wait(self.settings.reconnect_period):
            return False
        try:
            self._open()
        except self.sdk.DataStreamException as exc:
            self.connected = False
            self.last_error = f"reconnect: {describe(exc)}"
            return True
        self.counts["reconnects"] += 1
        if self.on_reconnect is not None:
            self.on_reconnect()
        LOG.info("reconnected to the DataStream server at %s", self.address)
        return True
