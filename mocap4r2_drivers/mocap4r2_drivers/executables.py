"""The entry points of this package's executables: setup.py's console_scripts
(``<name> = mocap4r2_drivers.executables:<name>``) and the ``bin/`` wrappers (:func:`run`).

Which executables there are, and the module each runs, is registry.py's table: a name is
resolved when it is asked for, so a system added there needs nothing here. Each entry
point notes SIGINT/SIGTERM before its module, with rclpy, numpy and scipy, is imported,
so a stop asked for while the program loads is kept (mocap4r2_control/stop_signals.py says
why). Only the standard library may be imported here, and registry.py is."""

from __future__ import annotations

from collections.abc import Callable

from mocap4r2_control.stop_signals import lazy_main

from . import registry


def entry_point(name: str) -> Callable[[], int]:
    """The entry point of executable ``name``; AttributeError for a name the registry
    does not list for this package."""
    module = registry.executables().get(name)
    if module is None:
        raise AttributeError(f"{__name__} has no executable {name!r} (see registry.py)")
    return lazy_main(module)


def __getattr__(name: str) -> Callable[[], int]:
    """``executables.<name>``, the form setup.py's console_scripts name (PEP 562)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return entry_point(name)


def run(name: str) -> int:
    """Run executable ``name`` (a ``bin/`` wrapper's own file name); 127 with a message
    for a name the registry does not list, as a shell says for a missing command."""
    try:
        main = entry_point(name)
    except AttributeError as exc:
        import sys

        print(f"{name}: {exc}", file=sys.stderr)
        return 127
    return main()
