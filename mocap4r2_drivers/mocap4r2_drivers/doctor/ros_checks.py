"""ROS checks: the environment that decides who sees whom (domain, discovery range,
RMW), the systems announced on /mocap4r2/systems and their states, and the QoS of data
topics against the subscribers present (a reliable subscriber on a best-effort
publisher receives nothing, without an error on either side)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .report import Check, failed, noted, passed, warned

AREA = "ros"
# topic types whose publishers and subscribers are compared
DATA_TYPES = (
    "mocap4r2_interfaces/msg/Markers",
    "mocap4r2_interfaces/msg/RigidBodies",
    "mocap4r2_interfaces/msg/Skeletons",
)


def check_environment(env: Mapping[str, str], rmw: str) -> list[Check]:
    """Two machines see each other only with the same domain, discovery range and RMW."""
    domain = env.get("ROS_DOMAIN_ID", "")
    out = []
    if domain and not (domain.isdigit() and 0 <= int(domain) <= 232):
        out.append(
            failed(
                "ROS_DOMAIN_ID",
                f"ROS_DOMAIN_ID={domain!r} is not a domain id (0..232)",
                "export ROS_DOMAIN_ID=<0..232>, the same on every machine of the lab",
                AREA,
            )
        )
    else:
        out.append(
            passed(
                "ROS_DOMAIN_ID",
                f"{domain or 'unset (0)'}: only nodes with the same id are seen",
                AREA,
            )
        )
    discovery = env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "")
    localhost_only = env.get("ROS_LOCALHOST_ONLY", "")
    evidence = (
        f"ROS_AUTOMATIC_DISCOVERY_RANGE={discovery or 'unset (SUBNET)'}, "
        f"ROS_LOCALHOST_ONLY={localhost_only or 'unset'}"
    )
    if localhost_only == "1" and discovery and discovery.upper() != "LOCALHOST":
        out.append(
            warned(
                "discovery range",
                evidence + ": contradictory (ROS_LOCALHOST_ONLY is deprecated and may win)",
                "unset ROS_LOCALHOST_ONLY and keep ROS_AUTOMATIC_DISCOVERY_RANGE only",
                AREA,
            )
        )
    elif discovery.upper() in ("LOCALHOST", "OFF") or localhost_only == "1":
        out.append(
            noted(
                "discovery range",
                evidence + ": only this machine's nodes are seen (a system on another machine is not)",
                AREA,
            )
        )
    else:
        out.append(noted("discovery range", evidence, AREA))
    # which RMW is right depends on the other machines: shown, not judged
    out.append(
        noted(
            "RMW implementation",
            f"{rmw} (RMW_IMPLEMENTATION={env.get('RMW_IMPLEMENTATION', 'unset')}): every machine "
            "must use the same one",
            AREA,
        )
    )
    return out


def check_systems(systems: Mapping[str, Any]) -> list[Check]:
    """Each announced system's lifecycle state: only an active system streams."""
    if not systems:
        return [
            warned(
                "systems on /mocap4r2/systems",
                "no system announced itself",
                "start the system's node (ros2 launch mocap4r2_drivers <system>.launch.py); on "
                "another machine: same ROS_DOMAIN_ID and RMW, and a discovery range that reaches it",
                AREA,
            )
        ]
    out = []
    for name, info in systems.items():
        label = info.state.label
        title = f"system {name} ({info.type})"
        if label == "active":
            session = f", session {info.session_id}" if info.session_id else ""
            out.append(passed(title, f"active at {info.frame_rate:g} Hz{session}", AREA))
        elif label == "unconfigured":
            out.append(
                warned(
                    title,
                    "unconfigured: not connected to the mocap software, nothing is published",
                    f"run `mocap4r2 start` (or `mocap4r2 start --systems {name}`); if it stays "
                    "unconfigured, its log says why configure failed",
                    AREA,
                )
            )
        elif label == "inactive":
            out.append(warned(title, "inactive: connected but not streaming", "run `mocap4r2 start`", AREA))
        else:
            out.append(failed(title, f"{label}", "restart the system's node", AREA))
    return out


def _reliable(endpoint: Any) -> bool:
    from rclpy.qos import ReliabilityPolicy

    return bool(endpoint.qos_profile.reliability == ReliabilityPolicy.RELIABLE)


def _transient_local(endpoint: Any) -> bool:
    from rclpy.qos import DurabilityPolicy

    return bool(endpoint.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL)


def _who(endpoint: Any) -> str:
    namespace = endpoint.node_namespace.rstrip("/")
    return f"{namespace}/{endpoint.node_name}"


def check_topic_qos(topic: str, publishers: Sequence[Any], subscribers: Sequence[Any]) -> list[Check]:
    """Each subscriber against each publisher of ``topic`` (rclpy TopicEndpointInfo):
    a reliable subscriber gets nothing from a best-effort publisher, nor a transient-local
    one from a volatile publisher."""
    out = []
    for sub in subscribers:
        for pub in publishers:
            problems = []
            if _reliable(sub) and not _reliable(pub):
                problems.append("the subscriber asks for RELIABLE, the publisher offers BEST_EFFORT")
            if _transient_local(sub) and not _transient_local(pub):
                problems.append("the subscriber asks for TRANSIENT_LOCAL, the publisher offers VOLATILE")
            if problems:
                out.append(
                    failed(
                        f"QoS of {topic}: {_who(sub)} <- {_who(pub)}",
                        "; ".join(problems) + ": the subscriber receives nothing (no error anywhere)",
                        f"subscribe to {topic} with best effort (rclpy.qos.qos_profile_sensor_data), "
                        "or set qos_reliable: true on the system",
                        AREA,
                    )
                )
    if not out and publishers:
        out.append(
            passed(
                f"QoS of {topic}",
                f"{len(publishers)} publisher(s), {len(subscribers)} subscriber(s), compatible",
                AREA,
            )
        )
    return out


def data_topics(node: Any, announced: Mapping[str, Any]) -> list[str]:
    """The mocap data topics in the graph, and those announced by systems."""
    topics = {name for name, types in node.get_topic_names_and_types() if any(t in DATA_TYPES for t in types)}
    for info in announced.values():
        topics.update(t for t in info.topics if not t.endswith("/tf"))
    return sorted(topics)


def check_qos(node: Any, topics: Sequence[str]) -> list[Check]:
    """:func:`check_topic_qos` for each topic, with the endpoints ``node`` sees."""
    out: list[Check] = []
    for topic in topics:
        out += check_topic_qos(
            topic,
            node.get_publishers_info_by_topic(topic),
            node.get_subscriptions_info_by_topic(topic),
        )
    return out


def ros_environment() -> tuple[dict[str, str], str]:
    """The environment and the RMW implementation this process uses."""
    from rclpy.utilities import get_rmw_implementation_identifier

    return dict(os.environ), get_rmw_implementation_identifier()


def check_publishers(node: Any, topics: Sequence[str], source: str, fix: str) -> list[Check]:
    """A system fed by ROS topics (Gazebo through ros_gz_bridge) gets nothing while no
    node publishes them."""
    out = []
    for topic in topics:
        publishers = node.get_publishers_info_by_topic(topic)
        title = f"{source} on {topic}"
        if publishers:
            names = ", ".join(sorted({_who(p) for p in publishers}))
            out.append(passed(title, f"published by {names}", AREA))
        else:
            out.append(failed(title, f"no node publishes {topic}", fix, AREA))
    return out
