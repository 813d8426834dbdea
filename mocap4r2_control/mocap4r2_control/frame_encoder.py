"""MocapFrame -> serialized Markers / RigidBodies / Skeletons / TFMessage, on the hot path.

Two steps per frame, both vectorised:
  1. the validity rule of the interfaces (hold the last good value, never NaN; see
     hold_last.py) turns the adapter's arrays into the arrays to publish;
  2. the CDR encoders (cdr.py) write those arrays straight into message bytes, which
     rclpy publishes as they are. Building or refreshing message objects instead costs
     tens of times more for hundreds of markers (bench/bench_cdr.py).

While a system's assets stay the same (the usual case), both steps shrink to what
changes per frame: the rule's values and the numbers written into the previous
message (see FrameEncoder); for the frame's markers and the bodies' markers, that is one
compiled pass each where numba is there (markers_pass.py). This runs once per frame at up
to 2 kHz, and after the reader's wait for the next frame the processor's caches are cold,
so every numpy call costs two to three times what a tight loop shows: the number of calls
is the cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import bodies_pass, markers_pass
from .cdr import MarkersEncoder, RigidBodiesEncoder, SkeletonsEncoder, TFMessageEncoder
from .cdr_layout import Array, BodiesLayout, MarkerFields, SkeletonsLayout
from .compiled_kernels import kernel_input
from .frame import UNKNOWN_ID, BodyArrays, MarkerArrays, MocapFrame
from .hold_last import IDENTITY_POSE, LastGoodValues, SubKeys, good_poses

_ONES3 = np.ones(3)
_NO_ERROR = np.float32(-1.0)  # the mean_error of a body not tracked
_NO_SEGMENTS = (np.zeros(0, dtype=bool), np.zeros((0, 7)))


def _hold(last: LastGoodValues, values: Array, good: Array) -> Array:
    """``last.hold(values, good)``. In the usual frame every row is good and every key has
    been seen: holding is then a plain copy of the rows, where hold's masked copy costs
    several times more (3-9 us for 50 x 7 or 200 x 3 values on the development machine)."""
    if last.all_seen and np.count_nonzero(good) == good.shape[0]:
        np.copyto(last.values, values)
        return last.values
    return last.hold(values, good)


def _same_names(names: Sequence[str], cached: tuple[str, ...] | None) -> bool:
    # identity first: adapters hand over the same tuple frame after frame
    return names is cached or (cached is not None and tuple(names) == cached)


@dataclass
class PublishedMarkers:
    """Markers after the validity rule: what goes into a message."""

    ids: Array
    names: tuple[str, ...]
    positions: Array
    occluded: Array
    residuals: Array
    kept: Array | None  # rows of the input kept (None: all)


class MarkerValues(NamedTuple):
    """What MarkerRule.reapply gives for markers whose ids and names stay as they were."""

    positions: Array
    occluded: Array
    residuals: Array


_NO_MARKERS = PublishedMarkers(
    np.zeros(0, np.int32), (), np.zeros((0, 3)), np.zeros(0, bool), np.zeros(0, np.float32), None
)
_NO_MARKER_VALUES = MarkerValues(_NO_MARKERS.positions, _NO_MARKERS.occluded, _NO_MARKERS.residuals)


class MarkerRule:
    """Occluded labeled markers keep their last position (per key); markers with no
    position ever known (labeled and never seen, or unlabeled and not finite) are left
    out. The kept names are cached so unchanged frames pass the same tuple on."""

    def __init__(self) -> None:
        self.last = LastGoodValues(3)
        self._source: tuple[str, ...] | None = None
        self._rows = b""
        self._names: tuple[str, ...] = ()
        self._ids_bytes: bytes | None = None
        self._labeled = np.zeros(0, dtype=bool)
        self._all_labeled = True
        # the last apply kept every row as it came (every labeled marker has been seen,
        # every unlabeled one had a position): markers with the same ids may go
        # through reapply()
        self.kept_all = False

    @property
    def all_labeled(self) -> bool:
        """Every marker of the last apply had a label (an id other than UNKNOWN_ID)."""
        return self._all_labeled

    def apply(self, arrays: MarkerArrays, keys: Array) -> PublishedMarkers:
        self.kept_all = False
        positions = arrays.positions
        # row sums through a matrix product: NaN or inf in a row makes its sum non-finite
        # (inf - inf is NaN), at a fraction of the cost of an axis reduction over 3 columns
        finite = np.isfinite(positions @ _ONES3)
        ids_bytes = arrays.ids.tobytes()
        # which markers are labeled changes with the ids only (the length check tells
        # apart equal bytes of another dtype)
        if ids_bytes != self._ids_bytes or arrays.ids.shape != self._labeled.shape:
            self._labeled = arrays.ids != UNKNOWN_ID
            self._all_labeled = bool(self._labeled.all())
            self._ids_bytes = ids_bytes
        labeled, all_labeled = self._labeled, self._all_labeled
        measured = finite > arrays.occluded  # finite and not occluded, in one call
        held, seen = self.last.update(keys, positions, measured if all_labeled else measured & labeled)
        occluded = ~measured
        # with every marker labeled (the usual case), the held positions are the output
        out_pos = held if all_labeled else np.where(labeled[:, None], held, positions)
        residuals = np.where(measured, arrays.residuals, np.float32(-1.0))
        if residuals.dtype != np.float32:
            residuals = residuals.astype(np.float32)
        if all_labeled and self.last.all_seen:  # every marker has a position: all are kept
            self.kept_all = True
            return PublishedMarkers(arrays.ids, arrays.names, out_pos, occluded, residuals, None)
        keep = seen if all_labeled else np.where(labeled, seen, finite)
        if keep.all():
            self.kept_all = True
            return PublishedMarkers(arrays.ids, arrays.names, out_pos, occluded, residuals, None)
        rows = np.flatnonzero(keep)
        rows_bytes = rows.tobytes()
        if rows_bytes != self._rows or not _same_names(arrays.names, self._source):
            self._names = tuple(arrays.names[i] for i in rows.tolist())
            self._source, self._rows = arrays.names, rows_bytes
        return PublishedMarkers(
            arrays.ids[rows], self._names, out_pos[rows], occluded[rows], residuals[rows], rows
        )

    def reapply(self, arrays: MarkerArrays) -> MarkerValues | None:
        """``apply`` for markers with the ids of the last apply, which kept all of them
        (``kept_all``): positions, occlusion flags and residuals to publish, every row;
        None when this frame must leave a row out (an unlabeled marker without a finite
        position), and ``apply`` must run instead. The caller has checked that the ids
        are the same; this skips everything that follows from them (which are labeled,
        which were seen, which rows stay)."""
        positions = arrays.positions
        finite = np.isfinite(positions @ _ONES3)
        labeled = self._labeled
        if not self._all_labeled and not (finite | labeled).all():
            return None
        measured = finite > arrays.occluded
        occluded = ~measured
        if self._all_labeled:
            last = self.last
            if last.all_seen and np.count_nonzero(measured) == measured.shape[0]:
                # every marker measured (a frame without occlusion): the positions are
                # held as they came (a plain copy) and no residual is replaced
                np.copyto(last.values, positions)
                return MarkerValues(last.values, occluded, arrays.residuals)
            out = last.hold(positions, measured)
        else:  # unlabeled markers are published as measured, never held
            out = np.where(labeled[:, None], self.last.hold(positions, measured & labeled), positions)
        residuals = arrays.residuals.copy()
        residuals[occluded] = -1.0  # half the cost of np.where on a few hundred rows
        return MarkerValues(out, occluded, residuals)


class _CompiledMarkers:
    """The compiled markers pass (markers_pass.py) for one MarkerRule (the frame's markers
    or the bodies' markers) and the message it writes into.

    It covers the frames the pass was compiled for: every marker labeled and seen before
    (so ``reapply`` would hold every row and leave none out), the arrays of the pass's
    types, shaped as the rule's memory. ``fits`` says so before anything is written;
    ``write`` then holds the positions and writes positions, occlusion flags and residuals
    into the message at the indices ``places`` gives (computed once per message layout:
    the fields object of a cached layout stays the same)."""

    __slots__ = ("compiled", "rule", "_fields", "_places")

    def __init__(self, compiled: markers_pass.Pass, rule: MarkerRule) -> None:
        self.compiled = compiled
        self.rule = rule
        self._fields: MarkerFields | None = None
        self._places: Array = np.zeros((0, markers_pass.PLACE_COLUMNS), dtype=np.int64)

    @staticmethod
    def inputs(arrays: MarkerArrays) -> tuple[Array, Array, Array]:
        """The pass's frame: positions, occlusion flags and residuals as a kernel takes them."""
        return (kernel_input(arrays.positions), kernel_input(arrays.occluded), kernel_input(arrays.residuals))

    def fits(self, frame: tuple[Array, Array, Array]) -> bool:
        """``frame`` (:meth:`inputs`) is one the pass covers."""
        rule = self.rule
        positions, occluded, residuals = frame
        return (
            rule.all_labeled
            and rule.last.all_seen
            and markers_pass.fits(positions, occluded, residuals)
            and positions.shape == rule.last.values.shape
            and occluded.shape == residuals.shape == positions.shape[:1]
        )

    def places(self, fields: MarkerFields) -> Array:
        """The indices the pass writes to in the message whose marker fields are ``fields``."""
        if fields is not self._fields:  # a new message layout: its fields' indices, once
            self._places = markers_pass.places(fields)
            self._fields = fields
        return self._places

    def write(self, frame: tuple[Array, Array, Array], places: Array, data: Array) -> None:
        """The frame's markers (``fits``) into a message's bytes after the encapsulation."""
        self.compiled(frame, self.rule.last.values, places, data)


class _Unchanged:
    """Whether a collection of the frame (markers, bodies, skeletons) has the structure of
    the previous frame's, remembered by FrameEncoder only after a frame whose markers were
    all kept: the same frame_id, the same names (adapters pass the same tuple object
    while the names do not change, which makes this an identity check; frame.py) and the
    same id and offset arrays. Then the frame_id, ids, names and counts already in an
    encoder's buffer are right, and the frame only needs its numbers written (the
    encoders' repeat())."""

    __slots__ = ("_frame_id", "_names", "_arrays")

    def __init__(self) -> None:
        self._frame_id = ""
        self._names: tuple[tuple[str, ...], ...] | None = None
        self._arrays: tuple[tuple[str, bytes], ...] = ()

    @staticmethod
    def _key(arrays: tuple[Array, ...]) -> tuple[tuple[str, bytes], ...]:
        # the dtype is part of the value: equal bytes of another type are other ids
        return tuple([(a.dtype.char, a.tobytes()) for a in arrays])

    def same(self, frame_id: str, names: tuple[Sequence[str], ...], arrays: tuple[Array, ...]) -> bool:
        # tuple equality compares identical elements by identity first: no string is
        # compared while the adapter passes the same names tuples
        if names != self._names or frame_id != self._frame_id:
            return False
        # array by array, stopping at the first that differs (no key built per frame)
        for array, (char, data) in zip(arrays, self._arrays):
            if array.dtype.char != char or array.tobytes() != data:
                return False
        return len(arrays) == len(self._arrays)

    def remember(self, frame_id: str, names: tuple[Sequence[str], ...], arrays: tuple[Array, ...]) -> None:
        # a copy of any names list: one changed in place must not look the same
        self._frame_id = frame_id
        self._names = tuple(n if type(n) is tuple else tuple(n) for n in names)
        self._arrays = self._key(arrays)

    def forget(self) -> None:
        self._names = None
        self._arrays = ()


@dataclass(slots=True)
class EncodedFrame:
    """One frame's serialized messages (None: topic off, or no tracked body for /tf) and
    what was published for each body, for the node's statistics."""

    markers: bytes | None
    rigid_bodies: bytes | None
    skeletons: bytes | None
    tf: bytes | None
    body_valid: Array  # the validity published for each body row
    body_poses: Array  # (n, 7) poses published


class FrameEncoder:
    """The per-system state of the validity rule and the encoders of its topics.

    Two paths per frame. A collection (the frame's markers, the bodies with their
    markers, the skeletons) whose structure is that of the previous frame, and whose
    markers were all kept then (``_Unchanged`` remembers only such a frame), has only
    its numbers recomputed and written into the previous message (the encoders'
    ``repeat``): the usual case, since a system's assets rarely change while it
    streams. Anything else goes through the whole rule and ``encode``. Both give the
    same bytes (test_validity_rule.py compares them; ``repeat_unchanged=False`` takes
    the whole path every frame).

    The frame's markers and the bodies' markers on the first path are one compiled pass
    each (markers_pass.py), and the bodies' poses another (bodies_pass.py, which also
    takes the skeletons' segments, without mean errors), when
    ``compiled`` and numba can provide them (``compiled_markers`` False: the poses only);
    they are compiled or loaded from numba's cache on first use (the node asks for them
    when it is built), never in a frame; where they cannot be had, numpy as before, with
    the same bytes (test_markers_pass.py, test_bodies_pass.py and test_segments_pass.py
    compare them)."""

    def __init__(
        self,
        frame_id: str,
        tf_prefix: str = "",
        *,
        markers: bool = True,
        rigid_bodies: bool = True,
        body_markers: bool = True,
        skeletons: bool = True,
        tf: bool = False,
        repeat_unchanged: bool = True,
        compiled: bool = True,
        compiled_markers: bool = True,
    ):
        self.frame_id = frame_id
        self.tf_prefix = tf_prefix
        self.enabled = {"markers": markers, "rigid_bodies": rigid_bodies, "skeletons": skeletons, "tf": tf}
        self.body_markers = body_markers
        self.repeat_unchanged = repeat_unchanged
        self._markers = MarkersEncoder()
        self._bodies = RigidBodiesEncoder()
        self._skeletons = SkeletonsEncoder()
        self._tf = TFMessageEncoder()
        self._frame_markers = MarkerRule()
        self._body_marker_rule = MarkerRule()
        self._markers_unchanged = _Unchanged()
        self._bodies_unchanged = _Unchanged()
        self._skeletons_unchanged = _Unchanged()
        self._body_last = LastGoodValues(7, IDENTITY_POSE)
        self._segment_last = LastGoodValues(7, IDENTITY_POSE)
        self._body_marker_keys = SubKeys()
        self._segment_keys = SubKeys()
        self._child_source: tuple[str, ...] | None = None
        self._child_rows = b""
        self._child_prefix = tf_prefix
        self._child_names: tuple[str, ...] = ()
        wanted = markers or (rigid_bodies and body_markers)
        found = markers_pass.load() if compiled and compiled_markers and repeat_unchanged and wanted else None
        self._pass = None if found is None or not markers else _CompiledMarkers(found, self._frame_markers)
        self._body_pass = (
            None
            if found is None or not (rigid_bodies and body_markers)
            else _CompiledMarkers(found, self._body_marker_rule)
        )
        self._poses_pass = bodies_pass.load() if compiled and repeat_unchanged and rigid_bodies else None
        self._body_places_layout: BodiesLayout | None = None
        self._body_places: Array = np.zeros((0, bodies_pass.PLACE_COLUMNS), dtype=np.int64)
        # the segments' poses: the same pass, without mean errors (bodies_pass.places)
        self._segments_pass = bodies_pass.load() if compiled and repeat_unchanged and skeletons else None
        self._segment_places_layout: SkeletonsLayout | None = None
        self._segment_places: Array = np.zeros((0, bodies_pass.PLACE_COLUMNS), dtype=np.int64)

    @property
    def compiled(self) -> bool:
        """The frame's markers (or, with markers off, the bodies' markers) go through the
        compiled pass when their structure stays."""
        return self._pass is not None or self._body_pass is not None

    @property
    def compiled_poses(self) -> bool:
        """The bodies' poses go through the compiled pass (bodies_pass.py) when their
        structure stays."""
        return self._poses_pass is not None

    def encode(self, frame: MocapFrame, sec: int, nanosec: int) -> EncodedFrame:
        number = frame.frame_number
        markers = (
            self._encode_markers(frame.markers, sec, nanosec, number) if self.enabled["markers"] else None
        )
        bodies = frame.bodies
        rigid_bodies = None
        if self.enabled["rigid_bodies"]:
            rigid_bodies, good, held = self._encode_bodies(bodies, sec=sec, nanosec=nanosec, number=number)
        else:
            good, poses = good_poses(bodies.positions, bodies.orientations, bodies.valid)
            held, _ = self._body_last.update(bodies.ids, poses, good)
        skeletons = self._encode_skeletons(frame, sec, nanosec) if self.enabled["skeletons"] else None
        tf = self._encode_tf(frame, good, held, sec, nanosec) if self.enabled["tf"] else None
        return EncodedFrame(markers, rigid_bodies, skeletons, tf, good, held)

    def _encode_markers(self, arrays: MarkerArrays, sec: int, nanosec: int, number: int) -> bytes:
        rule, unchanged = self._frame_markers, self._markers_unchanged
        names, structure = (arrays.names,), (arrays.ids,)
        if self.repeat_unchanged and unchanged.same(self.frame_id, names, structure):
            if self._pass is not None:
                data = self._repeat_compiled(arrays, sec, nanosec, number)
                if data is not None:
                    return data
            values = rule.reapply(arrays)
            if values is not None:
                return self._markers.repeat(
                    sec=sec,
                    nanosec=nanosec,
                    frame_number=number,
                    positions=values.positions,
                    occluded=values.occluded,
                    residuals=values.residuals,
                )
        unchanged.forget()
        m = rule.apply(arrays, arrays.ids)
        data = self._markers.encode(
            sec=sec,
            nanosec=nanosec,
            frame_id=self.frame_id,
            frame_number=number,
            ids=m.ids,
            names=m.names,
            positions=m.positions,
            occluded=m.occluded,
            residuals=m.residuals,
        )
        if rule.kept_all:
            unchanged.remember(self.frame_id, names, structure)
        return data

    def _repeat_compiled(self, arrays: MarkerArrays, sec: int, nanosec: int, number: int) -> bytes | None:
        """``reapply`` + ``repeat`` for the frame's markers in one compiled pass, when every
        marker is labeled and has been seen and the arrays have the pass's types; None
        otherwise (the numpy path then runs)."""
        compiled = self._pass
        if compiled is None:
            return None
        frame = compiled.inputs(arrays)
        if not compiled.fits(frame):
            return None
        view = self._markers.restamp(sec=sec, nanosec=nanosec, frame_number=number)
        places = compiled.places(view.markers)
        if places.shape[0] != arrays.positions.shape[0]:
            return None
        compiled.write(frame, places, view.layout.buf.u8)
        return view.message.tobytes()

    def _repeat_bodies_compiled(
        self,
        bodies: BodyArrays,
        good: Array,
        poses: Array,
        mean_errors: Array,
        *,
        stamp: tuple[int, int, int],
    ) -> tuple[bytes, Array] | None:
        """The unchanged-structure path of ``_encode_bodies`` with the bodies' markers
        through the compiled pass (``reapply`` + their part of ``repeat``) when every body
        marker is labeled and has been seen and the arrays have the pass's types; None
        before anything is held or written otherwise (the numpy path then runs)."""
        compiled, markers = self._body_pass, bodies.markers
        count = bodies.ids.shape[0]
        if compiled is None:
            return None
        frame = compiled.inputs(markers)
        if (
            not compiled.fits(frame)
            or poses.shape != (count, 7)
            or good.shape != (count,)
            or mean_errors.shape != (count,)
        ):
            return None
        held = _hold(self._body_last, poses, good)
        sec, nanosec, number = stamp
        layout = self._bodies.restamp(
            sec=sec, nanosec=nanosec, frame_number=number, valid=good, poses=held, mean_errors=mean_errors
        )
        places = compiled.places(layout.markers)
        if places.shape[0] != markers.positions.shape[0]:
            # not while the structure is unchanged (the message holds every marker of the
            # frame); the numpy path holds the same poses again, which changes nothing
            return None
        compiled.write(frame, places, layout.buf.u8)
        return layout.buf.tobytes(), held

    def _repeat_bodies_in_one_pass(
        self, bodies: BodyArrays, with_markers: bool, stamp: tuple[int, int, int]
    ) -> tuple[bytes, Array, Array] | None:
        """The whole unchanged-structure path of ``_encode_bodies`` compiled: the poses
        (``good_poses``, hold, validity, poses and mean errors written: bodies_pass.py) and
        the bodies' markers (markers_pass.py), when the arrays have the passes' types and
        every body marker is labeled and seen; None before anything is held or written
        otherwise (numpy then runs)."""
        poses_pass, markers = self._poses_pass, bodies.markers
        last = self._body_last
        count = bodies.ids.shape[0]
        # poses given as column slices of one (n, 7) array, or a recorded frame's views of
        # its bytes: one copy each, not numpy's path
        positions, orientations, valid, errors = (
            kernel_input(bodies.positions),
            kernel_input(bodies.orientations),
            kernel_input(bodies.valid),
            kernel_input(bodies.mean_errors),
        )
        if (
            poses_pass is None
            or not bodies_pass.fits(positions, orientations, valid, errors)
            or last.values.shape != (count, 7)
            or positions.shape != (count, 3)
            or orientations.shape != (count, 4)
            or valid.shape != (count,)
            or errors.shape != (count,)
        ):
            return None
        body_markers = self._body_pass
        marker_frame = body_markers.inputs(markers) if body_markers is not None and with_markers else None
        if with_markers and (
            body_markers is None or marker_frame is None or not body_markers.fits(marker_frame)
        ):
            return None
        sec, nanosec, number = stamp
        layout = self._bodies.restamp(sec=sec, nanosec=nanosec, frame_number=number)
        if layout is not self._body_places_layout:  # a new message layout: its indices, once
            self._body_places = bodies_pass.places(layout.poses, layout.valid, layout.errors)
            self._body_places_layout = layout
        if self._body_places.shape[0] != count:
            return None
        marker_places = None
        if body_markers is not None and with_markers:
            marker_places = body_markers.places(layout.markers)
            if marker_places.shape[0] != markers.positions.shape[0]:
                return None
        data = layout.buf.u8
        good = np.empty(count, dtype=bool)
        if not poses_pass(
            (positions, orientations, valid, errors), last.values, self._body_places, data, good
        ):
            return None  # a coordinate where numpy's summation order could matter
        if not last.all_seen:  # bodies never tracked yet: the rows seen now are remembered
            last.hold(last.values, good)  # (the rows are held already: a copy onto themselves)
        if body_markers is not None and marker_places is not None and marker_frame is not None:
            body_markers.write(marker_frame, marker_places, data)
        return layout.buf.tobytes(), good, last.values

    def _encode_bodies(
        self, bodies: BodyArrays, *, sec: int, nanosec: int, number: int
    ) -> tuple[bytes, Array, Array]:
        """rigid_bodies, the validity published and the poses held for every body."""
        rule, unchanged = self._body_marker_rule, self._bodies_unchanged
        with_markers = self.body_markers and len(bodies.markers) > 0
        names = (bodies.names, bodies.markers.names)
        structure = (bodies.ids, bodies.marker_offsets, bodies.markers.ids)
        repeat = self.repeat_unchanged and unchanged.same(self.frame_id, names, structure)
        if repeat and self._poses_pass is not None:
            whole = self._repeat_bodies_in_one_pass(bodies, with_markers, (sec, nanosec, number))
            if whole is not None:
                return whole
        good, poses = good_poses(bodies.positions, bodies.orientations, bodies.valid)
        # every body good (the usual frame): the errors as they are, written into the
        # message right away; counting the good ones costs a fraction of np.where
        if np.count_nonzero(good) == good.shape[0]:
            mean_errors = bodies.mean_errors
        else:
            mean_errors = np.where(good, bodies.mean_errors, _NO_ERROR)
        if repeat:
            if with_markers and self._body_pass is not None:
                done = self._repeat_bodies_compiled(
                    bodies, good, poses, mean_errors, stamp=(sec, nanosec, number)
                )
                if done is not None:
                    return done[0], good, done[1]
            marker_values = rule.reapply(bodies.markers) if with_markers else _NO_MARKER_VALUES
            if marker_values is not None:
                held = _hold(self._body_last, poses, good)
                data = self._bodies.repeat(
                    sec=sec,
                    nanosec=nanosec,
                    frame_number=number,
                    valid=good,
                    poses=held,
                    mean_errors=mean_errors,
                    marker_positions=marker_values.positions,
                    marker_occluded=marker_values.occluded,
                    marker_residuals=marker_values.residuals,
                )
                return data, good, held
        unchanged.forget()
        held, _ = self._body_last.update(bodies.ids, poses, good)
        offsets = bodies.marker_offsets
        if with_markers:
            bm = rule.apply(bodies.markers, self._body_marker_keys(bodies.ids, offsets))
            if bm.kept is not None:
                # recount each body's markers after leaving out the never-seen ones
                owner = np.repeat(np.arange(len(bodies)), np.diff(offsets))[bm.kept]
                offsets = np.zeros(len(bodies) + 1, dtype=np.int64)
                np.cumsum(np.bincount(owner, minlength=len(bodies)), out=offsets[1:])
        else:
            bm = _NO_MARKERS
            offsets = np.zeros(len(bodies) + 1, dtype=np.int64)
        data = self._bodies.encode(
            sec=sec,
            nanosec=nanosec,
            frame_id=self.frame_id,
            frame_number=number,
            ids=bodies.ids,
            names=bodies.names,
            valid=good,
            poses=held,
            mean_errors=mean_errors,
            marker_offsets=offsets,
            marker_ids=bm.ids,
            marker_names=bm.names,
            marker_positions=bm.positions,
            marker_occluded=bm.occluded,
            marker_residuals=bm.residuals,
        )
        if rule.kept_all or not with_markers:
            unchanged.remember(self.frame_id, names, structure)
        return data, good, held

    def _encode_skeletons(self, frame: MocapFrame, sec: int, nanosec: int) -> bytes:
        sk = frame.skeletons
        if not len(sk):  # most systems stream no skeletons: an empty message each frame
            return self._skeletons.encode_empty(
                sec=sec, nanosec=nanosec, frame_id=self.frame_id, frame_number=frame.frame_number
            )
        seg = sk.segments
        unchanged = self._skeletons_unchanged
        names = (sk.names, seg.names)
        structure = (sk.ids, sk.segment_offsets, seg.ids, seg.parent_ids)
        if self.repeat_unchanged and unchanged.same(self.frame_id, names, structure):
            if self._segments_pass is not None:
                data = self._repeat_segments_in_one_pass(frame, sec, nanosec)
                if data is not None:
                    return data
            good, poses = good_poses(seg.positions, seg.orientations, seg.valid)
            held = _hold(self._segment_last, poses, good)
            return self._skeletons.repeat(
                sec=sec,
                nanosec=nanosec,
                frame_number=frame.frame_number,
                valid=sk.valid,
                segment_valid=good,
                segment_poses=held,
            )
        unchanged.forget()
        if len(seg):
            good, poses = good_poses(seg.positions, seg.orientations, seg.valid)
            held, _ = self._segment_last.update(self._segment_keys(sk.ids, sk.segment_offsets), poses, good)
        else:  # skeletons without segments: nothing to hold
            good, held = _NO_SEGMENTS
        data = self._skeletons.encode(
            sec=sec,
            nanosec=nanosec,
            frame_id=self.frame_id,
            frame_number=frame.frame_number,
            ids=sk.ids,
            names=sk.names,
            valid=sk.valid,
            segment_offsets=sk.segment_offsets,
            segment_ids=seg.ids,
            segment_names=seg.names,
            segment_parent_ids=seg.parent_ids,
            segment_valid=good,
            segment_poses=held,
        )
        if len(seg):  # (without segments nothing is held, and encode is cheap)
            unchanged.remember(self.frame_id, names, structure)
        return data

    def _repeat_segments_in_one_pass(self, frame: MocapFrame, sec: int, nanosec: int) -> bytes | None:
        """The unchanged-structure path of ``_encode_skeletons`` compiled: the segments'
        ``good_poses``, hold, validity and poses written (bodies_pass.py's pass, with no
        mean error), the skeletons' validity and the stamp by ``restamp``; None before
        anything is held or written to the segments when the arrays are not of the pass's
        types and shapes, or a coordinate is where numpy's summation order could matter
        (numpy then runs, and writes every field again)."""
        segments_pass, seg = self._segments_pass, frame.skeletons.segments
        last = self._segment_last
        count = seg.ids.shape[0]
        positions, orientations, valid = (
            kernel_input(seg.positions),
            kernel_input(seg.orientations),
            kernel_input(seg.valid),
        )
        errors = bodies_pass.NO_ERRORS
        if (
            segments_pass is None
            or not bodies_pass.fits(positions, orientations, valid, errors)
            or last.values.shape != (count, 7)
            or positions.shape != (count, 3)
            or orientations.shape != (count, 4)
            or valid.shape != (count,)
        ):
            return None
        layout = self._skeletons.restamp(
            sec=sec, nanosec=nanosec, frame_number=frame.frame_number, valid=frame.skeletons.valid
        )
        if layout is not self._segment_places_layout:  # a new message layout: its indices, once
            self._segment_places = bodies_pass.places(layout.segment_poses, layout.segment_valid, None)
            self._segment_places_layout = layout
        if self._segment_places.shape[0] != count:
            return None
        good = np.empty(count, dtype=bool)
        if not segments_pass(
            (positions, orientations, valid, errors), last.values, self._segment_places, layout.buf.u8, good
        ):
            return None  # a coordinate where numpy's summation order could matter
        if not last.all_seen:  # segments never tracked yet: the rows seen now are remembered
            last.hold(last.values, good)  # (the rows are held already: a copy onto themselves)
        return layout.buf.tobytes()

    def _encode_tf(
        self, frame: MocapFrame, good: Array, poses: Array, sec: int, nanosec: int
    ) -> bytes | None:
        """frame_id -> tf_prefix + name for every body tracked in this frame."""
        rows = np.flatnonzero(good)
        if rows.size == 0:
            return None
        names = frame.bodies.names
        rows_bytes = rows.tobytes()
        prefix = self.tf_prefix
        if (
            rows_bytes != self._child_rows
            or prefix != self._child_prefix
            or not _same_names(names, self._child_source)
        ):
            self._child_names = tuple(prefix + names[i] for i in rows.tolist())
            self._child_source, self._child_rows, self._child_prefix = names, rows_bytes, prefix
        return self._tf.encode(
            sec=sec,
            nanosec=nanosec,
            frame_id=self.frame_id,
            child_frame_ids=self._child_names,
            poses=poses[rows],
        )
