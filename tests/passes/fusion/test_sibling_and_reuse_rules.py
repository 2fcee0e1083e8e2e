"""Issue 16's rules 2, 5 and 7 (the GPU's) each stated on a small module (rules 4, 6 and 10 are checked on
XLA's own test modules in test_xla_parity.py): the decision XLA's rule gives, the rule key in
the fusion log, and the fused module still computing what the input computed (interpreter)."""
from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import module_log
from hlofuse.passes.pipeline import parse_pass_list, PassPipeline


def _run(text: str, passes: str, target: str):
    before, after = parse_hlo(text), parse_hlo(text)
    PassPipeline(parse_pass_list(passes, defaults={"target": target}), verify=True).run(after)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(p.shape.dims).astype(p.shape.dtype.numpy) for p in before.entry.parameters]
    want = hlofuse.compile(before, target="interpreter")(*args)
    got = hlofuse.compile(parse_hlo(after.to_text()), target="interpreter", fusion=False)(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    return after, module_log(after)


def _fusion_of(module, opcode: str):
    return [f for f in module.entry.instructions if f.opcode == "fusion"
            and any(i.opcode == opcode for i in f.fused_computation.instructions)]


EXPENSIVE_INTO_BROADCAST = """HloModule m
ENTRY e {
  x = f32[64] parameter(0)
  y = f32[64,1] parameter(1)
  ex = f32[64] log(x)
  b = f32[64,1] broadcast(ex), dimensions={0}
  ROOT a = f32[64,1] add(b, y)
}
"""


def test_rule2_an_expensive_op_is_not_fused_into_a_broadcast_even_one_that_does_not_grow():
    # b has as many elements as ex: before rule 2 it did not count as re-reading, and the
    # logarithm was fused into it; XLA counts every broadcast as reusing its operand.
    for target in ("cpu", "gpu"):
        after, log = _run(EXPENSIVE_INTO_BROADCAST, "fusion", target)
        assert not _fusion_of(after, "log"), after.to_text()
        assert any(e.rule == "expensive-reused" and e.producer == "ex" for e in log.refusals()), log.to_text()


DISJOINT_SLICES = """HloModule m
ENTRY e {
  x = f32[128] parameter(0)
  s1 = f32[64] slice(x), slice={[0:64]}
  s2 = f32[64] slice(x), slice={[64:128]}
  n1 = f32[64] negate(s1)
  n2 = f32[64] exponential(s2)
  ROOT t = (f32[64], f32[64]) tuple(n1, n2)
}
"""


def test_rule5_siblings_reading_disjoint_slices_are_not_sibling_fused():
    after, log = _run(DISJOINT_SLICES, "fusion,multi-output-fusion", "gpu")
    assert len([i for i in after.entry.instructions if i.opcode == "fusion"]) == 2
    assert any(e.rule == "disjoint-slices" for e in log.refusals()), log.to_text()


def test_rule5_siblings_reading_overlapping_slices_are_still_sibling_fused():
    text = DISJOINT_SLICES.replace("slice={[64:128]}", "slice={[32:96]}")
    after, _ = _run(text, "fusion,multi-output-fusion", "gpu")
    assert len([i for i in after.entry.instructions if i.opcode == "fusion"]) == 1


WIDTH_BITCAST = """HloModule m
ENTRY e {
  x = f32[16] parameter(0)
  n = f32[16] negate(x)
  b = u8[16,4] bitcast-convert(n)
  ROOT c = u8[16,4] add(b, b)
}
"""


def test_rule7_a_width_changing_bitcast_convert_is_fused_neither_way_on_the_gpu():
    after, log = _run(WIDTH_BITCAST, "fusion", "gpu")
    assert not _fusion_of(after, "bitcast-convert"), after.to_text()
    rules = {(e.producer, e.consumer, e.rule) for e in log.refusals()}
    assert ("n", "b", "bitcast-width") in rules and ("b", "c", "bitcast-width") in rules, log.to_text()


def test_rule7_is_the_gpus_the_cpu_fuses_a_width_changing_bitcast_convert():
    # XLA:CPU's CanBeLoopFused takes every elementwise op (testdata/jax/convert_types.opt.hlo,
    # XLA:CPU's own output, holds `convert_bitcast-convert_fusion`s); the fused kernel computes
    # what the interpreter computes on the input (_run).
    after, log = _run(WIDTH_BITCAST, "fusion", "cpu")
    (fusion,) = _fusion_of(after, "bitcast-convert")
    assert {i.opcode for i in fusion.fused_computation.instructions} >= {"negate", "bitcast-convert", "add"}
    assert not any(e.rule == "bitcast-width" for e in log.refusals())
    got = hlofuse.compile(parse_hlo(WIDTH_BITCAST), target="cpu")(np.arange(16, dtype=np.float32) - 7.5)
    want = hlofuse.compile(parse_hlo(WIDTH_BITCAST), target="interpreter")(np.arange(16, dtype=np.float32) - 7.5)
    np.testing.assert_array_equal(got[0], want[0])


def test_rule7_a_same_width_bitcast_convert_still_fuses():
    text = WIDTH_BITCAST.replace("u8[16,4]", "s32[16]")
    after, _ = _run(text, "fusion", "cpu")
    assert _fusion_of(after, "bitcast-convert")
