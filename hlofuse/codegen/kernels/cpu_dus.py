"""In-place dynamic-update-slice kernels: a fusion rooted at dynamic-update-slice(s) that loops
over the update only (XLA's CanEmitFusedDynamicUpdateSliceInPlace and its emitter).

    planned = plan_dus(comp, name)    # (kernels, inplace) or None
    emit_dus_kernel(skel, plan)       # CUSTOM_EMITTERS["dus"]

The output buffer of each dynamic-update-slice already holds its operand when the kernel runs
(`Step.inplace`: the executor copies the operand there, or passes the operand's own buffer
when it dies at this step), so the kernel computes the update with the element generators and
stores it at the clamped start indices: a `lax.scan` writing one row per iteration then costs
one row, not the whole stacked array. Iteration is over the update's elements (rows mode or
flat, as loop kernels), split across threads by units.

Only fusions that are safe to run in place are planned here; the others fall back to a loop
kernel over the whole result (the element generator of dynamic-update-slice, a select). In
place is safe when each updated operand is a parameter of the fusion that nothing else in the
fusion reads, except a slice or dynamic-slice of exactly the updated window on an
element-preserving path into the update (each element is read before the same iteration
writes it), and no two roots update the same parameter.
"""
from __future__ import annotations

from ...emitters.elemental import ElementalEmitter
from ...emitters.elemental_data import dus_starts
from ...emitters.ir_helpers import linearize, store_element
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.literals import constant_int
from .args import output_leaves, param_leaf_slots
from .cpu_loop import emit_loop, loop_shape


def _same_order(inst: HloInstruction) -> bool:
    """Element i of the result is computed from element i of each array operand."""
    if inst.info.elementwise:
        return True
    if inst.opcode in ("reshape", "bitcast", "convert", "copy") and inst.shape.is_array:
        return [d for d in inst.operands[0].shape.dims if d != 1] == [d for d in inst.shape.dims if d != 1]
    return False


def _reads_window(reader: HloInstruction, dus: HloInstruction) -> bool:
    """Whether `reader` (a user of the updated parameter) reads exactly the window `dus` writes."""
    if tuple(reader.shape.dims) != tuple(dus.operands[1].shape.dims):
        return False
    starts = dus.operands[2:]
    if reader.opcode == "slice":
        return all(constant_int(s) == lo and stride == 1
                   for s, (lo, _hi, stride) in zip(starts, reader.attrs["slice"]))
    if reader.opcode == "dynamic-slice":
        for s, r in zip(starts, reader.operands[1:]):
            a, b = constant_int(s), constant_int(r)
            if a != b or (a is None and s is not r):
                return False
        return True
    return False


def _reaches_update_in_order(reader: HloInstruction, dus: HloInstruction) -> bool:
    """Every path from `reader` leads into `dus`'s update (operand 1) through element-preserving ops."""
    stack, seen = [(u, reader) for u in reader.users], set()
    while stack:
        inst, came_from = stack.pop()
        if inst is dus:
            if any(op is came_from for i, op in enumerate(dus.operands) if i != 1):
                return False
            continue
        if inst in seen:
            continue
        seen.add(inst)
        if not _same_order(inst):
            return False
        stack.extend((u, inst) for u in inst.users)
    return True


def in_place_safe(dus: HloInstruction, param: HloInstruction) -> bool:
    """Whether `dus` may write into `param`'s buffer (see the module docstring)."""
    for user in param.users:
        if user is dus:
            if sum(op is param for op in dus.operands) != 1:
                return False
        elif not (_reads_window(user, dus) and _reaches_update_in_order(user, dus)):
            return False
    return True


def dus_roots(comp: HloComputation) -> list[tuple[int, HloInstruction, HloInstruction]] | None:
    """(output leaf, dynamic-update-slice, updated parameter) of every root of `comp` when each
    root is a dynamic-update-slice that may run in place, else None."""
    leaves = output_leaves(comp)
    found, params = [], set()
    for k, leaf in enumerate(leaves):
        dus = leaf.inst
        if dus.opcode != "dynamic-update-slice" or leaf.path:
            return None
        param = dus.operands[0]
        if param.opcode != "parameter" or param in params or not in_place_safe(dus, param):
            return None
        params.add(param)
        found.append((k, dus, param))
    return found or None


def plan_dus(comp: HloComputation, name: str) -> tuple[list, dict[int, int]] | None:
    """One in-place kernel per dynamic-update-slice root of `comp` and the Step.inplace map
    (output leaf -> operand leaf), or None when `comp` cannot run in place."""
    from ..planning import KernelPlan  # planning imports the kernel modules

    roots = dus_roots(comp)
    if roots is None:
        return None
    slots = param_leaf_slots(comp)
    n_in = sum(len(s) for s in slots.values())
    n_out = len(output_leaves(comp))
    kernels, inplace = [], {}
    for k, dus, param in roots:
        ls = loop_shape(dus.operands[1].shape.dims)
        kernels.append(KernelPlan(comp, [k], ls.units, ls.unit_elements, None, name=f"{name}_dus{k}",
                                  inputs=[("in", i) for i in range(n_in)],
                                  results=[("out", q) for q in range(n_out)], custom="dus"))
        inplace[k] = slots[param.parameter_number][0][0]
    return kernels, inplace


def emit_dus_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with in-place kernel `plan` (custom="dus"): for each
    element of the update, store it at the clamped window position of the output."""
    leaf = output_leaves(plan.comp)[plan.outputs[0]]
    dus = leaf.inst
    b = skel.builder
    em = ElementalEmitter(b, skel.target, skel.param_gen)
    update = em.gen(dus.operands[1])
    out = skel.output_ptr(plan.outputs[0])
    out_dims = tuple(dus.shape.dims)

    def body(index) -> None:
        starts = dus_starts(em, dus)
        multi = [b.add(i, s, flags=["nsw"]) for i, s in zip(index.multi, starts)]
        ptr = b.gep(out, [linearize(b, multi, out_dims)], inbounds=True)
        store_element(b, update(index), ptr, leaf.shape.dtype)

    emit_loop(skel, loop_shape(dus.operands[1].shape.dims), body)
    skel.finish()
