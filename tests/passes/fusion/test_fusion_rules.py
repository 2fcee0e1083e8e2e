"""Unit tests of the fusion rules, decisions and their reasons, the cost model and the report.
Expected values are derived by hand from XLA's rules (cited) and from shape arithmetic."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import fusion_passes, module_log
from hlofuse.passes.fusion.cost_model import CPU, GPU, kernel_bytes, module_cost, target_params
from hlofuse.passes.fusion.decisions import Decision, first_refusal
from hlofuse.passes.fusion.fusibility import is_expensive, reduction_is_contiguous
from hlofuse.passes.fusion.fusion_utils import Reachability
from hlofuse.passes.fusion.report import build_report
from hlofuse.passes.pipeline import get_pass

REDUCERS = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _module(body: str, reducers: bool = False):
    return parse_hlo("HloModule m\n" + (REDUCERS if reducers else "") + "\nENTRY main {\n" + body + "\n}\n")


def _inst(module, name):
    return module.entry.instruction(name)


def _fuse(module, target="gpu", passes=None):
    for p in passes if passes is not None else fusion_passes(target):
        p.run(module)
    return module_log(module)


def _xla_cpu_passes():
    """The CPU fusion passes XLA:CPU has (call inlining, instruction fusion): the CPU's own
    sibling fusion, which would merge the loops these tests count, left out."""
    return [p for p in fusion_passes("cpu") if p.name != "sibling-fusion"]


# ---- expensiveness: XLA's shape-dependent rules -------------------------------------------------

def test_integer_division_by_constant_is_cheap():
    # InstructionFusion::IsExpensive: integer div by a (broadcast) scalar constant is cheap.
    m = _module("""  x = s32[4] parameter(0)
  y = s32[4] parameter(1)
  c = s32[] constant(3)
  b = s32[4] broadcast(c), dimensions={}
  d = s32[4] divide(x, b)
  ROOT e = s32[4] divide(x, y)""")
    for params in (GPU, CPU):
        assert not is_expensive(_inst(m, "d"), params)
        assert is_expensive(_inst(m, "e"), params)


def test_gpu_cheap_float_math():
    # GpuInstructionFusion::IsExpensive: divide/sqrt/rsqrt/exp cheap in f32/f16, not in f64.
    m = _module("""  x = f32[4] parameter(0)
  y = f64[4] parameter(1)
  e = f32[4] exponential(x)
  d = f32[4] divide(x, x)
  ROOT e64 = f64[4] exponential(y)""")
    assert not is_expensive(_inst(m, "e"), GPU)
    assert not is_expensive(_inst(m, "d"), GPU)
    assert is_expensive(_inst(m, "e64"), GPU)
    assert is_expensive(_inst(m, "e"), CPU)
    assert is_expensive(_inst(m, "d"), CPU)


def test_trigonometry_cheap_for_reals_and_bf16_convert_on_cpu():
    m = _module("""  x = f32[4] parameter(0)
  z = c64[4] parameter(1)
  s = f32[4] sine(x)
  sc = c64[4] sine(z)
  ROOT b = bf16[4] convert(x)""")
    assert not is_expensive(_inst(m, "s"), GPU)
    assert is_expensive(_inst(m, "sc"), GPU)
    # hlofuse's CPU sine/cosine cost an exponential (op_conditions.expensive_trigonometry)
    assert is_expensive(_inst(m, "s"), CPU) and is_expensive(_inst(m, "sc"), CPU)
    assert is_expensive(_inst(m, "b"), CPU)  # CpuInstructionFusion: f32 -> bf16 has NaN checks
    assert not is_expensive(_inst(m, "b"), GPU)


@pytest.mark.parametrize("target,recomputed", [("cpu", False), ("gpu", True)])
def test_rotary_angle_table_is_not_recomputed_per_element_on_the_cpu(target, recomputed):
    # Llama's rotary embedding: cos of a [16, 8] angle table broadcast over batch and heads. On
    # the CPU the cosine is expensive and its consumer reads each element 8 times, so it stays
    # a kernel of its own; the GPU (XLA's rule: cheap for reals) fuses it into the multiply.
    m = _module("""  x = f32[2,16,4,8] parameter(0)
  a = f32[16,8] parameter(1)
  c = f32[16,8] cosine(a)
  cb = f32[2,16,4,8] broadcast(c), dimensions={1,3}
  ROOT m = f32[2,16,4,8] multiply(x, cb)""")
    _fuse(m, target, _xla_cpu_passes() if target == "cpu" else None)
    holding = _fusions_holding(m, "cosine")
    multiply_fusion = [f for f in m.entry.instructions if f.opcode == "fusion"
                       and any(i.opcode == "multiply" for i in f.fused_computation.instructions)]
    assert len(multiply_fusion) == 1
    together = any(i.opcode == "cosine" for i in multiply_fusion[0].fused_computation.instructions)
    assert together is recomputed, (holding, m.to_text())


@pytest.mark.parametrize("dims,shape,expected", [
    ((1,), "f32[8,16]", True),  # row reduction
    ((0,), "f32[8,16]", True),  # column reduction
    ((1,), "f32[4,5,6]", True),  # column reduction (K, R, K)
    ((0, 2), "f32[4,5,6]", True),  # "batched" row reduction (R, K, R): kept dims consecutive
    ((1, 3), "f32[2,3,4,5]", False),  # (K, R, K, R): neither kept nor reduced dims consecutive
])
def test_reduction_is_contiguous(dims, shape, expected):
    rank = shape.count(",") + 1
    out_dims = [d for i, d in enumerate(shape[4:-1].split(",")) if i not in dims]
    m = _module(f"""  x = {shape} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{','.join(out_dims)}] reduce(x, z), dimensions={{{','.join(map(str, dims))}}}, to_apply=add""",
                reducers=True)
    assert rank >= 2
    assert reduction_is_contiguous(_inst(m, "r")) is expected


# ---- decisions ----------------------------------------------------------------------------------

def test_decision_values():
    ok = Decision.allow()
    no = Decision.refuse("budget", "too big")
    assert ok and not no
    assert ok.and_then(lambda: no) is no
    assert no.and_then(lambda: ok) is no
    assert first_refusal(lambda: ok, lambda: no, lambda: 1 / 0) is no
    assert str(no) == "refused [budget]: too big"


def _reasons(log, rule):
    return [e.reason for e in log.refusals() if e.rule == rule]


def _fusions_holding(module, opcode):
    """For each fusion of the entry: how many `opcode` instructions its computation holds."""
    return [sum(1 for m in f.fused_computation.instructions if m.opcode == opcode)
            for f in module.entry.instructions if f.opcode == "fusion"]


def test_expensive_producer_duplicated_when_every_user_fuses_it():
    # The rule: an expensive producer is duplicated only when every user fuses it. Here
    # both users can, so each gets its own copy and the original disappears: 3 kernels -> 2,
    # exp evaluated twice per element (16 duplicated elements), bytes 12 KiB -> 8 KiB... by hand:
    # before: e reads 64 + writes 64, a and m read 128 + write 64 each -> 512; after: two
    # kernels each read x and y (128) and write 64 -> 384.
    m = _module("""  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  e = f32[16] exponential(x)
  a = f32[16] add(e, y)
  mul = f32[16] multiply(e, y)
  ROOT t = (f32[16], f32[16]) tuple(a, mul)""")
    before = m.clone()
    log = _fuse(m, "cpu", _xla_cpu_passes())
    assert _fusions_holding(m, "exponential") == [1, 1]
    assert not any(i.opcode == "exponential" for i in m.entry.instructions)
    assert not log.refusals()
    report = build_report(before, m, log)
    assert (report.before.kernels, report.after.kernels) == (3, 2)
    assert (report.before.bytes_moved, report.after.bytes_moved) == (512, 384)
    assert (report.after.duplicated_elements, report.after.duplicated_expensive_elements) == (16, 16)


def test_expensive_producer_not_duplicated_when_a_user_cannot_fuse_it():
    # The tuple also reads e: it must be materialized, so no consumer recomputes it.
    m = _module("""  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  e = f32[16] exponential(x)
  a = f32[16] add(e, y)
  mul = f32[16] multiply(e, y)
  ROOT t = (f32[16], f32[16], f32[16]) tuple(a, mul, e)""")
    log = _fuse(m, "cpu", _xla_cpu_passes())
    assert _fusions_holding(m, "exponential") == []
    reasons = _reasons(log, "expensive-duplicate")
    assert reasons == ["producer e is expensive and has 3 users of which 1 cannot fuse it: "
                       "t is a tuple, which cannot root a fusion"] * 2
    assert {(e.producer, e.consumer) for e in log.refusals()} == {("e", "a"), ("e", "mul")}


def test_expensive_producer_not_duplicated_into_a_consumer_that_rereads_it():
    # A broadcast user would evaluate log once per output element (expensive-reused), so log
    # is not duplicated into the negate either; the reason names the broadcast and its rule.
    m = _module("""  x = f32[16] parameter(0)
  l = f32[16] log(x)
  n = f32[16] negate(l)
  b = f32[4,16] broadcast(l), dimensions={1}
  ROOT t = (f32[16], f32[4,16]) tuple(n, b)""")
    log = _fuse(m, "cpu", _xla_cpu_passes())
    (reason,) = set(_reasons(log, "expensive-duplicate"))
    assert reason.startswith("producer l is expensive and has 2 users of which 1 cannot fuse it: b: ")
    assert "[expensive-reused]" in reason
    assert _inst(m, "l").opcode == "log"


def test_expensive_producer_duplicated_into_all_users_at_once():
    # The pre-pass finds that both users (a and mul) can fuse e; fusing e is then all or nothing,
    # and waits for the last of its users in queue order (instruction_fusion._user_still_queued):
    # by then a has joined the broadcast b, whose fusion reads each element of e four times, so
    # e is copied into no user (it is not left materialized next to a copy either) and computed
    # once, as XLA:CPU does (it never copies an expensive producer).
    m = _module("""  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  e = f32[16] exponential(x)
  a = f32[16] add(e, y)
  b = f32[4,16] broadcast(a), dimensions={1}
  mul = f32[16] multiply(e, y)
  ROOT t = (f32[4,16], f32[16]) tuple(b, mul)""")
    log = _fuse(m, "cpu", _xla_cpu_passes())
    assert _fusions_holding(m, "exponential") == [0]  # the fusion of a and b
    assert [i.name for i in m.entry.instructions if i.opcode == "exponential"] == ["e"]
    assert [(e.producer, e.rule) for e in log.refusals()] == [("e", "expensive-reused")]


def test_expensive_producer_copy_waits_for_its_last_user():
    # Batch norm's rsqrt(var / n + eps), var / n also read by the running-variance update: the
    # divide (expensive) is copied into both users once both have been visited, so the add has
    # joined the rsqrt first. Copying it when the first user asked made the add a fusion of its
    # own that the rsqrt could not take (two kernels where XLA:CPU has one).
    m = _module("""  s = f32[8] parameter(0)
  v = f32[8] parameter(1)
  n = f32[8] constant({32, 32, 32, 32, 32, 32, 32, 32})
  d = f32[8] divide(s, n)
  eps = f32[] constant(1e-05)
  be = f32[8] broadcast(eps), dimensions={}
  a = f32[8] add(d, be)
  r = f32[8] rsqrt(a)
  upd = f32[8] add(v, d)
  ROOT t = (f32[8], f32[8]) tuple(r, upd)""")
    _fuse(m, "cpu", _xla_cpu_passes())
    kernels = [i for i in m.entry.instructions if i.opcode not in ("parameter", "constant", "tuple")]
    assert len(kernels) == 2 and all(k.opcode == "fusion" for k in kernels), m.to_text()
    assert _fusions_holding(m, "divide") == [1, 1]
    assert sorted(_fusions_holding(m, "rsqrt")) == [0, 1]


@pytest.mark.parametrize("users,duplicated", [(4, True), (5, False)])
def test_expensive_duplication_is_bounded_by_the_cost_model(users, duplicated):
    # At most CPU.max_expensive_copies (4) evaluations of an expensive producer.
    assert CPU.max_expensive_copies == 4
    body = ["  x = f32[16] parameter(0)", "  l = f32[16] log(x)"]
    body += [f"  n{i} = f32[16] negate(l)" for i in range(users)]
    body += [f"  ROOT t = ({', '.join(['f32[16]'] * users)}) tuple({', '.join(f'n{i}' for i in range(users))})"]
    m = _module("\n".join(body))
    log = _fuse(m, "cpu", _xla_cpu_passes())
    assert (_fusions_holding(m, "log") == [1] * users) is duplicated
    if not duplicated:
        (reason,) = set(_reasons(log, "expensive-duplicate"))
        assert reason == ("producer l is expensive and has 5 users; duplicating it into all of them "
                          "would compute it 5 times (at most 4)")


def test_expensive_duplication_refused_when_it_moves_more_bytes():
    # l = log(x) with x f32[16] read... made expensive in bytes: the producer reads a large
    # operand through a slice-free elementwise op? Use power(x, y) with both 64 B operands and
    # users that read neither: materialized = 64+64 read + 64 write + 2*64 reads = 320;
    # duplicated = 2 users * 128 = 256 -> saves. With 4 users: 64*2+64+4*64 = 448 vs 4*128 = 512.
    body = ["  x = f32[16] parameter(0)", "  y = f32[16] parameter(1)", "  p = f32[16] power(x, y)"]
    body += [f"  n{i} = f32[16] negate(p)" for i in range(4)]
    body += [f"  ROOT t = ({', '.join(['f32[16]'] * 4)}) tuple({', '.join(f'n{i}' for i in range(4))})"]
    m = _module("\n".join(body))
    log = _fuse(m, "cpu", _xla_cpu_passes())
    assert _fusions_holding(m, "power") == []
    reasons = set(_reasons(log, "expensive-duplicate")) | set(_reasons(log, "not-fusible-into-all-users"))
    assert any("would move 64 more bytes than materializing it once" in r for r in reasons), reasons


def test_not_fusible_into_all_users_reason():
    # InstructionFusionTest.AvoidDuplicationIfNotAllFusible
    m = _module("""  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  a = f32[16] add(x, y)
  n = f32[16] negate(a)
  cc = f32[16] custom-call(a), custom_call_target="foo"
  ROOT t = (f32[16], f32[16]) tuple(n, cc)""")
    log = _fuse(m, passes=[get_pass("fusion")])
    (reason,) = set(_reasons(log, "not-fusible-into-all-users"))
    assert "producer a reads more than it writes (32 > 16 elements)" in reason
    assert "has 2 users of which 1 cannot fuse it (cc is a custom-call, which cannot root a fusion)" in reason


def test_cycle_reason_names_the_path():
    m = _module("""  x = f32[16] parameter(0)
  l = f32[16] log(x)
  cc = f32[16] custom-call(l), custom_call_target="foo"
  m = f32[16] multiply(l, cc)
  ROOT t = (f32[16], f32[16]) tuple(l, m)""")
    log = _fuse(m)
    assert "would create a cycle: m is reachable from l through cc" in _reasons(log, "cycle")


def test_budget_reason_counts_operands():
    n = 50
    body = []
    for i in range(n):
        body += [f"  x{i} = f32[2] parameter({2 * i})", f"  y{i} = f32[2] parameter({2 * i + 1})",
                 f"  a{i} = f32[2] add(x{i}, y{i})"]
    body.append(f"  ROOT c = f32[{2 * n}] concatenate({', '.join(f'a{i}' for i in range(n))}), dimensions={{0}}")
    m = _module("\n".join(body))
    log = _fuse(m, passes=[get_pass("fusion")])
    reasons = _reasons(log, "budget")
    assert reasons and all(r.startswith("operand budget exceeded: 97 > 96 (fusing a") for r in reasons)
    assert all(r.endswith(" into c (in fusion) needs 95 operands + 2 outputs)") for r in reasons)
    fusion = m.entry.root
    assert fusion.opcode == "fusion" and len(fusion.operands) + 1 <= 96
    # the CPU has no operand budget but refuses concatenates of more than 8 operands
    assert CPU.max_operands_and_outputs is None
    m2 = _module("\n".join(body))
    log2 = _fuse(m2, passes=[get_pass("fusion", target="cpu")])
    reasons2 = _reasons(log2, "not-fusible-into-all-users")
    assert any("concatenate c is better unfused on the CPU (50 > 8 operands)" in r for r in reasons2)
    assert m2.entry.root.opcode == "concatenate"


# ---- reachability, cost model, report -----------------------------------------------------------

def test_reachability():
    m = _module("""  x = f32[4] parameter(0)
  a = f32[4] negate(x)
  b = f32[4] abs(a)
  ROOT c = f32[4] add(b, x)""")
    r = Reachability(m.entry)
    a, b, c, x = (_inst(m, n) for n in "abcx")
    assert r.is_reachable(a, c) and r.is_reachable(x, c) and r.is_reachable(a, a)
    assert not r.is_reachable(c, a) and not r.is_reachable(b, a)
    assert r.is_connected(c, a)


def test_kernel_bytes_and_module_cost_by_hand():
    m = _module("""  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  add = f32[16] add(x, y)
  mul = f32[16] multiply(add, y)
  ROOT neg = f32[16] negate(mul)""")
    assert kernel_bytes(_inst(m, "add")) == (128, 64)
    cost = module_cost(m)
    # add: 128 + 64, mul: 128 + 64, neg: 64 + 64
    assert (cost.kernels, cost.bytes_read, cost.bytes_written) == (3, 320, 192)
    before = m.clone()
    _fuse(m)
    after = module_cost(m)
    assert (after.kernels, after.bytes_moved) == (1, 128 + 64)
    report = build_report(before, m, module_log(m))
    (f,) = report.fusions
    assert (f.kind, f.kernels_before, f.bytes_before, f.bytes_after) == ("kLoop", 3, 512, 192)
    assert f.members == ["add", "mul", "neg"]
    text = report.to_text()
    assert "kernels:     3 -> 1" in text and "bytes moved: 512 -> 192" in text
    json.dumps(report.to_dict())


def test_report_lists_refusals_with_reasons_and_duplicated_work():
    m = _module("""  x = f32[16] parameter(0)
  e = f32[16] exponential(x)
  n = f32[16] negate(e)
  f = f32[16] floor(e)
  l = f32[16] log(x)
  g = f32[16] negate(l)
  h = f32[16] floor(l)
  ROOT t = (f32[16], f32[16], f32[16], f32[16], f32[16]) tuple(n, f, g, h, l)""")
    before = m.clone()
    log = _fuse(m, passes=[get_pass("fusion")])
    report = build_report(before, m, log)
    # exp (cheap on the GPU) is duplicated into its two users: 16 recomputed elements; log is
    # expensive and also an output, so it is materialized and not recomputed
    assert report.after.duplicated_elements == 16
    assert report.after.duplicated_expensive_elements == 0
    refusals = [(e.producer, e.consumer, e.rule) for e in report.refused]
    assert sorted(refusals) == [("l", "g", "expensive-duplicate"), ("l", "h", "expensive-duplicate")]
    assert report.to_dict()["refused"][0]["reason"] == (
        "producer l is expensive and has 3 users of which 1 cannot fuse it: t is a tuple, which cannot root "
        "a fusion")
    text = report.to_text()
    assert "duplicated work: 16 elements recomputed (0 by expensive ops)" in text
    assert "  l -> g [fusion/expensive-duplicate]: producer l is expensive" in text


def test_pipeline_keeps_log_on_module_and_targets():
    from hlofuse.passes.pipeline import standard_pipeline

    m = _module("""  x = f32[16] parameter(0)
  a = f32[16] abs(x)
  ROOT n = f32[16] negate(a)""")
    standard_pipeline("gpu").run(m)
    assert m.entry.root.opcode == "fusion"
    assert module_log(m).fusions()
    # the GPU default is priority fusion (XLA's GPU pipeline); the legacy sequence stays selectable
    assert [p.name for p in fusion_passes("gpu")] == ["call-inliner", "priority-fusion", "multi-output-fusion",
                                                     "horizontal-fusion", "horizontal-input-fusion"]
    assert [p.name for p in fusion_passes("gpu", "legacy")] == [
        "call-inliner", "fusion-no-duplication", "fusion", "fusion-merger", "multi-output-fusion",
        "horizontal-fusion", "horizontal-input-fusion"]
    assert [p.name for p in fusion_passes("cpu")] == ["call-inliner", "fusion", "sibling-fusion"]
    assert get_pass("fusion", target="cpu").params is CPU
    assert get_pass("horizontal-fusion").params is GPU
    with pytest.raises(ValueError, match="unknown fusion target"):
        target_params("tpu")


def test_names_follow_xla():
    # XLA: `%fusion = ... fusion(...), kind=kLoop, calls=%fused_computation`, fused parameters
    # `param_N`, members keep their names, a duplicated producer's copy gets a `.N` suffix.
    m = _module("""  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  a = f32[16] add(x, y)
  n = f32[16] negate(a)
  f = f32[16] floor(a)
  ROOT t = (f32[16], f32[16]) tuple(n, f)""")
    _fuse(m, passes=[get_pass("fusion")])
    fusions = \
        [i for i in m.entry.instructions if i.opcode == "fusion"]
    assert sorted(f.name for f in fusions) == ["fusion", "fusion.1"]
    assert sorted(f.fused_computation.name for f in fusions) == ["fused_computation", "fused_computation.1"]
    members = {i.name for f in fusions for i in f.fused_computation.instructions}
    assert {"a", "a.1", "n", "f"} <= members
    params = [i.name for f in fusions for i in f.fused_computation.instructions if i.opcode == "parameter"]
    assert params and all(p.startswith("param_") for p in params)
    assert "fused_computation" in m.to_text()


def test_fusion_merger_reasons():
    body = """  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  a = f32[16] add(x, y)
  l = f32[16] log(a)
  ny = f32[16] negate(y)
  n = f32[16] add(l, ny)
  cc = f32[16] custom-call(l), custom_call_target="foo"
  ROOT t = (f32[16], f32[16]) tuple(n, cc)"""
    m = _module(body)
    log = _fuse(m, passes=[get_pass("fusion"), get_pass("fusion-merger")])
    (reason,) = _reasons(log, "user-not-fusion")
    assert re.fullmatch(r"fusion(\.\d+)? cannot be merged into its users: cc is a custom-call, not a loop or input "
                        r"fusion", reason)
    # with a fusion user in place of the custom-call the expensive producer is merged into both
    m2 = _module(body.replace('cc = f32[16] custom-call(l), custom_call_target="foo"', "fy = f32[16] floor(y)\n"
                              "  cc = f32[16] multiply(l, fy)"))
    # (instruction fusion without duplication first, as XLA's GPU pipeline runs it: with
    # duplication it would already copy the expensive producer into both users itself)
    log2 = _fuse(m2, passes=[get_pass("fusion-no-duplication"), get_pass("fusion-merger")])
    merged = [e for e in log2.fusions() if e.pass_name == "fusion-merger"]
    assert len(merged) == 2 and merged[0].duplicated and merged[0].duplicated_expensive
    assert sum(1 for i in m2.entry.instructions if i.opcode == "fusion") == 2
    assert not any(i.opcode == "log" for i in m2.entry.instructions)


def test_deep_graph_needs_no_recursion():
    # A 2000-long chain between a non-unary producer and its second user: the all-paths analysis
    # (ComputeGloballyUnfusible) and the fusion itself must not recurse per instruction.
    n = 2000
    body = ["  x = f32[4] parameter(0)", "  y = f32[4] parameter(1)", "  p = f32[4] add(x, y)",
            "  c0 = f32[4] negate(p)"]
    body += [f"  c{i} = f32[4] negate(c{i - 1})" for i in range(1, n)]
    body.append(f"  ROOT r = f32[4] add(c{n - 1}, p)")
    m = _module("\n".join(body))
    # (without the kernel size cap, which would cut the chain into kernels of at most 512:
    # tests/passes/fusion/test_size_limit.py)
    _fuse(m, target=dataclasses.replace(target_params("gpu"), max_fused_instructions=None))
    assert [i.opcode for i in m.entry.instructions if i.opcode not in ("parameter",)] == ["fusion"]
    # the chain, p (fused once: both of its uses end up in the same fusion), r, x and y
    assert len(m.entry.root.fused_computation.instructions) == n + 4


def test_merged_fusions_compute_a_duplicated_producer_once():
    # On the GPU exp(f32) is cheap: instruction fusion copies e into both consumers, then
    # multi-output fusion merges the two consumers (siblings reading x and y). The merged
    # kernel must evaluate exp once: identical instructions are deduplicated, the plainer
    # name (e, not its copy e.1) survives, and the result is unchanged.
    from hlofuse.runtime.interpreter import evaluate
    import numpy as np

    m = _module("""  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  e = f32[16] exponential(x)
  a = f32[16] add(e, y)
  mul = f32[16] multiply(e, y)
  ROOT t = (f32[16], f32[16]) tuple(a, mul)""")
    before = m.clone()
    log = _fuse(m, "gpu")
    assert any(e.duplicated for e in log.fusions())  # the copies were made ...
    assert _fusions_holding(m, "exponential") == [1]  # ... and merged back into one
    (fusion,) = [i for i in m.entry.instructions if i.opcode == "fusion"]
    assert [i.name for i in fusion.fused_computation.instructions if i.opcode == "exponential"] == ["e"]
    assert build_report(before, m, log).after.duplicated_elements == 0
    args = [np.linspace(-2, 2, 16, dtype=np.float32), np.arange(16, dtype=np.float32)]
    assert all(np.array_equal(u, v) for u, v in zip(evaluate(before, args), evaluate(parse_hlo(m.to_text()), args)))


def test_dedupe_fused_computation_merges_identical_chains_only():
    from hlofuse.passes.fusion.fusion_utils import create_fusion, dedupe_fused_computation, fuse_producer

    m = _module("""  x = f32[16] parameter(0)
  e1 = f32[16] exponential(x)
  n1 = f32[16] negate(e1)
  e2 = f32[16] exponential(x)
  n2 = f32[16] negate(e2)
  l = f32[16] log(x)
  ROOT s = f32[16] add(n1, n2)""")
    root = m.entry.root
    fusion = create_fusion(root, "kLoop")
    for name in ("n1", "n2", "e1", "e2"):
        fuse_producer(fusion, _inst(m, name))  # each fusion step already deduplicates
    ops = sorted(i.opcode for i in fusion.fused_computation.instructions)
    assert ops == ["add", "exponential", "negate", "parameter"]
    assert fusion.fused_computation.root.operands[0] is fusion.fused_computation.root.operands[1]
    assert dedupe_fused_computation(fusion) == 0  # nothing left to merge
    assert _inst(m, "l").opcode == "log"  # instructions outside the fusion are untouched


def test_report_text_and_executable_report_agree():
    # The report: per fusion its kind, members, outputs and bytes read+written before ->
    # after, then the refused candidates with reasons; Executable.report() is the same as data.
    # By hand (CPU policy): e is expensive and also an output, so instruction fusion refuses to
    # duplicate it into n, and n and f fuse; the CPU's multi-output fusion then computes e in
    # that fusion as a second output. Before, three kernels each read 64 B and write 64 B
    # (192+192); after, one kernel reads x and writes f and e (64+128). The refusal no longer
    # stands (e did join the kernel), so the report lists none; the log keeps it.
    import hlofuse

    m = _module("""  x = f32[16] parameter(0)
  e = f32[16] exponential(x)
  n = f32[16] negate(e)
  f = f32[16] floor(n)
  ROOT t = (f32[16], f32[16]) tuple(f, e)""")
    exe = hlofuse.compile(m, target="interpreter")
    data = exe.report()
    text = exe.fusion_report().to_text()
    (fusion,) = data["fusions"]
    assert (fusion["kind"], fusion["members"], fusion["outputs"]) == ("kLoop", ["e", "n", "f"], ["f", "e"])
    assert (fusion["bytes_read_before"], fusion["bytes_written_before"]) == (192, 192)
    assert (fusion["bytes_read_after"], fusion["bytes_written_after"]) == (64, 128)
    assert (data["before"]["kernels"], data["after"]["kernels"]) == (3, 1)
    assert f"  {fusion['name']} kind=kLoop calls={fusion['computation']}: 3 instructions, 3 kernels -> 1, " \
           f"bytes 384 -> 192\n    members: e, n, f\n    outputs: f, e\n    bytes read+written: 192+192 -> 64+128\n" in text
    assert data["refused"] == [] and text.endswith("Refused candidates (0):\n")
    refusals = [(e.producer, e.consumer, e.pass_name, e.rule) for e in exe.fusion_log.refusals()]
    assert refusals == [("e", "n", "fusion", "expensive-duplicate")]
    assert any(e.rule.startswith("producer-consumer multi-output") and e.producer == "e"
               for e in exe.fusion_log.entries if e.action == "fused")
    json.dumps(data)


GATHER_OF_CLAMPED_INDICES = """HloModule m
ENTRY e {
  x = f32[6,5] parameter(0)
  i = s32[4] parameter(1)
  zero = s32[] constant(0)
  z = s32[4] broadcast(zero), dimensions={}
  lt = pred[4] compare(i, z), direction=LT
  six = s32[] constant(6)
  s = s32[4] broadcast(six), dimensions={}
  w = s32[4] add(i, s)
  sel = s32[4] select(lt, w, i)
  r = s32[4,1] reshape(sel)
  ROOT g = f32[4,5] gather(x, r), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}
}
"""


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_gather_roots_a_loop_fusion_of_its_index_producers(target):
    # jnp.take's wrap of negative indices fuses into the gather (XLA's IsUniversallyLoopFusible
    # and the CPU's CanBeLoopFused list kGather; jax's gather_take.opt.hlo, XLA:CPU's output,
    # has one `gather_bitcast_fusion`): one kernel, computing what the interpreter computes.
    import numpy as np
    import hlofuse
    from hlofuse.hlo.parser import parse_hlo

    m = parse_hlo(GATHER_OF_CLAMPED_INDICES)
    _fuse(m, target)
    (kernel,) = [i for i in m.entry.instructions if i.opcode not in ("parameter", "constant")]
    assert kernel.opcode == "fusion" and kernel.fused_computation.root.opcode == "gather", m.to_text()
    assert {"select", "add", "compare"} <= {i.opcode for i in kernel.fused_computation.instructions}
    x = np.arange(30, dtype=np.float32).reshape(6, 5)
    i = np.array([-1, 0, 5, -6], dtype=np.int32)
    backend = "cpu" if target == "cpu" else "gpu-emulated"
    got = hlofuse.compile(parse_hlo(GATHER_OF_CLAMPED_INDICES), target=backend)(x, i)
    np.testing.assert_array_equal(got[0], x[[5, 0, 5, 0]])
