"""LLVM work on concurrent lanes (codegen/llvm_pool.py, codegen/cpu.py compile_objects): LLVM
compiles on several threads at once past llvmlite's lock, and the object bytes, symbols and results
are the same whichever lanes compiled the kernels; the kernel cache stays keyed per kernel, a
failing kernel's error reaches the caller, the lanes are bounded by HLOFUSE_CPU_THREADS and the
groups sized for them."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import cache, cpu, llvm_pool
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, compile_cpu, emit_kernel_module
from hlofuse.emitters.cpu.target import CpuTarget, optimized_module, pipeline_options
from hlofuse.runtime.interpreter import evaluate
from backend_cases import corpus_case
from repo_paths import JAX_CORPUS

# Kernels enough for several groups on every lane.
MANY = 3 * cpu.GROUP_KERNELS + 2


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
    """A kernel's object made through llvmlite's own (locked) API, by hand: the O`level`
    pipeline on the shared host target machine, then the code generator at KERNEL_CODEGEN_LEVEL."""
    return llvm_pool.target_machine(llvm_pool.KERNEL_CODEGEN_LEVEL).emit_object(optimized_module(text, level))


def _kernel_texts(kernels: int) -> list[str]:
    fused = _fused(_module(kernels))
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    return [str(emit_kernel_module(k, CpuTarget(), f"k{i}")) for i, k in enumerate(planner.kernels)]


def test_a_lane_makes_what_llvmlites_locked_api_makes():
    """compile_timed (its own context, pooled target machines, the long calls past the lock)
    gives the bytes of llvmlite's usual path at every level."""
    text = _kernel_texts(1)[0]
    for level in (2, 3):
        assert llvm_pool.compile_timed(text, level)[0] == _kernel_object(text, level)
    small = llvm_pool.compile_timed(text, llvm_pool.SMALL_KERNEL)[0]
    by_hand = llvm_pool.target_machine(llvm_pool.SMALL_CODEGEN_LEVEL).emit_object(
        llvm_pool.optimized_kernel(text, llvm_pool.SMALL_KERNEL))
    assert small == by_hand and len(small) > 100
    assert len(llvm_pool.compile_timed(text, llvm_pool.UNOPTIMIZED)[0]) > 100


def test_threads_compile_at_once_and_make_the_serial_bytes():
    """Four threads compiling 12 kernels at every level (each kernel twice, so equal texts run
    concurrently too: 72 jobs, 18 a thread) make exactly the objects of one thread."""
    texts = _kernel_texts(12)
    jobs = [(t, level) for t in texts for level in (3, llvm_pool.SMALL_KERNEL, llvm_pool.UNOPTIMIZED)] * 2
    serial = [llvm_pool.compile_timed(t, level)[0] for t, level in jobs]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(lambda job: llvm_pool.compile_timed(*job)[0], jobs))
    assert concurrent == serial


def test_the_long_calls_run_while_another_thread_holds_llvmlites_lock():
    """Parsing, verification, the pass pipeline and code generation go to LLVM past llvmlite's
    process-wide lock: they complete while another thread holds it (through the lock they would
    wait for it, and the compile would not run beside another). The objects they need from
    llvmlite's locked API are made first."""
    import llvmlite.binding as llvm
    from llvmlite.binding import ffi

    text = _kernel_texts(1)[0]
    want = llvm_pool.compile_timed(text, 3)[0]
    context = llvm.create_context()
    with llvm_pool._machines(llvm_pool.KERNEL_CODEGEN_LEVEL, llvm_pool.KERNEL_CODEGEN_LEVEL) as (pipeline_tm, tm):
        builder = llvm.create_pass_builder(pipeline_tm, pipeline_options(3))
        passes = builder.getModulePassManager()
        held, release, done = threading.Event(), threading.Event(), []

        def hold() -> None:
            with ffi.lib._lock:
                held.set()
                release.wait(60)

        def compile_unlocked() -> None:
            from ctypes import c_char_p

            source, err = c_char_p(text.encode()), llvm_pool._Message()
            module = llvm_pool._unlocked("LLVMPY_ParseAssembly")(context, source, err)
            assert not err and not llvm_pool._unlocked("LLVMPY_VerifyModule")(module, err)
            llvm_pool._unlocked("LLVMPY_RunNewModulePassManager")(passes, module, builder)
            done.append((module, llvm_pool._unlocked("LLVMPY_TargetMachineEmitToMemory")(tm, module, 1, err)))

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(60)
        worker = threading.Thread(target=compile_unlocked)
        worker.start()
        worker.join(60)
        finished = not worker.is_alive()
        release.set()
        holder.join()
        worker.join()
        assert finished and done and done[0][1]
        module, buffer = done[0]
        from ctypes import string_at

        got = string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)
        llvm.ModuleRef(module, context).close()
    context.close()
    assert got == want


