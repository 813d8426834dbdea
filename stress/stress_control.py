"""10 000 control requests in bursts of 1000 against two simulated systems and an
auxiliar_system (real processes): every valid (request, system) pair must get exactly
one ack, repeats of answered ids none, and the processes must survive.

Requests are mostly STOP with some START (3 %) (a START of an active system is answered
"already active"; STOP after START deactivates, so real transitions happen during the
bursts), addressed to all systems (empty list), to one, or to two. Every burst also
repeats 20 ids of the previous burst, which must not be answered again.
"""

from __future__ import annotations

import collections
import random
import time

from stress.common import Row, harness, runner, write_scene

SYSTEMS = ["/stress_cp/a/sim", "/stress_cp/b/sim", "/stress_cp/aux"]
BURSTS = 10
BURST = 1000
REPEATS_PER_BURST = 20


def run() -> list[Row]:
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from mocap4r2_control.control_plane import CONTROL_QOS, ControlClient
    from mocap4r2_control.timebase import time_msg
    from mocap4r2_interfaces.msg import Control, ControlAck

    procs = runner("control")
    ros = harness()
    rng = random.Random(5)
    try:
        scene = write_scene(procs.tmp_path, rate=100.0)
        procs.start(
            "mocap4r2_drivers",
            "simulated_system",
            name="sim",
            namespace="/stress_cp/a",
            params={"scene": scene, "read_timeout": 0.02},
        )
        procs.start(
            "mocap4r2_drivers",
            "simulated_system",
            name="sim",
            namespace="/stress_cp/b",
            params={"scene": scene, "read_timeout": 0.02},
        )
        procs.start(
            "mocap4r2_control", "auxiliar_system", name="aux", namespace="/stress_cp", params={"type": "emg"}
        )
        client = ControlClient(ros.node)
        client.wait_for_systems(names=SYSTEMS, timeout=60)
        acks = ros.subscribe(
            "/mocap4r2/control_ack",
            ControlAck,
            QoSProfile(depth=20_000, reliability=ReliabilityPolicy.RELIABLE),
        )
        pub = ros.publisher("/mocap4r2/control", Control, CONTROL_QOS)
        deadline = time.monotonic() + 60
        while pub.get_subscription_count() < len(SYSTEMS) and time.monotonic() < deadline:
            time.sleep(0.05)

        def send(request_id: str, command: int, systems: list[str]) -> None:
            pub.publish(
                Control(
                    command=command,
                    request_id=request_id,
                    requester="/stress",
                    systems=systems,
                    stamp=time_msg(),
                )
            )

        wanted: set[tuple[str, str]] = set()  # valid (request, system) pairs
        repeated: set[str] = set()
        sent_at: dict[str, float] = {}
        previous: list[tuple[str, int, list[str]]] = []
        unanswered_bursts = 0
        seen = 0  # acks looked at so far
        start = time.perf_counter()
        for b in range(BURSTS):
            burst = []
            for i in range(BURST):
                request_id = f"b{b}-{i}"
                command = Control.START if rng.random() < 0.03 else Control.STOP
                shape = rng.random()
                systems = [] if shape < 0.5 else rng.sample(SYSTEMS, 1 if shape < 0.8 else 2)
                burst.append((request_id, command, systems))
                wanted.update((request_id, s) for s in (systems or SYSTEMS))
            for request_id, command, systems in burst:
                sent_at[request_id] = time.monotonic()
                send(request_id, command, systems)
            for request_id, command, systems in rng.sample(previous, min(REPEATS_PER_BURST, len(previous))):
                repeated.add(request_id)
                send(request_id, command, systems)
            previous = burst
            # the next burst starts when this one is answered (or after 120 s)
            burst_pairs = {(r, s) for r, _, systems in burst for s in (systems or SYSTEMS)}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                fresh = acks.snapshot()[seen:]
                seen += len(fresh)
                burst_pairs.difference_update((a.request_id, a.system) for a in fresh)
                if not burst_pairs:
                    break
                time.sleep(0.25)
            else:
                unanswered_bursts += 1
        # a last request answered by all: anything late has arrived by then
        send("stress-end", Control.STOP, [])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if {a.system for a in acks.snapshot() if a.request_id == "stress-end"} >= set(SYSTEMS):
                break
            time.sleep(0.1)
        elapsed = time.perf_counter() - start
        got = acks.snapshot()
        counts = collections.Counter((a.request_id, a.system) for a in got)
        missing = sum(1 for pair in wanted if pair not in counts)
        duplicates = sum(n - 1 for pair, n in counts.items() if n > 1)
        unexpected = sum(n for pair, n in counts.items() if pair not in wanted and pair[0] != "stress-end")
        failures = sum(1 for a in got if a.request_id in sent_at and not a.success)
        latencies = sorted(_latency(a, sent_at) for a in got if a.request_id in sent_at)
        p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("nan")
        alive = all(p.alive() for p in procs.procs)
        return [
            Row("control: requests sent (valid pairs)", f"{BURSTS * BURST} ({len(wanted)})"),
            Row("control: missing acks", missing, "0", missing == 0),
            Row("control: duplicate acks (incl. repeated ids)", duplicates, "0", duplicates == 0),
            Row("control: acks from systems not addressed", unexpected, "0", unexpected == 0),
            Row("control: acks with success false", failures, "0", failures == 0),
            Row("control: bursts not answered in 120 s", unanswered_bursts, "0", unanswered_bursts == 0),
            Row("control: ack delay p99 s (bursts of 1000)", p99),
            Row("control: acks per s", len(got) / elapsed),
            Row("control: processes alive", alive, "True", alive),
        ]
    finally:
        ros.close()
        procs.stop_all()


def _latency(ack, sent_at: dict[str, float]) -> float:
    # ack stamps are wall clock; the send times monotonic: compare receipt order only
    # through the collector's times would need the index, so use the wall-clock stamp
    # of the system's answer against the request's send time converted to wall clock
    return max(0.0, ack.stamp.sec + ack.stamp.nanosec * 1e-9 - _wall(sent_at[ack.request_id]))


def _wall(monotonic_time: float) -> float:
    return time.time() - (time.monotonic() - monotonic_time)
