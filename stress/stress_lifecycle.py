"""1000 random lifecycle transitions on a simulated_system (a real process, through the
standard change_state / get_state services, as `ros2 lifecycle set` calls them).

Valid and invalid requests are mixed: each must be answered, succeed exactly when the
lifecycle allows it from the current state, and leave the node in the state the model
predicts; at the end the node is alive with at most one reader thread.
"""

from __future__ import annotations

import random
import time

from stress.common import Row, harness, runner, write_scene

TRANSITIONS = 1000
NODE = "/stress_lc/sim"
# (from state, transition) -> to state; anything else is refused and changes nothing
ALLOWED = {
    ("unconfigured", "configure"): "inactive",
    ("inactive", "cleanup"): "unconfigured",
    ("inactive", "activate"): "active",
    ("active", "deactivate"): "inactive",
}
LABELS = ("configure", "cleanup", "activate", "deactivate")


class Lifecycle:
    """Persistent change_state / get_state clients (one client per call would spend most
    of the time in service discovery)."""

    def __init__(self, ros, node: str):
        from lifecycle_msgs.srv import ChangeState, GetState

        self.ros = ros
        self._change = ros.node.create_client(ChangeState, f"{node}/change_state")
        self._get = ros.node.create_client(GetState, f"{node}/get_state")
        self._types = ChangeState, GetState
        for client in (self._change, self._get):
            if not client.wait_for_service(timeout_sec=60):
                raise RuntimeError(f"{node} offers no lifecycle services")

    def _call(self, client, request, timeout: float):
        future = client.call_async(request)
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                future.cancel()
                raise AssertionError("no answer")
            time.sleep(0.001)
        return future.result()

    def change(self, label: str, timeout: float) -> bool:
        request = self._types[0].Request()
        request.transition.label = label
        return bool(self._call(self._change, request, timeout).success)

    def state(self, timeout: float) -> str:
        return self._call(self._get, self._types[1].Request(), timeout).current_state.label


def run() -> list[Row]:
    procs = runner("lifecycle")
    ros = harness()
    rng = random.Random(10)
    try:
        scene = write_scene(procs.tmp_path, rate=200.0, bodies=2, skeletons=1)
        proc = procs.start(
            "mocap4r2_drivers",
            "simulated_system",
            name="sim",
            namespace="/stress_lc",
            params={"scene": scene},
        )
        ros.wait_state(NODE, "unconfigured", timeout=60)
        lifecycle = Lifecycle(ros, NODE)
        state = "unconfigured"
        unanswered = wrong_result = wrong_state = 0
        valid = 0
        start = time.perf_counter()
        for _ in range(TRANSITIONS):
            label = rng.choice(LABELS)
            expected = ALLOWED.get((state, label))
            try:
                ok = lifecycle.change(label, timeout=30)
            except AssertionError:
                unanswered += 1
                ok = None
            if ok is not None and ok != (expected is not None):
                wrong_result += 1
            if expected is not None:
                valid += 1
                if ok:
                    state = expected
            try:
                actual = lifecycle.state(timeout=30)
            except AssertionError:
                unanswered += 1
                actual = None
            if actual != state:
                wrong_state += 1
                state = actual or state  # follow the node, so one error is counted once
        elapsed = time.perf_counter() - start
        readers = sum(1 for name in proc.threads() if name == "mocap4r2-reader") if proc.alive() else -1
        return [
            Row("lifecycle: transitions requested (valid)", f"{TRANSITIONS} ({valid})"),
            Row("lifecycle: transitions unanswered", unanswered, "0", unanswered == 0),
            Row("lifecycle: answers contrary to the lifecycle", wrong_result, "0", wrong_result == 0),
            Row("lifecycle: state differs from the model", wrong_state, "0", wrong_state == 0),
            Row(
                "lifecycle: node alive, reader threads",
                f"{proc.alive()}, {readers}",
                "True, <= 1",
                proc.alive() and 0 <= readers <= 1,
            ),
            Row("lifecycle: ms per transition (with get_state)", 1000 * elapsed / TRANSITIONS),
        ]
    finally:
        ros.close()
        procs.stop_all()
