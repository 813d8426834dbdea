"""The compiled markers pass (markers_pass.py) gives the numpy path's bytes, and the
control package still encodes where numba cannot cache.

Byte for byte against the same FrameEncoder with ``compiled=False`` (the numpy path,
reapply + repeat) and with ``repeat_unchanged=False`` (the whole rule and encode every
frame), on random streams: NaN and inf coordinates, occluded markers, markers never seen,
unlabeled markers, residuals of other types, empty frames, non-ASCII names, 0 to 1000
markers, structure changes between runs of unchanged frames. The read-only install runs
for real in a private mount namespace (read_only_mounts.py), as the tracker's tests do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from marker_streams import NAMES, Counted, random_markers
from read_only_mounts import NO_HOME, ROOT, read_only, why_not_here

from mocap4r2_control import markers_pass
from mocap4r2_control.frame import UNKNOWN_ID, MarkerArrays, MocapFrame
from mocap4r2_control.frame_encoder import FrameEncoder


def _structure(rng: np.random.Generator):
    count = int(rng.choice([0, 1, 2, 7, 100, 500, 1000]))
    ids = rng.permutation(5000)[:count].astype(np.int32)
    if rng.random() < 0.2 and count:  # some unlabeled markers (published as measured)
        ids[rng.random(count) < 0.3] = UNKNOWN_ID
    names = tuple(str(rng.choice(NAMES)) + str(i % 3) for i in range(count))
    return ids, names


def _frames(seed: int):
    rng = np.random.default_rng(seed)
    number = 0
    for _ in range(6):  # runs of frames with one structure each
        ids, names = _structure(rng)
        for k in range(int(rng.integers(1, 25))):
            number += 1
            yield MocapFrame(frame_number=number, markers=random_markers(rng, ids, names, k))


@pytest.fixture(scope="module")
def compiled():
    found = markers_pass.load()
    assert found is not None, "numba is a dependency: the pass must compile in the test environment"
    return found


@pytest.mark.parametrize("seed", range(12))
def test_the_compiled_pass_gives_the_numpy_paths_bytes_on_random_streams(compiled, seed):
    fast = FrameEncoder("wörld", skeletons=False, rigid_bodies=False)
    assert fast.compiled and fast._pass is not None
    counted = fast._pass.compiled = Counted(compiled)
    numpy_path = FrameEncoder("wörld", skeletons=False, rigid_bodies=False, compiled=False)
    whole = FrameEncoder("wörld", skeletons=False, rigid_bodies=False, repeat_unchanged=False)
    assert not numpy_path.compiled and not whole.compiled
    frames = 0
    for frame in _frames(seed):
        sec, nanosec = 1_700_000_000 + frame.frame_number, frame.frame_number * 1000
        expected = numpy_path.encode(frame, sec, nanosec).markers
        assert fast.encode(frame, sec, nanosec).markers == expected, frame.frame_number
        assert whole.encode(frame, sec, nanosec).markers == expected, frame.frame_number
        frames += 1
    assert counted.calls > frames // 4, (counted.calls, frames)


def test_held_positions_and_flags_as_the_numpy_path_over_a_long_occlusion(compiled):
    """One marker occluded for a while, another with NaN, one all the time measured:
    the held positions, flags and residuals of each frame, and the rule's memory."""
    ids, names = np.array([3, 1, 2], dtype=np.int32), ("a", "é", "")
    fast, reference = FrameEncoder("w"), FrameEncoder("w", compiled=False)
    rng = np.random.default_rng(7)
    for number in range(1, 60):
        positions = rng.normal(size=(3, 3))
        occluded = np.array([10 < number < 40, False, False])
        if 20 < number < 30:
            positions[1, 2] = np.nan
        frame = MocapFrame(
            frame_number=number,
            markers=MarkerArrays(ids, names, positions, occluded, np.full(3, 0.25, np.float32)),
        )
        assert fast.encode(frame, 5, number).markers == reference.encode(frame, 5, number).markers
        assert np.array_equal(fast._frame_markers.last.values, reference._frame_markers.last.values)


