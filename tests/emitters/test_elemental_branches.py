"""Pad and concatenate operands evaluated under branches (emitters/elemental_branches.py): an
operand of at least HEAVY_OPERAND arithmetic instructions is computed only for the elements it
gives (a pad where at least PADDED_SHARE of its elements are padding), with the interpreter's
values; cheap operands and thin borders keep their selects."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.emitters import elemental_branches
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate


def _heavy(name: str, src: str, shape: str, count: int = 10) -> list[str]:
    """`count` dependent arithmetic instructions over `src` (a polynomial in it), the last
    named `name`."""
    lines, prev = [], src
    for k in range(count):
        op = "multiply" if k % 2 else "add"
        out = name if k == count - 1 else f"{name}_{k}"
        lines.append(f"  {out} = {shape} {op}({prev}, {src})")
        prev = out
    return lines


def _module(body: list[str], params: list[str], root: str) -> str:
    lines = [f"  {p}" for p in params] + body
    text = "\n".join(lines).replace(f"  {root} =", f"  ROOT {root} =")
    return f"HloModule m\n\nENTRY e {{\n{text}\n}}\n"


INTERIOR_PAD = _module(_heavy("h", "x", "f32[64,32]") + [
    "  z = f32[] constant(0)",
    "  p = f32[127,32] pad(h, z), padding=0_0_1x0_0",
], ["x = f32[64,32] parameter(0)"], "p")

BORDER_PAD = _module(_heavy("h", "x", "f32[64,32]") + [
    "  z = f32[] constant(0)",
    "  p = f32[66,34] pad(h, z), padding=1_1x1_1",
], ["x = f32[64,32] parameter(0)"], "p")

# (not the root: a root concatenate is written operand by operand, kernels/cpu_concat.py)
HEAVY_CONCAT = _module(_heavy("h", "x", "f32[16,32]") + _heavy("k", "y", "f32[16,32]") + [
    "  c = f32[32,32] concatenate(h, k), dimensions={0}",
    "  r = f32[32,32] negate(c)",
], ["x = f32[16,32] parameter(0)", "y = f32[16,32] parameter(1)"], "r")

CHEAP_CONCAT = _module([
    "  n = f32[16,32] negate(x)",
    "  c = f32[32,32] concatenate(n, y), dimensions={0}",
    "  r = f32[32,32] negate(c)",
], ["x = f32[16,32] parameter(0)", "y = f32[16,32] parameter(1)"], "r")


def _deep_concats(levels: int) -> str:
    """`levels` nested concatenates of a heavy left part and the previous level."""
    body, prev, n = [], "x", 4
    for k in range(levels):
        body += _heavy(f"h{k}", "x", "f32[4]", 8)
        body.append(f"  c{k} = f32[{n + 4}] concatenate(h{k}, {prev}), dimensions={{0}}")
        prev, n = f"c{k}", n + 4
    return _module(body, ["x = f32[4] parameter(0)"], prev)


def _run(text: str, target: str = "cpu"):
    module = parse_hlo(text)
    rng = np.random.default_rng(0)
    args = [(0.5 * rng.standard_normal(p.shape.dims)).astype(np.float32) for p in module.entry.parameters]
    want = evaluate(parse_hlo(text), args)[0]
    exe = hlofuse.compile(module, target, cache=False)
    got = exe(*args)
    got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
    return exe, got, want


def _emitted(text: str) -> str:
    """The kernels' LLVM IR as emitted (LLVM's passes fold the branches where they can: a
    pad along the rows is unswitched out of the loop over columns)."""
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
    from hlofuse.compiler import optimize
    from hlofuse.emitters.cpu.target import CpuTarget

    fused = optimize(parse_hlo(text), "cpu", verify=False)[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    return "".join(str(emit_kernel_module(k, CpuTarget(), k.name)) for k in code.kernels)


@pytest.mark.parametrize("text,branched", [(INTERIOR_PAD, True), (BORDER_PAD, False), (HEAVY_CONCAT, True),
                                           (CHEAP_CONCAT, False)],
                         ids=["interior-pad", "border-pad", "heavy-concat", "cheap-concat"])
def test_heavy_operands_are_computed_only_where_read(text, branched):
    _, got, want = _run(text)
    np.testing.assert_array_equal(got, want)  # the same instructions in the same order: the same bits
    assert ("sel.merge" in _emitted(text)) == branched


def test_the_branches_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(elemental_branches, "BRANCHED_OPERANDS", False)
    _, got, want = _run(INTERIOR_PAD)
    assert "sel.merge" not in _emitted(INTERIOR_PAD)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_nested_branches_are_bounded_and_agree(target):
    levels = elemental_branches.MAX_BRANCH_DEPTH + 8
    _, got, want = _run(_deep_concats(levels), target)
    np.testing.assert_allclose(got, want, rtol=1e-6)
