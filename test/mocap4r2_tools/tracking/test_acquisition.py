"""Finding untracked bodies in free markers, alone: a distinct layout anywhere in any
orientation by its triangle distances, identical and single-marker bodies only near their
anchors, candidates best first."""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

from mocap4r2_tools.tracking.acquisition import layout_triangles
from mocap4r2_tools.tracking.bodies import parse_config

CF = [[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]]
WAND = [[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.25, 0.0, 0.0], [0.05, 0.07, 0.0]]


def _search(config):
    from mocap4r2_tools.tracking.tracker import Tracker

    tracker = Tracker(config)  # the same identical/single/groups the tracker builds
    return tracker.search, tracker


def test_triangles_are_the_widest_non_degenerate_ones():
    triangles = layout_triangles(np.array(WAND))
    assert len(triangles) == 3 and (0, 1, 2) not in triangles  # three markers on a line
    assert layout_triangles(np.array([[0.0, 0.0, 0.0]])) == []


def test_a_distinct_layout_is_found_anywhere_identical_ones_only_near_their_anchor():
    config = parse_config(
        {
            "layouts": {"cf": CF, "wand": WAND, "dot": [[0, 0, 0]]},
            "bodies": [
                {"name": "wand", "layout": "wand"},
                {"name": "cf1", "layout": "cf", "initial_position": [0.0, 0.0, 1.0]},
                {"name": "cf2", "layout": "cf", "initial_position": [1.0, 0.0, 1.0]},
                {"name": "ball", "layout": "dot", "initial_position": [-1.0, -1.0, 0.5]},
            ],
        }
    )
    search, tracker = _search(config)
    rot = Rotation.from_euler("xyz", [170, -40, 75], degrees=True).as_matrix()
    wand_at = np.array([2.0, -1.5, 0.3])
    points = np.vstack(
        [
            np.array(WAND) @ rot.T + wand_at,  # far from anything, upside down
            np.array(CF) + [0.05, 0.0, 1.0],  # 5 cm from cf1's initial position
            np.array(CF) + [-1.0, 1.0, 1.0],  # an identical layout 1.4 m from both anchors
            [[-1.02, -1.0, 0.5]],  # 2 cm from the ball's
        ]
    )
    n = len(config.bodies)
    found = search.candidates(
        np.arange(n),
        points,
        acquired=np.zeros(n, bool),
        position=np.zeros((n, 3)),
        velocity=np.zeros((n, 3)),
        last_good=np.full(n, -np.inf),
        stamp=0.0,
    )
    costs = [c[0] for c in found]
    assert costs == sorted(costs)
    best = {}
    for _cost, body, slots, r, p, _rms in found:
        best.setdefault(body, (slots, r, p))
    assert set(best) == {0, 1, 3}  # cf2: no placement within init_radius of its anchor
    slots, r, p = best[0]
    assert slots.tolist() == [0, 1, 2, 3] and np.allclose(r, rot, atol=1e-6) and np.allclose(p, wand_at)
    assert best[1][0].tolist() == [4, 5, 6, 7] and np.allclose(best[1][2], [0.05, 0.0, 1.0])
    assert best[3][0].tolist() == [12]
    # the placement 1.4 m away is a candidate for no identical body
    assert all(not set(c[2].tolist()) & {8, 9, 10, 11} for c in found if c[1] in (1, 2))
    assert len(search.search_layout(1, points, cKDTree(points))) >= 2 and tracker.identical[1]
