"""Kernels compiled in groups (codegen/cpu.py kernel_groups): small kernels share an LLVM module
and an object file, within the group limits; the code is the same as compiled one by one; the
kernel cache stays per kernel, and a program whose cached objects define one kernel twice (two
groups that both compiled it) loads and runs."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import cache, cpu
from hlofuse.codegen.cpu import compile_cpu
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.interpreter import evaluate


@pytest.fixture(autouse=True)
def one_lane(monkeypatch):
    """One LLVM lane, whose groups are GROUP_KERNELS kernels (with several lanes
    `cpu.group_kernels` makes them smaller: tests/codegen/test_llvm_pool.py)."""
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "1")


def _module(kernels: int) -> str:
    """`kernels` independent elementwise chains of different shapes (no two share a kernel)."""
    lines = ["HloModule chains", "", "ENTRY main {"]
    outs, types = [], []
    for k in range(kernels):
        shape = f"f32[4,{3 + k}]"
        lines += [f"  p{k} = {shape} parameter({k})", f"  e{k} = {shape} exponential(p{k})",
                  f"  t{k} = {shape} tanh(e{k})", f"  r{k} = {shape} multiply(t{k}, p{k})"]
        outs.append(f"r{k}")
        types.append(shape)
    lines += [f"  ROOT out = ({', '.join(types)}) tuple({', '.join(outs)})", "}"]
    return "\n".join(lines) + "\n"


def _fused(text: str):
    return hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]


def _args(module) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.uniform(-1, 1, p.shape.dims).astype(np.float32) for p in module.entry.parameters]


def _files(code) -> list[bytes]:
    """The distinct object files of compiled code, in the kernels' order."""
    return list(dict.fromkeys(o.object_code for o in code.objects))


def test_small_kernels_share_object_files_and_compute_the_same_bits(monkeypatch):
    """Twenty small kernels make ceil(20 / GROUP_KERNELS) object files, each holding its
    kernels' functions; the program computes the interpreter's values and the same bits as
    with every kernel in a module of its own."""
    n = 20
    text = _module(n)
    module = hlofuse.parse_hlo(text)
    args = _args(module)
    grouped = CpuProgram.compile(_fused(text), cache=False)
    assert len(grouped.code.objects) == n
    files = _files(grouped.code)
    assert len(files) == math.ceil(n / cpu.GROUP_KERNELS) < n
    for o in grouped.code.objects:  # the object of every kernel names its function
        assert o.symbol.encode() in o.object_code
    monkeypatch.setattr(cpu, "GROUP_KERNELS", 1)
    alone = CpuProgram.compile(_fused(text), cache=False)
    assert len(_files(alone.code)) == n
    want = evaluate(module, args)
    for g, a, w in zip(grouped.run(args), alone.run(args), want):
        assert g.tobytes() == a.tobytes()
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("limit, files", [("GROUP_KERNELS", 4), ("GROUP_INSTRUCTIONS", 10)])
def test_a_group_closes_at_its_limits(monkeypatch, limit, files):
    """At most GROUP_KERNELS kernels share a module (3 here: 10 kernels, 4 files); a kernel
    that brings its module to GROUP_INSTRUCTIONS closes it (1 here: every kernel alone)."""
    monkeypatch.setattr(cpu, limit, 3 if limit == "GROUP_KERNELS" else 1)
    code = compile_cpu(_fused(_module(10)), cache=False)
    assert len(code.objects) == 10 and len(_files(code)) == files


def test_the_cache_stays_per_kernel_and_a_kernel_may_be_defined_twice(cache_dir):
    """Every kernel of a group has its own cache entry (the group's object); with one entry
    gone, that kernel alone is compiled again, so the program loads two objects that both
    define it, and runs right; the next compile hits every kernel."""
    n = 6
    text = _module(n)
    module = hlofuse.parse_hlo(text)
    args = _args(module)
    first = compile_cpu(_fused(text), cache_dir=str(cache_dir))
    assert first.compiled_count == n and len(_files(first)) == 1
    entries = {f[:-len(cache.OBJECT)] for f in os.listdir(cache_dir) if f.endswith(cache.OBJECT)}
    assert {o.key for o in first.objects} <= entries
    gone = first.objects[2]
    os.remove(cache.CompileCache(str(cache_dir)).path(gone.key))
    cache.memory_cache.clear()
    prog = CpuProgram.compile(_fused(text), cache_dir=str(cache_dir))
    assert prog.code.compiled_count == 1
    again = next(o for o in prog.code.objects if o.key == gone.key)
    others = [o for o in prog.code.objects if o.key != gone.key]
    assert again.object_code != others[0].object_code and gone.symbol.encode() in others[0].object_code
    for g, w in zip(prog.run(args), evaluate(module, args)):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
    cache.memory_cache.clear()
    assert compile_cpu(_fused(text), cache_dir=str(cache_dir)).compiled_count == 0


