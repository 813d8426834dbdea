"""nodelay.set_nodelay against foxglove-sdk's own server, in this process: the SDK
accepts its WebSocket clients with Nagle's algorithm on (the reason the module exists;
checked here so that an SDK that starts setting it shows), and set_nodelay turns it off
on the server's side of each client connection only."""

from __future__ import annotations

import os
import socket
import sys

import foxglove
import pytest

from bench.bench_foxglove import handshake
from mocap4r2_tools.foxglove.nodelay import set_nodelay

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd is Linux's")


def _server_side(client: socket.socket) -> socket.socket:
    """This process's socket whose peer is ``client``: the SDK's end of the connection,
    found by the address pair (not by the server's port, as set_nodelay finds it)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.getpeername() == client.getsockname():
                return sock
        except OSError:
            pass
        sock.close()
    raise AssertionError("the server's end of the client connection was not found")


def test_the_sdks_client_connections_get_tcp_nodelay_and_nothing_else_does():
    context = foxglove.Context()
    server = foxglove.start_server(host="127.0.0.1", port=0, context=context)
    clients = [handshake(server.port) for _ in range(2)]
    try:
        ends = [_server_side(c) for c in clients]
        nodelay = socket.IPPROTO_TCP, socket.TCP_NODELAY
        assert [end.getsockopt(*nodelay) for end in ends] == [0, 0], "the SDK now sets TCP_NODELAY itself"
        assert set_nodelay(server.port) == 2
        assert [end.getsockopt(*nodelay) for end in ends] == [1, 1]
        # the clients' own sockets (in this process too) are not the server's: untouched
        assert [c.getsockopt(*nodelay) for c in clients] == [0, 0]
        # set already: nothing to change; the connections still work after it
        assert set_nodelay(server.port) == 0
        assert set_nodelay(1) == 0  # no server there
        for end in ends:
            end.close()  # the duplicates only
        clients[0].settimeout(5.0)
        assert clients[0].recv(1), "the server's end must stay open (set_nodelay closes its duplicates)"
    finally:
        for c in clients:
            c.close()
        server.stop()
