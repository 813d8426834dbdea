"""motion_control_interfaces is its specification: text, fields, types and constants.

The specification is the package's rendered interface documentation (shared/seeds, the
file whose text starts with "motion_control_interfaces"), stored with its line breaks
lost. Each interface section there is a description (the interface file's leading
comment) followed by a code block (the rest of the file). The tests check, for each of
the 8 interfaces:

* the .msg/.srv/.action file says word for word what the section says (comments
  included), line breaks aside;
* the generated Python classes have exactly the fields, types and constants declared
  by that file, in order. Together: what the generated code carries is the specification.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from shared_data import require_shared  # test/fixtures

from motion_control_interfaces import action as a
from motion_control_interfaces import msg as m
from motion_control_interfaces import srv as s

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "motion_control_interfaces"
INTERFACES = {
    "Monitor": "msg",
    "MonitorResult": "msg",
    "MonitorResultsStamped": "msg",
    "TrajectoryFeedback": "msg",
    "TrajectoryFeedbackStamped": "msg",
    "TriggerCondition": "msg",
    "GetTrajectoryStatus": "srv",
    "QueueTrajectory": "action",
}


def seed_text() -> str:
    """The seed whose text starts with "motion_control_interfaces" (skips in a clone without
    ../shared/seeds, naming it; fails under CI)."""
    folder = require_shared(
        "seeds", checks="the interface files and generated classes against their specification"
    )
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text()
        if text.lstrip().startswith("motion_control_interfaces"):
            return text
    raise FileNotFoundError(f"no motion_control_interfaces specification in {folder}")


def sections(text: str) -> dict[str, str]:
    """Interface name -> its section text (headings are 'Name ~~~~')."""
    heads = list(re.finditer(r"(\w+) ~{3,}", text))
    out = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[head.end() : end]
        # the next level-1 heading ('Services ----', 'Actions ----') is not part of it
        body = re.split(r"\s\w+ -{5,}\s", body + " ")[0]
        out[head.group(1)] = body
    return out


def words(text: str) -> list[str]:
    return text.split()


def file_as_rendered(path: Path) -> str:
    """The file as the documentation renders it: the leading comment lines (up to the
    first blank or non-comment line) become the description, without '#'."""
    lines = path.read_text().splitlines()
    description = []
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        description.append(lines[i].lstrip("#").strip())
        i += 1
    return " ".join(description + [".. code-block:: text"] + lines[i:])


@pytest.fixture(scope="module")
def spec() -> dict[str, str]:
    return sections(seed_text())


def test_the_specification_has_exactly_these_8_interfaces(spec):
    assert "defines 8 interface(s)" in seed_text()
    assert set(spec) == set(INTERFACES)


@pytest.mark.parametrize("name", list(INTERFACES))
def test_interface_file_says_what_the_specification_says(name, spec):
    path = PACKAGE / INTERFACES[name] / f"{name}.{INTERFACES[name]}"
    expected = words(spec[name])
    mine = words(file_as_rendered(path))
    if name == "GetTrajectoryStatus":
        # the rendering leaves a stray "4" after the last field, before the Actions
        # heading; "uint8 status 4" is not .srv syntax, so it is not part of the interface
        assert expected[-3:] == ["uint8", "status", "4"]
        expected = expected[:-1]
    assert mine == expected, _first_difference(mine, expected)


def _first_difference(a: list[str], b: list[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            window = slice(max(0, i - 5), i + 5)
            return f"word {i}: file {' '.join(a[window])!r} vs spec {' '.join(b[window])!r}"
    return f"lengths {len(a)} vs {len(b)}"


# ------------------------------------------------------------------ generated code
PRIMITIVES = {"float64": "double", "float32": "float", "bool": "boolean"}


def declarations(lines: list[str]) -> tuple[dict[str, str], dict[str, int]]:
    """(fields name -> rosidl type string, constants name -> value) of one part of a file."""
    fields, constants = {}, {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"(\S+)\s+(\w+)\s*=\s*(\S+)", line)
        if match:
            constants[match.group(2)] = int(match.group(3))
            continue
        kind, name = line.split()
        array = kind.endswith("[]")
        base = kind[:-2] if array else kind
        base = PRIMITIVES.get(base, base)
        if base[0].isupper():
            base = f"motion_control_interfaces/{base}"
        fields[name] = f"sequence<{base}>" if array else base
    return fields, constants


def parts(name: str) -> list[list[str]]:
    kind = INTERFACES[name]
    text = (PACKAGE / kind / f"{name}.{kind}").read_text()
    out: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip() == "---":
            out.append([])
        else:
            out[-1].append(line)
    return out


def generated(name: str) -> list[type]:
    kind = INTERFACES[name]
    if kind == "msg":
        return [getattr(m, name)]
    if kind == "srv":
        return [getattr(s, name).Request, getattr(s, name).Response]
    return [getattr(a, name).Goal, getattr(a, name).Result, getattr(a, name).Feedback]


@pytest.mark.parametrize("name", list(INTERFACES))
def test_generated_fields_types_and_constants_are_the_files(name):
    classes = generated(name)
    declared = parts(name)
    assert len(classes) == len(declared)
    for cls, lines in zip(classes, declared):
        fields, constants = declarations(lines)
        got = cls.get_fields_and_field_types()
        assert list(got.items()) == list(fields.items()), cls.__name__
        for constant, value in constants.items():
            assert getattr(cls, constant) == value, f"{cls.__name__}.{constant}"


def test_constants_and_key_fields_by_name():
    """Spelled out once, so a reader sees the contract without running the parser."""
    assert (m.TriggerCondition.RATIO, m.TriggerCondition.TIME, m.TriggerCondition.JOINT_STATE) == (1, 2, 3)
    assert m.TriggerCondition.get_fields_and_field_types() == {
        "ratio_of_trajectory": "double",
        "time_from_start": "builtin_interfaces/Duration",
        "joint_state": "sensor_msgs/JointState",
        "joint_state_tolerances": "sequence<double>",
        "type": "uint8",
    }
    R = s.GetTrajectoryStatus.Response
    assert (R.EXECUTING, R.FINISHED, R.IN_QUEUE, R.UNKNOWN) == (1, 2, 3, 4)
    assert a.QueueTrajectory.Goal.get_fields_and_field_types() == {
        "header": "std_msgs/Header",
        "trajectory": "trajectory_msgs/JointTrajectory",
        "trajectory_id": "string",
        "monitors": "sequence<motion_control_interfaces/Monitor>",
    }
    assert a.QueueTrajectory.Result.get_fields_and_field_types() == {
        "header": "std_msgs/Header",
        "is_finished": "boolean",
    }
    assert a.QueueTrajectory.Feedback.get_fields_and_field_types() == {}
    assert (
        m.TrajectoryFeedback.get_fields_and_field_types()["current_joint_state"] == "sensor_msgs/JointState"
    )
