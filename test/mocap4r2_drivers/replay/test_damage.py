"""What is wrong with a file replay cannot read, in the user's terms (replay/damage.py,
through open_source): random bytes are another kind of file and are not offered the
repair of a session cut short; empty files and an unset ``file`` parameter are told
apart; an MCAP file or a bag folder cut short are offered ``mocap4r2 recover``; a C3D cut
inside its parameter section says how much of it is there (the c3d library said only
"unpack requires a buffer of 2 bytes")."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from session_fixture import record_session  # noqa: E402

from mocap4r2_drivers.replay.readers import ReplayFileError, open_source  # noqa: E402


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return record_session(tmp_path_factory.mktemp("sessions"))


def test_a_c3d_cut_inside_its_parameter_section_says_so(session, tmp_path):
    """A C3D written by `mocap4r2 export`, cut 2 and 40 bytes into its parameter section:
    the c3d library says only "unpack requires a buffer of 2 bytes"."""
    from mocap4r2_tools.recording.export import marker_table, read_bag, write_c3d

    directory, _, _ = session
    data = write_c3d(marker_table(read_bag(directory, "/sim")), tmp_path / "s1.c3d").read_bytes()
    start = (data[0] - 1) * 512
    declared = data[start + 2] * 512
    for into in (2, 40):
        path = tmp_path / f"cut{into}.c3d"
        path.write_bytes(data[: start + into])
        with pytest.raises(ReplayFileError) as refused:
            open_source(path)
        said = str(refused.value)
        assert said.startswith(f"{path} is cut short inside its parameter section")
        assert f"{into} of its {declared} bytes are there" in said or (
            into == 2 and "2 bytes of it are there, not even its 4-byte header" in said
        ), said


def test_a_file_of_random_bytes_is_not_offered_the_repair_of_a_cut_session(tmp_path):
    """Random bytes named .mcap (or .db3, .c3d) are another kind of file, not a session
    cut short: 'mocap4r2 recover' cannot help, and is not offered."""
    noise = np.random.default_rng(7).bytes(4096)
    for name, words in (
        ("noise.mcap", "is not an MCAP file: it starts with"),
        ("noise.db3", "is not an SQLite database"),
        ("noise.c3d", "is not a C3D file: its second byte is"),
    ):
        path = tmp_path / name
        path.write_bytes(noise)
        with pytest.raises(ReplayFileError) as refused:
            open_source(path)
        assert str(refused.value).startswith(f"{path} {words}") and "recover" not in str(refused.value)


def test_empty_files_and_an_empty_file_parameter_are_told_apart(tmp_path):
    with pytest.raises(ReplayFileError, match=r"^no file to replay: the parameter 'file' is not set"):
        open_source("")
    for name in ("empty.mcap", "empty.c3d"):
        path = tmp_path / name
        path.write_bytes(b"")
        with pytest.raises(ReplayFileError, match=rf"^{path} is an empty file \(0 bytes\)"):
            open_source(path)


def test_a_bag_folder_cut_short_is_offered_the_repair(session, tmp_path):
    """A bag whose recorder died: its .mcap has no footer (and the folder may lack its
    metadata.yaml): 'mocap4r2 recover' is the way, and is named."""
    directory, _, _ = session
    data = (directory / "s1_0.mcap").read_bytes()
    bag = tmp_path / "cut_bag"
    bag.mkdir()
    (bag / "s1_0.mcap").write_bytes(data[: len(data) // 2])
    with pytest.raises(ReplayFileError, match=r"has no metadata.yaml.*'mocap4r2 recover"):
        open_source(bag)
    (bag / "metadata.yaml").write_bytes((directory / "metadata.yaml").read_bytes())
    with pytest.raises(ReplayFileError, match=r"is an MCAP file cut short.*'mocap4r2 recover"):
        open_source(bag)
