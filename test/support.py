"""Helpers for tests that run real nodes as processes and talk to them over real DDS."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(os.environ.get("MOCAP4R2_ROOT", Path(__file__).resolve().parents[1]))
INSTALL = ROOT / "install"


def executable(package: str, name: str) -> Path:
    path = INSTALL / package / "lib" / package / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is not installed: run `make setup`")
    return path


def param_args(params: dict[str, Any] | None) -> list[str]:
    out: list[str] = []
    for key, value in (params or {}).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            text = "[" + ",".join(_yaml_scalar(v) for v in value) + "]"
        else:
            text = _yaml_scalar(value)
        out += ["-p", f"{key}:={text}"]
    return out


def _yaml_scalar(value: Any) -> str:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalars: their repr is not YAML
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'" if value == "" or any(c in value for c in ",[]: ") else value
    return repr(value) if not isinstance(value, bool) else str(value).lower()


class Proc:
    """A started process with its log file."""

    def __init__(self, popen: subprocess.Popen, log_path: Path, name: str):
        self.popen = popen
        self.log_path = log_path
        self.name = name

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_log(self, text: str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 10.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode

    def threads(self) -> list[str]:
        """Names of the process's threads (from /proc, as the kernel knows them)."""
        names = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                names.append((task / "comm").read_text().strip())
            except OSError:
                pass
        return names


class ProcessRunner:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[Proc] = []

    def start(self, package: str, exe: str, *, name: str | None = None, namespace: str | None = None,
              params: dict[str, Any] | None = None, args: Iterable[str] = (), ros: bool = True,
              env: dict[str, str] | None = None) -> Proc:
        cmd = [str(executable(package, exe)), *args]
        if ros:
            cmd.append("--ros-args")
            if name:
                cmd += ["-r", f"__node:={name}"]
            if namespace:
                cmd += ["-r", f"__ns:={namespace}"]
            cmd += param_args(params)
        return self.start_command(cmd, label=name or exe, env=env)

    def start_command(self, cmd: list[str], label: str, env: dict[str, str] | None = None) -> Proc:
        log_path = self.tmp_path / f"{label}-{len(self.procs)}.log"
        handle = open(log_path, "w")
        full_env = dict(os.environ)
        full_env.update(env or {})
        popen = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=full_env,
                                 start_new_session=True)
        proc = Proc(popen, log_path, label)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


class Collector:
    """Messages received on one subscription, with waiting helpers."""

    def __init__(self):
        self.messages: list[Any] = []
        self.times: list[float] = []
        self._cond = threading.Condition()

    def __call__(self, msg: Any) -> None:
        with self._cond:
            self.messages.append(msg)
            self.times.append(time.monotonic())
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[Any], bool] = lambda m: True, timeout: float = 10.0):
        """The first message (old or new) satisfying predicate; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for msg in self.messages[seen:]:
                    if predicate(msg):
                        return msg
                seen = len(self.messages)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no matching message within {timeout} s ({seen} received)")
                self._cond.wait(remaining)

    def wait_count(self, count: int, timeout: float = 10.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.messages) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{len(self.messages)} of {count} messages within {timeout} s")
                self._cond.wait(remaining)
            return list(self.messages)

    def clear(self) -> None:
        with self._cond:
            self.messages.clear()
            self.times.clear()

    def snapshot(self) -> list[Any]:
        with self._cond:
            return list(self.messages)


class RosHarness:
    """One rclpy node spinning in a background thread for the whole test session."""

    def __init__(self):
        import rclpy
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.node import Node

        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = Node(f"test_harness_{os.getpid()}", context=self.context)
        self.executor = MultiThreadedExecutor(num_threads=4, context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        self._subs = []

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # shutdown while spinning
            pass

    def close(self) -> None:
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self.executor.shutdown(timeout_sec=2)
        self.node.destroy_node()
        self.rclpy.shutdown(context=self.context)

    # ---------------------------------------------------------------- topics
    def subscribe(self, topic: str, msg_type: Any, qos: Any = None) -> Collector:
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        collector = Collector()
        qos = qos or QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self._subs.append(self.node.create_subscription(msg_type, topic, collector, qos))
        return collector

    def unsubscribe_all(self) -> None:
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self._subs.clear()

    def publisher(self, topic: str, msg_type: Any, qos: Any = 10):
        return self.node.create_publisher(msg_type, topic, qos)

    # ---------------------------------------------------------------- services
    def call(self, srv_type: Any, name: str, request: Any, timeout: float = 10.0):
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise AssertionError(f"service {name} not available within {timeout} s")
            future = client.call_async(request)
            deadline = time.monotonic() + timeout
            while not future.done():
                if time.monotonic() > deadline:
                    raise AssertionError(f"service {name} did not answer within {timeout} s")
                time.sleep(0.01)
            return future.result()
        finally:
            self.node.destroy_client(client)

    # ---------------------------------------------------------------- lifecycle
    def change_state(self, node: str, transition: str | int, timeout: float = 15.0) -> bool:
        """What `ros2 lifecycle set <node> <transition>` does: call <node>/change_state."""
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        if isinstance(transition, str):
            request.transition.label = transition  # e.g. "configure", "shutdown", as the CLI sends
        else:
            request.transition.id = transition
        return bool(self.call(ChangeState, f"{node}/change_state", request, timeout).success)

    def get_state(self, node: str, timeout: float = 10.0) -> str:
        from lifecycle_msgs.srv import GetState

        return self.call(GetState, f"{node}/get_state", GetState.Request(), timeout).current_state.label

    def wait_state(self, node: str, label: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            try:
                state = self.get_state(node, timeout=2.0)
            except AssertionError:
                state = None
            if state == label:
                return
            time.sleep(0.05)
        raise AssertionError(f"{node} is {state!r}, not {label!r}, after {timeout} s")
