"""LLVM work on concurrent lanes (codegen/llvm_pool.py, codegen/cpu.py compile_objects): the same
object bytes, symbols and results whichever lanes compiled the kernels, the kernel cache still
keyed per kernel, a failing kernel's error reported the same way on every path, the lane count
bounded by HLOFUSE_CPU_THREADS, and a user's unguarded script not run again in a worker."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import cache, cpu, llvm_pool
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, compile_cpu, emit_kernel_module
from hlofuse.emitters.cpu.target import CpuTarget, optimized_module
from hlofuse.runtime.interpreter import evaluate
from backend_cases import corpus_case
from repo_paths import JAX_CORPUS

# Kernels enough for the pool: MIN_TASKS groups of GROUP_KERNELS and two more.
POOLED = llvm_pool.MIN_TASKS * cpu.GROUP_KERNELS + 2
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _module(kernels: int) -> str:
    """`kernels` independent computations of different shapes (so no two share a kernel):
    elementwise chains, every third one summed over its rows (a reduction kernel), as a tuple."""
    lines = ["HloModule many", "", "ENTRY main {", "  zero = f32[] constant(0)"]
    outs, types = [], []
    for k in range(kernels):
        n = 3 + k
        lines += [f"  p{k} = f32[4,{n}] parameter({k})", f"  e{k} = f32[4,{n}] exponential(p{k})",
                  f"  t{k} = f32[4,{n}] tanh(e{k})", f"  r{k} = f32[4,{n}] multiply(t{k}, p{k})"]
        if k % 3 == 2:
            lines.append(f"  s{k} = f32[4] reduce(r{k}, zero), dimensions={{1}}, to_apply=sum")
            outs.append(f"s{k}")
            types.append("f32[4]")
        else:
            outs.append(f"r{k}")
            types.append(f"f32[4,{n}]")
    lines += [f"  ROOT out = ({', '.join(types)}) tuple({', '.join(outs)})", "}"]
    head = ["HloModule many", "", "sum {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
            "  ROOT c = f32[] add(a, b)", "}", ""]
    return "\n".join(head + lines[2:]) + "\n"


def _fused(text: str):
    return hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]


def _kernel_object(text: str, level: int) -> bytes:
    """A kernel's object as compile_timed makes it, by hand: the O`level` pipeline, then the
    code generator at KERNEL_CODEGEN_LEVEL."""
    return llvm_pool.target_machine(llvm_pool.KERNEL_CODEGEN_LEVEL).emit_object(optimized_module(text, level))


@pytest.fixture
def processes(monkeypatch):
    """Set HLOFUSE_LLVM_PROCESSES for the test; the pool is stopped after it."""
    def use(n: int) -> None:
        monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", str(n))
    yield use
    llvm_pool.shutdown()


def test_worker_object_is_the_same_bytes(processes):
    processes(2)
    fused = _fused(_module(2))
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    for level in (llvm_pool.UNOPTIMIZED, 2, 3):
        text = str(emit_kernel_module(code.kernels[0], CpuTarget(), "k"))
        here = llvm_pool.compile_timed(text, level)[0]
        there = llvm_pool.submit(text, level).result(timeout=300)[0]
        assert there == here and len(here) > 100
        if level != llvm_pool.UNOPTIMIZED:
            assert here == _kernel_object(text, level)


def test_the_driver_is_compiled_unoptimized_and_runs_as_the_interpreter(monkeypatch):
    """The driver (calls, loops, copies) goes to LLVM at UNOPTIMIZED, never at a kernel's level:
    a while loop's module, whose driver loops, computes the interpreter's result."""
    from hlofuse.codegen import driver

    levels: list[int] = []
    real = llvm_pool.compile_in_lane

    def spy(text, level, use_processes):
        levels.append(("@\"hlofuse_plan_0\"" in text or "@hlofuse_plan_0" in text, level))
        return real(text, level, use_processes)

    monkeypatch.setattr(llvm_pool, "compile_in_lane", spy)
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "0")
    module, args, ref = corpus_case(str(JAX_CORPUS / "fori_loop.hlo"))
    exe = hlofuse.compile(module, "cpu", cache=False)
    assert driver.DRIVER_LEVEL == llvm_pool.UNOPTIMIZED
    assert [lvl for is_driver, lvl in levels if is_driver] == [llvm_pool.UNOPTIMIZED]
    assert all(lvl == 3 for is_driver, lvl in levels if not is_driver) and len(levels) > 1
    got = exe(*args)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()




@pytest.mark.parametrize("workers", [1, 3])
def test_concurrent_compile_is_bit_identical_to_serial(processes, workers):
    """Every kernel's object, its key, symbol and place in the program, and the driver's object
    are the same bytes on one lane and on 1 + `workers` lanes; the results agree with the
    interpreter."""
    n = POOLED
    text = _module(n)
    codes = {}
    for p in (0, workers):
        processes(p)
        codes[p] = compile_cpu(_fused(text), cache=False)
        assert llvm_pool.use_pool(cpu.llvm_tasks(len(codes[p].objects))) == (p > 0)
    serial, concurrent = codes[0], codes[workers]
    assert llvm_pool._pool is not None  # the pool compiled some of them
    assert len(serial.objects) >= n and serial.compiled_count == len(serial.objects)
    assert [(o.key, o.symbol, o.object_code) for o in serial.objects] == \
        [(o.key, o.symbol, o.object_code) for o in concurrent.objects]
    assert serial.symbols == concurrent.symbols and serial.driver_object == concurrent.driver_object
    module = hlofuse.parse_hlo(text)
    exe = hlofuse.compile(module, "cpu", cache=False)
    rng = np.random.default_rng(3)
    args = [rng.uniform(-1, 1, p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    for g, w in zip(exe(*args), evaluate(module, args)):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


def test_the_kernel_cache_stays_per_kernel(processes, tmp_path):
    """Compiled concurrently, each distinct kernel is one cache entry; a module changed in one
    kernel recompiles that kernel alone."""
    processes(2)
    n = POOLED
    text = _module(n)
    cache.memory_cache.clear()
    first = compile_cpu(_fused(text), cache_dir=str(tmp_path))
    entries = {f[:-len(cache.OBJECT)] for f in os.listdir(tmp_path) if f.endswith(cache.OBJECT)}
    assert {o.key for o in first.objects} <= entries and first.compiled_count == len(first.objects)
    cache.memory_cache.clear()
    changed = compile_cpu(_fused(text.replace("e0 = f32[4,3] exponential(p0)", "e0 = f32[4,3] sine(p0)")),
                          cache_dir=str(tmp_path))
    assert changed.compiled_count == 1 and len(changed.objects) == len(first.objects)


def _break_one_kernel(monkeypatch, victim: int) -> list[str]:
    """Make the group holding the `victim`-th kernel emitted print as IR LLVM refuses; the
    symbols seen, in order."""
    real, seen = cpu.kernel_groups, []

    class Broken:
        def __init__(self, mod):
            self.mod = mod

        def __str__(self) -> str:
            return str(self.mod).replace("ret void", "ret i32 undefined_value", 1)

    def groups(objects, target):
        for members, mod in real(objects, target):
            first = len(seen)
            seen.extend(o.symbol for o in members)
            yield members, (Broken(mod) if first <= victim < len(seen) else mod)

    monkeypatch.setattr(cpu, "kernel_groups", groups)
    return seen


def test_a_failing_kernel_raises_the_same_error_on_every_path(processes, monkeypatch):
    """LLVM's refusal of one kernel reaches compile_cpu's caller as the same exception type and
    message whether the thread lane or a worker process compiled it."""
    n = POOLED
    fused = _fused(_module(n))
    errors = {}
    for p in (0, 2):
        processes(p)
        monkeypatch.setattr(llvm_pool, "_thread_lane", llvm_pool.threading.Lock())
        if p:  # the thread lane is busy: the broken kernel goes to a worker
            llvm_pool._thread_lane.acquire()
        _break_one_kernel(monkeypatch, victim=5)
        with pytest.raises(Exception) as info:
            compile_cpu(fused, cache=False)
        errors[p] = (type(info.value), str(info.value))
        monkeypatch.undo()
    assert errors[0] == errors[2]
    assert "LLVM IR parsing error" in errors[0][1]


def test_a_dead_worker_fails_its_compile_only(processes):
    """A worker that dies breaks the pool for the compile it ran; the next compile gets a new
    pool and the same bytes."""
    processes(1)
    text = str(emit_kernel_module(_planned_kernel(), CpuTarget(), "k"))
    want = _kernel_object(text, 3)
    dying = llvm_pool.pool().submit(os._exit, 1)
    with pytest.raises(BrokenProcessPool):
        dying.result(timeout=300)
    assert llvm_pool.submit(text, 3).result(timeout=300)[0] == want


def _planned_kernel():
    fused = _fused(_module(1))
    planner = CpuPlanner()
    CpuCode(fused, planner)
    planner.plan(fused.entry)
    return planner.kernels[0]


def test_lanes_follow_hlofuse_cpu_threads(monkeypatch):
    monkeypatch.delenv("HLOFUSE_LLVM_PROCESSES", raising=False)
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "1")
    assert llvm_pool.lanes() == 1 and llvm_pool.processes() == 0 and not llvm_pool.use_pool(1000)
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")  # below MIN_LANES: a worker only while a core is spare
    monkeypatch.setattr(llvm_pool, "spare_core", lambda: False)
    assert llvm_pool.lanes() == 2 and llvm_pool.processes() == 0 and not llvm_pool.use_pool(1000)
    monkeypatch.setattr(llvm_pool, "spare_core", lambda: True)
    assert llvm_pool.processes() == 1 and llvm_pool.use_pool(llvm_pool.MIN_TASKS)
    assert not llvm_pool.use_pool(llvm_pool.MIN_TASKS - 1)
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "3")
    assert llvm_pool.lanes() == 3 and llvm_pool.processes() == 2
    assert llvm_pool.use_pool(llvm_pool.MIN_TASKS) and not llvm_pool.use_pool(llvm_pool.MIN_TASKS - 1)
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "0")
    assert llvm_pool.processes() == 0 and not llvm_pool.use_pool(1000)
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "1")
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "1")  # asked for: one worker beside the thread lane
    assert llvm_pool.processes() == 1 and llvm_pool.use_pool(llvm_pool.MIN_TASKS)
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "many")
    with pytest.raises(ValueError, match="HLOFUSE_LLVM_PROCESSES"):
        llvm_pool.processes()


@pytest.mark.parametrize("load, cores, spare", [(0.9, 2, True), (1.9, 2, True), (2.0, 2, False), (9.5, 2, False),
                                                (3.0, 4, True)])
def test_a_spare_core_is_a_load_average_below_the_cores(monkeypatch, load, cores, spare):
    monkeypatch.setattr(llvm_pool.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(llvm_pool.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert llvm_pool.spare_core() is spare


@pytest.mark.parametrize("prestarted", [False, True])
def test_an_unguarded_script_is_not_run_again_in_a_worker(tmp_path, prestarted):
    """A script that compiles at import time (no `if __name__ == "__main__":`) runs once: the
    workers are not given it as their main module, whether the first kernel or `prestart`
    (the compile's start, here for any module with a hero) starts them."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import hlofuse
        from hlofuse.codegen import llvm_pool
        llvm_pool.PRESTART_HEROES = {1 if prestarted else 10**6}
        print("script ran", flush=True)
        exe = hlofuse.compile(hlofuse.parse_hlo({_module(POOLED)!r}), "cpu", cache=False)
        assert llvm_pool._pool is not None
        print("compiled", len(exe.program.code.objects), flush=True)
    """))
    env = dict(os.environ, HLOFUSE_LLVM_PROCESSES="1", PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("script ran") == 1 and "compiled" in run.stdout


def test_a_multiprocessing_child_that_started_the_pool_exits(tmp_path):
    """A process started by multiprocessing (a user's worker, the conformance runner's) runs no
    atexit handler when it ends: its exit joins its non-daemon children, the pool's workers
    among them, which wait for tasks forever unless the pool is shut down first. The child
    here compiles with a worker and must then exit on its own (it hung before the pool
    registered a multiprocessing finalizer)."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import multiprocessing

        def child():
            import hlofuse
            from hlofuse.codegen import llvm_pool
            exe = hlofuse.compile(hlofuse.parse_hlo({_module(POOLED)!r}), "cpu", cache=False)
            assert llvm_pool._pool is not None

        if __name__ == "__main__":
            p = multiprocessing.get_context("spawn").Process(target=child)
            p.start()
            p.join(timeout=90)
            alive = p.is_alive()
            if alive:
                p.kill()
            with open({str(tmp_path / "result.txt")!r}, "w") as f:
                f.write(f"exitcode {{p.exitcode}} hung {{alive}}")
    """))
    env = dict(os.environ, HLOFUSE_LLVM_PROCESSES="1", PYTHONPATH=ROOT)
    # the output to files, not pipes: a hung child's orphaned workers would hold a pipe open
    with open(tmp_path / "log.txt", "w") as log:
        subprocess.run([sys.executable, str(script)], stdout=log, stderr=log, env=env, timeout=200)
    assert (tmp_path / "result.txt").read_text() == "exitcode 0 hung False", (tmp_path / "log.txt").read_text()


@pytest.mark.parametrize("workers", [0, 1])
def test_no_more_kernels_in_flight_than_lanes_while_and_after_the_driver_runs(monkeypatch, workers):
    """Kernels take one thread per lane, the driver's task a thread of its own: with no worker
    one kernel at a time is in LLVM in this process (two took turns at llvmlite's lock once the
    driver was done, each one's LLVM seconds counting the other's), with one worker two at a
    time. compile_timed is replaced by a stand-in that records how many run at once (a worker
    would run the real one: only the thread lane's path and the lane threads are counted)."""
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", str(workers))
    lock, running, most = threading.Lock(), [0], [0]

    def counted(text: str, speed_level: int) -> tuple[bytes, float, float]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return text.encode(), 0.0, 0.0

    def in_worker(text: str, speed_level: int) -> Future:
        done: Future = Future()
        done.set_result(counted(text, speed_level))
        return done

    monkeypatch.setattr(llvm_pool, "compile_timed", counted)
    monkeypatch.setattr(llvm_pool, "submit", in_worker)
    driver_done = threading.Event()

    def driver() -> None:  # a short driver: done while most kernels still wait for a lane
        driver_done.set()

    with llvm_pool.Lanes(llvm_pool.MIN_TASKS * 4) as lanes:
        assert lanes.count == 1 + workers
        own = lanes.run(driver)
        futures = [lanes.compile(f"k{i}", 3) for i in range(12)]
        own.result()
        assert [f.result()[0] for f in futures] == [f"k{i}".encode() for i in range(12)]
    assert driver_done.is_set()
    assert most[0] == 1 + workers


HEROES = """HloModule heroes

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,8] parameter(0)
  q = f32[8,4] parameter(1)
  zero = f32[] constant(0)
  e = f32[8,8] exponential(p)
  d1 = f32[8,8] dot(p, e), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f32[8,8] dot(e, p), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d3 = f32[8,4] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r1 = f32[8] reduce(d1, zero), dimensions={1}, to_apply=sum
  r2 = f32[8] reduce(d3, zero), dimensions={1}, to_apply=sum
  t = f32[8,8] transpose(d2), dimensions={1,0}
  ROOT out = (f32[8], f32[8], f32[8,8]) tuple(r1, r2, t)
}
"""


def test_hero_signatures_count_distinct_reductions_dots_and_library_ops():
    """Two dots of one signature count once; a dot and a reduce of other shapes count each;
    elementwise, data movement, parameters, constants, tuples and the reducer's add do not."""
    module = hlofuse.parse_hlo(HEROES)
    # d1 and d2: one signature; d3; r1 (over f32[8,8]) and r2 (over f32[8,4]): 4
    assert llvm_pool.hero_signatures(module) == 4
    assert llvm_pool.hero_signatures(module, stop=2) == 2


def test_probably_pooled_needs_workers_and_enough_heroes(monkeypatch):
    module = hlofuse.parse_hlo(HEROES)
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "1")
    monkeypatch.setattr(llvm_pool, "PRESTART_HEROES", 4)
    assert llvm_pool.probably_pooled(module)
    monkeypatch.setattr(llvm_pool, "PRESTART_HEROES", 5)
    assert not llvm_pool.probably_pooled(module)
    monkeypatch.setattr(llvm_pool, "PRESTART_HEROES", 1)
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "0")
    assert not llvm_pool.probably_pooled(module)


