"""mocap4r2_control.rotation: why it has single-sample forms, and what the layout buys.

* One sample, as the online paths see it (RunningRPE's step, an estimator's update):
  the ``*_one`` form on Python floats, the vectorised form on (4,) arrays, and scipy's
  Rotation, each doing the same work. Microseconds per call, median of batches.
* A million samples: the vectorised forms on (m, 4) rows and on (4, m) component rows
  (passed as transposed views, as trajectory.metrics does), and scipy on the same data.
Figures only: nothing is asserted about speed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
from scipy.spatial.transform import Rotation

from mocap4r2_control.rotation import (
    quat_angle,
    quat_angle_one,
    quat_conjugate,
    quat_conjugate_one,
    quat_multiply,
    quat_multiply_one,
    quat_relative,
    quat_relative_one,
    quat_rotate,
    quat_rotate_inverse,
    quat_rotate_inverse_one,
)

BATCHES = 7
SAMPLE_CALLS = 2000
LARGE = 1_000_000


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """Median over BATCHES of the CPU time per call, microseconds."""
    times = []
    for _ in range(BATCHES):
        start = time.process_time()
        for _ in range(calls):
            fn()
        times.append((time.process_time() - start) / calls * 1e6)
    return statistics.median(times)


def single_sample() -> None:
    rng = np.random.default_rng(1)
    q0_array, q1_array = Rotation.random(2, random_state=2).as_quat()
    v_array = rng.normal(size=3)
    q0, q1, v = q0_array.tolist(), q1_array.tolist(), v_array.tolist()
    r0, r1 = Rotation.from_quat(q0_array), Rotation.from_quat(q1_array)

    def rpe_step_one() -> object:  # what RunningRPE.add does per step
        a = quat_rotate_inverse_one(q0, v)
        rel = quat_multiply_one(quat_conjugate_one(q0), q1)
        return a, quat_angle_one(quat_multiply_one(quat_conjugate_one(rel), q1))

    def rpe_step_vectorised() -> object:
        a = quat_rotate_inverse(q0_array, v_array)
        rel = quat_multiply(quat_conjugate(q0_array), q1_array)
        return a, quat_angle(quat_multiply(quat_conjugate(rel), q1_array))

    def rpe_step_scipy() -> object:
        a = r0.inv().apply(v_array)
        rel = r0.inv() * r1
        return a, (rel.inv() * r1).magnitude()

    print(f"one sample ({SAMPLE_CALLS} calls x {BATCHES} batches, median), CPU us per call:")
    rows = [
        (
            "RPE step (rotate back, 3 products, angle)",
            rpe_step_one,
            rpe_step_vectorised,
            rpe_step_scipy,
        ),
        (
            "relative rotation vector (log of q0^-1 q1)",
            lambda: quat_relative_one(q0, q1),
            lambda: quat_relative(q0_array, q1_array),
            lambda: (r0.inv() * r1).as_rotvec(),
        ),
    ]
    print(f"  {'':45s} {'*_one':>8} {'vectorised':>11} {'scipy':>8}   vectorised/one  scipy/one")
    for name, one, vectorised, scipy_fn in rows:
        t_one = per_call_us(one, SAMPLE_CALLS)
        t_vec = per_call_us(vectorised, SAMPLE_CALLS)
        t_sci = per_call_us(scipy_fn, SAMPLE_CALLS)
        print(
            f"  {name:45s} {t_one:8.2f} {t_vec:11.2f} {t_sci:8.2f}   "
            f"{t_vec / t_one:13.1f}x {t_sci / t_one:9.1f}x"
        )


def large() -> None:
    rotations = Rotation.random(LARGE, random_state=3)
    rows = rotations.as_quat()
    other = Rotation.random(LARGE, random_state=4)
    other_rows = other.as_quat()
    vectors = np.random.default_rng(5).normal(size=(LARGE, 3))
    components = np.ascontiguousarray(rows.T)
    other_components = np.ascontiguousarray(other_rows.T)
    vector_components = np.ascontiguousarray(vectors.T)
    print(f"{LARGE:,} samples, CPU ms (median of 3):")
    cases = [
        (
            "product",
            lambda: quat_multiply(rows, other_rows),
            lambda: quat_multiply(components.T, other_components.T),
            lambda: rotations * other,
        ),
        (
            "rotate",
            lambda: quat_rotate(rows, vectors),
            lambda: quat_rotate(components.T, vector_components.T),
            lambda: rotations.apply(vectors),
        ),
        (
            "angle",
            lambda: quat_angle(rows),
            lambda: quat_angle(components.T),
            lambda: rotations.magnitude(),
        ),
    ]
    print(f"  {'':10s} {'(m, 4)':>8} {'(4, m)':>8} {'scipy':>8}   (m, 4)/(4, m)  scipy/(4, m)")
    for name, by_rows, by_components, scipy_fn in cases:
        t_rows = _median_ms(by_rows)
        t_components = _median_ms(by_components)
        t_scipy = _median_ms(scipy_fn)
        print(
            f"  {name:10s} {t_rows:8.1f} {t_components:8.1f} {t_scipy:8.1f}   "
            f"{t_rows / t_components:12.2f}x {t_scipy / t_components:12.2f}x"
        )


def _median_ms(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        start = time.process_time()
        fn()
        times.append((time.process_time() - start) * 1e3)
    return statistics.median(times)


def run() -> None:
    single_sample()
    large()


if __name__ == "__main__":
    run()
