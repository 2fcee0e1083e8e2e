"""Latency-bound loop kernels on a 16-register (AVX2) target interleave fewer vectors than on
AVX-512 (cpu_loop.interleave_limit): the kernel emitted for a target without AVX-512 asks LLVM
for 4 interleaved vectors, the one for an AVX-512 target for 8, and the host's kernel computes
the interpreter's values whichever count it was built with."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import emit_kernel_module
from hlofuse.codegen.kernels import cpu_loop
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs

GELU = """HloModule gelu
ENTRY e {
  x = f32[64,1024] parameter(0)
  x2 = f32[64,1024] multiply(x, x)
  x3 = f32[64,1024] multiply(x2, x)
  c = f32[] constant(0.044715)
  cb = f32[64,1024] broadcast(c), dimensions={}
  t = f32[64,1024] multiply(x3, cb)
  u = f32[64,1024] add(x, t)
  k = f32[] constant(0.797884583)
  kb = f32[64,1024] broadcast(k), dimensions={}
  v = f32[64,1024] multiply(u, kb)
  th = f32[64,1024] tanh(v)
  one = f32[] constant(1)
  ob = f32[64,1024] broadcast(one), dimensions={}
  w = f32[64,1024] add(th, ob)
  h = f32[] constant(0.5)
  hb = f32[64,1024] broadcast(h), dimensions={}
  hw = f32[64,1024] multiply(w, hb)
  ROOT r = f32[64,1024] multiply(x, hw)
}
"""
COUNT = re.compile(r'"llvm\.loop\.interleave\.count", i32 (\d+)')


def _interleave_counts(vector_width) -> set[int]:
    """The interleave counts in the IR of the GELU module's loop kernel emitted for a host
    target whose kernels prefer `vector_width` (None: AVX2's default width)."""
    exe = hlofuse.compile(hlofuse.parse_hlo(GELU), "cpu", cache=False)
    target = CpuTarget()
    target.vector_width = vector_width
    kernels = [k for k in exe.program._planner.kernels if k.name]
    text = "\n".join(str(emit_kernel_module(k, target, k.name)) for k in kernels)
    return {int(c) for c in COUNT.findall(text)}


def test_interleave_limit_follows_the_register_file():
    assert cpu_loop.interleave_limit(512) == cpu_loop._INTERLEAVE == 8
    assert cpu_loop.interleave_limit(None) == cpu_loop._NARROW_INTERLEAVE == 4
    assert cpu_loop.interleave_limit(256) == 4


@pytest.mark.parametrize("width,want", [(None, 4), (512, 8)], ids=["avx2", "avx512"])
def test_gelu_kernel_interleaves_by_target(width, want):
    assert _interleave_counts(width) == {want}


def test_gelu_matches_the_interpreter():
    x = np.random.default_rng(3).standard_normal((64, 1024)).astype(np.float32) * 3
    module = hlofuse.parse_hlo(GELU)
    got = list(hlofuse.compile(module, "cpu", cache=False)(x))
    want = list(hlofuse.compile(module, "interpreter", fusion=False)(x))
    assert all(r.ok for r in compare_outputs(got, want))


def _big(op_lines: str) -> str:
    """A loop kernel over f32[4096,4096] (64 MB in, 64 MB out: beyond any host's L3)."""
    return ("HloModule big\nENTRY e {\n  x = f32[4096,4096] parameter(0)\n  y = f32[4096,4096] parameter(1)\n"
            + op_lines + "}\n")


BIG_TANH = _big("  t = f32[4096,4096] tanh(x)\n  ROOT r = f32[4096,4096] add(t, y)\n")
BIG_ADD = _big("  ROOT r = f32[4096,4096] add(x, y)\n")


def _nontemporal(text: str, vector_width) -> bool:
    """Whether the loop kernel of `text`, emitted for a host target whose kernels prefer
    `vector_width`, writes with streaming (`!nontemporal`) stores. Emitted only, never run."""
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner

    fused = hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    target = CpuTarget()
    target.vector_width = vector_width
    return any("!nontemporal" in str(emit_kernel_module(k, target, k.name)) for k in code.kernels)


@pytest.mark.parametrize("width,want", [(None, False), (512, True)], ids=["avx2", "avx512"])
def test_latency_bound_loops_stream_only_with_avx512(width, want):
    """cpu_loop.streams_rows: a loop interleaving math functions writes plain stores on an AVX2
    target (compute bounds it there), streaming stores on an AVX-512 one."""
    assert _nontemporal(BIG_TANH, width) is want


@pytest.mark.parametrize("width", [None, 512], ids=["avx2", "avx512"])
def test_loops_without_math_stream_on_both(width):
    assert _nontemporal(BIG_ADD, width)
