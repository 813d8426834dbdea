"""`make demo`: the suite working, with no hardware, in under a minute.

Starts the simulated mocap system (and the tools that are installed: marker_viz,
robot_ground_truth, trajectory_error, worldmodel_server, session_recorder; px4_bridge only
when a vehicle answers at DEMO_PX4_CONNECTION, default udpout:127.0.0.1:14540, e.g. PX4
SITL), starts a capture session through the control plane, shows a live view for
--duration seconds or until Ctrl-C, stops the session, prints a summary and where the
session was recorded.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATES = {0: "UNKNOWN", 1: "PENDING", 2: "ACTIVE", 3: "INACTIVE", -1: "CONFIRMED", -2: "DISCARDED", -3: "APPROACHING"}
INSTALL = ROOT / "install"


def executable(package: str, name: str) -> Path | None:
    path = INSTALL / package / "lib" / package / name
    return path if path.exists() else None


def start(cmd: list[str], log_dir: Path, label: str) -> subprocess.Popen:
    log = open(log_dir / f"{label}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def vehicle_answers(connection: str, timeout: float = 1.5) -> str | None:
    """The HEARTBEAT of an autopilot at ``connection`` ("system S, autopilot A"), or None.
    A vehicle listening on a UDP port answers only once it heard someone: send ours."""
    try:
        os.environ.setdefault("MAVLINK20", "1")
        from pymavlink import mavutil
    except ImportError:
        return None
    try:
        conn = mavutil.mavlink_connection(connection, source_system=1, source_component=197, dialect="common")
    except Exception:
        return None
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                conn.mav.heartbeat_send(18, 8, 0, 0, 4)   # onboard controller, no autopilot, active
            except OSError:
                pass
            msg = conn.recv_match(type="HEARTBEAT", blocking=True, timeout=0.3)
            if msg is not None and msg.autopilot != 8:
                return f"system {msg.get_srcSystem()}, autopilot {msg.autopilot}"
        return None
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=float(os.environ.get("DEMO_DURATION", 15)),
                        help="seconds of live view (default 15; Ctrl-C ends earlier)")
    parser.add_argument("--scene", default="", help="scene YAML (default: config/demo_scene.yaml)")
    parser.add_argument("--domain", type=int, default=None, help="ROS_DOMAIN_ID to use (default: yours)")
    args = parser.parse_args(argv)
    if args.domain is not None:
        os.environ["ROS_DOMAIN_ID"] = str(args.domain)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    console = Console()
    log_dir = Path(tempfile.mkdtemp(prefix="mocap4r2-demo-"))
    sim = executable("mocap4r2_drivers", "simulated_system")
    if sim is None:
        console.print("[red]simulated_system is not installed: run `make setup`[/]")
        return 1
    procs: list[tuple[str, subprocess.Popen]] = []
    scene = args.scene or str(ROOT / "config" / "demo_scene.yaml")
    procs.append(("simulated_system", start(
        [str(sim), "--ros-args", "-r", "__ns:=/sim", "-r", "__node:=simulated_system",
         "-p", f"scene:={scene}", "-p", "publish_tf:=true", "-p", "frame_id:=world"], log_dir, "simulated_system")))
    # the tools as configured for /sim in config/tools.yaml: marker_viz draws the system,
    # robot_ground_truth follows robot1, trajectory_error compares the two (about zero)
    tools_config = str(ROOT / "config" / "tools.yaml")
    for tool in ("marker_viz", "robot_ground_truth", "trajectory_error"):
        exe = executable("mocap4r2_tools", tool)
        if exe is not None:
            procs.append((tool, start([str(exe), "--ros-args", "--params-file", tools_config], log_dir, tool)))
    # the bridges, where their parts are there: the world model needs only its package;
    # the PX4 bridge needs a vehicle (a flight controller or PX4 SITL) answering
    bridges: list[str] = []
    wm = executable("mocap4r2_tools", "worldmodel_server")
    if wm is not None:
        procs.append(("worldmodel_server", start(
            [str(wm), "--ros-args", "--params-file", str(ROOT / "config" / "worldmodel.yaml")], log_dir,
            "worldmodel_server")))
        bridges.append("worldmodel_server: the bodies as a hector world model on /worldmodel/objects")
    else:
        bridges.append("worldmodel_server: not installed (run `make setup`), not started")
    px4 = executable("mocap4r2_tools", "px4_bridge")
    px4_connection = os.environ.get("DEMO_PX4_CONNECTION", "udpout:127.0.0.1:14540")
    vehicle = vehicle_answers(px4_connection) if px4 is not None else None
    if px4 is None:
        bridges.append("px4_bridge: not installed, not started")
    elif vehicle is None:
        bridges.append(f"px4_bridge: no vehicle answers at {px4_connection} (start PX4 SITL or set "
                       "DEMO_PX4_CONNECTION), not started")
    else:
        procs.append(("px4_bridge", start(
            [str(px4), "--ros-args", "--params-file", str(ROOT / "config" / "px4_bridge.yaml"),
             "-p", "body:=drone1", "-p", f"connection:={px4_connection}"], log_dir, "px4_bridge")))
        bridges.append(f"px4_bridge: drone1 -> {px4_connection} ({vehicle})")

    # session_recorder keeps the session as a bag in <logs>/sessions/<session id>/
    recordings = log_dir / "sessions"
    recordings.mkdir()
    recorder = executable("mocap4r2_tools", "session_recorder")
    if recorder is not None:
        procs.append(("session_recorder", start(
            [str(recorder), "--ros-args", "--params-file", str(ROOT / "config" / "recorder.yaml"),
             "-p", f"output_dir:={recordings}"], log_dir, "session_recorder")))
    session_members = ["/sim/simulated_system"] + (["/session_recorder"] if recorder is not None else [])

    from diagnostic_msgs.msg import DiagnosticArray
    from mocap4r2_interfaces.msg import RigidBodies, TrajectoryError

    from mocap4r2_control.control_plane import ControlSession

    stats = {"frames": 0, "first": None, "last": None, "tracked": 0, "bodies": 0, "diag": None, "names": [],
             "error": None, "model": None}

    def on_model(msg) -> None:
        stats["model"] = msg

    def on_bodies(msg: RigidBodies) -> None:
        stats["frames"] += 1
        stats["first"] = stats["first"] if stats["first"] is not None else msg.frame_number
        stats["last"] = msg.frame_number
        stats["bodies"] = len(msg.rigid_bodies)
        stats["tracked"] = sum(b.tracking_valid for b in msg.rigid_bodies)
        stats["names"] = [(b.name, b.tracking_valid, b.pose.position) for b in msg.rigid_bodies]

    def on_diag(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.hardware_id == "/sim/simulated_system":
                stats["diag"] = status

    def on_error(msg: TrajectoryError) -> None:
        stats["error"] = msg

    session = ControlSession(node_name="mocap4r2_demo")
    code = 0
    try:
        session.node.create_subscription(RigidBodies, "/sim/rigid_bodies", on_bodies, 10)
        session.node.create_subscription(TrajectoryError, "/trajectory_error", on_error, 10)
        session.node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
        if wm is not None:
            from hector_worldmodel_msgs.msg import ObjectModel
            from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

            session.node.create_subscription(ObjectModel, "/worldmodel/objects", on_model, QoSProfile(
                depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        for line in bridges:
            console.print(f"bridge {line}")
        console.print(f"[bold]mocap4r2 demo[/] (ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')}, "
                      f"logs in {log_dir})")
        systems = session.client.wait_for_systems(names=session_members, timeout=20)
        if "/sim/simulated_system" not in systems:
            console.print("[red]the simulated system did not announce itself[/]")
            return 1
        console.print(f"systems: {', '.join(f'{n} ({i.type}, {i.state.label})' for n, i in systems.items())}")
        session_id = time.strftime("demo-%H%M%S")
        result = session.client.start(systems=session_members, session_id=session_id)
        for ack in result.acks:
            console.print(f"START {ack.system}: {'ok' if ack.success else 'FAILED'} {ack.message}")
        if not result.ok:
            return 1

        def view() -> Table:
            table = Table(title=f"session {session_id}: /sim (simulated, 120 Hz)", header_style="bold")
            for col in ("body", "tracked", "x", "y", "z"):
                table.add_column(col)
            for name, ok, p in stats["names"]:
                table.add_row(name, "[green]yes[/]" if ok else "[red]no (last pose)[/]",
                              f"{p.x:+.3f}", f"{p.y:+.3f}", f"{p.z:+.3f}")
            diag = stats["diag"]
            if diag is not None:
                values = {kv.key: kv.value for kv in diag.values}
                table.caption = (f"frame {stats['last']}  rate {values.get('rate_hz')} Hz  "
                                 f"latency {values.get('latency_mean_ms')} ms  "
                                 f"dropped {values.get('dropped_frames_total')}  status: {diag.message}")
            err = stats["error"]
            if err is not None:
                table.caption += (f"\nrobot_ground_truth vs mocap (trajectory_error): {err.samples} pairs, "
                                  f"ATE rmse {err.ate_rmse:.2e} m")
            model = stats["model"]
            if model is not None:
                table.caption = (table.caption or "") + "\nworld model: " + ", ".join(
                    f"{o.info.object_id} {STATES.get(o.state.state, o.state.state)}" for o in model.objects)
            return table

        deadline = time.monotonic() + args.duration
        try:
            with Live(view(), console=console, refresh_per_second=4) as live:
                while time.monotonic() < deadline:
                    time.sleep(0.25)
                    live.update(view())
        except KeyboardInterrupt:
            console.print("interrupted")
        result = session.client.stop(systems=session_members, session_id=session_id, timeout=15)
        for ack in result.acks:
            console.print(f"STOP {ack.system}: {'ok' if ack.success else 'FAILED'} {ack.message}")
        diag = {kv.key: kv.value for kv in stats["diag"].values} if stats["diag"] is not None else {}
        console.print(f"[bold]summary[/]: the system published {diag.get('frames_total', '?')} frames "
                      f"({diag.get('dropped_frames_total', '?')} dropped by the simulated mocap system), "
                      f"{stats['bodies']} rigid bodies; this viewer received {stats['frames']}; "
                      f"tools running: {', '.join(n for n, _ in procs[1:]) or 'none'}")
        err = stats["error"]
        if err is not None:
            console.print(f"trajectory_error: {err.samples} pose pairs, ATE rmse {err.ate_rmse:.3e} m, "
                          f"RPE {err.rpe_trans_rmse:.3e} m / {err.rpe_rot_rmse:.3e} rad (aligned: {err.aligned})")
        if recorder is not None:
            console.print(f"recorded: {recordings / session_id}  (try: mocap4r2 sessions {recordings}; "
                          f"mocap4r2 export {recordings / session_id} --format c3d)")
        code = 0 if stats["frames"] > 0 and result.ok else 1
    finally:
        session.close()
        for _, proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for name, proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
