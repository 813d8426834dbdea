"""The stand-ins' shared command line (sim_server.add_scene_arguments): a negative seed,
which the stand-ins would otherwise read as "the scene's seed", is refused by name."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from mocap4r2_drivers.sim_server import seed_value


def test_seed_value_accepts_zero_and_up_and_refuses_the_rest():
    assert seed_value("0") == 0
    assert seed_value("42") == 42
    for bad in ("-1", "-7", "1.5", "nan", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="integer >= 0"):
            seed_value(bad)


@pytest.mark.parametrize("stand_in", ["natnet_simulator", "qtm_simulator", "vrpn_simulator"])
def test_stand_ins_refuse_a_negative_seed_before_serving(stand_in):
    out = subprocess.run([stand_in, "--seed", "-3"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "a seed is an integer >= 0, not -3" in out.stderr
    assert "ready" not in out.stdout
