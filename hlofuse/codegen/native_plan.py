"""Where every value of a compiled program lives when the native driver runs it.

The CPU executable is one native program (docs/native_runtime.md): codegen/driver.py emits, per
executed computation, an LLVM function that calls the kernels, runs while loops and
conditionals, and copies where a value must move. This module decides the memory behind every
array leaf of every step, statically, from the schedule (codegen/schedule.py):

- a parameter leaf is the caller's pointer (`params[k]`), a result leaf the caller's
  destination (`results[j]`);
- a constant, a kernel step's temporaries and the buffers shared between kernel steps are
  program-lifetime buffers in the driver's table (`table[n]`);
- every other value gets an offset in its computation's arena, reused as soon as the value is
  dead (best fit; freed only after the step that last reads it has placed its own outputs, so no
  step writes over its inputs);
- tuples, get-tuple-element, opt-barrier, domain and add-dependency move no data: their leaves
  are their operands' leaves.

In-place updates follow XLA's rule: a dynamic-update-slice or scatter kernel (Step.inplace) and a
while loop's state take over their operand's arena buffer when the operand dies there, and copy
it otherwise. State the body passes through untouched (a scan's inputs, its weights) is not
copied when it lives in read-only memory (a parameter, a constant): the loop reads it there. A computation's result is written straight into `results[j]` by the step that
computes it. A while body runs with `results` equal to `params` (the loop state, updated in
place); there a step may write `results[j]` directly only once nothing later reads the state's
old leaf j (`alias_results`), and the root's own moves are ordered so none reads a leaf another
has overwritten.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.shapes import Shape
from .buffers import ALIGN
from .schedule import ComputationPlan, Planner, Step

# Library ops whose leaves are their operands' leaves (no data moves).
_ALIAS_OPS = ("opt-barrier", "domain", "add-dependency", "after-all")
# Library ops the driver runs itself, calling the computations they name.
NATIVE_CONTROL = ("while", "conditional", "call")


@dataclass(frozen=True)
class Loc:
    """The memory of one array leaf: `params[index]`, `results[index]`, `arena + index` (a
    byte offset in the computation's arena), `table[index]` (a program-lifetime buffer), or
    nothing (a zero-byte leaf)."""

    kind: str  # param | result | arena | table | null
    index: int = 0


NULL = Loc("null")


@dataclass(frozen=True)
class Copy:
    """A move of `nbytes` from `src` to `dst` (skipped at run time when they are one buffer)."""

    src: Loc
    dst: Loc
    nbytes: int


@dataclass(eq=False)
class NativeStep:
    """One step of a native computation: what it reads (`ins`, its operands' leaves flattened)
    and writes (`outs`), the copies before it runs, and how it runs (`kind`: kernel, callback
    (a library rule in Python), while, conditional, call, or none (no code: parameters,
    constants, tuples, aliases)). `id` numbers the step in the whole program (profiles)."""

    step: Step
    kind: str
    ins: list[Loc]
    outs: list[Loc] = field(default_factory=list)
    in_shapes: list[Shape] = field(default_factory=list)
    out_shapes: list[Shape] = field(default_factory=list)
    pre_copies: list[Copy] = field(default_factory=list)
    callees: list["NativePlan"] = field(default_factory=list)  # body/cond, branches, callee
    temps: list[int] = field(default_factory=list)  # table slots of the kernels' temporaries
    id: int = -1


@dataclass(eq=False)
class NativePlan:
    """A computation as the driver runs it: its steps, arena, and the final moves of its result
    into `results` (`staged` first: in a while body, state leaves moved to other positions go
    through the arena so no move reads a leaf another has overwritten)."""

    comp: HloComputation
    alias_results: bool
    index: int  # function number in the driver
    param_shapes: list[Shape] = field(default_factory=list)
    result_shapes: list[Shape] = field(default_factory=list)
    steps: list[NativeStep] = field(default_factory=list)
    arena_bytes: int = 0
    arena_slot: int = -1  # table slot of the arena
    staged: list[Copy] = field(default_factory=list)
    final: list[Copy] = field(default_factory=list)
    # Result leaves that are the same leaf of the parameters, untouched (a while body's
    # loop-invariant state: the weights, the scanned inputs).
    passthrough: frozenset[int] = frozenset()


@dataclass(frozen=True)
class TableEntry:
    """A program-lifetime buffer or address the driver reads from its table: a constant's
    leaf, an arena (`plan`), a kernel step's temporary or shared buffer (`shape`), or a kernel
    function (`kernel`, its name)."""

    kind: str  # const | arena | temp | shared | kernel
    payload: object = None


def leaves(shape: Shape) -> list[Shape]:
    """The array leaves of `shape` (tuples flattened depth-first, tokens dropped)."""
    return list(shape.leaves()) if shape.is_tuple else ([] if shape.is_token else [shape])


def nbytes(shape: Shape) -> int:
    """Bytes of array leaf `shape`."""
    return shape.element_count() * shape.dtype.byte_size


def _leaf_ranges(shape: Shape) -> list[tuple[int, int]]:
    """[start, end) of each tuple element's leaves in the flattened leaves of `shape`."""
    out, k = [], 0
    for e in shape.elements:
        n = len(leaves(e))
        out.append((k, k + n))
        k += n
    return out


class NativeProgram:
    """Every computation the entry runs, planned for the driver; the table of program buffers."""

    def __init__(self, planner: Planner, entry: HloComputation) -> None:
        self.planner = planner
        self.table: list[TableEntry] = []
        self._slots: dict[object, int] = {}
        self.plans: list[NativePlan] = []
        self._by_key: dict[tuple[HloComputation, bool], NativePlan] = {}
        self.steps: list[NativeStep] = []  # every step of every plan, by id
        self.entry = self.plan(entry, alias_results=False)

    def slot(self, entry: TableEntry, key: object = None) -> int:
        """The table slot of `entry` (one per `key` when given)."""
        if key is not None and key in self._slots:
            return self._slots[key]
        self.table.append(entry)
        n = len(self.table) - 1
        if key is not None:
            self._slots[key] = n
        return n

    def shared_slot(self, sid: int) -> int:
        """The table slot of shared buffer `sid` (registered when its steps were planned)."""
        return self._slots[("shared", sid)]

    def kernel_slot(self, name: str) -> int:
        """The table slot holding kernel `name`'s function address."""
        return self.slot(TableEntry("kernel", name), ("kernel", name))

    def plan(self, comp: HloComputation, alias_results: bool) -> NativePlan:
        """The (memoized) native plan of `comp`."""
        key = (comp, alias_results)
        found = self._by_key.get(key)
        if found is None:
            found = NativePlan(comp, alias_results, len(self.plans))
            self._by_key[key] = found
            self.plans.append(found)
            _Builder(self, found, self.planner.plan(comp)).build()
        return found


class _Builder:
    """Fills one NativePlan: values, their liveness, then their memory."""

    def __init__(self, prog: NativeProgram, plan: NativePlan, cplan: ComputationPlan) -> None:
        self.prog = prog
        self.plan = plan
        self.cplan = cplan
        self.free: list[tuple[int, int]] = []  # (offset, size) blocks of the arena
        self.end = 0

    # ---- values ------------------------------------------------------------------------------
    def build(self) -> None:
        """Plan every step, then the moves of the result."""
        plan, comp = self.plan, self.plan.comp
        plan.result_shapes = leaves(comp.root.shape)
        order = sorted(comp.parameters, key=lambda p: p.parameter_number)
        first_param, k = {}, 0
        for p in order:
            first_param[p.parameter_number] = k
            k += len(leaves(p.shape))
        plan.param_shapes = [s for p in order for s in leaves(p.shape)]
        # Symbolic values: ("v", step, leaf) for written leaves, Loc for params and tables.
        values: list[list] = []
        for i, step in enumerate(self.cplan.steps):
            ins = [v for j in step.operand_steps for v in values[j]]
            values.append(self._values(i, step, ins, first_param))
        root_values = values[self.cplan.root_step]
        plan.passthrough = frozenset(j for j, v in enumerate(root_values) if v == Loc("param", j))
        last = self._last_uses(values, root_values)
        self.loc: dict = {}
        self._sizes: dict = {}
        self._donated: set = set()
        self._results_taken: set[int] = set()
        expiring: dict[int, list] = {}
        for v, i in last.items():
            expiring.setdefault(i, []).append(v)
        n_steps = len(self.cplan.steps)
        self._heading = self._result_chains(values, root_values, last)
        for i, step in enumerate(self.cplan.steps):
            self._place(i, step, values, root_values, last)
            self._release(expiring.get(i, ()))
        self._result_moves(root_values, last, n_steps)
        plan.arena_bytes = self.end
        plan.arena_slot = self.prog.slot(TableEntry("arena", plan))

    def _result_chains(self, values: list, root_values: list, last: dict) -> dict:
        """Values that an in-place chain carries into result leaf j (value -> j): a value a
        later in-place step takes over (it dies there) becomes that step's result, so it is
        best written into `results[j]` at once (two dynamic-update-slices of one buffer then
        copy nothing between them)."""
        heading: dict = {}
        for j, v in enumerate(root_values):
            while isinstance(v, tuple) and v not in heading:
                i, n = v[1], v[2]
                step = self.cplan.steps[i]
                ins_v = [w for k in step.operand_steps for w in values[k]]
                src = self._donors(step, ins_v).get(n)
                if not isinstance(src, tuple) or last.get(src) != i or ins_v.count(src) != 1 or src in root_values:
                    break
                heading[src] = j
                v = src
        return heading

    def _values(self, i: int, step: Step, ins: list, first_param: dict[int, int]) -> list:
        """The symbolic values of step `i`'s leaves."""
        inst = step.inst
        out_shapes = leaves(inst.shape)
        if step.kind == "param":
            k = first_param[inst.parameter_number]
            return [Loc("param", k + n) for n in range(len(out_shapes))]
        if step.kind == "const":
            return [Loc("table", self.prog.slot(TableEntry("const", (inst, n)), ("const", inst, n)))
                    for n in range(len(out_shapes))]
        if step.kind == "tuple":
            return list(ins)
        if step.kind == "gte":
            lo, hi = _leaf_ranges(inst.operands[0].shape)[int(inst.attrs["index"])]
            return ins[lo:hi]
        if step.kind == "library" and inst.opcode in _ALIAS_OPS:
            return list(ins[:len(out_shapes)])
        return [("v", i, n) for n in range(len(out_shapes))]

    def _last_uses(self, values: list, root_values: list) -> dict:
        """Per value, the index of the last step reading it (len(steps) for the result)."""
        last: dict = {}
        for i, step in enumerate(self.cplan.steps):
            for v in values[i]:
                last.setdefault(v, i)
            for j in step.operand_steps:
                for v in values[j]:
                    last[v] = i
        end = len(self.cplan.steps)
        for v in root_values:
            last[v] = end
        return last

    # ---- memory ------------------------------------------------------------------------------
    def _alloc(self, size: int) -> int:
        size = _rounded(size)
        best = None
        for n, (off, sz) in enumerate(self.free):
            if sz >= size and (best is None or sz < self.free[best][1]):
                best = n
        if best is None:
            off = self.end
            self.end += size
            return off
        off, sz = self.free.pop(best)
        if sz > size:
            self.free.append((off + size, sz - size))
        return off

    def _release(self, dying) -> None:
        """Free the arena buffers of values `dying` (their last reader has run)."""
        for v in dying:
            loc = self.loc.get(v) if not isinstance(v, Loc) else None
            if loc is not None and loc.kind == "arena" and v not in self._donated:
                self.free.append((loc.index, _rounded(self._sizes[v])))

    def resolve(self, v) -> Loc:
        """The memory of value `v`."""
        return v if isinstance(v, Loc) else self.loc[v]

    def _place(self, i: int, step: Step, values: list, root_values: list, last: dict) -> None:
        """Choose the memory of step `i`'s written leaves; record the NativeStep."""
        inst = step.inst
        ins_v = [v for j in step.operand_steps for v in values[j]]
        ins = [self.resolve(v) for v in ins_v]
        kind = _kind(step)
        ns = NativeStep(step, kind, ins, in_shapes=[s for op in inst.operands for s in leaves(op.shape)],
                        out_shapes=leaves(inst.shape))
        donors = self._donors(step, ins_v)
        invariant = self._invariant_state(step)
        for n, v in enumerate(values[i]):
            if isinstance(v, Loc) or v != ("v", i, n):
                continue
            size = nbytes(ns.out_shapes[n])
            self._sizes[v] = size
            target = self._result_target(i, v, ins_v, donors.get(n), root_values, last)
            src = donors.get(n)
            chained = (src is not None and isinstance(src, tuple) and self._heading.get(src) is not None
                       and self.loc.get(src) == Loc("result", self._heading[src])
                       and self._position(v, root_values) == self._heading[src]
                       and last.get(src) == i and ins_v.count(src) == 1)
            if size == 0:
                self.loc[v] = NULL
            elif chained:  # the in-place chain's buffer is already results[j]
                self.loc[v] = self.loc[src]
                self._donated.add(src)
                self._sizes[v] = self._sizes[src]
            elif target is not None:
                self.loc[v] = target
                self._results_taken.add(target.index)
            elif n in invariant and self._read_only(donors[n]):
                self.loc[v] = donors[n]  # loop-invariant state stays where it is: no copy
            elif n in donors and self._can_donate(i, donors[n], ins_v, last):
                src = donors[n]
                self.loc[v] = self.loc[src]
                self._donated.add(src)  # its buffer now belongs to v
                self._sizes[v] = self._sizes[src]
            else:
                self.loc[v] = Loc("arena", self._alloc(size))
        ns.outs = [self.resolve(v) for v in values[i]]
        for n, src in donors.items():
            if not self._same(ns.outs[n], self.resolve(src)):
                ns.pre_copies.append(Copy(self.resolve(src), ns.outs[n], nbytes(ns.out_shapes[n])))
        self._finish_step(ns, step)
        self.plan.steps.append(ns)

    def _same(self, a: Loc, b: Loc) -> bool:
        """Whether `a` and `b` are one buffer (in a while body, state leaf j is both
        `params[j]` and `results[j]`)."""
        if a == b:
            return True
        return self.plan.alias_results and {a.kind, b.kind} == {"param", "result"} and a.index == b.index

    def _donors(self, step: Step, ins_v: list) -> dict[int, object]:
        """Output leaf -> the operand value whose contents it must start from (in place)."""
        if step.kind == "kernel":
            return {k: ins_v[i] for k, i in step.inplace.items()}
        if step.kind == "library" and step.inst.opcode == "while":
            return dict(enumerate(ins_v))
        return {}

    def _invariant_state(self, step: Step) -> frozenset[int]:
        """The state leaves a while step's body passes through untouched (XLA's copy insertion
        adds no copy for them: the loop reads them where they are)."""
        if step.kind != "library" or step.inst.opcode != "while":
            return frozenset()
        return self.prog.plan(step.inst.attrs["body"], True).passthrough

    def _read_only(self, src) -> bool:
        """Whether operand value `src` is memory nothing in this computation writes while it is
        shared: a program-lifetime buffer (a constant), or a parameter of a computation whose
        parameters are not also its results (in a while body they are the state, written in
        place by steps that do not count a read through the shared leaf as a reader). An arena
        value is not: its buffer is reused once it dies, and an in-place step may take it over."""
        if not isinstance(src, Loc):
            return False
        return src.kind == "table" or (src.kind == "param" and not self.plan.alias_results)

    def _can_donate(self, i: int, src, ins_v: list, last: dict) -> bool:
        """Whether operand value `src` may become the output's buffer: an arena value that
        dies at step `i`, read once by it and not already given away."""
        return (not isinstance(src, Loc) and src in self.loc and self.loc[src].kind == "arena"
                and last.get(src) == i and ins_v.count(src) == 1 and src not in self._donated)

    def _result_target(self, i: int, v, ins_v: list, donor, root_values: list, last: dict) -> Loc | None:
        """`results[j]` when value `v` is the result's leaf j and may be written there now."""
        j = self._position(v, root_values)
        if j is None or j in self._results_taken:
            return None
        if not self.plan.alias_results:
            return Loc("result", j)
        state = Loc("param", j)  # in a while body, results[j] is params[j]
        if last.get(state, -1) < i:
            return Loc("result", j)
        # The step itself may be the last reader when it starts from that leaf (in place).
        if last.get(state) == i and donor == state and ins_v.count(state) == 1:
            return Loc("result", j)
        return None

    def _position(self, v, root_values: list) -> int | None:
        """The result leaf value `v` is (or an in-place chain carries it into), or None."""
        if v in root_values:
            return root_values.index(v)
        return self._heading.get(v)

    def _finish_step(self, ns: NativeStep, step: Step) -> None:
        """Kernel temporaries, shared buffers and called plans of `ns`."""
        prog = self.prog
        if ns.kind == "kernel":
            ns.temps = [prog.slot(TableEntry("temp", t)) for t in step.temps]
            planner = prog.planner
            for sid in (*getattr(planner, "shared_inputs", {}).get(step.inst, ()),
                        *getattr(planner, "shared_outputs", {}).get(step.inst, ())):
                prog.slot(TableEntry("shared", sid), ("shared", sid))
            for k in step.kernels:
                prog.kernel_slot(k.name)
        elif ns.kind == "while":
            inst = step.inst
            ns.callees = [prog.plan(inst.attrs["condition"], False), prog.plan(inst.attrs["body"], True)]
        elif ns.kind in ("conditional", "call"):
            ns.callees = [prog.plan(c, False) for c in _called(step.inst)]
        ns.id = len(prog.steps)
        prog.steps.append(ns)

    # ---- the result ------------------------------------------------------------------------
    def _result_moves(self, root_values: list, last: dict, end: int) -> None:
        plan = self.plan
        for j, v in enumerate(root_values):
            src = self.resolve(v)
            dst = Loc("result", j)
            size = nbytes(plan.result_shapes[j])
            if src == dst or size == 0 or plan.alias_results and src == Loc("param", j):
                continue
            if plan.alias_results and src.kind == "param":
                staging = Loc("arena", self._alloc(size))  # after every step: nothing else lives here
                plan.staged.append(Copy(src, staging, size))
                src = staging
            plan.final.append(Copy(src, dst, size))


def _rounded(nbytes: int) -> int:
    """An arena block's size for `nbytes`: a multiple of ALIGN, at least one."""
    return max(ALIGN, -(-nbytes // ALIGN) * ALIGN)


def _kind(step: Step) -> str:
    if step.kind in ("param", "const", "tuple", "gte"):
        return "none"
    if step.kind == "kernel":
        return "kernel"
    if step.kind == "call":
        return "call"
    if step.kind == "library":
        op = step.inst.opcode
        if op in _ALIAS_OPS:
            return "none"
        if op in NATIVE_CONTROL:
            return op
    return "callback"  # library rules, and unsupported steps (their callback raises)


def _called(inst: HloInstruction) -> list[HloComputation]:
    """The computations a conditional (branches in order) or call / fusion runs."""
    if inst.opcode == "fusion":
        return [inst.fused_computation]
    if inst.opcode == "call":
        return [inst.attrs["to_apply"]]
    branches = inst.attrs.get("branch_computations")
    if branches is None:
        return [inst.attrs["true_computation"], inst.attrs["false_computation"]]
    return list(branches)
