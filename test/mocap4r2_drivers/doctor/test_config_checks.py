"""A params file against the systems' ParameterSpecs: the shipped files pass, an unknown
key and a bad address are each named with their fix; server addresses off every local
subnet are flagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from mocap4r2_drivers import registry
from mocap4r2_drivers.doctor.config_checks import (
    check_address_subnets,
    check_parameters,
    read_params_file,
    system_specs,
)
from mocap4r2_drivers.doctor.network_checks import Interface
from mocap4r2_drivers.doctor.report import Status

CONFIG = Path(__file__).resolve().parents[3] / "config"
# every system's shipped params file, as its registry row names it
SHIPPED = {s.name: s.config for s in registry.systems() if s.config}


@pytest.mark.parametrize("system", sorted(SHIPPED))
def test_shipped_params_files_pass(system):
    path = CONFIG / SHIPPED[system]
    checks = check_parameters(system, read_params_file(path), system_specs(system))
    assert [c.status for c in checks] == [Status.PASS], checks


def test_every_system_has_specs():
    for system in registry.names():  # names and aliases (sim)
        specs = system_specs(system)
        assert "frame_id" in specs and len(specs) > len(("frame_id",)), system


def test_unknown_key_and_bad_address_are_named(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(
        "lab:\n"
        "  optitrack_system:\n"
        "    ros__parameters:\n"
        "      sever_address: 10.0.0.5\n"
        "      multicast_address: 239.255.42.300\n"
        "      data_port: 1511\n"
    )
    sections = read_params_file(path)
    assert list(sections) == ["lab/optitrack_system"]
    checks = check_parameters("optitrack", sections, system_specs("optitrack"))
    by_title = {c.title: c for c in checks}
    unknown = by_title["parameter sever_address (lab/optitrack_system)"]
    assert unknown.status is Status.FAIL and "did you mean server_address?" in unknown.fix
    bad = by_title["parameter multicast_address (lab/optitrack_system)"]
    assert bad.status is Status.FAIL and "239.255.42.300" in bad.evidence
    assert len(checks) == 2  # data_port is fine


def test_wrong_type_and_nan_are_refused():
    specs = system_specs("optitrack")
    checks = check_parameters(
        "optitrack", {"/**": {"command_port": "1510", "connect_timeout": float("nan")}}, specs
    )
    assert [c.status for c in checks] == [Status.FAIL, Status.FAIL]
    assert "must be int" in checks[0].evidence and "finite" in checks[1].evidence


def test_a_file_without_parameters_is_an_error(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("just: text\n")
    with pytest.raises(ValueError, match="ros__parameters"):
        read_params_file(path)


def test_server_address_off_every_local_subnet():
    interfaces = [Interface("eth0", "192.168.1.10", 24, 1500, False)]
    on, off = (
        check_address_subnets({"server_address": address}, interfaces)[0]
        for address in ("192.168.1.2", "10.0.0.5")
    )
    assert on.status is Status.PASS and "eth0" in on.evidence
    assert off.status is Status.WARN and "10.0.0.5" in off.evidence and "192.168.1.0/24" in off.evidence
