"""The compiled kernels of the tracker's per-frame path against what they replace: the
Newton fit against the eigen fit on random poses, the gated neighbour search against a k-d
tree's bounded query, the direct pairing against its definition; and the warm-up compiles
every kernel the tracking calls (a kernel compiled in the middle of tracking stalls the
marker_tracker node for seconds)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

from mocap4r2_control.rotation import quat_from_matrix
from mocap4r2_tools.tracking import kernels
from mocap4r2_tools.tracking.bodies import parse_config
from mocap4r2_tools.tracking.kabsch import fit_batch, fit_near
from mocap4r2_tools.tracking.kernels import MarkerIndex, pair_alone
from mocap4r2_tools.tracking.tracker import Tracker

LAYOUT = np.array([[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]])


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 20),
    st.floats(0.0, 0.3),
    st.floats(0.0, 1e-3),
    st.floats(0.0, 0.6),
)
def test_the_compiled_newton_fit_gives_the_eigen_fit_on_random_poses(seed, n, spread, noise, hidden):
    """Any orientation, a prior up to ~0.3 rad (x sqrt 3) off, marker noise up to 1 mm and
    markers weighted out at random (0-4 seen): fit_near, through the kernel and the
    fallback for what does not settle, agrees with fit_batch."""
    rng = np.random.default_rng(seed)
    truth = Rotation.random(n, random_state=seed % 2**32)
    prior = (Rotation.from_rotvec(rng.normal(0.0, spread, (n, 3))) * truth).as_matrix()
    local = np.broadcast_to(LAYOUT, (n, 4, 3)).copy()
    observed = np.einsum("bij,blj->bli", truth.as_matrix(), local) + rng.uniform(-2, 2, (n, 1, 3))
    observed += rng.normal(0.0, noise, observed.shape)
    weights = (rng.random((n, 4)) >= hidden).astype(np.float64)
    exact = fit_batch(weights, local, observed, prior)
    newton = fit_near(weights, local, observed, prior, quat_from_matrix(prior))
    assert np.allclose(newton.rot, exact.rot, atol=1e-8)
    assert np.allclose(newton.trans, exact.trans, atol=1e-9)
    assert np.allclose(newton.rms, exact.rms, atol=1e-10)
    assert np.allclose(newton.fitted, exact.fitted, atol=1e-9)
    assert np.allclose(newton.sq, exact.sq, atol=1e-12)
    assert np.array_equal(newton.markers, exact.markers)
    full = exact.full
    assert np.allclose(newton.quat[full], exact.quat[full], atol=1e-8)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(0, 300),
    st.integers(1, 60),
    st.integers(1, 4),
    st.floats(1e-3, 0.5),
)
def test_the_gated_neighbours_are_the_k_d_tree_s(seed, n_points, n_queries, k, bound):
    """Per query its own bound (a tree query with that bound, one query at a time); points
    on a coarse grid, so that many share an x (the sorted scan's slab) and distances tie."""
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 6, (n_points, 3)) * 0.05 + rng.normal(0.0, 1e-3, (n_points, 3)) * (seed % 2)
    queries = rng.uniform(-0.1, 0.35, (n_queries, 3))
    bounds = rng.uniform(0.0, bound, n_queries)
    dist, near = MarkerIndex(points).query(queries, bounds, k)
    assert dist.shape == near.shape == (n_queries, k)
    for r in range(n_queries):
        if n_points:
            tree = cKDTree(points)
            want_d, want_i = tree.query(queries[r], k=k, distance_upper_bound=np.nextafter(bounds[r], np.inf))
            want_d, want_i = np.atleast_1d(want_d), np.atleast_1d(want_i)
        else:
            want_d, want_i = np.full(k, np.inf), np.zeros(k, dtype=np.intp)
        assert np.allclose(dist[r], want_d, rtol=0, atol=1e-12)
        # the points named are distinct and at the distances given (the tree's, up to ties)
        found = np.isfinite(dist[r])
        assert np.all(near[r][~found] == n_points)
        picked = near[r][found]
        assert len(set(picked.tolist())) == len(picked)
        assert np.allclose(np.linalg.norm(points[picked] - queries[r], axis=1), dist[r][found], atol=1e-12)


def test_no_neighbours_asked_for_finds_and_pairs_nothing():
    points = np.array([[0.0, 0.0, 0.0], [0.001, 0.0, 0.0]])
    dist, near = MarkerIndex(points).query(points, np.full(2, 0.01), 0)
    assert dist.shape == near.shape == (2, 0)
    assigned = np.full(2, -1, dtype=np.intp)
    assert len(pair_alone(near, 2, np.arange(2), assigned)) == 0 and np.all(assigned == -1)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 8), st.integers(1, 30), st.integers(1, 4))
def test_pairing_alone_is_one_marker_in_one_gate_the_rest_shared(seed, n_points, n_rows, k):
    rng = np.random.default_rng(seed)
    near = np.sort(rng.integers(0, n_points + 1, (n_rows, k)), axis=1)  # n_points (none) last
    rows = rng.permutation(3 * n_rows)[:n_rows]
    assigned = np.full(3 * n_rows, -1, dtype=np.intp)
    shared = pair_alone(near, n_points, rows, assigned)
    inside = near < n_points
    uses = np.bincount(near[inside], minlength=n_points)
    for r in range(n_rows):
        first = near[r, 0]
        alone = inside[r, 0] and (k == 1 or not inside[r, 1]) and uses[first] == 1
        assert assigned[rows[r]] == (first if alone else -1)
        assert (r in shared) == (inside[r, 0] and not alone)
    assert np.all(np.diff(shared) > 0)


def test_the_warm_up_compiles_every_kernel_the_tracking_calls():
    """After kernels.warm_up(), tracking frames (bodies acquired, tracked, occluded down to
    2 and 1 markers, a ghost) compiles nothing more: every kernel already has the argument
    types the tracker passes."""
    kernels.warm_up()
    dispatchers = [
        kernels.newton_fits,
        kernels.gated_neighbours,
        kernels.pair_alone,
        kernels.motion,
        kernels.judge,
        kernels.commit,
    ]
    before = [set(d.signatures) for d in dispatchers]
    assert all(before)
    rng = np.random.default_rng(3)
    starts = np.array([[0.0, 0.0, 1.0], [0.5, 0.0, 1.0], [0.0, 0.5, 1.0]])
    config = parse_config(
        {
            "layouts": {"cf": LAYOUT.tolist()},
            "bodies": [
                {"name": f"b{i}", "layout": "cf", "initial_position": p.tolist()}
                for i, p in enumerate(starts)
            ],
        }
    )
    tracker = Tracker(config)
    hide = [[], [], [0], [0, 1], [0, 1, 2], [], []]
    for frame, hidden in enumerate(hide):
        position = starts + [0.001 * frame, 0.0, 0.0]
        world = (LAYOUT[None] + position[:, None]).reshape(-1, 3)
        world = np.delete(world, hidden, axis=0)
        cloud = np.vstack([world, [[0.0, 0.0, 1.005]]]) + rng.normal(0.0, 1e-4, (len(world) + 1, 3))
        result = tracker.update(cloud[rng.permutation(len(cloud))], 0.01 * frame)
    assert result.valid.all()
    assert [set(d.signatures) for d in dispatchers] == before
