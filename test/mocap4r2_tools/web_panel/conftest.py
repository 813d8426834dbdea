"""The web panel tests' shared control plane (``web_plane.py``, importable by the tests)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from web_plane import plane  # noqa: E402, F401 - the fixture, for every test here
