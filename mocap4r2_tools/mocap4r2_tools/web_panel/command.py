"""`mocap4r2 web`: the web panel from the command line (the ``web_panel`` executable)."""

from __future__ import annotations

import argparse


class WebCommand:
    """The `web` verb of the mocap4r2 command line."""

    help = "the lab's control panel in the browser (systems, sessions, live 3D view)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="address to listen on (0.0.0.0: every interface; needs TLS or --allow-plain-http)",
        )
        parser.add_argument("--port", type=int, default=8080, help="TCP port (0: any free one)")
        parser.add_argument(
            "--token-file", default="", help="file holding the token to require (default: one is generated)"
        )
        parser.add_argument("--certfile", default="", help="TLS certificate (PEM) to serve HTTPS with")
        parser.add_argument("--keyfile", default="", help="its private key (PEM), if not in --certfile")
        parser.add_argument(
            "--allow-plain-http",
            action="store_true",
            help="serve plain HTTP beyond loopback (the token crosses the network in the clear)",
        )
        parser.add_argument(
            "--allow-host",
            action="append",
            default=[],
            metavar="NAME",
            help="another host name the panel answers to (a DNS alias of this PC); repeatable",
        )
        parser.add_argument("--sessions-dir", default="~/mocap4r2_sessions", help="the recorder's output_dir")

    def main(self, args: argparse.Namespace) -> int:
        from .node import main

        ros_args = ["mocap4r2-web", "--ros-args"]
        for name, value in (
            ("host", args.host),
            ("port", args.port),
            ("sessions_dir", args.sessions_dir),
            ("token_file", args.token_file),
            ("certfile", args.certfile),
            ("keyfile", args.keyfile),
            ("allowed_hosts", ",".join(args.allow_host)),
        ):
            if value != "":
                ros_args += ["-p", f"{name}:={value}"]
        if args.allow_plain_http:
            ros_args += ["-p", "allow_plain_http:=true"]
        return main(ros_args)
