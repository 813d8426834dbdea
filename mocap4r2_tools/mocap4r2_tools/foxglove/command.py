"""`mocap4r2 foxglove`: the Foxglove node from the command line (the ``foxglove`` executable)."""

from __future__ import annotations

import argparse


class FoxgloveCommand:
    """The `foxglove` verb of the mocap4r2 command line."""

    help = "every system live in Foxglove (WebSocket server, default ws://127.0.0.1:8765)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--port", type=int, default=8765, help="TCP port (0: any free one)")
        parser.add_argument(
            "--systems",
            nargs="*",
            default=[],
            metavar="NS",
            help="namespaces to show besides the announced ones",
        )
        parser.add_argument(
            "--max-rate",
            type=float,
            default=60.0,
            help="scene updates a second per source (0: all)",
        )

    def main(self, args: argparse.Namespace) -> int:
        from .node import main

        ros_args = ["mocap4r2-foxglove", "--ros-args"]
        for name, value in (("host", args.host), ("port", args.port), ("max_rate", float(args.max_rate))):
            ros_args += ["-p", f"{name}:={value}"]
        if args.systems:
            ros_args += ["-p", "systems:=[" + ",".join(f"'{s}'" for s in args.systems) + "]"]
        return main(ros_args)
