"""The replay system: a recorded session, a rosbag2 bag or a C3D file as a live mocap system.

Under :class:`~mocap4r2_control.system_node.MocapSystemNode` like every vendor: configure
opens and checks the file (a damaged file, one without mocap topics, an unknown label in
``bodies`` fail there with the reason), activate plays, deactivate (a control-plane
STOP) pauses and the next activate (START) resumes where it paused.

A read-ahead thread decodes frames into a bounded queue (playback.ReadAhead), so the
reader thread only waits for each frame's due time (playback.Pacer) and hands it over.
At ``rate_factor`` 1 a frame is due at its offset in the file after the moment playing
(re)started; 0 plays as fast as the node publishes. ``stamps: original`` stamps each
frame with the capture time the file holds (a session replayed so gives the recorded
messages byte for byte), ``now`` with its due time (the file's time rebased to now).
The file is watched while it plays: one that changes (a recording still being written,
a file replaced) stops the replay with that reason rather than playing a mix.

A recording of mocap4r2_interfaces messages is offered as such
(mocap4r2_control.pass_through.OffersRecorded: its shape, and each frame's recorded
messages when the node asks for them). The node decides at configure, from its own
output parameters, whether its encoder would write them again; when it would, they are
published as ``ros2 bag play`` would (the node's stamp written in) instead of encoding
the frame again; the frame itself is still checked, stamped and counted.
"""

from __future__ import annotations

import logging
import math
import threading
import time

import yaml

from mocap4r2_control.adapter import AdapterError, ConfigurationError, MocapAdapter
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system

from .convert import seconds_for_stamp
from .playback import End, Item, Pacer, ReadAhead
from .readers import ReplayFileError, ReplaySource, file_signature, open_source
from .source import RecordingShape

_LOG = logging.getLogger("mocap4r2.replay")
STAMPS = ("original", "now")


def _check_bodies(text: str) -> str | None:
    try:
        parse_bodies(text)
    except ValueError as exc:
        return str(exc)
    return None


def parse_bodies(text: str) -> dict[str, list[str]]:
    """``bodies``: a YAML mapping body name -> list of marker labels (C3D files only)."""
    if not text.strip():
        return {}
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"bodies is not YAML: {exc}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
        for k, v in value.items()
    ):
        raise ValueError(
            "bodies must map each body name to a list of marker labels, e.g. '{pelvis: [A, B, C]}'"
        )
    return value


