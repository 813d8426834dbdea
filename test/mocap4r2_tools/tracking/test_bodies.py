"""Body definitions for the tracker: what is accepted, and every refusal with its reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mocap4r2_tools.tracking.bodies import ConfigError, load_config, parse_config

CF = [[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]]


def config(layout=None, bodies=None, **extra):
    data = {
        "layouts": {"cf": CF if layout is None else layout},
        "bodies": bodies or [{"name": "a", "layout": "cf"}],
    }
    data.update(extra)
    return data


def test_a_full_file_is_read_with_its_dynamics_and_limits(tmp_path):
    path = tmp_path / "bodies.yaml"
    path.write_text(
        "layouts: {cf: " + str(CF) + ", dot: [[0, 0, 0]]}\n"
        "bodies: [{name: cf1, id: 7, layout: cf, initial_position: [1, 2, 3]}, {name: d, layout: dot}]\n"
        "dynamics: {max_velocity: 2.0}\nlimits: {max_residual: 0.002}\n"
    )
    cfg = load_config(path)
    assert [b.name for b in cfg.bodies] == ["cf1", "d"]
    assert cfg.bodies[0].body_id == 7 and cfg.bodies[1].body_id == 2
    assert cfg.bodies[0].initial_position.tolist() == [1.0, 2.0, 3.0]
    assert cfg.bodies[1].points.shape == (1, 3)
    assert cfg.dynamics.max_velocity == 2.0 and cfg.dynamics.max_acceleration == 30.0
    assert cfg.limits.max_residual == 0.002


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (config(layout=[]), "at least 1 marker"),
        (config(layout=[[0, 0, 0], [0, 0, 0.0005], [0.02, 0, 0]]), "duplicated"),
        (config(layout=[[0, 0, 0], [0.02, 0, 0]]), "2 markers"),
        (config(layout=[[0, 0, 0], [0.02, 0, 0], [0.04, 0, 0]]), "collinear"),
        (config(layout=[[0, 0, math.nan], [0.02, 0, 0], [0, 0.03, 0]]), "finite"),
        (config(layout=[[0, 0], [0.02, 0, 0], [0, 0.03, 0]]), "3 finite numbers"),
        (config(bodies=[{"name": "a", "layout": "nope"}]), "unknown layout"),
        (config(bodies=[{"name": "a", "layout": "cf"}, {"name": "a", "layout": "cf"}]), "share the name"),
        (config(bodies=[{"name": "a:1", "layout": "cf"}]), "without ':'"),
        (config(bodies=[{"name": "a", "id": -1, "layout": "cf"}]), "integer >= 0"),
        (
            config(
                bodies=[
                    {"name": "a", "layout": "cf", "initial_position": [1, 1, 0]},
                    {"name": "b", "layout": "cf", "initial_position": [1, 1, 0]},
                ]
            ),
            "identical and share initial_position",
        ),
        (config(dynamics={"max_velocity": math.nan}), "finite number > 0"),
        (config(limits={"max_residual": -1}), "finite number > 0"),
        ([1, 2], "expected a mapping"),
        ({"layouts": {"cf": CF}}, "'bodies' must be a non-empty list"),
    ],
)
def test_malformed_definitions_are_refused_with_the_reason(data, reason):
    with pytest.raises(ConfigError, match=reason):
        parse_config(data)


def test_identical_bodies_at_different_starts_are_accepted():
    cfg = parse_config(
        config(
            bodies=[
                {"name": "a", "layout": "cf", "initial_position": [0, 0, 0]},
                {"name": "b", "layout": "cf", "initial_position": [0.5, 0, 0]},
            ]
        )
    )
    assert np.array_equal(cfg.bodies[0].points, cfg.bodies[1].points)


def test_unreadable_and_non_yaml_files_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="bodies file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("layouts: {cf: [[0, 0, 0]\n")
    with pytest.raises(ConfigError, match="not YAML"):
        load_config(bad)
