"""The simplifier's type-range rules (simplifier_logic.py), transpose rules
(simplifier_transpose.py) and the reshape mover, each against the reference interpreter on
inputs that hold every edge of the type (lowest, highest, 0, -0.0, +-inf, NaN): whatever is
rewritten gives the same bits, and what the rule promises to fold is folded."""
from __future__ import annotations

import itertools
import os

import ml_dtypes
import numpy as np
import pytest
from repo_paths import JAX_CORPUS

from hlofuse.hlo.dtypes import element_type
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.pipeline import PassPipeline, standard_pipeline
from hlofuse.passes.reshape_mover import ReshapeMover
from hlofuse.passes.simplifier import AlgebraicSimplifier
from hlofuse.runtime.interpreter import evaluate

N = 16


def _edges(t: str) -> np.ndarray:
    """N values of type `t` holding its edges, the rest random."""
    dt = element_type(t).numpy
    rng = np.random.default_rng(0)
    if t == "pred":
        return np.array([False, True] * (N // 2))
    if element_type(t).kind in ("sint", "uint"):
        info = ml_dtypes.iinfo(dt)
        edge = [info.min, info.max, 0, 1, info.min + 1, info.max - 1]
        rest = rng.integers(info.min, info.max, size=N - len(edge), endpoint=True)
        return np.array(edge + list(rest)).astype(dt)
    finfo = ml_dtypes.finfo(dt)
    edge = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, float(finfo.max), float(finfo.min), 1.0]
    return np.array(edge + list(rng.standard_normal(N - len(edge)))).astype(dt)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype != np.bool_ else a


def _same_values(x, y) -> bool:
    """The same bits in every element, except that a NaN may come back as another NaN (its
    sign, its payload): IEEE 754 leaves which NaN an operation of two NaN operands returns to
    the implementation (x86: the first operand's), and a rewrite that reorders a dot's operands
    (mlp_grad's transposes folded into its dots) turns some -NaN into +NaN. Where NaNs are
    stays exact (tests/passes/test_passes.py `assert_bit_exact` says the same)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype.kind in "fc" and x.dtype.itemsize in (2, 4, 8, 16):
        nan = np.isnan(x)
        if not np.array_equal(nan, np.isnan(y)):
            return False
        x, y = x[~nan], y[~nan]
    return np.array_equal(_bits(x), _bits(y))


def _exact(text: str, passes, args) -> "HloModule":  # noqa: F821
    original = parse_hlo(text)
    optimized = parse_hlo(text)
    PassPipeline(passes, verify=True).run(optimized)
    before, after = evaluate(original, args), evaluate(optimized, args)
    for x, y in zip(before if isinstance(before, (list, tuple)) else [before],
                    after if isinstance(after, (list, tuple)) else [after]):
        assert np.array_equal(_bits(np.asarray(x)), _bits(np.asarray(y)))
    return optimized


def _literal(t: str, value) -> str:
    if t == "pred":
        return "true" if value else "false"
    if isinstance(value, float) and np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def _constants(t: str) -> list:
    kind = element_type(t).kind
    if kind == "pred":
        return [False, True]
    if kind in ("sint", "uint"):
        info = ml_dtypes.iinfo(element_type(t).numpy)
        return [int(info.min), int(info.max), 0, 1]
    return [float("-inf"), float("inf"), 0.0, -1.0]


TYPES = ["pred", "u8", "u32", "s8", "s32", "f32", "bf16", "f16"]
DIRECTIONS = ["LT", "LE", "GT", "GE", "EQ", "NE"]


def _fixed_by_range(t: str, c, direction: str, constant_on_right: bool) -> bool:
    """Whether the compare's value is the same for every x of type t (independent of the rule)."""
    xs = _edges(t).astype(np.float64) if t != "pred" else _edges(t).astype(np.int64)
    if element_type(t).kind in ("sint", "uint", "pred"):
        info = (0, 1) if t == "pred" else (ml_dtypes.iinfo(element_type(t).numpy).min,
                                           ml_dtypes.iinfo(element_type(t).numpy).max)
        xs = np.arange(info[0], info[1] + 1) if info[1] - info[0] < 70000 else np.array([info[0], info[1], 0, 1])
    lhs, rhs = (xs, np.float64(c)) if constant_on_right else (np.float64(c), xs)
    ops = {"LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
           "EQ": np.equal, "NE": np.not_equal}
    with np.errstate(invalid="ignore"):
        values = np.broadcast_to(ops[direction](lhs, rhs), xs.shape)
    return bool(values.all() or not values.any())


@pytest.mark.parametrize("t", TYPES)
def test_compares_against_a_constant_are_exact(t):
    folded = 0
    for c, direction, right in itertools.product(_constants(t), DIRECTIONS, (True, False)):
        x, b = f"{t}[{N}]{{0}} %x", f"{t}[{N}]{{0}} %b"
        operands = f"{x}, {b}" if right else f"{b}, {x}"
        text = (f"HloModule m\n\nENTRY %main (x: {t}[{N}]) -> pred[{N}] {{\n"
                f"  %x = {t}[{N}]{{0}} parameter(0)\n"
                f"  %c = {t}[] constant({_literal(t, c)})\n"
                f"  %b = {t}[{N}]{{0}} broadcast({t}[] %c), dimensions={{}}\n"
                f"  ROOT %r = pred[{N}]{{0}} compare({operands}), direction={direction}\n}}\n")
        optimized = _exact(text, [AlgebraicSimplifier(), DeadCodeElimination()], [_edges(t)])
        gone = all(i.opcode != "compare" for i in optimized.entry.instructions)
        folded += gone
        # only a compare whose value is fixed for every x may fold; integer and pred range
        # compares (lowest/highest) must fold
        if gone:
            assert _fixed_by_range(t, c, direction, right), (t, c, direction, right)
        elif element_type(t).kind != "float" and _fixed_by_range(t, c, direction, right):
            pytest.fail(f"{t} {c} {direction} (constant {'right' if right else 'left'}) is fixed but not folded")
    assert folded > 0


@pytest.mark.parametrize("t", ["pred", "u8", "s8", "u32", "s32", "s64"])
@pytest.mark.parametrize("op", ["and", "or", "maximum", "minimum"])
def test_logic_and_extrema_with_a_constant_are_exact(t, op):
    folded = 0
    for c in _constants(t) + ([-1] if element_type(t).kind == "sint" else []):
        for right in (True, False):
            ops = f"{t}[{N}]{{0}} %x, {t}[{N}]{{0}} %b" if right else f"{t}[{N}]{{0}} %b, {t}[{N}]{{0}} %x"
            text = (f"HloModule m\n\nENTRY %main (x: {t}[{N}]) -> {t}[{N}] {{\n"
                    f"  %x = {t}[{N}]{{0}} parameter(0)\n  %c = {t}[] constant({_literal(t, c)})\n"
                    f"  %b = {t}[{N}]{{0}} broadcast({t}[] %c), dimensions={{}}\n"
                    f"  ROOT %r = {t}[{N}]{{0}} {op}({ops})\n}}\n")
            optimized = _exact(text, [AlgebraicSimplifier(), DeadCodeElimination()], [_edges(t)])
            folded += all(i.opcode != op for i in optimized.entry.instructions)
    assert folded > 0  # the rules fire (an identity or absorbing constant folds), not only stay exact


@pytest.mark.parametrize("t", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("op,c", [("maximum", "-inf"), ("minimum", "inf")])
def test_float_extrema_with_infinity_fold_and_keep_nan(t, op, c):
    text = (f"HloModule m\n\nENTRY %main (x: {t}[{N}]) -> {t}[{N}] {{\n"
            f"  %x = {t}[{N}]{{0}} parameter(0)\n  %c = {t}[] constant({c})\n"
            f"  %b = {t}[{N}]{{0}} broadcast({t}[] %c), dimensions={{}}\n"
            f"  ROOT %r = {t}[{N}]{{0}} {op}({t}[{N}]{{0}} %x, {t}[{N}]{{0}} %b)\n}}\n")
    optimized = _exact(text, [AlgebraicSimplifier(), DeadCodeElimination()], [_edges(t)])
    assert optimized.entry.root.opcode == "parameter"


# ---- transpose(dot) ----------------------------------------------------------------------------

DOTS = [
    # lhs dims, rhs dims, lhs_batch, rhs_batch, lhs_contracting, rhs_contracting, transpose
    ((3, 5), (3, 6), (), (), (0,), (0,), (1, 0)),
    ((5, 3), (3, 6), (), (), (1,), (0,), (1, 0)),
    ((2, 3, 4), (2, 4, 5), (0,), (0,), (2,), (1,), (0, 2, 1)),
    ((4, 2, 3), (5, 4, 2), (1,), (2,), (0,), (1,), (0, 2, 1)),
    ((2, 7, 3, 4), (7, 2, 4, 5), (0, 1), (1, 0), (3,), (2,), (1, 0, 3, 2)),
    ((3, 4, 2), (4, 3, 2, 5), (), (), (0, 1), (1, 0), (1, 2, 0)),
]


def _dot_shape(ld, rd, lb, rb, lc, rc):
    free_l = [d for i, d in enumerate(ld) if i not in lb and i not in lc]
    free_r = [d for i, d in enumerate(rd) if i not in rb and i not in rc]
    return [ld[i] for i in lb] + free_l + free_r


def _dims(xs) -> str:
    return "{" + ",".join(str(x) for x in xs) + "}"


def _transposed_dot(case, t: str, negated: bool = False) -> str:
    """A module computing transpose(dot(a, b)) for `case` (DOTS' columns) in type `t`, the
    transpose the root or (`negated`) read by a negate."""
    ld, rd, lb, rb, lc, rc, perm = case
    out = _dot_shape(ld, rd, lb, rb, lc, rc)
    tout = [out[p] for p in perm]
    bare = lambda d: f"{t}[{','.join(map(str, d))}]"  # noqa: E731
    shp = lambda d: bare(d) + _dims(range(len(d) - 1, -1, -1))  # noqa: E731
    batch = f", lhs_batch_dims={_dims(lb)}, rhs_batch_dims={_dims(rb)}" if lb else ""
    last = (f"  %t = {shp(tout)} transpose({shp(out)} %d), dimensions={_dims(perm)}\n"
            f"  ROOT %n = {shp(tout)} negate({shp(tout)} %t)\n" if negated else
            f"  ROOT %t = {shp(tout)} transpose({shp(out)} %d), dimensions={_dims(perm)}\n")
    return (f"HloModule m\n\nENTRY %main (a: {bare(ld)}, b: {bare(rd)}) -> {bare(tout)} {{\n"
            f"  %a = {shp(ld)} parameter(0)\n  %b = {shp(rd)} parameter(1)\n"
            f"  %d = {shp(out)} dot({shp(ld)} %a, {shp(rd)} %b){batch}, lhs_contracting_dims={_dims(lc)}, "
            f"rhs_contracting_dims={_dims(rc)}\n" + last + "}\n")


@pytest.mark.parametrize("case", DOTS, ids=[str(i) for i in range(len(DOTS))])
@pytest.mark.parametrize("t", ["f32", "f64", "s32"])
def test_transpose_of_dot_is_a_swapped_dot(case, t):
    ld, rd = case[:2]
    rng = np.random.default_rng(1)
    dt = element_type(t).numpy
    args = [(rng.standard_normal(ld) * 4).astype(dt), (rng.standard_normal(rd) * 4).astype(dt)]
    optimized = _exact(_transposed_dot(case, t), [AlgebraicSimplifier(), DeadCodeElimination()], args)
    assert [i.opcode for i in optimized.entry.instructions if i.opcode not in ("parameter",)] == ["dot"]


REORDERED = [
    # lhs dims, rhs dims, lhs_batch, rhs_batch, lhs_contracting, rhs_contracting, transpose:
    # transposes that reorder a group's free dimensions (the operands hold fewer elements)
    ((2, 8, 4), (2, 8, 4, 4), (0,), (0,), (2,), (3,), (0, 3, 2, 1)),  # Gemma's scores: [b,q,k,h] -> [b,h,k,q]
    ((6, 5, 2), (2, 7), (), (), (2,), (0,), (1, 0, 2)),  # lhs free dims swapped, no exchange
    ((6, 5, 2), (2, 7, 3), (), (), (2,), (0,), (3, 2, 1, 0)),  # both groups reversed and exchanged
]


@pytest.mark.parametrize("case", REORDERED, ids=[str(i) for i in range(len(REORDERED))])
def test_transpose_reordering_free_dimensions_moves_onto_the_operand(case):
    ld, rd = case[:2]
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(ld).astype(np.float32), rng.standard_normal(rd).astype(np.float32)]
    optimized = _exact(_transposed_dot(case, "f32", negated=True), [AlgebraicSimplifier(), DeadCodeElimination()], args)
    ops = [i.opcode for i in optimized.entry.instructions if i.opcode != "parameter"]
    assert ops.count("dot") == 1 and "transpose" in ops  # the transpose now of an operand
    (dot,) = [i for i in optimized.entry.instructions if i.opcode == "dot"]
    assert all(o.opcode in ("parameter", "transpose") and o.shape.element_count() <= dot.shape.element_count()
               for o in dot.operands)


def test_transpose_of_a_dot_with_two_users_stays():
    text = """HloModule m

ENTRY %main (a: f32[3,5], b: f32[3,6]) -> (f32[6,5], f32[5,6]) {
  %a = f32[3,5]{1,0} parameter(0)
  %b = f32[3,6]{1,0} parameter(1)
  %d = f32[5,6]{1,0} dot(f32[3,5]{1,0} %a, f32[3,6]{1,0} %b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %t = f32[6,5]{1,0} transpose(f32[5,6]{1,0} %d), dimensions={1,0}
  ROOT %r = (f32[6,5]{1,0}, f32[5,6]{1,0}) tuple(%t, %d)
}
"""
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 6)).astype(np.float32)]
    optimized = _exact(text, [AlgebraicSimplifier(), DeadCodeElimination()], args)
    assert sorted(i.opcode for i in optimized.entry.instructions) == ["dot", "parameter", "parameter",
                                                                      "transpose", "tuple"]


