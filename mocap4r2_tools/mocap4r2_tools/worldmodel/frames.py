"""The newest transform of every /tf and /tf_static edge, and lookups through them.

A world model must relate a percept given in a camera or map frame to the mocap
system's frame. Where tf2_ros exists a tf2 buffer would interpolate in time; the model
needs no more than the newest transform of each edge (mocap objects are compared with a
percept at the time it is verified), and this small graph works with or without tf2_ros.
Edges are looked up in both directions; a lookup is a breadth-first search over at most
``max_frames`` frames.
"""

from __future__ import annotations

import builtins
from collections import deque

from mocap4r2_control.geometry import Transform

__all__ = ["FrameGraph", "Transform"]


class FrameGraph:
    """The newest transform of every edge; lookups through chains (see the module doc)."""

    def __init__(self, max_frames: int = 1000):
        self.max_frames = max_frames
        self._edges: dict[str, dict[str, Transform]] = {}  # parent -> child -> T_parent_child

    def set(self, parent: str, child: str, transform: Transform) -> bool:
        """Store the newest parent -> child transform; False when refused (a frame
        budget reached, an empty or self-referencing name)."""
        parent, child = parent.lstrip("/"), child.lstrip("/")
        if not parent or not child or parent == child:
            return False
        known = self.frames()
        new = {parent, child} - known
        if len(known) + len(new) > self.max_frames:
            return False
        # one edge per child (tf's tree): a re-parented child drops its old edge
        for p, children in self._edges.items():
            if p != parent and child in children:
                del children[child]
        self._edges.setdefault(parent, {})[child] = transform
        return True

    def frames(self) -> builtins.set[str]:  # this class's own set() hides the builtin here
        out = set(self._edges)
        for children in self._edges.values():
            out.update(children)
        return out

    def lookup(self, target: str, source: str) -> Transform | None:
        """T_target_source (maps points in ``source`` to ``target``), or None when the
        two frames are not connected."""
        target, source = target.lstrip("/"), source.lstrip("/")
        if target == source:
            return Transform.identity()
        neighbours: dict[str, list[tuple[str, Transform]]] = {}
        for parent, children in self._edges.items():
            for child, t in children.items():
                neighbours.setdefault(parent, []).append((child, t))  # parent <- child
                neighbours.setdefault(child, []).append((parent, t.inverse()))  # child <- parent
        # search from target: reach[f] = T_target_f
        reach = {target: Transform.identity()}
        queue = deque([target])
        while queue:
            frame = queue.popleft()
            for other, t_frame_other in neighbours.get(frame, ()):
                if other not in reach:
                    reach[other] = reach[frame] * t_frame_other
                    if other == source:
                        return reach[other]
                    queue.append(other)
        return None
