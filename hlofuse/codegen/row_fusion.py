"""Row kernels for softmax-like chains (a decision of the CPU kernel planner).

XLA's CPU fusion rules (which hlofuse's CPU pipeline follows) never fuse a reduce into a
consumer that reads each reduced value many times, so softmax runs as three kernels (the max,
the sum of exp(x - max), the division) and layer norm as three (mean, variance, normalise),
each a pass over the rows in memory. When the planner reaches the last kernel step of such a
chain (a fusion reading, broadcast back along the rows, the results of earlier steps that
reduce rows of its own inputs), it computes the whole chain as one row kernel
(codegen/kernels/cpu_row.py): per row, the reductions and then the outputs, the row staying in
L1/L2 between its loops. The earlier steps then run no kernel (their values are never needed
outside the chain). The fused module is unchanged: this is a planning decision, recorded in
the fused module's fusion log as `kernel-planner/row-kernel` with its reason (or refused,
under `kernel-planner/row-kernel-refused`, with the reason it was not taken).

The cost rule: a row of every input the kernel reads must fit in half of the host's L2 cache
(kernels/cpu_row.row_budget_bytes); longer rows keep the multi-kernel plan, where each pass
streams at memory speed anyway.

A fusion planned alone whose reduces are broadcast back inside it (GPU-style input fusions,
hand-written modules) takes the same rule (`plan_rows`), instead of materializing its reduces.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hlo.ir import HloComputation, HloInstruction
from ..passes.cse import cse_computation
from ..passes.fusion.decisions import Decision
from .kernels.args import output_leaves, param_leaf_count
from .kernels.cpu_row import RowLayout, row_budget_bytes, row_layout
from .planning import KernelPlan, reduces_to_materialize, tree_reduction_rewrite

PLANNER = "kernel-planner"


@dataclass
class PlannedStep:
    """A kernel step the planner has planned: its computation and its (mutable) lists."""

    comp: HloComputation
    kernels: list
    temps: list


def row_kernel(comp: HloComputation, name: str) -> tuple[KernelPlan | None, str]:
    """The row kernel computing `comp` (its parameters read as the fusion's operands), or None
    and the reason it is not one."""
    if not reduces_to_materialize(comp):
        return None, "no reduce of it is read back along its rows"
    if tree_reduction_rewrite(comp) is not comp:
        return None, "a narrow-float reduce keeps XLA:CPU's tree order (its kernels fold sequentially)"
    layout = row_layout(comp)
    if isinstance(layout, str):
        return None, layout
    budget = row_budget_bytes()
    if layout.row_bytes > budget:
        return None, (f"a row of its inputs takes {layout.row_bytes} bytes, more than {budget} "
                      f"(half of the L2 cache): the row would not stay in cache between passes")
    n_out = len(output_leaves(comp))
    plan = KernelPlan(comp, list(range(n_out)), layout.rows, layout.row_elements * layout.passes, None,
                      name=f"{name}_row", custom="row")
    # The parameters are the fusion's operands in order, so their leaves are the step's inputs.
    plan.inputs = [("in", j) for j in range(param_leaf_count(comp))]
    plan.results = [("out", q) for q in range(n_out)]
    return plan, _why(layout)


def _why(layout: RowLayout) -> str:
    reduces = ", ".join(r.name for lvl in layout.levels for r in lvl)
    return (f"one row kernel over {layout.rows} rows of {layout.row_elements} elements "
            f"({layout.row_bytes} bytes of input per row, within {row_budget_bytes()} bytes: half of the "
            f"L2 cache): {len(layout.levels)} reduction loop(s) ({reduces}) and the output loop per row, "
            f"the row read from memory once")


class RowFusion:
    """The CPU planner's row-kernel decisions: remembers the kernel steps planned so far, and
    plans a consumer together with the reducing steps it reads back along rows."""

    def __init__(self, log=None) -> None:
        self.log = log  # passes/fusion/decisions.FusionLog, or None
        self.steps: dict[HloInstruction, PlannedStep] = {}
        self._entries: dict[HloInstruction, object] = {}  # step -> its own row-kernel log entry

    def record(self, inst: HloInstruction, comp: HloComputation, kernels: list, temps: list) -> None:
        """Remember that kernel step `inst` computes `comp` with `kernels` and `temps`."""
        self.steps[inst] = PlannedStep(comp, kernels, temps)

    def plan(self, comp: HloComputation, inst: HloInstruction, name: str,
             fixed: set) -> tuple[KernelPlan, list[HloInstruction]] | None:
        """A row kernel for `inst` (fused computation `comp`) with the earlier steps it absorbs,
        or None. `fixed` are steps whose kernels must stay (another fusion reads a buffer they
        also write)."""
        merged = self._mergeable(inst, fixed)
        if merged:
            combined = self._combined(comp, inst, merged)
            kp, reason = row_kernel(combined, name)
            producers = ", ".join(m.name for m in merged)
            if kp is None:
                self._refused(producers, inst, reason)
                return None
            self._planned(producers, inst, f"{producers} and {inst.name} run as {reason}")
            return kp, merged
        kp, reason = row_kernel(comp, name)
        if kp is None:
            if reduces_to_materialize(comp):
                self._refused(inst.name, inst, reason)
            return None
        self._planned(inst.name, inst, f"{inst.name} runs as {reason}")
        last = self.log.entries[-1] if self.log is not None and self.log.entries else None
        if last is not None and last.rule == "row-kernel" and last.consumer == inst.name:
            self._entries[inst] = last
        return kp, []

    def absorb(self, merged: list[HloInstruction], kernels: list) -> None:
        """Empty the kernel lists of the steps in `merged` (a row kernel computes them), and
        remove their kernels from `kernels` (the planner's list of every kernel)."""
        gone = [k for m in merged for k in self.steps[m].kernels]
        kernels[:] = [k for k in kernels if all(k is not g for g in gone)]
        for m in merged:
            self.steps[m].kernels[:] = []
            self.steps[m].temps[:] = []
            # A step's own row kernel is superseded: the consumer's entry names it.
            entry = self._entries.pop(m, None)
            if entry is not None and self.log is not None:
                self.log.entries[:] = [e for e in self.log.entries if e is not entry]

    def _mergeable(self, inst: HloInstruction, fixed: set) -> list[HloInstruction]:
        """The earlier reducing steps whose only readers are `inst` and each other, and whose
        own operands `inst` also reads (or are constants or other such steps)."""
        found: list[HloInstruction] = []
        stack = list(inst.operands)
        while stack:
            p = stack.pop()
            if p in found or p not in self.steps or p in fixed or not p.shape.is_array:
                continue
            if not any(i.opcode == "reduce" for i in self.steps[p].comp.instructions):
                continue
            found.append(p)
            stack.extend(p.operands)
        available = set(inst.operands)
        changed = True
        while changed:
            changed = False
            for p in list(found):
                keep = set(found) | {inst}
                ok = (not p.is_root() and all(u in keep for u in p.users)
                      and all(o in keep or o in available or o.opcode == "constant" for o in p.operands))
                if not ok:
                    found.remove(p)
                    changed = True
        if len(found) < 2 or inst.parent is None:
            return found  # nothing to order: no walk of the whole computation (once per step)
        order = {i: n for n, i in enumerate(inst.parent.post_order())}
        return sorted(found, key=lambda i: order.get(i, 0))

    def _combined(self, comp: HloComputation, inst: HloInstruction, merged: list[HloInstruction]) -> HloComputation:
        """`comp` with each parameter reading a step of `merged` replaced by that step's
        computation, inlined (recursively); the parameters stay `comp`'s, numbered as `inst`'s
        operands."""
        new = HloComputation(f"{comp.name}.rows")
        outer: dict[HloInstruction, HloInstruction] = {}  # outer instruction -> its value in `new`
        params = []
        for p in comp.parameters:
            q = p.clone()
            q.parameter_number = p.parameter_number
            params.append(new.add_instruction(q))
        for k, op in enumerate(inst.operands):
            if op not in merged:
                outer.setdefault(op, params[k])

        def value_of(o: HloInstruction) -> HloInstruction:
            if o not in outer:
                if o in merged:
                    outer[o] = inline(self.steps[o].comp, [value_of(x) for x in o.operands])
                else:  # a constant (see _mergeable)
                    outer[o] = new.add_instruction(o.clone())
            return outer[o]

        def inline(c: HloComputation, args: list[HloInstruction]) -> HloInstruction:
            mapping = {p: args[p.parameter_number] for p in c.parameters}
            for i in c.post_order():
                if i not in mapping:
                    mapping[i] = new.add_instruction(i.clone(operands=[mapping[o] for o in i.operands]))
            return mapping[c.root]

        args = [params[k] if op not in merged else value_of(op) for k, op in enumerate(inst.operands)]
        new.root = inline(comp, args)
        # Each fusion of the chain holds its own copy of what it shares with the others (softmax's
        # exp(x - max) is in the sum's fusion and in the division's): merged back into one
        # instruction, the row kernel computes it once per element and reuses it
        # (kernels/cpu_row.reused_values).
        cse_computation(new)
        return new

    def _planned(self, producers: str, inst: HloInstruction, reason: str) -> None:
        if self.log is not None:
            self.log.planned(PLANNER, producers, inst.name, "row-kernel", reason)

    def _refused(self, producers: str, inst: HloInstruction, reason: str) -> None:
        if self.log is not None:
            self.log.refused(PLANNER, producers, inst.name, Decision.refuse("row-kernel-refused", reason))
