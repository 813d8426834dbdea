"""This folder on sys.path, so its tests import the OpenCV adapters (opencv_reference)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
