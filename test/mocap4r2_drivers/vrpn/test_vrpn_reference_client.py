"""Code we did not write reads vrpn_simulator: PyPI's ``motioncapture`` (libmotioncapture's
Python binding, which embeds VRPN's own C++ client library, vrpn_Connection and
vrpn_Tracker_Remote) connects by both of VRPN's ways and gets the scene's bodies."""

from __future__ import annotations

import time

import motioncapture  # requirements-dev.txt: a missing library fails, it is not skipped
import numpy as np
import pytest
from vrpn_stand_in import frame_of, start_vrpn  # test/fixtures

SCENE = {
    "seed": 4,
    "rate": 100.0,
    "latency": 0.0,
    "noise": 0.0,
    "rigid_bodies": [
        {"name": "drone", "id": 1, "trajectory": {"type": "circle", "center": [0, 0, 1.5], "radius": 1.0}},
        {
            "name": "cart",
            "id": 2,
            "trajectory": {"type": "figure_eight", "center": [0.5, 0.5, 0.2], "period": 7.0},
        },
    ],
}


def quaternion(body) -> np.ndarray:
    rotation = body.rotation
    return np.array([rotation.x, rotation.y, rotation.z, rotation.w])


@pytest.mark.parametrize("scheme", ["", "tcp://"], ids=["udp-request", "tcp"])
def test_vrpn_client_library_reads_the_stand_in(procs, tmp_path, scheme):
    server, port, scene, origin = start_vrpn(procs, tmp_path, SCENE)
    mocap = motioncapture.connect("vrpn", {"hostname": f"{scheme}127.0.0.1:{port}"})
    seen = []
    end = time.monotonic() + 30
    while len(seen) < 30 and time.monotonic() < end:
        mocap.waitForNextFrame()
        bodies = mocap.rigidBodies
        if set(bodies) == {"drone", "cart"}:
            # copied at once: the binding's quaternion refers into the body it came from
            seen.append((time.time(), {n: (np.array(b.position), quaternion(b)) for n, b in bodies.items()}))
    del mocap
    assert len(seen) >= 30, server.log()
    names = [b.name for b in scene.description.bodies]
    matched = 0
    for arrival, bodies in seen:
        # libmotioncapture hands out float32: the frame whose drone is there to float32 precision
        drone = bodies["drone"][0]
        k = frame_of(scene, origin, {"drone": tuple(drone)}, arrival, atol=2e-7 * (1 + np.abs(drone).max()))
        if k is None:
            continue
        truth = scene.frame(k).bodies
        row = names.index("drone")
        np.testing.assert_allclose(drone, truth.positions[row], rtol=0, atol=1e-6)
        np.testing.assert_allclose(bodies["drone"][1], truth.orientations[row], rtol=0, atol=1e-6)
        matched += 1
    assert matched >= 0.9 * len(seen)
    # VRPN's library said what it connected to: the trackers the stand-in announced, not "VRPN Control"
    assert "client 127.0.0.1" in server.log()
