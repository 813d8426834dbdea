"""``python3 -m mocap4r2_drivers.doctor``: the doctor where the ``mocap4r2`` command is not
installed.

The ``mocap4r2`` command line lives in mocap4r2_tools (with rich and textual); a robot may
install the drivers alone, and the doctor is theirs, so it runs from this package too,
with the same arguments as ``mocap4r2 doctor``.
"""

from __future__ import annotations

import argparse

from .doctor_command import DoctorCommand


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` as ``mocap4r2 doctor`` does and run the checks; the exit status."""
    command = DoctorCommand()
    parser = argparse.ArgumentParser(prog="python3 -m mocap4r2_drivers.doctor", description=command.help)
    command.add_arguments(parser)
    return command.main(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
