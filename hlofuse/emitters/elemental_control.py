"""Element generators for control flow inside inlined scalar computations.

A map's function, a reducer and a conditional's branches are scalar computations that the
element generators inline per element (`ElementalEmitter.call_scalar`). A `call` or `fusion`
in such a computation is its computation inlined in turn. A `conditional` or a
`while` in such a computation works on rank-0 values (and tuples of them), so it is emitted
as LLVM control flow around the inlined computations, as XLA's elemental emitter does for
nested computations: a conditional branches to the taken branch and merges the results with
phis; a while keeps its state in stack slots (promoted to registers by LLVM) and loops over
its condition and body. Neither is fused at array level (the registry keeps both unfused), so
other shapes only reach here from a malformed fusion and are refused by name.
"""
from __future__ import annotations

from llvmlite import ir

from ..hlo.errors import UnsupportedError
from ..hlo.opcodes import register_elemental
from .elemental import ElementalEmitter, materialize
from .ir_helpers import Index


# The control ops whose element generators inline them on rank-0 values only.
SCALAR_ONLY = frozenset({"call", "fusion", "conditional", "while"})


def emitted_inline(inst) -> bool:
    """Whether the element generators can emit `inst` inside an inlined scalar computation:
    any op with a generator, except a control op (SCALAR_ONLY) over values of rank above 0
    (a while loop over an f32[3] state in a sort comparator, as XLA's CPU edge-case tests
    have: such a computation is left to its library rule, codegen/kernels/cpu_sort.py)."""
    if inst.info.elemental is None:
        return False
    return inst.opcode not in SCALAR_ONLY or _on_scalars(inst)


def _on_scalars(inst) -> bool:
    """Whether every operand and result leaf of `inst` is rank 0."""
    shapes = [inst.shape] + [op.shape for op in inst.operands]
    return all(leaf.rank == 0 for s in shapes for leaf in s.leaves())


def _check_scalar(inst) -> None:
    """UnsupportedError unless every operand and result leaf of `inst` is rank 0."""
    if not _on_scalars(inst):
        raise UnsupportedError(f"cannot emit {inst.opcode} instruction {inst.name} element by element: "
                               f"only a {inst.opcode} on rank-0 values (inside a map function, reducer "
                               f"or branch) is emitted inline")


def _flatten(value) -> list:
    """The LLVM values of a (nested tuple) register value, depth-first."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _flatten(v)]
    return [value]


def _unflatten(shape, leaves: list):
    """The inverse of `_flatten` for a value of `shape` (consumes `leaves` from the front)."""
    if shape.is_tuple:
        return tuple(_unflatten(e, leaves) for e in shape.elements)
    return leaves.pop(0)


def branch_computations(inst) -> list:
    """The branches of a conditional in selector order (pred form: true, then false)."""
    if "branch_computations" in inst.attrs:
        return list(inst.attrs["branch_computations"])
    return [inst.attrs["true_computation"], inst.attrs["false_computation"]]


@register_elemental("conditional")
def _conditional(em: ElementalEmitter, inst):
    """Branch on the selector (a pred picks the first branch when true; an out-of-range index
    picks the last, as XLA defines), inline the taken branch, merge the results with phis."""
    _check_scalar(inst)
    selector = em.operand(inst, 0)
    args = [em.gen(op) for op in inst.operands[1:]]
    branches = branch_computations(inst)
    b = em.b

    def gen(_idx: Index):
        scalar = Index(b, (), multi=())
        key = selector(scalar)
        values = [materialize(g(scalar)) for g in args]
        blocks = [b.append_basic_block(f"{inst.name}.branch{k}") for k in range(len(branches))]
        merge = b.append_basic_block(f"{inst.name}.merge")
        if inst.operands[0].shape.dtype.is_pred:
            b.cbranch(key, blocks[0], blocks[1])
        else:
            switch = b.switch(key, blocks[-1])
            for k in range(len(branches) - 1):
                switch.add_case(ir.Constant(key.type, k), blocks[k])
        incoming = []
        for k, comp in enumerate(branches):
            b.position_at_end(blocks[k])
            leaves = _flatten(em.call_scalar(comp, [values[k]]))
            incoming.append((leaves, b.block))  # the branch may have ended in a block of its own
            b.branch(merge)
        b.position_at_end(merge)
        phis = []
        for i, first in enumerate(incoming[0][0]):
            phi = b.phi(first.type, name=f"{inst.name}.{i}")
            for leaves, block in incoming:
                phi.add_incoming(leaves[i], block)
            phis.append(phi)
        return _unflatten(inst.shape, phis)

    return gen


@register_elemental("call", "fusion")
def _inlined_call(em: ElementalEmitter, inst):
    """A call or a fusion inside an inlined scalar computation (XLA's multioutput_fusion_test
    fuses a map function's multiply and compare into a tuple-shaped kLoop fusion) is the called
    computation inlined on its operands' values, as XLA's elemental emitter does. Array-level
    calls are inlined by the call-inliner pass and fusions become kernels, so only rank-0 values
    reach here."""
    _check_scalar(inst)
    args = [em.gen(op) for op in inst.operands]
    comp = inst.attrs["to_apply" if inst.opcode == "call" else "calls"]
    b = em.b

    def gen(_idx: Index):
        scalar = Index(b, (), multi=())
        return em.call_scalar(comp, [materialize(g(scalar)) for g in args])

    return gen


@register_elemental("while")
def _while(em: ElementalEmitter, inst):
    """Loop: the state lives in stack slots (entry block); the header inlines the condition,
    the body inlines the body computation and stores the new state."""
    _check_scalar(inst)
    init = em.operand(inst, 0)
    cond, body = inst.attrs["condition"], inst.attrs["body"]
    b = em.b

    def gen(_idx: Index):
        start = _flatten(materialize(init(Index(b, (), multi=()))))
        with b.goto_entry_block():
            slots = [b.alloca(v.type, name=f"{inst.name}.state") for v in start]
        for slot, v in zip(slots, start):
            b.store(v, slot)

        def state():
            return _unflatten(inst.shape, [b.load(s) for s in slots])

        header = b.append_basic_block(f"{inst.name}.cond")
        loop = b.append_basic_block(f"{inst.name}.body")
        done = b.append_basic_block(f"{inst.name}.done")
        b.branch(header)
        b.position_at_end(header)
        b.cbranch(em.call_scalar(cond, [state()]), loop, done)
        b.position_at_end(loop)
        for slot, v in zip(slots, _flatten(em.call_scalar(body, [state()]))):
            b.store(v, slot)
        b.branch(header)
        b.position_at_end(done)
        return state()

    return gen
