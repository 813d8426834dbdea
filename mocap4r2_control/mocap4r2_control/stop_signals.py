"""SIGINT and SIGTERM noted from the first moment a mocap4r2 program runs.

Why a module of its own, with nothing but the standard library: a program spends its
first 0.3-1 s importing rclpy, numpy, scipy and the message modules, and a signal in
that time used to be lost. SIGINT raised KeyboardInterrupt in the middle of an import
(a traceback and exit code 1) or was swallowed by a library that catches everything,
after which the node ran on as if nothing had happened; SIGTERM killed the process
outright. ``ros2 launch`` sends SIGINT to every process at shutdown, also to one that has
just been started (a launch_testing run that ends quickly), and escalates to SIGTERM and
SIGKILL 5 and 15 s later: seen as "failed to terminate" and exit code -9.

So every executable's entry point is made by :func:`lazy_main`: it installs the handler
(:func:`install`) before it imports the program's module, and a program asked to stop
while it was loading ends there, with exit code 0 (nothing was started, so nothing needs
releasing). ``run_node`` (``spin.py``) takes the same :class:`StopSignals` over, so a
signal after loading and before spinning is not lost either; a program with handlers of
its own (the vendor stand-ins) asks :func:`stop_noted` once they are in place.

What is left is the interpreter's own start-up (about 0.1 s: ``site`` and the entry-point
wrapper's ``importlib.metadata``), before any code of ours runs; a signal then gets
Python's default behaviour.
"""

from __future__ import annotations

import importlib
import os
import select
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# how often a waiting main thread also checks whether what it waits for ended by itself
CHECK_PERIOD_S = 1.0


class StopSignals:
    """SIGINT/SIGTERM noted by a handler that never raises, and a wakeup fd to wait on
    (the interpreter writes it whichever thread the kernel delivered the signal to)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._note)

    def _note(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def _drain(self) -> None:
        try:
            for byte in os.read(self._read, 256):
                if byte in STOP_SIGNALS:
                    self.received.append(byte)
        except BlockingIOError:
            pass

    @property
    def stop_requested(self) -> bool:
        self._drain()
        return bool(self.received)

    def wait(self, running: threading.Thread) -> int | None:
        """Until SIGINT/SIGTERM (returns it) or ``running`` ends by itself (None)."""
        while running.is_alive():
            if self.stop_requested:
                return self.received[0]
            select.select([self._read], [], [], CHECK_PERIOD_S)
        return self.received[0] if self.received else None


_installed: StopSignals | None = None


def install() -> StopSignals:
    """The process's StopSignals, installed on the first call (from the main thread)."""
    global _installed
    if _installed is None:
        _installed = StopSignals()
    return _installed


def stop_noted() -> bool:
    """Whether a stop signal was noted since :func:`install` (False when it was never
    installed). For a program that installs handlers of its own once it has loaded:
    what came before them is not lost."""
    return _installed is not None and _installed.stop_requested


def lazy_main(module: str, function: str = "main") -> Callable[[], int]:
    """An entry point that notes stop signals first, then imports ``module`` and calls
    its ``function``; a stop asked for while loading ends the program with 0."""

    def main() -> int:
        signals = install()
        target = getattr(importlib.import_module(module), function)
        if signals.stop_requested:
            return 0
        return int(target())

    main.__doc__ = f"{module}.{function}(), with stop signals noted before it is imported."
    return main
