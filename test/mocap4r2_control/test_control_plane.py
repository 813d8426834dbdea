"""The control plane with two simulated systems and an AuxiliarSystem as real processes:
announcements, START/STOP of all and of a subset, acks, late joiners, bad requests, the
CLI end to end and the TUI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import pytest
import yaml
from std_srvs.srv import Trigger
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import INSTALL, wait_for

from mocap4r2_control.control_plane import ACK_QOS, CONTROL_QOS, SYSTEMS_LISTENER_QOS, ControlClient
from mocap4r2_control.timebase import time_msg
from mocap4r2_interfaces.msg import Control, ControlAck, MocapSystemInfo, RigidBodies

SIM = ("mocap4r2_drivers", "simulated_system")
AUX = ("mocap4r2_control", "auxiliar_system")
A, B, EMG = "/cp/a/sim", "/cp/b/sim", "/cp/emg"
ALL = [A, B, EMG]


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    from support import ProcessRunner

    tmp = tmp_path_factory.mktemp("plane")
    scene = tmp / "scene.yaml"
    scene.write_text(
        yaml.safe_dump({"rate": 50.0, "rigid_bodies": [{"name": "box", "trajectory": {"type": "static"}}]})
    )
    runner = ProcessRunner(tmp)
    procs = {
        A: runner.start(*SIM, name="sim", namespace="/cp/a", params={"scene": str(scene)}),
        B: runner.start(*SIM, name="sim", namespace="/cp/b", params={"scene": str(scene), "frame_id": "lab"}),
        EMG: runner.start(
            *AUX,
            name="emg",
            namespace="/cp",
            params={
                "type": "emg",
                "topics": ["/cp/emg/data"],
                "topic_types": ["std_msgs/msg/Float64MultiArray"],
                "start_service": "/cp/recorder/start",
                "service_timeout": 3.0,
            },
        ),
    }
    yield procs
    runner.stop_all()


@pytest.fixture
def client(ros):
    client = ControlClient(ros.node)
    client.wait_for_systems(names=ALL, timeout=30)
    yield client
    client.destroy()


@pytest.fixture
def recorder(ros):
    """The EMG recorder's own start service, which the AuxiliarSystem calls on START."""
    calls = []
    answer = {"success": True, "message": "recording to trial.csv"}

    def start(request, response):
        calls.append(time.time())
        response.success = answer["success"]
        response.message = answer["message"]
        return response

    service = ros.node.create_service(Trigger, "/cp/recorder/start", start)
    yield calls, answer
    ros.node.destroy_service(service)


def states(client) -> dict[str, str]:
    return {name: info.state.label for name, info in client.systems().items() if name in ALL}


def wait_states(client, expected: dict[str, str], timeout=WAIT):
    wait_for(
        lambda: all(states(client).get(k) == v for k, v in expected.items()),
        timeout,
        lambda: states(client),
        what=f"states {expected}",
    )


def test_every_system_announces_itself(plane, client):
    systems = client.systems()
    assert {A, B, EMG} <= set(systems)
    a, b, emg = systems[A], systems[B], systems[EMG]
    assert (a.type, b.type, emg.type) == ("sim", "sim", "emg")
    assert b.frame_id == "lab"
    assert a.state.label == "unconfigured"
    assert a.topics == ["/cp/a/markers", "/cp/a/rigid_bodies", "/cp/a/skeletons", "/diagnostics"]
    assert a.topic_types[:3] == [
        "mocap4r2_interfaces/msg/Markers",
        "mocap4r2_interfaces/msg/RigidBodies",
        "mocap4r2_interfaces/msg/Skeletons",
    ]
    assert emg.topics == ["/cp/emg/data"] and emg.topic_types == ["std_msgs/msg/Float64MultiArray"]


