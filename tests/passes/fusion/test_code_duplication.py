"""Code duplication by indexing (passes/fusion/indexing_evaluation.py): every fusion pass holds a
producer to MAX_DUPLICATED_INDEXING emitted copies (XLA's FusionNodeIndexingEvaluation), and a
fusion of the input that exceeds it is taken apart (passes/oversized_fusion_splitter.py).

The counts below are worked out by hand: a slice (any change of shape) asks its operand for a
new index, an elementwise op passes its own on, so `add(slice(v), slice(v))` emits v twice and
each level of such pairs doubles the count. A chain of 26 levels fused whole emits its first
level 2^26 times: jax's `lax.associative_scan` over 1,024 steps (ten levels up and down) ran the
CPU emitter out of memory so, before the rule."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import fusion_passes, module_log
from hlofuse.passes.fusion.indexing_evaluation import (MAX_DUPLICATED_INDEXING, emitted_copies, emitted_counts,
                                                       fused_copies, most_emitted)
from hlofuse.passes.oversized_fusion_splitter import OversizedFusionSplitter
from hlofuse.runtime.interpreter import evaluate


def _levels(count: int, n: int = 64, indent: str = "  ") -> tuple[list[str], str, int]:
    """HLO lines of `count` levels of c_i = slice(c_{i-1})[0:m-1] + slice(c_{i-1})[1:m] over
    f32[n]; (lines, root name, root length)."""
    lines = [f"{indent}p = f32[{n}] parameter(0)"]
    prev, size = "p", n
    for i in range(count):
        lines += [f"{indent}a{i} = f32[{size - 1}] slice({prev}), slice={{[0:{size - 1}]}}",
                  f"{indent}b{i} = f32[{size - 1}] slice({prev}), slice={{[1:{size}]}}",
                  f"{indent}c{i} = f32[{size - 1}] add(a{i}, b{i})"]
        prev, size = f"c{i}", size - 1
    return lines, prev, size


def _chain(count: int) -> str:
    lines, root, _ = _levels(count)
    body = "\n".join(lines).replace(f"  {root} =", f"  ROOT {root} =")
    return f"HloModule chain\n\nENTRY e {{\n{body}\n}}\n"


def _prefused(count: int) -> str:
    """The same chain as one loop fusion of the input (as another tool might write it)."""
    lines, root, size = _levels(count)
    body = "\n".join(lines).replace(f"  {root} =", f"  ROOT {root} =")
    return (f"HloModule chain_fused\n\nchain {{\n{body}\n}}\n\nENTRY e {{\n  x = f32[64] parameter(0)\n"
            f"  ROOT f = f32[{size}] fusion(x), kind=kLoop, calls=chain\n}}\n")


def _fusions(module):
    return [i for c in module.computations if not c.is_fusion_computation() for i in c.instructions
            if i.opcode == "fusion"]


def test_counts_double_at_every_level_of_slice_pairs():
    module = parse_hlo(_prefused(3))
    fusion = _fusions(module)[0]
    by_name = {i.name: n for i, n in emitted_counts(fusion).items()}
    assert by_name["c2"] == 1 and by_name["a2"] == by_name["b2"] == 1
    assert by_name["c1"] == 2 and by_name["c0"] == 4  # each level read by two slices
    assert most_emitted(fusion)[0] == 4
    # the fusion's operand x is read by a0 and b0, each emitted 4 times
    assert emitted_copies(fusion, module.entry.instruction("x")) == 8


def test_a_fused_producer_multiplies_its_own_copies():
    # fusing a fusion that emits its first level 4 times, at 2 places of the consumer: 8 copies
    text = """HloModule m

inner {
  p = f32[16] parameter(0)
  a0 = f32[15] slice(p), slice={[0:15]}
  b0 = f32[15] slice(p), slice={[1:16]}
  c0 = f32[15] add(a0, b0)
  a1 = f32[14] slice(c0), slice={[0:14]}
  b1 = f32[14] slice(c0), slice={[1:15]}
  ROOT c1 = f32[14] add(a1, b1)
}

outer {
  q = f32[14] parameter(0)
  s = f32[13] slice(q), slice={[0:13]}
  t = f32[13] slice(q), slice={[1:14]}
  ROOT u = f32[13] add(s, t)
}

ENTRY e {
  x = f32[16] parameter(0)
  f = f32[14] fusion(x), kind=kLoop, calls=inner
  ROOT g = f32[13] fusion(f), kind=kLoop, calls=outer
}
"""
    module = parse_hlo(text)
    f, g = module.entry.instruction("f"), module.entry.instruction("g")
    assert emitted_copies(g, f) == 2 and most_emitted(f)[0] == 2
    assert fused_copies(g, f) == 4  # c0 would be emitted 2 x 2 times in g


@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("algorithm", ["legacy", "priority"])
def test_fusion_keeps_every_instruction_under_the_limit(target, algorithm):
    module = parse_hlo(_chain(26))
    for p in fusion_passes(target, algorithm):
        p.run(module)
    fusions = _fusions(module)
    assert len(fusions) >= 26 // 4  # 2^4 > 15: at most four levels per fusion
    for f in fusions:
        assert most_emitted(f)[0] <= MAX_DUPLICATED_INDEXING, f.name
    refusals = [e for e in module_log(module).refusals() if e.rule == "duplicated-indexing"]
    assert refusals and "once per distinct index" in refusals[0].reason


def test_a_chain_under_the_limit_stays_one_fusion():
    module = parse_hlo(_chain(3))  # 4 copies of the first level at most
    for p in fusion_passes("cpu"):
        p.run(module)
    assert len(_fusions(module)) == 1


def test_an_oversized_input_fusion_is_taken_apart_and_an_acceptable_one_kept():
    big, small = parse_hlo(_prefused(26)), parse_hlo(_prefused(3))
    assert OversizedFusionSplitter().run(big)
    assert not _fusions(big)  # its instructions back in the entry, for the fusion passes
    assert big.entry.root.opcode == "add"
    assert not OversizedFusionSplitter().run(small)
    assert len(_fusions(small)) == 1


@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("text", [_chain(26), _prefused(26)], ids=["plain", "prefused"])
def test_deep_slice_chains_compile_and_agree_with_the_interpreter(backend, text):
    module = parse_hlo(text)
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    want = evaluate(parse_hlo(text), [x])[0]
    got = hlofuse.compile(module, "cpu" if backend == "cpu" else "gpu-emulated")(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-3 * np.abs(want).max())


def test_a_chain_of_elementwise_ops_never_walks_the_indexing(monkeypatch):
    # Instruction fusion asks the rule once per producer; re-walking each growing fusion's
    # computation there made the pass O(n x fusion size) (a 10,000-instruction chain's passes
    # 0.7 -> 4.5 s). Where no instruction reads an array at another index, nothing is walked.
    from hlofuse.passes.fusion import indexing_evaluation

    calls = []
    real = indexing_evaluation._indexing
    monkeypatch.setattr(indexing_evaluation, "_indexing", lambda *a: calls.append(1) or real(*a))
    lines = ["  p = f32[64] parameter(0)"] + [f"  v{i} = f32[64] {'negate' if i % 2 else 'exponential'}"
                                            f"({'p' if i == 0 else f'v{i - 1}'})" for i in range(400)]
    text = "HloModule chain\n\nENTRY e {\n" + "\n".join(lines).replace("  v399 =", "  ROOT v399 =") + "\n}\n"
    module = parse_hlo(text)
    for p in fusion_passes("cpu"):
        p.run(module)
    assert _fusions(module) and not calls
