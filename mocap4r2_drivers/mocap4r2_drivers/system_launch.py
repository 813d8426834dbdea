"""What every system's launch file shares, so that each file says only what is its own.

A system's launch file (``launch/<system>.launch.py`` of this package) starts one lifecycle
node, ``<system>_system``, in a namespace, with this package's ``config/<system>.yaml`` as
its parameters file and the launch arguments of that system as parameter overrides:

    SYSTEM = SystemLaunch("vrpn", arguments=(LaunchArgument("host", "127.0.0.1", "..."),))
    generate_launch_description = SYSTEM.launch_description

Every system's launch file declares, in this order: ``namespace``, ``system_params`` (the
parameters file; never a name a tool's launch file uses too, since launch arguments are not
scoped by an include), the system's own arguments, and ``autostart``. It also sets
MOCAP4R2_EXIT_WITH_PARENT, so the node leaves (SIGTERM) if the launch process dies without
stopping it.

The plan (which arguments, with which defaults, feed which node) is plain data, readable
where the ``launch`` and ``launch_ros`` packages are missing (they come with a ROS 2
distribution, not with the PyPI wheels): the suite's static checks of the launch rules read
it there. Only ``launch_description`` and ``node`` import them, to build the actions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mocap4r2_drivers import registry

PACKAGE = "mocap4r2_drivers"
# the argument naming the parameters file of a system (the tools' launch files use their own)
SYSTEM_PARAMS = "system_params"
# set for every node of the launch: each asks the kernel for SIGTERM when its parent dies
EXIT_WITH_PARENT = "MOCAP4R2_EXIT_WITH_PARENT"


@dataclass(frozen=True)
class LaunchArgument:
    """One launch argument: its name, its default (None: the argument must be given) and
    what `ros2 launch --show-args` says about it."""

    name: str
    default: str | None
    description: str


@dataclass(frozen=True)
class SystemLaunch:
    """The launch plan of one system: ``system`` is its name in registry.py, whose row
    names the executable (also the node's name) and the parameters file; ``namespace``
    is the default of the namespace argument (the system's name when empty); each of
    ``arguments`` is declared and passed to the node as the parameter of the same name."""

    system: str
    namespace: str = ""
    arguments: tuple[LaunchArgument, ...] = ()

    @property
    def executable(self) -> str:
        """The system's node executable, as its row in registry.py names it."""
        return registry.get(self.system).node_executable

    def config_path(self) -> str:
        """The installed parameters file of the system (where `ros2 launch` finds it), as
        its row in registry.py names it."""
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory(PACKAGE), "config", registry.get(self.system).config)

    def declared_arguments(self) -> tuple[LaunchArgument, ...]:
        """Every argument the launch file declares, in the order `ros2 launch` lists them."""
        return (
            LaunchArgument("namespace", self.namespace or self.system, "Namespace of the system's topics"),
            LaunchArgument(SYSTEM_PARAMS, self.config_path(), "Parameters YAML of the system"),
            *self.arguments,
            LaunchArgument("autostart", "false", "Configure and activate without a lifecycle manager"),
        )

    def parameter_files(self) -> tuple[str, ...]:
        """The arguments whose values the node is given as parameters files."""
        return (SYSTEM_PARAMS,)

    def overrides(self) -> tuple[str, ...]:
        """The arguments passed to the node as single parameters, over the parameters file."""
        return (*(argument.name for argument in self.arguments), "autostart")

    def launch_description(self, node_actions: Sequence[Any] | None = None) -> Any:
        """The LaunchDescription: the exit-with-parent variable, the declared arguments,
        then ``node_actions`` (default: the system's node with every override), for a system
        that starts more or computes its overrides at launch time (gazebo)."""
        from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable

        from launch import LaunchDescription

        actions: list[Any] = [SetEnvironmentVariable(EXIT_WITH_PARENT, "1")]
        for argument in self.declared_arguments():
            if argument.default is None:
                actions.append(DeclareLaunchArgument(argument.name, description=argument.description))
            else:
                actions.append(
                    DeclareLaunchArgument(
                        argument.name, default_value=argument.default, description=argument.description
                    )
                )
        actions.extend(self.node() if node_actions is None else node_actions)
        return LaunchDescription(actions)

    def node(self, overrides: Mapping[str, Any] | None = None) -> list[Any]:
        """The system's LifecycleNode, given its parameters file and then ``overrides``
        (default: each of ``overrides()`` from the launch argument of the same name)."""
        from launch.substitutions import LaunchConfiguration
        from launch_ros.actions import LifecycleNode

        if overrides is None:
            overrides = {name: LaunchConfiguration(name) for name in self.overrides()}
        return [
            LifecycleNode(
                package=PACKAGE,
                executable=self.executable,
                name=self.executable,
                namespace=LaunchConfiguration("namespace"),
                parameters=[LaunchConfiguration(SYSTEM_PARAMS), dict(overrides)],
                output="screen",
            )
        ]
