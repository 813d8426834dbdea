"""QTM's own recording joins a capture session: with record_on_start, a control-plane
START starts a capture in QTM (taking control if needed) and STOP stops it and saves it
as <session_id>.qtm, through qtm-rt; QTM's refusal fails the ack with QTM's words.
Checked against qtm_simulator, which answers Start / Stop / Save as QTM does."""

from __future__ import annotations

import itertools

import pytest
from qtm_stand_in import start_qtm  # test/fixtures

DRIVER = ("mocap4r2_drivers", "qualisys_system")
SCENE = {
    "seed": 2,
    "rate": 100.0,
    "rigid_bodies": [{"name": "drone", "id": 1, "trajectory": {"type": "static"}}],
}
_ids = itertools.count()


@pytest.fixture
def control():
    from mocap4r2_control.control_plane import ControlSession

    session = ControlSession(args=["qualisys-recording-test"])
    yield session.client
    session.close()


def start_driver(procs, base: int, **params) -> str:
    ns = f"/qrec{next(_ids)}"
    procs.start(*DRIVER, name="qualisys", namespace=ns, params={"port": base, **params})
    return f"{ns}/qualisys"


def test_a_session_is_captured_and_saved_under_its_name(procs, tmp_path, control):
    qtm, base, _ = start_qtm(procs, tmp_path, SCENE)
    system = start_driver(procs, base, record_on_start=True)
    control.wait_for_systems(names=[system], timeout=30)

    started = control.start(systems=[system], session_id="trial-07", timeout=30)
    assert started.ok, [(a.system, a.message) for a in started.acks]
    assert "QTM is capturing for session 'trial-07'" in started.acks[0].message
    assert qtm.wait_log("capture started", 20), qtm.log()

    stopped = control.stop(systems=[system], session_id="trial-07", timeout=30)
    assert stopped.ok, [(a.system, a.message) for a in stopped.acks]
    assert "Measurement saved as 'trial-07.qtm'" in stopped.acks[0].message
    assert qtm.wait_log("capture saved as trial-07.qtm", 20), qtm.log()


def test_qtm_refusing_control_fails_the_ack_with_its_words(procs, tmp_path, control):
    qtm, base, _ = start_qtm(procs, tmp_path, SCENE, extra=["--password", "secret"])
    system = start_driver(procs, base, record_on_start=True, password="wrong")
    control.wait_for_systems(names=[system], timeout=30)

    started = control.start(systems=[system], session_id="trial-08", timeout=30)
    assert not started.ok and not started.missing
    message = started.acks[0].message
    assert message.startswith("active, but") and "Wrong or missing password" in message, message
    assert "capture started" not in qtm.log()


def test_without_record_on_start_qtm_does_not_capture(procs, tmp_path, control):
    qtm, base, _ = start_qtm(procs, tmp_path, SCENE)
    system = start_driver(procs, base)
    control.wait_for_systems(names=[system], timeout=30)
    assert control.start(systems=[system], session_id="trial-09", timeout=30).ok
    assert control.stop(systems=[system], session_id="trial-09", timeout=30).ok
    assert "capture started" not in qtm.log()
