"""The aiohttp half of the web panel: the page, the JSON API and the live WebSocket.

It runs in its own thread with its own event loop. What it needs from ROS it reads from
:class:`~.ros_side.PanelRos` (copies under a lock, the latest frame of each system) or
hands to PanelRos's bounded worker pool; nothing here waits on the ROS executor.

Each WebSocket client has one sender task that wakes at the client's rate (at most
``core.MAX_CLIENT_RATE``), has the newest messages of its chosen system taken right then
and sends them, if there are new ones: a client never gets more than that rate whatever
the input rate, holds at most one frame in flight, and a client that does not take a
frame within ``SEND_TIMEOUT`` is closed. A slow client thus only ever slows itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import ssl
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, Protocol

from aiohttp import WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from .core import (
    MAX_BODY_BYTES,
    TOKEN_REQUIRED,
    AccessPolicy,
    LiveFrame,
    RequestError,
    next_due,
    parse_control_request,
    parse_export,
    parse_rate,
    parse_transition,
    system_name_problem,
)

STATIC_DIR = Path(__file__).parent / "static"
COOKIE = "mocap4r2_panel_token"
MAX_CLIENTS = 128
SEND_TIMEOUT = 2.0
#: a message from the page over the WebSocket (a choice of system and rate) is small
MAX_WS_MESSAGE = 4096
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
log = logging.getLogger("mocap4r2.web_panel")
#: what a browser opening the panel without its token gets (no script, no style: the
#: CSP holds); the form sends the pasted token as /?token=..., which becomes the cookie
LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mocap4r2 panel: token required</title></head>
<body><h1>mocap4r2 panel</h1>
<p>This panel requires its token. Open the URL the panel printed when it started (it ends in
<code>?token=...</code>), or paste the token here.</p>
<form method="get" action="/"><label>token <input name="token" type="password" autocomplete="off"></label>
<button type="submit">open</button></form></body></html>
"""


class PanelBackend(Protocol):
    """What the server needs from the ROS side (``ros_side.PanelRos``)."""

    def systems(self) -> list[dict[str, Any]]: ...
    def known_systems(self) -> list[str]: ...
    def sessions(self) -> list[dict[str, Any]]: ...
    def live_frame(self, system: str) -> LiveFrame | None: ...
    def frame_key(self, system: str) -> float | None: ...
    def submit(self, function: Any, *args: Any) -> Any: ...
    def control_call(self, request: Any, start: bool) -> dict[str, Any]: ...
    def transition(self, system: str, transition: str) -> dict[str, Any]: ...
    def export_session(self, session: str, fmt: str, system: str | None, out_dir: Path) -> list[Path]: ...

    log: list[dict[str, Any]]


def _refuse(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=SECURITY_HEADERS)


