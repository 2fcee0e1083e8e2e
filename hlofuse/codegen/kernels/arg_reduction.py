"""Argmax/argmin row reductions, vectorised (issue 14 item 2).

jax's argmax is a variadic reduce of (value, index) pairs whose reducer keeps the accumulator
when it is greater or NaN, and on equal values keeps the smaller index:

    take  = a > b  or  a != a          (a, ai: the accumulator; b, bi: the element)
    value = take ? a : b
    index = take or (a == b and ai < bi) ? ai : bi

Folded element by element its loop-carried compares and selects defeat LLVM's vectoriser: the
row kernel took ~7 ns an element. But the result of folding this reducer over a row has a
closed form, which `recognize` proves applies (below), so the row kernel computes it with
reductions LLVM does vectorise:

  pass 1 (in the row kernel's main loop): M = llvm.maximum over the row (NaN propagates);
  pass 2 (a second loop over the row, in cache): the first and the last position where
         x == M (x is NaN when M is), and the smallest index among those positions (integer
         min/max reductions of frozen selects);
  result: a row holding NaN gives its first NaN and that NaN's index; otherwise the index is
          the smallest index of an element equal to M, the value the last such element (they
          differ only in the sign of a zero: the reducer takes the later value on ties, so
          [+0, -0] gives (-0, 0)); and the init value joins as reducer(init, row result).

Why that is the fold: over positions in order, the reducer is associative (the left NaN wins
whatever the indices; otherwise the winner is the maximum, ties broken by the smaller index,
and the value of the later operand: both order-free over a left-to-right sequence), so the fold
from `init` is reducer(init, fold of the row) and the fold of the row is the closed form. The
interpreter (the oracle) relies on the same associativity when it folds long rows pairwise.

`recognize` accepts a reducer only if it is built from compares of its own parameters, boolean
logic and selects between them, and its selections agree with the table above (or argmin's)
on every case of the values (NaN on either side or both, greater, less, equal) and of the
indices (less, equal, greater): such a reducer's outcome depends on nothing else, so agreeing
on the cases is agreeing everywhere. Values f32, f64 or integers; indices integers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, reg_type
from ...emitters.ir_helpers import Index, const_i64, delinearize, freeze
from ...hlo.dtypes import ElementType

_NAN = float("nan")
# (a, b) for each relation of the values: both NaN, a NaN, b NaN, a > b, a < b, a == b.
_FLOAT_CASES = [(_NAN, _NAN), (_NAN, 1.0), (1.0, _NAN), (2.0, 1.0), (1.0, 2.0), (1.0, 1.0)]
_INT_CASES = [(2, 1), (1, 2), (1, 1)]
_INDEX_CASES = [(3, 7), (5, 5), (7, 3)]
_COMPARE = {"EQ": lambda x, y: x == y, "NE": lambda x, y: x != y, "LT": lambda x, y: x < y,
            "LE": lambda x, y: x <= y, "GT": lambda x, y: x > y, "GE": lambda x, y: x >= y}


@dataclass(frozen=True)
class ArgReduce:
    """A reduce recognised as argmax (`is_min` False) or argmin of (value, index) pairs."""

    is_min: bool
    value: ElementType
    index: ElementType


@dataclass(frozen=True)
class _Param:
    number: int
    value: float | int


def _evaluate(comp, params: dict):
    """The reducer's result on concrete parameters (a dict number -> value): a tuple of the
    selected _Param objects, or None if it uses an op outside compares, boolean logic, selects."""
    memo: dict = {}

    def ev(inst):
        if inst in memo:
            return memo[inst]
        op = inst.opcode
        args = [ev(o) for o in inst.operands]
        if any(a is None for a in args):
            r = None
        elif op == "parameter":
            r = _Param(inst.parameter_number, params[inst.parameter_number])
        elif op == "compare" and "type" not in inst.attrs and all(isinstance(a, _Param) for a in args):
            r = _COMPARE[str(inst.attrs["direction"])](args[0].value, args[1].value)
        elif op in ("and", "or", "xor") and all(isinstance(a, bool) for a in args):
            r = args[0]
            for a in args[1:]:
                r = (r and a) if op == "and" else (r or a) if op == "or" else (r != a)
        elif op == "not" and isinstance(args[0], bool):
            r = not args[0]
        elif op == "select" and isinstance(args[0], bool):
            r = args[1] if args[0] else args[2]
        elif op == "tuple":
            r = tuple(args)
        else:
            r = None
        memo[inst] = r
        return r

    return ev(comp.root)


def selects_operands(comp) -> bool:
    """Whether reducer `comp` only selects among its parameters (compares, boolean logic,
    selects and a tuple): each result is one of its operands, as an argmax's is, so folding
    its init again changes nothing (reduction_groups.slices_keep_init)."""
    n = len(comp.parameters)
    if n < 2 or n % 2:
        return False
    sample = {k: float(k) for k in range(n)}
    result = _evaluate(comp, sample)
    results = result if isinstance(result, tuple) else (result,)
    return all(isinstance(r, _Param) for r in results)


def _expected(is_min: bool, a, b, ai, bi) -> tuple[int, int]:
    """Parameter numbers jax's argmax/argmin reducer selects: (value's, index's)."""
    nan_a = isinstance(a, float) and math.isnan(a)
    take = (a < b if is_min else a > b) or nan_a
    return (0 if take else 2), (1 if take or (a == b and ai < bi) else 3)


