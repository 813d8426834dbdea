"""mocap4r2_control.parameters: what a ParameterSpec accepts and refuses (types, choices,
ranges, NaN, custom checks). Declaration on a live node is covered by the systems' and
tools' process tests (test_system_lifecycle.py, test_tool_nodes.py)."""

from __future__ import annotations

import math

import pytest

from mocap4r2_control.parameters import ParameterSpec, plain_value

RATE = ParameterSpec("rate", 100.0, "Hz", min_value=1.0, max_value=2000.0)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused_where_a_range_applies(value):
    assert "finite" in RATE.validate(value)


def test_types_ranges_and_choices():
    assert RATE.validate(100) is None  # an int where a float is expected
    assert "must be float" in RATE.validate("fast")
    assert ">= 1.0" in RATE.validate(0.5) and "<= 2000.0" in RATE.validate(5000.0)
    mode = ParameterSpec("mode", "a", "", choices=("a", "b"))
    assert mode.validate("b") is None and "one of ['a', 'b']" in mode.validate("c")
    count = ParameterSpec("count", 3, "")
    assert "must be int" in count.validate(True)  # a bool is not an int here
    names = ParameterSpec("names", [], "")
    assert names.validate(["x"]) is None and "must be a list" in names.validate("x")


def test_a_custom_check_runs_last():
    spec = ParameterSpec("frame", "world", "", check=lambda v: None if "/" not in v else "no slashes")
    assert spec.validate("map") is None and spec.validate("a/b") == "no slashes"


def test_plain_value_turns_rclpy_arrays_into_lists():
    import array

    assert plain_value(array.array("d", [1.0, 2.0])) == [1.0, 2.0]
    assert plain_value("x") == "x"
