"""The fusion passes do work near-linear in the module: doubling a generated module roughly
doubles each pass's operation count (issue 15 item 1).

Work is counted, not timed: every Python function call, generator step and call of a builtin
from Python that the pass makes (sys.setprofile events), which does not depend on the machine's
load. A quadratic step (a walk of the computation per fused producer, a scan of a parameter's
thousands of users per user) makes the count grow about 4x per doubling; the bound is 2.5x.
Loops inside C (list.remove's scan) are not counted: hlo/ir.py keeps those out of the per-step
paths by construction (lazy removal, the control-holder list), which test_ir_removal states.
"""
from __future__ import annotations

import sys

import pytest

from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import fusion_passes, multi_output_fusion

_GROWTH = 2.5
_FLOOR = 20_000  # operations: about a millisecond
# Multi-output and sibling fusion examine every pair of a producer's users (XLA's FuseSiblings
# does too) and log each refused pair, so their work is bounded per instruction and per pair
# examined, not per instruction: on the softmax stack every block's add reads the input, whose
# users are all pairwise connected (k blocks: k^2/2 pairs, each refused as a cycle and logged).
# Their check divides the work by instructions + pairs. (Before their reachability was kept
# up to date, each fusion rebuilt it: x3.7 per pair on the softmax stack, x74 on the wide tree.)
_PAIRWISE = {"multi-output-fusion", "sibling-fusion"}
# the rules a pairwise pass asks of each candidate pair (counted by wrapping them)
_PAIR_RULES = {name: getattr(multi_output_fusion, name) for name in ("_sibling_legal", "_pc_legal")}


def chain(n: int) -> str:
    """`n` elementwise ops on f32[8,8], each reading the one before and a parameter."""
    lines = ["HloModule chain", "", "ENTRY main {", "  p = f32[8,8] parameter(0)",
             "  h = f32[] constant(0.5)", "  hb = f32[8,8] broadcast(h), dimensions={}"]
    ops = ("add({c}, p)", "multiply({c}, hb)", "negate({c})", "exponential({c})")
    cur = "p"
    for i in range(n):
        lines.append(f"  {'ROOT ' if i == n - 1 else ''}v{i} = f32[8,8] " + ops[i % 4].format(c=cur))
        cur = f"v{i}"
    return "\n".join(lines + ["}"]) + "\n"


