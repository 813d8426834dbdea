"""`make demo`: the suite working, with no hardware, in under a minute.

Starts the simulated mocap system (and the tools that are installed: marker_viz,
robot_ground_truth, trajectory_error, worldmodel_server, session_recorder; px4_bridge only
when a vehicle answers at DEMO_PX4_CONNECTION, default udpin:127.0.0.1:14540 (where PX4 SITL sends), e.g. PX4
SITL), starts a capture session through the control plane, shows a live view for
--duration seconds or until Ctrl-C, stops the session, prints a summary and where the
session was recorded.

The motion tools run beside it (config/motion_tools.yaml): simulated_arm executes looping
trajectories this script queues as QueueTrajectory goals, each with RATIO, TIME and
JOINT_STATE monitors; trajectory_monitor evaluates the monitors of those goals and takes
a mocap snapshot at each trigger; a second simulated mocap system, /arm_mocap (scene
config/arm_scene.yaml), measures the arm's end effector as the rigid body arm_ee; and
arm_trajectory_error compares the commanded end-effector path (/simulated_arm/ee_pose)
with the measured one. The summary prints that ATE: millimetres (marker noise and the
measurement's lag), not zero.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STATES = {
    0: "UNKNOWN",
    1: "PENDING",
    2: "ACTIVE",
    3: "INACTIVE",
    -1: "CONFIRMED",
    -2: "DISCARDED",
    -3: "APPROACHING",
}
INSTALL = ROOT / "install"


def executable(package: str, name: str) -> Path | None:
    path = INSTALL / package / "lib" / package / name
    return path if path.exists() else None


# frames a simulated system keeps for its reader in the demo (1 s at the scenes' 120 Hz)
DEMO_BACKLOG = 120


def node_command(
    exe: Path,
    *,
    namespace: str | None = None,
    node: str | None = None,
    params_file: str | Path | None = None,
    parameters: dict[str, Any] | None = None,
) -> list[str]:
    """The command line of a ROS node: ``exe --ros-args``, then the namespace and node name
    remaps, the parameters file and each single parameter (which overrides the file)."""
    cmd = [str(exe), "--ros-args"]
    if namespace is not None:
        cmd += ["-r", f"__ns:={namespace}"]
    if node is not None:
        cmd += ["-r", f"__node:={node}"]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    for name, value in (parameters or {}).items():
        cmd += ["-p", f"{name}:={value}"]
    return cmd


def start(cmd: list[str], log_dir: Path, label: str) -> subprocess.Popen:
    # the child gets its own copy of the descriptor; ours is closed once it has started
    with open(log_dir / f"{label}.log", "w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def printed_panel_url(log: Path, timeout: float = 20.0) -> str | None:
    """The URL the web panel printed in its log (it carries the panel's token), or None."""
    import re

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            found = re.search(r"web_panel: open (\S+)", log.read_text(errors="replace"))
            if found:
                return found.group(1)
        time.sleep(0.2)
    return None


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
            with contextlib.suppress(OSError):  # nobody listening yet: the next round retries
                conn.mav.heartbeat_send(18, 8, 0, 0, 4)  # onboard controller, no autopilot, active
            msg = conn.recv_match(type="HEARTBEAT", blocking=True, timeout=0.3)
            if msg is not None and msg.autopilot != 8:
                return f"system {msg.get_srcSystem()}, autopilot {msg.autopilot}"
        return None
    finally:
        conn.close()


ARM_JOINTS = ("joint1", "joint2", "joint3")
ARM_LOOP_SECONDS = 6.0
ARM_LOOP_POINTS = 13
ARM_TOP = (0.0, -0.35, 0.5)  # the joints half way round a loop (the JOINT_STATE monitor)


def arm_loop(s: float) -> tuple[list[float], list[float]]:
    """Joints and joint velocities at the fraction s of one loop: a yaw swing with the arm
    lifted and bent in the middle; starts and ends at rest at zero, so loops chain smoothly."""
    w = 2 * math.pi / ARM_LOOP_SECONDS
    lift = (1 - math.cos(2 * math.pi * s)) / 2
    dlift = math.pi * math.sin(2 * math.pi * s) / ARM_LOOP_SECONDS
    positions = [0.4 * math.sin(2 * math.pi * s), ARM_TOP[1] * lift, ARM_TOP[2] * lift]
    velocities = [0.4 * w * math.cos(2 * math.pi * s), ARM_TOP[1] * dlift, ARM_TOP[2] * dlift]
    return positions, velocities


class ArmGoals:
    """Keeps simulated_arm busy: queues a looping trajectory whenever fewer than two are
    queued or executing, each goal with one monitor of each trigger type."""

    def __init__(self, node, action: str = "/simulated_arm/queue_trajectory"):
        from rclpy.action import ActionClient

        from motion_control_interfaces.action import QueueTrajectory

        self._goal_type = QueueTrajectory.Goal
        self.client = ActionClient(node, QueueTrajectory, action)
        self.sent = self.accepted = self.finished = self.refused = 0
        self._outstanding = 0
        self._lock = threading.Lock()  # the answers come on the executor's thread

    def pump(self) -> None:
        with self._lock:
            if self._outstanding >= 2 or not self.client.server_is_ready():
                return
            self.sent += 1
            self._outstanding += 1
        self.client.send_goal_async(self._goal(f"loop-{self.sent}")).add_done_callback(self._on_response)

    def _goal(self, trajectory_id: str):
        from builtin_interfaces.msg import Duration
        from trajectory_msgs.msg import JointTrajectoryPoint

        from motion_control_interfaces.msg import Monitor
        from motion_control_interfaces.msg import TriggerCondition as C

        goal = self._goal_type(trajectory_id=trajectory_id)
        goal.trajectory.joint_names = list(ARM_JOINTS)
        for i in range(ARM_LOOP_POINTS):
            s = i / (ARM_LOOP_POINTS - 1)
            positions, velocities = arm_loop(s)
            t = s * ARM_LOOP_SECONDS
            goal.trajectory.points.append(
                JointTrajectoryPoint(
                    positions=positions,
                    velocities=velocities,
                    time_from_start=Duration(sec=int(t), nanosec=int(round((t % 1) * 1e9)) % 1_000_000_000),
                )
            )
        top = Monitor(
            monitor_id="top", trigger_condition=C(type=C.JOINT_STATE, joint_state_tolerances=[0.02] * 3)
        )
        top.trigger_condition.joint_state.name = list(ARM_JOINTS)
        top.trigger_condition.joint_state.position = list(ARM_TOP)
        t1_5 = C(type=C.TIME, time_from_start=Duration(sec=1, nanosec=500_000_000))
        goal.monitors = [
            Monitor(monitor_id="half", trigger_condition=C(type=C.RATIO, ratio_of_trajectory=0.5)),
            Monitor(monitor_id="t1_5", trigger_condition=t1_5),
            top,
        ]
        return goal

    def _on_response(self, future) -> None:
        handle = future.result() if future.exception() is None else None
        with self._lock:
            if handle is None or not handle.accepted:
                self.refused += 1
                self._outstanding -= 1
                return
            self.accepted += 1
        handle.get_result_async().add_done_callback(self._on_result)

    def _on_result(self, future) -> None:
        with self._lock:
            self._outstanding -= 1
            if future.exception() is None and future.result().result.is_finished:
                self.finished += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=float(os.environ.get("DEMO_DURATION", 15)),
        help="seconds of live view (default 15; Ctrl-C ends earlier)",
    )
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

    def launch(label: str, exe: Path, **ros_args: Any) -> None:
        """Start ``exe`` as the process ``label`` (its log: <logs>/<label>.log)."""
        procs.append((label, start(node_command(exe, **ros_args), log_dir, label)))

    scene = args.scene or str(ROOT / "config" / "demo_scene.yaml")
    launch(
        "simulated_system",
        sim,
        namespace="/sim",
        node="simulated_system",
        # max_backlog: a second of frames for a reader the busy demo machine holds back (a
        # network buffer holds as much): late frames, not lost ones
        parameters={"scene": scene, "publish_tf": "true", "frame_id": "world", "max_backlog": DEMO_BACKLOG},
    )
    # the tools as configured for /sim in config/tools.yaml: marker_viz draws the system,
    # robot_ground_truth follows robot1, trajectory_error compares the two (about zero)
    tools_config = str(ROOT / "config" / "tools.yaml")
    for tool in ("marker_viz", "robot_ground_truth", "trajectory_error"):
        exe = executable("mocap4r2_tools", tool)
        if exe is not None:
            launch(tool, exe, params_file=tools_config)
    # the bridges, where their parts are there: the world model needs only its package;
    # the PX4 bridge needs a vehicle (a flight controller or PX4 SITL) answering
    bridges: list[str] = []
    wm = executable("mocap4r2_tools", "worldmodel_server")
    if wm is not None:
        launch("worldmodel_server", wm, params_file=ROOT / "config" / "worldmodel.yaml")
        bridges.append("worldmodel_server: the bodies as a hector world model on /worldmodel/objects")
    else:
        bridges.append("worldmodel_server: not installed (run `make setup`), not started")
    px4 = executable("mocap4r2_tools", "px4_bridge")
    px4_connection = os.environ.get("DEMO_PX4_CONNECTION", "udpin:127.0.0.1:14540")
    vehicle = vehicle_answers(px4_connection) if px4 is not None else None
    if px4 is None:
        bridges.append("px4_bridge: not installed, not started")
    elif vehicle is None:
        bridges.append(
            f"px4_bridge: no vehicle answers at {px4_connection} (start PX4 SITL or set "
            "DEMO_PX4_CONNECTION), not started"
        )
    else:
        launch(
            "px4_bridge",
            px4,
            params_file=ROOT / "config" / "px4_bridge.yaml",
            parameters={"body": "drone1", "connection": px4_connection},
        )
        bridges.append(f"px4_bridge: drone1 -> {px4_connection} ({vehicle})")

    # the motion tools: the arm, the monitors of its goals, a second simulated mocap
    # system measuring its end effector, and the commanded path against the measured one
    motion_config = str(ROOT / "config" / "motion_tools.yaml")
    arm_scene = ROOT / "config" / "arm_scene.yaml"
    motion: list[str] = []
    arm = executable("mocap4r2_tools", "simulated_arm")
    arm_measured = False
    if arm is None:
        motion.append("simulated_arm: not installed (run `make setup`), not started")
    else:
        launch("simulated_arm", arm, node="simulated_arm", params_file=motion_config)
        monitor = executable("mocap4r2_tools", "trajectory_monitor")
        if monitor is not None:
            launch("trajectory_monitor", monitor, node="trajectory_monitor", params_file=motion_config)
        if arm_scene.exists():
            arm_measured = True
            launch(
                "arm_mocap",
                sim,
                namespace="/arm_mocap",
                node="simulated_system",
                parameters={"scene": arm_scene, "frame_id": "world", "max_backlog": DEMO_BACKLOG},
            )
            err_exe = executable("mocap4r2_tools", "trajectory_error")
            if err_exe is not None:
                launch(
                    "arm_trajectory_error", err_exe, node="arm_trajectory_error", params_file=motion_config
                )
            motion.append(
                "arm: /simulated_arm executes looping goals, /arm_mocap measures its end effector "
                "(arm_ee), arm_trajectory_error compares commanded and measured"
            )
        else:
            motion.append(f"arm: {arm_scene} is missing: the arm runs unmeasured (no /arm_mocap, no error)")

    # session_recorder keeps the session as a bag in <logs>/sessions/<session id>/
    recordings = log_dir / "sessions"
    recordings.mkdir()
    recorder = executable("mocap4r2_tools", "session_recorder")
    if recorder is not None:
        launch(
            "session_recorder",
            recorder,
            params_file=ROOT / "config" / "recorder.yaml",
            parameters={"output_dir": recordings},
        )
    # the lab's control panel in the browser, on loopback (docs/web_panel.md)
    web_port = int(os.environ.get("DEMO_WEB_PORT", "8080"))
    web_panel = executable("mocap4r2_tools", "web_panel")
    if web_panel is not None:
        launch("web_panel", web_panel, parameters={"port": web_port, "sessions_dir": recordings})
    session_members = (
        ["/sim/simulated_system"]
        + (["/arm_mocap/simulated_system"] if arm_measured else [])
        + (["/session_recorder"] if recorder is not None else [])
    )

    from diagnostic_msgs.msg import DiagnosticArray

    from mocap4r2_control.control_plane import ControlSession
    from mocap4r2_interfaces.msg import RigidBodies, TrajectoryError

    stats = {
        "frames": 0,
        "first": None,
        "last": None,
        "tracked": 0,
        "bodies": 0,
        "diag": None,
        "names": [],
        "error": None,
        "model": None,
        "arm_error": None,
        "triggers": {},
        "last_results": {},
        "snapshot": None,
    }

    def on_arm_error(msg: TrajectoryError) -> None:
        stats["arm_error"] = msg

    def on_monitor_results(msg) -> None:
        # a monitor triggers when it turns true (a new trajectory starts them over at false)
        now = {r.monitor_id: r.is_triggered for r in msg.monitor_results}
        for mid, hit in now.items():
            if hit and not stats["last_results"].get(mid, False):
                stats["triggers"][mid] = stats["triggers"].get(mid, 0) + 1
        stats["last_results"] = now

    def on_snapshot(msg) -> None:
        stats["snapshot"] = msg

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
            from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

            from hector_worldmodel_msgs.msg import ObjectModel

            session.node.create_subscription(
                ObjectModel,
                "/worldmodel/objects",
                on_model,
                QoSProfile(
                    depth=1,
                    reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.TRANSIENT_LOCAL,
                ),
            )
        arm_goals = None
        if arm is not None:
            from geometry_msgs.msg import PoseStamped
            from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

            from motion_control_interfaces.msg import MonitorResultsStamped

            arm_goals = ArmGoals(session.node)
            session.node.create_subscription(
                MonitorResultsStamped, "/trajectory_monitor/monitor_results", on_monitor_results, 50
            )
            session.node.create_subscription(
                PoseStamped,
                "/trajectory_monitor/half/arm_ee",
                on_snapshot,
                QoSProfile(
                    depth=1,
                    reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.TRANSIENT_LOCAL,
                ),
            )
            session.node.create_subscription(TrajectoryError, "/arm_trajectory_error", on_arm_error, 10)
        for line in motion:
            console.print(f"motion {line}")
        for line in bridges:
            console.print(f"bridge {line}")
        console.print(
            f"[bold]mocap4r2 demo[/] (ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')}, "
            f"logs in {log_dir})"
        )
        if web_panel is not None:
            # the URL the panel printed carries its token (required on loopback too)
            web_url = printed_panel_url(log_dir / "web_panel.log")
            console.print(
                f"web panel: open [bold]{web_url}[/] (log: {log_dir}/web_panel.log)"
                if web_url
                else f"web panel: no URL printed yet on port {web_port}; see {log_dir}/web_panel.log"
            )
        systems = session.client.wait_for_systems(names=session_members, timeout=20)
        if "/sim/simulated_system" not in systems:
            console.print("[red]the simulated system did not announce itself[/]")
            return 1
        if arm_measured and "/arm_mocap/simulated_system" not in systems:
            # the arm's measurement is an extra: the demo goes on without it
            console.print(
                f"[yellow]/arm_mocap did not announce itself (see {log_dir}/arm_mocap.log): "
                "the arm runs unmeasured[/]"
            )
            session_members.remove("/arm_mocap/simulated_system")
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
                table.add_row(
                    name,
                    "[green]yes[/]" if ok else "[red]no (last pose)[/]",
                    f"{p.x:+.3f}",
                    f"{p.y:+.3f}",
                    f"{p.z:+.3f}",
                )
            lines = []  # the caption, a line per source that has reported
            diag = stats["diag"]
            if diag is not None:
                values = {kv.key: kv.value for kv in diag.values}
                lines.append(
                    f"frame {stats['last']}  rate {values.get('rate_hz')} Hz  "
                    f"latency {values.get('latency_mean_ms')} ms  "
                    f"dropped {values.get('dropped_frames_total')}  status: {diag.message}"
                )

            def ate(what: str, err, scale: float, unit: str, digits: str) -> None:
                if err is not None:
                    lines.append(
                        f"{what}: {err.samples} pairs, ATE rmse {err.ate_rmse * scale:{digits}} {unit}"
                    )

            ate("robot_ground_truth vs mocap (trajectory_error)", stats["error"], 1.0, "m", ".2e")
            if arm_goals is not None:
                triggers = ", ".join(f"{m} x{n}" for m, n in sorted(stats["triggers"].items())) or "none yet"
                lines.append(
                    f"arm: {arm_goals.accepted} loops accepted, {arm_goals.finished} finished; "
                    f"monitors triggered: {triggers}"
                )
                ate(
                    "commanded vs measured end effector (arm_trajectory_error)",
                    stats["arm_error"],
                    1000.0,
                    "mm",
                    ".2f",
                )
            model = stats["model"]
            if model is not None:
                lines.append(
                    "world model: "
                    + ", ".join(
                        f"{o.info.object_id} {STATES.get(o.state.state, o.state.state)}"
                        for o in model.objects
                    )
                )
            table.caption = "\n".join(lines) or None
            return table

        deadline = time.monotonic() + args.duration
        try:
            with Live(view(), console=console, refresh_per_second=4) as live:
                while time.monotonic() < deadline:
                    if arm_goals is not None:
                        arm_goals.pump()
                    time.sleep(0.25)
                    live.update(view())
        except KeyboardInterrupt:
            console.print("interrupted")
        result = session.client.stop(systems=session_members, session_id=session_id, timeout=15)
        for ack in result.acks:
            console.print(f"STOP {ack.system}: {'ok' if ack.success else 'FAILED'} {ack.message}")
        diag = {kv.key: kv.value for kv in stats["diag"].values} if stats["diag"] is not None else {}
        console.print(
            f"[bold]summary[/]: the system published {diag.get('frames_total', '?')} frames "
            f"({diag.get('dropped_frames_total', '?')} dropped by the simulated mocap system), "
            f"{stats['bodies']} rigid bodies; this viewer received {stats['frames']}; "
            f"tools running: {', '.join(n for n, _ in procs[1:]) or 'none'}"
        )
        err = stats["error"]
        if err is not None:
            console.print(
                f"trajectory_error: {err.samples} pose pairs, ATE rmse {err.ate_rmse:.3e} m, "
                f"RPE {err.rpe_trans_rmse:.3e} m / {err.rpe_rot_rmse:.3e} rad (aligned: {err.aligned})"
            )
        if arm_goals is not None:
            triggers = ", ".join(f"{m} x{n}" for m, n in sorted(stats["triggers"].items())) or "none"
            console.print(
                f"arm: {arm_goals.sent} looping trajectories sent, {arm_goals.accepted} accepted, "
                f"{arm_goals.finished} finished; trajectory_monitor triggers: {triggers}"
            )
            snap = stats["snapshot"]
            if snap is not None:
                p = snap.pose.position
                console.print(
                    f"arm: measured end effector at the last 'half' trigger: "
                    f"({p.x:+.4f}, {p.y:+.4f}, {p.z:+.4f}) m"
                )
            arm_err = stats["arm_error"]
            if arm_err is not None:
                console.print(
                    f"arm_trajectory_error (commanded vs measured end effector): {arm_err.samples} pose "
                    f"pairs, ATE rmse {arm_err.ate_rmse * 1000:.2f} mm, max {arm_err.ate_max * 1000:.2f} mm"
                )
                if not 0.0 < arm_err.ate_rmse < 0.02:
                    # marker noise and the measurement's lag make it millimetres: zero means the
                    # measurement is not independent of the command; centimetres, a wrong frame or
                    # body, or a machine so loaded that the measurement lags far behind
                    console.print(
                        f"[yellow]arm: an ATE of {arm_err.ate_rmse * 1000:.2f} mm is not the millimetres "
                        f"expected (a heavily loaded machine delays the measurement); see "
                        f"{log_dir}/arm_mocap.log and arm_trajectory_error.log[/]"
                    )
            elif arm_measured:
                console.print(
                    f"arm_trajectory_error: no result (was arm_ee tracked by /arm_mocap?); see "
                    f"{log_dir}/arm_mocap.log and arm_trajectory_error.log"
                )
        if recorder is not None:
            console.print(
                f"recorded: {recordings / session_id}  (try: mocap4r2 sessions {recordings}; "
                f"mocap4r2 export {recordings / session_id} --format c3d; replay it as a live system: "
                f"replay_system --ros-args -p file:={recordings / session_id} -p source:=/sim "
                "-p autostart:=true -r __ns:=/replay)"
            )
        code = 0 if stats["frames"] > 0 and result.ok else 1
    finally:
        session.close()
        for _, proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for _, proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
