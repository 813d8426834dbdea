"""`ros2 mocap4r2 ...`: the mocap4r2 verbs as a ros2cli command extension.

Loaded by ros2cli through the ``ros2cli.command`` entry point, so it only runs where
ros2cli is installed; the verbs and their handlers are those of ``mocap4r2_tools.cli``.
"""

from __future__ import annotations

import argparse

from ros2cli.command import CommandExtension

from . import cli


class Mocap4r2Command(CommandExtension):  # type: ignore[misc]  # ros2cli ships no type information
    """Discover, start and stop mocap4r2 systems."""

    def add_arguments(self, parser: argparse.ArgumentParser, cli_name: str) -> None:
        # the parser of `ros2 mocap4r2`, kept for main()
        self._parser = parser
        self._handlers = cli.add_verbs(parser)

    def main(self, *, parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
        # ros2cli passes the root `ros2` parser here, not the one given to add_arguments:
        # without a verb, print the help of `ros2 mocap4r2`
        return cli.run(self._parser, self._handlers, args)
