"""Issue 16 rule 3: a scatter roots an input fusion of the producers of its indices and updates
(XLA's CanEmitInputFusedScatter), never of its updated operand or of anything reading that
buffer; the decision and its rule key are in the fusion log; the fused module computes what
the input computed, on the CPU (one in-place scatter kernel reading the fused producers through
element generators) and the emulated GPU, bit for bit against the interpreter (the modules use
exactly rounded ops only, so any difference is the scatter's)."""
from __future__ import annotations

import numpy as np
import pytest
from backend_oracle import bits_equal

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import module_log
from hlofuse.passes.pipeline import PassPipeline, parse_pass_list

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
"""
ROW_DNUMS = "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1"

INPUTS = f"""HloModule m
{ADD}
ENTRY e {{
  x = f32[8,6] parameter(0)
  i = s32[5] parameter(1)
  u = f32[5,6] parameter(2)
  one = s32[] constant(1)
  ones = s32[5] broadcast(one), dimensions={{}}
  idx = s32[5] add(i, ones)
  upd = f32[5,6] multiply(u, u)
  ex = f32[8,6] abs(x)
  operand = f32[8,6] negate(ex)
  ROOT s = f32[8,6] scatter(operand, idx, upd), {ROW_DNUMS}, to_apply=add
}}
"""

READS_OPERAND = f"""HloModule m
{ADD}
ENTRY e {{
  x = f32[5,6] parameter(0)
  i = s32[5] parameter(1)
  upd = f32[5,6] multiply(x, x)
  ROOT s = f32[5,6] scatter(x, i, upd), {ROW_DNUMS}, to_apply=add
}}
"""


def _fuse(text: str, target: str):
    module = parse_hlo(text)
    PassPipeline(parse_pass_list("fusion", defaults={"target": target}), verify=True).run(module)
    return module, module_log(module)


def _args(text: str, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    args = []
    for p in parse_hlo(text).entry.parameters:
        dt = p.shape.dtype.numpy
        if np.issubdtype(dt, np.integer):  # indices: in range, duplicated, and some out of bounds
            args.append(rng.integers(-1, 9, p.shape.dims).astype(dt))
        else:
            args.append(rng.standard_normal(p.shape.dims).astype(dt))
    return args


def _scatter_fusions(module):
    return [f for f in module.entry.instructions
            if f.opcode == "fusion" and f.fused_computation.root.opcode == "scatter"]


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_index_and_update_producers_fuse_into_the_scatter(target):
    module, log = _fuse(INPUTS, target)
    (fusion,) = _scatter_fusions(module)
    assert fusion.attrs["kind"] == "kInput"
    inside = {i.opcode for i in fusion.fused_computation.instructions}
    assert {"add", "multiply", "broadcast", "scatter"} <= inside
    assert not {"negate", "abs"} & inside  # the updated operand's producers stay out
    operand = fusion.operands[0]
    assert operand.opcode in ("negate", "fusion") and operand is not fusion
    refusals = [e for e in log.refusals() if e.rule == "scatter-operand"]
    assert refusals and all(e.producer in ("operand", "ex") or "fusion" in e.producer for e in refusals), log.to_text()


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_a_producer_reading_the_updated_operand_is_refused(target):
    module, log = _fuse(READS_OPERAND, target)
    assert not _scatter_fusions(module), module.to_text()
    assert any(e.rule == "scatter-operand" and e.producer == "upd" for e in log.refusals()), log.to_text()


def test_the_scatter_rule_refuses_the_operand_and_its_readers_directly():
    from hlofuse.passes.fusion.in_place import scatter_input

    module = parse_hlo(INPUTS)
    by_name = {i.name: i for i in module.entry.instructions}
    s = by_name["s"]
    assert scatter_input(by_name["upd"], s)
    assert scatter_input(by_name["idx"], s)
    assert scatter_input(by_name["operand"], s).rule == "scatter-operand"
    reads = parse_hlo(READS_OPERAND)
    names = {i.name: i for i in reads.entry.instructions}
    assert scatter_input(names["upd"], names["s"]).rule == "scatter-operand"
    assert scatter_input(names["s"], names["upd"]).rule == "scatter-output"  # a scatter is no producer


VARIADIC = """HloModule m
comb {
  a0 = f32[] parameter(0)
  a1 = s32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  s0 = f32[] add(a0, b0)
  m1 = s32[] maximum(a1, b1)
  ROOT t = (f32[], s32[]) tuple(s0, m1)
}
ENTRY e {
  x = f32[7,4] parameter(0)
  y = s32[7,4] parameter(1)
  i = s32[6,1] parameter(2)
  u = f32[6,4] parameter(3)
  lo = s32[] constant(0)
  hi = s32[] constant(6)
  los = s32[6,1] broadcast(lo), dimensions={}
  his = s32[6,1] broadcast(hi), dimensions={}
  ic = s32[6,1] clamp(los, i, his)
  uu = f32[6,4] multiply(u, u)
  uc = s32[6,4] convert(u)
  ROOT s = (f32[7,4], s32[7,4]) scatter(x, y, ic, uu, uc), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}
"""

IOTA_UNIQUE = f"""HloModule m
{ADD}
ENTRY e {{
  x = f32[16,3] parameter(0)
  u = f32[16,3] parameter(1)
  io = s32[16] iota(), iota_dimension=0
  c = s32[] constant(15)
  cs = s32[16] broadcast(c), dimensions={{}}
  rev = s32[16] subtract(cs, io)
  two = f32[] constant(2)
  twos = f32[16,3] broadcast(two), dimensions={{}}
  upd = f32[16,3] multiply(u, twos)
  ROOT s = f32[16,3] scatter(x, rev, upd), {ROW_DNUMS}, unique_indices=true, to_apply=add
}}
"""


@pytest.mark.parametrize("name,text", [("inputs", INPUTS), ("reads_operand", READS_OPERAND),
                                       ("variadic", VARIADIC), ("iota_unique", IOTA_UNIQUE)])
@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
def test_fused_scatter_results_match_the_interpreter(name, text, backend):
    args = _args(text, seed=len(name))
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    exe = hlofuse.compile(parse_hlo(text), target=backend)
    got = exe(*args)
    for g, w in zip(got, want, strict=True):
        assert bits_equal(np.asarray(g), np.asarray(w)).all(), (name, backend)
    if backend == "cpu" and name != "reads_operand":
        fused = _scatter_fusions(exe.fused_module)
        assert len(fused) == 1 and len(fused[0].fused_computation.instructions) > 4
        # The whole fusion is one in-place scatter kernel: its producers are read through the
        # element generators, not computed by kernels of their own.
        steps = [s for s in exe.program.code.native.steps if s.step.inst is fused[0]]
        assert [k.custom for k in steps[0].step.kernels] == ["scatter"]
