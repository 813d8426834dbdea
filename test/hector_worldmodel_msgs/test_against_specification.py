"""hector_worldmodel_msgs for ROS 2 against its specification: the ROS 1 package's
documented message and service definitions (test/fixtures/specs/hector_worldmodel_msgs-0.3.3.txt,
the package's index page). Every message and service exists, with the same fields in
the same order, the same types (ROS 1's Header as std_msgs/Header) and the same
constants; and a model crosses DDS intact."""

from __future__ import annotations

import importlib
import re
import time
from pathlib import Path

import pytest

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "specs" / "hector_worldmodel_msgs-0.3.3.txt"
PACKAGE = "hector_worldmodel_msgs"
DEFINITION = re.compile(r"^([A-Za-z][A-Za-z0-9_/]*(?:\[\])?)\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*(\S+))?\s*$")
SECTION = re.compile(rf"^{PACKAGE}/([A-Za-z0-9]+)$")
PRIMITIVES = {"float32": "float", "float64": "double", "bool": "boolean", "Header": "std_msgs/Header"}


def parse_spec() -> tuple[dict, dict]:
    """{message: part}, {service: (request part, response part)}; a part is
    (fields [(type, name)], constants {name: (type, value)})."""
    messages, services = {}, {}
    kind, name, parts, in_block = "msg", None, None, False
    sections = []
    for raw in SPEC.read_text().splitlines():
        line = raw.strip()
        if line == "Service types":
            kind = "srv"
            continue
        match = SECTION.match(line)
        if match:
            name, parts, in_block = match.group(1), [([], {})], False
            sections.append((kind, name, parts))
            continue
        if parts is None:
            continue
        # the page repeats the comments as prose first; the definition starts at its first comment
        in_block = in_block or line.startswith("#")
        if not in_block:
            continue
        if line == "---":
            parts.append(([], {}))
            continue
        definition = DEFINITION.match(line)
        if definition and not line.startswith("#"):
            ftype, fname, value = definition.groups()
            if value is None:
                parts[-1][0].append((ftype, fname))
            else:
                parts[-1][1][fname] = (ftype, value)
    for kind, name, parts in sections:
        if kind == "msg":
            messages[name] = parts[0]
        else:
            assert len(parts) == 2, f"service {name}: request and response expected"
            services[name] = (parts[0], parts[1])
    return messages, services


MESSAGES, SERVICES = parse_spec()


def ros2_type(ros1: str) -> str:
    sequence = ros1.endswith("[]")
    base = ros1[:-2] if sequence else ros1
    base = PRIMITIVES.get(base, base)
    if base[0].isupper():
        base = f"{PACKAGE}/{base}"
    return f"sequence<{base}>" if sequence else base


def check_part(cls, part) -> None:
    fields, constants = part
    assert list(cls.get_fields_and_field_types().items()) == [(n, ros2_type(t)) for t, n in fields]
    for cname, (_ctype, value) in constants.items():
        assert getattr(cls, cname) == int(value), cname


def test_the_specification_parses_to_every_type():
    assert sorted(MESSAGES) == [
        "ImagePercept",
        "Object",
        "ObjectInfo",
        "ObjectModel",
        "ObjectState",
        "PerceptInfo",
        "PosePercept",
    ]
    assert sorted(SERVICES) == [
        "AddObject",
        "GetObjectModel",
        "SetObjectName",
        "SetObjectState",
        "VerifyObject",
        "VerifyPercept",
    ]
    assert MESSAGES["ObjectState"][1]["CONFIRMED"] == ("int8", "-1")
    assert SERVICES["VerifyPercept"][1][1]["CONFIRM"] == ("uint8", "2")


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_message_matches_the_specification(name):
    module = importlib.import_module(f"{PACKAGE}.msg")
    check_part(getattr(module, name), MESSAGES[name])


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_matches_the_specification(name):
    srv = getattr(importlib.import_module(f"{PACKAGE}.srv"), name)
    check_part(srv.Request, SERVICES[name][0])
    check_part(srv.Response, SERVICES[name][1])


def test_no_type_beyond_the_specification():
    from support import INSTALL

    share = INSTALL / PACKAGE / "share" / PACKAGE
    assert sorted(p.stem for p in (share / "msg").glob("*.msg")) == sorted(MESSAGES)
    assert sorted(p.stem for p in (share / "srv").glob("*.srv")) == sorted(SERVICES)


def test_object_model_crosses_dds(ros):
    from geometry_msgs.msg import Point
    from std_msgs.msg import Header

    from hector_worldmodel_msgs.msg import Object, ObjectInfo, ObjectModel, ObjectState

    model = ObjectModel(
        header=Header(frame_id="world"),
        objects=[
            Object(
                header=Header(frame_id="world"),
                info=ObjectInfo(class_id="cup", object_id=f"cup_{i}", name="Tasse é", support=2.5 - i),
                state=ObjectState(state=ObjectState.CONFIRMED if i else ObjectState.ACTIVE),
            )
            for i in range(3)
        ],
    )
    model.objects[1].pose.pose.position = Point(x=1.0, y=-2.0, z=0.5)
    model.objects[2].pose.covariance[35] = 0.25
    received = ros.subscribe("/hector_roundtrip", ObjectModel)
    pub = ros.publisher("/hector_roundtrip", ObjectModel)
    deadline = time.monotonic() + 20
    while not received.snapshot() and time.monotonic() < deadline:
        pub.publish(model)
        time.sleep(0.1)
    assert received.wait_for(timeout=5) == model
