"""How far stamps are from the true capture time: `python -m bench timing [--json FILE]`.

Each path's stand-in serves frames as a network and a server clock do (see
mocap4r2_drivers/impairment.py) and writes a truth log: the true capture instant of every
frame it sends, on the host clock. The path's adapter reads the frames in this process,
taking each frame's arrival with time.time() when read_frame returns, as the node's
reader thread does. Three ways of stamping then run on the same frames, in the same run:

* ours: FrameStamper('auto'), what MocapSystemNode publishes (fed the same values in the
  same order: it is a pure function of them);
* arrival: arrival - the latency the system reports (the rule of vendor drivers, and
  ours with time_source arrival);
* min_offset: the system time plus the smallest (arrival - latency - system time) seen
  so far, as vrpn-style drivers correct their stamps.

Paths: natnet_unicast, natnet_multicast (natnet_simulator, a process), qtm
(qtm_simulator, a process), vicon (the SDK double of test/fixtures in this process), sim
(the simulated system's adapter), vrpn (vrpn_simulator, a process, read by vrpn_system's
adapter over VRPN's default UDP connection). Scenarios: clean; impaired (2 ms exponential jitter,
bursts of 4, +100 ppm drift, 3 s offset); reset (impaired, and the server clock restarts
RESET_AT s in). Figures over the frames after WARMUP s (the model fits the drift on 4 s
of points): p50 / p99 / max |error| in ms, interval jitter in us (std of consecutive
stamp differences minus the nominal period), and for reset the recovery (from the reset
until |error| stays under 0.5 ms), stamps after arrival and stamps going backwards.
Also the model's CPU per frame against the arrival rule's. Prints figures; asserts
nothing (targets are printed next to them).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "install" / "mocap4r2_drivers" / "lib" / "mocap4r2_drivers"
RATE = 250.0
# a rate Vicon systems commonly stream at; the converter makes a dozen SDK calls per frame
VICON_RATE = 100.0
WARMUP = 5.0
RESET_AT = 8.0
DURATION = {"clean": 8.0, "impaired": 12.0, "reset": 12.0}
IMPAIRED = {"jitter_ms": 2.0, "burst": 4, "clock_drift_ppm": 100.0, "clock_offset_s": 3.0}
SCENARIOS: dict[str, dict[str, Any]] = {
    "clean": {},
    "impaired": IMPAIRED,
    "reset": {**IMPAIRED, "clock_reset_at": RESET_AT},
}
PATHS = ("natnet_unicast", "natnet_multicast", "qtm", "vicon", "sim", "vrpn")
#: `python -m bench timing faults`: the clock faults of bench/clock_faults.py through the
#: real FrameStamper with injected clocks (no stand-in; seconds, not minutes)
FAULTS = "faults"
#: words of `python -m bench timing ...` that are this bench's, not other benchmarks' names
ARGUMENTS = (*PATHS, FAULTS)
RECOVERED_BELOW = 0.5e-3
# offset steps count from here on: the model stamps from 0.3 s (test_qualisys_system's 0.5 s)
OFFSET_STEPS_FROM = 0.5
# how many frames before the one an arrival could at most be (burst, jitter) a VRPN frame's pose is looked for
SCENE_SEARCH = 100
JSON_ENV = "MOCAP4R2_BENCH_JSON"  # set by `python -m bench timing --json FILE` (bench/__main__.py)


@dataclass
class Recording:
    """What the adapter handed over, per frame in order, and the stand-in's truth log."""

    numbers: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    system_times: list[float | None] = field(default_factory=list)
    capture_times: list[float | None] = field(default_factory=list)
    truth: list[tuple[int, float]] = field(default_factory=list)
    # the stand-in's number of each frame, where the adapter counts frames of its own (VRPN)
    truth_numbers: list[int] | None = None

    def add(self, frame: Any, arrival: float) -> None:
        self.numbers.append(frame.frame_number)
        self.arrivals.append(arrival)
        self.latencies.append(frame.latency)
        self.system_times.append(frame.system_time)
        self.capture_times.append(frame.capture_time)


