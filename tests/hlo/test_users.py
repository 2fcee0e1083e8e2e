"""Users as an ordered set (hlo/users.py): the order a list gave, checked against a list kept
beside it through random operand edits, and the list API the passes read it by."""
import copy
import pickle
import random

import pytest

from hlofuse.hlo.ir import HloComputation, HloInstruction
from hlofuse.hlo.shapes import array
from hlofuse.hlo.users import Users
from hlofuse.hlo.verifier import _check_graph


def test_random_edits_keep_the_order_a_list_kept():
    rng = random.Random(7)
    f32 = array("f32", (2,))
    comp = HloComputation("c")
    params = [comp.add_instruction(HloInstruction("parameter", f32, name=f"p{k}")) for k in range(4)]
    for k, p in enumerate(params):
        p.parameter_number = k
    insts = list(params)
    model: dict[int, list[HloInstruction]] = {id(p): [] for p in params}  # the list semantics

    def model_add(op: HloInstruction, user: HloInstruction) -> None:
        if user not in model[id(op)]:
            model[id(op)].append(user)

    def model_drop(op: HloInstruction, user: HloInstruction) -> None:
        if not any(o is op for o in user.operands) and user in model[id(op)]:
            model[id(op)].remove(user)

    for step in range(400):
        kind = rng.random()
        if kind < 0.5 or len(insts) < 8:
            ops = [rng.choice(insts) for _ in range(rng.randint(1, 3))]
            inst = comp.add_instruction(HloInstruction("add" if len(ops) == 2 else "tuple", f32, ops, name=f"i{step}"))
            model[id(inst)] = []
            for op in ops:
                model_add(op, inst)
            insts.append(inst)
        else:
            user = rng.choice(insts[4:])
            if not user.operands:
                continue
            index = rng.randrange(len(user.operands))
            old = user.operands[index]
            # only instructions before the user: the graph stays acyclic
            new = rng.choice(insts[: insts.index(user)])
            user.replace_operand(index, new)
            if old is not new:
                model_drop(old, user)
                model_add(new, user)
        for i in insts:
            assert list(i.users) == model[id(i)], f"step {step}: users of {i.name}"
    _check_graph(comp, set(comp.instructions))  # users and operands agree


def test_replace_all_uses_appends_in_the_users_order():
    f32 = array("f32", (2,))
    x = HloInstruction("parameter", f32, name="x")
    y = HloInstruction("parameter", f32, name="y")
    a = HloInstruction("negate", f32, [y], name="a")
    b = HloInstruction("add", f32, [x, x], name="b")
    c = HloInstruction("negate", f32, [x], name="c")
    d = HloInstruction("negate", f32, [x], name="d")
    assert x.users == [b, c, d] and y.users == [a]
    c.replace_operand(0, y)  # from the middle: the rest keep their order
    assert x.users == [b, d] and y.users == [a, c]
    x.replace_all_uses_with(y)
    assert x.users == [] and y.users == [a, c, b, d] and b.operands == [y, y]
    c.replace_operand(0, x)
    c.replace_operand(0, y)  # removed and added again: at the end, as a list's append
    assert y.users == [a, b, d, c]


def test_list_api():
    f32 = array("f32", (2,))
    x = HloInstruction("parameter", f32, name="x")
    a, b, c = (HloInstruction("negate", f32, [x], name=n) for n in "abc")
    u = x.users
    assert isinstance(u, Users) and len(u) == 3 and u and not Users()
    assert u[0] is a and u[-1] is c and u[1] is b and u[-2] is b and u[1:] == [b, c]
    assert a in u and x not in u
    assert u == [a, b, c] and u != [a, c, b] and u != [a, b] and not (u != [a, b, c])
    assert u == Users.of([a, b, c]) and u != Users.of([c, b, a])
    assert u + [x] == [a, b, c, x] and [x] + u == [x, a, b, c]
    assert list(reversed(u)) == [c, b, a]
    u.append(a)  # already a user: keeps its place
    assert u == [a, b, c]
    u.remove(b)
    assert u == [a, c]
    with pytest.raises(ValueError):
        u.remove(b)
    with pytest.raises(IndexError):
        Users()[0]
    with pytest.raises(IndexError):
        Users()[-1]
    with pytest.raises(IndexError):
        u[5]
    with pytest.raises(TypeError):
        hash(u)
    assert repr(Users.of([1, 2])) == "Users([1, 2])"


def test_pickle_and_copy_keep_the_order():
    f32 = array("f32", (2,))
    x = HloInstruction("parameter", f32, name="x")
    users = [HloInstruction("negate", f32, [x], name=f"n{k}") for k in range(50)]
    for k in range(0, 50, 3):
        users[k].replace_operand(0, users[k - 1] if k else x)
    expect = [u.name for u in x.users]
    for twin in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
        assert isinstance(twin.users, Users)
        assert [u.name for u in twin.users] == expect
        assert all(u.operands[0] is twin for u in twin.users)