class ReplayAdapter(MocapAdapter):
    """A recorded file played back as a mocap system."""

    system_type = "replay"
    parameters = (
        ParameterSpec("file", "", "A rosbag2 bag folder, an .mcap, a .db3 or a .c3d file."),
        ParameterSpec(
            "source", "", "Namespace of the recorded system in a bag (e.g. /sim); empty: the only one."
        ),
        ParameterSpec(
            "rate_factor",
            1.0,
            "Playback speed: 1 real time, 0 as fast as it goes.",
            min_value=0.0,
            max_value=1000.0,
        ),
        ParameterSpec("loop", False, "Start again at start after end."),
        ParameterSpec(
            "start", 0.0, "Seconds into the file where playing starts.", min_value=0.0, max_value=1e9
        ),
        ParameterSpec(
            "end", 0.0, "Seconds into the file where playing ends; 0: the end.", min_value=0.0, max_value=1e9
        ),
        ParameterSpec(
            "stamps",
            "now",
            "original: the capture times of the file; now: the file's times rebased to now.",
            choices=STAMPS,
        ),
        ParameterSpec(
            "up_axis", "z", "C3D only: the vertical axis of the file's data (x, y, z, -x, -y, -z)."
        ),
        ParameterSpec(
            "bodies",
            "",
            "C3D only: rigid bodies as YAML, body name -> marker labels, e.g. '{pelvis: [L_IAS, R_IAS, S]}'.",
            check=_check_bodies,
        ),
        ParameterSpec("read_ahead", 256, "Frames decoded ahead of playing.", min_value=1, max_value=100000),
    )

    def __init__(
        self,
        *,
        file: str,
        source: str = "",
        rate_factor: float = 1.0,
        loop: bool = False,
        start: float = 0.0,
        end: float = 0.0,
        stamps: str = "now",
        up_axis: str = "z",
        bodies: str = "",
        read_ahead: int = 256,
    ) -> None:
        if not (math.isfinite(rate_factor) and rate_factor >= 0):
            raise ConfigurationError(f"rate_factor must be 0 or more, got {rate_factor}")
        if stamps not in STAMPS:
            raise ConfigurationError(f"stamps must be one of {STAMPS}, got {stamps!r}")
        if end and end <= start:
            raise ConfigurationError(
                f"end ({end} s) must be after start ({start} s), or 0 for the file's end"
            )
        self.file = file
        self.source_name = source
        self.rate_factor = rate_factor
        self.loop = loop
        self.start = start
        self.end = end if end > 0 else math.inf
        self.stamps = stamps
        self.up_axis = up_axis
        self.bodies = parse_bodies(bodies)
        self.read_ahead = read_ahead
        self.source: ReplaySource | None = None
        self._reading: ReadAhead | None = None
        self._pacer = Pacer(rate_factor)
        self._paused = threading.Event()
        self._pending: Item | None = None
        self.played = 0
        self._played_in_loop = 0
        self._shift = 0.0
        self.position = 0.0
        #: the monotonic time the last frame handed over was due at
        self.last_due = 0.0
        self.finished = ""

    @property
    def loops(self) -> int:
        """Times playing went back to start."""
        return self._reading.loops if self._reading is not None else 0

    # ------------------------------------------------------------------ recorded messages
    def recording_shape(self) -> RecordingShape | None:
        """What the file recorded, after connect (OffersRecorded): the shape of a recording
        of mocap4r2_interfaces messages, None for any other file."""
        return self.source.recording_shape if self.source is not None else None

    def keep_recorded(self, keep: bool) -> None:
        """Attach each frame's recorded messages (OffersRecorded); the node asks at configure."""
        if self.source is not None:
            self.source.keep_recorded = keep and self.source.recording_shape is not None

    # ------------------------------------------------------------------ lifecycle
    def connect(self) -> AssetNames:
        try:
            source = open_source(self.file, self.source_name, self.up_axis, self.bodies)
            signature = file_signature(source.path)
        except (ReplayFileError, OSError) as exc:
            raise ConfigurationError(str(exc)) from None
        self.source = source
        # a configure after a cleanup plays the file again from start
        self._reading = ReadAhead(
            source,
            signature,
            start=self.start,
            end=self.end,
            loop=self.loop,
            depth=self.read_ahead,
            paced=self.rate_factor > 0,
            hold_off=self._pacer.hold_off,
        )
        self._pending = None
        self.played = self._played_in_loop = 0
        self._shift = 0.0
        self.position = 0.0
        self.finished = ""
        info = source.info
        _LOG.info(
            "replaying %s: %s, %d frames, %.1f s at %.1f Hz%s",
            source.path,
            info.kind,
            info.frame_count,
            info.duration,
            info.rate,
            "".join(f", {k} {v}" for k, v in info.details.items()),
        )
        return info.names

    @property
    def nominal_rate(self) -> float:
        if self.source is None:
            return 0.0
        rate = self.source.info.rate
        return rate * self.rate_factor if self.rate_factor > 0 else rate

    def start_streaming(self) -> None:
        if self.source is None or self._reading is None:
            raise AdapterError("not connected")
        self._reading.begin()
        self._paused.clear()
        self._pacer.restart()  # playing resumes from the first frame handed over

    def stop_streaming(self) -> None:
        # a pause: the read-ahead thread keeps its queue, the next start goes on from here
        self._paused.set()

    def disconnect(self) -> None:
        if self._reading is not None:
            self._reading.close()
        source, self.source = self.source, None
        if source is not None:
            source.close()

    # ------------------------------------------------------------------ reading
    def read_frame(self, timeout: float) -> MocapFrame | None:
        if self.source is None or self._reading is None:
            raise AdapterError("not connected")
        if self.finished:
            if self.finished != "end of file":
                raise AdapterError(self.finished)
            time.sleep(min(timeout, 0.1))
            return None
        item = self._pending
        if item is None:
            got = self._reading.take(timeout)
            if got is None:
                return None
            if isinstance(got, End):
                self.finished = got.reason or "end of file"
                if got.reason:
                    _LOG.error("replay stopped: %s", got.reason)
                    raise AdapterError(got.reason)
                _LOG.info("replay finished: %d frames played", self.played)
                return None
            item = got
        timed, shift = item
        due = self._pacer.due(timed.offset + shift)
        if self.rate_factor > 0 and not self._pacer.wait_until(due, timeout, self._paused):
            self._pending = item
            return None
        self._pending = None
        self.last_due = due
        if shift != self._shift:  # the first frame of another loop
            self._shift = shift
            self._played_in_loop = 0
        self.played += 1
        self._played_in_loop += 1
        self.position = timed.offset
        frame = timed.frame
        if self.stamps == "original":
            frame.capture_time = seconds_for_stamp(timed.sec, timed.nanosec)
        elif self.rate_factor > 0:
            frame.capture_time = self._pacer.unix_time(due)
        else:
            frame.capture_time = None  # stamped on arrival
        return frame

    def status(self) -> dict[str, str]:
        source = self.source
        if source is None:
            return {"file": self.file}
        info = source.info
        # frames between start and end, from the rate where the file has one (a bag's
        # count covers the whole file)
        span = min(self.end, info.duration) - self.start
        in_range = round(span * info.rate) + 1 if info.rate > 0 and span >= 0 else info.frame_count
        left = 0 if self.finished else max(0, min(in_range, info.frame_count) - self._played_in_loop)
        state = self.finished if self.finished else ("paused" if self._paused.is_set() else "playing")
        return {
            "file": str(source.path),
            "kind": info.kind,
            "state": state,
            "position_s": f"{self.position:.3f}",
            "duration_s": f"{info.duration:.3f}",
            "frames_played": str(self.played),
            "frames_left": str(left),
            "read_ahead_depth": str(self._reading.depth if self._reading is not None else 0),
            "loops": str(self.loops),
            "rate_factor": str(self.rate_factor),
            **info.details,
        }


def main(args: list[str] | None = None) -> int:
    """The replay_system executable: the adapter under MocapSystemNode until shutdown."""
    return run_system(ReplayAdapter, "replay_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
