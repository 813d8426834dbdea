"""Motive's own recording joins a capture session: with record_on_start, a control-plane
START names Motive's take after the session (SetRecordTakeName) and starts recording;
STOP stops it; Motive's refusal fails the ack with Motive's words. Checked against
natnet_simulator, which answers these NatNet commands as Motive does (0 when done)."""

from __future__ import annotations

import itertools

import pytest
from optitrack_stand_in import StandIn, start_driver  # test/fixtures

_sessions = itertools.count()
SCENE = {
    "seed": 4,
    "rate": 100.0,
    "rigid_bodies": [{"name": "drone1", "id": 1, "trajectory": {"type": "static"}}],
}


@pytest.fixture
def control():
    from mocap4r2_control.control_plane import ControlSession

    session = ControlSession(args=["optitrack-recording-test"])
    yield session.client
    session.close()


def _system(ns: str) -> str:
    return f"{ns}/optitrack"


def test_a_session_records_a_take_named_after_it(procs, tmp_path, control):
    stand_in = StandIn(procs, tmp_path, "--unicast", scene=SCENE)
    _, ns = start_driver(procs, stand_in, "unicast", autostart=False, record_on_start=True)
    system = _system(ns)
    control.wait_for_systems(names=[system], timeout=30)
    session = f"trial-{next(_sessions):02d}"

    started = control.start(systems=[system], session_id=session, timeout=30)
    assert started.ok, [(a.system, a.message) for a in started.acks]
    assert f"Motive is recording take '{session}'" in started.acks[0].message
    assert stand_in.proc.wait_log(f"take name set to '{session}'", 20), stand_in.proc.log()
    assert stand_in.proc.wait_log(f"recording started {session}", 20), stand_in.proc.log()

    stopped = control.stop(systems=[system], session_id=session, timeout=30)
    assert stopped.ok, [(a.system, a.message) for a in stopped.acks]
    assert f"Motive stopped recording take '{session}'" in stopped.acks[0].message
    assert stand_in.proc.wait_log(f"recording stopped {session}", 20), stand_in.proc.log()


def test_motive_refusing_to_record_fails_the_ack_with_its_answer(procs, tmp_path, control):
    stand_in = StandIn(procs, tmp_path, "--unicast", scene=SCENE)
    stand_in.command("StartRecording")  # someone is recording in Motive already
    _, ns = start_driver(procs, stand_in, "unicast", autostart=False, record_on_start=True)
    system = _system(ns)
    control.wait_for_systems(names=[system], timeout=30)

    started = control.start(systems=[system], session_id="trial-refused", timeout=30)
    assert not started.ok and not started.missing
    message = started.acks[0].message
    assert "Motive answered 1 to StartRecording" in message, message
    # the system still streams: only the vendor's recording failed
    assert message.startswith("active, but"), message


def test_without_record_on_start_nothing_is_sent_to_motive(procs, tmp_path, control):
    stand_in = StandIn(procs, tmp_path, "--unicast", scene=SCENE)
    _, ns = start_driver(procs, stand_in, "unicast", autostart=False)
    system = _system(ns)
    control.wait_for_systems(names=[system], timeout=30)
    assert control.start(systems=[system], session_id="trial-plain", timeout=30).ok
    assert control.stop(systems=[system], session_id="trial-plain", timeout=30).ok
    assert "take name set" not in stand_in.proc.log() and "recording started" not in stand_in.proc.log()
