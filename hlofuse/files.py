"""Writing files atomically: through a temporary file in the same folder and a rename, so a
failed command never leaves a half-written output behind.

The file gets the permissions an ordinary `open(path, "w")` would give it: those of the file
it replaces, or 0666 less the umask for a new one (a temporary file alone would be 0600)."""
from __future__ import annotations

import os
import stat
import tempfile
from typing import IO, Callable

from .hlo.errors import OutputError


def current_umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux's
    /proc/self/status), else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: str) -> int:
    """Permission bits for a file written at `path`: kept when it replaces a regular file."""
    try:
        st = os.stat(path)
    except OSError:
        return 0o666 & ~current_umask()
    if stat.S_ISREG(st.st_mode):
        return stat.S_IMODE(st.st_mode)
    return 0o666 & ~current_umask()


def check_output_path(path: str) -> None:
    """OutputError unless a file can be written at `path`: its folder exists and is writable,
    and `path` is not a folder. Commands call it before their work, so a typo in `-o` is not
    found only after a long run."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputError(f"cannot write {path}: it is a directory")
    if not os.path.isdir(directory):
        what = "is not a directory" if os.path.exists(directory) else "does not exist"
        raise OutputError(f"cannot write {path}: the directory {directory} {what}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: the directory {directory} is not writable")


def write_atomically(path: str, write: Callable[[IO], None], binary: bool = False,
                     create_dirs: bool = False) -> None:
    """Create `path` by calling `write(file)` on a temporary file, then renaming it into place.

    The folder must exist (OutputError otherwise), unless `create_dirs` (dump folders)."""
    directory = os.path.dirname(os.path.abspath(path))
    if create_dirs and not os.path.isdir(directory):
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot create the folder {directory} for {path}: {e.strerror}") from None
    check_output_path(path)
    mode = _mode_for(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".partial")
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror} (in {directory})") from None
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as f:
            os.fchmod(f.fileno(), mode)
            write(f)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.strerror:
            raise OutputError(f"cannot write {path}: {e.strerror}") from None
        raise


def write_text_atomically(path: str, text: str, create_dirs: bool = False) -> None:
    """Write a text file atomically (see `write_atomically`)."""
    write_atomically(path, lambda f: f.write(text), create_dirs=create_dirs)
