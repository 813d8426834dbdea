"""`mocap4r2 tui`: a live terminal view of every system, with start/stop from the keyboard.

``LiveView`` gathers what the view shows (announcements, diagnostics, bodies tracked
from each system's rigid_bodies topic) from a ControlSession; ``MocapTui`` is the textual
app drawing it. Keys: s start all, x stop all, enter start/stop the selected system,
q quit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State
from rclpy.qos import qos_profile_sensor_data
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Footer, Header, Static

from mocap4r2_control.control_plane import ControlResult, ControlSession
from mocap4r2_interfaces.msg import RigidBodies

RIGID_BODIES_TYPE = "mocap4r2_interfaces/msg/RigidBodies"


@dataclass
class SystemRow:
    """One line of the live view: a system as announced, with the figures of its latest /diagnostics."""

    name: str
    type: str = ""
    state: str = ""
    session: str = ""
    nominal_rate: float = 0.0
    measured_rate: str = "-"
    dropped: str = "-"
    level: int = -1
    message: str = ""
    bodies_tracked: int = 0
    bodies_total: int = 0
    last_frame: int = -1
    active: bool = False
    recording: str = ""  # a recorder's current file, size and rate (from its /diagnostics)


@dataclass
class LiveView:
    """Thread-safe model of the view, fed by ROS callbacks."""

    session: ControlSession
    rows: dict[str, SystemRow] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._body_subs: dict[str, object] = {}
        node = self.session.node
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)

    def refresh(self) -> list[SystemRow]:
        systems = self.session.client.systems(include_finalized=True)
        with self._lock:
            for name, info in systems.items():
                row = self.rows.setdefault(name, SystemRow(name))
                row.type = info.type
                row.state = info.state.label
                row.active = info.state.id == State.PRIMARY_STATE_ACTIVE
                row.session = info.session_id
                row.nominal_rate = info.frame_rate
                for topic, type_name in zip(info.topics, info.topic_types):
                    if type_name == RIGID_BODIES_TYPE and topic not in self._body_subs:
                        self._body_subs[topic] = self.session.node.create_subscription(
                            RigidBodies,
                            topic,
                            lambda msg, n=name: self._on_bodies(n, msg),
                            qos_profile_sensor_data,
                        )
            return [self.rows[k] for k in sorted(self.rows)]

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        with self._lock:
            for status in msg.status:
                row = self.rows.get(status.hardware_id)
                if row is None:
                    continue
                values = {kv.key: kv.value for kv in status.values}
                row.measured_rate = values.get("rate_hz", "-")
                row.dropped = values.get("dropped_frames_total", "-")
                row.level = status.level[0] if isinstance(status.level, bytes) else int(status.level)
                row.message = status.message
                # a recorder (type "recorder") reports the file it writes while recording
                if "path" in values and "messages_per_s" in values:
                    size = int(values.get("size_bytes", "0") or 0)
                    row.recording = (
                        f"{values['path']} ({size / 1e6:.1f} MB, {float(values['messages_per_s']):.0f} msg/s)"
                    )
                else:
                    row.recording = ""

    def recordings(self) -> list[str]:
        """One line per recorder that is recording now."""
        with self._lock:
            return [
                f"recording: {row.recording}"
                for _, row in sorted(self.rows.items())
                if row.recording and row.active
            ]

    def _on_bodies(self, system: str, msg: RigidBodies) -> None:
        with self._lock:
            row = self.rows.get(system)
            if row is not None:
                row.bodies_total = len(msg.rigid_bodies)
                row.bodies_tracked = sum(1 for b in msg.rigid_bodies if b.tracking_valid)
                row.last_frame = msg.frame_number

    def note(self, result: ControlResult, verb: str) -> None:
        parts = [f"{a.system}: {'ok' if a.success else 'FAILED ' + a.message}" for a in result.acks]
        parts += [f"{m}: no answer" for m in result.missing]
        with self._lock:
            self.log.append(f"{time.strftime('%H:%M:%S')} {verb}: " + ("; ".join(parts) or "no system"))
            del self.log[:-5]


LEVELS = {0: "[green]OK[/]", 1: "[yellow]WARN[/]", 2: "[red]ERROR[/]", -1: "-"}


class MocapTui(App[None]):
    """The textual application behind ``mocap4r2 tui``: a table of systems refreshed from a LiveView, with
    keys to start and stop them."""

    TITLE = "mocap4r2"
    BINDINGS = [
        ("s", "start_all", "Start all"),
        ("x", "stop_all", "Stop all"),
        ("enter", "toggle", "Start/stop selected"),
        ("t", "toggle", "Start/stop selected"),
        ("q", "quit", "Quit"),
    ]

    def __init__(self, view: LiveView, refresh: float = 0.5):
        super().__init__()
        self.view = view
        self.refresh_period = refresh
        self.session_id = time.strftime("tui-%Y%m%d-%H%M%S")

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="systems", cursor_type="row")
        yield Static("", id="log")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#systems", DataTable)
        for column in (
            "system",
            "type",
            "state",
            "session",
            "nominal Hz",
            "measured Hz",
            "bodies tracked",
            "frame",
            "dropped",
            "status",
        ):
            table.add_column(column, key=column)
        self.set_interval(self.refresh_period, self.redraw)
        self.redraw()

    def redraw(self) -> None:
        table = self.query_one("#systems", DataTable)
        rows = self.view.refresh()
        cursor = table.cursor_row
        table.clear()
        for row in rows:
            table.add_row(
                row.name,
                row.type,
                row.state,
                row.session or "-",
                f"{row.nominal_rate:g}",
                row.measured_rate,
                f"{row.bodies_tracked}/{row.bodies_total}",
                str(row.last_frame) if row.last_frame >= 0 else "-",
                row.dropped,
                f"{LEVELS.get(row.level, '-')} {row.message}",
                key=row.name,
            )
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))
        lines = self.view.recordings() + self.view.log
        self.query_one("#log", Static).update(
            "\n".join(lines) or "s: start all  x: stop all  enter: start/stop selected  q: quit"
        )

    def _selected(self) -> SystemRow | None:
        table = self.query_one("#systems", DataTable)
        rows = self.view.refresh()
        if not rows or table.cursor_row < 0:
            return None
        return rows[min(table.cursor_row, len(rows) - 1)]

    def _request(self, start: bool, systems: list[str]) -> None:
        client = self.view.session.client

        def work() -> None:
            call = client.start if start else client.stop
            result = call(systems=systems, session_id=self.session_id if start else "", timeout=10.0)
            self.view.note(result, "START" if start else "STOP")
            self.call_from_thread(self.redraw)

        # requests wait for acks: never block the UI thread
        threading.Thread(target=work, daemon=True).start()

    def action_start_all(self) -> None:
        self._request(True, [])

    def action_stop_all(self) -> None:
        self._request(False, [])

    # textual's DOMNode.action_toggle(attribute) toggles an attribute; our "t"/enter binding
    # names this action instead, and textual dispatches by name without arguments
    def action_toggle(self) -> None:  # type: ignore[override]  # a different action of the same name
        row = self._selected()
        if row is not None:
            self._request(not row.active, [row.name])


def run_tui(refresh: float = 0.5) -> int:
    """Run the live view until the user quits; the ROS session is closed whatever happens."""
    session = ControlSession(args=["mocap4r2-tui"])
    try:
        MocapTui(LiveView(session), refresh).run()
    finally:
        session.close()
    return 0
