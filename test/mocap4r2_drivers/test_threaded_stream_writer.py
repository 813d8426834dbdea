"""sim_server.ThreadedStreamWriter on a real asyncio TCP connection, alone (the QTM and
VRPN stand-ins' tests cover it through their sessions): two threads write, the client
gets every write whole and in the order written, also when the socket was full and the
frame thread had to hand its bytes to the loop; a backlog over its budget refuses the
frame thread's writes (FULL), and a closed session writes nothing (GONE)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mocap4r2_drivers.sim_server import ThreadedStreamWriter, ThreadWrite

CHUNK = 1000  # every write is one chunk: a tag, a sequence number, filler


def chunk(tag: bytes, number: int) -> bytes:
    head = tag + b"%07d" % number
    return head + tag * (CHUNK - len(head))


class Server:
    """An asyncio loop on its own thread accepting one connection, wrapped in a writer."""

    def __init__(self, max_send_buffer: int = ThreadedStreamWriter.MAX_SEND_BUFFER) -> None:
        self.loop = asyncio.new_event_loop()
        self.closed = False
        self.handed_over = 0  # the frame thread's writes handed to the loop
        self.writer: ThreadedStreamWriter | None = None
        self.ready = threading.Event()
        self.max_send_buffer = max_send_buffer
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # a small send buffer, so the socket fills after a few writes
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            self.writer = ThreadedStreamWriter(writer, self.loop, lambda: self.closed, self.max_send_buffer)
            hand_over = self.writer.hand_over

            def counted(data: bytes) -> bool:
                self.handed_over += 1
                return hand_over(data)

            self.writer.hand_over = counted  # type: ignore[method-assign]
            self.ready.set()

        server = self.loop.run_until_complete(asyncio.start_server(accept, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()
        server.close()

    def from_loop(self, data: bytes) -> None:
        assert self.writer is not None
        self.loop.call_soon_threadsafe(self.writer.write_from_loop, data)

    def from_thread(self, data: bytes) -> ThreadWrite:
        assert self.writer is not None
        with self.writer.lock:
            return self.writer.write_from_thread(data)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@contextmanager
def connected(
    max_send_buffer: int = ThreadedStreamWriter.MAX_SEND_BUFFER,
) -> Iterator[tuple[Server, socket.socket]]:
    server = Server(max_send_buffer)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills after a few chunks
    client.connect(("127.0.0.1", server.port))
    try:
        assert server.ready.wait(10)
        yield server, client
    finally:
        client.close()
        server.stop()


def read_chunks(client: socket.socket, count: int) -> list[bytes]:
    data = b""
    client.settimeout(10)
    while len(data) < count * CHUNK:
        got = client.recv(1 << 16)
        if not got:
            break
        data += got
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def test_two_writers_bytes_arrive_whole_and_in_each_writers_order_through_a_full_socket():
    n = 300  # 600 kB in all: far more than the client's receive buffer and the socket's
    with connected() as (server, client):
        outcomes = []
        assert server.writer is not None
        for k in range(n):
            # the loop asks to write L k while the frame thread holds the lock and writes
            # T k: the loop's write comes second, so L k must follow T k, also when T k
            # was handed over to the loop and waits in its queue
            with server.writer.lock:
                server.from_loop(chunk(b"L", k))
                time.sleep(0.0002)  # the loop reaches the lock, or at least has L k queued
                outcomes.append(server.writer.write_from_thread(chunk(b"T", k)))
        # a write refused (FULL: MAX_HANDED_OVER hand-overs the loop had not taken yet) is
        # lost, as the contract says; the others must all arrive
        written = [k for k, o in enumerate(outcomes) if o is ThreadWrite.WRITTEN]
        assert len(written) > n // 2 and set(outcomes) <= {ThreadWrite.WRITTEN, ThreadWrite.FULL}
        # the client has not read: the frame thread found the transport holding bytes
        # and handed some of its writes to the loop
        assert server.handed_over > 0
        chunks = read_chunks(client, n + len(written))
    assert len(chunks) == n + len(written)
    by_tag: dict[bytes, list[int]] = {b"L": [], b"T": []}
    place: dict[tuple[bytes, int], int] = {}
    for at, c in enumerate(chunks):
        tag = c[:1]
        assert c == chunk(tag, int(c[1:8])), "a write arrived cut or interleaved with another"
        by_tag[tag].append(int(c[1:8]))
        place[tag, int(c[1:8])] = at
    # across the two writers too: what the loop wrote after a frame-thread write that was
    # handed over did not overtake it
    assert all(place[b"T", k] < place[b"L", k] for k in written)
    assert by_tag[b"L"] == list(range(n))
    assert by_tag[b"T"] == written


def test_a_backlog_over_its_budget_refuses_the_frame_threads_writes():
    with connected(max_send_buffer=20 * CHUNK) as (server, _client):  # the client never reads
        outcomes = []
        deadline = time.monotonic() + 10
        while ThreadWrite.FULL not in outcomes and time.monotonic() < deadline:
            outcomes.append(server.from_thread(chunk(b"T", len(outcomes))))
            time.sleep(0.001)  # the loop takes what was handed over into its transport
        assert outcomes[-1] is ThreadWrite.FULL
        assert all(o is ThreadWrite.WRITTEN for o in outcomes[:-1])
        assert server.writer is not None
        buffered = server.writer.writer.transport.get_write_buffer_size()
        assert buffered > 20 * CHUNK  # it refused only once over the budget
        # and keeps refusing while the client is that far behind
        assert server.from_thread(chunk(b"T", 0)) is ThreadWrite.FULL


@pytest.mark.parametrize("how", ["session closed", "client gone"])
def test_a_closed_session_or_a_reset_connection_writes_nothing(how):
    with connected() as (server, client):
        assert server.from_thread(chunk(b"T", 0)) is ThreadWrite.WRITTEN
        assert read_chunks(client, 1) == [chunk(b"T", 0)]
        if how == "session closed":
            server.closed = True
            assert server.from_thread(chunk(b"T", 1)) is ThreadWrite.GONE
            server.from_loop(chunk(b"L", 1))
            client.settimeout(0.3)
            with pytest.raises(TimeoutError):
                client.recv(CHUNK)  # neither thread's write went out
        else:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            client.close()  # a reset
            deadline = time.monotonic() + 10
            outcome = ThreadWrite.WRITTEN
            while outcome is ThreadWrite.WRITTEN and time.monotonic() < deadline:
                outcome = server.from_thread(chunk(b"T", 2))
                time.sleep(0.01)
            assert outcome is ThreadWrite.GONE
