"""`mocap4r2 doctor`: a lab's mocap setup checked end to end.

Each check is a plain function returning :class:`~.report.Check` results (PASS, WARN or
FAIL, a title, the evidence seen and the fix), bounded in time so that a dead server
never hangs the doctor. :mod:`.network_checks` (routes, interfaces, multicast, MTU,
firewall), :mod:`.server_checks` (the vendor's server answering and data flowing, with
the drivers' own protocol code), :mod:`.config_checks` (a params file against the
systems' ParameterSpecs), :mod:`.ros_checks` (environment, announced systems, QoS) and
:mod:`.time_checks` (host clock discipline, the clock model's fit);
:mod:`.doctor_command` is the verb around them.
"""
