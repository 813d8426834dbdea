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
from collections.abc import Callable

import numpy as np

from ..common import ClientStats
from . import protocol as nn
from .protocol import MessageId, ModelDefinitions, ServerInfo, Version
from .transport import NatNetTransport

ANSWER_WINDOW = 5.0  # s an answer may take after its request

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
        self.last_connect = 0.0
        self._connect_until = 0.0  # NAT_SERVERINFO is accepted until then (after a NAT_CONNECT)
        self._models_until = 0.0  # NAT_MODELDEF is accepted until then (after a request)
        self._last_model_request = 0.0
        self._responses: list[bytes | None] = []  # the answer to the pending request (at most one)
        self._request_lock = threading.Lock()  # one request in flight from other threads
        self._request_pending = False

    # ------------------------------------------------------------------ asking
    def send_connect(self) -> None:
        self.last_connect = time.monotonic()
        self._connect_until = self.last_connect + ANSWER_WINDOW
        self.transport.send(nn.encode_connect())

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
        return self._request_pending and not self._responses

    def take_answer(self, payload: bytes | None) -> None:
        """The answer to the pending request (None: the server does not know the command)."""
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
        if self.version is not None and self.version != version:
            self.log.warning(f"the server now streams NatNet {version} (was {self.version})")
            self.got_models = False  # the layout changed: read the models again
        self.version = version
        return True

    def take_models(self, payload: bytes) -> ModelDefinitions | None:
        """Decode a NAT_MODELDEF (None before NAT_SERVERINFO told the layout: asked again later)."""
        if self.version is None:
            return None
        models = nn.decode_model_definitions(payload, self.version)
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
