"""Test-wide settings: passes are verified after every compile's pass; hypothesis is derandomized under CI (CI=true), so a CI run is
reproducible; locally every run explores new examples."""
from __future__ import annotations

import atexit
import os

import pytest
import shutil
import sys
import tempfile

from hypothesis import settings

_TESTS = os.path.dirname(os.path.abspath(__file__))
# tests/support holds the shared helper modules (`from xla_oracle import run_on_xla`); tests/ itself
# is on the path for the fuzzing package (`from fuzz.runner import run`).
sys.path.insert(0, _TESTS)
sys.path.insert(0, os.path.join(_TESTS, "support"))

# Every compile in the tests verifies the module after each pass (off by default for users:
# it costs compile time), so a pass that leaves an invalid module fails the test that ran it.
os.environ.setdefault("HLOFUSE_VERIFY_PASSES", "1")

# hlofuse.compile caches kernel object code on disk by default: the tests use a fresh
# directory per session (per xdist worker), never the user's cache, so an entry written by
# another version of the code cannot hide a code generation bug.
_CACHE_DIR = tempfile.mkdtemp(prefix="hlofuse-test-cache-")
os.environ["HLOFUSE_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _module_cache_off_under_monkeypatch(request):
    """A test that patches hlofuse compiles afresh: the module cache's key (module text,
    options, hlofuse's source on disk) cannot see a patch, so an entry from an unpatched
    compile of the same module would be returned, and one written under a patch would be
    returned to later tests. Kernel object entries stay on (their key is the kernel's IR)."""
    if "monkeypatch" in request.fixturenames:
        request.getfixturevalue("monkeypatch").setenv("HLOFUSE_MODULE_CACHE", "0")
    yield


@pytest.fixture
def kernels_at_o3(monkeypatch):
    """Every kernel compiled at O3: codegen/kernel_work.py compiles a kernel of negligible work
    at a cheap level without vector loops, and the small kernels of tests that read what O3
    makes of the emitters' code (vector bodies, interleaving, golden IR) are such kernels."""
    from hlofuse.codegen import kernel_work

    monkeypatch.setattr(kernel_work, "SMALL_KERNEL_NS", 0.0)
