"""The built-in simulated mocap system: ``scene`` (a scene YAML as a pure function of
frame number, the simulator every stand-in serves) and ``simulated_system`` (the
adapter)."""
