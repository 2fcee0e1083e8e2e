"""A progress bar for long runs (conformance files, benchmarks): counts and elapsed time.

It draws on a terminal only: when the stream is not a TTY (a pipe, a file, CI logs) it writes
nothing, so logs keep just the per-item lines. Lines printed while the bar is up go through
`bar.clear()` first, so the bar never ends up in the middle of them:

    with Progress(len(files), "conformance") as bar:
        for f in files:
            result = run(f)
            bar.clear()
            print(result.line())
            bar.update(note=result.status)
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")

_ERASE = "\r\x1b[K"  # carriage return, then erase to the end of the line


def format_elapsed(seconds: float) -> str:
    """`m:ss` (or `h:mm:ss` past an hour)."""
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """A bar `label [#####.....] done/total pct elapsed note`, redrawn at most every
    `min_interval` seconds; `enabled` defaults to whether `stream` is a TTY."""

    def __init__(self, total: int | None, label: str = "", stream: TextIO | None = None,
                 enabled: bool | None = None, width: int = 30, min_interval: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.width = width
        self.min_interval = min_interval
        self.clock = clock
        self.done = 0
        self.note = ""
        self.start = clock()
        self._last_draw: float | None = None
        self._shown = False

    def text(self) -> str:
        """The bar as it would be drawn now (without control characters)."""
        elapsed = format_elapsed(self.clock() - self.start)
        head = f"{self.label} " if self.label else ""
        if self.total:
            filled = min(self.width, self.done * self.width // self.total)
            bar = "#" * filled + "." * (self.width - filled)
            body = f"[{bar}] {self.done}/{self.total} {100 * self.done // self.total:3d}%"
        else:
            body = f"{self.done} done"
        tail = f" {self.note}" if self.note else ""
        return f"{head}{body} {elapsed}{tail}"

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not force and self._last_draw is not None and now - self._last_draw < self.min_interval:
            return
        self._last_draw = now
        self.stream.write(_ERASE + self.text())
        self.stream.flush()
        self._shown = True

    def update(self, n: int = 1, note: str = "") -> None:
        """Count `n` more items done (with a short `note`, e.g. the last item's status)."""
        self.done += n
        self.note = note
        self._draw(force=self.total is not None and self.done >= self.total)

    def clear(self) -> None:
        """Erase the bar (before printing a line); the next update draws it again."""
        if self.enabled and self._shown:
            self.stream.write(_ERASE)
            self.stream.flush()
            self._shown = False
            self._last_draw = None

    def close(self) -> None:
        """Erase the bar for good."""
        self.clear()

    def __enter__(self) -> "Progress":
        self._draw(force=True)
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(items: Iterable[T], total: int | None = None, label: str = "", stream: TextIO | None = None) -> Iterator[T]:
    """Iterate `items` with a bar (total from `len(items)` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(total, label, stream) as bar:
        for item in items:
            yield item
            bar.update()