def test_start_subset_then_all_then_stop(plane, client, recorder, ros):
    calls, _ = recorder
    bodies_b = ros.subscribe("/cp/b/rigid_bodies", RigidBodies)

    before = time.time()
    result = client.start(systems=[A], session_id="trial-1", timeout=WAIT)
    assert result.ok, result.acks
    (ack,) = result.acks
    assert (ack.system, ack.command, ack.session_id, ack.success) == (A, Control.START, "trial-1", True)
    assert before - 1 <= ack.stamp.sec + ack.stamp.nanosec * 1e-9 <= time.time() + 1
    wait_states(client, {A: "active", B: "unconfigured", EMG: "unconfigured"})
    assert client.systems()[A].session_id == "trial-1"
    time.sleep(0.3)  # deliberately lets time pass: nothing may arrive from B
    assert not bodies_b.snapshot(), "B was not addressed"

    result = client.start(session_id="trial-2", timeout=WAIT)  # empty list: every system
    assert sorted(result.expected) == sorted(ALL)
    assert result.ok, [(a.system, a.message) for a in result.acks]
    assert {a.system: a.message for a in result.acks}[A] == "already active"
    assert {a.system: a.message for a in result.acks}[EMG] == "recording to trial.csv"
    assert len(calls) == 1
    wait_states(client, {A: "active", B: "active", EMG: "active"})
    assert {n: i.session_id for n, i in client.systems().items() if n in ALL} == dict.fromkeys(ALL, "trial-2")
    bodies_b.wait_for(timeout=WAIT)

    result = client.stop(systems=[B, EMG], timeout=WAIT)
    assert result.ok and {a.command for a in result.acks} == {Control.STOP}
    wait_states(client, {A: "active", B: "inactive", EMG: "inactive"})

    result = client.stop(timeout=WAIT)
    assert result.ok
    wait_states(client, {A: "inactive", B: "inactive", EMG: "inactive"})
    assert {a.system: a.message for a in result.acks}[B] == "already inactive"


def test_a_failing_recorder_is_reported(plane, client, recorder):
    _, answer = recorder
    answer.update(success=False, message="disk full")
    result = client.start(systems=[EMG], session_id="trial-3", timeout=WAIT)
    (ack,) = result.acks
    assert not ack.success and "disk full" in ack.message
    assert not result.ok
    assert states(client)[EMG] != "active"


def test_late_joiner_sees_every_system(plane, client, ros):
    # a brand-new subscriber, after every announcement was made
    late = ros.subscribe("/mocap4r2/systems", MocapSystemInfo, SYSTEMS_LISTENER_QOS)
    late.wait_for(lambda i: i.system == A, timeout=WAIT)
    wait_for(
        lambda: set(ALL) <= {i.system for i in late.snapshot()},
        WAIT,
        lambda: sorted({i.system for i in late.snapshot()}),
        what=f"announcements of {ALL}",
    )
    assert set(ALL) <= {i.system for i in late.snapshot()}


def test_bad_repeated_and_foreign_requests(plane, client, ros):
    acks = ros.subscribe("/mocap4r2/control_ack", ControlAck, ACK_QOS)
    ack_sub = ros._subs[-1]
    pub = ros.publisher("/mocap4r2/control", Control, CONTROL_QOS)
    # requests and acks are volatile: both new endpoints must have matched every system
    wait_for(
        lambda: pub.get_subscription_count() >= len(ALL) and ack_sub.get_publisher_count() >= len(ALL),
        WAIT,
        lambda: (pub.get_subscription_count(), ack_sub.get_publisher_count()),
        what="request publisher and ack subscription matched by every system",
    )

    def send(**fields):
        msg = Control(requester="/test", stamp=time_msg(), **fields)
        pub.publish(msg)
        return msg

    # unknown command: a clear refusal from each addressed system
    send(command=7, request_id="bad-cmd", systems=[A, B])
    for system in (A, B):
        ack = acks.wait_for(lambda a, s=system: a.request_id == "bad-cmd" and a.system == s, timeout=WAIT)
        assert not ack.success and "unknown command 7" in ack.message

    # repeated request id: answered once
    send(command=Control.STOP, request_id="dup", systems=[A])
    send(command=Control.STOP, request_id="dup", systems=[A])
    acks.wait_for(lambda a: a.request_id == "dup", timeout=WAIT)
    # foreign request: systems that are not addressed stay silent
    send(command=Control.START, request_id="foreign", systems=["/elsewhere/optitrack"])
    # no request id: ignored (nothing could match the answer)
    send(command=Control.START, request_id="", systems=[A])
    send(command=Control.STOP, request_id="marker", systems=[A])
    acks.wait_for(lambda a: a.request_id == "marker", timeout=WAIT)
    time.sleep(0.5)  # deliberately lets time pass: a second "dup" ack or a foreign one must not come
    got = acks.snapshot()
    assert sum(1 for a in got if a.request_id == "dup") == 1
    assert not [a for a in got if a.request_id in ("foreign", "")]
    assert all(p.alive() for p in plane.values())


