"""What a NatNet client asks its server, and which answers it takes: NAT_CONNECT and the
NAT_SERVERINFO it brings (the bitstream version, the clock, how the server streams),
NAT_REQUEST_MODELDEF and the model definitions, NAT_REQUEST and its NAT_RESPONSE.

An answer is taken only while a request of ours waits for it (NAT_SERVERINFO and
NAT_MODELDEF within ANSWER_WINDOW s of the request, one NAT_RESPONSE per pending
request): nobody but the server we asked shapes the names and settings we publish.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from ..common import ClientStats
from . import protocol as nn
from .protocol import MessageId, ModelDefinitions, ServerInfo, Version
from .transport import NatNetTransport

ANSWER_WINDOW = 5.0  # s an answer may take after its request
BITSTREAM_CHANGES_KEPT = 8  # mid-session bitstream changes kept for /diagnostics

Response = int | float | str | None
# handles packets until the condition holds or the timeout (s) passes
Pump = Callable[[float, Callable[[], bool]], None]


def decode_response(command: str, payload: bytes | None) -> Response:
    """A NAT_RESPONSE's value: int, float for FrameRate, or string; None for
    NAT_UNRECOGNIZED_REQUEST."""
    if payload is None:
        return None
    if len(payload) == 4 and command.lower() == "framerate":
        return float(np.frombuffer(payload, "<f4")[0])
    if len(payload) == 4:
        return int(np.frombuffer(payload, "<i4")[0])
    return nn.decode_string(payload)


class ServerDialog:
    """The requests of one client and what their answers taught it: ``server_info``,
    ``version`` (the bitstream layout) and ``models``."""

    def __init__(
        self, transport: NatNetTransport, stats: ClientStats, log: logging.Logger, retry_period: float
    ):
        self.transport = transport
        self.stats = stats
        self.log = log
        self.retry_period = retry_period
        self.server_info: ServerInfo | None = None
        self.version: Version | None = None
        self.models: ModelDefinitions | None = None
        self.got_models = False
        self.models_stale = False  # the server said its models changed; asked until they come
        self.fatal = ""  # why the server cannot be used (an unsupported bitstream version)
        # over unicast, the bitstream we ask for (None: the server's own) and whether the
        # server switched to it (its NAT_SERVERINFO may keep saying its own version)
        self.requested = None if transport.multicast else transport.config.requested_bitstream
        self.granted = False
        self.changes: deque[str] = deque(maxlen=BITSTREAM_CHANGES_KEPT)  # "4.1 -> 3.0", newest last
        self._bitstream_asked: nn.Version | None = None  # a Bitstream,M.m request waiting for its answer
        self._bitstream_until = 0.0
        # told of the descriptions a NAT_MODELDEF skipped (housekeeping counts and logs them)
        self.on_skipped: Callable[[list[nn.Skipped], str], None] | None = None
        self.last_connect = 0.0
        self._connect_until = 0.0  # NAT_SERVERINFO is accepted until then (after a NAT_CONNECT)
        self._models_until = 0.0  # NAT_MODELDEF is accepted until then (after a request)
        self._last_model_request = 0.0
        self._responses: list[bytes | None] = []  # the answer to the pending request (at most one)
        self._request_lock = threading.Lock()  # one request in flight from other threads
        self._request_pending = False

    # ------------------------------------------------------------------ asking
    def send_connect(self) -> None:
        """NAT_CONNECT, asking a unicast server for ``requested`` (zero: its own version)."""
        self.last_connect = time.monotonic()
        self._connect_until = self.last_connect + ANSWER_WINDOW
        wanted = self.requested if not self.transport.multicast else None
        newest = nn.NEWEST_VERSION
        self.transport.send(
            nn.encode_connect(
                nn.ConnectRequest(
                    natnet_version=(newest.major, newest.minor, 0, 0),
                    requested_bitstream=(wanted.major, wanted.minor, 0, 0) if wanted else None,
                )
            )
        )

    def ask_bitstream(self, version: Version) -> None:
        """``Bitstream,M.m`` to a unicast server; its answer (0: switched) is taken by
        :meth:`take_answer` while no other request waits."""
        self._bitstream_asked = version
        self._bitstream_until = time.monotonic() + ANSWER_WINDOW
        self.transport.send(nn.encode_request(f"Bitstream,{version}"))

    @property
    def asking_bitstream(self) -> bool:
        return self._bitstream_asked is not None

    def request_models(self, force: bool = False, period: float | None = None) -> None:
        """Ask for the model definitions, unless asked less than ``period`` s (the retry
        period) ago and not ``force``."""
        now = time.monotonic()
        if force or now - self._last_model_request >= (period or self.retry_period):
            self._last_model_request = now
            self._models_until = now + ANSWER_WINDOW
            self.stats.model_requests += 1
            self.transport.send(nn.encode_empty(MessageId.REQUEST_MODELDEF))

    def request(self, command: str, timeout: float, pump: Pump) -> Response:
        """Send a NAT_REQUEST and handle packets through ``pump`` until its answer comes."""
        self._responses.clear()
        self._request_pending = True
        try:
            self.transport.send(nn.encode_request(command))
            pump(timeout, lambda: bool(self._responses))
        finally:
            self._request_pending = False
        return self._take_response(command)

    def request_while_streaming(self, command: str, timeout: float) -> Response:
        """:meth:`request` from another thread while the reader thread handles packets.

        Sending from a second thread is safe; receiving is not, so this thread only sends
        and waits: the reader thread receives the answer with the frames (it hands every
        NAT_RESPONSE to :meth:`take_answer`) and never loses a frame to it."""
        with self._request_lock:
            self._responses.clear()
            self._request_pending = True
            try:
                self.transport.send(nn.encode_request(command))
                deadline = time.monotonic() + timeout
                while not self._responses and time.monotonic() < deadline:
                    time.sleep(0.005)
            finally:
                self._request_pending = False
            return self._take_response(command)

    def _take_response(self, command: str) -> Response:
        if not self._responses:
            return None
        payload = self._responses.pop(0)
        self._responses.clear()
        return decode_response(command, payload)

    # ------------------------------------------------------------------ answers
    def awaits(self, message_id: int, now: float) -> bool:
        """Whether a NAT_SERVERINFO, NAT_MODELDEF or NAT_RESPONSE answers a request of ours."""
        if message_id == MessageId.SERVERINFO:
            return now <= self._connect_until
        if message_id == MessageId.MODELDEF:
            return now <= self._models_until
        if self._bitstream_asked is not None and not self._request_pending:
            if now <= self._bitstream_until:
                return True
            self._bitstream_asked = None  # never answered: asked again with the next NAT_SERVERINFO
        return self._request_pending and not self._responses

    def take_answer(self, payload: bytes | None) -> None:
        """The answer to the pending request (None: the server does not know the command)."""
        asked = self._bitstream_asked
        if asked is not None and not self._request_pending:
            self._bitstream_asked = None
            answer = decode_response("Bitstream", payload)
            if answer == 0:
                self.granted = True
                self.log.info(f"the server streams NatNet {asked} to us, as bitstream_version asks")
                self.set_version(asked)
            else:
                self.log.warning(
                    f"the server refused bitstream_version {asked} (answer {answer!r}): reading its own "
                    f"NatNet {self.version}"
                )
            return
        self._responses.append(payload)

    def take_server_info(self, info: ServerInfo) -> bool:
        """Learn the server from its NAT_SERVERINFO; False when its bitstream version
        cannot be read (``fatal`` says why)."""
        previous = self.server_info
        version = info.bitstream
        if not version.supported:
            fatal = (
                f"{info.app_name} streams NatNet {version} (read from its NAT_SERVERINFO); this driver reads "
                f"{nn.OLDEST_VERSION} to {nn.NEWEST_VERSION} and newer: update Motive (2.x and older stream "
                "NatNet 2.x)"
            )
            if fatal != self.fatal:
                self.log.error(fatal)
            self.fatal = self.stats.last_error = fatal
            return False
        if version.newer_than_known and version != self.version:
            self.log.warning(
                f"{info.app_name} streams NatNet {version}, newer than the newest this driver knows "
                f"({nn.NEWEST_VERSION}): reading it with the {nn.NEWEST_VERSION} layout, skipping what it "
                "adds by its size (see /diagnostics)"
            )
        self.server_info = info
        if info != previous:
            server = self.transport.server
            self.log.info(
                f"connected to {info.app_name} {'.'.join(map(str, info.app_version))} at "
                f"{server[0]}:{server[1]}, NatNet {version}, "
                f"{'multicast ' + str(info.multicast_address) if info.multicast else 'unicast'}"
                f", data port {info.data_port}"
            )
        wanted = self.requested
        if wanted is not None and not self.transport.multicast and version != wanted:
            # the server says its own version: ask it for ours (again: a restarted server
            # forgot), and meanwhile read what it was last known to send us
            if not self.asking_bitstream:
                self.ask_bitstream(wanted)
            if self.granted:
                return True
        elif wanted is not None and version == wanted:
            self.granted = True
        self.set_version(version)
        return True

    def set_version(self, version: Version) -> None:
        """The bitstream the server streams to us now; a change mid-session is logged,
        kept for /diagnostics and has the models read again (their layout changed)."""
        if self.version is not None and self.version != version:
            change = f"{self.version} -> {version}"
            self.changes.append(change)
            self.log.warning(
                f"the server now streams NatNet {version} (was {self.version}): reading the models again"
            )
            self.got_models = False
            self.models_stale = True
        self.version = version

    def take_models(self, payload: bytes) -> ModelDefinitions | None:
        """Decode a NAT_MODELDEF (None before NAT_SERVERINFO told the layout: asked again later)."""
        if self.version is None:
            return None
        models = nn.decode_model_definitions(payload, self.version)
        if models.skipped and self.on_skipped is not None:
            self.on_skipped(models.skipped, "model definitions")
        self.models = models
        self.stats.model_updates += 1
        self.got_models = True
        self.models_stale = False
        names = ", ".join(b.name for b in models.rigid_bodies[:8])
        more = ", ..." if len(models.rigid_bodies) > 8 else ""
        self.log.info(
            f"model definitions: {len(models.rigid_bodies)} rigid bodies"
            f"{' (' + names + more + ')' if names else ''}, {len(models.skeletons)} skeletons, "
            f"{len(models.marker_sets)} marker sets"
            f"{', ' + str(len(models.assets)) + ' assets' if models.assets else ''}"
        )
        return models
