"""The ``web_panel`` executable (and ``mocap4r2 web``): the ROS side in one thread, the
HTTP server in another, the main thread waiting for SIGINT/SIGTERM.

ROS parameters: ``host`` (127.0.0.1: loopback only; 0.0.0.0: every interface),
``port`` (8080; 0 picks a free one), ``token_file`` (the token to require, read from a
file; otherwise one is generated; a token is required always, loopback included),
``certfile``/``keyfile`` (TLS; required beyond loopback unless ``allow_plain_http``),
``allow_plain_http`` (serve plain HTTP beyond loopback, warned about),
``allowed_hosts`` (extra host names the panel answers to, comma-separated: a DNS alias
of the lab PC), ``sessions_dir`` (the recorder's output_dir, ~/mocap4r2_sessions).

At start it prints one ``web_panel: open <url>`` line per URL that reaches it, each
carrying the token."""

from __future__ import annotations

import ssl
import sys
from pathlib import Path

from mocap4r2_control.stop_signals import install

from .core import (
    ALL_INTERFACES,
    AccessPolicy,
    host_names,
    listen_problem,
    load_token,
    machine_addresses,
    machine_names,
    panel_urls,
    token_file_warning,
)
from .ros_side import PanelRos
from .server import Panel, ServerThread, tls_context

DEFAULTS: dict[str, str | int | bool] = {
    "host": "127.0.0.1",
    "port": 8080,
    "token_file": "",
    "certfile": "",
    "keyfile": "",
    "allow_plain_http": False,
    "allowed_hosts": "",
    "sessions_dir": "~/mocap4r2_sessions",
}


def read_parameters(ros: PanelRos) -> dict[str, str | int | bool]:
    """The node's parameters, each checked (a wrong one is logged and its default used)."""
    values: dict[str, str | int | bool] = {}
    for name, default in DEFAULTS.items():
        value: object = ros.node.declare_parameter(name, default).value
        if type(value) is not type(default):
            ros.node.get_logger().error(
                f"parameter {name}={value!r} must be {type(default).__name__}; using {default!r}"
            )
            value = default
        values[name] = value
    port = int(values["port"])
    if not 0 <= port <= 65535:
        ros.node.get_logger().error(f"port {port} is not a TCP port; using 8080")
        values["port"] = 8080
    return values


def main(args: list[str] | None = None) -> int:
    """Serve the panel until SIGINT/SIGTERM."""
    signals = install()
    ros = PanelRos(Path("~/mocap4r2_sessions").expanduser(), args=args if args is not None else sys.argv)
    server: ServerThread | None = None
    logger = ros.node.get_logger()
    try:
        params = read_parameters(ros)
        ros.sessions_dir = Path(str(params["sessions_dir"])).expanduser()
        host, port = str(params["host"]), int(params["port"])
        certfile, keyfile = str(params["certfile"]), str(params["keyfile"])
        token_file = str(params["token_file"])
        try:
            token, source = load_token(token_file)
        except (OSError, ValueError) as exc:
            logger.error(f"cannot read the token: {exc}")
            return 1
        warning = token_file_warning(token_file)
        if warning:
            logger.warning(warning)
        refusal, warning = listen_problem(host, bool(certfile), bool(params["allow_plain_http"]))
        if refusal:
            logger.error(f"not started: {refusal}")
            return 1
        if warning:
            logger.warning(warning)
        context: ssl.SSLContext | None = None
        if certfile:
            try:
                context = tls_context(certfile, keyfile)
            except (OSError, ssl.SSLError) as exc:
                logger.error(f"cannot load the TLS certificate {certfile} / key {keyfile or certfile}: {exc}")
                return 1
        addresses = machine_addresses() if host in ALL_INTERFACES else []
        extra = [n.strip() for n in str(params["allowed_hosts"]).split(",") if n.strip()]
        names = host_names(host, extra, [*machine_names(), *addresses])

        def policy(bound: int) -> AccessPolicy:
            return AccessPolicy(port=bound, token=token, names=names, any_address=host in ALL_INTERFACES)

        panel = Panel(ros, policy(port), tls=context is not None)
        server = ServerThread(panel, host, port, context)
        try:
            server.start()
        except OSError as exc:
            logger.error(f"cannot listen on {host}:{port}: {exc}")
            return 1
        # the actual port (0 asks for a free one), for the policy's Host check too
        panel.policy = policy(server.port)
        hostname = machine_names()[0] if host in ALL_INTERFACES else ""
        for url in panel_urls(
            host, server.port, token, context is not None, addresses=addresses, hostname=hostname
        ):
            print(f"web_panel: open {url}", flush=True)
        scheme = "https" if context is not None else "http"
        print(f"web_panel: token {source}; the page keeps it as a cookie", flush=True)
        # the log has no token: it may be read by others than whoever started the panel
        logger.info(f"serving the panel on {scheme}://{host}:{server.port} (token: {source})")
        signals.wait(server.thread)
        return 0
    finally:
        if server is not None:
            server.stop()
        ros.close()


if __name__ == "__main__":
    raise SystemExit(main())
