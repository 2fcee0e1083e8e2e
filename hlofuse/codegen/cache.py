"""Caches of compiled object code: in this process (`memory_cache`) and on disk (no pickle:
raw object files and their key).

The key is a fingerprint of everything the machine code depends on: the fused module's
canonical text with the kernels' signature, the target (triple, host CPU name and features),
the hlofuse version and the emitter version. A disk entry is `<key>.o`, written atomically
(temporary file + rename).
"""
from __future__ import annotations

import hashlib
import os
import tempfile

# Bumped whenever the code emitted for the same fused module text changes (cpu-2: reduction
# epilogues that read a reduce at another index, and narrow-float reductions in XLA's order).
EMITTER_VERSION = "cpu-2"

# Object code compiled in this process, by key (tests clear it to exercise the disk cache).
memory_cache: dict[str, bytes] = {}


def hlofuse_version() -> str:
    """The installed hlofuse version (part of the cache key)."""
    try:
        from importlib.metadata import version

        return version("hlofuse")
    except Exception:  # not installed as a distribution (running from a checkout)
        return "0+local"


def cache_key(module_text: str, target_fingerprint: str) -> str:
    """Hex fingerprint of module text + target + hlofuse version + emitter version."""
    h = hashlib.sha256()
    for part in (module_text, target_fingerprint, hlofuse_version(), EMITTER_VERSION):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class CompileCache:
    """Object files by key in `directory` (created on first store)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key + ".o")

    def load(self, key: str) -> bytes | None:
        """The object code stored under `key`, or None."""
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError:
            return None

    def store(self, key: str, object_code: bytes) -> None:
        """Store object code under `key` (atomic; errors writing the cache are ignored)."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(object_code)
            os.replace(tmp, self._path(key))
        except OSError:
            pass
