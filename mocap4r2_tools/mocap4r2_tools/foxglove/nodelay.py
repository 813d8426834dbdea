"""TCP_NODELAY on the Foxglove clients' connections, which foxglove-sdk leaves off.

foxglove-sdk 0.30 accepts its WebSocket clients with Nagle's algorithm on. At
``max_rate`` 60 the node writes a few small messages every 16 ms, and a write that follows
one not acknowledged yet is held by the kernel until the client's delayed ACK comes, up to
40 ms on Linux: the bench measured a p99 of 41 ms at rest at ``max_rate`` 60 against
18 ms sending every frame (a steady stream keeps the ACKs coming). Foxglove's own ROS
bridge sets TCP_NODELAY on every client socket for this reason
(foxglove/ros-foxglove-bridge pull request 24). The SDK gives no hook to its sockets, but
they are this process's own file descriptors: :func:`set_nodelay` finds the connected
TCP sockets whose local port is the server's and sets the option on them (through a
duplicate of the descriptor, which shares the socket). Linux only (/proc/self/fd);
elsewhere it finds nothing and changes nothing. No rclpy here.
"""

from __future__ import annotations

import contextlib
import os
import socket

_FD_DIR = "/proc/self/fd"


def set_nodelay(port: int) -> int:
    """Set TCP_NODELAY on every connected TCP socket of this process whose local port
    is ``port`` (the server's clients; the listening socket has no peer and is left
    alone); returns how many had it off. Never raises: a descriptor closed meanwhile or
    not a socket is skipped."""
    changed = 0
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return 0
    for name in names:
        try:
            if not os.readlink(f"{_FD_DIR}/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue  # closed since the listing, or not a socket this module can open
        with contextlib.closing(sock):  # closes the duplicate only; the SDK's stays open
            try:
                if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                if sock.getsockname()[1] != port:
                    continue
                sock.getpeername()  # OSError for the listening socket
                if not sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    changed += 1
            except OSError:
                continue
    return changed
