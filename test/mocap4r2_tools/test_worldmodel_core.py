"""worldmodel_server's rclpy-free core: identities, support, states, refusals, the frame
graph and percept verification."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mocap4r2_tools.worldmodel import (
    ACTIVE,
    CONFIRMED,
    DISCARDED,
    INACTIVE,
    FrameGraph,
    ModelError,
    Transform,
    WorldModel,
    parse_identities,
    support_from_ratio,
)
from mocap4r2_tools.worldmodel.model import VERIFY_CONFIRM, VERIFY_DISCARD, VERIFY_UNKNOWN

Q0 = (0.0, 0.0, 0.0, 1.0)


def update(
    model: WorldModel,
    *,
    stamp: float,
    now: float,
    position=(0, 0, 0),
    body: str = "b",
    tracked: bool = True,
    orientation=Q0,
    source: str = "/a/rigid_bodies",
    frame_id: str = "world",
):
    """One body of a RigidBodies message from ``source``, as the server hands it on."""
    return model.update_body(
        source,
        frame_id=frame_id,
        body=body,
        tracked=tracked,
        position=position,
        orientation=orientation,
        stamp=stamp,
        now=now,
    )


def add(
    model: WorldModel,
    object_id: str,
    *,
    frame_id: str = "world",
    position=(0, 0, 0),
    orientation=Q0,
    state: int = ACTIVE,
):
    """An AddObject request for a box at ``stamp`` 0."""
    return model.add_object(
        object_id,
        class_id="box",
        name="",
        frame_id=frame_id,
        position=position,
        orientation=orientation,
        state=state,
        stamp=0.0,
    )


def test_identities_from_config_and_defaults():
    ids = parse_identities(
        ["{body: robot1, class_id: robot, name: Ground robot}", "{body: cup, object_id: cup_7}"]
    )
    assert (ids["robot1"].class_id, ids["robot1"].object_id, ids["robot1"].name) == (
        "robot",
        "robot1",
        "Ground robot",
    )
    assert (ids["cup"].object_id, ids["cup"].name) == ("cup_7", "cup_7")
    for bad in ["[1, 2]", "{class_id: x}", "{body: a, colour: red}", "{body: a", "{body: a}\n{body: a}"]:
        with pytest.raises(ModelError):
            parse_identities([bad])
    with pytest.raises(ModelError, match="twice"):
        parse_identities(["{body: a}", "{body: a}"])
    with pytest.raises(ModelError, match="unique"):
        parse_identities(["{body: a, object_id: x}", "{body: b, object_id: x}"])


def test_support_is_the_log_odds_of_the_tracking_ratio():
    assert support_from_ratio(0.5) == 0.0
    assert support_from_ratio(0.75) == pytest.approx(math.log(3))
    assert support_from_ratio(1.0) == pytest.approx(math.log(99)) == -support_from_ratio(0.0)
    model = WorldModel(support_window=1.0)
    for k in range(100):
        obj, _ = update(model, tracked=k % 4 != 3, position=(0, 0, 0), stamp=k * 0.01, now=k * 0.01)
    assert obj.support == pytest.approx(math.log(3), rel=0.05)


def test_states_active_inactive_and_service_states_stop_updates():
    model = WorldModel(parse_identities(["{body: b, class_id: box}"]), timeout=0.5)
    obj, changed = update(model, position=(1, 2, 3), stamp=10.0, now=0.0)
    assert changed and obj.state == ACTIVE and obj.object_id == "b" and obj.class_id == "box"
    update(model, tracked=False, position=None, orientation=None, stamp=10.1, now=0.1)
    assert model.tick(0.4) == [] and obj.state == ACTIVE
    assert model.tick(0.6) == [obj] and obj.state == INACTIVE
    _, changed = update(model, position=(1, 2, 4), stamp=10.7, now=0.7)
    assert changed and obj.state == ACTIVE
    model.set_state("b", CONFIRMED)
    update(model, position=(9, 9, 9), stamp=10.8, now=0.8)
    assert obj.state == CONFIRMED and obj.position.tolist() == [1, 2, 4]  # updates disabled
    assert model.tick(5.0) == [] and obj.state == CONFIRMED
    model.set_state("b", ACTIVE)
    update(model, position=(9, 9, 9), stamp=10.9, now=5.1)
    assert obj.position.tolist() == [9, 9, 9]


def test_refusals_name_the_problem():
    model = WorldModel()
    update(model, position=(0, 0, 0), stamp=1.0, now=0.0)
    with pytest.raises(ModelError, match="unknown object_id 'nope'.*known: b"):
        model.set_state("nope", ACTIVE)
    with pytest.raises(ModelError, match="invalid state 10"):
        model.set_state("b", 10)
    model.set_state("b", 100)  # a user-defined state, as ObjectState allows
    with pytest.raises(ModelError, match="unknown object_id"):
        model.set_name("x", "y")
    with pytest.raises(ModelError, match="tracked mocap body"):
        add(model, "b")
    with pytest.raises(ModelError, match="unit quaternion"):
        add(model, "", orientation=(0, 0, 0, 0))
    with pytest.raises(ModelError, match="frame"):
        add(model, "", frame_id="")
    added = add(model, "", position=(1, 0, 0), state=0)
    assert added.object_id == "box_1" and added.state == ACTIVE and added.static


def test_untracked_body_is_not_modelled_before_its_first_tracked_frame_and_same_names_do_not_clash():
    model = WorldModel()
    assert update(model, tracked=False, position=None, orientation=None, stamp=1.0, now=0.0) == (None, False)
    update(model, position=(0, 0, 0), stamp=1.0, now=0.0)
    other, _ = update(
        model, source="/c/rigid_bodies", frame_id="mocap", position=(0, 0, 0), stamp=1.0, now=0.0
    )
    assert sorted(model.objects) == ["/c/b", "b"] and other.frame_id == "mocap"
    only = WorldModel(parse_identities(["{body: x}"]), only_configured=True)
    assert update(only, position=(0, 0, 0), stamp=1.0, now=0.0) == (None, False)


def test_frame_graph_lookup_both_ways_and_through_chains():
    g = FrameGraph()
    t_world_map = Transform(np.array([1.0, 0, 0]), Rotation.from_euler("z", 90, degrees=True).as_quat())
    t_map_cam = Transform(np.array([0, 2.0, 0]), Rotation.identity().as_quat())
    assert g.set("world", "map", t_world_map) and g.set("map", "camera", t_map_cam)
    # a point at the camera origin: in map (0, 2, 0), in world (1, 0, 0) + Rz90 (0, 2, 0) = (-1, 0, 0)
    assert np.allclose(g.lookup("world", "camera").apply([0, 0, 0]), [-1, 0, 0])
    assert np.allclose(g.lookup("camera", "world").apply([-1, 0, 0]), [0, 0, 0])
    assert g.lookup("world", "elsewhere") is None
    assert not g.set("a", "a", t_map_cam) and not g.set("", "b", t_map_cam)
    small = FrameGraph(max_frames=2)
    assert small.set("a", "b", t_map_cam) and not small.set("b", "c", t_map_cam)


def test_verify_confirms_discards_and_knows_when_it_cannot_tell():
    model = WorldModel(parse_identities(["{body: cup, class_id: cup}", "{body: robot, class_id: robot}"]))
    update(model, body="cup", position=(1.0, 2.0, 0.5), stamp=1.0, now=0.0)
    update(model, body="robot", position=(0.0, 0.0, 0.0), stamp=1.0, now=0.0)
    assert model.verify("cup", "world", (1.1, 2.0, 0.5), 0.3)[0] == VERIFY_CONFIRM
    assert model.verify("cup", "world", (3.0, 2.0, 0.5), 0.3)[0] == VERIFY_DISCARD
    assert model.verify("robot", "world", (1.1, 2.0, 0.5), 0.3)[0] == VERIFY_DISCARD  # wrong class there
    assert model.verify("plate", "world", (1.0, 2.0, 0.5), 0.3)[0] == VERIFY_DISCARD  # no such class
    assert model.verify("cup", "camera", (0.0, 0.0, 1.0), 0.3)[0] == VERIFY_UNKNOWN  # frames unrelated
    # camera 1 m above the cup, looking down: the cup is 1 m along the camera's z
    model.frames.set(
        "world",
        "camera",
        Transform(np.array([1.0, 2.0, 1.5]), Rotation.from_euler("x", 180, degrees=True).as_quat()),
    )
    assert model.verify("cup", "camera", (0.0, 0.0, 1.0), 0.3)[0] == VERIFY_CONFIRM
    assert model.verify("cup", "camera", (0.0, 0.0, -1.0), 0.3)[0] == VERIFY_DISCARD
    model.set_state("cup", DISCARDED)
    assert model.verify("cup", "world", (1.0, 2.0, 0.5), 0.3)[0] == VERIFY_DISCARD