def test_a_frame_of_other_shape_than_the_message_falls_back(compiled):
    """positions shaped (n, 3) with occlusion flags of another length: the numpy path's
    ValueError (numpy's broadcast error), not a write past the message."""
    ids, names = np.array([1, 2], dtype=np.int32), ("a", "b")
    good = MarkerArrays(ids, names, np.zeros((2, 3)), np.zeros(2, bool), np.zeros(2, np.float32))
    encoder = FrameEncoder("w")
    encoder.encode(MocapFrame(frame_number=1, markers=good), 0, 0)
    bad = MarkerArrays(ids, names, np.zeros((2, 3)), np.zeros(3, bool), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="broadcast"):
        encoder.encode(MocapFrame(frame_number=2, markers=bad), 0, 0)


PROBE = """
import json, logging, sys
import numpy as np
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from mocap4r2_control import markers_pass
from mocap4r2_control.frame import MarkerArrays, MocapFrame
from mocap4r2_control.frame_encoder import FrameEncoder
ids, names = np.arange(50, dtype=np.int32), tuple(f"m{i}" for i in range(50))
fast, reference = FrameEncoder("w"), FrameEncoder("w", compiled=False)
FrameEncoder("w")  # a second configure says nothing more
same = True
for number in range(20):
    positions = np.random.default_rng(number).normal(size=(50, 3))
    positions[number] = np.nan
    frame = MocapFrame(frame_number=number, markers=MarkerArrays.build(ids, positions, names))
    same = same and fast.encode(frame, 1, number).markers == reference.encode(frame, 1, number).markers
found = markers_pass.load()
stats = found.stats if found is not None else None
print(json.dumps({"compiled": fast.compiled, "same": same,
                  "hits": sum(stats.cache_hits.values()) if stats else 0,
                  "misses": sum(stats.cache_misses.values()) if stats else 0}))
"""


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(extra)
    return env


def _probe(command: list[str], env: dict[str, str]) -> tuple[dict[str, object], str]:
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_on_a_read_only_install_the_numpy_path_encodes_and_says_so_once():
    """The package, its __pycache__ and numba's per-user cache read-only or missing:
    numba refuses ``cache=True``; the encoder keeps numpy (same bytes), one warning."""
    reason = why_not_here()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI must run the read-only install tests)")
        pytest.skip(reason)
    result, said = _probe(read_only([sys.executable, "-c", PROBE], [str(ROOT)]), _environment(HOME=NO_HOME))
    assert result == {"compiled": False, "same": True, "hits": 0, "misses": 0}, said[-3000:]
    assert said.count("markers are encoded with numpy") == 1, said[-3000:]
    assert "no writable cache" in said and "Traceback" not in said, said[-3000:]


def test_the_pass_is_compiled_once_then_loaded_from_numbas_cache(tmp_path):
    """An empty cache (the first start after an install) compiles and keeps the pass;
    the next process loads it: no start compiles it again."""
    env = _environment(NUMBA_CACHE_DIR=str(tmp_path))
    first, said = _probe([sys.executable, "-c", PROBE], env)
    assert first == {"compiled": True, "same": True, "hits": 0, "misses": 1}, said[-3000:]
    assert said.count("compiled markers pass ready") == 1, said[-3000:]
    assert list(tmp_path.rglob("*.nbi")), "nothing kept in the cache"
    second, _ = _probe([sys.executable, "-c", PROBE], env)
    assert second == {"compiled": True, "same": True, "hits": 1, "misses": 0}


@pytest.mark.parametrize("count", [3, 498])
def test_coordinates_whose_sum_overflows_are_not_finite_in_both_paths(compiled, count):
    """The numpy path's finiteness is that of the row sum (``positions @ (1, 1, 1)``):
    finite coordinates whose sum overflows count as not measured; the pass sums in the
    same order, so the same rows are held."""
    rows = np.array([[1e308, 1e308, -1e308], [1e308, -1e308, 1e308], [-1e308, 1e308, 1e308]])
    ids = np.arange(count, dtype=np.int32)
    names = tuple(f"m{i}" for i in range(count))
    fast, reference = FrameEncoder("w"), FrameEncoder("w", compiled=False)
    for number in range(3):
        positions = np.ones((count, 3)) if number == 0 else np.tile(rows, (count // 3, 1))
        frame = MocapFrame(frame_number=number, markers=MarkerArrays.build(ids, positions, names))
        with np.errstate(over="ignore"):
            expected = reference.encode(frame, 1, number).markers
        assert fast.encode(frame, 1, number).markers == expected
    assert np.array_equal(fast._frame_markers.last.values, reference._frame_markers.last.values)
    assert (fast._frame_markers.last.values[::3] == 1.0).all()  # the overflowing rows held
