"""Velocity estimation accuracy: each method's RMS twist error against the true twist.

The simulated scene's trajectories are analytic, so the true pose is known at any time
and the true twist is its derivative (central difference of the noiseless pose with a
1 microsecond step: exact to well below the figures printed). Frames come from the
scene itself (``Scene.frame``): marker noise 0.2, 0.5 and 1 mm, 1 % of the frames dropped
(their numbers skipped), stamps with 0.5 ms of latency jitter. Each body's pose is fitted
to its noisy markers (least squares, as a mocap system does), fed through the same
BodyTracker the node uses, and compared with the truth at the frame's time.

Printed per (rate, noise, method): RMS error of the linear and angular velocity, the
ratio to finite_difference's, the delay of the linear velocity (the lag tau, in frames,
for which estimate(t) ~ truth(t - tau), fitted to first order on noiseless poses with the
same settings) and the CPU time per body per frame. The target is kalman
within 1/3 of finite_difference's RMS error with at most one frame of delay.
"""

from __future__ import annotations

import math
import time

import numpy as np

from mocap4r2_control.rotation import quat_relative, quat_rotate_inverse
from mocap4r2_drivers.simulated.scene import Scene
from mocap4r2_tools.motion.estimation import METHODS, BodyTracker, make_estimator

RATES = (120.0, 360.0)
NOISES = (0.0002, 0.0005, 0.001)
SECONDS = 4.0
WARMUP = 0.5
BODIES = [
    {
        "name": "drone",
        "id": 1,
        "markers": [[0.10, 0.0, 0.01], [-0.08, 0.07, 0.0], [-0.06, -0.09, 0.0], [0.0, 0.03, 0.06]],
        "trajectory": {
            "type": "circle",
            "center": [0.0, 0.0, 1.5],
            "radius": 1.2,
            "period": 8.0,
            "tilt": 0.05,
        },
    },
    {
        "name": "wand",
        "id": 3,
        "markers": [[0.0, 0.0, 0.0], [0.25, 0.0, 0.0], [0.5, 0.0, 0.0], [0.35, 0.08, 0.0]],
        "trajectory": {
            "type": "random_walk",
            "center": [-1.0, 1.0, 1.0],
            "extent": [0.6, 0.6, 0.3],
            "period": 6.0,
        },
    },
]


def scene(rate: float, noise: float) -> Scene:
    return Scene(
        {
            "seed": 7,
            "rate": rate,
            "noise": noise,
            "occlusion": 0.0,
            "dropped_frames": 0.01,
            "unlabeled_markers": 0,
            "latency": 0.004,
            "latency_jitter": 0.0005,
            "rigid_bodies": BODIES,
        }
    )


def true_twist(sc: Scene, t: float, row: int) -> tuple[np.ndarray, np.ndarray]:
    h = 1e-6
    p0, q0 = sc.poses(t - h)
    p1, q1 = sc.poses(t + h)
    _, q = sc.poses(t)
    v = (p1[row] - p0[row]) / (2 * h)
    return quat_rotate_inverse(q[row], v), quat_relative(q0[row], q1[row]) / (2 * h)


def fit_pose(layout: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares rigid fit (Kabsch) of the body's marker layout to measured points."""
    lc, pc = layout.mean(axis=0), points.mean(axis=0)
    h = (layout - lc).T @ (points - pc)
    u, _, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(vt.T @ u.T))
    rot = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    from scipy.spatial.transform import Rotation

    return pc - rot @ lc, Rotation.from_matrix(rot).as_quat()


def frames(sc: Scene, seed: int):
    """(frame number, stamp, [(position, quaternion) per body]) of every delivered frame."""
    rng = np.random.default_rng(seed)
    layouts = [b.marker_layout for b in sc.description.bodies]
    out = []
    for k in range(int(SECONDS * sc.rate)):
        if sc.is_dropped(k):
            continue
        f = sc.frame(k)
        offsets = f.bodies.marker_offsets
        poses = [
            fit_pose(layouts[i], f.bodies.markers.positions[offsets[i] : offsets[i + 1]])
            for i in range(len(layouts))
        ]
        out.append((k, sc.time_of(k) + rng.uniform(-0.0005, 0.0005), poses))
    return out


