"""Every command in README.md and docs/*.md runs as written: each shell command of their
code blocks (```bash, ```sh) is extracted, and after `source scripts/env.sh`
(the way README says to get a shell):

* its executable resolves: a command on PATH, a shell builtin, or a path in the
  repository (``install/.../simulated_system``); a ``source`` names a file that exists;
  a ``make`` target is in the Makefile;
* ``mocap4r2 <verb> ...`` is accepted by the command line's own parser, options and all;
* ``ros2 run``/``ros2 launch`` of this suite's packages name an installed executable or
  launch file, with the parameters (``-p name:=``) and launch arguments (``name:=``) the
  systems of mocap4r2_drivers/registry.py declare;
* the stand-ins' commands (natnet_simulator, qtm_simulator, vrpn_simulator) are run as
  written, each in a network namespace of its own, until they say they are ready.

``ros2`` itself comes with a ROS 2 distribution (ros2cli is not on PyPI): where it is
absent its commands are skipped with that reason; everything else must resolve here.
Every fenced block carries a language, so a command cannot hide in an untagged block
(output is ```text; a transcript is ```console, its commands after a ``$ `` prompt).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^([ \t]*)```([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
ROS2_ABSENT = "ros2 (ros2cli) comes with a ROS 2 distribution, not with the PyPI wheels used here"
OWN_PACKAGES = ("mocap4r2_drivers", "mocap4r2_tools", "mocap4r2_control")
ROS_ARGS_KEYS = frozenset({"use_sim_time"})


@dataclass(frozen=True)
class Command:
    """One shell command of a code block: where it is written, and its words."""

    where: str  # file:line
    text: str
    argv: tuple[str, ...]


def _blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line of the block's first line, language, text) of every fenced block."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(2), m.group(3)) for m in FENCE.finditer(text)]


def _optional_syntax(words: list[str]) -> list[str]:
    """A synopsis's ``[--system /sim]``: an optional part, left out (it is shown, not run)."""
    out, depth = [], 0
    for word in words:
        if word.startswith("[") and not word.startswith("[]") and "=" not in word.split("[")[0]:
            depth += 1
        if depth == 0:
            out.append(word)
        if depth and word.endswith("]"):
            depth -= 1
    return out


def _split_commands(line: str) -> list[list[str]]:
    """The commands of one shell line, as the shell splits them: words (quotes removed,
    a comment dropped), separated by ``&&``, ``||``, ``|``, ``;`` and ``&``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set("|&;"):
            out.append([])
        else:
            out[-1].append(token)
    return [words for words in out if words]


def _prompted(lines: list[str]) -> list[str]:
    """The command lines of a console transcript (``$ command``, with its continuation
    lines); its output lines become blank, so the line numbers stay."""
    out, continued = [], False
    for line in lines:
        if line.startswith("$ ") or continued:
            out.append(line[2:] if line.startswith("$ ") and not continued else line)
            continued = line.rstrip().endswith("\\")
        else:
            out.append("")
    return out


def commands() -> list[Command]:
    """Every command of every shell block, continuation lines joined, comments dropped,
    and ``a && b``, ``a | b``, ``a &`` split into their commands."""
    found = []
    for path in DOCS:
        for first, language, body in _blocks(path):
            if language not in SHELL:
                continue
            lines = body.splitlines()
            if language == "console":  # a transcript: the commands follow a "$ " prompt
                lines = _prompted(lines)
            i = 0
            while i < len(lines):
                start, line = i, lines[i]
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                for words in _split_commands(line):
                    words = _optional_syntax(words)
                    if words:
                        where = f"{path.relative_to(ROOT)}:{first + start}"
                        found.append(Command(where, shlex.join(words), tuple(words)))
    return found


def _ids(items: list[Command]) -> list[str]:
    return [f"{c.where} {c.argv[0]}" for c in items]


@cache
def shell_path() -> str:
    """PATH after `source scripts/env.sh`, as README says to start."""
    out = subprocess.run(
        ["bash", "-c", 'source scripts/env.sh >/dev/null 2>&1; printf %s "$PATH"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


@cache
def shell_kinds(names: tuple[str, ...]) -> dict[str, str]:
    """bash's ``type -t`` of each name after `source scripts/env.sh` (file, builtin, ...)."""
    script = "source scripts/env.sh >/dev/null 2>&1; for n in " + " ".join(map(shlex.quote, names))
    script += '; do printf "%s=%s\\n" "$n" "$(type -t "$n")"; done'
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def _program(argv: tuple[str, ...]) -> tuple[str, list[str]]:
    """The program and its arguments, past ``VAR=value`` assignments."""
    words = list(argv)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words.pop(0)
    return (words[0], words[1:]) if words else ("", [])