# ---- the standard pipeline before fusion on real programs --------------------------------------

JAX_FILES = sorted(f for f in os.listdir(JAX_CORPUS) if f.endswith(".hlo") and not f.endswith(".opt.hlo"))


@pytest.mark.parametrize("name", JAX_FILES)
def test_jax_corpus_is_bit_exact_before_fusion(name):
    """Call inlining, both simplifier runs, the reshape mover, CSE and DCE keep every bit of
    JAX's programs (the interpreter runs the module before and after)."""
    with open(os.path.join(JAX_CORPUS, name)) as f:
        text = f.read()
    original = parse_hlo(text)
    rng = np.random.default_rng(0)
    args = []
    for p in original.entry.parameters:
        s = p.shape
        if not s.is_array:
            pytest.skip("tuple parameter")
        if s.dtype.kind == "float":
            x = rng.standard_normal(s.dims)
            x = np.where(rng.random(s.dims) < 0.2, rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], size=s.dims), x)
            args.append(np.asarray(x).astype(s.dtype.numpy))
        elif s.dtype.kind == "pred":
            args.append(rng.random(s.dims) < 0.5)
        elif s.dtype.kind == "complex":
            args.append((rng.standard_normal(s.dims) + 1j * rng.standard_normal(s.dims)).astype(s.dtype.numpy))
        else:
            lo = 0 if s.dtype.kind == "uint" else -50
            args.append(rng.integers(lo, 50, size=s.dims).astype(s.dtype.numpy))
    try:
        before = evaluate(original, args)
    except UnsupportedError as e:
        pytest.skip(f"the interpreter cannot run it: {e}")
    optimized = parse_hlo(text)
    standard_pipeline(fusion=False, verify=True).run(optimized)
    after = evaluate(optimized, args)
    for x, y in zip(before if isinstance(before, (list, tuple)) else [before],
                    after if isinstance(after, (list, tuple)) else [after]):
        assert _same_values(x, y), name


