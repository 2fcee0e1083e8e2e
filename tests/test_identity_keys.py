"""Maps keyed by IR objects themselves (not by their id()): the objects hash by identity, a
key keeps its object alive (so no freed object's id can alias a new one), and index keys of
the elemental value cache are equal exactly when they name the same LLVM values."""
from __future__ import annotations

import gc

import pytest
from llvmlite import ir

import hlofuse
from hlofuse.codegen.kernels.reduction_groups import ReduceHero
from hlofuse.codegen.schedule import ComputationPlan
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.emitters.elemental import ElementalEmitter, Reading
from hlofuse.emitters.ir_helpers import I64, Index, const_i64
from hlofuse.hlo.ir import HloComputation, HloInstruction, HloModule
from hlofuse.passes.fusion.placement import LoggedFusion

NEGATE = """
HloModule m
ENTRY f {
  a = f32[2,3] parameter(0)
  b = f32[2,3] parameter(1)
  ROOT n = f32[2,3] negate(a)
}
"""

# ---- the key classes hash by identity ---------------------------------------------------------


@pytest.mark.parametrize("cls", [HloInstruction, HloComputation, HloModule, ComputationPlan, ReduceHero,
                                 Reading, LoggedFusion, ir.Block, ir.Instruction, ir.Argument])
def test_key_classes_hash_by_identity(cls):
    # Every map that used id(x) now uses x: a value-based __eq__/__hash__ on any of these
    # would merge distinct objects (or, with __eq__ alone, make them unhashable).
    assert cls.__eq__ is object.__eq__
    assert cls.__hash__ is object.__hash__


# ---- the computation's parameter cache -----------------------------------------------------------


def _replace_with_emptied_list(comp: HloComputation, new: list[HloInstruction]) -> None:
    comp.instructions = []  # the old list is freed; CPython hands its memory to the next list
    comp.instructions = [*new]  # (made after that, so it may sit where the old list was)


def _replace_directly(comp: HloComputation, new: list[HloInstruction]) -> None:
    comp.instructions = new


@pytest.mark.parametrize("replace", [_replace_with_emptied_list, _replace_directly])
@pytest.mark.parametrize("number", [0, 1])
def test_parameters_follow_a_replaced_instruction_list(replace, number):
    # Regression: the cache compared the list's id(), which a new list of the same length
    # can reuse once the old one is freed, and then returned the old parameters.
    comp = hlofuse.parse_hlo(NEGATE).entry
    assert [p.name for p in comp.parameters] == ["a", "b"]
    old = {p.parameter_number: p for p in comp.parameters}
    fresh = HloInstruction("parameter", old[number].shape, name="fresh")
    fresh.parameter_number = number
    new = [fresh if i is old[number] else i for i in comp.instructions]
    del old
    gc.collect()
    replace(comp, new)
    want = ["fresh", "b"] if number == 0 else ["a", "fresh"]
    assert [p.name for p in comp.parameters] == want
    assert comp.parameter(number) is fresh


# ---- index keys of the elemental value cache ----------------------------------------------------


def _emitter():
    module = ir.Module(name="t")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64]), name="f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loads = []

    def param_gen(p):
        def gen(idx: Index):
            loads.append(idx)
            return b.add(idx.linear, ir.Constant(I64, p.parameter_number))  # a new value per read
        return gen

    return ElementalEmitter(b, CpuTarget(), param_gen), b, fn, loads


@pytest.mark.parametrize("multi", [(0, 0), (1, 2), (0, 2)])
def test_equal_constant_indices_share_a_cache_entry(multi):
    em, b, _, loads = _emitter()
    n = hlofuse.parse_hlo(NEGATE).entry.root
    first = Index(b, (2, 3), multi=[const_i64(v) for v in multi])
    again = Index(b, (2, 3), multi=[const_i64(v) for v in multi])  # distinct objects, same constants
    assert first.key() == again.key() and hash(first.key()) == hash(again.key())
    v1 = em.value(n, first)
    v2 = em.value(n, again)
    assert v2 is v1 and len(loads) == 1
    other = Index(b, (2, 3), multi=[const_i64(2 - multi[0] // 2), const_i64(multi[1] + 1)])
    assert other.key() != first.key()
    assert em.value(n, other) is not v1 and len(loads) == 2


def test_indices_of_distinct_instructions_have_distinct_keys():
    em, b, fn, loads = _emitter()
    n = hlofuse.parse_hlo(NEGATE).entry.root
    x, y = fn.args
    # Two instructions with the same operands are still two values (their text differs by name
    # only): each index reads its own element.
    i1 = Index(b, (2, 3), multi=[b.add(x, y), const_i64(0)])
    i2 = Index(b, (2, 3), multi=[b.add(x, y), const_i64(0)])
    assert i1.key() != i2.key()
    assert em.value(n, i1) is not em.value(n, i2) and len(loads) == 2
    # The same instruction read again (in another Index object) is a cache hit.
    assert em.value(n, Index(b, (2, 3), multi=[i1.multi[0], const_i64(0)])) is em.value(n, i1)
    assert len(loads) == 2


def test_cache_entries_are_per_block():
    # A value is reused only in the block that computed it (so it dominates the use).
    em, b, fn, loads = _emitter()
    n = hlofuse.parse_hlo(NEGATE).entry.root
    idx = Index(b, (2, 3), multi=[const_i64(1), const_i64(1)])
    v1 = em.value(n, idx)
    b.position_at_end(fn.append_basic_block("next"))
    v2 = em.value(n, Index(b, (2, 3), multi=[const_i64(1), const_i64(1)]))
    assert v2 is not v1 and len(loads) == 2
