"""vrpn_Tracker Pos_Quat reports to MocapFrames (:class:`FrameAssembler`), queued for the
reader (:class:`DeliveredFrames`).

VRPN has no frames: a server sends one report per tracker sensor, each stamped with the
time of its measurement on the server's clock. Here a **frame is the reports that share
one message time**: a server measuring all its bodies at once (Vicon Tracker, Motive,
DTrack, vrpn_Tracker_NULL) stamps them with one time. A frame is complete, and is
published, as soon as

* every body has reported at that time, or
* a report with another time arrives, or
* the read that brought the reports has drained the sockets (the rest of that
  instant's reports, if any, form the next frame with the same time), unless that read
  ended where the server had more on its way: a datagram sent full (a server sends one
  before it is full only at the end of its mainloop) or a message cut at the end of the
  TCP bytes; then the rest is waited for, at most ``continuation_wait`` s,

so a frame is never held back waiting for the next one. Frame numbers count the frames
formed since configure (0, 1, 2, ...), increasing by one. A datagram holding nothing but
reports (what a streaming server sends) is taken as one array (:meth:`FrameAssembler.add_records`):
one time for distinct bodies costs a few array operations, not a Python object per report.

Bodies are the trackers (VRPN senders) the server announced, but ``VRPN Control``, or
the configured ``trackers``. A body appears at its first report and stays in every
frame after; its id is its tracker's 1-based place in the configured list or, with
none configured, in the order the server announced its senders. With ``multi_sensor``
sensor n of tracker T is a body of its own, named ``T/n`` (or as ``body_names`` says),
with id ``1000 * tracker id + n``; without, only sensor 0 is read.

A body reporting in a frame is tracked with the reported pose. A body that did not
report keeps its last pose and stays tracked while that pose is at most
``untracked_after`` s old (server clock): servers that send at different rates per
tracker do not make bodies flicker, and a body whose reports stop becomes untracked.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from mocap4r2_control.frame import BodyArrays, MarkerArrays, MocapFrame, SkeletonArrays
from mocap4r2_control.geometry import AxisChange

from ..common import ClientStats, reject_input
from . import protocol as vp
from .dialog import Delivered, PoseBlock

LOG = logging.getLogger("mocap4r2.vrpn")
MAX_SENSOR = 999  # sensors per tracker a multi-sensor body id can hold
MAX_BODIES = 4096
MAX_QUEUED_FRAMES = 256  # frames formed by reads beyond the one handed out
# the rows of datagrams' sender lists remembered (a server sends the same few lists over
# and over); more distinct lists than this start the memory afresh
MAX_BLOCK_LAYOUTS = 64


class _BlockRows(NamedTuple):
    """Where the reports of a datagram with one list of senders and sensors go."""

    rows: list[int | None]  # per report: its body's row, None for a report not a body's
    bodies: list[int]  # the rows of the reports that are bodies'
    at: np.ndarray[Any, np.dtype[np.intp]]  # the same as an array
    distinct: bool  # every report is a body's, each body once
    ignored: int  # reports of the list that count as ignored_reports ...
    rejected: int  # ... and as rejected_reports, each time the list comes


def parse_body_names(entries: Sequence[str]) -> dict[str, str]:
    """``["T/0=left_hand", "drone=uav1"]`` to a mapping; ValueError naming a bad entry."""
    out: dict[str, str] = {}
    for entry in entries:
        key, sep, name = entry.partition("=")
        key, name = key.strip(), name.strip()
        if not sep or not key or not name:
            raise ValueError(f"body_names entries look like 'Tracker0/1=left_hand', got {entry!r}")
        out[key] = name
    return out


class FrameAssembler:
    """Collects reports into frames (see the module's docstring for the rules)."""

    def __init__(
        self,
        trackers: Sequence[str] = (),
        multi_sensor: bool = False,
        body_names: Mapping[str, str] | None = None,
        untracked_after: float = 0.1,
        up_axis: str = "+Z",
    ) -> None:
        self.configured = list(trackers)
        self.multi_sensor = multi_sensor
        self.body_names = dict(body_names or {})
        self.untracked_after = untracked_after
        self.axis = AxisChange(up_axis)
        self.tracker_ids: dict[str, int] = {name: i + 1 for i, name in enumerate(self.configured)}
        self.frame_number = -1
        self.ignored_reports = 0  # other sensors without multi_sensor, trackers not configured
        self.rejected_reports = 0  # beyond MAX_SENSOR / MAX_BODIES
        self.frames_split = 0  # an instant's reports that came in two reads
        self._rows: dict[tuple[str, int], int] = {}  # (tracker, sensor) -> row
        self._ids: np.ndarray[Any, np.dtype[np.int32]] = np.zeros(0, dtype=np.int32)
        self._names: tuple[str, ...] = ()
        self._positions: np.ndarray[Any, np.dtype[np.float64]] = np.zeros((0, 3))
        self._orientations: np.ndarray[Any, np.dtype[np.float64]] = np.zeros((0, 4))
        self._last_time: np.ndarray[Any, np.dtype[np.float64]] = np.zeros(0)
        self._pending_time: float | None = None
        self._pending_rows: set[int] = set()
        # (senders, sensors) of a datagram -> its rows, while the rows and ids stand
        self._block_rows: dict[tuple[Sequence[str], bytes], _BlockRows] = {}
        self._last_emitted_time: float | None = None
        # what every frame of one structure shares, made once (read only): no error
        # estimate, no markers, no skeletons
        self._mean_errors = _read_only(np.zeros(0, dtype=np.float32))
        self._marker_offsets = _read_only(np.zeros(1, dtype=np.int64))
        self._no_markers = MarkerArrays()
        self._no_skeletons = SkeletonArrays()

    # ------------------------------------------------------------------ trackers
    def announce(self, trackers: Sequence[str]) -> None:
        """The server's trackers in the order of its announcements (ids without a
        configured list; a later announcement never renumbers an earlier one)."""
        if self.configured:
            return
        self._block_rows.clear()  # a tracker announced now has reports that were ignored
        for name in trackers:
            if name != vp.CONTROL_SENDER and name not in self.tracker_ids:
                self.tracker_ids[name] = len(self.tracker_ids) + 1

    def asset_names(self, announced: Sequence[str]) -> tuple[str, ...]:
        """The bodies configure reports: the configured trackers, or the announced ones."""
        if self.configured:
            return tuple(self.body_names.get(t, t) for t in self.configured)
        return tuple(self.body_names.get(t, t) for t in announced if t != vp.CONTROL_SENDER)

    # ------------------------------------------------------------------ reports
    def add(self, tracker: str, report: vp.PoseReport, time: float) -> MocapFrame | None:
        """Take one report; the frame it completed before it (another time, or a body
        reporting twice at one time), if any. A report completing its own frame is
        returned by the next :meth:`add` or :meth:`flush`, or by :meth:`complete`."""
        row = self._row(tracker, report.sensor)
        if row is None:
            return None
        return self._take(row, report.position, report.orientation, time)

    def add_records(
        self, trackers: Sequence[str], records: np.ndarray[Any, np.dtype[np.void]]
    ) -> list[MocapFrame]:
        """Take the reports of one read's datagrams (:data:`~.protocol.POS_QUAT_RECORD`
        records, sent by ``trackers``); the frames they complete, in order: those
        :meth:`add` and :meth:`complete` give report by report, except that the bodies
        first seen in a run of reports of one time are all known before its reports are
        taken. Such a run for distinct bodies, what a server sends, is taken in a few
        array operations."""
        if not len(records):
            return []
        seconds, microseconds = records["seconds"], records["microseconds"]
        if not ((seconds == seconds[0]).all() and (microseconds == microseconds[0]).all()):
            # several instants (a read that found more than one): each run of one time in turn
            changes = (seconds[1:] != seconds[:-1]) | (microseconds[1:] != microseconds[:-1])
            cuts = [0, *(np.flatnonzero(changes) + 1).tolist(), len(records)]
            done: list[MocapFrame] = []
            for start, end in zip(cuts, cuts[1:]):
                done += self._add_one_time(trackers[start:end], records[start:end])
            return done
        return self._add_one_time(trackers, records)

    def _add_one_time(
        self, trackers: Sequence[str], records: np.ndarray[Any, np.dtype[np.void]]
    ) -> list[MocapFrame]:
        """:meth:`add_records` of reports that all have one time."""
        block = self._rows_of(trackers, records)
        rows, bodies = block.rows, block.bodies
        time = int(records["seconds"][0]) + int(records["microseconds"][0]) * 1e-6  # as vp.Message.time
        pending = self._pending_time
        done: list[MocapFrame] = []
        if block.distinct and (pending is None or time != pending or self._pending_rows.isdisjoint(bodies)):
            # one time, distinct bodies not yet in the pending frame: a frame can only
            # be completed by the last of them
            if pending is not None and time != pending:
                done.append(self._emit())
            index = block.at
            self._positions[index] = records["position"]
            self._orientations[index] = records["orientation"]
            self._last_time[index] = time
            self._pending_time = time
            self._pending_rows.update(bodies)
        else:
            positions, orientations = records["position"].tolist(), records["orientation"].tolist()
            for i, row in enumerate(rows):
                if row is None:
                    continue
                frame = self._take(row, positions[i], orientations[i], time)
                if frame is not None:
                    done.append(frame)
                frame = self.complete()
                if frame is not None:
                    done.append(frame)
            return done
        frame = self.complete()
        if frame is not None:
            done.append(frame)
        return done

    def _rows_of(self, trackers: Sequence[str], records: np.ndarray[Any, np.dtype[np.void]]) -> _BlockRows:
        """The rows of a datagram's reports, counting those that are no body's; looked up
        report by report the first time a list of senders and sensors comes, and
        remembered while no body is added (a server sends the same lists every instant:
        with 50 trackers the lookups were a third of the reading's CPU)."""
        key = (tuple(trackers), records["sensor"].tobytes())
        block = self._block_rows.get(key)
        if block is not None:
            self.ignored_reports += block.ignored
            self.rejected_reports += block.rejected
            return block
        sensors = records["sensor"].tolist()
        before, ignored, rejected = len(self._rows), self.ignored_reports, self.rejected_reports
        rows = [self._row(t, s) for t, s in zip(trackers, sensors, strict=True)]
        added = len(self._rows) != before
        if added:  # a new body renumbers the rows after it
            rows = [self._lookup(t, s) for t, s in zip(trackers, sensors, strict=True)]
        bodies = [row for row in rows if row is not None]
        block = _BlockRows(
            rows,
            bodies,
            np.asarray(bodies, dtype=np.intp),
            len(set(bodies)) == len(rows),
            self.ignored_reports - ignored,
            self.rejected_reports - rejected,
        )
        if not added:  # with a body added, what was ignored or rejected now is not fixed
            if len(self._block_rows) >= MAX_BLOCK_LAYOUTS:
                self._block_rows.clear()
            self._block_rows[key] = block
        return block

    def _take(
        self, row: int, position: Sequence[float], orientation: Sequence[float], time: float
    ) -> MocapFrame | None:
        done = None
        if self._pending_time is not None and (time != self._pending_time or row in self._pending_rows):
            done = self._emit()
        self._pending_time = time
        self._pending_rows.add(row)
        self._positions[row] = position
        self._orientations[row] = orientation
        self._last_time[row] = time
        return done

    def complete(self) -> MocapFrame | None:
        """The pending frame when every body has reported in it."""
        if self._pending_time is not None and len(self._pending_rows) == len(self._names):
            return self._emit()
        return None

    @property
    def pending(self) -> bool:
        """Whether reports wait in a frame not yet complete."""
        return self._pending_time is not None

    def flush(self) -> MocapFrame | None:
        """The pending frame, at the end of a read."""
        if self._pending_time is None:
            return None
        return self._emit()

    def _lookup(self, tracker: str, sensor: int) -> int | None:
        """The row of a known body reporting, or None (nothing counted)."""
        if not self.multi_sensor and sensor != 0:
            return None
        return self._rows.get((tracker, sensor))

    def _row(self, tracker: str, sensor: int) -> int | None:
        """The row of the body reporting, made at its first report; None (counted) for a
        report that is not a body's."""
        key = (tracker, sensor if self.multi_sensor else 0)
        row = self._rows.get(key)
        if row is not None:
            if self.multi_sensor or sensor == 0:
                return row
            self.ignored_reports += 1
            return None
        tracker_id = self.tracker_ids.get(tracker)
        if tracker_id is None or (not self.multi_sensor and sensor != 0):
            self.ignored_reports += 1
            return None
        if sensor > MAX_SENSOR or len(self._rows) >= MAX_BODIES:
            self.rejected_reports += 1
            return None
        if self.multi_sensor:
            label = f"{tracker}/{sensor}"
            name = self.body_names.get(label, label)
            body_id = 1000 * tracker_id + sensor
        else:
            name = self.body_names.get(tracker, tracker)
            body_id = tracker_id
        self._add_body(key, body_id, name)
        return self._rows[key]

    def _add_body(self, key: tuple[str, int], body_id: int, name: str) -> None:
        """A new row, keeping rows in id order (a new structure for the publisher)."""
        ids = np.append(self._ids, np.int32(body_id))
        order = np.argsort(ids, kind="stable")
        keys = [*self._rows.keys(), key]
        keys = [keys[i] for i in order]
        pending = {int(np.flatnonzero(order == r)[0]) for r in self._pending_rows}
        self._ids = ids[order]
        self._names = tuple([*self._names, name][i] for i in order)
        self._positions = np.vstack([self._positions, np.full((1, 3), np.nan)])[order]
        self._orientations = np.vstack([self._orientations, np.full((1, 4), np.nan)])[order]
        self._last_time = np.append(self._last_time, -math.inf)[order]
        self._rows = {k: i for i, k in enumerate(keys)}
        self._block_rows.clear()  # the rows after the new one moved
        self._pending_rows = pending
        self._mean_errors = _read_only(np.full(len(ids), -1.0, dtype=np.float32))
        self._marker_offsets = _read_only(np.zeros(len(ids) + 1, dtype=np.int64))

    def _emit(self) -> MocapFrame:
        time = self._pending_time
        assert time is not None
        if time == self._last_emitted_time:
            self.frames_split += 1
        age = time - self._last_time
        valid = (age <= self.untracked_after) & (age >= -self.untracked_after)
        # copies either way: the rows change with the next reports, the frame must not
        if self.axis.identity:
            positions, orientations = self._positions.copy(), self._orientations.copy()
        else:
            positions = self.axis.positions(self._positions)
            orientations = self.axis.orientations(self._orientations)
        bodies = BodyArrays(
            ids=self._ids,
            names=self._names,
            positions=positions,
            orientations=orientations,
            valid=valid,
            mean_errors=self._mean_errors,
            marker_offsets=self._marker_offsets,
            markers=self._no_markers,
        )
        self.frame_number += 1
        self._pending_time = None
        self._pending_rows = set()
        self._last_emitted_time = time
        return MocapFrame(
            frame_number=self.frame_number,
            markers=self._no_markers,
            bodies=bodies,
            skeletons=self._no_skeletons,
            system_time=time,
        )


def _read_only(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    array.flags.writeable = False
    return array


class DeliveredFrames:
    """The messages reads delivered, as frames in order, waiting to be handed out.

    Pos_Quat reports go to the :class:`FrameAssembler`; velocity and acceleration
    reports are checked and counted (a MocapFrame has no place for them); a malformed
    report is dropped and counted. At most MAX_QUEUED_FRAMES frames wait beyond the one
    handed out: a reader that falls behind loses the oldest, counted.
    """

    def __init__(self, assembler: FrameAssembler, stats: ClientStats) -> None:
        self.assembler = assembler
        self.stats = stats  # the client's: malformed reports counted by kind, logged once
        self.queue: deque[MocapFrame] = deque()
        self.frames_lost = 0
        self.report_errors = 0
        self.velocity_reports = 0

    def clear(self) -> None:
        """Forget the frames waiting."""
        self.queue.clear()

    def pop(self) -> MocapFrame | None:
        """The oldest frame waiting, or None."""
        return self.queue.popleft() if self.queue else None

    def add(self, delivered: Sequence[Delivered | PoseBlock], end_of_read: bool = True) -> None:
        """The messages of one read; the frames they complete join the queue, and with
        ``end_of_read`` the frame still pending too (see :meth:`FrameAssembler.flush`)."""
        converter = self.assembler
        frames = self.queue
        for item in delivered:
            if isinstance(item, PoseBlock):
                frames.extend(converter.add_records(item.trackers, item.records))
                continue
            kind = item.type
            if kind == vp.POS_QUAT:
                try:
                    report = vp.unpack_pos_quat(item.message.payload)
                except vp.VrpnProtocolError as exc:
                    self._bad_report(exc)
                    continue
                done = converter.add(item.sender, report, item.message.time)
                if done is not None:
                    frames.append(done)
                done = converter.complete()
                if done is not None:
                    frames.append(done)
            elif kind in (vp.VELOCITY, vp.ACCELERATION):
                # optional reports: checked and counted, not part of a MocapFrame
                try:
                    vp.unpack_motion(item.message.payload)
                    self.velocity_reports += 1
                except vp.VrpnProtocolError as exc:
                    self._bad_report(exc)
        if end_of_read:
            self.flush()
        self._bound()

    def flush(self) -> None:
        """The end of a read: the pending frame joins the queue."""
        done = self.assembler.flush()
        if done is not None:
            self.queue.append(done)
            self._bound()

    def _bound(self) -> None:
        frames = self.queue
        while len(frames) > MAX_QUEUED_FRAMES + 1:
            frames.popleft()
            self.frames_lost += 1

    def _bad_report(self, exc: Exception) -> None:
        self.report_errors += 1
        reject_input(self.stats, LOG, "malformed_report", f"a malformed tracker report ({exc})")