class _Cycle:
    """An object in a reference cycle: freed only by the cyclic collector."""

    def __init__(self) -> None:
        self.me = self


def test_emission_runs_with_the_collector_paused_and_frees_its_garbage(monkeypatch):
    """compile_cpu emits with the cyclic collector paused, then collects what the emission
    left (a cycle made during it is gone after it); the collector is running again after it,
    and a caller's paused collector stays paused."""
    import gc
    import weakref

    seen, made = [], []
    real = cpu.kernel_groups

    def groups(objects, target, limit=cpu.GROUP_KERNELS):
        seen.append(gc.isenabled())
        made.append(weakref.ref(_Cycle()))
        yield from real(objects, target, limit)

    monkeypatch.setattr(cpu, "kernel_groups", groups)
    assert gc.isenabled()
    compile_cpu(_fused(_module(3)), cache=False)
    assert seen == [False] and made[0]() is None and gc.isenabled()
    gc.disable()
    try:
        with cpu.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


# A oneDNN matmul kernel (cpu_gemm_onednn: attention's q.k^T, as tests/codegen/test_onednn_matmul.py's
# module-cache test) beside a small elementwise kernel of shape f32[4,5], which the second
# module computes alone.
_WITH_PRIMITIVE = """HloModule with_primitive
ENTRY e {
  q = f32[2,256,4,32] parameter(0)
  k = f32[2,256,4,32] parameter(1)
  x = f32[4,5] parameter(2)
  qk = f32[2,4,256,256] dot(q, k), lhs_batch_dims={0,2}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, rhs_contracting_dims={3}
  e = f32[4,5] exponential(x)
  t = f32[4,5] tanh(e)
  ROOT r = (f32[2,4,256,256], f32[4,5]) tuple(qk, t)
}
"""
_WITHOUT = """HloModule without
ENTRY e {
  x = f32[4,5] parameter(0)
  e = f32[4,5] exponential(x)
  ROOT t = f32[4,5] tanh(e)
}
"""


# one level in both programs: a small kernel's level depends on its program's work
# (codegen/kernel_work.small_kernels), and the second program is tiny
@pytest.mark.usefixtures("kernels_at_o3")
def test_a_kernel_calling_a_primitive_is_a_group_of_its_own(cache_dir, monkeypatch):
    """Its group object would otherwise carry a call of a function only its own program
    defines into every program that loads a group mate from the cache: the elementwise kernel
    compiled beside the oneDNN matmul is loaded by a program without one, and runs."""
    from hlofuse.codegen.kernels import cpu_gemm_onednn
    from hlofuse.codegen.kernels.onednn_kernels import calls_primitive
    from hlofuse.runtime import onednn_primitives

    # the primitive wherever it can express the dot (as test_onednn_matmul.py's `forced`)
    monkeypatch.setattr(cpu_gemm_onednn, "prefers_onednn_matmul",
                        lambda comp: (m := cpu_gemm_onednn.onednn_matmul(comp)) is not None
                        and onednn_primitives.implementation(m.desc) is not None)
    if not any(calls_primitive(k) for k in compile_cpu(_fused(_WITH_PRIMITIVE), cache=False).kernels):
        pytest.skip("no oneDNN matmul kernel here (libdnnl missing or HLOFUSE_GEMM=openblas)")
    monkeypatch.setattr(cpu, "GROUP_KERNELS", 8)
    first = compile_cpu(_fused(_WITH_PRIMITIVE), cache_dir=str(cache_dir))
    groups = {}
    for o in first.objects:
        groups.setdefault(o.object_code, []).append(o)
    calling = [o for o in first.objects if calls_primitive(o.kernels[0])]
    assert calling and all(len(groups[o.object_code]) == 1 for o in calling)
    cache.memory_cache.clear()
    module = hlofuse.parse_hlo(_WITHOUT)
    prog = CpuProgram.compile(_fused(_WITHOUT), cache_dir=str(cache_dir))
    assert prog.code.compiled_count == 0  # its kernel came from the first program's objects
    args = _args(module)
    np.testing.assert_allclose(prog.run(args)[0], evaluate(module, args)[0], rtol=2e-6, atol=1e-6)
