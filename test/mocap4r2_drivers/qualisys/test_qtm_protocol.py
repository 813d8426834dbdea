"""QTM RT protocol codecs, parameter XML and the packet -> MocapFrame decoder (no sockets).

The byte layouts are checked against Qualisys' own parser (qtm_rt.packet.QRTPacket,
unmodified): what the stand-in packs, the SDK reads back with the same values.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qtm_rt.packet import QRTPacket
from scipy.spatial.transform import Rotation

from mocap4r2_control.adapter import AdapterError
from mocap4r2_drivers.qualisys import protocol as qp
from mocap4r2_drivers.qualisys.client import TimestampMapper, parse_parameters
from mocap4r2_drivers.qualisys.protocol import ComponentType as CT
from mocap4r2_drivers.qualisys.qualisys_system import FrameConverter, QualisysAdapter
from mocap4r2_drivers.qualisys.simulator import SceneStream, parameters_xml
from mocap4r2_drivers.simulated.scene import Scene, default_scene_path

ALL_COMPONENTS = ["6dres", "3dres", "3dnolabelsres", "skeleton:global"]


@pytest.fixture(scope="module")
def scene() -> Scene:
    return Scene.from_file(default_scene_path())


def sdk_packet(packet: bytes) -> QRTPacket:
    """Parse a whole data packet the way qtm-rt does (it strips the 8-byte header)."""
    size, ptype = qp.HEADER.unpack_from(packet)
    assert size == len(packet) and ptype == qp.PacketType.DATA
    return QRTPacket(packet[qp.HEADER.size :])


# ====================================================================== framing
def test_text_packets_are_nul_terminated_with_total_size():
    packet = qp.pack_text(qp.PacketType.COMMAND, "Version 1.25")
    assert packet == struct.pack("<II", 8 + 13, 1) + b"Version 1.25\0"
    assert qp.unpack_text(packet[8:]) == "Version 1.25"
    assert qp.unpack_text(b"no terminator") == "no terminator"
    assert qp.pack_event(qp.Event.QTM_SHUTTING_DOWN) == struct.pack("<II", 9, 6) + bytes([12])


def test_header_bounds_are_enforced():
    assert qp.parse_header(struct.pack("<II", 8, 4)) == (0, qp.PacketType.NO_MORE_DATA)
    with pytest.raises(qp.QtmProtocolError, match="outside"):
        qp.parse_header(struct.pack("<II", 7, 1))
    with pytest.raises(qp.QtmProtocolError, match="outside"):
        qp.parse_header(struct.pack("<II", qp.MAX_PACKET_SIZE + 1, 3))
    with pytest.raises(qp.QtmProtocolError, match="unknown packet type"):
        qp.parse_header(struct.pack("<II", 8, 42))


def test_packet_reader_reassembles_any_chunking():
    stream = (
        qp.pack_text(qp.PacketType.COMMAND, "QTM RT Interface connected")
        + qp.pack_event(qp.Event.CONNECTED)
        + qp.pack(qp.PacketType.NO_MORE_DATA)
        + qp.pack_text(qp.PacketType.XML, "<a/>")
    )
    expected = qp.PacketReader().feed(stream)
    assert [t for t, _ in expected] == [1, 6, 4, 2]
    for chunk in (1, 3, 7, 50):
        reader = qp.PacketReader()
        got = []
        for i in range(0, len(stream), chunk):
            got += reader.feed(stream[i : i + chunk])
        assert got == expected
    with pytest.raises(qp.QtmProtocolError):
        qp.PacketReader(max_size=64).feed(struct.pack("<II", 65, 1))


def test_commands_are_case_insensitive_words():
    assert qp.parse_command("StreamFrames AllFrames 6DRes 3D") == (
        "streamframes",
        ["AllFrames", "6DRes", "3D"],
    )
    assert qp.parse_command("   ") == ("", [])


# ====================================================================== components
def _rotations(n: int, seed: int = 0) -> np.ndarray:
    return Rotation.random(n, random_state=seed).as_matrix()


def test_rotation_matrices_are_column_major_on_the_wire():
    quarter_turn_z = Rotation.from_euler("z", 90, degrees=True).as_matrix()[None]
    flat = qp.matrices_to_qtm(quarter_turn_z)[0]
    # first column (the image of x) is (0, 1, 0) and comes first
    np.testing.assert_allclose(flat, [0, 1, 0, -1, 0, 0, 0, 0, 1], atol=1e-12)
    m = _rotations(5)
    np.testing.assert_allclose(qp.qtm_to_matrices(qp.matrices_to_qtm(m)), m)


def test_matrix_to_quaternion_conversion_matches_scipy_everywhere():
    from mocap4r2_control.rotation import quat_from_matrix as quats_from_matrices

    rotations = Rotation.concatenate(
        [
            Rotation.random(2000, random_state=3),
            # half turns and the identity: each branch of the conversion, and its edges
            Rotation.from_rotvec(
                np.pi * np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.6, 0.8, 0], [0, 0, 0]])
            ),
        ]
    )
    q = quats_from_matrices(rotations.as_matrix())
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0)
    assert (np.abs(np.sum(q * rotations.as_quat(), axis=1)) > 1 - 1e-12).all()


def test_6d_residual_component_reads_back_identically_in_qtm_rt():
    positions = np.array([[100.5, -200.25, 1500.0], [np.nan, np.nan, np.nan], [1.0, 2.0, 3.0]])
    rotations = qp.matrices_to_qtm(_rotations(3))
    residuals = np.array([0.5, np.nan, 1.25])
    packet = qp.encode_frame(
        123456, 42, [qp.pack_bodies(CT.BODIES_6D_RESIDUALS, positions, rotations, residuals_mm=residuals)]
    )
    sdk = sdk_packet(packet)
    assert (sdk.timestamp, sdk.framenumber) == (123456, 42)
    info, bodies = sdk.get_6d_residual()
    assert info.body_count == 3
    for row, (pos, rot, res) in enumerate(bodies):
        if row == 1:
            assert all(math.isnan(v) for v in (*pos, *rot.matrix, res.residual))
            continue
        np.testing.assert_allclose(tuple(pos), positions[row], rtol=1e-6)
        np.testing.assert_allclose(rot.matrix, rotations[row], rtol=1e-6, atol=1e-7)
        assert res.residual == pytest.approx(residuals[row])
    # the missing body carries QTM's "all bits set" NaN
    records = qp.unpack_bodies(
        CT.BODIES_6D_RESIDUALS, qp.decode_frame(packet[8:]).components[CT.BODIES_6D_RESIDUALS]
    )
    assert (records["position"][1].view(np.uint32) == 0xFFFFFFFF).all()
    assert (records["rotation"][1].view(np.uint32) == 0xFFFFFFFF).all()


def test_3d_components_read_back_identically_in_qtm_rt():
    labeled = np.array([[1.0, 2.0, 3.0], [np.nan] * 3, [-4.5, 5.5, 6.5]])
    unlabeled = np.array([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    packet = qp.encode_frame(
        0,
        7,
        [
            qp.pack_markers(CT.MARKERS_3D_RESIDUALS, labeled, residuals_mm=[0.1, 0.2, 0.3]),
            qp.pack_markers(
                CT.MARKERS_3D_NO_LABELS_RESIDUALS, unlabeled, residuals_mm=[1.0, 2.0], ids=[11, 12]
            ),
            qp.pack_markers(CT.MARKERS_3D, labeled),
            qp.pack_markers(CT.MARKERS_3D_NO_LABELS, unlabeled, ids=[5, 6]),
        ],
    )
    sdk = sdk_packet(packet)
    _, res = sdk.get_3d_markers_residual()
    assert [tuple(m)[:3] for m in res][0] == (1.0, 2.0, 3.0)
    assert math.isnan(res[1].x) and res[2].residual == pytest.approx(0.3)
    _, nolabel = sdk.get_3d_markers_no_label_residual()
    assert [(m.x, m.id, m.residual) for m in nolabel] == [(10.0, 11, 1.0), (40.0, 12, 2.0)]
    _, plain = sdk.get_3d_markers()
    assert (plain[2].x, plain[2].y, plain[2].z) == (-4.5, 5.5, 6.5)
    _, nolabel_plain = sdk.get_3d_markers_no_label()
    assert [m.id for m in nolabel_plain] == [5, 6]


def test_skeleton_component_reads_back_identically_in_qtm_rt():
    seg = np.zeros(2, dtype=qp.SEGMENT_DTYPE)
    seg["id"] = [3, 9]
    seg["position"] = [[1, 2, 3], [4, 5, 6]]
    seg["rotation"] = [[0, 0, 0, 1], [0, 0, 0.6, 0.8]]
    packet = qp.encode_frame(0, 1, [qp.pack_skeletons([seg, None, seg[:1]])])
    info, skeletons = sdk_packet(packet).get_skeletons()
    assert info.skeleton_count == 3
    assert [len(s) for s in skeletons] == [2, 0, 1]
    sid, pos, rot = skeletons[0][1]
    assert (
        sid == 9 and tuple(pos) == (4, 5, 6) and rot.z == pytest.approx(0.6) and rot.w == pytest.approx(0.8)
    )
    ours = qp.unpack_skeletons(qp.decode_frame(packet[8:]).components[CT.SKELETON])
    assert [len(s) for s in ours] == [2, 0, 1] and ours[2]["id"][0] == 3


@pytest.mark.parametrize("cut", [1, 4, 9, 17])
def test_truncated_components_raise_protocol_errors(cut):
    full = qp.encode_frame(
        0,
        1,
        [
            qp.pack_bodies(CT.BODIES_6D_RESIDUALS, np.ones((2, 3)), np.ones((2, 9)), residuals_mm=[1, 1]),
            qp.pack_skeletons([np.zeros(2, qp.SEGMENT_DTYPE)]),
        ],
    )
    with pytest.raises(qp.QtmProtocolError):
        packet = qp.decode_frame(full[8:-cut])
        for ctype, data in packet.components.items():
            if ctype == CT.SKELETON:
                qp.unpack_skeletons(data)
            else:
                qp.unpack_bodies(ctype, data)


def test_counts_that_do_not_fit_are_refused_without_allocating():
    lying = qp.pack_component(CT.MARKERS_3D, qp.COUNT_AND_RATES.pack(2**30, 0, 0))
    comps = qp.decode_frame(qp.encode_frame(0, 0, [lying])[8:]).components
    with pytest.raises(qp.QtmProtocolError, match="do not fit"):
        qp.unpack_markers(CT.MARKERS_3D, comps[CT.MARKERS_3D])
    negative = qp.pack_component(CT.SKELETON, struct.pack("<ii", 1, -5))
    with pytest.raises(qp.QtmProtocolError, match="negative"):
        qp.unpack_skeletons(qp.decode_frame(qp.encode_frame(0, 0, [negative])[8:]).components[CT.SKELETON])
    with pytest.raises(qp.QtmProtocolError, match="not a 3D"):
        qp.unpack_markers(CT.BODIES_6D, memoryview(b"\0" * 8))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_protocol_errors(blob):
    try:
        packet = qp.decode_frame(blob)
        for ctype, data in packet.components.items():
            if ctype in qp.MARKER_DTYPES:
                qp.unpack_markers(ctype, data)
            elif ctype in qp.BODY_DTYPES:
                qp.unpack_bodies(ctype, data)
            elif ctype == CT.SKELETON:
                qp.unpack_skeletons(data)
    except qp.QtmProtocolError:
        pass


# ====================================================================== parameter XML
@pytest.mark.parametrize("version", ["1.20", "1.21", "1.25"])
def test_parameter_xml_round_trips_for_each_layout(scene, version):
    xml = parameters_xml(scene, ["general", "3d", "6d", "skeleton:global"], version)
    assert xml.startswith(f"<QTM_Parameters_Ver_{version}>")
    params = parse_parameters(xml)
    d = scene.description
    assert params.frequency == scene.rate and params.axis_upwards == "+Z"
    assert params.labels == tuple(n for b in d.bodies for n in b.marker_names)
    assert [b.name for b in params.bodies] == [b.name for b in d.bodies]
    np.testing.assert_allclose(params.bodies[1].points_mm, d.bodies[1].marker_layout * 1000.0, atol=1e-6)
    # point names exist from 1.21 on; before, bodies and labels are not linked
    expected_points = d.bodies[0].marker_names if version >= "1.21" else ()
    assert params.bodies[0].point_names == expected_points
    (skeleton,) = params.skeletons
    assert skeleton.name == d.skeletons[0].name
    np.testing.assert_array_equal(skeleton.segment_ids, d.skeletons[0].segment_ids)
    np.testing.assert_array_equal(skeleton.parent_ids, d.skeletons[0].parent_ids)
    assert skeleton.segment_names == d.skeletons[0].segment_names


def test_parameters_as_qtm_writes_them_are_understood():
    # the shape of a real QTM 1.25 answer, with elements this driver does not use
    xml = """<QTM_Parameters_Ver_1.25>
      <General><Frequency>100</Frequency><Capture_Time>10.0</Capture_Time><Camera><ID>1</ID></Camera></General>
      <The_3D><AxisUpwards>+Y</AxisUpwards><CalibrationTime>2019-09-17 16:00:43</CalibrationTime>
        <Labels>2</Labels>
        <Label><Name>Table - 1</Name><RGBColor>16711680</RGBColor>
          <Trajectory_Type>Measured</Trajectory_Type></Label>
        <Label><Name>Table - 2</Name><RGBColor>16711680</RGBColor><Trajectory_Type>-</Trajectory_Type></Label>
        <Bones><Bone From="Table - 1" To="Table - 2" Color="1"/></Bones></The_3D>
      <The_6D><Body><Name>Table</Name><Enabled>true</Enabled><Color R="0" G="0" B="255"/>
        <Points><Point X="1.5" Y="2" Z="3" Virtual="0" PhysicalId="0" Name="Table - 1"/>
                <Point X="4" Y="5" Z="6" Virtual="0" PhysicalId="0" Name="Table - 2"/></Points>
        <Data_origin X="0" Y="0" Z="0" Relative_body="1">0</Data_origin></Body></The_6D>
      <Skeletons><Skeleton Name="VF"><Segment Name="Hips" ID="752"><Position X="1" Y="2" Z="3"/></Segment>
        <Segment Name="Waist" ID="753" Parent_ID="752"/><Segment Name="Chest" ID="754" Parent_ID="753"/>
      </Skeleton></Skeletons>
    </QTM_Parameters_Ver_1.25>"""
    params = parse_parameters(xml)
    assert params.frequency == 100.0 and params.axis_upwards == "+Y"
    assert params.labels == ("Table - 1", "Table - 2")
    assert params.bodies[0].point_names == ("Table - 1", "Table - 2")
    assert params.bodies[0].points_mm[0].tolist() == [1.5, 2.0, 3.0]
    assert params.skeletons[0].parent_ids.tolist() == [-1, 752, 753]


def test_invalid_xml_is_a_clear_error():
    from mocap4r2_drivers.qualisys.client import QtmConnectionError

    with pytest.raises(QtmConnectionError, match="not valid XML"):
        parse_parameters(b"<QTM_Parameters_Ver_1.25><General>")


# ====================================================================== time
def test_timestamp_mapper_uses_the_least_delayed_frame_and_restarts():
    mapper = TimestampMapper(window=10.0)
    base = 1000.0
    # frame at t=0 arrives 3 ms late, frame at t=0.01 only 1 ms late
    assert mapper.capture_time(0, base + 0.003) == pytest.approx(base + 0.003)
    assert mapper.capture_time(10_000, base + 0.011) == pytest.approx(base + 0.011)
    # a later frame delayed 20 ms is stamped with the 1 ms offset: never after arrival
    assert mapper.capture_time(20_000, base + 0.040) == pytest.approx(base + 0.021)
    # older offsets leave the window
    assert mapper.capture_time(20_000_000, base + 20.050) == pytest.approx(base + 20.050)
    # a new measurement starts the clock again
    assert mapper.capture_time(0, base + 30.0) == pytest.approx(base + 30.0)


# ====================================================================== decoder
def _decode(scene: Scene, k: int, components=ALL_COMPONENTS, version="1.25", xml_edit=None):
    xml = parameters_xml(scene, ["general", "3d", "6d", "skeleton:global"], version)
    if xml_edit:
        xml = xml_edit(xml)
    decoder = FrameConverter(parse_parameters(xml))
    packet = SceneStream(scene).packet(k, list(components))
    return decoder, decoder.convert(packet[8:])


def _quat_close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(np.sum(a * b, axis=1)) > 1 - 1e-6


def test_decoded_frames_equal_the_scene_frames(scene):
    for k in (0, 1, 777, 1300, 5000):
        decoder, frame = _decode(scene, k)
        expected = scene.frame(k)
        frame.check()
        assert frame.frame_number == k
        b, e = frame.bodies, expected.bodies
        assert b.names == e.names and b.ids.tolist() == e.ids.tolist()
        np.testing.assert_array_equal(b.valid, e.valid)
        np.testing.assert_allclose(b.positions[b.valid], e.positions[e.valid], atol=2e-6)
        assert _quat_close(b.orientations[b.valid], e.orientations[e.valid]).all()
        np.testing.assert_allclose(b.mean_errors, e.mean_errors, atol=1e-6)
        np.testing.assert_array_equal(b.marker_offsets, e.marker_offsets)
        assert b.markers.names == e.markers.names
        m, em = frame.markers, expected.markers
        np.testing.assert_array_equal(m.occluded, em.occluded)
        np.testing.assert_allclose(m.positions[~m.occluded], em.positions[~em.occluded], atol=2e-6)
        np.testing.assert_allclose(m.residuals, em.residuals, atol=1e-6)
        assert m.names == em.names
        assert (m.ids[-scene.unlabeled :] == -1).all()
        s, es = frame.skeletons, expected.skeletons
        assert s.names == es.names and s.valid.tolist() == es.valid.tolist()
        np.testing.assert_array_equal(s.segments.parent_ids, es.segments.parent_ids)
        ok = s.segments.valid
        np.testing.assert_array_equal(ok, es.segments.valid)
        np.testing.assert_allclose(s.segments.positions[ok], es.segments.positions[ok], atol=2e-6)
        assert _quat_close(s.segments.orientations[ok], es.segments.orientations[ok]).all()


def test_untracked_bodies_and_unseen_skeletons_decode_as_invalid():
    scene = Scene(
        {
            "rate": 100,
            "rigid_bodies": [
                {
                    "name": "hider",
                    "trajectory": {"type": "static", "position": [0, 0, 1]},
                    "tracking_loss": {"every": 2.0, "duration": 1.0},
                }
            ],
            "skeletons": [{"name": "ghost", "tracking_loss": {"every": 2.0, "duration": 1.0}}],
        },
        seed=1,
    )
    _, seen = _decode(scene, 10)
    _, lost = _decode(scene, 150)  # t = 1.5 s: both lost
    assert seen.bodies.valid.tolist() == [True] and seen.skeletons.valid.tolist() == [True]
    assert lost.bodies.valid.tolist() == [False] and lost.skeletons.valid.tolist() == [False]
    assert not lost.skeletons.segments.valid.any()
    assert lost.bodies.markers.occluded.all()


def test_y_up_qtm_data_is_turned_z_up(scene):
    _, z_up = _decode(scene, 50)
    _, y_up = _decode(scene, 50, xml_edit=lambda x: x.replace("<AxisUpwards>+Z", "<AxisUpwards>+Y"))
    # QTM's Y axis up: what it calls (x, y, z) is (x, -z, y) in a Z-up frame
    b = z_up.bodies
    np.testing.assert_allclose(y_up.bodies.positions[:, 0], b.positions[:, 0])
    np.testing.assert_allclose(y_up.bodies.positions[:, 1], -b.positions[:, 2])
    np.testing.assert_allclose(y_up.bodies.positions[:, 2], b.positions[:, 1])
    # the body's orientation is conjugated by the same +90 degrees about x
    q = Rotation.from_quat(b.orientations)
    turn = Rotation.from_euler("x", 90, degrees=True)
    expected = (turn * q * turn.inv()).as_quat()
    assert _quat_close(y_up.bodies.orientations, expected).all()


def test_changed_qtm_settings_give_generated_names_not_a_crash(scene):
    # QTM now streams one more body and label than its parameters announced
    xml = parameters_xml(scene, ["general", "3d", "6d"], "1.25")
    params = parse_parameters(xml)
    smaller = type(params)(frequency=params.frequency, labels=params.labels[:-1], bodies=params.bodies[:-1])
    decoder = FrameConverter(smaller)
    frame = decoder.convert(SceneStream(scene).packet(3, ["6dres", "3dres"])[8:])
    frame.check()
    assert frame.bodies.names[-1] == "body4" and frame.markers.names[-1] == "marker16"
    assert len(frame.bodies.markers) == 0 and decoder.mismatches == 2


# ====================================================================== adapter parameters
def _values(**changes):
    values = {spec.name: spec.default for spec in QualisysAdapter.parameters}
    values.update(changes)
    return values


def test_adapter_parameters_are_validated():
    specs = {spec.name: spec for spec in QualisysAdapter.parameters}
    assert specs["components"].validate(["6dres", "6d"]) is not None
    assert specs["components"].validate(["2d"]) is not None
    assert specs["components"].validate([]) is not None
    assert specs["components"].validate(["3d", "skeleton:global"]) is None
    assert specs["protocol_version"].validate("1.25") is None
    assert specs["protocol_version"].validate("2.0") is not None
    assert specs["port"].validate(0) is not None
    with pytest.raises(AdapterError, match="components"):
        QualisysAdapter.from_parameters(_values(components=["skeleton"]))
    adapter = QualisysAdapter.from_parameters(_values(port=4000))
    assert adapter.port == 4000 and adapter.components == [
        "6dres",
        "3dres",
        "3dnolabelsres",
        "skeleton:global",
    ]


def test_connect_failure_is_an_adapter_error_with_the_reason():
    adapter = QualisysAdapter.from_parameters(_values(port=1, connect_timeout=2.0, reconnect_period=0.0))
    with pytest.raises(AdapterError, match="cannot connect to QTM at 127.0.0.1:2"):
        adapter.connect()
    adapter.disconnect()
    adapter.disconnect()  # twice is fine


def test_an_undecodable_packet_is_dropped_counted_and_the_stream_goes_on(scene):
    from types import SimpleNamespace

    good = SceneStream(scene).packet(5, ["6dres", "3dres"])
    queue = [
        (SimpleNamespace(data=b"\x01\x02garbage", timestamp=0), 100.0),
        (SimpleNamespace(data=good[8:-7], timestamp=0), 100.0),  # truncated
        (SimpleNamespace(data=good[8:], timestamp=50_000), 100.06),
    ]
    adapter = QualisysAdapter.from_parameters(_values())
    adapter.client = SimpleNamespace(get=lambda timeout: queue.pop(0) if queue else None, connected=True)
    xml = parameters_xml(scene, ["general", "3d", "6d"], "1.25")
    adapter.converter = FrameConverter(parse_parameters(xml))
    assert adapter.read_frame(0.1) is None
    assert adapter.read_frame(0.1) is None
    frame = adapter.read_frame(0.1)
    assert frame.frame_number == 5 and frame.capture_time == pytest.approx(100.06)
    adapter.client = None
    assert adapter.decode_errors == 2 and adapter.status()["decode_errors"] == "2"


WORDS = [
    "version",
    "1.25",
    "1.x",
    "qtmversion",
    "byteorder",
    "getstate",
    "getparameters",
    "all",
    "3d",
    "6d",
    "skeleton:global",
    "getcurrentframe",
    "streamframes",
    "allframes",
    "frequency:0",
    "frequency:-3",
    "frequencydivisor:0",
    "frequencydivisor:2",
    "stop",
    "udp:1234",
    "6dres",
    "3dnolabelsres",
    "analog",
    "takecontrol",
    "releasecontrol",
    "new",
    "quit",
    "\u00e9",
    "",
    "*",
    "12345678901234567890",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(WORDS), max_size=6),
    st.sampled_from([qp.PacketType.COMMAND, qp.PacketType.XML, qp.PacketType.DATA]),
)
def test_the_stand_in_answers_any_request_without_failing(scene, words, packet_type):
    from mocap4r2_drivers.qualisys.simulator import QtmSimulator, Session

    class Writer:
        def __init__(self):
            self.data = bytearray()

        def write(self, data):
            self.data += data

    simulator = QtmSimulator(scene)
    session = Session(writer=Writer(), peer="test:1")
    simulator.sessions.append(session)
    simulator._handle(session, packet_type, " ".join(words).encode() + b"\0")
    replies = qp.PacketReader().feed(bytes(session.writer.data))
    # streaming requests and stop are silent; anything else gets exactly one answer
    if not (words and words[0] == "streamframes" and session.stream is not None) and words[:2] != [
        "streamframes",
        "stop",
    ]:
        assert len(replies) == 1, (words, replies)