def pose_noise(sc: Scene, data) -> tuple[float, float]:
    """What a user calibrates once: the std dev of the fitted pose of a body (per axis)."""
    pos_err, rot_err = [], []
    for k, _, poses in data[:400]:
        p_true, q_true = sc.poses(sc.time_of(k))
        for i, (p, q) in enumerate(poses):
            pos_err.append(p - p_true[i])
            rot_err.append(quat_relative(q_true[i], q))
    return float(np.std(pos_err)), float(np.std(rot_err))


def delay_sums(times, est, truth_fn) -> tuple[float, float]:
    """Sums for the lag tau of est(t) ~ truth(t - tau), to first order in tau:
    est - truth(t) ~ -tau truth'(t), so tau = -sum(err . truth') / sum(truth' . truth')."""
    h = 1e-4
    num = den = 0.0
    for t, e in zip(times, est):
        d = (truth_fn(t + h) - truth_fn(t - h)) / (2 * h)
        num -= float(np.dot(e - truth_fn(t), d))
        den += float(np.dot(d, d))
    return num, den


def clean(sc: Scene, data):
    """The same frames with the true poses: the delay of a (linear) filter is a property
    of its gains, measured without noise hiding it."""
    out = []
    for k, stamp, _ in data:
        p, q = sc.poses(sc.time_of(k))
        out.append((k, stamp, [(p[i], q[i]) for i in range(len(BODIES))]))
    return out


def evaluate(sc: Scene, data, method: str, noise: tuple[float, float], noiseless=None):
    trackers = [
        BodyTracker(make_estimator(method, position_noise=noise[0], orientation_noise=noise[1]), timeout=0.5)
        for _ in BODIES
    ]
    results = [[] for _ in BODIES]
    cpu = time.process_time()
    for k, stamp, poses in data:
        for i, (p, q) in enumerate(poses):
            e = trackers[i].on_frame(k, stamp, True, p, q)
            if e is not None:
                results[i].append((k, e.linear, e.angular))
    cpu = (time.process_time() - cpu) / (len(data) * len(BODIES))
    if noiseless is not None:
        delay = evaluate(sc, noiseless, method, noise)[4]
    lin_sq, ang_sq, delays = [], [], []
    for i, rows in enumerate(results):
        rows = [r for r in rows if sc.time_of(r[0]) >= WARMUP]
        times = [sc.time_of(r[0]) for r in rows]
        truth = [true_twist(sc, t, i) for t in times]
        lin_sq += [np.sum((r[1] - tw[0]) ** 2) for r, tw in zip(rows, truth)]
        ang_sq += [np.sum((r[2] - tw[1]) ** 2) for r, tw in zip(rows, truth)]
        if noiseless is None:
            delays.append(delay_sums(times, [r[1] for r in rows], lambda t, i=i: true_twist(sc, t, i)[0]))
    if noiseless is None:
        delay = sum(d[0] for d in delays) / sum(d[1] for d in delays) * sc.rate
    return math.sqrt(np.mean(lin_sq)), math.sqrt(np.mean(ang_sq)), delay, cpu, delay


def run() -> None:
    print(
        f"{SECONDS:.0f} s per configuration, bodies: circle with tilt wobble, random walk; 1 % dropped frames"
    )
    print(
        f"{'rate':>5} {'noise':>6} {'method':<18} {'v rms m/s':>10} {'w rms rad/s':>12} {'v/fd':>6} "
        f"{'w/fd':>6} {'delay fr':>9} {'cpu us':>7} {'cpu/fd':>6}"
    )
    for rate in RATES:
        for noise in NOISES:
            sc = scene(rate, noise)
            data = frames(sc, seed=int(rate))
            calibrated = pose_noise(sc, data)
            noiseless = clean(sc, data)
            reference = None
            for method in METHODS:
                lin, ang, delay, cpu, _ = evaluate(sc, data, method, calibrated, noiseless)
                if reference is None:
                    reference = (lin, ang, cpu)
                print(
                    f"{rate:5.0f} {noise * 1000:4.1f}mm {method:<18} {lin:10.4f} {ang:12.4f} "
                    f"{lin / reference[0]:6.2f} {ang / reference[1]:6.2f} {delay:9.2f} {cpu * 1e6:7.0f} "
                    f"{cpu / reference[2]:6.2f}",
                    flush=True,
                )
            print(
                f"      (fitted pose noise: {calibrated[0] * 1000:.3f} mm, {calibrated[1] * 1000:.2f} mrad)"
            )


if __name__ == "__main__":
    run()