def cli(*args, timeout=60):
    env = dict(os.environ, COLUMNS="400")  # rich would shorten table cells to a terminal's width
    return subprocess.run(
        [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_cli_end_to_end(plane, client):
    # a fresh process discovers every participant anew: give a loaded machine time
    out = cli("systems", "--wait", "6")
    assert out.returncode == 0, out.stderr
    for name in ALL:
        assert name in out.stdout

    out = cli("start", "--session", "cli-trial", "--systems", A, B, "--wait", "30", "--timeout", "30")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"START {A}: ok" in out.stdout and f"START {B}: ok" in out.stdout
    wait_states(client, {A: "active", B: "active"})

    out = cli("status", "--wait", "6")
    assert out.returncode == 0
    # each system's row: in the session, active, with a diagnostics report (its words
    # depend on the machine's load: "streaming at ..." or the problem seen)
    for name in (A, B):
        row = next((line for line in out.stdout.splitlines() if f" {name} " in line), "")
        assert "cli-trial" in row and " active " in row and "no diagnostics" not in row, out.stdout

    out = cli("stop", "--systems", A, B, "--wait", "30", "--timeout", "30")
    assert out.returncode == 0 and f"STOP {A}: ok" in out.stdout
    wait_states(client, {A: "inactive", B: "inactive"})

    out = cli("start", "--systems", "/no/such/system", "--timeout", "1", "--wait", "1")
    assert out.returncode == 1
    assert "/no/such/system: no answer" in out.stdout


def test_tui_starts_and_stops_from_the_keyboard(plane, client):
    from mocap4r2_control.control_plane import ControlSession
    from mocap4r2_tools.tui import LiveView, MocapTui

    session = ControlSession(args=["tui-test"])
    try:
        session.client.wait_for_systems(names=ALL, timeout=WAIT)
        app = MocapTui(LiveView(session), refresh=0.2)

        def row_a():
            return {r.name: r for r in app.view.refresh()}.get(A)

        async def drive():
            async with app.run_test() as pilot:
                # waits run in a thread so the app's event loop keeps running meanwhile
                table = app.query_one("#systems")
                await asyncio.to_thread(
                    wait_for,
                    lambda: table.row_count >= 3,
                    WAIT,
                    lambda: table.row_count,
                    what="three rows in the table",
                )
                await pilot.press("s")
                await asyncio.to_thread(wait_states, client, {A: "active", B: "active"})
                assert states(client)[A] == "active" and states(client)[B] == "active"
                await asyncio.to_thread(
                    wait_for,
                    lambda: row_a() and row_a().last_frame > 0,
                    WAIT,
                    row_a,
                    what=f"frames of {A} in the view",
                )
                rows = {r.name: r for r in app.view.refresh()}
                assert rows[A].bodies_total == 1 and rows[A].last_frame > 0
                await pilot.press("x")
                await asyncio.to_thread(wait_states, client, {A: "inactive"})
                assert states(client)[A] == "inactive"
                # the STOP line is logged once every system has acked, which can be after
                # A's state changed: wait for the line itself
                await asyncio.to_thread(
                    wait_for,
                    lambda: any("STOP" in line for line in app.view.log),
                    WAIT,
                    lambda: list(app.view.log),
                    what="a STOP line in the TUI log",
                )
                assert any("STOP" in line for line in app.view.log)
                await pilot.press("q")

        asyncio.run(drive())
    finally:
        session.close()
