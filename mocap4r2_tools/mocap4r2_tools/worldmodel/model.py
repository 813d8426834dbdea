"""A hector-style object model whose objects are the tracked bodies of mocap systems.

The vocabulary is hector_worldmodel_msgs': an object has an ObjectInfo (class_id,
object_id, name, support), a pose in a frame and an ObjectState. Here:

* **Identity**: a body's class_id, object_id and name come from the configuration;
  object_id defaults to the body name (prefixed with the source when two systems have a
  body of the same name).
* **Support**: the log-odds ``log(r / (1 - r))`` of the body's tracking ratio ``r`` over
  the last ``support_window`` seconds (``r`` clipped to [0.01, 0.99], so support lies in
  about [-4.6, 4.6]); a body tracked in every frame is strongly believed present.
* **State**: ACTIVE while tracked, INACTIVE after ``timeout`` s without tracking, ACTIVE
  again when tracked. States below 0 (CONFIRMED, DISCARDED, APPROACHING, user states)
  are set by a service and, as hector_worldmodel_msgs/ObjectState says, disable all
  updates of the object until a state >= 0 is set again.
* Objects added by hand (AddObject) are static: never updated by mocap.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import yaml

from mocap4r2_control.rotation import FloatArray

from .frames import FrameGraph, Transform

# hector_worldmodel_msgs/ObjectState
UNKNOWN, PENDING, ACTIVE, INACTIVE = 0, 1, 2, 3
CONFIRMED, DISCARDED, APPROACHING = -1, -2, -3
STATE_NAMES = {
    UNKNOWN: "UNKNOWN",
    PENDING: "PENDING",
    ACTIVE: "ACTIVE",
    INACTIVE: "INACTIVE",
    CONFIRMED: "CONFIRMED",
    DISCARDED: "DISCARDED",
    APPROACHING: "APPROACHING",
}
# hector_worldmodel_msgs/VerifyPercept response
VERIFY_UNKNOWN, VERIFY_DISCARD, VERIFY_CONFIRM = 0, 1, 2

RATIO_CLIP = 0.01


class ModelError(ValueError):
    """A refused request; the message says why."""


def valid_state(state: int) -> bool:
    """Predefined states, and the user-defined range ObjectState leaves free (< 0, > 63)."""
    return state in STATE_NAMES or state < 0 or 63 < state <= 127


def state_name(state: int) -> str:
    """The ObjectState constant's name, or "user state N"."""
    return STATE_NAMES.get(state, f"user state {state}")


def support_from_ratio(ratio: float) -> float:
    """The log-odds support of a tracked ratio, clipped so that it stays finite."""
    r = min(1.0 - RATIO_CLIP, max(RATIO_CLIP, ratio))
    return math.log(r / (1.0 - r))


@dataclass(frozen=True)
class Identity:
    """What a configured body is in the model: class, object id and display name."""

    body: str
    class_id: str
    object_id: str
    name: str


def parse_identities(entries: list[str]) -> dict[str, Identity]:
    """Identities from the ``objects`` parameter: each entry a YAML mapping with ``body``
    and optional ``class_id``, ``object_id`` (default: the body), ``name`` (default:
    the object id). Raises ModelError naming the bad entry."""
    out: dict[str, Identity] = {}
    for entry in entries:
        try:
            item = yaml.safe_load(entry)
        except yaml.YAMLError as error:
            raise ModelError(f"objects entry {entry!r} is not YAML: {error}") from None
        if not isinstance(item, dict) or not isinstance(item.get("body"), str) or not item["body"]:
            raise ModelError(
                f"objects entry {entry!r} must be a mapping with a body name, "
                'e.g. "{body: robot1, class_id: robot, name: Robot 1}"'
            )
        unknown = set(item) - {"body", "class_id", "object_id", "name"}
        if unknown:
            raise ModelError(f"objects entry {entry!r}: unknown keys {sorted(unknown)}")
        body = item["body"]
        if body in out:
            raise ModelError(f"objects entry {entry!r}: body {body!r} configured twice")
        object_id = str(item.get("object_id") or body)
        out[body] = Identity(
            body, str(item.get("class_id", "")), object_id, str(item.get("name") or object_id)
        )
    ids = [i.object_id for i in out.values()]
    if len(set(ids)) != len(ids):
        raise ModelError(f"objects: object ids must be unique, got {ids}")
    return out


