"""The marker_tracker's ``~/teach`` service: teaching a body from the frames the tracker reads.

Teaching is apart from tracking: it reads its own parameters when a request comes, waits
on another thread for ``teach_seconds`` of source time while the reader thread keeps
tracking, and only borrows the points of each frame (:meth:`TeachService.add`). The
averaging itself is tracking/teach.py's, the same as `mocap4r2 teach` on a topic.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from mocap4r2_control.adapter import AdapterError
from mocap4r2_tools.tracking.teach import Teacher, TeachError, TeachingWindow, taught_text, write_body

# the node's logger, not one of this module's: what the service logs reads as the node's
_LOG = logging.getLogger("mocap4r2.marker_tracker")

TEACH_MARGIN_S = 5.0  # how long a teach request waits for frames beyond teach_seconds


class TeachService:
    """``~/teach`` (std_srvs/Trigger) of one marker_tracker node, and the frames it is fed
    while a request waits."""

    def __init__(self, markers_topic: str) -> None:
        self.markers_topic = markers_topic  # named in the answer when the source is silent
        self._node: Any = None
        self._service: Any = None
        self._window: TeachingWindow | None = None

    def offer(self, node: Any) -> None:
        """Create the service on ``node`` once; later calls (a new connect) keep it."""
        from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
        from std_srvs.srv import Trigger

        self._node = node
        if self._service is None:
            # a group of its own: the request waits for frames while the subscription
            # (its own group, the executor's other thread) keeps taking them in
            self._service = node.create_service(
                Trigger, "~/teach", self._on_teach, callback_group=MutuallyExclusiveCallbackGroup()
            )

    def withdraw(self) -> None:
        """Destroy the service (a disconnect); a request waiting is not answered."""
        service, self._service = self._service, None
        if service is not None and self._node is not None:
            with contextlib.suppress(Exception):  # the node is being destroyed already
                self._node.destroy_service(service)

    def add(self, points: np.ndarray, stamp: float) -> None:
        """One tracked frame's points (reader thread): kept only while a request waits."""
        window = self._window
        if window is not None:
            window.add(points, stamp)

    def _on_teach(self, request: Any, response: Any) -> Any:
        try:
            response.message = self.teach(self._node)
            response.success = True
        except (TeachError, AdapterError) as exc:
            response.success, response.message = False, str(exc)
        except Exception as exc:  # noqa: BLE001 - a request must never take the node down
            _LOG.error("teach failed: %r", exc)
            response.success, response.message = False, f"internal error: {exc!r}"
        return response

    def teach(self, node: Any) -> str:
        """Teach the still cluster at ``teach_near`` from the next ``teach_seconds`` of the
        frames this tracker reads (tracking/teach.py: the same averaging as `mocap4r2
        teach`); the layout and body as bodies-file YAML, also added to ``teach_file``
        when one is set. TeachError says why nothing was taught."""
        if node is None:
            raise AdapterError("not attached to a node")
        name = str(node.value("teach_name"))
        if not name or ":" in name:
            raise TeachError("set the parameter teach_name to a name without ':' first")
        seconds = float(node.value("teach_seconds"))
        near = np.asarray(node.value("teach_near"), dtype=np.float64)
        window = TeachingWindow(Teacher(near=near, radius=float(node.value("teach_radius"))), seconds)
        self._window = window
        try:
            full = window.wait(seconds + TEACH_MARGIN_S)
        finally:
            self._window = None
        if not full:
            raise TeachError(
                f"{window.frames} frames from {self.markers_topic} in {seconds + TEACH_MARGIN_S:g} s, "
                f"not {seconds:g} s of them: is the tracker active and its source streaming?"
            )
        layout, position = window.teacher.layout(str(node.value("teach_axes")))
        text = taught_text(name, layout, position)
        target = str(node.value("teach_file"))
        if target:
            write_body(Path(target), name, layout, position)
        skipped = ", ".join(f"{n} {r}" for r, n in window.teacher.skipped.items())
        _LOG.info(
            "taught %r: %d markers from %d frames%s%s",
            name,
            len(layout),
            window.teacher.frames,
            f" (skipped: {skipped})" if skipped else "",
            f", added to {target}" if target else "",
        )
        return text