ALL = commands()
ROS2 = [c for c in ALL if _program(c.argv)[0] == "ros2"]
ROS2_TARGETS = [c for c in ROS2 if c.argv[1:2] in (("run",), ("launch",))]
OTHERS = [c for c in ALL if _program(c.argv)[0] != "ros2"]


def test_the_extraction_finds_the_commands_users_copy():
    """The parse is what the rest relies on: it must see the commands it claims to check."""
    programs = {_program(c.argv)[0] for c in ALL}
    assert {"make", "mocap4r2", "ros2", "natnet_simulator", "replay_system", "source"} <= programs, programs
    demo = [c for c in ALL if c.argv[:2] == ("make", "demo")]
    assert demo and demo[0].where.startswith("README.md:")
    # a continuation line is one command, a comment is not one, `a && b` is two
    teach = next(c for c in ALL if c.argv[:2] == ("ros2", "run") and "marker_tracker" in c.argv)
    assert "-p" in teach.argv and "autostart:=true" in teach.argv
    assert not any(c.argv[0].startswith("#") for c in ALL)
    assert ("source", ".venv/bin/activate") in {c.argv[:2] for c in ALL}
    assert ("source", "install/setup.bash") in {c.argv[:2] for c in ALL}
    # a console transcript: only what follows the prompt (and its continuation) is a command
    assert _prompted(["$ mocap4r2 eval \\", "    --bag b", "ATE 0.1 m", "$ make test"]) == [
        "mocap4r2 eval \\",
        "    --bag b",
        "",
        "make test",
    ]


def test_every_fenced_block_says_its_language():
    untagged = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in DOCS
        for line, language, _ in _blocks(path)
        if not language
    ]
    assert not untagged, f"fenced blocks without a language (bash for commands, text for output): {untagged}"


@pytest.mark.parametrize("command", OTHERS, ids=_ids(OTHERS))
def test_each_command_resolves(command):
    program, args = _program(command.argv)
    if program in ("source", "."):
        assert (ROOT / args[0]).is_file(), f"{command.where}: {command.text}: {args[0]} does not exist"
        return
    if "/" in program:
        path = ROOT / program
        assert path.is_file() and path.stat().st_mode & 0o111, f"{command.where}: {program} is not installed"
        return
    kind = shell_kinds(tuple(sorted({_program(c.argv)[0] for c in OTHERS})))[program]
    assert kind in ("file", "builtin", "keyword"), (
        f"{command.where}: `{command.text}`: {program}: command not found after source scripts/env.sh"
    )
    if program == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        assert set(args) <= targets, f"{command.where}: make {args}: no such target ({sorted(targets)})"
    if program == "mocap4r2":
        _parses(command, args)
    if args[:1] == ["--ros-args"]:
        _known_parameters(command, program, args)


def _parses(command: Command, args: list[str]) -> None:
    """The `mocap4r2` command line's own parser accepts the arguments as written."""
    from mocap4r2_tools.cli import add_verbs

    parser = argparse.ArgumentParser(prog="mocap4r2")
    add_verbs(parser)
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(args)
        except SystemExit as exc:
            assert exc.code == 0, f"{command.where}: `{command.text}`: {errors.getvalue().strip()}"


