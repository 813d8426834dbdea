"""`mocap4r2 export`, `mocap4r2 recover` and `mocap4r2 sessions`: verbs on recorded sessions
(bags written by session_recorder, or any rosbag2 bag with mocap4r2 messages)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


class RecoverCommand:
    help = "rebuild the index and metadata.yaml of a bag whose recorder was killed"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bag", type=Path, help="session directory (or its .mcap file)")
        parser.add_argument("--discard-damaged", action="store_true",
                            help="delete the damaged file instead of keeping it as *.damaged")

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
