"""The systems of the suite, one row each: where its adapter is, what it is started as,
what stands in for its vendor's software, how the doctor probes it, and its launch and
config files.

Everything that needs to know the systems reads this table and nothing else:
``executables.py`` (the entry points, resolved by name), ``setup.py`` (console scripts
and the ``bin/`` wrappers that put the executables on PATH), ``bin/`` (each wrapper runs
the executable of its own file name), the doctor (``--system`` choices, the adapter's
parameters, the probe) and ``system_launch.py`` (a launch file's executable and params
file). A vendor is added with its folder and one row here (mocap4r2_drivers/README.md).

Standard library only, plain strings only: setup.py reads this file before the package
is built, the entry points import it before rclpy and numpy are loaded (their stop
signals are noted first, see ``mocap4r2_control.stop_signals``), and the `mocap4r2`
command line lists the doctor's choices without importing any driver.
"""

from __future__ import annotations

from dataclasses import dataclass

PACKAGE = "mocap4r2_drivers"


@dataclass(frozen=True)
class StandIn:
    """A program that plays the vendor's software on this machine (a simulator serving a
    simulated scene), started as ``executable``; its ``main()`` is in ``module``."""

    executable: str
    module: str


@dataclass(frozen=True)
class System:
    """One mocap system.

    ``adapter`` is ``"module:Class"`` (a ``MocapAdapter``); the module's ``main()`` is the
    node's executable, ``executable`` (default ``<name>_system``), installed by
    ``package``. ``probe`` is ``"module:function"``, the doctor's check of what this
    system talks to (a ``doctor.probes.Probe``; empty: the parameters are checked, nothing
    more can be). ``input_topics`` names the parameter holding the ROS topics the system
    reads (Gazebo's poses, the tracker's markers): the doctor checks that each has a
    publisher. ``launch`` and ``config`` are file names in the package's ``launch/`` and
    ``config/`` folders ("" when there is none). ``aliases`` are other names the doctor
    accepts, e.g. the type the system announces when it differs from ``name``. ``docs``
    is its page in the repository's docs/ folder ("" when there is none)."""

    name: str
    adapter: str
    executable: str = ""
    package: str = PACKAGE
    stand_in: StandIn | None = None
    probe: str = ""
    input_topics: str = ""
    launch: str = ""
    config: str = ""
    aliases: tuple[str, ...] = ()
    docs: str = ""

    @property
    def module(self) -> str:
        """The adapter's module, whose ``main()`` the executable runs."""
        return self.adapter.partition(":")[0]

    @property
    def adapter_class(self) -> str:
        return self.adapter.partition(":")[2]

    @property
    def node_executable(self) -> str:
        return self.executable or f"{self.name}_system"


_DRIVERS = "mocap4r2_drivers"
_PROBES = "mocap4r2_drivers.doctor.probes"

SYSTEMS: tuple[System, ...] = (
    System(
        "optitrack",
        f"{_DRIVERS}.optitrack.optitrack_system:OptiTrackAdapter",
        stand_in=StandIn("natnet_simulator", f"{_DRIVERS}.optitrack.simulator"),
        probe=f"{_PROBES}:optitrack",
        launch="optitrack.launch.py",
        config="optitrack.yaml",
        docs="optitrack.md",
    ),
    System(
        "qualisys",
        f"{_DRIVERS}.qualisys.qualisys_system:QualisysAdapter",
        stand_in=StandIn("qtm_simulator", f"{_DRIVERS}.qualisys.simulator"),
        probe=f"{_PROBES}:qualisys",
        launch="qualisys.launch.py",
        config="qualisys.yaml",
        docs="qualisys.md",
    ),
    System(
        "vicon",
        f"{_DRIVERS}.vicon.vicon_system:ViconAdapter",
        probe=f"{_PROBES}:vicon",
        launch="vicon.launch.py",
        config="vicon.yaml",
        docs="vicon.md",
    ),
    System(
        "vrpn",
        f"{_DRIVERS}.vrpn.vrpn_system:VrpnAdapter",
        stand_in=StandIn("vrpn_simulator", f"{_DRIVERS}.vrpn.simulator"),
        probe=f"{_PROBES}:vrpn",
        launch="vrpn.launch.py",
        config="vrpn.yaml",
        docs="vrpn.md",
    ),
    System(
        "gazebo",
        f"{_DRIVERS}.gazebo.gazebo_system:GazeboAdapter",
        input_topics="pose_topics",
        launch="gazebo.launch.py",
        config="gazebo.yaml",
        docs="gazebo.md",
    ),
    System(
        "replay",
        f"{_DRIVERS}.replay.replay_system:ReplayAdapter",
        probe=f"{_PROBES}:replay",
        launch="replay.launch.py",
        config="replay.yaml",
        docs="replay.md",
    ),
    System(
        "simulated",
        f"{_DRIVERS}.simulated.simulated_system:SimulatedAdapter",
        probe=f"{_PROBES}:simulated",
        launch="simulated.launch.py",
        config="simulated.yaml",
        aliases=("sim",),
    ),
    # rigid bodies from another system's unlabeled markers, announced as a system of its
    # own (type "tracker"); it ships with the tools, which this package does not need
    System(
        "tracker",
        "mocap4r2_tools.marker_tracker:MarkerTrackerAdapter",
        executable="marker_tracker",
        package="mocap4r2_tools",
        probe=f"{_PROBES}:tracker",
        input_topics="markers_topic",
        docs="tracking.md",
    ),
)


def systems() -> tuple[System, ...]:
    """Every system, in the table's order (read at each call: a test may extend it)."""
    return SYSTEMS


def names() -> list[str]:
    """Every name the doctor accepts: each system's name and aliases."""
    return sorted({n for s in systems() for n in (s.name, *s.aliases)})


def get(name: str) -> System:
    """The system of ``name`` (or of one of its aliases); KeyError naming the known ones."""
    for system in systems():
        if name == system.name or name in system.aliases:
            return system
    raise KeyError(f"no system {name!r}; known: {', '.join(names())}")


def executables(package: str = PACKAGE) -> dict[str, str]:
    """Executable name -> the module whose ``main()`` it runs, for ``package``: every
    system's node and every stand-in."""
    out: dict[str, str] = {}
    for system in systems():
        if system.package != package:
            continue
        out[system.node_executable] = system.module
        if system.stand_in is not None:
            out[system.stand_in.executable] = system.stand_in.module
    return out


def console_scripts(package: str = PACKAGE) -> list[str]:
    """setup.py's ``console_scripts`` of ``package``'s executables (``ros2 run``)."""
    return [f"{name} = {package}.executables:{name}" for name in sorted(executables(package))]


def bin_wrappers(package: str = PACKAGE) -> list[str]:
    """The ``bin/`` files setup.py installs, putting the same executables on PATH."""
    return [f"bin/{name}" for name in sorted(executables(package))]
