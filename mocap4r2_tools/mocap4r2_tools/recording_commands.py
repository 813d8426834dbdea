"""`mocap4r2 export`, `mocap4r2 recover` and `mocap4r2 sessions`: verbs on recorded sessions
(bags written by session_recorder, or any rosbag2 bag with mocap4r2 messages)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class RecoverCommand:
    """``mocap4r2 recover``: see recording.recover."""

    help = "rebuild the index and metadata.yaml of a bag whose recorder was killed"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bag", type=Path, help="session directory (or its .mcap file)")
        parser.add_argument(
            "--discard-damaged",
            action="store_true",
            help="delete the damaged file instead of keeping it as *.damaged",
        )

    def main(self, args: argparse.Namespace) -> int:
        from .recording.recover import recover

        try:
            result = recover(args.bag, keep_damaged=not args.discard_damaged)
        except (OSError, ValueError) as exc:
            print(f"mocap4r2 recover: error: {exc}", file=sys.stderr)
            return 1
        print(f"recovered {result.messages} messages into {result.path}")
        for topic, count in sorted(result.counts.items()):
            print(f"  {topic}: {count}")
        if result.stopped_by:
            print(f"  (the file ended inside a record: {result.stopped_by})")
        return 0


class ExportCommand:
    """``mocap4r2 export``: see recording.export."""

    help = (
        "export a recorded session's markers/rigid bodies as C3D, TRC (OpenSim) or CSV, "
        "or the session for Foxglove (MCAP with Foxglove's schemas)"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bag", type=Path, help="session directory (rosbag2 bag) or .mcap file")
        parser.add_argument(
            "--format",
            required=True,
            choices=("c3d", "trc", "csv", "foxglove"),
            help="output format (foxglove: every recorded message plus SceneUpdate, FrameTransforms, Log)",
        )
        parser.add_argument(
            "--system",
            help="namespace of the system to export (e.g. /sim); needed when the bag holds several "
            "(foxglove: every system unless given)",
        )
        parser.add_argument("--out", type=Path, help="output file or directory (default: next to the bag)")
        parser.add_argument(
            "--progress",
            choices=("auto", "always", "never"),
            default="auto",
            help="progress bar while reading (auto: on a terminal, for long bags)",
        )

    def main(self, args: argparse.Namespace) -> int:
        from .recording.export import ExportError, export

        show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
        try:
            if show:
                from rich.progress import Progress

                with Progress(transient=True) as bar:
                    task = bar.add_task("reading the bag", total=None)
                    written = export(
                        args.bag,
                        args.format,
                        args.system,
                        args.out,
                        progress=lambda done, total: bar.update(task, completed=done, total=total),
                    )
            else:
                written = export(args.bag, args.format, args.system, args.out)
        except (ExportError, OSError) as exc:
            print(f"mocap4r2 export: error: {exc}", file=sys.stderr)
            return 1
        for path in written:
            print(f"wrote {path}")
        return 0


class SessionsCommand:
    """``mocap4r2 sessions``: see recording.sessions."""

    help = "list recorded sessions: session, start time, duration, systems, size"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "dir",
            nargs="?",
            type=Path,
            default=Path("~/mocap4r2_sessions"),
            help="the recorder's output_dir (default ~/mocap4r2_sessions)",
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")

    def main(self, args: argparse.Namespace) -> int:
        import json

        from .recording.sessions import list_sessions

        directory = args.dir.expanduser()
        if not directory.is_dir():
            print(f"mocap4r2 sessions: error: {directory} is not a directory", file=sys.stderr)
            return 1
        sessions = list_sessions(directory)
        if args.json:
            for s in sessions:
                print(json.dumps(s.as_dict()))
            return 0
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"sessions in {directory}")
        for col in ("session", "start", "duration", "systems", "messages", "size", "state"):
            table.add_column(col)
        for s in sessions:
            table.add_row(
                s.session,
                s.start_text,
                f"{s.duration:.1f} s",
                ", ".join(s.systems) or "-",
                str(s.messages),
                s.size_text,
                s.state,
            )
        Console().print(table)
        return 0
