"""The fuzzer's recheck of mismatches against a reversed reduction order (tests/fuzz/reassociation.py):
it excuses only elements where two valid orders of the reference disagree, never others."""
from __future__ import annotations

import math

import numpy as np

import hlofuse
from tests.fuzz import outcomes as oc
from tests.fuzz.cases import compare_with_reference
from tests.fuzz.reassociation import (only_order_sensitive, other_order_references, precise_reduction_reference,
                                      reversed_reduction_reference, sequential_reduction_reference,
                                      windowed_reduction_reference)

# Column sums of f32[60,3]: column 0 cancels (-1e20 ... +1e20 among small terms), 1 and 2 do not.
MODULE = """HloModule sums
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[60,3] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce(x, z), dimensions={0}, to_apply=add
}
"""


def _inputs() -> np.ndarray:
    x = np.random.default_rng(3).standard_normal((60, 3)).astype(np.float32)
    x[13, 0], x[49, 0] = -1e20, 1e20
    return x


def _reference(x):
    module = hlofuse.parse_hlo(MODULE)
    return module, hlofuse.compile(module, target="interpreter")(x)


def test_reversed_order_is_the_same_sum_differently_associated():
    x = _inputs()
    module, want = _reference(x)
    other = reversed_reduction_reference(module, [x])
    # the well-conditioned columns agree to rounding; the exact small-term sum is what numpy
    # computes in float64 once the two huge terms are taken out
    np.testing.assert_allclose(other[0][1:], want[0][1:], rtol=1e-5)
    np.testing.assert_allclose(want[0][1:], x[:, 1:].astype(np.float64).sum(0), rtol=1e-5)
    # the cancelling column: the two orders disagree (that is what makes it order-sensitive)
    assert other[0][0] != want[0][0]


def test_cancelling_column_is_excused_and_nothing_else():
    x = _inputs()
    module, want = _reference(x)
    other = reversed_reduction_reference(module, [x])
    # a backend that got the cancelling column as the other order did: excused
    got = [want[0].copy()]
    got[0][0] = other[0][0]
    assert only_order_sensitive(got, want, other)
    outcome, _ = compare_with_reference(got, want, lambda: None, lambda: [other])
    assert outcome == oc.ORDER_SENSITIVE
    # the same, plus a wrong well-conditioned column: still a mismatch
    got[0][2] += 1.0
    assert not only_order_sensitive(got, want, other)
    outcome, _ = compare_with_reference(got, want, lambda: None, lambda: [other])
    assert outcome == oc.MISMATCH


def test_far_outside_the_orders_spread_is_a_mismatch():
    x = _inputs()
    module, want = _reference(x)
    other = reversed_reduction_reference(module, [x])
    spread = abs(float(other[0][0]) - float(want[0][0]))
    got = [want[0].copy()]
    got[0][0] = np.float32(float(want[0][0]) + 100 * spread + 1.0)
    outcome, _ = compare_with_reference(got, want, lambda: None, lambda: [other])
    assert outcome == oc.MISMATCH


def test_without_a_second_order_a_mismatch_stays_one():
    x = _inputs()
    _, want = _reference(x)
    got = [want[0].copy()]
    got[0][0] = np.float32(12345.0)
    assert compare_with_reference(got, want, lambda: None, lambda: None)[0] == oc.MISMATCH
    assert compare_with_reference(got, want, lambda: None)[0] == oc.MISMATCH


# Row sums of f32[2,16]: row 0 is the row of the fuzzer's seed-27 case (-2^31 and +2^31 at 7 and
# 9 among small terms), row 1 does not cancel.
ROWS = """HloModule rows
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[2,16] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2] reduce(x, z), dimensions={1}, to_apply=add
}
"""
SEED_27_ROW = [0x3E885A16, 0xBEB02F75, 0x3EC25C8E, 0x4031647E, 0xBEF61B07, 0xBFBCDC8D, 0x404EA637, 0xCF000000,
               0x403B940A, 0x4F000000, 0x3EE61FD6, 0xBFF93895, 0xC0262274, 0x3DD5566E, 0x402B4042, 0xC06FB4DA]


def _rows() -> np.ndarray:
    x = np.random.default_rng(27).uniform(-5, 5, (2, 16)).astype(np.float32)
    x[0] = np.array(SEED_27_ROW, np.uint32).view(np.float32)
    return x


def _fold(values, lanes: int) -> np.float32:
    """An f32 sum in `lanes` interleaved accumulators, then added pairwise: another valid order."""
    acc = [np.float32(0)] * lanes
    for i, v in enumerate(values):
        acc[i % lanes] = np.float32(acc[i % lanes] + v)
    while len(acc) > 1:
        acc = [np.float32(acc[i] + acc[i + 1]) for i in range(0, len(acc), 2)]
    return acc[0]


