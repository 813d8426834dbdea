r"""`mocap4r2 eval`: ATE and RPE of an estimate against ground truth, offline.

Inputs are TUM files (``--gt``, ``--est``) or topics of a rosbag2 bag (sqlite3 or MCAP,
``--bag`` with ``--gt-topic``/``--est-topic``); the two may be mixed (``--gt`` may itself
be a bag). Prints a summary, or one JSON object (``--json``), and writes plots (``--plot``).

    mocap4r2 eval --gt gt.tum --est est.tum --align se3
    mocap4r2 eval --bag run1 --gt-topic /sim/rigid_bodies --body robot1 \
                  --est-topic /odom --align posyaw --rpe-delta 1 --rpe-unit m --plot out/
    mocap4r2 eval --gt gt.tum --est est.tum --offset auto --association interpolate

``--offset auto`` finds the estimate's time offset from the data (speed and angular rate
cross-correlated, then the ATE minimised over the offset; trajectory/time_offset.py)
within ``±--offset-window`` s, reports it, and evaluates with it. ``--json`` always gives
the offset used as top-level ``t_offset`` (s added to the estimate's stamps).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from contextlib import nullcontext
from pathlib import Path

from .cli import run_verb, verb_parser
from .trajectory import alignment, association, metrics
from .trajectory.evaluation import EvalOptions, evaluate
from .trajectory.io import read_bag, read_tum
from .trajectory.poses import Trajectory, TrajectoryInputError
from .trajectory.report import summary_rows, to_dict, write_plots
from .trajectory.time_offset import DEFAULT_WINDOW, TimeOffset

# inputs at least this large get a progress bar when stderr is a terminal
_LARGE_BAG_MESSAGES = 50_000


def is_bag(path: Path) -> bool:
    """Whether ``path`` is a rosbag2 bag (directory, .db3 or .mcap) rather than a TUM file."""
    return path.is_dir() or path.suffix in (".db3", ".mcap")


class EvalCommand:
    """The ``eval`` verb: its arguments and what it runs."""

    help = "trajectory error (ATE/RPE) of an estimate against ground truth, from TUM files or bags"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        src = parser.add_argument_group("inputs")
        src.add_argument("--gt", type=Path, help="ground truth: TUM file (or a bag, with --gt-topic)")
        src.add_argument("--est", type=Path, help="estimate: TUM file (or a bag, with --est-topic)")
        src.add_argument("--bag", type=Path, help="rosbag2 bag (directory, .db3 or .mcap) for the topics")
        src.add_argument(
            "--gt-topic", help="ground truth topic (PoseStamped, Odometry, TF, RigidBodies, ...)"
        )
        src.add_argument("--est-topic", help="estimate topic")
        src.add_argument("--body", help="rigid body name when --gt-topic carries RigidBodies")
        src.add_argument("--est-body", help="rigid body name when --est-topic carries RigidBodies")
        src.add_argument(
            "--gt-frames", nargs=2, metavar=("PARENT", "CHILD"), help="TF edge of the ground truth"
        )
        src.add_argument("--est-frames", nargs=2, metavar=("PARENT", "CHILD"), help="TF edge of the estimate")
        ev = parser.add_argument_group("evaluation")
        ev.add_argument(
            "--association",
            choices=association.METHODS,
            default="nearest",
            help="nearest pose, or ground truth interpolated at the estimate stamps (default nearest)",
        )
        ev.add_argument(
            "--max-diff", type=float, default=0.01, help="max stamp difference in s (default 0.01)"
        )
        ev.add_argument(
            "--offset",
            type=_offset_value,
            default=0.0,
            help="s added to the estimate stamps, or auto: found from the data (default 0)",
        )
        ev.add_argument(
            "--offset-window",
            type=float,
            default=DEFAULT_WINDOW,
            metavar="S",
            help=f"with --offset auto: search the offset within +-S s (default {DEFAULT_WINDOW:g})",
        )
        ev.add_argument("--align", choices=alignment.METHODS, default="se3", help="alignment (default se3)")
        ev.add_argument(
            "--align-first",
            type=int,
            default=0,
            metavar="N",
            help="align on the first N pose pairs only (default: all)",
        )
        ev.add_argument("--rpe-delta", type=float, default=1.0, help="RPE step (default 1)")
        ev.add_argument(
            "--rpe-unit", choices=metrics.RPE_UNITS, default="frames", help="RPE step unit (default frames)"
        )
        ev.add_argument(
            "--rpe-all-pairs", action="store_true", help="RPE over all pairs instead of consecutive ones"
        )
        out = parser.add_argument_group("output")
        out.add_argument(
            "--json",
            nargs="?",
            const="-",
            metavar="FILE",
            help="write the result as one JSON object (to stdout without FILE)",
        )
        out.add_argument("--plot", type=Path, metavar="DIR", help="write PNG plots into DIR")
        out.add_argument(
            "--progress",
            choices=("auto", "always", "never"),
            default="auto",
            help="progress bar on long inputs (auto: when stderr is a terminal)",
        )

    def main(self, args: argparse.Namespace) -> int:
        try:
            return self._run(args)
        except TrajectoryInputError as exc:
            print(f"mocap4r2 eval: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # the reader went away (`| head`): finish quietly, also at interpreter exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0

    # ------------------------------------------------------------------ steps
    def _run(self, args: argparse.Namespace) -> int:
        auto = args.offset == "auto"
        options = EvalOptions(
            association=args.association,
            max_diff=args.max_diff,
            offset=0.0 if auto else args.offset,
            offset_auto=auto,
            offset_window=args.offset_window,
            align=args.align,
            align_first_n=args.align_first,
            rpe_delta=args.rpe_delta,
            rpe_unit=args.rpe_unit,
            rpe_all_pairs=args.rpe_all_pairs,
        )
        _check_options(options)
        progress = _progress(args)
        with progress if progress is not None else nullcontext():
            gt = _load(
                args.gt,
                args.bag,
                topic=args.gt_topic,
                body=args.body,
                frames=args.gt_frames,
                what="ground truth",
                flag="gt",
                progress=progress,
            )
            est = _load(
                args.est,
                args.bag,
                topic=args.est_topic,
                body=args.est_body,
                frames=args.est_frames,
                what="estimate",
                flag="est",
                progress=progress,
            )
            for note in gt.notes + est.notes:  # what the readers sorted or tolerated
                print(f"mocap4r2 eval: warning: {note}", file=sys.stderr)
            task = progress.add_task("evaluating", total=None) if progress is not None else None
            result = evaluate(gt, est, options)
            if args.plot:
                written = write_plots(result, args.plot)
            if task is not None:
                progress.update(task, total=1, completed=1)
        data = {"t_offset": result.options.offset, **to_dict(result)}
        if result.time_offset is not None:
            data["time_offset"] = _offset_dict(result.time_offset)
        if args.json == "-":
            print(json.dumps(data, indent=2))
        else:
            if args.json:
                Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
            _print_summary(result, gt, est)
        if args.plot and args.json != "-":
            print("plots: " + ", ".join(str(p) for p in written))
        return 0


def _offset_value(text: str) -> float | str:
    """--offset: a number of seconds, or auto."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or auto, not {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"the offset must be finite, not {text!r}")
    return value