def test_prestart_starts_warm_workers_once(processes):
    """`prestart` starts the workers (none with the pool off, not again while it runs), and a
    worker has made its target machines before its first task (its initializer)."""
    processes(0)
    assert not llvm_pool.prestart() and llvm_pool._pool is None
    processes(1)
    assert llvm_pool.prestart()
    deadline = time.monotonic() + 300
    while llvm_pool._pool is None and time.monotonic() < deadline:  # started on a thread of its own
        time.sleep(0.01)
    assert llvm_pool._pool is not None and not llvm_pool.prestart()
    levels = {llvm_pool.KERNEL_CODEGEN_LEVEL, llvm_pool.SMALL_CODEGEN_LEVEL, llvm_pool.UNOPTIMIZED}
    assert llvm_pool.pool().submit(llvm_pool.target_machines).result(timeout=300) == len(levels)
    text = str(emit_kernel_module(_planned_kernel(), CpuTarget(), "k"))
    assert llvm_pool.submit(text, 3).result(timeout=300)[0] == _kernel_object(text, 3)


def test_compile_prestarts_on_a_module_cache_miss_only(monkeypatch, tmp_path):
    """hlofuse.compile starts the workers before the passes for a CPU module that probably uses
    them, not when the module cache has the whole compile, nor for the interpreter."""
    calls = []
    monkeypatch.setattr(llvm_pool, "prestart", lambda: calls.append(1) or False)
    monkeypatch.setattr(llvm_pool, "probably_pooled", lambda module: True)
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "1")
    module = hlofuse.parse_hlo(HEROES)
    hlofuse.compile(module, "interpreter")
    assert calls == []
    first = hlofuse.compile(module, "cpu", cache_dir=str(tmp_path))
    assert calls == [1] and not first.from_cache
    again = hlofuse.compile(hlofuse.parse_hlo(HEROES), "cpu", cache_dir=str(tmp_path))
    assert again.from_cache and calls == [1]
    hlofuse.compile(module, "cpu", cache=False)
    assert calls == [1, 1]
