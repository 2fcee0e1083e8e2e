"""The progress bar: drawn on terminals only, counts, percentages and elapsed time."""
from __future__ import annotations

import io

from hlofuse.progress import Progress, format_elapsed, progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_quiet_when_not_a_terminal():
    out = io.StringIO()
    with Progress(3, "files", stream=out) as bar:
        for _ in range(3):
            bar.update(note="passed")
    assert out.getvalue() == ""
    assert list(progress([1, 2, 3], stream=out)) == [1, 2, 3] and out.getvalue() == ""


def test_bar_counts_and_time_on_a_terminal():
    out, clock = FakeTTY(), Clock()
    bar = Progress(4, "conformance", stream=out, width=8, clock=clock, min_interval=0.0)
    with bar:
        clock.t += 1
        bar.update(note="a.mlir passed")
        assert bar.text() == "conformance [##......] 1/4  25% 0:01 a.mlir passed"
        clock.t += 64
        bar.update(3)
        assert bar.text() == "conformance [########] 4/4 100% 1:05"
    text = out.getvalue()
    assert "\r\x1b[Kconformance [##......] 1/4  25% 0:01 a.mlir passed" in text
    assert text.endswith("\r\x1b[K")  # the bar is erased at the end


def test_redraws_are_rate_limited_and_clear_erases():
    out, clock = FakeTTY(), Clock()
    bar = Progress(100, stream=out, clock=clock, min_interval=1.0)
    with bar:
        for _ in range(50):
            bar.update()  # same instant: no redraw after the first
        draws = out.getvalue().count("\r\x1b[K")
        assert draws == 1
        bar.clear()
        assert out.getvalue().endswith("\r\x1b[K")
        bar.update()  # after a clear the bar comes back at once
        assert out.getvalue().endswith("51/100  51% 0:00")


def test_unknown_total_and_elapsed_format():
    bar = Progress(None, "items", stream=io.StringIO(), clock=Clock())
    bar.update(7)
    assert bar.text() == "items 7 done 0:00"
    assert format_elapsed(59.9) == "0:59" and format_elapsed(3725) == "1:02:05"


def test_conformance_runner_draws_the_bar_on_a_terminal_only(monkeypatch):
    import os
    import sys

    import pytest

    from hlofuse.frontends.conformance import main_conformance
    from repo_paths import SHARED_STABLEHLO

    data = str(SHARED_STABLEHLO)
    files = sorted(f for f in os.listdir(data) if f.endswith(".mlir"))[:2] if os.path.isdir(data) else []
    if not files:
        pytest.skip("needs ../shared/stablehlo_testdata")
    paths = [os.path.join(data, f) for f in files]
    out, err = io.StringIO(), FakeTTY()
    monkeypatch.setattr(sys, "stderr", err)
    main_conformance(paths, stream=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "\x1b" not in out.getvalue()  # the per-file lines stay clean
    assert "conformance [" in err.getvalue() and "2/2 100%" in err.getvalue()
    assert err.getvalue().endswith("\r\x1b[K")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    out2 = io.StringIO()
    main_conformance(paths, stream=out2)
    assert out2.getvalue() == out.getvalue() and sys.stderr.getvalue() == ""
