"""Benchmarks claim a DDS domain of their own with the test suite's helper
(test/fixtures/isolation.py), so a benchmark and a test run on one machine never see
each other's nodes. Neither ships in a package."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test" / "fixtures"))

from isolation import isolate

__all__ = ["isolate"]