def test_pairwise_sums_absorb_alike_in_both_orders_and_a_sequential_fold_does_not():
    """numpy pairs element j with j+8, so both the interpreter's order and its reverse absorb
    every small term of row 0 into the +-2^31 and agree (0); a sequential fold keeps the terms
    after the cancellation. A backend summing in two lanes (1.27) was a mismatch against the
    reversed order alone and is order-sensitive with the sequential one."""
    x = _rows()
    module = hlofuse.parse_hlo(ROWS)
    want = hlofuse.compile(module, target="interpreter")(x)
    reversed_ = reversed_reduction_reference(module, [x])
    sequential = sequential_reduction_reference(module, [x])
    assert reversed_[0][0] == want[0][0] == 0
    assert sequential[0][0] == _fold(x[0], 1) != want[0][0]  # an independent scalar loop
    np.testing.assert_allclose(sequential[0][1], want[0][1], rtol=1e-5)
    got = [want[0].copy()]
    got[0][0] = _fold(x[0], 2)
    assert got[0][0] != 0
    assert compare_with_reference(got, want, lambda: None, lambda: [reversed_])[0] == oc.MISMATCH
    assert compare_with_reference(got, want, lambda: None, lambda: other_order_references(module, [x]))[0] \
        == oc.ORDER_SENSITIVE
    # the well-conditioned row wrong as well: a mismatch whatever the orders
    got[0][1] += 1.0
    assert not only_order_sensitive(got, want, reversed_, sequential)


SQRT_OF_ROW_SUMS = """HloModule sqrt_sums
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[2,16] parameter(0)
  z = f32[] constant(0)
  r = f32[2] reduce(x, z), dimensions={1}, to_apply=add
  ROOT q = f32[2] sqrt(r)
}
"""


def test_nan_where_the_orders_do_not_fix_the_sign_is_excused_and_nowhere_else():
    """The fuzzer's seed-34 row: 1e20 and -1e20 among small terms summing to about 0.002; the
    interpreter's pairwise sum gives 0, a sequential fold 2.55, a kernel's lanes a negative sum
    whose sqrt is NaN. That NaN is excused; a NaN on the well-conditioned row is not."""
    row = [1.0000000200408773e+20, -0.8576688766479492, 2.342223644256592, -3.268235683441162,
           -0.3739262819290161, -6.736688613891602, -4.675164699554443, 0.769256591796875,
           4.977877140045166, 4.392275810241699, 4.412167072296143, -1.5817514657974243,
           -1.6933014392852783, -0.2561933994293213, -1.0000000200408773e+20, 2.5510926246643066]
    x = np.array([row, np.arange(16)], np.float32)
    module = hlofuse.parse_hlo(SQRT_OF_ROW_SUMS)
    want = hlofuse.compile(module, target="interpreter")(x)
    others = other_order_references(module, [x])
    assert float(want[0][0]) == 0.0 and float(others[1][0][0]) > 1.0  # the orders disagree
    got = [want[0].copy()]
    got[0][0] = np.nan
    assert compare_with_reference(got, want, lambda: None, lambda: others)[0] == oc.ORDER_SENSITIVE
    got[0][1] = np.nan
    assert compare_with_reference(got, want, lambda: None, lambda: others)[0] == oc.MISMATCH


COLUMN_SUMS = """HloModule column_sums
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[32,2] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2] reduce(x, z), dimensions={0}, to_apply=add
}
"""


def test_an_order_that_cancels_the_large_terms_first_is_an_order_too():
    """The fuzzer's seed-35 column: 1e20, -1e20, -2**31 and 65504 among small terms. Pairwise,
    reversed and sequential f32 sums all absorb -2**31 and give about 0; the exact sum, and a
    kernel whose vector lanes keep -2**31 apart from 1e20, -2.1e9. That is excused through the
    precise reference; a value outside every order's reach is not."""
    col = np.random.default_rng(35).standard_normal(32).astype(np.float32)
    col[1], col[29], col[14], col[26] = 1e20, -1e20, -2.0 ** 31, 65504.0
    x = np.stack([col, np.arange(32, dtype=np.float32)], axis=1)
    module = hlofuse.parse_hlo(COLUMN_SUMS)
    want = hlofuse.compile(module, target="interpreter")(x)
    others = other_order_references(module, [x])
    assert abs(float(want[0][0])) < 1e6 and abs(float(others[1][0][0])) < 1e6  # f32 orders absorb
    precise = precise_reduction_reference(module, [x])
    assert abs(float(precise[0][0]) - math.fsum(col.astype(np.float64).tolist())) < 1e3
    got = [want[0].copy()]
    got[0][0] = np.float32(-2147418112.0)  # what the kernel gave
    assert compare_with_reference(got, want, lambda: None, lambda: others)[0] == oc.ORDER_SENSITIVE
    got[0][0] = np.float32(5e12)
    assert compare_with_reference(got, want, lambda: None, lambda: others)[0] == oc.MISMATCH