def recognize(inst) -> ArgReduce | None:
    """The ArgReduce `inst` (a reduce) is, or None (module docstring: how it is decided)."""
    if inst.opcode != "reduce" or len(inst.operands) != 4 or not inst.shape.is_tuple:
        return None
    vt, it = inst.operands[0].shape.dtype, inst.operands[1].shape.dtype
    if not (vt.name in ("f32", "f64") or vt.is_integer) or not it.is_integer:
        return None
    comp = inst.attrs["to_apply"]
    if len(comp.parameters) != 4:
        return None
    cases = _FLOAT_CASES if vt.is_float else _INT_CASES
    for is_min in (False, True):
        ok = True
        for a, b in cases:
            for ai, bi in _INDEX_CASES:
                got = _evaluate(comp, {0: a, 1: ai, 2: b, 3: bi})
                if (not isinstance(got, tuple) or len(got) != 2 or not all(isinstance(g, _Param) for g in got)
                        or (got[0].number, got[1].number) != _expected(is_min, a, b, ai, bi)):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return ArgReduce(is_min, vt, it)
    return None


def _int_limit(et: ElementType, ty: ir.IntType, largest: bool) -> ir.Constant:
    if et.is_signed:
        return ir.Constant(ty, (1 << (et.bits - 1)) - 1 if largest else -(1 << (et.bits - 1)))
    return ir.Constant(ty, (1 << et.bits) - 1 if largest else 0)


