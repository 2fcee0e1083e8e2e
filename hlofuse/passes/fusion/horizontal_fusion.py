"""Horizontal loop fusion (XLA's GpuHorizontalLoopFusion): independent small loop kernels
that feed the same consumer become one kernel launch.

Candidates are the operands of one consumer (typically the root tuple) that are kLoop fusions
or elementwise instructions, used only by that consumer (or the root) (and, for the sliced form,
with row-major layouts and no entry parameter shared with another candidate). As in XLA, each
consumer is tried twice:

1. kLoop: candidates with the same output shape (<= 8192*8192 elements, <= 128 instructions)
   become one kLoop fusion whose root is a tuple of their outputs: one loop computes them all.
2. sliced input fusion: the remaining small candidates (<= 128*2048 elements, <= 30
   instructions) of any shape: each output is flattened, the flattened outputs are concatenated
   and sliced apart again; the fusion is kInput with a tuple of slices as root, and outside it a
   reshape restores each shape (XLA uses a bitcast there; a reshape means the same here).

Candidates are sorted by output type, output count, instruction count and size and fused in
spans of equal output type and count (at most 32 outputs, at most ~4000 bytes of kernel
parameters).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...hlo.ir import HloComputation, HloInstruction, HloModule
from ...hlo.shapes import Layout, TupleShape
from .context import FusionContext
from .decisions import Decision, FusionLog
from .fusibility import fusion_outputs, is_loop_fusion
from .fusion_utils import (
    create_fusion, dedupe_fused_computation, fused_instruction_count, merge_siblings, sort_computations,
)
from .kernel_pass import KernelComputationPass

refuse = Decision.refuse
_OK = Decision.allow()


def _non_gte_ancestor(inst: HloInstruction) -> HloInstruction:
    while inst.opcode == "get-tuple-element":
        inst = inst.operands[0]
    return inst


def _output_type(inst: HloInstruction) -> str | None:
    """The one element type of `inst`'s outputs, or None when they have several. A tuple-shaped
    output (a variadic reduce's) counts as one more type, as XLA's TUPLE element type does: its
    outputs cannot be concatenated, and the sort and shape checks below read array outputs."""
    outs = fusion_outputs(inst)
    if not all(o.shape.is_array for o in outs):
        return None
    types = {o.shape.dtype.name for o in outs}
    return types.pop() if len(types) == 1 else None


def is_candidate(inst: HloInstruction) -> bool:
    """XLA's IsFusibleCandidate: elementwise with operands, or a kLoop fusion of one output type."""
    # (control successors from the computation's control holders, not a walk of every
    # instruction per candidate, which made the pass quadratic)
    if inst.control_predecessors or inst.parent.control_successors(inst):
        return False
    if inst.opcode != "fusion" and inst.info.elementwise and inst.operands and inst.info.fusion == "yes":
        return True
    return is_loop_fusion(inst) and _output_type(inst) is not None


def _only_user_is(inst: HloInstruction, consumer: HloInstruction) -> bool:
    """XLA's IsConsumerTheOnlyNonRootUser (get-tuple-element users looked through)."""
    for u in inst.users:
        if u.opcode == "get-tuple-element":
            if not _only_user_is(u, consumer):
                return False
        elif u is not consumer and not u.is_root():
            return False
    return True


def _row_major(inst: HloInstruction) -> bool:
    insts = inst.fused_computation.instructions if inst.opcode == "fusion" else [inst]
    for i in insts:
        for s in i.shape.leaves():
            if s.layout is not None and s.layout.minor_to_major != Layout.default(s.rank).minor_to_major:
                return False
    return True


@dataclass(frozen=True)
class HorizontalLoopFusion(KernelComputationPass):
    """Fuse independent small loop kernels into one launch (GPU).

    Work: near-linear in the entry computation (tests/passes/test_fusion_complexity.py)."""

    name: ClassVar[str] = "horizontal-fusion"

    def run(self, module: HloModule) -> bool:
        """Fuse sibling loop kernels of the entry computation (only); True if any were fused."""
        if module.entry is None:
            return False
        changed = self._run_on(module.entry, self.context(module.entry, self.log_of(module)))
        if changed:
            module.remove_unreachable_computations()
        return changed

    def _profitable(self, inst: HloInstruction, sliced: bool) -> Decision:
        p = self.params
        max_elems = p.horizontal_max_elements if sliced else p.horizontal_loop_max_elements
        max_insts = p.horizontal_max_instructions if sliced else p.horizontal_loop_max_instructions
        outs = fusion_outputs(inst)
        elems = outs[0].shape.element_count() if outs[0].shape.is_array else 0
        mode = "sliced input fusion" if sliced else "horizontal loop fusion"
        if elems > max_elems:
            return refuse("not-launch-bound", f"{inst.name} has {elems} > {max_elems} elements; its kernel is not "
                                              f"launch-bound ({mode})")
        n = fused_instruction_count(inst)
        if n > max_insts:
            return refuse("not-launch-bound", f"{inst.name} has {n} > {max_insts} instructions; its kernel is "
                                              f"not launch-bound ({mode})")
        return _OK

    def candidates(self, consumer: HloInstruction, sliced: bool, log: FusionLog | None) -> list[HloInstruction]:
        """The fusible operands of `consumer`, filtered and sorted as XLA does."""
        seen: list[HloInstruction] = []
        for op in consumer.operands:
            pred = _non_gte_ancestor(op)
            if is_candidate(pred) and not any(pred is s for s in seen):
                seen.append(pred)
        out: list[HloInstruction] = []
        for inst in seen:
            d = _OK
            if not _only_user_is(inst, consumer):
                others = [u.name for u in inst.users if u is not consumer]
                d = refuse("cycle", f"would create a cycle: {inst.name} also feeds {', '.join(others[:3])}"
                                    f"{', ...' if len(others) > 3 else ''}, not only {consumer.name}, so it is "
                                    f"not fused horizontally with {consumer.name}'s other operands")
            if d:
                d = self._profitable(inst, sliced)
            # current XLA dropped its row-major requirement (FuseNonDefaultLayouts); hlofuse keeps
            # it for the sliced form, whose flattening concatenates outputs in row-major order
            if d and sliced and not _row_major(inst):
                d = refuse("layout", f"{inst.name} has a non-row-major layout")
            # Rule 9 of issue 16 (XLA's AnyOpndIsParamSharedAmongFusions, sliced input fusion only):
            # the concatenate of a sliced input fusion keeps its outputs from aliasing its inputs,
            # so there a shared parameter is refused; one kLoop tuple of same-shaped outputs may share.
            if d and sliced:
                for op in inst.operands:
                    if op.opcode == "parameter" and any(u is not inst and any(u is s for s in seen) for u in op.users):
                        other = next(u for u in op.users if u is not inst and any(u is s for s in seen))
                        d = refuse("shared-parameter", f"{inst.name} shares parameter {op.name} with {other.name}; "
                                                       f"a sliced input fusion (concatenated outputs) may not share "
                                                       f"inputs")
                        break
            if d:
                out.append(inst)
            elif log is not None and len(seen) > 1:
                log.refused(self.name, inst.name, consumer.name, d)
        out.sort(key=lambda i: (_output_type(i), len(fusion_outputs(i)), fused_instruction_count(i),
                                fusion_outputs(i)[0].shape.element_count()))
        return out

    def spans(self, cands: list[HloInstruction], sliced: bool) -> list[list[HloInstruction]]:
        """Runs of equal output type and count (and, for kLoop, equal output shape)."""
        p = self.params
        result: list[list[HloInstruction]] = []
        pos = 0
        while pos < len(cands):
            left = cands[pos]
            limit = p.horizontal_max_batch if sliced or left.opcode == "fusion" else 2 * p.horizontal_max_batch
            span: list[HloInstruction] = []
            outputs = io = 0
            for cur in cands[pos:]:
                if _output_type(cur) != _output_type(left) or len(fusion_outputs(cur)) != len(fusion_outputs(left)):
                    break
                if not sliced and fusion_outputs(cur)[0].shape.dims != fusion_outputs(left)[0].shape.dims:
                    break
                outputs += len(fusion_outputs(cur))
                if outputs >= limit:
                    break
                io += len(cur.operands) + len(fusion_outputs(cur))
                if io * 8 >= p.horizontal_max_param_bytes:
                    break
                span.append(cur)
            span = span or [left]
            result.append(span)
            pos += len(span)
        return result

    def _run_on(self, comp: HloComputation, ctx: FusionContext) -> bool:
        log = ctx.log
        changed = False
        worklist = comp.post_order()
        while worklist:
            consumer = worklist.pop()
            if consumer.parent is not comp or len(consumer.operands) < 2:
                continue
            for sliced in (False, True):
                for span in self.spans(self.candidates(consumer, sliced, log if sliced else None), sliced):
                    if len(span) < 2:
                        continue
                    worklist.append(self._fuse(span, sliced, log))
                    changed = True
        if changed:
            sort_computations(comp)
        return changed

    def _fuse(self, span: list[HloInstruction], sliced: bool, log: FusionLog) -> HloInstruction:
        names = [i.name for i in span]
        base = span[0] if span[0].opcode == "fusion" else create_fusion(span[0], "kLoop")
        for other in span[1:]:
            merge_siblings(base, other)
        module = base.parent.parent
        fc = base.fused_computation
        module.release_name(fc.name)
        fc.name = module.unique_name("horizontally_fused_computation")
        if sliced:
            _concatenate_outputs(base)
            base.attrs["kind"] = "kInput"
        else:
            base.attrs["kind"] = "kLoop"
        mode = "sliced input fusion" if sliced else "loop fusion"
        for n in names[1:]:
            log.fused(self.name, n, names[0], base.name, rule=f"horizontal {mode} ({len(names)} kernels -> 1)")
        return base


def _concatenate_outputs(fusion: HloInstruction) -> None:
    """Rewrite a tuple root of differently shaped outputs as XLA's sliced input fusion.

    All outputs share one element type; they are flattened, concatenated, and sliced apart, so
    one loop over the concatenation writes every output.
    """
    fc = fusion.fused_computation
    root = fc.root
    outs = list(root.operands)
    flat: list[HloInstruction] = []
    reshapes: list[HloInstruction] = []
    for o in outs:
        n = o.shape.element_count()
        if o.shape.rank == 1:
            flat.append(o)
        else:
            r = HloInstruction("reshape", o.shape.with_dims((n,), Layout.default(1)), [o], name="reshape")
            reshapes.append(fc.add_instruction(r))
            flat.append(r)
    total = sum(f.shape.dims[0] for f in flat)
    concat = fc.add_instruction(HloInstruction(
        "concatenate", flat[0].shape.with_dims((total,), Layout.default(1)), flat, {"dimensions": (0,)},
        name="concatenate"))
    slices = []
    start = 0
    for f in flat:
        n = f.shape.dims[0]
        s = HloInstruction("slice", f.shape.with_dims((n,), Layout.default(1)), [concat],
                           {"slice": ((start, start + n, 1),)}, name="slice")
        slices.append(fc.add_instruction(s))
        start += n
    tup = fc.add_instruction(HloInstruction("tuple", TupleShape(tuple(s.shape for s in slices)), slices,
                                            name="tuple"))
    fc.root = tup
    root.detach_operands()
    fc.remove_instruction(root)
    # An output listed twice, or one already flattened inside the fusion, is reshaped once.
    dedupe_fused_computation(fusion, reshapes)
    fusion.shape = tup.shape
    comp = fusion.parent
    for g in [u for u in fusion.users if u.opcode == "get-tuple-element"]:
        orig = g.shape
        flat_shape = fusion.shape.elements[g.attrs["index"]]
        if orig.rank == 1:
            g.shape = flat_shape
            continue
        g.shape = flat_shape
        back = comp.add_instruction(HloInstruction("reshape", orig, [g], name="reshape"))
        g.replace_all_uses_with(back)
