"""What every stress section shares: the Row of the final table, the running nodes and a
ROS harness (the test suite's, test/fixtures/support.py), and small statistics.

A section is a module ``stress/stress_<name>.py`` with ``run() -> list[Row]``; adding one
is the whole job of adding a section (``stress/__main__.py`` finds it by name).
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test" / "fixtures"))

from support import ProcessRunner, RosHarness  # noqa: E402 - test/fixtures, on sys.path only from above


@dataclass
class Row:
    """One figure of the table: ``met`` is None for a figure with no target (context)."""

    figure: str
    value: Any
    target: str = "-"
    met: bool | None = None


def runner(label: str) -> ProcessRunner:
    """Starts installed executables, their logs in a fresh temporary directory."""
    return ProcessRunner(Path(tempfile.mkdtemp(prefix=f"mocap4r2-stress-{label}-")))


def harness() -> RosHarness:
    return RosHarness()


def write_scene(directory: Path, rate: float, bodies: int = 1, skeletons: int = 0) -> str:
    """A small scene: ``bodies`` static-free bodies on circles, 4 markers each."""
    import yaml

    scene = {
        "seed": 7,
        "rate": rate,
        "latency": 0.0,
        "latency_jitter": 0.0,
        "noise": 0.0002,
        "rigid_bodies": [
            {
                "name": f"body{i}",
                "id": i + 1,
                "trajectory": {"type": "circle", "radius": 0.5 + 0.1 * i, "period": 4.0},
            }
            for i in range(bodies)
        ],
        "skeletons": [{"name": f"human{i}", "id": i + 1} for i in range(skeletons)],
    }
    path = directory / "stress_scene.yaml"
    path.write_text(yaml.safe_dump(scene))
    return str(path)


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than two points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
