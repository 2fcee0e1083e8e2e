"""A flat loop kernel over a short range is vectorised as one loop with its last partial vector
masked (kernels/loop_hints.fold_tail: `llvm.loop.vectorize.predicate.enable`), not as a vector
loop, a vector epilogue and a scalar remainder, three copies of the body for LLVM to compile; a
long range keeps the three (masked, it ran up to 3.6x slower). Results are checked against the
interpreter and bit for bit against the same kernel compiled without the hint."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import loop_hints
from hlofuse.emitters.cpu.target import CpuTarget, optimized_module
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.cpu_executor import CpuProgram
from llvm_loops import instructions_after_o3, loop_hint_names

FOLD = "llvm.loop.vectorize.predicate.enable"


def _module(n: int) -> str:
    """exp(tanh(x) * 0.5) + x over f32[n]: one flat loop kernel with two math functions."""
    return f"""HloModule m
ENTRY e {{
  x = f32[{n}] parameter(0)
  t = f32[{n}] tanh(x)
  h = f32[] constant(0.5)
  hb = f32[{n}] broadcast(h), dimensions={{}}
  m = f32[{n}] multiply(t, hb)
  e = f32[{n}] exponential(m)
  ROOT r = f32[{n}] add(e, x)
}}
"""


def _compile(text: str, fold: bool, monkeypatch) -> CpuProgram:
    with monkeypatch.context() as m:
        m.setattr(loop_hints, "FOLD_TAILS", fold)
        return CpuProgram.compile(hlofuse.compiler.optimize(parse_hlo(text))[0], cache=False)


def _kernel_ir(text: str, fold: bool, monkeypatch) -> str:
    """The emitted (unoptimized) IR of `text`'s one kernel."""
    fused = hlofuse.compiler.optimize(parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = code.kernels
    with monkeypatch.context() as m:
        m.setattr(loop_hints, "FOLD_TAILS", fold)
        return str(emit_kernel_module(kernel, CpuTarget(), "k"))


@pytest.mark.parametrize("n", [2, 7, 16, 17, 100, 1000, loop_hints.FOLD_TAIL_UNITS])
def test_short_flat_loops_fold_their_tail(n, monkeypatch):
    text = _module(n)
    assert FOLD in loop_hint_names(_kernel_ir(text, True, monkeypatch))["elem"]
    assert FOLD not in loop_hint_names(_kernel_ir(text, False, monkeypatch)).get("elem", set())
    folded, plain = _compile(text, True, monkeypatch), _compile(text, False, monkeypatch)
    x = np.random.default_rng(n).uniform(-4, 4, n).astype(np.float32)
    x[0] = np.nan if n > 3 else x[0]
    (got,) = folded.run([x])
    (base,) = plain.run([x])
    np.testing.assert_array_equal(got.view(np.int32), base.view(np.int32))
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs([got], list(want)):
        assert r.ok, r


def test_folded_loop_is_one_vector_loop(monkeypatch):
    """The hint is honoured: masked loads and stores, no vector epilogue, and far fewer
    instructions after O3 than the three copies LLVM makes without it."""
    text = _module(64)
    folded, plain = _kernel_ir(text, True, monkeypatch), _kernel_ir(text, False, monkeypatch)
    optimized = str(optimized_module(folded))
    assert "llvm.masked.store" in optimized and "vec.epilog" not in optimized
    assert "vec.epilog" in str(optimized_module(plain))
    assert instructions_after_o3(folded) < 0.75 * instructions_after_o3(plain)  # 313 against 466


def test_short_flat_loops_interleave_no_more_vectors_than_their_range(monkeypatch):
    """cpu_loop.interleave_count: 64 elements of f32 are four 16-lane vectors, so a loop with
    math functions interleaves 4 (8 would be copies of the body that never run); a long range
    takes the host's limit (8 with AVX-512, 4 with AVX2: cpu_loop.interleave_limit)."""
    from hlofuse.codegen.kernels.cpu_loop import interleave_limit

    hints = {}
    for n in (64, 4096):
        ir_text = _kernel_ir(_module(n), True, monkeypatch)
        counts = re.findall(r'"llvm.loop.interleave.count", i32 (\d+)', ir_text)
        hints[n] = int(counts[0])
    assert hints == {64: 4, 4096: interleave_limit(CpuTarget().vector_width)}


def test_long_flat_loops_keep_their_epilogue(monkeypatch):
    ir_text = _kernel_ir(_module(loop_hints.FOLD_TAIL_UNITS + 1), True, monkeypatch)
    assert "elem" in loop_hint_names(ir_text) and FOLD not in loop_hint_names(ir_text)["elem"]
