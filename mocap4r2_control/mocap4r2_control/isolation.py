"""A DDS domain of one's own on a shared machine, for test runs and benchmarks.

Each caller claims a ROS_DOMAIN_ID by holding an exclusive lock on a file per id in
/tmp for as long as its process lives, and keeps discovery on localhost; two runs on
one machine then never see each other's nodes.
"""
from __future__ import annotations

import fcntl
import os

_held = []  # lock files stay open (and locked) until the process exits

# 0 is left to users; Fast DDS's default port mapping allows ids up to 101 (232 with
# fewer participants), so claims stay below 100
CANDIDATES = tuple(range(40, 100)) + tuple(range(1, 40))


def claim_domain_id(prefix: str = "/tmp/mocap4r2-test-domain") -> int:
    for domain in CANDIDATES:
        handle = open(f"{prefix}-{domain}.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held.append(handle)
        return domain
    raise RuntimeError("no free ROS_DOMAIN_ID on this machine")


def isolate(env: dict[str, str] | None = None) -> int:
    """Claim a domain, and set ROS_DOMAIN_ID and localhost-only discovery in ``env``
    (default: this process's environment, inherited by the processes it starts)."""
    env = os.environ if env is None else env
    domain = claim_domain_id()
    env["ROS_DOMAIN_ID"] = str(domain)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return domain
