"""Caches of compiled kernels' object code: in this process (`memory_cache`) and on disk.

Object code is cached per kernel (codegen/cpu.py), keyed by a fingerprint of everything its
machine code depends on: the kernel's structural text (codegen/kernel_key.py), its LLVM
pipeline, the target (triple, host CPU name and features), the hlofuse version and the emitter
version. A module changed in one place recompiles only the kernels that changed. Beside the
kernels, the whole result of a CPU compile is cached per module (codegen/module_cache.py: `.m`
entries, keyed by the module's text, the options, the target and the whole package's source),
so compiling an unchanged module again runs no pass and no LLVM.

The disk cache is on by default for the command line and `hlofuse.compile`, in
`default_cache_dir()` (`$HLOFUSE_CACHE_DIR`, else `$XDG_CACHE_HOME/hlofuse`, else
`~/.cache/hlofuse`). An object file is code this process will run, so the cache loads only
what it wrote itself:
- the directory is created with mode 0700 and refused (the disk cache is then off, with a
  warning) unless it is ours and no one else can write to it;
- an entry `<key>.o` (`<key>.m` for a module) holds a header with the key it was stored under
  and the SHA-256 of the payload, written to a temporary file and renamed into place (readers
  never see half an entry); loading checks the owner, the key and the checksum, and drops an
  entry that fails;
- the directory is bounded (`HLOFUSE_CACHE_MAX_BYTES`, default 512 MB): once it may hold
  more, the least recently used entries (by modification time; a hit touches its entry) are
  removed down to `LOW_WATER` of the bound. Whether it may hold more is known without listing
  it: the last full scan's total (`.usage`) plus the sizes every store since appended to
  `.added` (one fixed-width record each, O_APPEND, so concurrent processes' records do not mix).
  Listing and stat-ing every entry after every store cost O(entries) per compile: at 70,000
  entries (a long fuzz campaign's) a store took seconds. Now a full scan happens about once per
  `(1 - LOW_WATER)` of the bound stored, by whichever process crosses it.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
import threading
import time
from collections import OrderedDict

# Bumped whenever the code emitted for the same kernel text changes (cpu-3: one object per
# kernel, its function named by its key; cpu-4: complex divide and exp take XLA's limits).
# The key also holds a digest of the code generator's own source (code_digest), so an edited
# checkout never loads kernels an older emitter wrote even when nobody bumped this.
EMITTER_VERSION = "cpu-4"

DEFAULT_MAX_BYTES = 512 << 20
# Entry kinds: the file suffix and the magic line each entry of that kind starts with. An
# object file holds one kernel's (or a driver's) code; a module entry a whole CPU compile
# (codegen/module_cache.py). Both are code this process runs, under the same checks.
# A source entry maps the digest of a module's source (its file's text, a JAX export) to the
# module entry its compile made (codegen/module_cache.py `source_key`).
OBJECT, MODULE, SOURCE = ".o", ".m", ".s"
_MAGIC = {OBJECT: b"HLOFUSE-KERNEL-OBJECT 1\n", MODULE: b"HLOFUSE-MODULE 1\n", SOURCE: b"HLOFUSE-SOURCE 1\n"}
_DIGEST_LINES = 65 + 65  # key + newline, SHA-256 of the payload + newline
_STALE_TEMP_SECONDS = 3600  # a temporary file this old is a crashed writer's leftover
# Eviction removes entries down to this fraction of the bound, so the next full scan waits for
# that much new data instead of following the very next store.
LOW_WATER = 0.9
# Bookkeeping files of the directory (not entries): the total size at the last full scan, and
# one record per store since.
_USAGE, _ADDED = ".usage", ".added"
_RECORD = 12  # bytes of one `.added` record: an 11-digit size and a newline


class _MemoryCache:
    """Object code compiled in this process, by key, least recently used dropped past
    `max_bytes` (tests clear it to exercise the disk cache)."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        """The object stored under `key`, or None."""
        with self._lock:
            obj = self._entries.get(key)
            if obj is not None:
                self._entries.move_to_end(key)
            return obj

    def __setitem__(self, key: str, obj: bytes) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes += len(obj) - (len(old) if old is not None else 0)
            self._entries[key] = obj
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def drop(self, key: str) -> None:
        """Forget the entry under `key`, if any."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0


memory_cache = _MemoryCache()


def hlofuse_version() -> str:
    """The hlofuse version (part of the cache keys): the package's own `__version__`. Not the
    installed distribution's metadata: importing importlib.metadata and walking the installed
    distributions took 5-12 ms of a cached compile in a new process, and the keys hold the
    digest of the package's source as well, which the version's file is part of."""
    from .. import __version__

    return __version__


