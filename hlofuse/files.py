"""Writing files atomically: through a temporary file in the same folder and a rename, so a
failed command never leaves a half-written output behind."""
from __future__ import annotations

import os
import tempfile
from typing import Callable, IO


def write_atomically(path: str, write: Callable[[IO], None], binary: bool = False) -> None:
    """Create `path` by calling `write(file)` on a temporary file, then renaming it into place."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".partial")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomically(path: str, text: str) -> None:
    """Write a text file atomically."""
    write_atomically(path, lambda f: f.write(text))
