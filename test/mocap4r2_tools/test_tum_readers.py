"""The two TUM readers of trajectory/io.py give the same array, and the same as evo.

read_tum takes numpy's C reader for plain files (a million poses need it) and the careful
line-by-line reader for anything else, or when the fast one refuses a file. Both are run
here on the same files, written the ways real datasets write them (comments, blank lines,
scientific notation, CRLF, tabs, commas, a UTF-8 byte order mark), and must agree to the
bit; evo's own TUM reader (evo.tools.file_interface) must read the same values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mocap4r2_tools import eval_command as eval_cli
from mocap4r2_tools.trajectory import io as tum_io
from mocap4r2_tools.trajectory.io import parse_tum_careful, parse_tum_fast, read_tum
from mocap4r2_tools.trajectory.poses import TrajectoryInputError

evo_files = pytest.importorskip("evo.tools.file_interface", reason="evo is the reference TUM reader")

ROWS = [
    "1305031102.175304 1.3405 0.6266 1.6575 0.6574 0.6126 -0.2949 -0.3248",
    "1305031102.185304 1.3405e0 6.266E-1 1.66e+00 0.6574 0.6126 -0.2949 -0.3248",
    "1305031102.195304 -0.0 +0.5 2.5e-07 -1.5E-3 0.0 0.0 1",
    "1305031102.205304123 3.141592653589793 2.718281828459045 1e-300 0.1 0.2 0.3 0.9",
]
PLAIN = {
    "spaces": "\n".join(ROWS) + "\n",
    "header and comments": "# timestamp tx ty tz qx qy qz qw\n"
    + ROWS[0]
    + "\n#\n# mid comment\n"
    + "\n".join(ROWS[1:])
    + "\n",
    "blank lines": "\n" + ROWS[0] + "\n\n\n" + "\n".join(ROWS[1:]) + "\n\n",
    "CRLF": "# header\r\n" + "\r\n".join(ROWS) + "\r\n",
    "no final newline": "\n".join(ROWS),
    "tabs and runs of spaces": "\n".join(r.replace(" ", "\t", 2).replace(" ", "   ") for r in ROWS) + "\n",
    "commas": "# t,x,y,z,qx,qy,qz,qw\n" + "\n".join(r.replace(" ", ",") for r in ROWS) + "\n",
    "comma and space": "\n".join(r.replace(" ", ", ") for r in ROWS) + "\n",
    "trailing spaces": "\n".join(r + "   " for r in ROWS) + "\n",
}


def both(path: Path) -> tuple[np.ndarray | None, np.ndarray]:
    scan = tum_io._check_text(path)
    fast = parse_tum_fast(path, scan) if scan.plain else None
    return fast, parse_tum_careful(path)


def expected_rows() -> np.ndarray:
    return np.array([[float(v) for v in row.split()] for row in ROWS])


@pytest.mark.parametrize("case", sorted(PLAIN))
def test_fast_and_careful_readers_agree_to_the_bit(tmp_path, case):
    path = tmp_path / "t.txt"
    path.write_bytes(PLAIN[case].encode())
    fast, careful = both(path)
    assert fast is not None, f"{case}: the fast reader refused a plain file"
    assert fast.shape == careful.shape == (len(ROWS), 8)
    assert fast.tobytes() == careful.tobytes(), f"{case}: fast {fast!r} careful {careful!r}"
    assert careful.tobytes() == expected_rows().tobytes()
    assert np.signbit(careful[2, 1]), "-0.0 keeps its sign"
    assert read_tum(path).stamps.tobytes() == careful[:, 0].tobytes()


def test_many_random_values_round_trip_through_both_readers(tmp_path):
    rng = np.random.default_rng(7)
    values = np.c_[
        1.6e9 + np.cumsum(rng.uniform(1e-4, 1e-2, 3000)),
        rng.normal(0, 10, (3000, 3)) * 10.0 ** rng.integers(-8, 8, (3000, 3)),
        rng.normal(0, 1, (3000, 4)),
    ]
    lines = [" ".join(repr(float(v)) if k % 2 else f"{v:.17g}" for k, v in enumerate(row)) for row in values]
    path = tmp_path / "random.tum"
    path.write_text("# random\n" + "\n".join(lines) + "\n")
    fast, careful = both(path)
    assert fast is not None
    assert fast.tobytes() == careful.tobytes() == values.tobytes()


def test_evo_reads_the_same_values(tmp_path):
    """evo's reader splits on single spaces only, so the file is written its way; a UTF-8
    byte order mark, which evo skips, is skipped here too."""
    text = "# timestamp tx ty tz qx qy qz qw\n" + "\n".join(ROWS) + "\n"
    for name, data in (("plain.tum", text.encode()), ("bom.tum", b"\xef\xbb\xbf" + text.encode())):
        path = tmp_path / name
        path.write_bytes(data)
        theirs = evo_files.read_tum_trajectory_file(str(path))
        ours = read_tum(path)
        assert ours.stamps.tobytes() == theirs.timestamps.tobytes(), name
        assert ours.positions.tobytes() == theirs.positions_xyz.tobytes(), name
        # evo normalises nothing on reading; both normalise the same rows the same way
        raw = parse_tum_careful(path)
        assert (
            raw[:, 4:].tobytes() == np.roll(np.asarray(theirs.orientations_quat_wxyz), -1, axis=1).tobytes()
        )


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("0 0 0 0 0 0 0 1\n1 1 0 0 0 0 0 1 # moved\n", 2, "10 fields"),
        ("0 0 0 0 0 0 0 1\n1 1 0 0 0 0 1\n", 2, "7 fields"),
        ("0 0 0 0 0 0 0 1\n\n1 1 0 0 0 0 0 y\n", 3, "could not convert string to float: 'y'"),
        ("# a\r\n0 0 0 0 0 0 0 1\r\n1 1 0 0 0 0 0 1 2\r\n", 3, "9 fields"),
    ],
)
def test_unusual_lines_go_to_the_careful_reader_which_names_them(tmp_path, text, line, words):
    path = tmp_path / "bad.txt"
    path.write_text(text, newline="")
    with pytest.raises(TrajectoryInputError) as err:
        read_tum(path)
    assert f"bad.txt:{line}: {words}" in str(err.value)


def test_inline_comment_is_never_taken_by_the_fast_reader(tmp_path):
    """numpy drops '# ...' after the values, the careful reader refuses the line: a file
    with such a '#' must not reach numpy, or the two readers would disagree."""
    path = tmp_path / "inline.txt"
    path.write_text("0 0 0 0 0 0 0 1 # start\n1 1 0 0 0 0 0 1\n")
    assert not tum_io._check_text(path).plain
    with pytest.raises(TrajectoryInputError, match="inline.txt:1: 10 fields"):
        read_tum(path)
    indented = tmp_path / "indented.txt"
    indented.write_text("  # indented comment\n0 0 0 0 0 0 0 1\n1 1 0 0 0 0 0 1\n")
    assert not tum_io._check_text(indented).plain
    assert len(read_tum(indented)) == 2


def test_mixed_separators_are_read_by_the_careful_reader_alone(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(r.replace(" ", ",", 3) for r in ROWS) + "\n")
    assert parse_tum_fast(path, tum_io._check_text(path)) is None
    assert read_tum(path).stamps.tobytes() == expected_rows()[:, 0].tobytes()


def test_file_size_budget_is_a_clear_error(tmp_path, monkeypatch, capsys):
    path = tmp_path / "big.tum"
    path.write_text("\n".join(ROWS * 50) + "\n")
    monkeypatch.setattr(tum_io, "MAX_TUM_BYTES", 4096)
    with pytest.raises(TrajectoryInputError, match=r"big.tum is larger than 4,096 bytes"):
        read_tum(path)
    monkeypatch.setattr(tum_io, "MAX_TUM_BYTES", 1 << 20)
    assert len(read_tum(path)) == len(ROWS) * 50
    monkeypatch.setattr(tum_io, "MAX_TUM_BYTES", 4096)
    code = eval_cli.main(["--gt", str(path), "--est", str(path)])
    err = capsys.readouterr().err
    assert code == 1 and "big.tum is larger than" in err and "Traceback" not in err


def test_not_utf8_is_refused_with_the_file_named(tmp_path):
    path = tmp_path / "latin1.tum"
    path.write_bytes(b"# caf\xe9\n0 0 0 0 0 0 0 1\n")
    with pytest.raises(TrajectoryInputError, match="latin1.tum is not a text file"):
        read_tum(path)
