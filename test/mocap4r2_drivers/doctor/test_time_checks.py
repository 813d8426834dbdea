"""The doctor's time checks: the kernel's synchronisation state, and a system's clock
model as its /diagnostics report it (the keys clock_model.py writes)."""

from __future__ import annotations

from mocap4r2_control.clock_model import FrameStamper
from mocap4r2_drivers.doctor.report import Status
from mocap4r2_drivers.doctor.time_checks import check_clock_model, check_host_clock, kernel_sync


def test_kernel_answers_and_the_check_follows_it():
    sync = kernel_sync()
    assert sync is not None  # adjtimex(2) read-only works on Linux without privileges
    synced, error_us = sync
    assert error_us >= 0
    check = check_host_clock(sync, None)
    assert check.status is (Status.PASS if synced else Status.WARN)


def test_host_clock_states():
    assert check_host_clock((True, 120), None).status is Status.PASS
    unsynced = check_host_clock((False, 16000000), "x,192.168.1.1,2,0.000012,0.000034")
    assert unsynced.status is Status.WARN and "STA_UNSYNC" in unsynced.evidence
    assert "chrony: source 192.168.1.1, offset 0.000034 s" in unsynced.evidence
    assert check_host_clock(None, None).status is Status.WARN


def test_clock_model_from_the_stampers_own_keys():
    keys = FrameStamper("auto").status()  # what system_node publishes before convergence
    assert check_clock_model("/opti", keys).status is Status.INFO  # nothing to judge yet
    assert "not in use or not converged" in check_clock_model("/opti", keys).evidence
    converged = {**keys, "clock_converged": "True", "clock_offset_s": "0.001200", "clock_drift_ppm": "3.10"}
    check = check_clock_model("/opti", converged)
    assert check.status is Status.PASS and "drift 3.10 ppm" in check.evidence
    unfitted = check_clock_model("/opti", {**converged, "clock_drift_ppm": "unknown"})
    assert unfitted.status is Status.PASS and "drift not fitted yet" in unfitted.evidence
    wild = check_clock_model("/opti", {**converged, "clock_drift_ppm": "850.00"})
    assert wild.status is Status.WARN and "docs/timing.md" in wild.fix
    assert check_clock_model("/gz", {"rate_hz": "100"}).evidence.startswith("this system reports no clock")
