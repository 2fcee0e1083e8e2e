"""The IR's fast paths (hlo/ir.py, hlo/shapes.py) against the plain answers they replace:
identity look-ups through list operations, the parameter look-up's in-order shortcut, the
written-out post order, and the element counts kept on frozen shapes."""
import dataclasses
import pickle
import random

from hlofuse.hlo.ir import HloComputation, HloInstruction, HloModule
from hlofuse.hlo.shapes import array
from hlofuse.hlo.walk import post_order

F32 = array("f32", (2,))


def _instruction_classes() -> list[type]:
    out, todo = [], [HloInstruction]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_instructions_compare_by_identity():
    # `op in inst.operands`, `.index(op)` and `.count(op)` stand for loops comparing with `is`:
    # they are the same only while no instruction class defines its own equality
    for cls in _instruction_classes():
        assert cls.__eq__ is object.__eq__, cls
        assert cls.__hash__ is object.__hash__, cls
    a = HloInstruction("parameter", F32, name="same")
    b = HloInstruction("parameter", F32, name="same")  # equal in every field
    ops = [a, a]
    assert b not in ops and ops.count(a) == 2 and ops.index(a) == 0
    user = HloInstruction("add", F32, [a, b])
    user.replace_operand(1, a)  # now add(a, a): b loses its user, a keeps one entry
    assert list(a.users) == [user] and not b.users
    user.replace_operand(0, b)
    assert list(a.users) == [user] and list(b.users) == [user]


def test_parameter_lookup_finds_out_of_order_numbers():
    comp = HloComputation("c")
    params = [comp.add_instruction(HloInstruction("parameter", F32, name=f"p{k}")) for k in range(5)]
    for p, number in zip(params, (3, 0, 4, 1, 2)):  # listed in another order than numbered
        p.parameter_number = number
    for p in params:
        assert comp.parameter(p.parameter_number) is p
    # numbered in list order, then one removed and the rest renumbered (what fusion does)
    for k, p in enumerate(params):
        p.parameter_number = k
    comp.remove_instruction(params[1])
    for p in params[2:]:
        p.parameter_number -= 1
    assert [comp.parameter(k) for k in range(4)] == [params[0], *params[2:]]
    # a renumbering that leaves the list out of order again is still found
    params[0].parameter_number, params[4].parameter_number = 3, 0
    assert comp.parameter(0) is params[4] and comp.parameter(3) is params[0]


def _reference_post_order(comp: HloComputation) -> list[HloInstruction]:
    """The post order as it was defined before it was written out in HloComputation."""
    return post_order(comp.instructions,
                      lambda i: [o for o in i.operands + i.control_predecessors if o.parent is comp])


def test_post_order_matches_the_generic_walk():
    rng = random.Random(3)
    for trial in range(60):
        module = HloModule("m")
        comp, other = HloComputation("c"), HloComputation("o")
        module.add_computation(comp)
        module.add_computation(other)
        outside = other.add_instruction(HloInstruction("parameter", F32, name="outside"))
        outside.parameter_number = 0
        insts: list[HloInstruction] = []
        for k in range(rng.randint(1, 40)):
            if not insts or rng.random() < 0.2:
                inst = HloInstruction("parameter", F32, name=f"p{k}")
                inst.parameter_number = k
            else:
                ops = [rng.choice(insts) for _ in range(rng.randint(1, 3))]
                if rng.random() < 0.1:
                    ops.append(outside)  # an operand in another computation is not walked
                inst = HloInstruction("add", F32, ops, name=f"i{k}")
                if rng.random() < 0.2:
                    inst.control_predecessors = [rng.choice(insts)]
            insts.append(inst)
        order = list(insts)
        rng.shuffle(order)  # the list out of order, as surgery leaves it
        for inst in order:
            comp.add_instruction(inst)
        comp.root = insts[-1]
        assert comp.post_order() == _reference_post_order(comp), trial
        comp.sort_instructions()
        assert comp.post_order() == comp.instructions  # a sorted list is its own post order


def test_shapes_keep_their_counts_without_changing_equality():
    a, b = array("f32", (3, 4)), array("f32", (3, 4))
    assert a.element_count() == 12 and a.byte_size() == 48  # kept on `a` now, not on `b`
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert {a: 1}[b] == 1
    c = dataclasses.replace(a, dims=(5,))
    assert c.element_count() == 5 and c.byte_size() == 20 and c != a
    d = pickle.loads(pickle.dumps(a))
    assert d == a and d.element_count() == 12
    assert array("s8", (0, 7)).element_count() == 0 and array("pred", (6,)).byte_size() == 6
