"""Graph surgery for fusion: fusion instructions, fused computations, merging, reachability.

Names follow XLA: a fusion instruction is `fusion` (made unique: `fusion.1` ...), its computation
`fused_computation`, fused parameters `param_N`. Instructions keep their names when they move
into a fused computation; a duplicated producer's copy takes the original name plus a suffix
(`exponential.3.1`) because the original stays behind for its other users.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Callable, Hashable

from ...hlo.ir import HloComputation, HloInstruction, HloModule
from ...hlo.shapes import TupleShape
from ..cse import ComputationIds, instruction_key
from ..rewrite import Rewriter, has_side_effect
from .fusibility import fusion_outputs


# ---- reachability ---------------------------------------------------------------------------

class Reachability:
    """Which instructions of a computation reach which (through operands and control edges), as
    ancestor bitsets (XLA's HloReachabilityMap): an instruction's set holds bit j when
    instruction j reaches it. Built over the post order in O(n) set unions; `update_downstream`
    keeps it current after a fusion instead of rebuilding it."""

    def __init__(self, comp: HloComputation) -> None:
        self._comp = comp
        order = comp.post_order()
        self._index = {inst: i for i, inst in enumerate(order)}
        self._anc: list[int] = []
        for i, inst in enumerate(order):
            self._anc.append(self._from_operands(inst) | 1 << i)
        # instructions indexed after the build (a fusion made around a lone instruction, the
        # get-tuple-elements of a merged fusion): their own bit is in no other set, so what
        # they reach is asked of their users (`is_reachable`). Giving each a bit would change
        # the set of everything downstream of every fusion, which is what a rebuild costs.
        self._late: set[HloInstruction] = set()

    def _from_operands(self, inst: HloInstruction) -> int:
        """The union of the sets of `inst`'s operands and control predecessors."""
        index, anc = self._index, self._anc
        bits = 0
        for op in inst.operands:
            j = index.get(op)
            if j is not None:
                bits |= anc[j]
        for op in inst.control_predecessors:
            j = index.get(op)
            if j is not None:
                bits |= anc[j]
        return bits

    def _downstream(self, inst: HloInstruction, holders: list[HloInstruction]) -> list[HloInstruction]:
        """The instructions reading `inst` or ordered after it by a control edge."""
        if not holders:  # (most computations have no control edges)
            return inst.users
        return inst.users + self._comp.control_successors(inst)

    def update_downstream(self, node: HloInstruction) -> None:
        """`node` absorbed other instructions (a fusion grown by a producer or merged with a
        sibling; perhaps a new fusion, read through new get-tuple-elements), which left the
        computation if nothing else reads them. Sets only grow (a fusion joins paths, never
        cuts one among the instructions that stay), so `node`'s set is taken again from its
        operands and only the bits it gained are passed on downstream, in index order (a
        min-heap): a user adds what it lacks of them and goes on only when it lacked some. The
        work is the instructions whose ancestors changed and their users, each an AND and an
        OR of what is new (not a union over its operands: a merged fusion has dozens), not the
        computation. A fusion that joins paths already joined further down (a softmax's
        siblings, both read by its divide) stops there. The instructions merged away keep
        their bits in some sets; `is_reachable` never asks for them (their parent)."""
        index, anc, late = self._index, self._anc, self._late
        holders = self._comp.control_holders()
        heap: list[tuple[int, int, HloInstruction]] = [(-1, 0, node)]
        # instruction -> the bits its operands gained since it was last popped (None: take
        # its set from its operands: `node` itself, and instructions indexed here)
        gained: dict[HloInstruction, int | None] = {node: None}
        seq = 1
        while heap:
            key, _, inst = heapq.heappop(heap)
            new_bits = gained.pop(inst)
            i = index.get(inst)
            if i is None:  # made by the fusion: its users read it in place of what went
                i = index[inst] = len(anc)
                anc.append(0)
                late.add(inst)
                new_bits = None
            if new_bits is None:
                # `node` or a new instruction: its set from its operands, passed on whole (its
                # users may read it in place of an instruction merged away)
                bits = anc[i] | self._from_operands(inst)
                if inst not in late:
                    bits |= 1 << i
                added = bits
            else:
                added = new_bits & ~anc[i]
                if not added:
                    continue
                bits = anc[i] | added
            anc[i] = bits
            for user in self._downstream(inst, holders):
                j = index.get(user)
                if j is not None:
                    extra = added & ~anc[j]  # (sets only grow: what it holds now it keeps)
                    if not extra:
                        continue
                else:
                    extra = added
                if user in gained:
                    pending = gained[user]
                    if pending is not None:
                        gained[user] = pending | extra
                    continue
                gained[user] = extra
                # (a late instruction's index says nothing of its order: it goes right after
                # the instruction that reached it)
                heapq.heappush(heap, (j if j is not None and user not in late else key, seq, user))
                seq += 1

    def is_reachable(self, a: HloInstruction, b: HloInstruction) -> bool:
        """True if b depends on a (a == b counts)."""
        comp = self._comp
        if a.parent is not comp or b.parent is not comp:
            return False  # (an instruction removed since: it reaches nothing)
        index, anc = self._index, self._anc
        ib = index.get(b)
        if ib is None or a not in index:
            return False
        if a is b:
            return True
        if a not in self._late:
            return bool(anc[ib] >> index[a] & 1)
        # a late instruction reaches b when something it feeds does (its users are few: the
        # get-tuple-elements of a fusion, the instructions one such reads)
        holders = comp.control_holders()
        stack, seen = list(self._downstream(a, holders)), {a}
        while stack:
            inst = stack.pop()
            if inst in seen:
                continue
            seen.add(inst)
            if inst is b:
                return True
            j = index.get(inst)
            if j is None:
                continue
            if inst in self._late:
                stack.extend(self._downstream(inst, holders))
            elif anc[ib] >> j & 1:
                return True
        return False

    def reaches_one_of(self, targets: list[HloInstruction]) -> Callable[[HloInstruction], bool]:
        """A test of whether an instruction reaches any of `targets`, answering as `is_reachable`
        does pair by pair, for many instructions asked about the same targets (instruction
        fusion's pre-pass asks it of every instruction between a producer and its users): the
        targets' sets are joined once, then each question is one bit."""
        comp, index, anc, late = self._comp, self._index, self._anc, self._late
        mask = 0
        for t in targets:
            j = index.get(t)
            if j is not None and t.parent is comp:
                mask |= anc[j]

        def reaches(a: HloInstruction) -> bool:
            if a in late:  # (its own bit is in no set: asked of what it feeds)
                return any(self.is_reachable(a, t) for t in targets)
            j = index.get(a)
            return j is not None and a.parent is comp and bool(mask >> j & 1)
        return reaches

    def is_connected(self, a: HloInstruction, b: HloInstruction) -> bool:
        """Whether either instruction reaches the other."""
        return self.is_reachable(a, b) or self.is_reachable(b, a)


# ---- parameters of a fused computation --------------------------------------------------------

def _module_of(inst: HloInstruction) -> HloModule:
    module = inst.parent.parent if inst.parent is not None else None
    if module is None:
        raise ValueError(f"instruction {inst.name} is not in a module")
    return module


def _new_parameter(fc: HloComputation, number: int, shape) -> HloInstruction:
    p = HloInstruction("parameter", shape, name=f"param_{number}")
    p.parameter_number = number
    return fc.add_instruction(p)


def parameter_for(fusion: HloInstruction, operand: HloInstruction) -> HloInstruction:
    """The fused parameter bound to `operand`, adding a fusion operand if there is none yet."""
    fc = fusion.fused_computation
    if operand in fusion.operands:  # (by identity, hlo/ir.py HloInstruction)
        return fc.parameter(fusion.operands.index(operand))
    number = len(fusion.operands)
    fusion.append_operand(operand)
    return _new_parameter(fc, number, operand.shape)


def remove_parameter(fusion: HloInstruction, number: int) -> None:
    """Drop unused fused parameter `number` and the matching fusion operand; renumber the rest."""
    fc = fusion.fused_computation
    param = fc.parameter(number)
    if param.users:
        raise ValueError(f"fused parameter {param.name} of {fusion.name} still has users")
    fc.remove_instruction(param)
    # (not a walk of every instruction, nor a sort: fusions grow along long chains)
    for p in fc.parameters_in_list_order():
        if p.parameter_number > number:
            p.parameter_number -= 1
    op = fusion.operands.pop(number)
    if op not in fusion.operands and fusion in op.users:
        op.users.remove(fusion)


def operand_index(fusion: HloInstruction, operand: HloInstruction) -> int:
    """The position of `operand` among the operands of `fusion` (compared by identity, as
    list.index compares instructions: hlo/ir.py HloInstruction)."""
    try:
        return fusion.operands.index(operand)
    except ValueError:
        raise ValueError(f"{operand.name} is not an operand of {fusion.name}") from None


def reader_names(producer: HloInstruction, consumer: HloInstruction, ctx) -> tuple[str, str]:
    """(the instructions that read `producer`, the fusion they are in or ""), for reasons:
    inside a consumer fusion, the fused instructions reading its parameter, each by the
    instruction it duplicates when it is a copy (`ctx`: the run's FusionContext, `source_name`)."""
    if consumer.opcode != "fusion":
        return ctx.source_name(consumer), ""
    param = consumer.fused_computation.parameter(operand_index(consumer, producer))
    readers = list(dict.fromkeys(ctx.source_name(u) for u in param.users))
    return (", ".join(readers) or consumer.name), consumer.name


# ---- creating and growing fusions -------------------------------------------------------------

def _move_control_edges(old: HloInstruction, new: HloInstruction) -> None:
    comp = old.parent
    for p in old.control_predecessors:
        if p not in new.control_predecessors:
            new.control_predecessors.append(p)
    # (only the computation's control holders can name `old`: not a walk of every instruction
    # per fusion created, which made fusing a long module quadratic)
    for other in comp.control_successors(old):
        other.control_predecessors = [new if c is old else c for c in other.control_predecessors]


def create_fusion(consumer: HloInstruction, kind: str) -> HloInstruction:
    """Replace `consumer` by a fusion instruction computing just it (XLA's CreateFusion)."""
    comp = consumer.parent
    module = _module_of(consumer)
    fc = module.add_computation(HloComputation("fused_computation"))
    ops: list[HloInstruction] = []
    for op in consumer.operands:
        if not any(op is o for o in ops):
            ops.append(op)
    params = [_new_parameter(fc, i, op.shape) for i, op in enumerate(ops)]
    attrs = {"kind": kind, "calls": fc}
    if "metadata" in consumer.attrs:
        attrs["metadata"] = consumer.attrs["metadata"]
    fusion = comp.add_instruction(HloInstruction("fusion", consumer.shape, ops, attrs, name="fusion"))
    fc.fusion_instruction = fusion
    _move_control_edges(consumer, fusion)
    consumer.replace_all_uses_with(fusion)
    clone = consumer.clone(operands=[params[next(i for i, o in enumerate(ops) if o is op)]
                                     for op in consumer.operands])
    name = consumer.name
    consumer.control_predecessors = []
    comp.remove_instruction(consumer)
    fc.add_instruction(clone, name=name)
    fc.root = clone
    return fusion


def _clone_into(fusion: HloInstruction,
                producer: HloInstruction) -> tuple[list[tuple[HloInstruction, str]], list[HloInstruction]]:
    """Clones of `producer`'s computation bound to `fusion`'s parameters, not yet added.

    Returns the (clone, wanted name) pairs and the clones of the producer's outputs.
    """
    if producer.opcode != "fusion":
        ops = [parameter_for(fusion, op) for op in producer.operands]
        clone = producer.clone(operands=ops)
        return [(clone, producer.name)], [clone]
    pc = producer.fused_computation
    mapping: dict[HloInstruction, HloInstruction] = {}
    for i, op in enumerate(producer.operands):
        mapping[pc.parameter(i)] = parameter_for(fusion, op)
    pending: list[tuple[HloInstruction, str]] = []
    for inst in pc.post_order():
        if inst.opcode == "parameter":
            continue
        if inst is pc.root and inst.opcode == "tuple":
            continue
        clone = inst.clone(operands=[mapping[o] for o in inst.operands])
        mapping[inst] = clone
        pending.append((clone, inst.name))
    return pending, [mapping[o] for o in fusion_outputs(producer)]


def _retire(producer: HloInstruction) -> None:
    """Remove a producer that has no users left (and its fused computation)."""
    comp = producer.parent
    called = producer.fused_computation if producer.opcode == "fusion" else None
    comp.remove_instruction(producer)
    if called is not None and comp.parent is not None:
        comp.parent.remove_computation(called)


def _dedupable(inst: HloInstruction) -> bool:
    if inst.opcode in ("parameter", "tuple") or inst.control_predecessors:
        return False
    if inst.opcode == "constant" and inst.literal is None:
        return False  # an elided literal has an unknown value
    return not has_side_effect(inst)


def _same_operands(a: list[HloInstruction], b: list[HloInstruction]) -> bool:
    """Whether two operand lists name the same instructions in the same order (list == compares
    instructions by identity: hlo/ir.py HloInstruction)."""
    return a == b


def dedupe_fused_computation(fusion: HloInstruction, new: list[HloInstruction] | None = None) -> int:
    """Compute identical instructions of `fusion`'s computation once (CSE inside the kernel).

    Merging fusions that each hold a copy of a duplicated producer (multi-output and sibling
    fusion of the consumers it was duplicated into) would otherwise evaluate it twice per
    element. `new` are the instructions just added (the rest is already free of duplicates, so
    only they and, after a merge, the users of what they merged into are compared, each with
    the instructions that share its first operand); None checks everything. Of two identical
    instructions the one with the plainer name survives (`exp.3` rather than its copy
    `exp.3.1`): the instruction kept takes that name and, with it, that one's `origin`, so the
    fused module traces it to the same instruction as its name says. Returns how many
    instructions were removed.
    """
    fc = fusion.fused_computation
    work = deque(fc.post_order() if new is None else [i for i in new if i.parent is fc])
    queued = set(work)
    rewriter = Rewriter(fc)
    best_name: dict[HloInstruction, tuple[str, HloInstruction | None]] = {}  # kept -> (name, origin)
    gone: set[HloInstruction] = set()
    merged = 0
    # one structural id per called computation (a reduce's to_apply) for all the keys below,
    # rather than its structure walked again for every key
    computations = ComputationIds()
    # each instruction's key once per call, until its operands change (a replacement below
    # changes its users'): the pool of an instruction without operands is the whole
    # computation, so every new constant was compared with every constant, each keyed anew
    keys: dict[HloInstruction, Hashable] = {}
    while work:
        inst = work.popleft()
        queued.discard(inst)
        if inst in gone:
            continue
        pool = inst.operands[0].users if inst.operands else fc.instructions
        # (the key holds the operands by identity: a candidate reading other operands is not
        # keyed at all, nor is `inst` judged or keyed while it has no candidate (most clones
        # fused have none); a merged fusion's parameter has hundreds of users, each new clone
        # compared with all of them)
        ops, opcode, key, match = inst.operands, inst.opcode, None, None
        for c in pool:
            if (c is inst or c.opcode != opcode or not _same_operands(c.operands, ops) or c in gone
                    or c.parent is not fc or not _dedupable(c)):
                continue
            if key is None:
                if not _dedupable(inst):
                    break
                key = keys.get(inst)
                if key is None:
                    key = keys[inst] = instruction_key(inst, computations)
            other = keys.get(c)
            if other is None:
                other = keys[c] = instruction_key(c, computations)
            if other == key:
                match = c
                break
        if match is None:
            continue
        for user in inst.users:
            keys.pop(user, None)  # it reads `match` from now on
        rewriter.replace(inst, match)
        gone.add(inst)
        merged += 1
        name, _ = best_name.get(match, (match.name, match.origin))
        if (len(inst.name), inst.name) < (len(name), name):
            best_name[match] = (inst.name, inst.origin)
        for u in match.users:  # may be identical now
            if u not in queued:
                queued.add(u)
                work.append(u)
    if merged:
        rewriter.finish()
        module = fc.parent
        for keep, (name, origin) in best_name.items():
            if module is None:
                continue
            got = module.unique_name(name)
            if got == name:  # freed by the removal
                module.release_name(keep.name)
                keep.name = name
                keep.origin = origin
            else:
                module.release_name(got)
    return merged


def fuse_producer(fusion: HloInstruction, producer: HloInstruction,
                  added: list[HloInstruction] | None = None) -> HloInstruction:
    """Fuse `producer` (an operand of `fusion`) into it; duplicate it if it has other users.

    Instructions the fusion already computes identically are not added twice; `added`, if
    given, gets the copies that were added (in the order of the fused computation's list).
    Returns `fusion`.
    """
    fc = fusion.fused_computation
    if fusion_outputs(producer) != [producer] and len(fusion_outputs(producer)) != 1:
        raise ValueError(f"cannot fuse multi-output {producer.name} as a plain producer")
    k = operand_index(fusion, producer)
    param = fc.parameter(k)
    pending, outs = _clone_into(fusion, producer)
    param.replace_all_uses_with(outs[0])
    k = operand_index(fusion, producer)  # parameter_for may have appended operands, not moved k
    remove_parameter(fusion, k)
    if not producer.users:
        _retire(producer)
    _add_clones(fusion, pending)
    if added is not None:
        added.extend(clone for clone, _ in pending if clone.parent is fc)
    return fusion


def _add_clones(fusion: HloInstruction, pending: list[tuple[HloInstruction, str]]) -> None:
    """Add the clones `_clone_into` prepared to `fusion`'s computation, each computed once."""
    fc = fusion.fused_computation
    for clone, name in pending:
        fc.add_instruction(clone, name=name)
    dedupe_fused_computation(fusion, [clone for clone, _ in pending])


def _make_gte(fusion: HloInstruction, index: int) -> HloInstruction:
    shape = fusion.shape.elements[index]
    gte = HloInstruction("get-tuple-element", shape, [fusion], {"index": index}, name="get-tuple-element")
    return fusion.parent.add_instruction(gte)


def _add_outputs(fusion: HloInstruction, values: list[HloInstruction]) -> int:
    """Make `values` extra outputs of `fusion` (its root becomes a tuple); returns first index."""
    fc = fusion.fused_computation
    root = fc.root
    if root.opcode == "tuple":
        start = len(root.operands)
        for v in values:
            root.append_operand(v)
        root.shape = TupleShape(tuple(o.shape for o in root.operands))
        fusion.shape = root.shape
        return start
    tup = HloInstruction("tuple", TupleShape(tuple([root.shape] + [v.shape for v in values])),
                         [root] + values, name="tuple")
    fc.add_instruction(tup)
    fc.root = tup
    old_users = list(fusion.users)
    was_root = fusion.is_root()
    fusion.shape = tup.shape
    gte0 = _make_gte(fusion, 0)
    for u in old_users:
        u.replace_operand_with(fusion, gte0)
    if was_root:
        fusion.parent.root = gte0
    return 1


def _redirect_users(old: HloInstruction, fusion: HloInstruction, first_index: int) -> None:
    """Point the users of `old` (now inside `fusion` as outputs from `first_index`) at `fusion`."""
    users = [u for u in old.users if u is not fusion]
    was_root = old.is_root()
    if old.opcode == "fusion" and old.fused_computation.root.opcode == "tuple":
        for u in users:
            if u.opcode != "get-tuple-element":
                raise ValueError(f"multi-output {old.name} has a non-get-tuple-element user {u.name}")
            u.replace_operand_with(old, fusion)
            u.attrs["index"] = u.attrs["index"] + first_index
        if was_root:
            raise ValueError(f"multi-output {old.name} is the root")
        return
    if not users and not was_root:
        return
    gte = _make_gte(fusion, first_index)
    for u in users:
        u.replace_operand_with(old, gte)
    if was_root:
        old.parent.root = gte


def fuse_into_multi_output(fusion: HloInstruction, producer: HloInstruction) -> HloInstruction:
    """Fuse `producer` into its consumer `fusion`, keeping its value as an extra output."""
    fc = fusion.fused_computation
    pending, outs = _clone_into(fusion, producer)
    for clone, _ in pending:
        clone.parent = None
    for i, op in enumerate(list(fusion.operands)):
        if op is producer:
            fc.parameter(i).replace_all_uses_with(outs[0])
    while producer in fusion.operands:
        remove_parameter(fusion, operand_index(fusion, producer))
    first = _add_outputs(fusion, outs)
    _redirect_users(producer, fusion, first)
    if not producer.users and not producer.is_root():
        _retire(producer)
    _add_clones(fusion, pending)
    return fusion


def merge_siblings(fusion: HloInstruction, other: HloInstruction) -> HloInstruction:
    """Merge `other` (a fusion or plain instruction not connected to `fusion`) into it.

    The result is a multi-output fusion whose root tuple lists `fusion`'s outputs, then
    `other`'s; users read them through get-tuple-element.
    """
    pending, outs = _clone_into(fusion, other)
    first = _add_outputs(fusion, outs)
    _redirect_users(other, fusion, first)
    if not other.users and not other.is_root():
        _retire(other)
    _add_clones(fusion, pending)
    if other.opcode == "fusion" and other.attrs.get("kind") == "kInput":
        fusion.attrs["kind"] = "kInput"
    return fusion


def sort_computations(comp: HloComputation) -> None:
    """Put `comp` and the fused computations of its fusions back in post order.

    The surgery above appends instructions where it is convenient; passes call this once at
    the end instead of after every step (which would be quadratic in the fusion size).
    """
    comp.sort_instructions()
    for inst in comp.instructions:
        if inst.opcode == "fusion":
            inst.fused_computation.sort_instructions()


def fused_instruction_count(inst: HloInstruction) -> int:
    """How many instructions `inst` stands for (a fusion's, parameters not counted)."""
    if inst.opcode != "fusion":
        return 1
    return sum(1 for i in inst.fused_computation.instructions if i.opcode != "parameter")
