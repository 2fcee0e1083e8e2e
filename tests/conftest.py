"""Test-wide settings: passes are verified after every compile's pass; hypothesis is derandomized under CI (CI=true), so a CI run is
reproducible; locally every run explores new examples."""
from __future__ import annotations

import os
import sys

from hypothesis import settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shared test helper modules

# Every compile in the tests verifies the module after each pass (off by default for users:
# it costs compile time), so a pass that leaves an invalid module fails the test that ran it.
os.environ.setdefault("HLOFUSE_VERIFY_PASSES", "1")

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")