def cache_key(text: str, target_fingerprint: str) -> str:
    """Hex fingerprint of `text` (a kernel's structural text and pipeline) + target + hlofuse
    version + emitter version + the digest of the code generator's source."""
    h = hashlib.sha256()
    for part in (text, target_fingerprint, hlofuse_version(), EMITTER_VERSION, code_digest()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


_DIGESTS: dict[tuple[str, ...], str] = {}
# What decides a kernel's object code: the IR, the emitters, codegen and the JIT builtins.
_CODE_FOLDERS = ("hlo", "emitters", "codegen", "runtime")


def source_digest(folders: tuple[str, ...] = ()) -> str:
    """SHA-256 of the path, size and modification time (ns) of every module of the hlofuse
    package under `folders` (the whole package for none), computed once per process: part of
    cache keys, so an edited hlofuse never loads an entry an older one wrote.

    The files' stat, not their bytes, as Python's own bytecode cache decides whether a source
    changed: an edit, a checkout and an install each give a file a new modification time. A
    new process's first cached compile reads this (the whole package: 226 files); reading and
    hashing their 2.2 MB took 9.6 ms of it, their stat 2.7 ms. A file rewritten with the same
    size within the same nanosecond would go unseen; a file touched without a change costs a
    cache miss, never a stale hit."""
    digest = _DIGESTS.get(folders)
    if digest is None:
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.sha256()
        for folder in folders or ("",):
            h.update(_tree_signature(os.path.join(package, folder), len(package) + 1).encode())
        digest = _DIGESTS[folders] = h.hexdigest()
    return digest


def _tree_signature(top: str, strip: int) -> str:
    """`relpath size mtime_ns` of every .py file under `top`, one per line, in sorted order
    (`strip`: characters of each path before its path relative to the package)."""
    lines = []
    pending = [top]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        subfolders = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    subfolders.append(entry.path)
            elif entry.name.endswith(".py"):
                st = entry.stat()
                lines.append(f"{entry.path[strip:]} {st.st_size} {st.st_mtime_ns}")
        pending.extend(reversed(subfolders))
    return "\n".join(lines)


def code_digest() -> str:
    """SHA-256 of the source of every module that decides what a kernel's object code is (the
    IR, the emitters, codegen and the JIT builtins), computed once per process (a few ms)."""
    return source_digest(_CODE_FOLDERS)


def default_cache_dir() -> str:
    """Where the disk cache lives: `$HLOFUSE_CACHE_DIR`, else `$XDG_CACHE_HOME/hlofuse`, else
    `~/.cache/hlofuse`."""
    explicit = os.environ.get("HLOFUSE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hlofuse")


def max_cache_bytes() -> int:
    """The disk cache's size bound: `$HLOFUSE_CACHE_MAX_BYTES`, else 512 MB."""
    text = os.environ.get("HLOFUSE_CACHE_MAX_BYTES", "")
    try:
        return max(0, int(text)) if text else DEFAULT_MAX_BYTES
    except ValueError:
        _warn(f"HLOFUSE_CACHE_MAX_BYTES={text!r} is not a whole number; using {DEFAULT_MAX_BYTES}")
        return DEFAULT_MAX_BYTES


_warned: set[str] = set()


def _warn(message: str) -> None:
    """Print a cache warning once per process (the cache is an optimization: never an error)."""
    if message not in _warned:
        _warned.add(message)
        print(f"hlofuse: warning: {message}", file=sys.stderr)


class UnsafeCacheDirectory(Exception):
    """The cache directory is not ours alone: loading code from it could run another user's."""


def secure_directory(directory: str) -> None:
    """Create `directory` (mode 0700) if missing; raise UnsafeCacheDirectory unless it is a
    directory owned by this user that no one else can write to."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCacheDirectory(f"{directory} is not a directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UnsafeCacheDirectory(f"{directory} belongs to another user (uid {st.st_uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeCacheDirectory(f"{directory} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})")


def _header(key: str, obj: bytes, kind: str = OBJECT) -> bytes:
    """The header an entry of `kind` for `key` holding payload `obj` starts with."""
    return _MAGIC[kind] + key.encode() + b"\n" + hashlib.sha256(obj).hexdigest().encode() + b"\n"


def _intact(key: str, head: bytes, obj: bytes, kind: str = OBJECT) -> bool:
    """Whether `head` (an entry's header) and `obj` (what follows it) are an entry of `kind`
    for `key` with an intact payload."""
    magic = _MAGIC[kind]
    if len(head) != len(magic) + _DIGEST_LINES or not head.startswith(magic):
        return False
    head = head[len(magic):]
    if head[:64] != key.encode() or head[64:65] != b"\n" or head[-1:] != b"\n":
        return False
    return head[65:129] == hashlib.sha256(obj).hexdigest().encode()


class CompileCache:
    """Entries by key in `directory`: kernel object files (`kind` OBJECT, the default),
    whole-module entries (MODULE) and source entries (SOURCE); see the module docstring for the
    checks."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int | None = None) -> None:
        self.directory = os.fspath(directory)
        self.max_bytes = max_cache_bytes() if max_bytes is None else max_bytes
        self._usable: bool | None = None

    def usable(self) -> bool:
        """Whether the directory exists (created if not) and is safe to load code from."""
        if self._usable is None:
            try:
                secure_directory(self.directory)
                self._usable = True
            except UnsafeCacheDirectory as e:
                _warn(f"compile cache disabled: {e}")
                self._usable = False
            except OSError as e:
                _warn(f"compile cache disabled: cannot create {self.directory}: {e.strerror}")
                self._usable = False
        return self._usable

    def path(self, key: str, kind: str = OBJECT) -> str:
        """The file of the entry of `kind` for `key`."""
        return os.path.join(self.directory, key + kind)

    def has(self, key: str, kind: str = OBJECT) -> bool:
        """Whether an entry for `key` exists (not checked: `load` checks)."""
        return self.usable() and os.path.isfile(self.path(key, kind))

    def load(self, key: str, kind: str = OBJECT) -> bytes | None:
        """The payload (object code, or a module entry) stored under `key`, or None (also for
        an entry that is not ours, not for this key or damaged; such an entry is removed)."""
        if not self.usable():
            return None
        path = self.path(key, kind)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
                return None
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
                # the header, then the payload read into its own bytes, unbuffered (not a slice
                # of the whole file's: copying a 4 MB module entry took 1.3 ms of a cached compile)
                head = f.read(len(_MAGIC[kind]) + _DIGEST_LINES)
                obj = f.read()
        except OSError:
            return None
        finally:
            os.close(fd)
        if not _intact(key, head, obj, kind):
            _warn(f"compile cache entry {path} is damaged or not for its key; removed")
            _remove(path)
            return None
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass
        return obj

    def store(self, key: str, object_code: bytes, kind: str = OBJECT) -> None:
        """Store a payload of `kind` (object code by default) under `key` (atomic; errors
        writing the cache are ignored)."""
        if not self.usable():
            return
        if self._write_atomically(self.path(key, kind), _header(key, object_code, kind), object_code):
            try:
                self._record_added(len(_MAGIC[kind]) + _DIGEST_LINES + len(object_code))
            except OSError:
                pass

    def _write_atomically(self, path: str, *chunks: bytes) -> bool:
        """Write `chunks` to a temporary file in the directory and rename it to `path` (readers
        see the old file or the whole new one); False, leaving nothing behind, on an OSError."""
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
            os.replace(tmp, path)
            tmp = None
            return True
        except OSError:
            return False
        finally:
            if tmp is not None:
                _remove(tmp)

    def remove(self, key: str, kind: str = OBJECT) -> None:
        """Remove the entry of `kind` for `key` (an entry that could not be used)."""
        _remove(self.path(key, kind))

    def entries(self) -> list[tuple[float, int, str]]:
        """(modification time, size, path) of every entry."""
        found = []
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        now = time.time()
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if name.endswith(".tmp") and now - st.st_mtime > _STALE_TEMP_SECONDS:
                _remove(path)
            elif name.endswith(tuple(_MAGIC)) and stat.S_ISREG(st.st_mode):
                found.append((st.st_mtime, st.st_size, path))
        return found

    def _record_added(self, size: int) -> None:
        """Append one stored entry's size to `.added` (one write of a fixed-width record with
        O_APPEND: atomic beside other processes' appends)."""
        fd = os.open(os.path.join(self.directory, _ADDED), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, b"%011d\n" % min(size, 10**11 - 1))
        finally:
            os.close(fd)

    def estimated_bytes(self) -> int | None:
        """The directory's size as the bookkeeping files know it (the last full scan's total
        plus every store recorded since), without listing it; None when there is no usable
        record of a full scan (then `evict` scans)."""
        try:
            with open(os.path.join(self.directory, _USAGE), "rb") as f:
                total = int(f.read(32).strip() or b"x")
        except (OSError, ValueError):
            return None
        try:
            with open(os.path.join(self.directory, _ADDED), "rb") as f:
                added = f.read()
        except FileNotFoundError:
            added = b""
        except OSError:
            return None
        for i in range(0, len(added) - _RECORD + 1, _RECORD):
            try:
                total += int(added[i:i + _RECORD - 1])
            except ValueError:
                return None
        return total

    def evict(self, force: bool = False) -> int:
        """When the directory may hold more than `max_bytes` (`estimated_bytes`; or `force`),
        remove least recently used entries until it holds at most `LOW_WATER` of it; returns
        how many were removed. Cheap (two small reads) while the estimate is under the bound."""
        if not self.usable():
            return 0
        estimate = None if force else self.estimated_bytes()
        if estimate is not None and estimate <= self.max_bytes:
            return 0
        # Reset the record before listing: a store that lands during the scan is counted
        # again at the next one rather than lost (the scan may or may not have seen it).
        _remove(os.path.join(self.directory, _ADDED))
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        removed = 0
        if total > self.max_bytes:
            for _, size, path in entries:
                if total <= LOW_WATER * self.max_bytes:
                    break
                if _remove(path):
                    total -= size
                    removed += 1
        self._write_usage(total)
        return removed

    def _write_usage(self, total: int) -> None:
        """Record the total a full scan left (atomically: readers see the old or the new)."""
        self._write_atomically(os.path.join(self.directory, _USAGE), b"%d\n" % total)


def _remove(path: str) -> bool:
    try:
        os.remove(path)
        return True
    except OSError:
        return False