class ArgRow:
    """The accumulators and loops of one argmax/argmin hero in a row kernel (module docstring).

    `start` at each output, `step` at each reduced position of the kernel's main loop,
    `finish` after it: the second pass and the (value, index) result."""

    def __init__(self, b: ir.IRBuilder, em: ElementalEmitter, hero, spec: ArgReduce, reduced_dims) -> None:
        self.b, self.em, self.hero, self.spec = b, em, hero, spec
        self.reduced_dims = tuple(reduced_dims)
        self.vty = reg_type(spec.value)
        self.ity = reg_type(spec.index)
        n = math.prod(self.reduced_dims)
        self.pty = ir.IntType(32 if n < (1 << 31) - 1 else 64)  # positions, and n for "none"
        self.none = ir.Constant(self.pty, n)
        with b.goto_entry_block():
            self.m = b.alloca(self.vty, name="argm")
            self.first = b.alloca(self.pty, name="argfirst")
            self.last = b.alloca(self.pty, name="arglast")
            self.least = b.alloca(self.ity, name="argindex")

    def _extremum(self, acc, x):
        b, spec = self.b, self.spec
        if spec.value.is_float:
            return self.em.target.float_max(b, acc, x, spec.is_min)
        op = "<" if spec.is_min else ">"
        better = b.icmp_signed(op, x, acc) if spec.value.is_signed else b.icmp_unsigned(op, x, acc)
        return b.select(better, x, acc)

    def start(self) -> None:
        """Reset M to the identity of max (min) at a new output."""
        if self.spec.value.is_float:
            ident = ir.Constant(self.vty, math.inf if self.spec.is_min else -math.inf)
        else:
            ident = _int_limit(self.spec.value, self.vty, largest=self.spec.is_min)
        self.b.store(ident, self.m)

    def step(self, index: Index) -> None:
        """Pass 1 at one position: M = max(M, x). x is frozen so InstCombine leaves the plain
        reduction LLVM vectorises (cpu_reduction's module docstring)."""
        x = freeze(self.b, self.hero.inputs[0](index))
        self.b.store(self._extremum(self.b.load(self.m), x), self.m)

    def _position(self, reduced: list) -> ir.Value:
        b = self.b
        pos = const_i64(0)
        for v, d in zip(reduced, self.reduced_dims):
            pos = b.add(b.mul(pos, const_i64(d)), v)
        return b.trunc(pos, self.pty) if self.pty.width < 64 else pos

    def finish(self, loops, index_at) -> list:
        """Pass 2 and the result: `loops(body)` runs body(reduced values) over the reduced
        positions (those of the kernel's main loop), `index_at(reduced values)` is the input
        Index there. Returns the hero's (value, index) registers."""
        b, spec, hero = self.b, self.spec, self.hero
        m = b.load(self.m)
        m_nan = b.fcmp_unordered("uno", m, m) if spec.value.is_float else None
        b.store(self.none, self.first)
        b.store(ir.Constant(self.pty, -1), self.last)
        index_none = _int_limit(spec.index, self.ity, largest=True)
        b.store(index_none, self.least)

        def body(reduced):
            idx = index_at(reduced)
            x = freeze(b, hero.inputs[0](idx))
            if spec.value.is_float:
                match = b.select(m_nan, b.fcmp_unordered("uno", x, x), b.fcmp_ordered("==", x, m))
            else:
                match = b.icmp_unsigned("==", x, m)
            pos = self._position(reduced)
            # Each candidate is frozen: min(acc, select(c, p, none)) would otherwise become a
            # conditional min, which the loop vectoriser does not take as a reduction.
            first = freeze(b, b.select(match, pos, self.none))
            last = freeze(b, b.select(match, pos, ir.Constant(self.pty, -1)))
            iv = freeze(b, b.select(match, hero.inputs[1](idx), index_none))
            acc = b.load(self.first)
            b.store(b.select(b.icmp_signed("<", first, acc), first, acc), self.first)
            acc = b.load(self.last)
            b.store(b.select(b.icmp_signed(">", last, acc), last, acc), self.last)
            acc = b.load(self.least)
            less = b.icmp_signed("<", iv, acc) if spec.index.is_signed else b.icmp_unsigned("<", iv, acc)
            b.store(b.select(less, iv, acc), self.least)

        loops(body)
        first, last, least = b.load(self.first), b.load(self.last), b.load(self.least)
        found = b.icmp_signed("<", first, self.none)
        # No element (an empty slice of a split row): the init value; read position 0 meanwhile.
        zero = ir.Constant(self.pty, 0)
        first = b.select(found, first, zero)
        last = b.select(found, last, zero)

        def at(pos):
            p = b.zext(pos, ir.IntType(64)) if self.pty.width < 64 else pos
            return index_at(delinearize(b, p, self.reduced_dims))

        if spec.value.is_float:
            value = hero.inputs[0](at(b.select(m_nan, first, last)))
            index = b.select(m_nan, hero.inputs[1](at(first)), least)
        else:
            value, index = hero.inputs[0](at(last)), least
        inits = hero.init_values(b)
        res = self.em.call_scalar(hero.comp, list(inits) + [value, index])
        return [b.select(found, r, i) for r, i in zip(res, inits)]
