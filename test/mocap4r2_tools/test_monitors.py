"""The trajectory monitor core: RATIO, TIME and JOINT_STATE triggers, latching, refusals,
and the pose history used for mocap snapshots."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mocap4r2_control.rotation import quat_exp, quat_log
from mocap4r2_tools.motion.monitors import (
    JOINT_STATE,
    RATIO,
    TIME,
    Feedback,
    Monitor,
    MonitorError,
    MonitorSet,
    PoseHistory,
    monitors_from_config,
)


def feedback(i: int, n: int = 10, trajectory="t1", positions=None, stamp=None) -> Feedback:
    # point i of n executed, 0.5 s per point; joints move 0.1 rad per point
    return Feedback(
        trajectory_id=trajectory,
        stamp=100.0 + 0.5 * i if stamp is None else stamp,
        ratio_of_trajectory=(i + 1) / n,
        time_from_start=0.5 * i,
        joint_names=["j1", "j2"],
        positions=positions if positions is not None else [0.1 * i, -0.1 * i],
    )


def run(monitors, n=10):
    mset = MonitorSet("t1", monitors)
    fired_at = {}
    for i in range(n):
        for mid in mset.evaluate(feedback(i, n)):
            fired_at[mid] = i
    return mset, fired_at


def test_each_trigger_fires_at_its_point_and_stays_triggered():
    monitors = [
        Monitor("half", RATIO, ratio_of_trajectory=0.5),
        Monitor("t2", TIME, time_from_start=2.0),
        Monitor(
            "pose",
            JOINT_STATE,
            joint_names=("j1", "j2"),
            joint_positions=(0.7, -0.7),
            joint_state_tolerances=(0.01, 0.01),
        ),
        Monitor("late", TIME, time_from_start=60.0),
    ]
    mset = MonitorSet("t1", monitors)
    history = []
    for i in range(10):
        mset.evaluate(feedback(i))
        history.append(dict(mset.results()))
    # ratio (i+1)/10 >= 0.5 at i = 4; time 0.5 i >= 2 at i = 4; joints at 0.7 at i = 7
    assert [h["half"] for h in history] == [False] * 4 + [True] * 6
    assert [h["t2"] for h in history] == [False] * 4 + [True] * 6
    assert [h["pose"] for h in history] == [False] * 7 + [True] * 3
    assert not any(h["late"] for h in history)  # beyond the trajectory's duration: never


def test_joint_state_by_index_when_unnamed_and_tolerance_is_inclusive():
    # 0.1 * 5 is exactly 0.5: a zero tolerance still triggers on equality
    m = Monitor("p", JOINT_STATE, joint_positions=(0.5, -0.5), joint_state_tolerances=(0.0, 0.0))
    _, fired = run([m])
    assert fired == {"p": 5}


def test_tolerance_length_mismatch_and_unknown_type_are_refused_with_the_reason():
    with pytest.raises(MonitorError, match="1 joint_state_tolerances for 2 joint_state positions"):
        Monitor("p", JOINT_STATE, joint_positions=(0.1, 0.2), joint_state_tolerances=(0.1,)).check()
    with pytest.raises(MonitorError, match="unknown trigger type 9"):
        Monitor("x", 9).check()
    with pytest.raises(MonitorError, match=r"ratio_of_trajectory must be in \[0.0, 1.0\]"):
        Monitor("r", RATIO, ratio_of_trajectory=float("nan")).check()
    good, refused = monitors_from_config(
        {
            "monitors": [
                {"monitor_id": "a", "type": "RATIO", "ratio_of_trajectory": 0.25},
                {"monitor_id": "b", "type": "SPEED"},
                {
                    "monitor_id": "c",
                    "type": "JOINT_STATE",
                    "joint_state": {"position": [1.0, 2.0]},
                    "joint_state_tolerances": [0.1],
                },
                {"monitor_id": "d", "type": 2, "time_from_start": 1.5, "trajectory_id": "t9"},
            ]
        }
    )
    assert [(tid, m.monitor_id) for tid, m in good] == [("", "a"), ("t9", "d")]
    assert any("unknown trigger type 'SPEED'" in r for r in refused)
    assert any("lengths must match" in r for r in refused)
    assert monitors_from_config([1, 2]) == ([], ["the file needs a list under 'monitors'"])


def test_backwards_stamp_and_nan_joint_state_change_nothing():
    mset = MonitorSet(
        "t1", [Monitor("p", JOINT_STATE, joint_positions=(0.2, -0.2), joint_state_tolerances=(0.05, 0.05))]
    )
    mset.evaluate(feedback(0))
    with pytest.raises(MonitorError, match="before the previous one"):
        mset.evaluate(feedback(1, stamp=99.0))
    assert mset.evaluate(feedback(2, positions=[float("nan"), -0.2])) == []
    assert mset.results() == [("p", False)]
    assert mset.evaluate(feedback(2, stamp=102.0)) == ["p"]
    with pytest.raises(MonitorError, match="given to the monitors of 't1'"):
        mset.evaluate(feedback(3, trajectory="other"))


def test_pose_history_interpolates_between_frames():
    history = PoseHistory(seconds=1.0)
    for k in range(11):
        t = 10.0 + 0.1 * k
        history.add(t, (k * 0.1, 0.0, 1.0), quat_exp(np.array([0.0, 0.0, 0.2 * k])))
    p, q = history.at(10.25)
    assert p == pytest.approx((0.25, 0.0, 1.0))
    assert quat_log(np.asarray(q)) == pytest.approx([0.0, 0.0, 0.5])
    assert history.at(9.0) is None and history.at(11.5) is None
    history.add(12.5, (0, 0, 0), (0, 0, 0, 1))  # older frames than 1 s are dropped
    assert history.at(11.0) is None
    assert math.isclose(history.newest, 12.5)