def test_reshape_mover_leaves_a_shared_reshape():
    text = """HloModule m

ENTRY %main (r: f32[7]) -> (f32[1,7], f32[1,7]) {
  %r = f32[7]{0} parameter(0)
  %rr = f32[1,7]{1,0} reshape(f32[7]{0} %r)
  %e = f32[1,7]{1,0} exponential(f32[1,7]{1,0} %rr)
  ROOT %t = (f32[1,7]{1,0}, f32[1,7]{1,0}) tuple(%e, %rr)
}
"""
    m = parse_hlo(text)
    assert not ReshapeMover().run(m)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_transposed_dot_operand_folds_when_the_free_dimensions_keep_their_order(perm):
    """lhs a [2,3,6,4] (batch 0, free 1 and 2, contracting 3) read through every transpose."""
    dims = (2, 3, 6, 4)
    tdims = tuple(dims[p] for p in perm)
    inv = [perm.index(d) for d in range(4)]  # where each dimension of a lands in the transpose
    batch, contracting = inv[0], inv[3]
    s = lambda d: f"f32[{','.join(map(str, d))}]"  # noqa: E731
    text = (f"HloModule m\n\nENTRY %main (a: {s(dims)}, b: f32[2,4,5]) -> f32[2,3,6,5] {{\n"
            f"  %a = {s(dims)}{{3,2,1,0}} parameter(0)\n  %b = f32[2,4,5]{{2,1,0}} parameter(1)\n"
            f"  %t = {s(tdims)}{{3,2,1,0}} transpose({s(dims)}{{3,2,1,0}} %a), dimensions={_dims(perm)}\n"
            f"  ROOT %d = f32[2,{tdims[min(inv[1], inv[2])]},{tdims[max(inv[1], inv[2])]},5]{{3,2,1,0}} "
            f"dot({s(tdims)}{{3,2,1,0}} %t, f32[2,4,5]{{2,1,0}} %b), lhs_batch_dims={{{batch}}}, "
            f"lhs_contracting_dims={{{contracting}}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}\n}}\n")
    if inv[1] > inv[2]:
        text = text.replace("-> f32[2,3,6,5]", "-> f32[2,6,3,5]")
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(dims).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)]
    optimized = _exact(text, [AlgebraicSimplifier(), DeadCodeElimination()], args)
    folded = not any(i.opcode == "transpose" for i in optimized.entry.instructions)
    assert folded == (inv[1] < inv[2]) or perm == (0, 1, 2, 3)