def _offset_dict(found: TimeOffset) -> dict:
    return {
        "offset": found.offset,
        "coarse": found.coarse,
        "correlation": found.correlation,
        "bin": found.bin,
        "window": found.window,
        "ate_rmse_at_offset": found.ate_rmse,
        "poses": found.poses,
        "signals": list(found.signals),
    }


def _check_options(options: EvalOptions) -> None:
    if options.offset_auto and not (math.isfinite(options.offset_window) and options.offset_window > 0):
        raise TrajectoryInputError(f"--offset-window must be > 0 s, not {options.offset_window}")
    if options.max_diff < 0:
        raise TrajectoryInputError(f"--max-diff must be >= 0, not {options.max_diff}")
    if options.align_first_n < 0:
        raise TrajectoryInputError(f"--align-first must be >= 0, not {options.align_first_n}")
    if options.rpe_delta <= 0:
        raise TrajectoryInputError(f"--rpe-delta must be > 0, not {options.rpe_delta}")
    if options.rpe_unit == "frames" and options.rpe_delta != int(options.rpe_delta):
        raise TrajectoryInputError(f"--rpe-delta in frames must be a whole number, not {options.rpe_delta}")


def _load(
    path: Path | None,
    bag: Path | None,
    *,
    topic: str | None,
    body: str | None,
    frames,
    what: str,
    flag: str,
    progress,
) -> Trajectory:
    source = path or bag
    if source is None:
        raise TrajectoryInputError(f"no {what}: give --{flag} FILE, or --bag BAG with --{flag}-topic")
    if not source.exists():
        raise TrajectoryInputError(f"{what}: {source} does not exist")
    if not is_bag(source):
        if topic:
            raise TrajectoryInputError(f"--{flag}-topic applies to bags, and {source} is a TUM file")
        return read_tum(source, name=what)
    if not topic:
        raise TrajectoryInputError(f"{what} comes from the bag {source}: give --{flag}-topic")
    callback = None
    if progress is not None:
        task = progress.add_task(f"reading {what} {topic}", total=None)

        def callback(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

    return read_bag(
        source, topic, body=body, frames=tuple(frames) if frames else None, progress=callback, name=what
    )


def _progress(args: argparse.Namespace):
    """A rich progress display on stderr, or None."""
    if args.progress == "never":
        return None
    if args.progress == "auto" and (not sys.stderr.isatty() or not _large_input(args)):
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True, force_terminal=args.progress == "always" or None),
    )


def _large_input(args: argparse.Namespace) -> bool:
    for path in (args.gt, args.est, args.bag):
        if path is None or not path.exists():
            continue
        if path.is_dir():
            size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        else:
            size = path.stat().st_size
        # ~ 100 bytes per pose in a bag or a TUM line
        if size > 100 * _LARGE_BAG_MESSAGES:
            return True
    return False


def _print_summary(result, gt: Trajectory, est: Trajectory) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"trajectory error: {est.name} vs {gt.name}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    found = result.time_offset
    if found is not None:
        table.add_row(
            "time offset (auto)",
            f"{found.offset * 1e3:+.3f} ms added to the estimate stamps (coarse "
            f"{found.coarse * 1e3:+.1f} ms from {' and '.join(found.signals)}, correlation "
            f"{found.correlation:.2f}; searched +-{found.window:g} s)",
        )
    for label, value in summary_rows(result):
        table.add_row(label, value)
    Console(soft_wrap=True).print(table)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mocap4r2 eval`` on its own."""
    return verb_parser("eval", EvalCommand(), __doc__)


def main(argv: list[str] | None = None) -> int:
    """``mocap4r2 eval`` as a function: exit status."""
    return run_verb("eval", EvalCommand(), argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
