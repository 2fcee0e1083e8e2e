"""The fuzzer's class for mismatches that a bitcast-convert makes out of rounding
(tests/fuzz/bit_exposure.py): counted apart only where every mismatching output depends on a
float bitcast and the floats it reads agree within the float tolerance."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.runtime.interpreter import evaluate
from tests.fuzz import outcomes as oc
from tests.fuzz.bit_exposure import cut_module, exposed_outputs, float_bitcasts, only_bits_exposed, sources_module
from tests.fuzz.cases import _against_interpreter, compare_with_reference

# the HLO mutation fuzzer's seed-39 case: exp's bits as bytes, then integer arithmetic; and an
# output that does not read the bitcast
EXPOSED = """HloModule exposed
ENTRY main {
  x = f32[16] parameter(0)
  n = f32[16] exponential(x)
  b = u8[16,4] bitcast-convert(n)
  c = u8[16,4] add(b, b)
  d = u8[16,4] multiply(c, b)
  e = s32[16] convert(x)
  ROOT t = (u8[16,4], s32[16]) tuple(d, e)
}
"""
X = np.array([-2.3342502, -3.345952, -3.9418344, 3.9507654, -100.0, 2.9111042, -4.535257, -1.6720716,
              1.6246058, -2.8489418, 1.0196842, 3.14159, -0.5, 5.4632597, 6.7742295, 0.0], np.float32)


def test_only_outputs_reading_a_float_bitcast_are_exposed():
    module = hlofuse.parse_hlo(EXPOSED)
    assert exposed_outputs(module) == {0}
    variant = sources_module(module)
    assert variant.entry.root.opcode == "tuple"
    assert [o.opcode for o in variant.entry.root.operands] == ["exponential"]
    assert sources_module(hlofuse.parse_hlo(EXPOSED.replace("bitcast-convert(n)", "convert(n)"))) is None


def test_agreeing_floats_excuse_only_exposed_outputs():
    module = hlofuse.parse_hlo(EXPOSED)
    assert only_bits_exposed(module, [X], "cpu", [0], "flush")
    assert not only_bits_exposed(module, [X], "cpu", [1], "flush")  # the convert reads no bitcast
    assert not only_bits_exposed(module, [X], "cpu", [0, 1], "flush")
    assert not only_bits_exposed(module, [X], "cpu", [], "flush")
    # the fuzzer's label of the unfused CPU pipeline: compiled as such, not refused as a target
    # (it was: every such case stayed a mismatch; seed 68)
    assert only_bits_exposed(module, [X], "cpu (no fusion)", [0], "flush")


def test_the_class_is_decided_by_the_callback_after_the_others():
    got, want = [np.array([1, 2], np.uint8)], [np.array([1, 3], np.uint8)]
    asked = []

    def bits(indices):
        asked.append(indices)
        return True

    assert compare_with_reference(got, want, lambda: None, lambda: None, bits)[0] == oc.BITS_EXPOSED
    assert asked == [[0]]
    assert compare_with_reference(got, want, lambda: None, lambda: None, lambda i: False)[0] == oc.MISMATCH
    assert compare_with_reference(got, got, lambda: None, lambda: None, bits)[0] == oc.OK


def test_the_seed_39_case_is_not_a_failure():
    module = hlofuse.parse_hlo(EXPOSED)
    got = hlofuse.compile(module, target="cpu")(X)
    want = hlofuse.compile(module, target="interpreter")(X)
    result = _against_interpreter(module, [X], got, "cpu", 39004007)
    differ = not np.array_equal(np.asarray(got[0]), np.asarray(want[0]))
    # numpy's exp and the kernels' are each within a few ULP: where their bits differ here (they
    # did on the hosts this was written on), the case is counted apart, not a mismatch
    assert result["outcome"] == (oc.BITS_EXPOSED if differ else oc.OK), result


SIGN_READ = """HloModule sign
ENTRY main {
  x = f32[16] parameter(0)
  s = f32[16] exponential(x)
  z = f32[] constant(0)
  zs = f32[16] broadcast(z), dimensions={}
  ge = pred[16] compare(s, zs), direction=GE, type=TOTALORDER
  lt = pred[16] compare(s, zs), direction=LT
  ROOT t = (pred[16], pred[16]) tuple(ge, lt)
}
"""


def test_a_totalorder_compare_shows_bits():
    """A TOTALORDER compare reads a NaN's sign, which is no backend's contract (libdevice's on
    the H200, seed 65; XLA:CPU's own x + y of two NaNs by operand placement, seed 68): its
    float operands are checked as a bitcast's are. A FLOAT compare never reads a sign."""
    module = hlofuse.parse_hlo(SIGN_READ)
    assert exposed_outputs(module, "gpu") == {0} == exposed_outputs(module, "cpu")
    variant = sources_module(module, "gpu")
    assert [o.opcode for o in variant.entry.root.operands] == ["exponential", "broadcast"]
    plain = hlofuse.parse_hlo(SIGN_READ.replace(", type=TOTALORDER", ""))
    assert exposed_outputs(plain) == set() and sources_module(plain) is None


def test_the_sign_of_a_nan_from_two_nans_is_bits_exposed():
    """The large-graph fuzzer's seed-68 shape: NaN + x where x is a -NaN, then a TOTALORDER
    compare. The kernels may give either NaN (as XLA:CPU does, by operand placement); the
    interpreter gives the first. Counted apart, where a wrong number still is a mismatch."""
    text = """HloModule two_nans
ENTRY main {
  x = f32[4] parameter(0)
  n = f32[] constant(nan)
  nb = f32[4] broadcast(n), dimensions={}
  s = f32[4] add(nb, x)
  z = f32[] constant(0)
  zb = f32[4] broadcast(z), dimensions={}
  ROOT c = pred[4] compare(s, zb), direction=LT, type=TOTALORDER
}
"""
    module = hlofuse.parse_hlo(text)
    x = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    x[0] = np.array(0xFFC00000, np.uint32).view(np.float32)
    want = [np.asarray(w) for w in hlofuse.compile(module, target="interpreter")(x)]
    unfused = [np.asarray(g) for g in hlofuse.compile(module, target="cpu", fusion=False)(x)]
    if np.array_equal(unfused[0], want[0]):
        pytest.skip("the unfused CPU kept the interpreter's NaN here: nothing exposed")
    assert unfused[0][0] != want[0][0]  # the other NaN's sign, as on the host of seed 68
    assert _against_interpreter(module, [x], unfused, "cpu (no fusion)", 0)["outcome"] == oc.BITS_EXPOSED
    wrong = [unfused[0].copy()]
    wrong[0][1] = not wrong[0][1]  # the CPU's own element 1 is +NaN: the rerun from it disagrees
    assert _against_interpreter(module, [x], wrong, "cpu (no fusion)", 0)["outcome"] == oc.MISMATCH


def test_a_convert_to_integers_shows_rounding_on_the_real_gpu_only():
    """The large-graph fuzzer's seed-72 shape on an H200: power(x, x) about 1.2e9, one ULP (128)
    from the interpreter's with libdevice's powf, converted to s32. On the real GPU the convert's
    floats are checked as a bitcast's; on the CPU targets (the interpreter's libm) and in the
    emulation the convert stays a test of the convert. (Here an exponential: a power shows its
    operands' rounding on every backend, test_a_power_shows_its_exponents_rounding_and_is_still_checked.)"""
    text = """HloModule convert_shows
ENTRY main {
  x = f32[4] parameter(0)
  p = f32[4] exponential(x)
  c = s32[4] convert(p)
  n = f32[4] negate(x)
  ROOT t = (s32[4], f32[4]) tuple(c, n)
}
"""
    module = hlofuse.parse_hlo(text)
    assert exposed_outputs(module, "gpu") == {0}
    assert exposed_outputs(module, "cpu") == set() == exposed_outputs(module, "gpu-emulated")
    assert exposed_outputs(module, "cpu (no fusion)") == set()
    variant = sources_module(module, "gpu")
    assert [o.opcode for o in variant.entry.root.operands] == ["exponential"]


REMAINDER_TIE = """HloModule remainder_tie
ENTRY main {
  x = f16[1] parameter(0)
  y = f16[1] parameter(1)
  l = f16[1] logistic(x)
  r = f16[1] remainder(y, l)
  ROOT c = f16[1] cosine(r)
}
"""


def _seed_73_on_the_cpu(text: str) -> tuple:
    """(module, args, the CPU's outputs) of `text` on seed 73's logistic input -0.164 and 6.426;
    skips where this host's CPU logistic rounds as the interpreter does (nothing exposed)."""
    module = hlofuse.parse_hlo(text)
    args = [np.array([45375], np.uint16).view(np.float16), np.array([18029], np.uint16).view(np.float16)]
    got = [np.asarray(o) for o in hlofuse.compile(module, target="cpu")(*args)]
    want = hlofuse.compile(module, target="interpreter")(*args)
    if np.array_equal(got[0], np.asarray(want[0]), equal_nan=True):
        pytest.skip("this host's CPU logistic rounds as the interpreter here: nothing exposed")
    return module, args, got


def test_a_remainder_shows_its_operands_rounding_and_is_still_checked():
    """The large-graph fuzzer's seed-73 case: logistic(-0.164) in f16 is 0.459 from the
    interpreter (f64 through f32) and 0.4592 from the CPU's f32 approximation (its f32 result
    next to an f16 tie), and 6.426 is 14 x 0.459: fmod gives 0 against 0.4558, so cos 1.0
    against 0.898. The divisors agree within the float tolerance and the interpreter, rerun from
    the CPU's own divisor, gives the CPU's answer: bits-exposed. A wrong answer downstream of
    the remainder still fails that rerun."""
    assert exposed_outputs(hlofuse.parse_hlo(REMAINDER_TIE), "cpu") == {0}
    # the cosine reads the remainder: recomputed by the rerun from the remainder's cut, not cut
    assert [i.opcode for i in float_bitcasts(hlofuse.parse_hlo(REMAINDER_TIE))] == ["remainder"]
    module, args, got = _seed_73_on_the_cpu(REMAINDER_TIE)
    assert _against_interpreter(module, args, got, "cpu", 73)["outcome"] == oc.BITS_EXPOSED
    wrong = [np.array([0.5], np.float16)]  # no divisor near 0.459 gives cos(r) = 0.5 from 6.426
    assert _against_interpreter(module, args, wrong, "cpu", 73)["outcome"] == oc.MISMATCH


def test_the_cut_module_runs_the_rest_from_given_floats():
    module = hlofuse.parse_hlo(REMAINDER_TIE)
    cut = cut_module(module, "cpu")
    params = [i for i in cut.entry.instructions if i.opcode == "parameter" and i.users]
    # y and l are the remainder's operands: cut; x still feeds the (now unused) logistic
    assert sorted(p.name for p in params) == ["cut_l", "cut_y", "x"]
    x, y = np.float16(-0.164), np.float16(6.426)
    out = evaluate(cut, [np.array([x]), np.array([y]), np.array([y]), np.array([0.4592], np.float16)])
    assert np.asarray(out[0])[0] == np.cos(np.float32(np.fmod(np.float16(6.426), np.float16(0.4592)))).astype(np.float16)


POWER_TIE = """HloModule power_tie
ENTRY main {
  x = f16[1] parameter(0)
  y = f16[1] parameter(1)
  l = f16[1] logistic(x)
  e = f16[1] divide(y, l)
  m = f16[] constant(-1)
  mb = f16[1] broadcast(m), dimensions={}
  ROOT p = f16[1] power(mb, e)
}
"""


def test_a_power_shows_its_exponents_rounding_and_is_still_checked():
    """pow(-1, e) is 1 at an even integer e and NaN next to it: the seed-73 logistic one f16 ULP
    apart makes e = 6.426 / 0.459 = 14 on the interpreter and 13.99 on the CPU (seed 74's shape:
    pow(-0, a row sum one ULP apart) on the emulated GPU). The exponent agrees within the float
    tolerance and the rerun from the CPU's own exponent gives the CPU's answer: bits-exposed; a
    wrong power still fails the rerun."""
    module = hlofuse.parse_hlo(POWER_TIE)
    assert exposed_outputs(module, "cpu") == {0}
    assert [o.opcode for o in sources_module(module, "cpu").entry.root.operands] == ["broadcast", "divide"]
    module, args, got = _seed_73_on_the_cpu(POWER_TIE)
    assert _against_interpreter(module, args, got, "cpu", 74)["outcome"] == oc.BITS_EXPOSED
    assert _against_interpreter(module, args, [np.array([0.5], np.float16)], "cpu", 74)["outcome"] == oc.MISMATCH


COSINE_OF_A_LARGE_ARGUMENT = """HloModule cosine_large
ENTRY main {
  x = f16[1] parameter(0)
  y = f16[1] parameter(1)
  l = f16[1] logistic(x)
  k = f16[] constant(60000)
  kb = f16[1] broadcast(k), dimensions={}
  m = f16[1] multiply(l, kb)
  ROOT c = f16[1] cosine(m)
}
"""


def test_a_cosine_shows_its_operands_rounding_and_is_still_checked():
    """Seed 80's shape on an H200 (the GPU's rsqrt one ULP from the interpreter's, about 2.7e22,
    then its cosine 0.755 against 0.948), here with the seed-73 logistic one f16 ULP apart: 60000
    times it is 27536 against 27552 (f16's ULP there is 16), whose cosines have nothing in
    common. The operands agree within the float tolerance and the rerun from the CPU's own
    operand gives the CPU's answer: bits-exposed; a wrong cosine still fails the rerun."""
    module = hlofuse.parse_hlo(COSINE_OF_A_LARGE_ARGUMENT)
    assert exposed_outputs(module, "cpu") == {0}
    assert [o.opcode for o in sources_module(module, "cpu").entry.root.operands] == ["multiply"]
    module, args, got = _seed_73_on_the_cpu(COSINE_OF_A_LARGE_ARGUMENT)
    assert _against_interpreter(module, args, got, "cpu", 80)["outcome"] == oc.BITS_EXPOSED
    wrong = [np.array([2.0], np.float16)]  # no cosine is 2
    assert _against_interpreter(module, args, wrong, "cpu", 80)["outcome"] == oc.MISMATCH


def test_the_rerun_takes_a_nan_at_the_cut_of_either_sign():
    """Seed 76: a TOTALORDER compare of max(fmod(-inf, -inf), ...) reads a NaN's sign. The fused
    CPU program and the one that also returns the compared floats (whose fusion differs) need not
    give the same NaN, so the rerun from the latter's floats is tried with the NaNs as given,
    positive and negative: a NaN's sign is no backend's contract."""
    text = """HloModule nan_at_the_cut
ENTRY main {
  m = bf16[] constant(-inf)
  r = bf16[] remainder(m, m)
  x = bf16[] maximum(r, r)
  ROOT c = pred[] compare(x, m), direction=LT, type=TOTALORDER
}
"""
    module = hlofuse.parse_hlo(text)
    want = np.asarray(hlofuse.compile(module, target="interpreter")()[0])
    flipped = [np.asarray(not bool(want))]  # the other NaN's answer
    assert _against_interpreter(module, [], flipped, "cpu", 76)["outcome"] == oc.BITS_EXPOSED


TWO_KERNELS_TWO_NANS = """HloModule two_kernels_two_nans

ENTRY main {
  x = f32[4] parameter(0)
  c = f32[4] cosine(x)
  z = f32[] constant(0)
  zb = f32[4] broadcast(z), dimensions={}
  lt = pred[4] compare(c, zb), direction=LT, type=TOTALORDER
  gt = pred[4] compare(c, zb), direction=GT, type=TOTALORDER
  ROOT o = (pred[4], pred[4]) tuple(lt, gt)
}
"""


def test_each_output_may_read_its_own_nan_sign():
    """The graph fuzzer's seed 84 (gpu-emulated): cos(inf) is a NaN, and fusion computed it in
    the kernel of each output, one kernel making a +NaN and the other a -NaN, so the outputs of
    one run follow different NaN signs at the cut. The rerun lets each output take its own; a
    wrong element where no NaN is read still fails."""
    module = hlofuse.parse_hlo(TWO_KERNELS_TWO_NANS)
    x = np.array([np.inf, -0.5, -2.0, 0.25], np.float32)  # cos: NaN, 0.88, -0.42, 0.97
    cut = cut_module(module, "cpu")
    with np.errstate(invalid="ignore"):
        cos = np.cos(x)

    def run_with(sign: float) -> list:
        c = np.where(np.isnan(cos), np.copysign(np.nan, sign), cos).astype(np.float32)
        # the cut points: the cosine's operand, then the compares' two
        return [np.asarray(o) for o in evaluate(cut, [x, x, c, np.zeros(4, np.float32)])]

    minus, plus = run_with(-1.0), run_with(1.0)
    assert minus[0][0] and not plus[0][0] and plus[1][0] and not minus[1][0]  # -NaN < 0 < +NaN
    mixed = [plus[0], minus[1]]  # no one NaN gives both: each output read its own
    assert only_bits_exposed(module, [x], "cpu", [0, 1], "flush", mixed)
    wrong = [plus[0].copy(), minus[1]]
    wrong[0][2] = not wrong[0][2]  # cos(-2) < 0 whatever a NaN's sign
    assert not only_bits_exposed(module, [x], "cpu", [0, 1], "flush", wrong)


REMAINDER_SIGN = """HloModule remainder_sign
ENTRY main {
  x = f16[1] parameter(0)
  y = f16[1] parameter(1)
  l = f16[1] logistic(x)
  r = f16[1] remainder(y, l)
  z = f16[] constant(0)
  zb = f16[1] broadcast(z), dimensions={}
  ROOT c = pred[1] compare(r, zb), direction=GT, type=TOTALORDER
}
"""


def test_a_cast_after_a_cast_reads_the_floats_the_first_one_moved():
    """The large-graph fuzzer's seed 84 (cpu): a TOTALORDER compare of a remainder's result. The
    seed-73 logistic one f16 ULP apart makes fmod(6.426, l) 0 on the interpreter and 0.4558 on
    the CPU, so the compare's operand differs from the interpreter's plain run by design. It is
    held instead to the interpreter's remainder of the CPU's own operands (`_moved_reference`):
    bits-exposed (held to the plain run, it was a mismatch)."""
    from tests.fuzz.bit_exposure import _moved, _moved_reference

    module = hlofuse.parse_hlo(REMAINDER_SIGN)
    assert [i.opcode for i in float_bitcasts(module)] == ["remainder", "compare"]
    assert _moved(module, "cpu") == [False, False, True, False]  # y, l, r, zb: r follows the remainder
    y, l = np.array([6.426], np.float16), np.array([0.4592], np.float16)
    (r,) = _moved_reference(module, "cpu", [np.array([-0.164], np.float16), y], [y, l, np.zeros(1, np.float16)], "flush")
    assert np.asarray(r)[0] == np.fmod(np.float32(y[0]), np.float32(l[0])).astype(np.float16)
    module, args, got = _seed_73_on_the_cpu(REMAINDER_SIGN)
    assert _against_interpreter(module, args, got, "cpu", 84)["outcome"] == oc.BITS_EXPOSED
