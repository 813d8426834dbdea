"""`mocap4r2 web`: the web panel from the command line (the ``web_panel`` executable)."""

from __future__ import annotations

import argparse


class WebCommand:
    """The `web` verb of the mocap4r2 command line."""

    help = "the lab's control panel in the browser (systems, sessions, live 3D view)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--host", default="127.0.0.1", help="address to listen on (beyond loopback: a token)"
        )
        parser.add_argument("--port", type=int, default=8080, help="TCP port (0: any free one)")
        parser.add_argument("--token-file", default="", help="file holding the token to require")
        parser.add_argument("--sessions-dir", default="~/mocap4r2_sessions", help="the recorder's output_dir")

    def main(self, args: argparse.Namespace) -> int:
        from .node import main

        ros_args = [
            "mocap4r2-web",
            "--ros-args",
            "-p",
            f"host:={args.host}",
            "-p",
            f"port:={args.port}",
            "-p",
            f"sessions_dir:={args.sessions_dir}",
        ]
        if args.token_file:
            ros_args += ["-p", f"token_file:={args.token_file}"]
        return main(ros_args)
