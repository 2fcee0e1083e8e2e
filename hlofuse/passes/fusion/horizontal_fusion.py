"""Horizontal loop fusion (XLA's GpuHorizontalLoopFusion): independent small loop kernels
that feed the same consumer become one kernel launch.

Candidates are the operands of one consumer (typically the root tuple) that are kLoop fusions
or elementwise instructions, used only by that consumer (or the root), small enough to be
launch-bound (<= 128*2048 elements, <= 30 instructions), with row-major layouts and no entry
parameter shared with another candidate. They are sorted by output type, output count and
instruction count, and fused in spans of equal type/count (at most 32, and at most ~4000 bytes
of kernel parameters).

Representation: when every fused output has the same shape, the result is a kLoop fusion whose
root is a tuple of the outputs (one loop computes them all). Otherwise, as XLA's sliced input
fusion: each output is flattened, the flattened outputs are concatenated and sliced apart again,
the fusion is kInput with a tuple of slices as root, and outside it a reshape restores each shape.
"""
from __future__ import annotations

from ...hlo.ir import HloComputation, HloInstruction, HloModule
from ...hlo.shapes import Layout, TupleShape
from ..pass_base import HloPass
from .cost_model import TargetParams, target_params
from .decisions import Decision, FusionLog, module_log
from .fusibility import fusion_outputs, is_loop_fusion
from .fusion_utils import create_fusion, fused_instruction_count, merge_siblings

refuse = Decision.refuse
_OK = Decision.allow()


def _non_gte_ancestor(inst: HloInstruction) -> HloInstruction:
    while inst.opcode == "get-tuple-element":
        inst = inst.operands[0]
    return inst


def _output_type(inst: HloInstruction) -> str | None:
    types = {o.shape.dtype.name for o in fusion_outputs(inst) if o.shape.is_array}
    return types.pop() if len(types) == 1 else None


def is_candidate(inst: HloInstruction) -> bool:
    """XLA's IsFusibleCandidate: elementwise with operands, or a kLoop fusion of one output type."""
    if inst.control_predecessors or any(inst in o.control_predecessors for o in inst.parent.instructions):
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


class HorizontalLoopFusion(HloPass):
    """Fuse independent small loop kernels into one launch (GPU)."""

    name = "horizontal-fusion"

    def __init__(self, target: str | TargetParams = "gpu") -> None:
        self.params = target_params(target)

    def run(self, module: HloModule) -> bool:
        if module.entry is None:
            return False
        log = module_log(module)
        changed = self._run_on(module.entry, log)
        if changed:
            module.remove_unreachable_computations()
        return changed

    def _profitable(self, inst: HloInstruction) -> Decision:
        p = self.params
        outs = fusion_outputs(inst)
        elems = outs[0].shape.element_count() if outs[0].shape.is_array else 0
        if elems > p.horizontal_max_elements:
            return refuse("not-launch-bound", f"{inst.name} has {elems} > {p.horizontal_max_elements} elements; "
                                              f"its kernel is not launch-bound")
        n = fused_instruction_count(inst)
        if n > p.horizontal_max_instructions:
            return refuse("not-launch-bound", f"{inst.name} has {n} > {p.horizontal_max_instructions} instructions")
        return _OK

    def candidates(self, consumer: HloInstruction, log: FusionLog) -> list[HloInstruction]:
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
                d = refuse("cycle", f"{inst.name} has users besides {consumer.name}; fusing it horizontally "
                                    f"could create a cycle")
            if d:
                d = self._profitable(inst)
            if d and not _row_major(inst):
                d = refuse("layout", f"{inst.name} has a non-row-major layout")
            if d:
                for op in inst.operands:
                    if op.opcode == "parameter" and any(u is not inst and any(u is s for s in seen) for u in op.users):
                        d = refuse("shared-parameter", f"{inst.name} shares parameter {op.name} with another "
                                                       f"candidate")
                        break
            if d:
                out.append(inst)
            elif len(seen) > 1:
                log.refused(self.name, inst.name, consumer.name, d)
        out.sort(key=lambda i: (_output_type(i), len(fusion_outputs(i)), fused_instruction_count(i)))
        return out

    def spans(self, cands: list[HloInstruction]) -> list[list[HloInstruction]]:
        """Consecutive runs of equal output type, output count and instruction count."""
        p = self.params
        result: list[list[HloInstruction]] = []
        pos = 0
        while pos < len(cands):
            left = cands[pos]
            span = [left]
            io = 0
            right = pos + 1
            while right < len(cands):
                cur = cands[right]
                if (_output_type(cur) != _output_type(left) or len(fusion_outputs(cur)) != len(fusion_outputs(left))
                        or fused_instruction_count(cur) != fused_instruction_count(left)):
                    break
                if right - pos >= p.horizontal_max_batch:
                    break
                io += len(cur.operands) + len(fusion_outputs(cur))
                if io * 8 >= p.horizontal_max_param_bytes:
                    break
                span.append(cur)
                right += 1
            result.append(span)
            pos = right
        return result

    def _run_on(self, comp: HloComputation, log: FusionLog) -> bool:
        changed = False
        for consumer in reversed(comp.post_order()):
            if consumer.parent is not comp:
                continue
            for span in self.spans(self.candidates(consumer, log)):
                if len(span) < 2:
                    continue
                self._fuse(span, log)
                changed = True
        if changed:
            comp.sort_instructions()
        return changed

    def _fuse(self, span: list[HloInstruction], log: FusionLog) -> HloInstruction:
        names = [i.name for i in span]
        same_shapes = len({o.shape.to_text(False) for i in span for o in fusion_outputs(i)}) == 1
        base = span[0] if span[0].opcode == "fusion" else create_fusion(span[0], "kLoop")
        for other in span[1:]:
            merge_siblings(base, other)
        module = base.parent.parent
        fc = base.fused_computation
        module.release_name(fc.name)
        fc.name = module.unique_name("horizontally_fused_computation")
        if not same_shapes:
            _concatenate_outputs(base)
            base.attrs["kind"] = "kInput"
        else:
            base.attrs["kind"] = "kLoop"
        for n in names[1:]:
            log.fused(self.name, n, names[0], base.name, rule=f"horizontal ({len(names)} kernels -> 1)")
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
    for o in outs:
        n = o.shape.element_count()
        if o.shape.rank == 1:
            flat.append(o)
        else:
            r = HloInstruction("reshape", o.shape.with_dims((n,), Layout.default(1)), [o], name="reshape")
            flat.append(fc.add_instruction(r))
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
    fc.sort_instructions()
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
