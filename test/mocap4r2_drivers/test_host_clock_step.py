"""A running node's host clock stepped mid-stream, as NTP or chrony step it, with libfaketime.

The clock model's tests step the host clock through FrameStamper with injected clocks
(test/mocap4r2_control/test_clock_model.py). Here the real thing runs: vrpn_system, over
TCP, reads vrpn_simulator (a separate process, not under libfaketime: the server's clock
and its delivery know nothing of the host's step, as a real VRPN server's do not) and
publishes over DDS, while its own CLOCK_REALTIME is stepped +0.3 s, -0.3 s and +1 s.

How libfaketime steps it (its README; Debian's 0.9.10): LD_PRELOAD of libfaketimeMT.so.1
(the build for threaded programs); FAKETIME_TIMESTAMP_FILE names a file holding a relative
offset ("+0.3"), which the test replaces whole, by rename; FAKETIME_DONT_FAKE_MONOTONIC=1
leaves CLOCK_MONOTONIC alone, so only the wall clock steps, as NTP's step does. With
FAKETIME_CACHE_DURATION=0 the file is read again by the next whole second (here now and
then at once): the node's clock steps between the write and then, and the node's own log
line for the step (stamped on its clock) bounds when it found it.
Not FAKETIME_NO_CACHE=1 (a read on every clock reading): in a threaded process, measured
here with 4 threads reading both clocks back to back, those reads race and a reading now
and then comes out a part of a step off (0.15 s of a 0.3 s step, 0.5 of 1 s), which no real
clock does; the node then found steps that were not made. The process under libfaketime
must not call Python's ``time.sleep``: 0.9.10 turns Python 3.11's absolute CLOCK_MONOTONIC
``clock_nanosleep`` into EINVAL when the monotonic clock is not faked (libfaketime issue
426, fixed after 0.9.10). vrpn_system over TCP sleeps nowhere while it streams; over UDP,
and in the other vendor drivers, the arrival is the kernel's receive time (SO_TIMESTAMPNS),
which libfaketime does not fake, so a step there would be half a step: those cannot be
tested this way.

The test's own clock is not stepped: each stamp is compared with the frame's capture
instant on the real clock (the stand-in's truth log) plus the offset the test wrote. What
docs/timing.md promises for a host step: the stamps are on the new host clock from the
frame that found it, the model keeps what it learnt (no reset, still converged), stamps
move forward except across the step back, and /diagnostics counts each step and its size.
"""

from __future__ import annotations

import glob
import os
import re
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile
from support import wait_for
from vrpn_stand_in import start_vrpn  # test/fixtures

from mocap4r2_drivers.impairment import read_truth_log
from mocap4r2_interfaces.msg import RigidBodies

LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
RATE = 100.0
SCENE = {
    "seed": 5,
    "rate": RATE,
    "latency": 0.002,
    "noise": 0.0,
    "rigid_bodies": [
        {"name": "drone", "id": 1, "trajectory": {"type": "circle", "center": [0, 0, 1.5], "radius": 1.0}}
    ],
}
# the host clock's offset from the true time, in the order written: steps of +0.3, -0.3, +1 s
OFFSETS = (0.0, 0.3, 0.0, 1.0)
SETTLE_S = 4.0  # stream before the first step (the model converges in 0.3 s)
BETWEEN_S = 2.5  # between the writes and after the last: libfaketime's re-read, then 1.5 s
# around each step, the frames this far before and after it switch clocks once
AROUND_S = 0.5
# a stamp this far from its frame's capture on the clock in force is on no clock at all
# (a step is 0.3 s or more: a frame stamped on the wrong clock is that far off)
FAR_S = 0.02

pytestmark = pytest.mark.skipif(
    not LIBFAKETIME,
    reason="libfaketimeMT.so.1 is missing under /usr/lib/*/faketime/ (Debian's libfaketime; "
    "make setup installs it as root: apt-get install faketime)",
)


def seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def write_offset(path, offset: float) -> float:
    """Replace the timestamp file whole (a reader never sees half a line); the real time."""
    staging = path.with_suffix(".new")
    staging.write_text(f"{offset:+.6f}\n")
    os.replace(staging, path)
    return time.time()


def steps_logged(log: str) -> list[float]:
    """When the node logged each host clock step it found, on its own clock."""
    return [float(at) for at in re.findall(r"\[WARN\] \[(\d+\.\d+)\] .*the host clock stepped", log)]


