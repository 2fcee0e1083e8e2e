"""The kernel size cap (passes/fusion/size_limit.py): no fused kernel holds more than
`max_fused_instructions` instructions, a chain longer than that becomes several kernels, the
refusal is logged under "fusion-too-large" naming both instructions, and the split module
computes what the unfused one does (the interpreter on both, bit for bit; the CPU backend
against the interpreter)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import module_log
from hlofuse.passes.fusion.cost_model import CPU, GPU, MAX_FUSED_INSTRUCTIONS
from hlofuse.passes.fusion.instruction_fusion import InstructionFusion
from hlofuse.passes.fusion.size_limit import fits_in_kernel, kernel_size
from hlofuse.runtime.interpreter import evaluate


def chain(n: int, shape: str = "f32[4,3]") -> str:
    """`n` elementwise ops, each reading the one before (add, multiply, negate, tanh in turn)."""
    lines = ["HloModule chain", "", "ENTRY main {", f"  p = {shape} parameter(0)",
             f"  q = {shape} parameter(1)"]
    ops = ("add({c}, q)", "multiply({c}, q)", "negate({c})", "tanh({c})")
    cur = "p"
    for i in range(n):
        root = "ROOT " if i == n - 1 else ""
        lines.append(f"  {root}v{i} = {shape} " + ops[i % 4].format(c=cur))
        cur = f"v{i}"
    return "\n".join(lines + ["}"]) + "\n"


def _fusion_sizes(module) -> list[int]:
    return [kernel_size(i) for i in module.entry.instructions if i.opcode == "fusion"]


def _args(module) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(-1, 1, p.shape.dims).astype(np.float32) for p in module.entry.parameters]


@pytest.mark.parametrize("params", [CPU, GPU], ids=["cpu", "gpu"])
@pytest.mark.parametrize("n,limit", [(10, 4), (37, 8), (64, 16), (200, 50), (7, 7), (40, None)])
def test_chain_is_cut_into_kernels_of_at_most_the_limit(params, n, limit):
    text = chain(n)
    before, after = parse_hlo(text), parse_hlo(text)
    InstructionFusion(dataclasses.replace(params, max_fused_instructions=limit)).run(after)
    verify(after)
    sizes = _fusion_sizes(after)
    if limit is None:
        assert sizes == [n]
    else:
        assert max(sizes) <= limit
        assert sum(sizes) == n  # nothing duplicated, nothing left unfused
        assert len(sizes) == math.ceil(n / limit)
    args = _args(before)
    for w, g in zip(evaluate(before, args), evaluate(after, args)):
        np.testing.assert_array_equal(g, w)
    refusals = [e for e in module_log(after) if e.action == "refused" and e.rule == "fusion-too-large"]
    assert len(refusals) == (0 if limit is None else len(sizes) - 1)
    for e in refusals:
        assert "would be too large" in e.reason and e.producer in e.reason


def test_rule_counts_fusions_and_plain_instructions():
    module = parse_hlo(chain(12))
    InstructionFusion(dataclasses.replace(CPU, max_fused_instructions=5)).run(module)
    a, b = [i for i in module.entry.instructions if i.opcode == "fusion"][:2]
    assert kernel_size(a) + kernel_size(b) > 5
    assert not fits_in_kernel(a, b, 5)
    assert fits_in_kernel(a, b, kernel_size(a) + kernel_size(b))
    assert fits_in_kernel(a, b, None)
    p = module.entry.parameters[0]
    assert kernel_size(p) == 1


def test_default_cap_splits_a_long_chain_and_the_cpu_backend_agrees():
    n = MAX_FUSED_INSTRUCTIONS * 2 + 37
    module = parse_hlo(chain(n, "f32[5]"))
    exe = hlofuse.compile(module, "cpu")
    sizes = _fusion_sizes(exe.fused_module)
    assert max(sizes) <= MAX_FUSED_INSTRUCTIONS and len(sizes) == 3
    args = _args(module)
    want = evaluate(module, args)
    got = exe(*args)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
