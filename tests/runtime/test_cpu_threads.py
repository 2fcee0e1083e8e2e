"""Threads of compiled kernels: the count is an option (HLOFUSE_CPU_THREADS), libgomp runs them,
and a kernel's result does not depend on how many threads split it."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import InputError
from hlofuse.runtime.cpu_threads import cpu_threads, kernel_threads, register_openmp

ROW_SUMS = """
HloModule m
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY f {
  x = f32[512,300] parameter(0)
  e = f32[512,300] exponential(x)
  zero = f32[] constant(0)
  ROOT s = f32[512] reduce(e, zero), dimensions={1}, to_apply=add_f32
}
"""


def test_thread_count_option(monkeypatch):
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "3")
    assert cpu_threads() == 3
    for bad in ("0", "-2", "two"):
        monkeypatch.setenv("HLOFUSE_CPU_THREADS", bad)
        with pytest.raises(InputError, match="HLOFUSE_CPU_THREADS"):
            cpu_threads()
    monkeypatch.delenv("HLOFUSE_CPU_THREADS")
    assert cpu_threads() >= 1


def test_libgomp_runs_the_threads():
    # libgomp1 ships with gcc on Debian: the machines that run these tests have it.
    assert register_openmp()
    assert kernel_threads() == cpu_threads()


def test_results_do_not_depend_on_the_thread_count():
    exe = hlofuse.compile(hlofuse.parse_hlo(ROW_SUMS), target="cpu")
    x = np.random.default_rng(3).standard_normal((512, 300)).astype(np.float32)
    results = []
    for threads in (1, 2, 3, 7):
        exe.program.driver.pin_threads(threads)
        results.append(exe(x)[0])
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0], np.exp(x.astype(np.float64)).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(exe.program.run_interpreted([x])[0], results[0])


def test_a_forked_child_runs_programs_on_one_thread():
    """libgomp hangs a forked child that starts a team after its parent ran one: the child runs
    every program, loaded before the fork or after it, on its own thread, and gets the answer."""
    import multiprocessing as mp

    exe = hlofuse.compile(hlofuse.parse_hlo(ROW_SUMS), target="cpu")
    x = np.random.default_rng(4).standard_normal((512, 300)).astype(np.float32)
    want = exe(x)[0]  # the parent has run a parallel kernel
    ctx = mp.get_context("fork")
    queue = ctx.Queue()

    def child():
        late = hlofuse.compile(hlofuse.parse_hlo(ROW_SUMS.replace("exponential", "tanh")), target="cpu", cache=False)
        queue.put((exe(x)[0], late(x)[0], exe.program.driver.threads, late.program.driver.threads))

    proc = ctx.Process(target=child)
    proc.start()
    got, late, threads, late_threads = queue.get(timeout=120)
    proc.join(30)
    assert proc.exitcode == 0
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(late, np.tanh(x.astype(np.float64)).sum(axis=1), rtol=1e-4, atol=1e-4)
    assert threads == late_threads == 1
