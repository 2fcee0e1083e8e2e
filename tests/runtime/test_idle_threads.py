"""A call's threads follow the idle cores of the moment (runtime/cpu_threads.py IdleThreads):
the caller plus one per core nothing else runs on, sampled at most every IDLE_SAMPLE_S, only
where this process may use every online core; `HLOFUSE_CPU_THREADS` or `pin_threads` fixes the
count; results do not depend on it."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.driver import emit_driver
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime import cpu_threads
from hlofuse.runtime.cpu_threads import IDLE_SAMPLE_S, IdleThreads, runnable_tasks

ROW_SUMS = """
HloModule m
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY f {
  x = f32[2048,1024] parameter(0)
  e = f32[2048,1024] exponential(x)
  zero = f32[] constant(0)
  ROOT s = f32[2048] reduce(e, zero), dimensions={1}, to_apply=add_f32
}
"""


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def four_cores(monkeypatch):
    """A machine of 4 online cores, all of them this process's."""
    monkeypatch.setattr(cpu_threads.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)


def test_runnable_tasks_reads_the_fourth_field(tmp_path):
    f = tmp_path / "loadavg"
    f.write_text("6.31 4.91 3.38 7/141 10471\n")
    assert runnable_tasks(str(f)) == 7
    f.write_text("garbage\n")
    assert runnable_tasks(str(f)) is None
    assert runnable_tasks(str(tmp_path / "missing")) is None
    live = runnable_tasks()
    assert live is None or live >= 1  # this thread is running while it reads


def test_threads_are_the_caller_plus_the_idle_cores(four_cores):
    running = [1]
    idle = IdleThreads(4, clock=_Clock(), runnable=lambda: running[0])
    for now, want in ((1, 4), (2, 3), (4, 1), (9, 1), (0, 4)):
        running[0] = now
        idle._at = float("-inf")  # a fresh sample
        assert idle() == want, now
    assert IdleThreads(2, clock=_Clock(), runnable=lambda: 1)() == 2  # at most the limit
    assert IdleThreads(1, clock=_Clock(), runnable=lambda: 1)() == 1
    assert IdleThreads(4, clock=_Clock(), runnable=lambda: None)() == 4  # unreadable: the limit


def test_a_sample_holds_for_the_sampling_interval(four_cores):
    clock, running = _Clock(), [1]
    idle = IdleThreads(4, clock=clock, runnable=lambda: running[0])
    assert idle() == 4
    running[0] = 4
    clock.t += IDLE_SAMPLE_S / 2
    assert idle() == 4  # not sampled again yet
    clock.t += IDLE_SAMPLE_S
    assert idle() == 1