def wide(n: int) -> str:
    """n/4 independent branches tanh(x * c) + y summed pairwise (a tree of adds)."""
    lines = ["HloModule wide", "", "ENTRY main {"] + [f"  p{j} = f32[16] parameter({j})" for j in range(8)]
    vals = []
    for k in range(max(n // 4, 2)):
        lines += [f"  c{k} = f32[] constant({1 + k % 7})", f"  b{k} = f32[16] broadcast(c{k}), dimensions={{}}",
                  f"  m{k} = f32[16] multiply(p{k % 8}, b{k})", f"  t{k} = f32[16] tanh(m{k})",
                  f"  s{k} = f32[16] add(t{k}, p{(k + 3) % 8})"]
        vals.append(f"s{k}")
    level = 0
    while len(vals) > 1:
        nxt = []
        for i in range(0, len(vals) - 1, 2):
            lines.append(f"  a{level}_{i} = f32[16] add({vals[i]}, {vals[i + 1]})")
            nxt.append(f"a{level}_{i}")
        vals, level = nxt + vals[len(vals) - len(vals) % 2:], level + 1
    lines[-1] = lines[-1].replace(f"  {vals[0]} =", f"  ROOT {vals[0]} =")
    return "\n".join(lines + ["}"]) + "\n"


def softmax_blocks(n: int) -> str:
    """About `n` instructions: a stack of row softmaxes on f32[16,32] (reductions, broadcasts,
    siblings: what multi-output and horizontal fusion look at)."""
    lines = ["HloModule blocks", "", "mx {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
             "  ROOT m = f32[] maximum(a, b)", "}", "", "ad {", "  a = f32[] parameter(0)",
             "  b = f32[] parameter(1)", "  ROOT s = f32[] add(a, b)", "}", "", "ENTRY main {",
             "  x = f32[16,32] parameter(0)", "  ninf = f32[] constant(-inf)", "  zero = f32[] constant(0)"]
    cur = "x"
    for k in range(max(n // 9, 1)):
        lines += [f"  mx{k} = f32[16] reduce({cur}, ninf), dimensions={{1}}, to_apply=mx",
                  f"  bm{k} = f32[16,32] broadcast(mx{k}), dimensions={{0}}",
                  f"  sub{k} = f32[16,32] subtract({cur}, bm{k})",
                  f"  e{k} = f32[16,32] exponential(sub{k})",
                  f"  sm{k} = f32[16] reduce(e{k}, zero), dimensions={{1}}, to_apply=ad",
                  f"  bs{k} = f32[16,32] broadcast(sm{k}), dimensions={{0}}",
                  f"  d{k} = f32[16,32] divide(e{k}, bs{k})",
                  f"  y{k} = f32[16,32] add(d{k}, x)",
                  f"  o{k} = f32[16,32] tanh(y{k})"]
        cur = f"o{k}"
    lines[-1] = lines[-1].replace(f"  {cur} =", f"  ROOT {cur} =")
    return "\n".join(lines + ["}"]) + "\n"


def _count(fn) -> int:
    """Profile events (calls, returns, builtin calls) while `fn` runs."""
    events = 0

    def tick(frame, event, arg):
        nonlocal events
        events += 1

    sys.setprofile(tick)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return events


def _work_of_each_pass(text: str, target: str, monkeypatch) -> dict[str, tuple[int, int]]:
    """Each fusion pass's (operation count, units of work) on `text`, run in the pipeline's
    order: units are the instructions, plus the candidate pairs a pairwise pass examined."""
    module = parse_hlo(text)
    instructions = sum(len(c.instructions) for c in module.computations)
    pairs = 0
    for name in ("_sibling_legal", "_pc_legal"):
        def counted(*args, _rule=_PAIR_RULES[name], **kwargs):
            nonlocal pairs
            pairs += 1
            return _rule(*args, **kwargs)

        monkeypatch.setattr(multi_output_fusion, name, counted)
    work = {}
    for p in fusion_passes(target):
        pairs = 0
        events = _count(lambda: p.run(module))
        work[p.name] = (events, instructions + (pairs if p.name in _PAIRWISE else 0))
    return work


GENERATORS = {"chain": chain, "wide": wide, "softmax": softmax_blocks}


# On the GPU the counted run of priority fusion takes 20-60 s on the larger softmax and wide
# modules (its profiled events): those cases run with `pytest -m slow`.
_CASES = [pytest.param(form, target, marks=pytest.mark.slow) if target == "gpu" and form != "chain"
          else (form, target) for target in ("cpu", "gpu") for form in sorted(GENERATORS)]


# The wide tree at 1,000 instructions is one fusion whose users sibling fusion has nothing to
# pair; from 2,000 on instruction fusion's budget splits it, and sibling fusion merges the
# pieces: it doubles from 2,000. On the GPU priority fusion's budget leaves 15 pieces at 2,000
# instructions, 60 at 4,000 and 82 at 8,000, and multi-output fusion's work is per piece it
# merges (about 12,000 operations each, beside 90 per instruction): its count doubles from
# 4,000 (x2.0 to 8,000; x2.6 from 2,000, the pieces' own x4).
_SIZES = {("wide", "cpu"): (2000, 4000), ("wide", "gpu"): (4000, 8000)}


@pytest.mark.parametrize("form,target", _CASES)
def test_doubling_the_module_about_doubles_each_pass_work(form, target, monkeypatch):
    make = GENERATORS[form]
    n_small, n_large = _SIZES.get((form, target), (1000, 2000))
    small = _work_of_each_pass(make(n_small), target, monkeypatch)
    large = _work_of_each_pass(make(n_large), target, monkeypatch)
    for name, (work, units) in small.items():
        large_work, large_units = large[name]
        # (a pass with almost nothing to do, such as horizontal fusion on a chain of a few
        # kernels, is measured against a floor: its fixed costs are not its growth)
        ratio = (large_work / large_units) / (max(work, _FLOOR) / units) * 2
        assert ratio <= _GROWTH, (f"{name} on {form}: {work} -> {large_work} operations for {units} -> "
                                  f"{large_units} instructions (and pairs): x{ratio:.2f} per doubling")
    # the count is not vacuous: the busiest pass (instruction or priority fusion) did real work
    assert max(w for w, _ in small.values()) > 10_000 and max(w for w, _ in large.values()) > 10_000


def test_ir_removal_is_lazy_and_keeps_the_graph_consistent():
    """Removing instructions one by one does not rebuild the list per removal; reading it drops
    them all at once, and control edges naming a removed instruction are dropped with it."""
    module = parse_hlo(chain(50))
    comp = module.entry
    insts = comp.instructions
    last = comp.root
    last.control_predecessors.append(insts[3])
    victims = [i for i in insts if i.opcode == "exponential"]
    for v in victims:  # drop each exponential: its user reads its operand instead
        v.replace_all_uses_with(v.operands[0])
        comp.remove_instruction(v)
    assert comp.instructions is not insts  # compacted once, on this read
    assert not any(v in comp.instructions for v in victims)
    assert comp.instruction_count() == len(comp.instructions) == len(insts) - len(victims)
    assert all(v.parent is None for v in victims)
    doomed = insts[3]
    doomed.replace_all_uses_with(doomed.operands[0])
    comp.remove_instruction(doomed)
    assert not any(c is doomed for c in last.control_predecessors)
    with pytest.raises(ValueError, match="not an instruction"):
        comp.remove_instruction(doomed)
    # the module still verifies and prints
    from hlofuse.hlo.verifier import verify

    verify(module)
    assert module.to_text().count("exponential") == 0
