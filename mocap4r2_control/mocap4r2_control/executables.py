"""The entry points of this package's node executables (setup.py's console_scripts).

Each notes SIGINT/SIGTERM before its module, with rclpy, is imported, so a stop asked for
while the program loads is kept (stop_signals.py says why). Only the standard library may
be imported here. The ``mocap4r2`` command is not among them: it is a command that
returns, and Ctrl-C ends it through KeyboardInterrupt like any command."""

from .stop_signals import lazy_main

auxiliar_system = lazy_main("mocap4r2_control.auxiliar_system")