@dataclass
class WorldObject:
    """One object of the model: a mocap body or one added by hand (``static``)."""

    object_id: str
    class_id: str
    name: str
    frame_id: str
    position: FloatArray
    orientation: FloatArray  # x, y, z, w
    state: int
    stamp: float = 0.0  # capture time of the pose, s
    support: float = 0.0
    source: str = ""  # rigid_bodies topic ("" for an object added by hand)
    body: str = ""
    last_tracked: float = -math.inf  # monotonic
    tracked: bool = False
    history: deque[tuple[float, bool]] = field(default_factory=lambda: deque(maxlen=8192))  # (now, tracked)

    @property
    def static(self) -> bool:
        return not self.source


class WorldModel:
    """The objects, their states and support, and the frames to relate percepts to them."""

    def __init__(
        self,
        identities: dict[str, Identity] | None = None,
        *,
        default_class_id: str = "mocap_body",
        only_configured: bool = False,
        timeout: float = 1.0,
        support_window: float = 2.0,
        max_objects: int = 1000,
    ):
        self.identities = identities or {}
        self.default_class_id = default_class_id
        self.only_configured = only_configured
        self.timeout = timeout
        self.support_window = support_window
        self.max_objects = max_objects
        self.objects: dict[str, WorldObject] = {}
        self._by_body: dict[tuple[str, str], str] = {}  # (source, body) -> object_id
        self.frames = FrameGraph()

    # ------------------------------------------------------------------ mocap input
    def _object_for(self, source: str, body: str, frame_id: str) -> WorldObject | None:
        key = (source, body)
        object_id = self._by_body.get(key)
        if object_id is not None:
            return self.objects[object_id]
        identity = self.identities.get(body)
        if identity is None and self.only_configured:
            return None
        if len(self.objects) >= self.max_objects:
            return None
        if identity is None:
            identity = Identity(body, self.default_class_id, body, body)
        object_id = identity.object_id
        if object_id in self.objects:  # the same body name in a second system
            object_id = f"{source.rstrip('/').rsplit('/', 1)[0] or source}/{body}"
            if object_id in self.objects:
                return None
        obj = WorldObject(
            object_id,
            identity.class_id,
            identity.name,
            frame_id,
            np.zeros(3),
            np.array([0.0, 0.0, 0.0, 1.0]),
            PENDING,
            source=source,
            body=body,
        )
        self.objects[object_id] = obj
        self._by_body[key] = object_id
        return obj

    def update_body(
        self,
        source: str,
        *,
        frame_id: str,
        body: str,
        tracked: bool,
        position: npt.ArrayLike | None,  # read only when tracked
        orientation: npt.ArrayLike | None,  # read only when tracked
        stamp: float,
        now: float,
    ) -> tuple[WorldObject | None, bool]:
        """One body of one rigid_bodies message. Returns (object, state_changed); the
        object is None when the body is not modelled (unconfigured with
        only_configured, or the object budget reached). A body is modelled from its
        first tracked frame on."""
        if not tracked and (source, body) not in self._by_body:
            return None, False
        obj = self._object_for(source, body, frame_id)
        if obj is None:
            return None, False
        if obj.state < 0:
            return obj, False  # CONFIRMED, DISCARDED, ...: updates disabled
        obj.history.append((now, tracked))
        while obj.history and now - obj.history[0][0] > self.support_window:
            obj.history.popleft()
        ratio = sum(1 for _, ok in obj.history if ok) / len(obj.history)
        obj.support = support_from_ratio(ratio)
        obj.tracked = tracked
        changed = False
        if tracked:
            obj.frame_id = frame_id
            obj.position = np.asarray(position, dtype=np.float64)
            obj.orientation = np.asarray(orientation, dtype=np.float64)
            obj.stamp = stamp
            obj.last_tracked = now
            if obj.state != ACTIVE:
                obj.state, changed = ACTIVE, True
        return obj, changed

    def tick(self, now: float) -> list[WorldObject]:
        """ACTIVE objects untracked for ``timeout`` s become INACTIVE; returns them."""
        changed = []
        for obj in self.objects.values():
            if not obj.static and obj.state == ACTIVE and now - obj.last_tracked > self.timeout:
                obj.state = INACTIVE
                obj.tracked = False
                changed.append(obj)
        return changed

    # ------------------------------------------------------------------ services
    def get(self, object_id: str) -> WorldObject:
        obj = self.objects.get(object_id)
        if obj is None:
            known = ", ".join(sorted(self.objects)[:20]) or "none"
            raise ModelError(f"unknown object_id {object_id!r} (known: {known})")
        return obj

    def set_state(self, object_id: str, state: int) -> WorldObject:
        obj = self.get(object_id)
        if not valid_state(state):
            raise ModelError(
                f"invalid state {state}: ObjectState defines {sorted(STATE_NAMES)}; "
                "user states are < 0 or > 63"
            )
        obj.state = state
        return obj

    def set_name(self, object_id: str, name: str) -> WorldObject:
        obj = self.get(object_id)
        obj.name = name
        return obj

    def add_object(
        self,
        object_id: str,
        *,
        class_id: str,
        name: str,
        frame_id: str,
        position: npt.ArrayLike,
        orientation: npt.ArrayLike,
        state: int,
        stamp: float,
    ) -> WorldObject:
        """A static object added by hand; a new id when ``object_id`` is empty."""
        if not frame_id:
            raise ModelError("the object's header.frame_id is empty: a pose needs a frame")
        p = np.asarray(position, dtype=np.float64)
        q = np.asarray(orientation, dtype=np.float64)
        norm = float(np.linalg.norm(q))
        if not (np.isfinite(p).all() and np.isfinite(norm)) or abs(norm - 1.0) > 1e-3:
            raise ModelError("the object's pose must be finite with a unit quaternion")
        if not valid_state(state):
            raise ModelError(f"invalid state {state}")
        if not object_id:
            n = 1
            while f"{class_id or 'object'}_{n}" in self.objects:
                n += 1
            object_id = f"{class_id or 'object'}_{n}"
        existing = self.objects.get(object_id)
        if existing is not None and not existing.static:
            raise ModelError(
                f"object_id {object_id!r} is a tracked mocap body; it cannot be replaced by hand"
            )
        if existing is None and len(self.objects) >= self.max_objects:
            raise ModelError(f"the model holds {self.max_objects} objects already")
        obj = WorldObject(
            object_id,
            class_id,
            name or object_id,
            frame_id,
            p,
            q / norm,
            state if state != UNKNOWN else ACTIVE,
            stamp=stamp,
            support=support_from_ratio(1.0),
        )
        self.objects[object_id] = obj
        return obj

    def verify(
        self, class_id: str, frame_id: str, position: npt.ArrayLike, distance: float
    ) -> tuple[int, str]:
        """(VerifyPercept response, reason): CONFIRM when an object of ``class_id``
        (tracked now, or static; not DISCARDED) lies within ``distance`` of ``position``
        given in ``frame_id``; DISCARD when every such object can be related to that
        frame and none is close (or there is none); UNKNOWN when none is close but some
        could not be related (no transform between the frames)."""
        point = np.asarray(position, dtype=float)
        if not frame_id or not np.isfinite(point).all():
            return VERIFY_UNKNOWN, "percept without a frame or with a non-finite position"
        unrelated: list[str] = []
        nearest = math.inf
        candidates = [
            o
            for o in self.objects.values()
            if o.class_id == class_id and o.state != DISCARDED and (o.static or o.tracked)
        ]
        for obj in candidates:
            t: Transform | None = self.frames.lookup(frame_id, obj.frame_id)
            if t is None:
                unrelated.append(obj.object_id)
                continue
            d = float(np.linalg.norm(t.apply(obj.position) - point))
            nearest = min(nearest, d)
            if d <= distance:
                return VERIFY_CONFIRM, f"object {obj.object_id!r} is {d:.3f} m from the percept"
        if unrelated:
            return VERIFY_UNKNOWN, (
                f"no transform from frame {frame_id!r} to the frames of {', '.join(unrelated[:10])}"
            )
        if not candidates:
            return VERIFY_DISCARD, f"no tracked object of class {class_id!r}"
        return VERIFY_DISCARD, f"the nearest object of class {class_id!r} is {nearest:.3f} m away"