def read_for(adapter: Any, seconds: float, recording: Recording) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        frame = adapter.read_frame(0.1)
        if frame is not None:
            recording.add(frame, time.time())


def _scene(directory: Path, **keys: Any) -> Path:
    path = directory / "timing_scene.yaml"
    scene = {
        "seed": 5,
        "rate": RATE,
        "latency": 0.002,
        "latency_jitter": 0.0,
        "noise": 0.0,
        "occlusion": 0.0,
        "dropped_frames": 0.0,
        "unlabeled_markers": 2,
        "rigid_bodies": [
            {"name": "drone", "id": 1, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0}},
            {"name": "robot", "id": 2, "trajectory": {"type": "figure_eight", "period": 6.0}},
        ],
        **keys,
    }
    path.write_text(yaml.safe_dump(scene))
    return path


# ====================================================================== paths
def record_vicon(impairment: dict[str, Any], seconds: float, directory: Path) -> Recording:
    import vicon_datastream_double as double  # test/fixtures, on sys.path through bench.domain

    from mocap4r2_drivers.impairment import TimeImpairment, read_truth_log
    from mocap4r2_drivers.simulated.scene import Scene
    from mocap4r2_drivers.vicon.vicon_system import ViconAdapter

    truth = directory / "vicon_truth.csv"
    scene = Scene.from_file(_scene(directory, rate=VICON_RATE))
    server = double.ImpairedSceneServer(
        scene, TimeImpairment.from_mapping({**impairment, "truth_log": str(truth), "seed": 1})
    )
    package = types.ModuleType("vicon_dssdk")
    module = double.module()
    package.ViconDataStream = module  # type: ignore[attr-defined]  # a stand-in module built at run time
    saved = {name: sys.modules.get(name) for name in ("vicon_dssdk", "vicon_dssdk.ViconDataStream")}
    sys.modules["vicon_dssdk"] = package
    sys.modules["vicon_dssdk.ViconDataStream"] = module
    double.Client.server = server
    adapter = ViconAdapter.from_parameters({spec.name: spec.default for spec in ViconAdapter.parameters})
    try:
        recording = _stream(adapter, seconds)
    finally:
        server.close()
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    recording.truth = read_truth_log(truth)
    return recording


def _flags(impairment: dict[str, Any], truth: Path) -> list[str]:
    out = ["--truth-log", str(truth)]
    for key, value in impairment.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