class Panel:
    """The aiohttp application and its live-view clients."""

    def __init__(self, backend: PanelBackend, policy: AccessPolicy, tls: bool = False):
        self.backend = backend
        self.policy = policy
        self.tls = tls
        #: requests refused (wrong Host or Origin, no token): the stress section's count
        self.refused = 0
        self.clients: set[web.WebSocketResponse] = set()
        self.sent_frames = 0
        self.dropped_clients = 0
        # the page's form of each system's newest frame, built once for every client
        self._encoded: dict[str, tuple[float, str, float]] = {}
        self._export_root = Path(tempfile.mkdtemp(prefix="mocap4r2_web_panel_"))

    @property
    def cookie(self) -> str:
        """The cookie holding the token: one per port, as cookies are not kept apart by
        port and two panels on one machine must not overwrite each other's."""
        return f"{COOKIE}_{self.policy.port}"

    # ---------------------------------------------------------------- the app
    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._guard])
        app.router.add_get("/", self.index)
        app.router.add_get("/static/{name}", self.static)
        app.router.add_get("/api/systems", self.api_systems)
        app.router.add_get("/api/sessions", self.api_sessions)
        app.router.add_get("/api/log", self.api_log)
        app.router.add_post("/api/start", self.api_start)
        app.router.add_post("/api/stop", self.api_stop)
        app.router.add_post("/api/lifecycle", self.api_lifecycle)
        app.router.add_get("/api/export", self.api_export)
        app.router.add_get("/ws", self.websocket)
        app.on_shutdown.append(self._close_clients)
        app.on_cleanup.append(self._cleanup)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every request: its Host is this panel's, it is not cross-site, and it carries
        the token (loopback included). The page itself may be opened with ?token=...,
        which becomes an HttpOnly, SameSite=Strict cookie of this panel's port."""
        length = request.content_length
        if length is not None and length > MAX_BODY_BYTES:
            # refused before anything else is looked at, unread (aiohttp reads and drops
            # the rest after answering, so the client gets the 413 rather than a reset)
            self.refused += 1
            return _refuse(413, f"request body over {MAX_BODY_BYTES} bytes")
        host = request.headers.get("Host")
        problem = self.policy.host_problem(host)
        if problem is None:
            problem = self.policy.origin_problem(
                request.headers.get("Origin"), host, request.headers.get("Sec-Fetch-Site")
            )
        if problem is not None:
            self.refused += 1
            return _refuse(403, problem)
        query_token = request.query.get("token")
        if request.path == "/" and query_token is not None and self.policy.token_ok(query_token):
            response = web.HTTPFound("/")
            response.set_cookie(
                self.cookie, query_token, httponly=True, samesite="Strict", path="/", secure=self.tls
            )
            response.headers.update(SECURITY_HEADERS)
            return response
        header = request.headers.get("Authorization", "")
        presented = header[7:] if header.startswith("Bearer ") else request.cookies.get(self.cookie)
        if not self.policy.token_ok(presented):
            self.refused += 1
            if request.path == "/" and request.method == "GET":
                # a person at a browser: say what to do, and offer to paste the token
                return web.Response(
                    status=401, text=LOGIN_PAGE, content_type="text/html", headers=SECURITY_HEADERS
                )
            return _refuse(401, TOKEN_REQUIRED)
        try:
            response = await handler(request)
        except RequestError as exc:
            return _refuse(400, str(exc))
        except web.HTTPRequestEntityTooLarge:
            return _refuse(413, f"request body over {MAX_BODY_BYTES} bytes")
        if not isinstance(response, web.WebSocketResponse):
            response.headers.update(SECURITY_HEADERS)
        return response

    async def _json_body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=request.content_length)
        if request.content_type != "application/json":
            raise RequestError("the body must be application/json")
        try:
            return json.loads(await request.read())
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(f"the body is not JSON: {str(exc)[:100]}") from None

    async def _call(self, function: Any, *args: Any) -> Any:
        return await asyncio.wrap_future(self.backend.submit(function, *args))

    # ---------------------------------------------------------------- page
    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Content-Type": "text/html"})

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        # only the shipped files, by exact name: nothing from the path reaches the disk
        shipped = {p.name: p for p in STATIC_DIR.iterdir() if p.is_file()}
        path = shipped.get(name)
        if path is None:
            return _refuse(404, "no such file")
        return web.FileResponse(path, headers={"Content-Type": STATIC_TYPES.get(path.suffix, "text/plain")})

    # ---------------------------------------------------------------- API
    async def api_systems(self, request: web.Request) -> web.Response:
        return web.json_response(self.backend.systems())

    async def api_sessions(self, request: web.Request) -> web.Response:
        return web.json_response(await asyncio.to_thread(self.backend.sessions))

    async def api_log(self, request: web.Request) -> web.Response:
        return web.json_response(list(self.backend.log))

    async def api_start(self, request: web.Request) -> web.Response:
        control = parse_control_request(await self._json_body(request), start=True)
        return web.json_response(await self._call(self.backend.control_call, control, True))

    async def api_stop(self, request: web.Request) -> web.Response:
        control = parse_control_request(await self._json_body(request), start=False)
        return web.json_response(await self._call(self.backend.control_call, control, False))

    async def api_lifecycle(self, request: web.Request) -> web.Response:
        system, transition = parse_transition(await self._json_body(request), self.backend.known_systems())
        return web.json_response(await self._call(self.backend.transition, system, transition))

    async def api_export(self, request: web.Request) -> web.StreamResponse:
        session, fmt, system = parse_export(
            request.query.get("session", ""), request.query.get("format", ""), request.query.get("system")
        )
        out_dir = Path(tempfile.mkdtemp(dir=self._export_root))
        written: list[Path] = await self._call(self.backend.export_session, session, fmt, system, out_dir)
        if len(written) == 1:
            path = written[0]
        else:  # CSV writes one file per table: one download
            path = out_dir / f"{session}_{fmt}.zip"
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
                for item in written:
                    archive.write(item, item.name)
        return web.FileResponse(path, headers={"Content-Disposition": f'attachment; filename="{path.name}"'})

    # ---------------------------------------------------------------- live view
    async def websocket(self, request: web.Request) -> web.StreamResponse:
        if len(self.clients) >= MAX_CLIENTS:
            return _refuse(503, f"{MAX_CLIENTS} live views are open; close one")
        ws = web.WebSocketResponse(max_msg_size=MAX_WS_MESSAGE, heartbeat=10.0)
        await ws.prepare(request)
        self.clients.add(ws)
        choice: dict[str, Any] = {"system": None, "rate": 30.0}
        sender = asyncio.create_task(self._send_frames(ws, choice))
        try:
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue
                try:
                    self._choose(message.data, choice)
                except RequestError as exc:
                    await ws.send_str(json.dumps({"type": "error", "error": str(exc)}))
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            self.clients.discard(ws)
        return ws

    def _choose(self, text: str, choice: dict[str, Any]) -> None:
        try:
            body = json.loads(text)
        except ValueError:
            raise RequestError("a live view message is a JSON object {system, rate}") from None
        if not isinstance(body, dict):
            raise RequestError("a live view message is a JSON object {system, rate}")
        if "system" in body:
            problem = system_name_problem(body["system"])
            if problem:
                raise RequestError(problem)
            choice["system"] = body["system"]
        if "rate" in body:
            choice["rate"] = parse_rate(body["rate"])

    def _encoded_frame(self, system: str, due: float) -> tuple[float, str] | None:
        """The newest frame of ``system`` as JSON, taken and built once for all the
        clients due at the instant ``due``: a client due at the same instant as one
        served before it gets the same frame, even if a newer message came in since
        (at 1 kHz one always has), rather than a build of its own."""
        cached = self._encoded.get(system)
        if cached is not None and cached[2] == due:
            return cached[0], cached[1]
        key = self.backend.frame_key(system)
        if key is None:
            return None
        if cached is not None and cached[0] == key:
            self._encoded[system] = (key, cached[1], due)
            return key, cached[1]
        frame = self.backend.live_frame(system)
        if frame is None:
            return None
        text = json.dumps(frame.as_dict(), separators=(",", ":"))
        if len(self._encoded) < 256 or system in self._encoded:
            self._encoded[system] = (key, text, due)
        return key, text

    async def _send_frames(self, ws: web.WebSocketResponse, choice: dict[str, Any]) -> None:
        last_key: float | None = None
        while not ws.closed:
            period = 1.0 / choice["rate"]
            # the frame is taken when the client is due (the newest the panel has then),
            # so its age is what DDS delivered, not another timer's phase; clients at the
            # same rate are due together and share that take and its encoding
            now = time.monotonic()
            due = next_due(now, period)
            await asyncio.sleep(due - now)
            system = choice["system"]
            if system is None:
                continue
            encoded = self._encoded_frame(system, due)
            if encoded is None or encoded[0] == last_key:
                continue
            last_key = encoded[0]
            try:
                await asyncio.wait_for(ws.send_str(encoded[1]), SEND_TIMEOUT)
            except (TimeoutError, ConnectionError, RuntimeError):
                self.dropped_clients += 1
                await ws.close()
                return
            self.sent_frames += 1

    async def _close_clients(self, app: web.Application) -> None:
        for ws in list(self.clients):
            await ws.close(code=1001, message=b"panel stopping")

    async def _cleanup(self, app: web.Application) -> None:
        shutil.rmtree(self._export_root, ignore_errors=True)


