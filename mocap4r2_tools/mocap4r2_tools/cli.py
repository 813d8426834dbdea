"""The `mocap4r2` command line (and `ros2 mocap4r2` where ros2cli is installed).

Verbs: systems, start, stop, status, tui, plus verbs other packages register under the
entry point group ``mocap4r2.commands`` (mocap4r2_tools adds ``eval``, ``calibrate``, ...).
A registered verb is a class with ``help``, ``add_arguments(parser)`` and ``main(args) -> int``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # imported when a verb runs: `mocap4r2 --help` starts without rclpy
    from mocap4r2_control.control_plane import ControlResult, ControlSession

PLUGIN_GROUP = "mocap4r2.commands"

# wide enough for the tables when the output is a file or a pipe (rich's default is 80)
console = Console(width=None if sys.stdout.isatty() else 160)


# ---------------------------------------------------------------------- helpers
def _session(args: argparse.Namespace) -> ControlSession:
    from mocap4r2_control.control_plane import ControlSession

    return ControlSession(args=["mocap4r2"])


def _systems_table(systems: dict[str, Any], diagnostics: dict[str, Any] | None = None) -> Table:
    table = Table(title="mocap4r2 systems", header_style="bold")
    for column in ("system", "type", "state", "rate (Hz)", "frame", "session", "topics"):
        table.add_column(column)
    if diagnostics is not None:
        for column in ("measured (Hz)", "dropped", "status"):
            table.add_column(column)
    for name, info in systems.items():
        row = [
            name,
            info.type,
            info.state.label,
            f"{info.frame_rate:g}",
            info.frame_id or "-",
            info.session_id or "-",
            str(len(info.topics)),
        ]
        if diagnostics is not None:
            status = diagnostics.get(name)
            if status is None:
                row += ["-", "-", "no diagnostics"]
            else:
                values = {kv.key: kv.value for kv in status.values}
                row += [
                    values.get("rate_hz", "-"),
                    values.get("dropped_frames_total", "-"),
                    _level_text(status.level) + " " + status.message,
                ]
        table.add_row(*row)
    return table


def _level_text(level: Any) -> str:
    value = level[0] if isinstance(level, (bytes, bytearray)) else int(level)
    return {0: "[green]OK[/]", 1: "[yellow]WARN[/]", 2: "[red]ERROR[/]"}.get(value, "STALE")


def _print_result(result: ControlResult) -> int:
    from mocap4r2_interfaces.msg import Control

    verb = "START" if result.command == Control.START else "STOP"
    if not result.expected:
        console.print(f"[red]{verb}: no system to address (none announced on /mocap4r2/systems)[/]")
        return 2
    for ack in sorted(result.acks, key=lambda a: a.system):
        mark = "[green]ok[/]" if ack.success else "[red]FAILED[/]"
        console.print(
            f"{verb} {ack.system}: {mark} {ack.message} (at {ack.stamp.sec}.{ack.stamp.nanosec:09d})"
        )
    for name in result.missing:
        console.print(f"{verb} {name}: [red]no answer[/] within the timeout")
    return 0 if result.ok else 1


# ---------------------------------------------------------------------- verbs
def cmd_systems(args: argparse.Namespace) -> int:
    """``mocap4r2 systems``: print the systems announced on /mocap4r2/systems; 1 when none answers within
    --wait."""
    with _session(args) as client:
        systems = client.wait_for_systems(count=1, timeout=args.wait, min_wait=args.wait)
    if not systems:
        console.print("no mocap4r2 system announced on /mocap4r2/systems")
        return 1
    console.print(_systems_table(systems))
    return 0


def _control(args: argparse.Namespace, start: bool) -> int:
    with _session(args) as client:
        # all systems (no --systems): listen the whole --wait so none is missed
        known = client.wait_for_systems(
            names=args.systems, count=1, timeout=args.wait, min_wait=0.0 if args.systems else args.wait
        )
        unknown = [s for s in args.systems if s not in known]
        for name in unknown:
            console.print(f"[yellow]{name} has not announced itself; sending anyway[/]")
        call = client.start if start else client.stop
        result = call(systems=args.systems, session_id=args.session, timeout=args.timeout)
    return _print_result(result)


def cmd_start(args: argparse.Namespace) -> int:
    """``mocap4r2 start``: ask the selected systems to start (a session id names the take) and wait for their
    acks."""
    return _control(args, start=True)


def cmd_stop(args: argparse.Namespace) -> int:
    """``mocap4r2 stop``: ask the selected systems to stop and wait for their acks."""
    return _control(args, start=False)


def cmd_status(args: argparse.Namespace) -> int:
    """``mocap4r2 status``: the systems with their latest /diagnostics figures."""
    import time

    from diagnostic_msgs.msg import DiagnosticArray

    latest: dict[str, Any] = {}

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            latest[status.hardware_id] = status

    session = _session(args)
    try:
        session.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 50)
        systems = session.client.wait_for_systems(count=1, timeout=args.wait, min_wait=args.wait)
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline and any(name not in latest for name in systems):
            time.sleep(0.1)
    finally:
        session.close()
    if not systems:
        console.print("no mocap4r2 system announced on /mocap4r2/systems")
        return 1
    console.print(_systems_table(systems, latest))
    return 0


def cmd_tui(args: argparse.Namespace) -> int:
    """``mocap4r2 tui``: the live terminal view (textual)."""
    from .tui import run_tui

    return run_tui(refresh=args.refresh)


# ---------------------------------------------------------------------- parser
def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        type=float,
        default=2.0,
        help="seconds to listen for systems' announcements (default 2); with --systems, "
        "the longest to wait for those",
    )


def add_verbs(parser: argparse.ArgumentParser) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add the verbs to ``parser`` and return verb -> handler; shared by the ``mocap4r2`` command and the
    ros2cli extension so both accept the same arguments."""
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {}

    p = verbs.add_parser("systems", help="list the systems announced on /mocap4r2/systems")
    _add_common(p)
    handlers["systems"] = cmd_systems

    for name, handler, what in (
        ("start", cmd_start, "bring systems to active (configuring them first)"),
        ("stop", cmd_stop, "bring systems to inactive"),
    ):
        p = verbs.add_parser(name, help=what)
        p.add_argument("--session", default="", help="capture session id (e.g. a trial name)")
        p.add_argument(
            "--systems",
            nargs="*",
            default=[],
            metavar="NODE",
            help="fully qualified node names of the systems (default: all)",
        )
        p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for every answer")
        _add_common(p)
        handlers[name] = handler

    p = verbs.add_parser("status", help="systems with their live diagnostics")
    _add_common(p)
    handlers["status"] = cmd_status

    p = verbs.add_parser("tui", help="live terminal view; start/stop from the keyboard")
    p.add_argument("--refresh", type=float, default=0.5, help="refresh period, s")
    handlers["tui"] = cmd_tui

    for entry in _plugin_entries():
        try:
            command = entry.load()()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the CLI
            print(f"mocap4r2: cannot load verb {entry.name!r}: {exc}", file=sys.stderr)
            continue
        p = verbs.add_parser(entry.name, help=getattr(command, "help", ""))
        command.add_arguments(p)
        handlers[entry.name] = command.main
    return handlers