@pytest.fixture(scope="module")
def serial_many():
    """The MANY-kernel module's text and its serial compile (one lane), shared by the lane
    counts below: the serial bytes they are compared with do not depend on them."""
    text = _module(MANY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HLOFUSE_MODULE_CACHE", "0")
        mp.setenv("HLOFUSE_CPU_THREADS", "1")
        return text, compile_cpu(_fused(text), cache=False)


def test_the_many_kernel_module_runs_as_the_interpreter(monkeypatch):
    """The module of test_concurrent_compile_is_bit_identical_to_serial, compiled (on the
    machine's lanes) and run, agrees with the interpreter."""
    text = _module(MANY)
    module = hlofuse.parse_hlo(text)
    exe = hlofuse.compile(module, "cpu", cache=False)
    rng = np.random.default_rng(3)
    args = [rng.uniform(-1, 1, p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    for g, w in zip(exe(*args), evaluate(module, args)):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("threads", ["1", "2", "4"])
def test_concurrent_compile_is_bit_identical_to_serial(monkeypatch, threads, serial_many):
    """Every kernel's object, its key, symbol and place in the program, and the driver's object
    are the same bytes on one lane and on several (whose groups are smaller: group_kernels);
    the results agree with the interpreter (test_the_many_kernel_module_runs_as_the_interpreter)."""
    text, serial = serial_many
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", threads)
    concurrent = compile_cpu(_fused(text), cache=False)
    assert len(serial.objects) >= MANY and serial.compiled_count == len(serial.objects)
    assert [(o.key, o.symbol) for o in serial.objects] == [(o.key, o.symbol) for o in concurrent.objects]
    assert serial.symbols == concurrent.symbols and serial.driver_object == concurrent.driver_object


def test_the_kernel_cache_stays_per_kernel(monkeypatch, tmp_path):
    """Compiled concurrently, each distinct kernel is one cache entry; a module changed in one
    kernel recompiles that kernel alone."""
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")
    text = _module(MANY)
    cache.memory_cache.clear()
    first = compile_cpu(_fused(text), cache_dir=str(tmp_path))
    entries = {f[:-len(cache.OBJECT)] for f in __import__("os").listdir(tmp_path) if f.endswith(cache.OBJECT)}
    assert {o.key for o in first.objects} <= entries and first.compiled_count == len(first.objects)
    cache.memory_cache.clear()
    changed = compile_cpu(_fused(text.replace("e0 = f32[4,3] exponential(p0)", "e0 = f32[4,3] sine(p0)")),
                          cache_dir=str(tmp_path))
    assert changed.compiled_count == 1 and len(changed.objects) == len(first.objects)


def test_the_driver_is_compiled_unoptimized_and_runs_as_the_interpreter(monkeypatch):
    """The driver (calls, loops, copies) goes to LLVM at UNOPTIMIZED, never at a kernel's level:
    a while loop's module, whose driver loops, computes the interpreter's result."""
    from hlofuse.codegen import driver

    levels: list[int] = []
    real = llvm_pool.compile_timed

    def spy(text, level):
        levels.append(("@\"hlofuse_plan_0\"" in text or "@hlofuse_plan_0" in text, level))
        return real(text, level)

    monkeypatch.setattr(llvm_pool, "compile_timed", spy)
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




def _break_one_kernel(monkeypatch, victim: int) -> list[str]:
    """Make the group holding the `victim`-th kernel emitted print as IR LLVM refuses; the
    symbols seen, in order."""
    real, seen = cpu.kernel_groups, []

    class Broken:
        def __init__(self, mod):
            self.mod = mod

        def __str__(self) -> str:
            return str(self.mod).replace("ret void", "ret i32 undefined_value", 1)

    def groups(objects, target, limit=cpu.GROUP_KERNELS):
        for members, mod in real(objects, target, limit):
            first = len(seen)
            seen.extend(o.symbol for o in members)
            yield members, (Broken(mod) if first <= victim < len(seen) else mod)

    real_text = cpu.module_text
    monkeypatch.setattr(cpu, "kernel_groups", groups)
    monkeypatch.setattr(cpu, "module_text", lambda mod: str(mod) if isinstance(mod, Broken) else real_text(mod))
    return seen


def test_a_failing_kernel_raises_its_error_from_any_lane(monkeypatch):
    """LLVM's refusal of one kernel reaches compile_cpu's caller as the same exception on one
    lane and on two (its line differs: the groups do), and the lanes compile again afterwards."""
    fused = _fused(_module(MANY))
    errors = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("HLOFUSE_CPU_THREADS", threads)
        _break_one_kernel(monkeypatch, victim=5)
        with pytest.raises(Exception) as info:
            compile_cpu(fused, cache=False)
        errors[threads] = (type(info.value), str(info.value))
        monkeypatch.undo()
    for kind, message in errors.values():
        assert kind is RuntimeError and message.startswith("LLVM IR parsing error")
        assert "error: expected value token\n  ret i32 undefined_value" in message
    text = _kernel_texts(1)[0]
    assert llvm_pool.compile_timed(text, 3)[0] == _kernel_object(text, 3)


def test_lanes_follow_hlofuse_cpu_threads_and_the_groups_the_lanes(monkeypatch):
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "1")
    assert llvm_pool.lanes() == 1 and llvm_pool.Lanes(100).count == 1
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "3")
    assert llvm_pool.lanes() == 3 and llvm_pool.Lanes(100).count == 3 and llvm_pool.Lanes(2).count == 2
    # one lane: groups of GROUP_KERNELS; several: at least GROUPS_PER_LANE groups a lane
    assert cpu.group_kernels(7, 1) == cpu.GROUP_KERNELS
    assert cpu.group_kernels(7, 2) == 1 and cpu.group_kernels(24, 2) == 3 and cpu.group_kernels(500, 2) == cpu.GROUP_KERNELS


@pytest.mark.parametrize("threads", ["1", "2"])
def test_no_more_compiles_at_once_than_lanes_while_and_after_the_driver_runs(monkeypatch, threads):
    """Kernels take one thread per lane, the driver's task a thread of its own, and both share
    the lanes' slots: at most `count` compilations run at once, the driver's included.
    compile_timed is replaced by a stand-in that records how many run at once."""
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", threads)
    lock, running, most = threading.Lock(), [0], [0]

    def counted(text: str, speed_level: int) -> tuple[bytes, float, float]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return text.encode(), 0.0, 0.0

    monkeypatch.setattr(llvm_pool, "compile_timed", counted)
    with llvm_pool.Lanes(12) as lanes:
        assert lanes.count == int(threads)
        own = lanes.run(lambda: [lanes.compile_here(f"d{i}", 0) for i in range(3)])
        futures = [lanes.compile(f"k{i}", 3) for i in range(12)]
        assert own.result() == [f"d{i}".encode() for i in range(3)]
        assert [f.result()[0] for f in futures] == [f"k{i}".encode() for i in range(12)]
    assert most[0] == int(threads)
