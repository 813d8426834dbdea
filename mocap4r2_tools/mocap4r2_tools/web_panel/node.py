"""The ``web_panel`` executable (and ``mocap4r2 web``): the ROS side in one thread, the
HTTP server in another, the main thread waiting for SIGINT/SIGTERM.

ROS parameters: ``host`` (127.0.0.1: loopback only; anything else requires a token),
``port`` (8080; 0 picks a free one), ``token_file`` (the token to require, read from a
file; otherwise one is generated and printed when the panel listens beyond loopback),
``sessions_dir`` (the recorder's output_dir, ~/mocap4r2_sessions)."""

from __future__ import annotations

import sys
from pathlib import Path

from mocap4r2_control.stop_signals import install

from .core import AccessPolicy, is_loopback, load_token
from .ros_side import PanelRos
from .server import Panel, ServerThread

DEFAULTS: dict[str, str | int] = {
    "host": "127.0.0.1",
    "port": 8080,
    "token_file": "",
    "sessions_dir": "~/mocap4r2_sessions",
}


def read_parameters(ros: PanelRos) -> dict[str, str | int]:
    """The node's parameters, each checked (a wrong one is logged and its default used)."""
    values: dict[str, str | int] = {}
    for name, default in DEFAULTS.items():
        value: object = ros.node.declare_parameter(name, default).value
        if not isinstance(value, type(default)):
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
    try:
        params = read_parameters(ros)
        ros.sessions_dir = Path(str(params["sessions_dir"])).expanduser()
        host, port = str(params["host"]), int(params["port"])
        try:
            token, source = load_token(host, str(params["token_file"]))
        except (OSError, ValueError) as exc:
            ros.node.get_logger().error(f"cannot read the token: {exc}")
            return 1
        extra = [] if is_loopback(host) or host in ("0.0.0.0", "::") else [host]
        any_host = host in ("0.0.0.0", "::")
        panel = Panel(ros, AccessPolicy(port=port, token=token, extra_hosts=extra, any_host=any_host))
        server = ServerThread(panel, host, port)
        try:
            server.start()
        except OSError as exc:
            ros.node.get_logger().error(f"cannot listen on {host}:{port}: {exc}")
            return 1
        # the actual port (0 asks for a free one), for the policy's Host check too
        panel.policy = AccessPolicy(port=server.port, token=token, extra_hosts=extra, any_host=any_host)
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        url = f"http://{shown}:{server.port}/" + (
            f"?token={token}" if token and source == "generated" else ""
        )
        print(f"web_panel: open {url} (token: {source})", flush=True)
        ros.node.get_logger().info(f"serving the panel on {host}:{server.port} (token: {source})")
        signals.wait(server.thread)
        return 0
    finally:
        if server is not None:
            server.stop()
        ros.close()


if __name__ == "__main__":
    raise SystemExit(main())
