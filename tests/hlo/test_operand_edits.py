"""Operand edits keep users in step: each user listed once, exactly while it reads the
instruction (hlo/ir.py's invariant), through repeated operands and replacements by itself."""
from __future__ import annotations

from hlofuse.hlo import shapes
from hlofuse.hlo.ir import HloComputation, HloInstruction, HloModule


def _comp():
    m = HloModule("m")
    comp = HloComputation("main")
    m.add_computation(comp, entry=True)
    f32 = shapes.array("f32", (2,))
    x = comp.add_parameter(f32, "x")
    y = comp.add_parameter(f32, "y")
    return comp, x, y, f32


def test_a_repeated_operand_replaced_once_keeps_its_user_then_loses_it():
    comp, x, y, f32 = _comp()
    a = comp.add_instruction(HloInstruction("add", f32, [x, x], name="a"))
    assert x.users == [a] and y.users == []
    a.replace_operand(0, y)
    assert a.operands == [y, x] and x.users == [a] and y.users == [a]
    a.replace_operand(1, y)
    assert a.operands == [y, y] and x.users == [] and y.users == [a]


def test_replacing_an_operand_by_itself_or_by_another_operand_lists_the_user_once():
    comp, x, y, f32 = _comp()
    a = comp.add_instruction(HloInstruction("add", f32, [x, y], name="a"))
    a.replace_operand(0, x)
    assert x.users == [a] and y.users == [a]
    a.replace_operand(0, y)
    assert a.operands == [y, y] and x.users == [] and y.users == [a]
    a.replace_operand_with(y, x)
    assert a.operands == [x, x] and x.users == [a] and y.users == []


def test_detaching_repeated_operands_and_removing_keeps_the_other_users():
    comp, x, y, f32 = _comp()
    a = comp.add_instruction(HloInstruction("add", f32, [x, x], name="a"))
    b = comp.add_instruction(HloInstruction("multiply", f32, [x, y], name="b"))
    c = comp.add_instruction(HloInstruction("subtract", f32, [b, x], name="c"))
    comp.root = c
    assert x.users == [a, b, c]
    comp.remove_instruction(a)
    assert x.users == [b, c] and a.operands == []
    b.replace_all_uses_with(y)
    assert c.operands == [y, x] and y.users == [b, c] and b.users == []
    comp.remove_instruction(b)
    assert x.users == [c] and y.users == [c]
