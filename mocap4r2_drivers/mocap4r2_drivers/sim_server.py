"""What the asyncio stand-in servers (qtm_simulator, vrpn_simulator) share.

The scene their command lines name, the real-time pacing of its frames (a server that
falls behind skips ahead instead of sending a growing backlog, as the real servers do),
a connected peer's name, and running until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Protocol

from mocap4r2_control.stop_signals import stop_noted

from .simulated.scene import Scene, default_scene_path

__all__ = [
    "MAX_LATENESS",
    "FramePacer",
    "add_scene_arguments",
    "load_scene",
    "seed_value",
    "peer_name",
    "run_until_signalled",
]

MAX_LATENESS = 0.25  # s behind real time before a server skips ahead


def add_scene_arguments(parser: argparse.ArgumentParser, rate_help: str) -> None:
    """The options every stand-in has: --scene, --host, --rate (``rate_help``), --seed."""
    parser.add_argument("--scene", default="", help="scene YAML file (default: the demo scene)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--rate", type=float, default=0.0, help=rate_help)
    parser.add_argument("--seed", type=seed_value, default=-1, help="random seed (default: the scene's)")


def seed_value(text: str) -> int:
    """A --seed: an integer >= 0. Internally -1 stands for "the scene's", so a negative
    seed typed by a user would silently become the scene's seed: it is refused instead."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, not {text!r}") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, not {seed}")
    return seed


def load_scene(path: str, seed: int, rate: float) -> Scene:
    """The scene file (the demo scene for ""), with its seed and rate unless given (>= 0, > 0)."""
    scene = Scene.from_file(path or default_scene_path(), seed=None if seed < 0 else seed)
    if rate > 0:
        scene.config["rate"] = rate
        scene = Scene(scene.config, seed=None if seed < 0 else seed)
    return scene


def peer_name(writer: asyncio.StreamWriter) -> str:
    """``host:port`` of a connection's other end (``?`` once it is gone)."""
    address = writer.get_extra_info("peername")
    return f"{address[0]}:{address[1]}" if address else "?"


class FramePacer:
    """Which frame a real-time server sends next.

    Frame k is captured at ``start + k / rate`` and due ``latency`` later. The first
    frame after :meth:`restart` is the one after the newest due; a server more than
    MAX_LATENESS behind jumps there too, counting the frames it skips.
    """

    def __init__(self, rate: float, latency: float, start: float) -> None:
        self.rate = rate
        self.latency = latency
        self.start = start
        self.skipped = 0  # frames jumped over to keep real time
        self._next: int | None = None

    def restart(self) -> None:
        """Nobody was served for a while: start again at the newest due frame."""
        self._next = None

    def take(self, now: float) -> int:
        """The number of the frame to handle now (monotonic ``now``); the next call gives the one after."""
        due = int((now - self.start - self.latency) * self.rate)
        k = self._next
        if k is None or k < due - MAX_LATENESS * self.rate:
            if k is not None:
                self.skipped += due - k
            k = max(due + 1, 0)
        self._next = k + 1
        return k


class StoppableServer(Protocol):
    """What :func:`run_until_signalled` needs of a server."""

    @property
    def frames_late_skipped(self) -> int: ...

    async def stop(self) -> None: ...

    def log(self, text: str) -> None: ...


async def run_until_signalled(server: StoppableServer, ready: str) -> int:
    """Print ``ready``, serve until SIGINT or SIGTERM, stop the server; the exit status."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if stop_noted():  # a signal while the scene loaded and the server started
        stop.set()
    print(ready, flush=True)
    await stop.wait()
    await server.stop()
    server.log(f"stopped ({server.frames_late_skipped} frames skipped to keep real time)")
    return 0
