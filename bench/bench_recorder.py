"""session_recorder: messages recorded against messages published, and CPU per message.

Configurations: 10 bodies / 100 markers at 1000 Hz, and 50 bodies / 500 markers / 2
skeletons at 360 Hz, published by ``bench.replay_system raw`` (prebuilt serialized
frames: the cheapest publisher, so the machine's CPU goes to the recorder).

Two figures per configuration, measured in the same run:

* end to end: the installed ``session_recorder`` records a session of the replayed
  topics over DDS; published = every frame number from the first to the last recorded
  one (the raw replay sends each), recorded = messages in the bag (read with the
  ``mcap`` library), CPU per message = the recorder process's CPU time over the session
  (DDS receive included) / messages recorded;
* writer: the bag's exact bytes written again in this process by our SessionBag (queue +
  writer thread) and by ``rosbags``' own rosbag2 writer (MCAP storage); the ratio of
  their CPU per message is the target (ours / rosbags' <= 1.5).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [
    ("10 bodies / 100 markers @ 1000 Hz", (10, 10, 0), 1000.0),
    ("50 bodies / 500 markers / 2 skeletons @ 360 Hz", (50, 10, 2), 360.0),
]
MEASURE_S = float(os.environ.get("BENCH_RECORDER_SECONDS", 4.0))
RECORDER = "/bench_recorder/session_recorder"


def _installed(package: str, name: str) -> str:
    path = ROOT / "install" / package / "lib" / package / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is not installed: run `make setup`")
    return str(path)


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout} s")
        time.sleep(0.05)


def end_to_end(shape: tuple[int, int, int], rate: float, out: Path, session_id: str) -> dict:
    from mocap4r2_control.control_plane import ControlSession

    topics = ["/bench/markers", "/bench/rigid_bodies"] + (["/bench/skeletons"] if shape[2] else [])
    recorder = subprocess.Popen(
        [
            _installed("mocap4r2_tools", "session_recorder"),
            "--ros-args",
            "-r",
            "__ns:=/bench_recorder",
            "-p",
            f"output_dir:={out}",
            "-p",
            "extra_topics:=[" + ",".join(topics) + "]",
            "-p",
            "report_wait:=0.0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    replay = subprocess.Popen(
        [sys.executable, "-m", "bench.replay_system", "raw", *map(str, shape), str(rate)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    session = ControlSession(node_name="bench_recorder_client")
    try:
        replay.stdout.readline()  # READY: frames prebuilt
        client = session.client
        client.wait_for_systems(names=[RECORDER], timeout=30)
        node = session.node
        # the recorder subscribes to extra topics once they exist in the graph
        _wait(
            lambda: all(
                any(i.node_name == "session_recorder" for i in node.get_subscriptions_info_by_topic(t))
                for t in topics
            ),
            30,
            "the recorder did not subscribe to the replayed topics",
        )
        ps = psutil.Process(recorder.pid)
        result = client.start(systems=[RECORDER], session_id=session_id, timeout=20)
        if not result.ok:
            raise RuntimeError(f"START failed: {[a.message for a in result.acks]}")
        cpu0 = sum(ps.cpu_times()[:2])
        time.sleep(MEASURE_S)
        result = client.stop(systems=[RECORDER], timeout=60)
        cpu1 = sum(ps.cpu_times()[:2])
        if not result.ok:
            raise RuntimeError(f"STOP failed: {[a.message for a in result.acks]}")
    finally:
        session.close()
        for proc in (replay, recorder):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"cpu_s": cpu1 - cpu0, "topics": topics}


def read_bag(bag: Path, topics: list[str]) -> tuple[list[tuple[str, str, bytes, int]], int, int]:
    """All messages of the bag (topic, type, bytes, log time), and published/recorded
    counts of the frame topics (from the frame numbers in the bytes)."""
    from mcap.reader import make_reader

    from mocap4r2_tools.recording.frames import frame_number

    messages = []
    numbers: dict[str, list[int]] = {t: [] for t in topics}
    with open(next(bag.glob("*.mcap")), "rb") as f:
        reader = make_reader(f)
        for schema, channel, message in reader.iter_messages():
            messages.append((channel.topic, schema.name if schema else "", message.data, message.log_time))
            if channel.topic in numbers:
                numbers[channel.topic].append(frame_number(message.data))
    published = sum(max(n) - min(n) + 1 for n in numbers.values() if n)
    recorded = sum(len(n) for n in numbers.values())
    return messages, published, recorded


def writer_cpu(messages, out: Path) -> tuple[float, float]:
    """CPU seconds for (our SessionBag, rosbags' writer) to write the same messages."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    from mocap4r2_tools.recording.bag_writer import SessionBag, TopicSpec, qos_profile
    from mocap4r2_tools.recording.schemas import ros2msg_schema, share_msg_finder

    types = {}
    for topic, msgtype, _, _ in messages:
        types.setdefault(topic, msgtype)
    specs = [TopicSpec(t, m, qos_profile(True, False, 1000)) for t, m in types.items()]

    t0 = time.process_time()
    bag = SessionBag(out, "ours", specs)
    bag.open()
    put = bag.put
    for topic, _, data, stamp in messages:
        while not put(topic, data, stamp):  # never drop here: the same work as rosbags
            bag.queue_drops -= 1
            time.sleep(0.0005)
    bag.close()
    ours = time.process_time() - t0

    # rosbags needs the types in a store: from the same .msg texts, before timing
    from rosbags.typesys import get_types_from_msg

    store = get_typestore(Stores.EMPTY)
    find = share_msg_finder()
    for msgtype in set(types.values()):
        store.register(get_types_from_msg(ros2msg_schema(msgtype, find), msgtype))
    t0 = time.process_time()
    with Writer(out / "rosbags", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, m, typestore=store) for t, m in types.items()}
        write = writer.write
        for topic, _, data, stamp in messages:
            write(conns[topic], stamp, data)
    theirs = time.process_time() - t0
    return ours, theirs


def run() -> None:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    tmp = Path(tempfile.mkdtemp(prefix="bench-recorder-"))
    try:
        for label, shape, rate in CONFIGS:
            out = tmp / f"{shape[0]}b"
            out.mkdir()
            e2e = end_to_end(shape, rate, out, "bench")
            messages, published, recorded = read_bag(out / "bench", e2e["topics"])
            lost = published - recorded
            per_msg = 1e6 * e2e["cpu_s"] / max(len(messages), 1)
            mb = sum(len(m[2]) for m in messages) / 1e6
            ours, theirs = writer_cpu(messages, out)
            n = max(len(messages), 1)
            print(
                f"{label}: recorded {recorded} of {published} frame messages published (lost {lost}); "
                f"{len(messages)} messages, {mb:.1f} MB in {MEASURE_S:.0f} s; "
                f"recorder process {per_msg:.1f} us CPU/message (DDS receive included)",
                flush=True,
            )
            print(
                f"  writer, same bytes: ours {1e6 * ours / n:.1f} us/message, rosbags {1e6 * theirs / n:.1f} "
                f"us/message, ratio ours/rosbags {ours / theirs:.2f} (target <= 1.5)",
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from bench.domain import isolate

    print(f"ROS_DOMAIN_ID={isolate()}")
    run()