def node_status(msg, node: str) -> dict[str, str] | None:
    for status in msg.status:
        if status.hardware_id == node:
            return {kv.key: kv.value for kv in status.values}
    return None


def test_a_running_node_follows_its_host_clock_stepped_either_way(ros, procs, tmp_path):
    truth_path = tmp_path / "truth.csv"
    _, port, scene, _ = start_vrpn(procs, tmp_path, SCENE, extra=["--truth-log", str(truth_path)])
    timestamp_file = tmp_path / "faketime.rc"
    write_offset(timestamp_file, OFFSETS[0])
    env = {
        "LD_PRELOAD": LIBFAKETIME[0],
        "FAKETIME_TIMESTAMP_FILE": str(timestamp_file),
        "FAKETIME_CACHE_DURATION": "0",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    node = "/hcs/vrpn"
    bodies = ros.subscribe("/hcs/rigid_bodies", RigidBodies, QoSProfile(depth=5000))
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray, QoSProfile(depth=1000))
    driver = procs.start(
        "mocap4r2_drivers",
        "vrpn_system",
        name="vrpn",
        namespace="/hcs",
        params={"port": port, "connection": "tcp", "autostart": True, "qos_depth": 5000},
        env=env,
    )
    wanted = int(SETTLE_S * RATE)
    wait_for(lambda: len(bodies.snapshot()) >= wanted, 90, lambda: driver.log()[-2000:], what="frames")
    written = []  # (real time, offset) of each step
    for offset in OFFSETS[1:]:
        written.append((write_offset(timestamp_file, offset), offset))
        time.sleep(BETWEEN_S)
    # the last diagnostics (once a second) after the last step has had time to come
    status = diagnostics.wait_for(
        lambda m: (node_status(m, node) or {}).get("host_clock_steps") == str(len(written)), timeout=30
    )
    assert driver.alive(), driver.log()[-3000:]

    # /diagnostics: each step counted with its size, in order; the model neither reset nor
    # left convergence
    seen: list[tuple[int, float]] = []
    for msg in diagnostics.snapshot():
        values = node_status(msg, node)
        if values is None or values.get("time_source_in_use") != "system clock model":
            continue
        assert values["clock_resets"] == "0", values
        assert values["clock_converged"] == "True", values
        if "host_clock_steps" in values:
            key = (int(values["host_clock_steps"]), float(values["host_clock_last_step_s"]))
            if not seen or seen[-1] != key:
                seen.append(key)
    steps = np.diff(OFFSETS)
    assert [n for n, _ in seen] == list(range(1, len(steps) + 1)), seen
    # the size is read as host - monotonic, both clocks back to back: microseconds off
    np.testing.assert_allclose([size for _, size in seen], steps, rtol=0.0, atol=1e-3)
    final = node_status(status, node)
    assert final is not None and final["clock_resets"] == "0"
    assert "clock reset" not in driver.log()
    assert driver.log().count("the host clock stepped") == len(steps)

    # every frame: its capture on the real clock, from the stand-in's truth log (the scene
    # frame is found by the drone's position, which VRPN carries bit for bit as float64)
    messages = bodies.snapshot()
    truth = dict(read_truth_log(truth_path))
    by_position: dict[tuple[float, float, float], int] = {}
    for k in sorted(truth):
        p = scene.frame(k).bodies.positions[0]
        by_position.setdefault((p[0], p[1], p[2]), k)
    numbers = np.array([m.frame_number for m in messages])
    stamps = np.array([seconds(m.header.stamp) for m in messages])
    captured = np.full(len(messages), np.nan)
    for i, msg in enumerate(messages):
        p = msg.rigid_bodies[0].pose.position
        frame = by_position.get((p.x, p.y, p.z))
        if frame is not None:
            captured[i] = truth[frame]
    assert np.isfinite(captured).mean() > 0.95, f"{np.isfinite(captured).mean():.1%} of frames found"
    assert np.all(np.diff(numbers) == 1), "frame numbers not continuous"
    received = np.array(bodies.times[: len(messages)]) + (time.time() - time.monotonic())

    # the node's clock steps between the write and libfaketime's next reading of the file
    # (at the latest the first clock reading of the next whole second; often at once), and
    # the node logs the step at the frame that found it: frames that reached this test
    # before the write (so the node too) are on the old clock, frames captured after the
    # log line on the new one, and those between may be on either, switching once
    written_at = np.array([t for t, _ in written])
    found_by = np.array([at - offset for at, offset in zip(steps_logged(driver.log()), OFFSETS[1:])])
    assert np.all((found_by > written_at) & (found_by < written_at + BETWEEN_S)), found_by - written_at
    found = np.isfinite(captured)
    error = stamps - captured  # the host clock's offset plus the stamp's own error
    segment = np.searchsorted(found_by, captured)
    on = np.array([OFFSETS[i] for i in segment])
    either = np.array([bool(np.any((r >= written_at) & (c < found_by))) for r, c in zip(received, captured)])
    on_new = np.abs(error - on) < FAR_S
    # (the first second is the model's start: the line fitted so far may still come down)
    clear = found & ~either & (captured > np.nanmin(captured) + 1.0)
    off = clear & ~on_new
    assert not off.any(), (
        f"{off.sum()} frames stamped off the host clock in force by {(error - on)[off][:5]} s, "
        f"captured {captured[off][:5] - written_at[0]} s after the first write"
    )
    switched = []  # each step's first frame on the new clock: its capture after the write
    for start, end, old, offset in zip(written_at, found_by, OFFSETS[:-1], OFFSETS[1:]):
        window = found & (captured > start - AROUND_S) & (captured < end + AROUND_S)
        e = error[window]
        new_clock = np.abs(e - offset) < FAR_S
        old_clock = np.abs(e - old) < FAR_S
        assert np.all(new_clock | old_clock), f"step to {offset:+}: {e[~(new_clock | old_clock)][:5]}"
        first_new = int(np.argmax(new_clock))
        assert new_clock.any() and np.all(new_clock[first_new:]), f"step to {offset:+}: back and forth"
        switched.append(float(captured[window][first_new] - start))

    # how close, on the clock in force: the stamps sit the path's least delay (the scene's
    # 2 ms, which VRPN does not report) after the capture before the first step, and
    # after every step the same distance on the new clock: nothing learnt was lost
    late = error - on
    medians = [float(np.median(late[clear & (segment == j)])) for j in range(len(OFFSETS))]
    firsts = []  # each step's first frame on the new clock, against the stream before it
    for j in range(1, len(OFFSETS)):
        index = int(np.argmax(found & (segment >= j) & (np.abs(error - OFFSETS[j]) < FAR_S)))
        firsts.append(float(late[index] - medians[0]))
    spread = np.abs(late[clear] - medians[0])
    print(
        f"stamp - capture on the clock in force, median per stretch between steps "
        f"{[round(m * 1e3, 3) for m in medians]} ms; each step's first frame on the new clock "
        f"{[round(f * 1e3, 3) for f in firsts]} ms from the first stretch; |error - first "
        f"stretch's| over {spread.size} frames: p99 {np.percentile(spread, 99) * 1e3:.3f} ms, "
        f"max {spread.max() * 1e3:.3f} ms; steps seen {seen}; the first frame on each new clock "
        f"captured {[round(t, 3) for t in switched]} s after the write, the step logged "
        f"{np.round(found_by - written_at, 3)} s after it"
    )
    np.testing.assert_allclose(medians[1:], medians[0], rtol=0.0, atol=0.5e-3)
    assert np.percentile(spread, 99) < 5e-3, np.percentile(spread, 99)

    # stamps go forward by at least 1 us (clock_model.MIN_STAMP_STEP), except once: across
    # the step back. Read in integer nanoseconds: as float seconds near 1.8e9 two stamps 1 us
    # apart may differ by 0.95e-6 (a CI run failed on that, at the model's first frames). The
    # model adds its 1 us to float seconds, whose spacing there is 0.24 us, so the step it
    # guarantees is 1 us less that
    nanoseconds = np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec for m in messages])
    backwards = np.flatnonzero(np.diff(nanoseconds) < 1000 - 240)
    assert backwards.size == 1, (
        f"stamps not moving forward at {backwards}: {np.diff(nanoseconds)[backwards]} ns"
    )
    assert np.diff(stamps)[backwards[0]] == pytest.approx(-0.3 + 1.0 / RATE, abs=0.05)
    # no stamp after its frame reached this test (which is after the node's arrival),
    # read on the clock the stamp is on
    assert np.all((stamps - on)[clear] <= received[clear]), "a stamp after its arrival"
