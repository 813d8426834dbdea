"""The marker_tracker's ``~/teach`` service: teaching a body from the frames the tracker reads.

Teaching is apart from tracking: it reads its own parameters as they are when a request
comes (the node hands their new values over as they are set, see
:meth:`TeachService.settings_changed`), waits
on another thread for ``teach_seconds`` of source time while the reader thread keeps
tracking, and only borrows the points of each frame (:meth:`TeachService.add`). The
averaging itself is tracking/teach.py's, the same as `mocap4r2 teach` on a topic. No ROS
here: the service is declared as a :class:`~mocap4r2_control.adapter.ServiceOffer` of
:meth:`TeachService.answer`, and the system node creates it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mocap4r2_control.adapter import AdapterError
from mocap4r2_tools.tracking.teach import Teacher, TeachError, TeachingWindow, taught_text, write_body

# the node's logger, not one of this module's: what the service logs reads as the node's
_LOG = logging.getLogger("mocap4r2.marker_tracker")

TEACH_MARGIN_S = 5.0  # how long a teach request waits for frames beyond teach_seconds
# the parameters a request reads, with their defaults (the adapter declares them)
TEACH_SETTINGS: dict[str, Any] = {
    "teach_name": "",
    "teach_near": [0.0, 0.0, 0.0],
    "teach_radius": 0.15,
    "teach_seconds": 1.0,
    "teach_axes": "pca",
    "teach_file": "",
}


class TeachService:
    """``~/teach`` (std_srvs/Trigger) of one marker_tracker node, and the frames it is fed
    while a request waits."""

    def __init__(self, markers_topic: str) -> None:
        self.markers_topic = markers_topic  # named in the answer when the source is silent
        self.settings: dict[str, Any] = dict(TEACH_SETTINGS)
        self._window: TeachingWindow | None = None

    def settings_changed(self, values: Mapping[str, Any]) -> set[str]:
        """Take the new values of the teach parameters among ``values`` (the next request
        reads them); the names taken."""
        taken = {name: value for name, value in values.items() if name in TEACH_SETTINGS}
        self.settings = {**self.settings, **taken}
        return set(taken)

    def add(self, points: np.ndarray, stamp: float) -> None:
        """One tracked frame's points (reader thread): kept only while a request waits."""
        window = self._window
        if window is not None:
            window.add(points, stamp)

    def answer(self, request: Any, response: Any) -> Any:
        """A ``~/teach`` request answered: the taught YAML, or why nothing was taught."""
        try:
            response.message = self.teach()
            response.success = True
        except (TeachError, AdapterError) as exc:
            response.success, response.message = False, str(exc)
        except Exception as exc:  # noqa: BLE001 - a request must never take the node down
            _LOG.error("teach failed: %r", exc)
            response.success, response.message = False, f"internal error: {exc!r}"
        return response

    def teach(self) -> str:
        """Teach the still cluster at ``teach_near`` from the next ``teach_seconds`` of the
        frames this tracker reads (tracking/teach.py: the same averaging as `mocap4r2
        teach`); the layout and body as bodies-file YAML, also added to ``teach_file``
        when one is set. TeachError says why nothing was taught."""
        settings = self.settings  # as they are now, for the whole request
        name = str(settings["teach_name"])
        if not name or ":" in name:
            raise TeachError("set the parameter teach_name to a name without ':' first")
        seconds = float(settings["teach_seconds"])
        near = np.asarray(settings["teach_near"], dtype=np.float64)
        window = TeachingWindow(Teacher(near=near, radius=float(settings["teach_radius"])), seconds)
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
        layout, position = window.teacher.layout(str(settings["teach_axes"]))
        text = taught_text(name, layout, position)
        target = str(settings["teach_file"])
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
