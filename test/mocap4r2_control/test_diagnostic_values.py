"""A system's /diagnostics values read back as numbers (diagnostic_values.py), from a
report FrameStatistics really wrote: the rule the web panel and the Foxglove stats share."""

from __future__ import annotations

import numpy as np
from diagnostic_reports import published  # test/fixtures

from mocap4r2_control.diagnostic_values import reported_number
from mocap4r2_control.diagnostics import FrameStatistics


def _values(stats: FrameStatistics) -> dict[str, str]:
    status = published(
        stats, "sys", hardware_id="/sys", active=True, state_label="active", nominal_rate=100.0
    )
    return {kv.key: kv.value for kv in status.values}


def test_a_window_without_frames_reads_as_no_number_not_nan():
    stats = FrameStatistics()
    stats.activated()
    values = _values(stats)
    assert values["latency_mean_ms"] == "nan"  # what the report writes: the case this rule is for
    assert reported_number(values["latency_mean_ms"]) is None


def test_a_window_with_frames_reads_back_its_figures():
    stats = FrameStatistics()
    stats.activated()
    ids, valid = np.array([3, 4]), np.array([True, False])
    for number in range(1, 11):
        stats.record(number, 0.002, ids, ("a", "b"), valid)
    values = _values(stats)
    latency = reported_number(values["latency_mean_ms"])
    assert latency is not None and abs(latency - 2.0) < 1e-6
    assert reported_number(values["tracking_ratio/a"]) == 1.0
    assert reported_number(values["tracking_ratio/b"]) == 0.0


def test_what_a_peer_may_send_is_no_number():
    for text in ("inf", "-inf", "nan", "", "  ", "1,5", "0x10", None, b"\xff", object(), "1e999"):
        assert reported_number(text) is None, text
    assert reported_number(" 12.5 ") == 12.5 and reported_number(7) == 7.0
