"""Per-system statistics and their /diagnostics report.

The reader thread calls ``record`` once per frame (cheap: counters and one vector add);
the executor calls ``report`` periodically, which turns the window since the previous
report into a diagnostic_msgs/DiagnosticStatus with OK / WARN / ERROR.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from diagnostic_msgs.msg import DiagnosticStatus

from .diagnostic_cdr import StatusFields

# levels are one-byte `bytes` in rclpy (the msg field is `byte`); they order as expected
OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


@dataclass
class Thresholds:
    """The limits that turn the frame statistics into a /diagnostics level (OK, WARN, ERROR)."""

    no_frame_error_s: float = 1.0  # active and silent this long: ERROR
    min_rate_ratio: float = 0.8  # measured/nominal below this: WARN
    max_drop_ratio: float = 0.01  # dropped/expected above this: WARN
    min_tracking_ratio: float = 0.5  # a body tracked in fewer frames than this: WARN


@dataclass
class _Window:
    frames: int = 0
    dropped: int = 0
    latency_sum: float = 0.0
    latency_max: float = 0.0
    body_ids: npt.NDArray[np.int64] | None = None
    body_ids_key: bytes = b""
    body_names: tuple[str, ...] = ()
    body_valid: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    body_frames: int = 0
    started: float = field(default_factory=time.monotonic)
    # validity of the frames recorded since the last flush, as bytes (0/1 per body):
    # one bytes copy per frame, summed every PENDING_VALID frames or at a report,
    # instead of a float64 += bool per frame
    pending_valid: list[bytes] = field(default_factory=list)

    def flush_valid(self) -> None:
        pending = self.pending_valid
        if pending:
            rows = np.frombuffer(b"".join(pending), dtype=np.bool_).reshape(len(pending), -1)
            self.body_valid += np.count_nonzero(rows, axis=0)
            pending.clear()


#: frames whose body validity is kept as bytes before it is added up (a budget)
PENDING_VALID = 256


class FrameStatistics:
    """Rate, latency, dropped frames and per-body tracking counted over one diagnostics period; the reader
    thread adds frames while the timer reads and resets, hence the lock."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._window = _Window()
            self.total_frames = 0
            self.total_dropped = 0
            self.bad_frames = 0
            self.read_errors = 0
            self.last_error = ""
            self.last_frame_number: int | None = None
            self.last_frame_time: float | None = None
            self.active_since: float | None = None

    def activated(self) -> None:
        with self._lock:
            self.active_since = time.monotonic()
            self._window = _Window()
            self.last_frame_number = None

    def record(
        self,
        frame_number: int,
        latency: float,
        body_ids: npt.NDArray[np.int64],
        body_names: tuple[str, ...],
        body_valid: npt.NDArray[np.bool_],
    ) -> None:
        now = time.monotonic()
        with self._lock:
            w = self._window
            if self.last_frame_number is not None and frame_number > self.last_frame_number + 1:
                gap = frame_number - self.last_frame_number - 1
                w.dropped += gap
                self.total_dropped += gap
            self.last_frame_number = frame_number
            self.last_frame_time = now
            w.frames += 1
            self.total_frames += 1
            w.latency_sum += latency
            if latency > w.latency_max:
                w.latency_max = latency
            # the ids as bytes, compared with the window's: a microsecond where
            # np.array_equal takes several (this runs once per frame, at up to kHz); the
            # dtype is part of the value (equal bytes of another type are other ids)
            ids_key = body_ids.tobytes()
            known = w.body_ids
            if (
                known is None
                or ids_key != w.body_ids_key
                or (body_ids.dtype is not known.dtype and body_ids.dtype != known.dtype)
            ):
                # the set of bodies changed: start their ratios afresh
                w.body_ids = body_ids.copy()
                w.body_ids_key = ids_key
                w.body_names = body_names
                w.body_valid = np.zeros(body_ids.shape[0])
                w.body_frames = 0
                w.pending_valid.clear()
            if body_valid.shape != w.body_valid.shape:
                raise ValueError(
                    f"body_valid has shape {body_valid.shape}, expected {w.body_valid.shape} (one per body)"
                )
            if body_valid.shape[0]:  # (no bodies: nothing to count)
                valid = body_valid if body_valid.dtype.kind == "b" else body_valid != 0
                w.pending_valid.append(valid.tobytes())
                if len(w.pending_valid) >= PENDING_VALID:
                    w.flush_valid()
            w.body_frames += 1

    def error(self, message: str, bad_frame: bool = False) -> None:
        with self._lock:
            if bad_frame:
                self.bad_frames += 1
            else:
                self.read_errors += 1
            self.last_error = message

    def report(
        self,
        name: str,
        *,
        hardware_id: str,
        active: bool,
        state_label: str,
        nominal_rate: float,
        extra: dict[str, str] | None = None,
    ) -> StatusFields:
        """The report of the window since the last one (which it starts afresh): rate,
        latency, frames dropped, each body's tracking ratio, ``extra``; level WARN or
        ERROR with the problems in the message. Plain strings, which
        :func:`~.diagnostic_cdr.encode_diagnostic_array` publishes without message objects
        (a system node's report)."""
        now = time.monotonic()
        th = self.thresholds
        with self._lock:
            w = self._window
            w.flush_valid()
            self._window = _Window(
                body_ids=w.body_ids,
                body_ids_key=w.body_ids_key,
                body_names=w.body_names,
                body_valid=np.zeros_like(w.body_valid),
            )
            elapsed = max(now - w.started, 1e-9)
            last_frame_time = self.last_frame_time
            active_since = self.active_since
            totals = (
                self.total_frames,
                self.total_dropped,
                self.bad_frames,
                self.read_errors,
                self.last_error,
            )
        rate = w.frames / elapsed
        level, problems = OK, []
        if not active:
            summary = f"{state_label}: not streaming"
        else:
            silent_since = last_frame_time if last_frame_time is not None else active_since
            silent_for = now - silent_since if silent_since is not None else 0.0
            if silent_for > th.no_frame_error_s:
                level = ERROR
                problems.append(f"no frame for {silent_for:.1f} s")
            if nominal_rate > 0 and w.frames and rate < th.min_rate_ratio * nominal_rate:
                level = max(level, WARN)
                problems.append(f"rate {rate:.1f} Hz below nominal {nominal_rate:.1f} Hz")
            expected = w.frames + w.dropped
            if expected and w.dropped / expected > th.max_drop_ratio:
                level = max(level, WARN)
                problems.append(f"{w.dropped} dropped frames")
            if w.body_frames:
                ratios = w.body_valid / w.body_frames
                lost = [n for n, r in zip(w.body_names, ratios.tolist()) if r < th.min_tracking_ratio]
                if lost:
                    level = max(level, WARN)
                    problems.append(
                        "poorly tracked: " + ", ".join(lost[:5]) + ("..." if len(lost) > 5 else "")
                    )
            summary = "; ".join(problems) if problems else f"streaming at {rate:.1f} Hz"
        values = {
            "state": state_label,
            "rate_hz": f"{rate:.2f}",
            "nominal_rate_hz": f"{nominal_rate:.2f}",
            "latency_mean_ms": f"{1000.0 * w.latency_sum / w.frames:.3f}" if w.frames else "nan",
            "latency_max_ms": f"{1000.0 * w.latency_max:.3f}",
            "frames": str(w.frames),
            "dropped_frames": str(w.dropped),
            "frames_total": str(totals[0]),
            "dropped_frames_total": str(totals[1]),
            "bad_frames_total": str(totals[2]),
            "read_errors_total": str(totals[3]),
        }
        if totals[4]:
            values["last_error"] = totals[4]
        if w.body_frames:
            for body, ratio in zip(w.body_names, (w.body_valid / w.body_frames).tolist()):
                values[f"tracking_ratio/{body}"] = f"{ratio:.3f}"
        values.update(extra or {})
        return StatusFields(level[0], name, summary, hardware_id, values)