class Verb(Protocol):
    """What a plugin verb (entry point group ``mocap4r2.commands``) offers the CLI."""

    help: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def main(self, args: argparse.Namespace) -> int: ...


def verb_parser(name: str, verb: Verb, doc: str | None = None) -> argparse.ArgumentParser:
    """``mocap4r2 <name>``'s parser on its own, with ``doc`` (the verb module's docstring:
    its examples) as the epilog, for running a verb as a function from a test or a bench."""
    parser = argparse.ArgumentParser(
        prog=f"mocap4r2 {name}",
        description=verb.help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc,
    )
    verb.add_arguments(parser)
    return parser


def run_verb(name: str, verb: Verb, argv: list[str] | None = None, doc: str | None = None) -> int:
    """``mocap4r2 <name> <argv>`` as a function: its exit status."""
    return verb.main(verb_parser(name, verb, doc).parse_args(argv))


def _plugin_entries() -> list[metadata.EntryPoint]:
    try:
        entries = metadata.entry_points(group=PLUGIN_GROUP)
    except Exception:  # noqa: BLE001 - a broken plugin package must not break the CLI
        return []
    # a package seen twice on sys.path (build and install space) lists its verbs twice
    return sorted({e.name: e for e in entries}.values(), key=lambda e: e.name)


def run(
    parser: argparse.ArgumentParser,
    handlers: dict[str, Callable[[argparse.Namespace], int]],
    args: argparse.Namespace,
) -> int:
    """Run the handler of the parsed verb and return its exit status: 2 with the help when no verb was given,
    130 on Ctrl-C."""
    if not getattr(args, "verb", None):
        parser.print_help()
        return 2
    try:
        return int(handlers[args.verb](args) or 0)
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mocap4r2`` command; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="mocap4r2", description="Discover, start and stop mocap4r2 systems."
    )
    handlers = add_verbs(parser)
    args = parser.parse_args(argv)
    return run(parser, handlers, args)


if __name__ == "__main__":
    raise SystemExit(main())
