"""The stand-ins' frame-thread schedule (sim_server.FrameThread) at high rates: frames are
computed between sends, ahead of their due time, not only once a send is already due;
and the scene a stand-in loads is computed in batches that fit between two sends."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mocap4r2_drivers.impairment import Delivery, TimeImpairment
from mocap4r2_drivers.sim_server import FrameThread, load_scene
from mocap4r2_drivers.simulated.scene import Scene

RATE = 1000.0
FRAMES = 300
SCENE = Path(__file__).resolve().parents[2] / "config" / "demo_scene.yaml"


@dataclass
class _Frame:
    number: int
    due: float


class _CountingThread(FrameThread[_Frame, _Frame]):
    """Frames due every 1/RATE s; records how many computed frames still waited for their
    send each time the schedule asked for a new one."""

    def __init__(self) -> None:
        super().__init__(RATE, Delivery(TimeImpairment()), held=False)
        self.start = time.monotonic() + 0.01
        self.computed = 0
        self.sent = 0
        self.queued_at_prepare: list[int] = []

    def prepare(self, now: float) -> tuple[_Frame | None, float]:
        self.queued_at_prepare.append(self.computed - self.sent)
        frame = _Frame(self.computed, self.start + self.computed / RATE)
        self.computed += 1
        return frame, frame.due

    def hand_out(self, frame: _Frame) -> _Frame:
        return frame

    def send_released(self, items: list[_Frame]) -> None:
        self.sent += len(items)

    def finished(self) -> bool:
        return self.computed >= FRAMES


def test_at_1_khz_frames_are_computed_ahead_of_their_sends():
    # Before QUIET_SHARE, the fixed 2 ms quiet time was longer than the 1 ms between sends:
    # the schedule computed a frame only when none was queued, i.e. when it was due already
    sender = _CountingThread()
    stop, wake = threading.Event(), threading.Event()
    runner = threading.Thread(target=sender.frame_loop, args=(stop, wake), daemon=True)
    runner.start()
    runner.join(FRAMES / RATE + 10.0)
    stop.set()
    assert not runner.is_alive()
    assert sender.sent == FRAMES
    queued = np.asarray(sender.queued_at_prepare[10:])
    # the schedule keeps about PREPARE_AHEAD of frames computed: nearly every new frame is
    # computed while earlier ones still wait (a loaded machine may drain the queue now and then)
    assert (queued >= 1).mean() > 0.8, np.bincount(queued).tolist()
    assert sender.quiet <= 0.5 / RATE


def test_a_stand_ins_scene_comes_in_small_batches_with_the_same_frames():
    scene = load_scene(str(SCENE), 3, RATE)
    assert scene.rate == RATE
    assert 1 <= scene.batch_size <= 4 < Scene(scene.config, seed=3).batch_size
    reference = Scene(scene.config, seed=3)
    for k in (0, 3, 4, 37, 100):
        mine, theirs = scene.frame(k), reference.frame(k)
        assert mine.frame_number == theirs.frame_number == k
        np.testing.assert_array_equal(mine.bodies.positions, theirs.bodies.positions)
        np.testing.assert_array_equal(mine.markers.positions, theirs.markers.positions)
    # low rates keep a batch of one frame
    assert load_scene(str(SCENE), 3, 100.0).batch_size == 1