def _known_parameters(command: Command, executable: str, ros_args: list[str]) -> None:
    """Each ``-p name:=value`` of a registered system's executable is one of its parameters."""
    from mocap4r2_drivers import registry

    rows = {s.node_executable: s for s in registry.systems()}
    row = rows.get(executable)
    if row is None:
        return  # a tool: its parameters are its node's own (not in the table)
    from mocap4r2_drivers.doctor.config_checks import system_specs

    names = set(system_specs(row.name)) | ROS_ARGS_KEYS
    given = [ros_args[i + 1].split(":=")[0] for i, w in enumerate(ros_args[:-1]) if w == "-p"]
    unknown = [name for name in given if name not in names]
    assert not unknown, f"{command.where}: `{command.text}`: {executable} has no parameter {unknown}"


@pytest.mark.parametrize("command", ROS2_TARGETS, ids=_ids(ROS2_TARGETS))
def test_ros2_run_and_launch_name_what_is_installed(command):
    """Checked here even without ros2: the package's executable or launch file is
    installed, and a system's parameters and launch arguments are its own."""
    _, args = _program(command.argv)
    verb, package, target, rest = args[0], args[1], args[2], args[3:]
    if package not in OWN_PACKAGES:
        if shutil.which("ros2", path=shell_path()) is None:
            pytest.skip(f"{package} is not this suite's: needs a ROS 2 distribution ({ROS2_ABSENT})")
        return
    install = ROOT / "install" / package
    if verb == "run":
        path = install / "lib" / package / target
        assert path.is_file(), f"{command.where}: `{command.text}`: {path} is not installed"
        if rest[:1] == ["--ros-args"]:
            _known_parameters(command, target, rest)
        return
    path = install / "share" / package / "launch" / target
    assert path.is_file(), f"{command.where}: `{command.text}`: {path} is not installed"
    from mocap4r2_drivers import registry

    row = next((s for s in registry.systems() if s.launch == target and s.package == package), None)
    if row is None:
        return  # a tool's or the demo's launch file: its arguments are in the file alone
    import runpy

    plan = runpy.run_path(str(ROOT / package / "launch" / target))["SYSTEM"]
    declared = {a.name for a in plan.declared_arguments()}
    unknown = [w.split(":=")[0] for w in rest if ":=" in w and w.split(":=")[0] not in declared]
    assert not unknown, f"{command.where}: `{command.text}`: {target} declares no argument {unknown}"


@pytest.mark.parametrize("command", ROS2, ids=_ids(ROS2))
def test_ros2_resolves(command):
    if shutil.which("ros2", path=shell_path()) is None:
        pytest.skip(ROS2_ABSENT)
    assert shell_kinds(("ros2",))["ros2"] == "file"


def _stand_in_names() -> set[str]:
    from mocap4r2_drivers import registry

    return {s.stand_in.executable for s in registry.systems() if s.stand_in is not None}


STAND_INS = [c for c in OTHERS if _program(c.argv)[0] in _stand_in_names()]
READY_S = 90.0  # a stand-in's start on a loaded 2-core machine: generous on purpose


@pytest.mark.parametrize("command", STAND_INS, ids=_ids(STAND_INS))
def test_each_stand_in_command_starts_as_written(command, tmp_path):
    """The stand-in commands are run as written (their ports are the vendors' defaults),
    each in a network namespace of its own so that nothing else on the machine holding
    those ports matters: it must say it is ready, and leave cleanly on Ctrl-C."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=30).returncode
    ):
        pytest.skip("no private network namespace here (unshare -n needs root or user namespaces)")
    program, args = _program(command.argv)
    script = "ip link set lo up && source scripts/env.sh >/dev/null 2>&1 && exec " + shlex.join(
        [program, *args]
    )
    log = tmp_path / "stand_in.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["unshare", "-n", "bash", "-c", script], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + READY_S
            while f"{program} ready" not in log.read_text() and proc.poll() is None:
                assert time.monotonic() < deadline, f"{command.where}: no ready line: {log.read_text()}"
                time.sleep(0.2)
            assert proc.poll() is None, f"{command.where}: `{command.text}` exited: {log.read_text()}"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0, f"{command.where}: {log.read_text()}"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