class UnparsableRequestLog(logging.Filter):
    """Keeps aiohttp's log of requests it cannot parse within a budget.

    aiohttp answers a request it cannot parse (a header line over its 8 KiB limit, a
    malformed request line) with 400 and logs a traceback at ERROR on ``aiohttp.server``
    for each: a flood of them, which anyone who reaches the port can send, would fill the
    panel's log at about 2.5 kB a request. Installed on that logger, this filter drops
    those records, counts them, and logs one line on the panel's logger for the first and
    then at most one per ``period`` seconds with the count since the last line. Any other
    record of that logger passes unchanged."""

    def __init__(self, period: float = 30.0, clock: Any = time.monotonic):
        super().__init__()
        self.period = period
        self.clock = clock
        self.total = 0
        self._unreported = 0
        self._last: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        self.total += 1
        self._unreported += 1
        now = self.clock()
        if self._last is None or now - self._last >= self.period:
            reason = " ".join(str(exc).split())[:160]
            log.warning(
                f"refused {self._unreported} request(s) aiohttp could not parse "
                f"({self.total} in all; the latest: {type(exc).__name__}: {reason}); "
                f"the next such line in {self.period:g} s at the earliest"
            )
            self._unreported = 0
            self._last = now
        return False


class ServerThread:
    """The server on its own event loop in its own thread; ``stop()`` ends it."""

    def __init__(self, panel: Panel, host: str, port: int, ssl_context: ssl.SSLContext | None = None):
        self.panel = panel
        self.host, self.port = host, port
        self.ssl_context = ssl_context
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self.thread = threading.Thread(target=self._run, name="web-panel-http", daemon=True)
        self.unparsable = UnparsableRequestLog()

    def start(self, timeout: float = 10.0) -> None:
        logging.getLogger("aiohttp.server").addFilter(self.unparsable)
        self.thread.start()
        self.ready.wait(timeout)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._runner = web.AppRunner(self.panel.app(), access_log=None)
            self.loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
            self.loop.run_until_complete(site.start())
            # port 0 asks for a free port: the one bound is the runner's address
            for address in self._runner.addresses:
                self.port = int(address[1])
                break
        except BaseException as exc:  # noqa: BLE001 - handed to start()
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._runner.cleanup())
        self.loop.close()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5.0)
        logging.getLogger("aiohttp.server").removeFilter(self.unparsable)


def tls_context(certfile: str, keyfile: str = "") -> ssl.SSLContext:
    """The server's TLS context (TLS 1.2 at least) from a PEM certificate (chain) and its
    key (``keyfile`` empty: the key is in ``certfile``). Raises OSError/ssl.SSLError
    with the file's problem."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(
        str(Path(certfile).expanduser()), str(Path(keyfile).expanduser()) if keyfile else None
    )
    return context