RATIO_OF_COLUMN_SUMS = """HloModule ratio
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[96,2] parameter(0)
  z = f32[] constant(0)
  s = f32[2] reduce(x, z), dimensions={0}, to_apply=add
  ROOT r = f32[2] divide(s, s)
}
"""


def test_the_column_kernels_windowed_order_is_an_order_too():
    """The large-graph fuzzer's seed-63 column: 1e20 in the first window of 32 rows and -1e20
    in the third, -2**31 and -3e9 among small terms. Folded in windows (the CPU's column
    kernels), the first window is 1e20, the second is absorbed by it and the third cancels it:
    the sum is exactly 0 and s / s NaN, where every other order gives a nonzero sum and 1. The
    windowed reference takes that order, so the NaN is excused; a NaN in the other column,
    whose sum no order makes 0, is not."""
    col = np.random.default_rng(63).standard_normal(96).astype(np.float32)
    col[24], col[75], col[59], col[72] = 1e20, -1e20, -2.0 ** 31, -3e9
    x = np.stack([col, np.arange(96, dtype=np.float32)], axis=1)
    module = hlofuse.parse_hlo(RATIO_OF_COLUMN_SUMS)
    want = hlofuse.compile(module, target="interpreter")(x)
    others = other_order_references(module, [x])
    windowed = windowed_reduction_reference(module, [x])
    assert np.isnan(windowed[0][0]) and float(want[0][0]) == 1.0
    ratios = [float(o[0][0]) for o in others]  # reversed, sequential, windowed, precise
    assert np.isnan(ratios[2]) and ratios[:2] + ratios[3:] == [1.0, 1.0, 1.0]
    got = [np.asarray(o) for o in hlofuse.compile(module, target="cpu", cache=False)(x)]
    assert np.isnan(got[0][0])  # the CPU's column kernel takes the windowed order
    assert compare_with_reference(got, want, lambda: None, lambda: others)[0] == oc.ORDER_SENSITIVE
    got[0][1] = np.nan
    assert compare_with_reference(got, want, lambda: None, lambda: others)[0] == oc.MISMATCH


SIGN_OF_A_COLUMN_SUM = """HloModule sign_of_a_column_sum

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

ENTRY e {
  x = f32[96,2] parameter(0)
  z = f32[] constant(0)
  s = f32[2] reduce(x, z), dimensions={0}, to_apply=add
  t = f32[] constant(1e-40)
  tb = f32[2] broadcast(t), dimensions={}
  ROOT c = pred[2] compare(s, tb), direction=LT
}
"""


def test_a_compare_of_a_cancelling_sum_is_excused_only_as_another_order_gives_it():
    """The large-graph fuzzer's seeds 85 and 86 (cpu): `sum < 1e-40` of a column whose 1e20
    terms cancel, false in the CPU's windowed order and true in the interpreter's. A bool has
    no spread to be within: its element is excused where another order gives exactly the
    backend's value, and the column whose sum every order agrees on must still match."""
    col = np.random.default_rng(63).standard_normal(96).astype(np.float32)
    col[24], col[75], col[59], col[72] = 1e20, -1e20, -2.0 ** 31, -3e9
    x = np.stack([col, np.arange(96, dtype=np.float32)], axis=1)
    module = hlofuse.parse_hlo(SIGN_OF_A_COLUMN_SUM)
    want = [np.asarray(w) for w in hlofuse.compile(module, target="interpreter")(x)]
    others = other_order_references(module, [x])
    answers = {bool(np.asarray(o[0])[0]) for o in others} | {bool(want[0][0])}
    assert answers == {True, False}  # the orders disagree on the first column's sign
    flipped = [want[0].copy()]
    flipped[0][0] = not flipped[0][0]
    assert compare_with_reference(flipped, want, lambda: None, lambda: others)[0] == oc.ORDER_SENSITIVE
    flipped[0][1] = not flipped[0][1]  # 0 + 1 + ... + 95 > 0 in every order
    assert compare_with_reference(flipped, want, lambda: None, lambda: others)[0] == oc.MISMATCH
