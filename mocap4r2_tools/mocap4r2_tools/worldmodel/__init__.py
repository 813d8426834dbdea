"""rclpy-free core of the worldmodel_server tool: the object model of tracked bodies
(:mod:`.model`) and the frame graph it relates percepts through (:mod:`.frames`)."""

from .frames import FrameGraph, Transform
from .model import (
    ACTIVE,
    APPROACHING,
    CONFIRMED,
    DISCARDED,
    INACTIVE,
    PENDING,
    UNKNOWN,
    Identity,
    ModelError,
    WorldModel,
    WorldObject,
    parse_identities,
    support_from_ratio,
    valid_state,
)
from .model import (
    state_name as state_name_of,
)

__all__ = [
    "FrameGraph",
    "Transform",
    "ACTIVE",
    "APPROACHING",
    "CONFIRMED",
    "DISCARDED",
    "INACTIVE",
    "PENDING",
    "UNKNOWN",
    "Identity",
    "ModelError",
    "state_name_of",
    "WorldModel",
    "WorldObject",
    "parse_identities",
    "support_from_ratio",
    "valid_state",
]
