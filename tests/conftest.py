"""Test-wide settings: hypothesis is derandomized under CI (CI=true), so a CI run is
reproducible; locally every run explores new examples."""
from __future__ import annotations

import os
import sys

from hypothesis import settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shared test helper modules

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")