class StandIn:
    """A stand-in process; ``ready`` is a regex on its log naming the port(s)."""

    def __init__(self, command: list[str], log_path: Path, ready: str):
        self.log_path = log_path
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = re.search(ready, log_path.read_text())
            if match:
                self.ports = [int(g) for g in match.groups()]
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{command[0]} did not start: {log_path.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()


def _stream(adapter: Any, seconds: float, recording: Recording | None = None) -> Recording:
    """``seconds`` of the adapter's frames, connected and disconnected around them."""
    recording = recording or Recording()
    try:
        adapter.connect()
        adapter.start_streaming()
        read_for(adapter, seconds, recording)
    finally:
        adapter.stop_streaming()
        adapter.disconnect()
    return recording


def _record_adapter(adapter: Any, seconds: float, stand_in: StandIn, truth: Path) -> Recording:
    from mocap4r2_drivers.impairment import read_truth_log

    try:
        recording = _stream(adapter, seconds)
    finally:
        stand_in.stop()
    recording.truth = read_truth_log(truth)
    return recording


def _record_natnet(impairment: dict[str, Any], seconds: float, directory: Path, multicast: bool) -> Recording:
    from mocap4r2_drivers.optitrack.optitrack_system import OptiTrackAdapter

    truth = directory / "natnet_truth.csv"
    command = [str(INSTALL / "natnet_simulator"), "--scene", str(_scene(directory)), "--rate", str(RATE)]
    command += ["--command-port", "0", "--data-port", "0"]
    # unicast: Motive sends each frame once, to the address the client connected from;
    # the stand-in's default (both that and the data port, for clients that wait on
    # either) would send every datagram twice, the repeats delaying each burst's last frame
    command += ["--multicast"] if multicast else ["--unicast", "--unicast-to", "command-socket"]
    stand_in = StandIn(
        command + _flags(impairment, truth),
        directory / "natnet.log",
        r"command=[\d.]+:(\d+) .*data_port=(\d+)",
    )
    values = {spec.name: spec.default for spec in OptiTrackAdapter.parameters}
    values.update(
        command_port=stand_in.ports[0],
        data_port=stand_in.ports[1],
        connection_type="multicast" if multicast else "unicast",
    )
    return _record_adapter(OptiTrackAdapter.from_parameters(values), seconds, stand_in, truth)


def record_natnet_unicast(impairment: dict[str, Any], seconds: float, directory: Path) -> Recording:
    return _record_natnet(impairment, seconds, directory, multicast=False)


def record_natnet_multicast(impairment: dict[str, Any], seconds: float, directory: Path) -> Recording:
    return _record_natnet(impairment, seconds, directory, multicast=True)


def record_qtm(impairment: dict[str, Any], seconds: float, directory: Path) -> Recording:
    from mocap4r2_drivers.qualisys.qualisys_system import QualisysAdapter

    truth = directory / "qtm_truth.csv"
    # QTM sends no latency: a processing latency of the stand-in's would be in every
    # stamp, whatever the rule, so its frames leave at capture
    scene = _scene(directory, latency=0.0)
    command = [str(INSTALL / "qtm_simulator"), "--scene", str(scene), "--rate", str(RATE)]
    command += ["--port", "0"]
    stand_in = StandIn(
        command + _flags(impairment, truth), directory / "qtm.log", r"RT port 127\.0\.0\.1:(\d+)"
    )
    values = {spec.name: spec.default for spec in QualisysAdapter.parameters}
    values.update(port=stand_in.ports[0] - 1)
    return _record_adapter(QualisysAdapter.from_parameters(values), seconds, stand_in, truth)


def record_sim(impairment: dict[str, Any], seconds: float, directory: Path) -> Recording:
    from mocap4r2_drivers.impairment import read_truth_log
    from mocap4r2_drivers.simulated.simulated_system import SimulatedAdapter

    truth = directory / "sim_truth.csv"
    scene = _scene(directory, **impairment, truth_log=str(truth))
    adapter = SimulatedAdapter(scene=str(scene), seed=-1, rate=0.0, max_backlog=0)
    recording = _stream(adapter, seconds)
    recording.truth = read_truth_log(truth)
    return recording


@dataclass
class PoseRecording(Recording):
    """A :class:`Recording` that also keeps one body's position of every frame: VRPN has no
    frame numbers, so the bench finds each frame's scene frame (and its truth line) by pose."""

    body: str = "drone"
    positions: list[np.ndarray] = field(default_factory=list)

    def add(self, frame: Any, arrival: float) -> None:
        super().add(frame, arrival)
        names = list(frame.bodies.names)
        row = names.index(self.body) if self.body in names else -1
        self.positions.append(frame.bodies.positions[row].copy() if row >= 0 else np.full(3, np.nan))


def scene_numbers(recording: PoseRecording, scene: Any, origin: float, rate: float) -> list[int]:
    """The scene frame of every recorded frame (-1: none found): the frame whose body
    ``recording.body`` is where the recorded one is, searched among those measured up to
    SCENE_SEARCH frames before the arrival (an arrival is after its measurement)."""
    row = [b.name for b in scene.description.bodies].index(recording.body)
    cache: dict[int, np.ndarray] = {}

    def position(k: int) -> np.ndarray:
        if k not in cache:
            cache[k] = scene.frame(k).bodies.positions[row]
        return cache[k]

    out = []
    previous = -1
    for arrival, seen in zip(recording.arrivals, recording.positions):
        latest = int(math.floor((arrival - origin) * rate)) + 2
        # the frame after the previous one first: that is what the stand-in sent next
        candidates = [previous + 1] if previous >= 0 else []
        candidates += range(latest, max(latest - SCENE_SEARCH, 0), -1)
        found = next(
            (k for k in candidates if k >= 0 and np.allclose(position(k), seen, rtol=0.0, atol=1e-9)), -1
        )
        out.append(found)
        previous = found if found >= 0 else previous
    return out


def record_vrpn(impairment: dict[str, Any], seconds: float, directory: Path) -> Recording:
    from mocap4r2_drivers.impairment import read_truth_log
    from mocap4r2_drivers.simulated.scene import Scene
    from mocap4r2_drivers.vrpn.vrpn_system import VrpnAdapter

    truth = directory / "vrpn_truth.csv"
    # VRPN sends no latency: as for QTM, the stand-in's reports leave at the measurement
    scene_path = _scene(directory, latency=0.0)
    command = [str(INSTALL / "vrpn_simulator"), "--scene", str(scene_path), "--rate", str(RATE)]
    command += ["--port", "0"]
    stand_in = StandIn(
        command + _flags(impairment, truth),
        directory / "vrpn.log",
        r"ready: [\d.]+:(\d+) .*time origin (\d+)",
    )
    port, origin = stand_in.ports
    values = {spec.name: spec.default for spec in VrpnAdapter.parameters}
    values.update(port=port)
    adapter = VrpnAdapter.from_parameters(values)
    recording = PoseRecording()
    try:
        _stream(adapter, seconds, recording)
    finally:
        stand_in.stop()
    recording.truth = read_truth_log(truth)
    recording.truth_numbers = scene_numbers(recording, Scene.from_file(scene_path), float(origin), RATE)
    return recording


RECORDERS: dict[str, Callable[[dict[str, Any], float, Path], Recording]] = {
    "natnet_unicast": record_natnet_unicast,
    "natnet_multicast": record_natnet_multicast,
    "qtm": record_qtm,
    "vicon": record_vicon,
    "sim": record_sim,
    "vrpn": record_vrpn,
}


# ====================================================================== figures
def match_truth(recording: Recording) -> np.ndarray:
    """The true capture time of every recorded frame (NaN where the truth log has none):
    the next truth line with the frame's number, so restarted numbers match in order."""
    truth = recording.truth
    numbers = recording.numbers if recording.truth_numbers is None else recording.truth_numbers
    out = np.full(len(numbers), np.nan)
    pointer = 0
    for i, number in enumerate(numbers):
        for j in range(pointer, min(pointer + 20000, len(truth))):
            if truth[j][0] == number:
                out[i] = truth[j][1]
                pointer = j + 1
                break
    return out


def stamp_ways(recording: Recording) -> dict[str, np.ndarray]:
    from mocap4r2_control.clock_model import FrameStamper
    from mocap4r2_control.timebase import ManualClock

    # replayed after the run: the clocks read what they read when each frame arrived
    clock = ManualClock()
    stamper = FrameStamper("auto", clock=clock)
    ours = []
    for a, lat, s, c, n in zip(
        recording.arrivals,
        recording.latencies,
        recording.system_times,
        recording.capture_times,
        recording.numbers,
    ):
        clock.mono = a
        ours.append(stamper.stamp(a, lat, s, c, n))
    arrival = np.asarray(recording.arrivals) - np.asarray(recording.latencies)
    min_offset = []
    lowest = math.inf
    for y, s in zip(arrival.tolist(), recording.system_times):
        if s is None or not math.isfinite(s):
            min_offset.append(y)
            continue
        lowest = min(lowest, y - s)
        min_offset.append(s + lowest)
    return {"ours": np.asarray(ours), "arrival": arrival, "min_offset": np.asarray(min_offset)}


def _figures(
    error: np.ndarray, stamps: np.ndarray, consecutive: np.ndarray, period: float
) -> dict[str, float]:
    magnitude = np.abs(error)
    intervals = np.diff(stamps)[consecutive] - period
    return {
        "p50_ms": round(float(np.percentile(magnitude, 50)) * 1e3, 4),
        "p99_ms": round(float(np.percentile(magnitude, 99)) * 1e3, 4),
        "max_ms": round(float(np.max(magnitude)) * 1e3, 4),
        "interval_jitter_us": round(float(np.std(intervals)) * 1e6, 2) if intervals.size else float("nan"),
    }


def reset_index(recording: Recording) -> int | None:
    """The first frame after the server clock went back (or its numbers restarted)."""
    times, numbers = recording.system_times, recording.numbers
    for i in range(1, len(numbers)):
        s0, s1 = times[i - 1], times[i]
        if numbers[i] + 16 < numbers[i - 1] or (s0 is not None and s1 is not None and s1 < s0 - 0.05):
            return i
    return None


def evaluate(recording: Recording, scenario: str) -> dict[str, Any]:
    truth = match_truth(recording)
    known = np.isfinite(truth)
    if known.sum() < 100:
        raise RuntimeError(f"only {int(known.sum())} of {len(truth)} frames found in the truth log")
    ways = stamp_ways(recording)
    arrivals = np.asarray(recording.arrivals)
    settled = known & (truth >= truth[known][0] + WARMUP)
    index = np.flatnonzero(settled)
    # consecutive frames (by truth: a dropped frame's gap is not jitter)
    true_steps = np.diff(truth[index])
    period = float(np.median(true_steps))
    consecutive = np.abs(true_steps - period) < 0.5 * period
    cell: dict[str, Any] = {}
    for way, stamps in ways.items():
        error = stamps[index] - truth[index]
        cell[way] = _figures(error, stamps[index], consecutive, period)
    ours = ways["ours"]
    cell["reset_recovery_s"] = None
    if scenario == "reset":
        first = reset_index(recording)
        if first is None:
            cell["reset_recovery_s"] = float("nan")
        else:
            after = np.arange(len(ours)) >= first
            bad = np.flatnonzero(after & known & (np.abs(ours - truth) >= RECOVERED_BELOW))
            start = truth[first] if known[first] else arrivals[first]
            cell["reset_recovery_s"] = round(float(truth[bad[-1]] - start), 3) if bad.size else 0.0
    cell["stamps_after_arrival"] = int(np.sum(ours > arrivals))
    cell["stamps_backwards"] = int(np.sum(np.diff(ours) < 0))
    return cell


def path_floor(recording: Recording) -> dict[str, Any]:
    """Outside the issue's cell: frames read, the least transport delay seen (arrival -
    latency - truth), which no stamp made from these arrivals can beat, and ours' largest
    offset step (:func:`offset_step_max`)."""
    truth = match_truth(recording)
    y = np.asarray(recording.arrivals) - np.asarray(recording.latencies)
    known = np.isfinite(truth)
    return {
        "frames": len(recording.numbers),
        "transport_floor_ms": round(float(np.min(y[known] - truth[known])) * 1e3, 4),
        "ours_offset_step_max_us": round(offset_step_max(recording, stamp_ways(recording)["ours"]) * 1e6, 1),
    }


def offset_step_max(recording: Recording, stamps: np.ndarray) -> float:
    """The largest change of (stamp - system time) from one frame to the next, s, from
    OFFSET_STEPS_FROM s after the first arrival on and outside the second after a reset
    (where the arrival rule hands over to the model again): how far the mapping the stamps
    use jumps. It needs no truth, so a stand-in's uneven sending does not enter it."""
    arrivals = np.asarray(recording.arrivals)
    system = np.array([math.nan if s is None else s for s in recording.system_times], dtype=float)
    use = (arrivals >= arrivals[0] + OFFSET_STEPS_FROM) & np.isfinite(system)
    first = reset_index(recording)
    if first is not None:
        use &= ~((arrivals >= arrivals[first]) & (arrivals < arrivals[first] + 1.0))
    pairs = use[1:] & use[:-1]
    steps = np.abs(np.diff(stamps - system))[pairs]
    return float(np.max(steps)) if steps.size else math.nan


def model_cost_us(frames: int = 20000) -> tuple[float, float]:
    """CPU us per frame of FrameStamper('auto') on an impaired 1 kHz series, and of the
    arrival rule through the same call (the reference)."""
    from mocap4r2_control.clock_model import FrameStamper
    from mocap4r2_control.timebase import ManualClock

    rng = np.random.default_rng(0)
    capture = 1.7e9 + np.arange(frames) / 1000.0
    system = 3.0 + (capture - 1.7e9) * (1 + 100e-6)
    arrival = np.maximum.accumulate(capture + 1e-4 + rng.exponential(2e-3, frames)).tolist()
    system_l = system.tolist()
    out = []
    for source in ("auto", "arrival"):
        best = math.inf
        for _ in range(3):
            # the monotonic clock reads the arrival, as the node's clocks do when it stamps
            clock = ManualClock()
            stamp = FrameStamper(source, clock=clock).stamp
            t0 = time.process_time()
            for i in range(frames):
                a = arrival[i]
                clock.mono = a
                stamp(a, 0.0, system_l[i], None, i)
            best = min(best, time.process_time() - t0)
        out.append(best / frames * 1e6)
    return out[0], out[1]


# ====================================================================== report
def _targets(cell: dict[str, Any], scenario: str) -> list[str]:
    ours, arrival = cell["ours"], cell["arrival"]
    notes = []
    if scenario == "impaired":
        notes.append(f"p99<=0.25ms {'met' if ours['p99_ms'] <= 0.25 else 'NOT met'}")
        fifth = ours["p99_ms"] * 5 <= arrival["p99_ms"]
        notes.append(f"p99<=arrival/5 {'met' if fifth else 'NOT met'}")
        notes.append(f"jitter<=20us {'met' if ours['interval_jitter_us'] <= 20 else 'NOT met'}")
    elif scenario == "reset":
        recovery = cell["reset_recovery_s"]
        ok = recovery is not None and recovery <= 1.0
        notes.append(f"recovery<=1s {'met' if ok else 'NOT met'}")
        clean = cell["stamps_after_arrival"] == 0 and cell["stamps_backwards"] == 0
        notes.append(f"0 after arrival, 0 backwards {'met' if clean else 'NOT met'}")
    else:
        notes.append(f"no worse than arrival {'met' if ours['p99_ms'] <= arrival['p99_ms'] else 'NOT met'}")
    return notes


def run_faults() -> dict[str, Any]:
    """Figures of every clock fault case (bench/clock_faults.py), and the model's CPU per frame."""
    from bench import clock_faults

    cost, reference = model_cost_us()
    ratio = cost / reference
    print(f"model CPU per frame at 1 kHz: {cost:.2f} us (arrival rule {reference:.2f} us, x{ratio:.1f})")
    print(
        f"{'case':<44}{'recovery s':>11}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
        "  repeats (first 0.3 s) / back / after arrival (max us)  drift ppm"
    )
    out: dict[str, Any] = {"model_us_per_frame": round(cost, 3), "arrival_us_per_frame": round(reference, 3)}
    for case in clock_faults.CASES:
        f = clock_faults.run_case(case)
        out[case.name] = f
        print(
            f"{case.name:<44}{f['recovery_s']:>11.3f}{f['after_p50_ms']:>8.3f}{f['after_p99_ms']:>8.3f}"
            f"{f['after_max_ms']:>8.3f}  {f['repeats']} ({f['repeats_first_0.3s']}) / {f['backwards']} / "
            f"{f['after_arrival']} ({f['after_arrival_max_us']:.1f})  "
            f"{f['status'].get('clock_drift_ppm', '-')}",
            flush=True,
        )
    return out


def run(json_path: str | None = None, paths: tuple[str, ...] | None = None) -> dict[str, Any]:
    json_path = json_path or os.environ.get(JSON_ENV) or None
    if paths is None:
        # `python -m bench timing qtm vicon`: the path names among the command's words
        paths = tuple(word for word in sys.argv[1:] if word in PATHS)
        if not paths and FAULTS in sys.argv[1:]:
            faults = run_faults()
            if json_path:
                Path(json_path).write_text(json.dumps({"faults": faults}, indent=1, allow_nan=True))
            return {"faults": faults}
        paths = paths or PATHS
    # "paths" has exactly the shape of issue 23; "extra" what the bench adds to it
    result: dict[str, Any] = {"paths": {}, "extra": {"paths": {}}}
    cost, reference = model_cost_us()
    print(
        f"model CPU per frame at 1 kHz: {cost:.2f} us "
        f"(arrival rule {reference:.2f} us, x{cost / reference:.1f})"
    )
    result["extra"]["model_us_per_frame"] = round(cost, 3)
    result["extra"]["arrival_us_per_frame"] = round(reference, 3)
    print(
        f"{'path':<17}{'scenario':<10}{'way':<11}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>9}{'jitter us':>10}"
        "  recovery s / after arrival / backwards"
    )
    for path in paths:
        recorder = RECORDERS.get(path)
        if recorder is None:
            print(f"{path:<17}(not available)")
            continue
        result["paths"][path] = {}
        result["extra"]["paths"][path] = {}
        for scenario, impairment in SCENARIOS.items():
            with tempfile.TemporaryDirectory(prefix="bench_timing_") as tmp:
                try:
                    recording = recorder(impairment, DURATION[scenario], Path(tmp))
                    cell = evaluate(recording, scenario)
                    extra = path_floor(recording)
                except Exception as exc:  # noqa: BLE001 - one broken path must not hide the others
                    last_line = (str(exc).strip().splitlines() or [""])[-1]
                    print(f"{path:<17}{scenario:<10}failed: {type(exc).__name__}: {last_line}")
                    continue
            result["paths"][path][scenario] = cell
            result["extra"]["paths"][path][scenario] = extra
            for way in ("ours", "arrival", "min_offset"):
                f = cell[way]
                tail = ""
                if way == "ours":
                    tail = (
                        f"  {cell['reset_recovery_s']} / {cell['stamps_after_arrival']} / "
                        f"{cell['stamps_backwards']}  ({extra['frames']} frames, floor "
                        f"{extra['transport_floor_ms']:.3f} ms, offset step max "
                        f"{extra['ours_offset_step_max_us']:.1f} us; "
                        + ", ".join(_targets(cell, scenario))
                        + ")"
                    )
                print(
                    f"{path:<17}{scenario:<10}{way:<11}{f['p50_ms']:>8.3f}{f['p99_ms']:>8.3f}"
                    f"{f['max_ms']:>9.3f}{f['interval_jitter_us']:>10.1f}{tail}",
                    flush=True,
                )
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1, allow_nan=True))
        print(f"written: {json_path}")
    return result


def main(argv: list[str]) -> int:
    json_path = None
    paths = list(PATHS)
    args = list(argv)
    if "--json" in args:
        i = args.index("--json")
        if i + 1 >= len(args):
            print("--json needs a file name", file=sys.stderr)
            return 2
        json_path = args[i + 1]
        del args[i : i + 2]
    if args:
        paths = [p for p in PATHS if p in args]
        if not paths and FAULTS in args:
            faults = run_faults()
            if json_path:
                Path(json_path).write_text(json.dumps({"faults": faults}, indent=1, allow_nan=True))
            return 0
    from bench.domain import isolate

    isolate()
    run(json_path, tuple(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