def test_a_narrower_affinity_keeps_the_limit(monkeypatch):
    """Under a cpuset or taskset the machine's runnable count says nothing about our cores."""
    monkeypatch.setattr(cpu_threads.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert IdleThreads(2, clock=_Clock(), runnable=lambda: 50)() == 2


@pytest.mark.parametrize("env", [{"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "300000"},
                                 {"GOMP_SPINCOUNT": "infinite"}])
def test_spinning_workers_keep_the_limit(four_cores, monkeypatch, env):
    """libgomp workers the user made spin are runnable while they wait: counted as busy
    cores, they would keep the process on one thread, so the rule is off."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    assert IdleThreads(4, clock=_Clock(), runnable=lambda: 4)() == 1  # the default: they sleep
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert IdleThreads(4, clock=_Clock(), runnable=lambda: 4)() == 4


def test_the_rule_is_opt_in(monkeypatch):
    """Off unless HLOFUSE_IDLE_CORES=1 (cpu_threads.idle_cores_rule): a call then runs on the
    process's threads."""
    monkeypatch.delenv("HLOFUSE_CPU_THREADS", raising=False)
    monkeypatch.delenv("HLOFUSE_IDLE_CORES", raising=False)
    exe = hlofuse.compile(hlofuse.parse_hlo(ROW_SUMS), target="cpu", cache=False)
    assert exe.program.driver._idle is None
    exe(np.zeros((2048, 1024), np.float32))
    assert exe.program.driver._config[0] == exe.program.driver.threads
    monkeypatch.setenv("HLOFUSE_IDLE_CORES", "1")
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")
    assert not cpu_threads.idle_cores_rule()  # a fixed count wins


def test_each_call_takes_the_sampled_count_and_pinning_stops_it(monkeypatch):
    monkeypatch.delenv("HLOFUSE_CPU_THREADS", raising=False)
    monkeypatch.setenv("HLOFUSE_IDLE_CORES", "1")
    exe = hlofuse.compile(hlofuse.parse_hlo(ROW_SUMS), target="cpu", cache=False)
    driver = exe.program.driver
    x = np.random.default_rng(5).standard_normal((2048, 1024)).astype(np.float32)
    want = exe(x)[0]
    assert driver._idle is not None and driver._idle.limit == driver.threads
    # the kernel is split when the threads are there (else the bits below prove nothing)
    assert 'call void @"hlofuse_launch_' in emit_driver(exe.program.code.native, CpuTarget())
    seen = []
    for n in (1, 2, 1):
        monkeypatch.setattr(driver, "_idle", lambda n=n: n)
        np.testing.assert_array_equal(exe(x)[0], want)  # the same bits on any count
        seen.append(driver._config[0])
    assert seen == [1, 2, 1]
    driver.pin_threads(2)
    assert driver._idle is None
    exe(x)
    assert driver._config[0] == driver.threads == 2


def test_hlofuse_cpu_threads_fixes_the_count(monkeypatch):
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")
    exe = hlofuse.compile(hlofuse.parse_hlo(ROW_SUMS), target="cpu", cache=False)
    assert exe.program.driver._idle is None
    exe(np.zeros((2048, 1024), np.float32))
    assert exe.program.driver._config[0] == 2


def _long_threads_value(text: str) -> str:
    """The driver IR value of CONFIG[1] (the long-kernel thread count) in an emitted driver."""
    gep = re.search(r'(%"[^"]+") = getelementptr i64, i64\* (%"[^"]+"), i64 1\n', text)
    return re.search(r'(%"[^"]+") = load i64, i64\* ' + re.escape(gep.group(1)) + r'\n', text).group(1)


def test_long_kernels_take_the_long_kernel_threads(monkeypatch):
    """A kernel of BUSY_REGION_NS and more reads CONFIG[1] (the process's threads), a shorter
    one CONFIG[0] (this call's idle cores); either way the same bits."""
    from hlofuse.codegen import region_cost

    x = np.random.default_rng(6).standard_normal((2048, 1024)).astype(np.float32)
    texts, results = {}, {}
    for busy in (float("inf"), 1.0):
        monkeypatch.setattr(region_cost, "BUSY_REGION_NS", busy)
        exe = hlofuse.compile(hlofuse.parse_hlo(ROW_SUMS), target="cpu", cache=False)
        texts[busy] = emit_driver(exe.program.code.native, CpuTarget())
        driver = exe.program.driver
        driver._idle = lambda: 1  # a busy machine: one idle thread (the caller's)
        driver._config[1] = 2
        results[busy] = exe(x)[0]
    for busy, text in texts.items():
        icmp = re.search(r'icmp slt i64 (%"[^"]+"), \d+', text).group(1)
        assert (icmp == _long_threads_value(text)) == (busy == 1.0)
    np.testing.assert_array_equal(results[1.0], results[float("inf")])
    assert region_cost.keeps_threads_when_busy(_FakeKernel(units=4096, unit_elements=1024))
    monkeypatch.setattr(region_cost, "BUSY_REGION_NS", 4e6)
    assert not region_cost.keeps_threads_when_busy(_FakeKernel(units=2048, unit_elements=1024))  # 0.2 ms
    assert region_cost.keeps_threads_when_busy(_FakeKernel(units=40_000, unit_elements=1024))  # 4.1 ms


class _FakeKernel:
    """A plain loop kernel without transcendentals: ELEMENT_NS per element."""

    def __init__(self, units: int, unit_elements: int) -> None:
        self.units, self.unit_elements = units, unit_elements
        self.custom = self.group = self.comp = None
