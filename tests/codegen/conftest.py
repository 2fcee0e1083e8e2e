"""Fixtures shared by the codegen tests."""
from __future__ import annotations

import pytest

from hlofuse.codegen import cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty cache directory of the test's own, and an empty memory cache, with module
    entries on (conftest turns them off for tests that monkeypatch; these start empty)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(d))
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "1")
    cache.memory_cache.clear()
    yield d
    cache.memory_cache.clear()
