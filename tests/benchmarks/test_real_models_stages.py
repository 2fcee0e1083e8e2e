"""benchmarks/real_models.py's compile diagnostics: every row's compile stages, the rule that
prints a slow compile's stages, and the stack dump of a compile that stalls."""
from __future__ import annotations

import sys
import threading
import time

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import hlofuse  # noqa: E402
import real_models  # noqa: E402
from conftest import DOT_TANH  # noqa: E402
from hlofuse.codegen import cache  # noqa: E402


def test_timed_compile_records_wall_cpu_and_every_stage(tmp_path, monkeypatch):
    # a cold compile (an empty cache of its own) runs the passes and LLVM: both appear, with
    # the stages compile_cpu times, and the stages fit inside the compile's wall time
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "0")
    cache.memory_cache.clear()  # (its kernels may be in memory from an earlier test)
    exe, stages = real_models.timed_compile(hlofuse.parse_hlo(DOT_TANH), stall_s=0)
    assert exe.program is not None
    for key in ("wall", "cpu", "load", "passes", "slowest pass", "slowest pass name", "planning", "emission",
                "llvm optimization", "code generation", "driver"):
        assert key in stages, key
    assert 0 < stages["passes"] <= stages["wall"]
    assert stages["slowest pass"] <= stages["passes"]
    assert stages["planning"] + stages["emission"] <= stages["wall"]
    # `other` is what the sequential stages leave of the wall time: never negative, and the
    # stages and it add up to the wall time
    assert 0 <= stages["other"] < stages["wall"]
    assert abs(sum(stages.get(k, 0.0) for k in real_models.SEQUENTIAL_STAGES) + stages["other"]
               - stages["wall"]) < 1e-9
    line = real_models.stage_line(stages)
    assert line.startswith(f"wall {stages['wall']:.2f}, cpu ")
    assert f"slowest pass ({stages['slowest pass name']}) {stages['slowest pass']:.2f}" in line


def test_slow_compile_needs_both_the_factor_over_xla_and_the_floor():
    f, floor = real_models.SLOW_FACTOR, real_models.SLOW_MIN_S
    assert real_models.slow_compile({"hlofuse_compile_s": 66.0, "xla_compile_s": 0.4})
    # under the floor: a small module's 15x over XLA's 0.03 s is not a stall
    assert not real_models.slow_compile({"hlofuse_compile_s": floor - 0.01, "xla_compile_s": 0.0})
    # over the floor but within the factor of XLA's own compile
    assert not real_models.slow_compile({"hlofuse_compile_s": floor * 2, "xla_compile_s": floor * 2 / f})
    assert real_models.slow_compile({"hlofuse_compile_s": floor * 2, "xla_compile_s": floor * 2 / f - 0.01})


def test_stall_dump_writes_every_threads_stack_only_after_its_time(tmp_path):
    # a block that outlives the dump's time leaves the stacks of its thread and of a waiting
    # lane-like thread (named, so the dump shows it); one that ends first leaves nothing
    out = tmp_path / "stacks.txt"
    release = threading.Event()
    lane = threading.Thread(target=release.wait, name="waiting-lane")
    lane.start()
    try:
        with open(out, "w") as f:
            with real_models.stall_dump(0.2, f):
                time.sleep(0.05)
        assert out.read_text() == ""
        with open(out, "w") as f:
            with real_models.stall_dump(0.2, f):
                time.sleep(0.6)
        text = out.read_text()
    finally:
        release.set()
        lane.join()
    assert "test_stall_dump_writes_every_threads_stack" in text  # this thread, in the sleep
    assert text.count("Thread 0x") >= 2 and "in wait" in text  # the waiting thread too
