"""The simulated system's adapter alone (no ROS): how far its reader may fall behind
before frames are lost, as a socket buffer of a real system would lose them. The
adapter's clock is replaced by one the test moves, so what is due is exact."""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_drivers.simulated import simulated_system
from mocap4r2_drivers.simulated.scene import default_scene_path
from mocap4r2_drivers.simulated.simulated_system import BACKLOG_SECONDS, MIN_BACKLOG, SimulatedAdapter


class StoppedClock:
    """time.time() and time.monotonic() for the adapter: still until the test moves it."""

    def __init__(self):
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = StoppedClock()
    monkeypatch.setattr(simulated_system, "time", clock)
    return clock


@pytest.mark.parametrize(
    "rate, max_backlog, backlog",
    [
        (2000.0, 0, round(BACKLOG_SECONDS * 2000)),  # the default: a time span of frames
        (50.0, 0, MIN_BACKLOG),  # ... but never fewer than 8
        (2000.0, 8, 8),  # or as many as asked
    ],
)
def test_a_reader_that_falls_behind_loses_the_oldest_frames_beyond_the_backlog(
    clock, rate, max_backlog, backlog
):
    adapter = SimulatedAdapter(scene=str(default_scene_path()), seed=-1, rate=rate, max_backlog=max_backlog)
    adapter.connect()
    scene = adapter.scene
    assert adapter.backlog == backlog
    adapter.start_streaming()
    # the reader is held up for half a second (and a tenth of a frame: no rounding at the edge)
    clock.now += scene.latency + 0.5 + 0.1 / rate
    newest = int(0.5 * rate)  # the newest frame due by then
    frame = adapter.read_frame(0.0)
    # the oldest frame still buffered is `backlog` behind the newest (or the next one
    # the scene does not drop); everything older is lost, and counted
    first = newest - backlog
    while scene.is_dropped(first):
        first += 1
    assert frame.frame_number == first
    assert adapter.lost_frames == newest - backlog
    assert adapter.status()["frames_lost_to_backlog"] == str(newest - backlog)
    # the buffered frames follow in order up to the newest, then nothing until the clock moves
    numbers = [frame.frame_number]
    while (frame := adapter.read_frame(0.0)) is not None:
        numbers.append(frame.frame_number)
    assert numbers == [k for k in range(first, newest + 1) if not scene.is_dropped(k)]
    assert adapter.lost_frames == newest - backlog  # a reader that keeps up loses nothing more
    adapter.stop_streaming()
    adapter.disconnect()


def test_a_reader_that_keeps_up_loses_nothing(clock):
    adapter = SimulatedAdapter(scene=str(default_scene_path()), seed=-1, rate=2000.0, max_backlog=0)
    adapter.connect()
    adapter.start_streaming()
    numbers = []
    # the reader is held up 10 ms at a time (20 frames; a batch of the scene takes a few
    # ms to compute): more than a buffer of 8 frames, less than the 100 ms it holds
    for _ in range(200):
        clock.now += 0.010
        while (frame := adapter.read_frame(0.0)) is not None:
            numbers.append(frame.frame_number)
    scene = adapter.scene
    assert numbers == [k for k in range(numbers[0], numbers[-1] + 1) if not scene.is_dropped(k)]
    assert numbers[0] == 0 and adapter.lost_frames == 0


def test_without_labels_the_system_sends_the_cloud_of_the_labeled_systems_frames(clock):
    """publish_labels false: no assets named, no bodies or skeletons, the seen markers
    unlabeled and shuffled; the same scene and seed labeled give the truth of each frame."""
    truth = SimulatedAdapter(scene=str(default_scene_path()), seed=3, rate=200.0, max_backlog=0)
    cloud = SimulatedAdapter(
        scene=str(default_scene_path()), seed=3, rate=200.0, max_backlog=0, publish_labels=False
    )
    assert len(truth.connect().rigid_bodies) > 0
    names = cloud.connect()
    assert names.rigid_bodies == () and names.markers == () and names.skeletons == ()
    for adapter in (truth, cloud):
        adapter.start_streaming()
    clock.now += 0.2
    pairs = 0
    while (labeled := truth.read_frame(0.0)) is not None:
        unlabeled = cloud.read_frame(0.0)
        assert unlabeled is not None and unlabeled.frame_number == labeled.frame_number
        assert len(unlabeled.bodies) == 0 and len(unlabeled.skeletons.ids) == 0
        assert (unlabeled.markers.ids == -1).all() and set(unlabeled.markers.names) <= {""}
        seen = labeled.markers.positions[~labeled.markers.occluded]
        assert np.array_equal(np.sort(unlabeled.markers.positions, axis=0), np.sort(seen, axis=0))
        pairs += not np.array_equal(unlabeled.markers.positions, seen)
    assert pairs > 10  # shuffled, not the labeled order
    for adapter in (truth, cloud):
        adapter.disconnect()
