"""The HLO IR: instructions, computations and modules (`HloInstruction` is defined in
hlo/instruction.py and re-exported here; import all three from this module).

The graph is mutable and owned by these objects; operands keep their order (duplicates are
allowed: `add(x, x)`), users are kept in step. networkx views are derived on demand for
analyses and never stored.

Attribute conventions (`HloInstruction.attrs`, keyed by the HLO text keyword):
  dimensions, dynamic_slice_sizes, slice_sizes, fft_length, ... -> tuple[int, ...]
  slice                    -> tuple[(start, limit, stride), ...]
  padding (pad op)         -> tuple[(low, high, interior), ...]
  window                   -> attributes.Window
  dim_labels               -> attributes.ConvDimensionNumbers
  *_dims of dot / gather / scatter dimension numbers -> tuple[int, ...]
  index_vector_dim, iota_dimension, index, feature_group_count, ... -> int
  direction, type, kind, custom_call_target, fft_type, distribution, ... -> str
  is_stable, indices_are_sorted, unique_indices, ... -> bool
  to_apply, calls, condition, body, select, scatter, true_computation, false_computation
                           -> HloComputation
  branch_computations      -> tuple[HloComputation, ...]
  metadata, backend_config, sharding, frontend_attributes, and anything not understood
                           -> attributes.Raw (printed back verbatim)
Constants keep their value in `literal` (a numpy array, or None when elided as `{...}`).
Parameters keep their index in `parameter_number`.

Provenance: `HloInstruction.origin` is the instruction an instruction was made from, None for
one built or parsed directly; `original` is `origin or self`.
- `HloInstruction.clone()` (what passes use: fusion moving or duplicating a producer, inlining)
  gives the copy its source's `original`: chains of clones inside a module collapse, so every
  fused copy points at the instruction of the module the passes started from.
- `HloModule.clone()` gives each copied instruction the source instruction itself: the module
  the compiler optimizes is a clone of the user's, so its instructions, and every clone made of
  them by the passes, point at the user's instructions, whatever the user's module was made from.
`origin.OriginIndex(before_instructions).source(inst)` follows these links from an instruction of a
module derived from `before` (by clones and passes) back to the instruction of `before` it came
from. The fusion report, `hlofuse explain` and the graph viewer use it, never names.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from . import control_list
# HloInstruction lives in hlo/instruction.py (with its operand / user edits) and is re-exported
# here, where every caller imports it from.
from .instruction import _CALLING_ATTRS, HloInstruction
# Names ir.py imported for HloInstruction before the split, still importable from here
# (tests/hlo/test_registry.py takes COMPUTATION_ATTRS from this module).
from .attributes import COMPUTATION_ATTRS  # noqa: F401
from .opcodes import op_info  # noqa: F401
from .users import Users  # noqa: F401
from .module_clone import clone_module
from .pending_state import read_pending, state_to_copy
from .shapes import Shape
from .walk import in_post_order, instruction_post_order, post_order


class HloComputation:
    """A computation: parameters, an ordered list of instructions and a root."""

    __getattr__ = read_pending
    __getstate__ = state_to_copy

    def __init__(self, name: str) -> None:
        self.name = name
        # the instruction list, and the instructions removed from it but not yet dropped (removal
        # is lazy: `instructions` drops them when next read, so removing k instructions one by
        # one costs one pass over the list, not k)
        self._instructions: list[HloInstruction] = []
        self._removed: set[HloInstruction] = set()
        # (the raw list, its length, the control-edit count) -> the instructions that have
        # control predecessors (`control_holders`)
        self._control_holders: tuple[list[HloInstruction], int, int, list[HloInstruction]] | None = None
        self.root: HloInstruction | None = None
        self.parent: HloModule | None = None
        self.fusion_instruction: HloInstruction | None = None  # set for fused computations
        self.is_entry = False
        self.execution_thread: str | None = None
        # The parameter instructions, kept by add/remove_instruction and checked against the
        # instruction list's identity and length (which other code also edits directly):
        # fusion looks parameters up for every producer it fuses, and a scan of the whole
        # computation each time made growing a fusion along a long chain quadratic. The list
        # itself is held (not its id, which a replacement list could reuse once it is freed).
        self._params: tuple[list[HloInstruction], int, list[HloInstruction]] | None = None
        # instructions added or removed through the methods below (`revision`)
        self._edits = 0

    @property
    def revision(self) -> tuple:
        """A value that changes whenever instructions are added or removed through this class's
        methods, the list is replaced, or the root changes: what a memo of a fact about the
        computation's contents (a fused computation's work, codegen-independent) is keyed by.
        An operand rewired between instructions that stay is not seen: the fusion passes that
        read it only rewire as part of adding or removing an instruction."""
        return (self._edits, id(self._instructions), len(self._instructions), len(self._removed), self.root)

    @property
    def instructions(self) -> list[HloInstruction]:
        """The instructions in order (a list callers may read and edit)."""
        if self._removed:
            removed, old = self._removed, self._instructions
            insts = self._instructions = [i for i in old if i not in removed]
            self._removed = set()
            # the lists derived from the old list, when they were in step with it, are carried
            # over (without the removed instructions), not rebuilt by a walk of the new one
            params, holders = self._params, self._control_holders
            if params is not None and params[0] is old and params[1] == len(old):
                self._params = (insts, len(insts), params[2])  # (removal keeps it in step)
            if holders is not None and holders[0] is old and holders[1] == len(old):
                self._control_holders = (insts, len(insts), holders[2],
                                         [h for h in holders[3] if h not in removed])
        return self._instructions

    @instructions.setter
    def instructions(self, value: list[HloInstruction]) -> None:
        self._instructions = value
        self._removed = set()
        self._edits += 1

    def _parameter_list(self) -> list[HloInstruction]:
        # keyed by the raw list (a lazily removed parameter is dropped from it by `remove_instruction`)
        cached = self._params
        insts = self._instructions
        if cached is None or cached[0] is not insts or cached[1] != len(insts):
            removed = self._removed
            cached = self._params = (insts, len(insts), [i for i in insts
                                                         if i.opcode == "parameter" and i not in removed])
        return cached[2]

    def control_holders(self) -> list[HloInstruction]:
        """The instructions of this computation that have control predecessors (possibly with
        some that no longer do, or were removed: callers check). Rebuilt only when a control
        list changed anywhere or the instruction list was edited directly."""
        insts = self._instructions
        cached = self._control_holders
        if cached is None or cached[0] is not insts or cached[1] != len(insts) or cached[2] != control_list.edits():
            cached = self._control_holders = (insts, len(insts), control_list.edits(),
                                              [i for i in insts if i.control_predecessors])
        return cached[3]

    def control_successors(self, inst: HloInstruction) -> list[HloInstruction]:
        """The instructions of this computation that name `inst` as a control predecessor."""
        return [i for i in self.control_holders()
                if i.parent is self and any(c is inst for c in i.control_predecessors)]

    @property
    def parameters(self) -> list[HloInstruction]:
        """Parameters ordered by parameter number."""
        return sorted(self._parameter_list(), key=lambda p: p.parameter_number)

    def parameters_in_list_order(self) -> list[HloInstruction]:
        """The parameters as the instruction list holds them, not sorted (for callers that
        visit each once in any order: fusion renumbers them after every parameter it drops).
        A fresh list: editing it changes nothing."""
        return list(self._parameter_list())

    def parameter(self, number: int) -> HloInstruction:
        """The parameter instruction with parameter number `number`."""
        params = self._parameter_list()
        # the list is in number order wherever parameters were added in order and removed
        # with renumbering (every fused computation): one check, not a scan, per look-up
        if 0 <= number < len(params) and params[number].parameter_number == number:
            return params[number]
        for p in params:
            if p.parameter_number == number:
                return p
        raise IndexError(f"computation {self.name} has no parameter {number}")

    def instruction_count(self, parameters: bool = True) -> int:
        """How many instructions the computation holds (without its parameters when
        `parameters` is False). O(1): fusion asks it for every producer it considers."""
        n = len(self._instructions) - len(self._removed)
        return n if parameters else n - len(self._parameter_list())

    def add_instruction(self, inst: HloInstruction, name: str | None = None) -> HloInstruction:
        """Add `inst` (its name made unique in the module) and return it."""
        if name is not None:
            inst.name = name
        if self.parent is not None:
            inst.name = self.parent.unique_name(inst.name or inst.opcode)
        elif not inst.name:
            inst.name = inst.opcode
        if inst in self._removed:  # removed and added back before the list was next read
            self.instructions  # noqa: B018 (drops the removed ones now, so it is listed once)
        inst.parent = self
        params = self._parameter_list()  # in step with the list before the change
        holders = self.control_holders()
        insts = self._instructions
        insts.append(inst)
        if inst.opcode == "parameter":
            params.append(inst)
        self._params = (insts, len(insts), params)
        if inst.control_predecessors:
            holders.append(inst)
        self._control_holders = (insts, len(insts), control_list.edits(), holders)
        self._edits += 1
        return inst

    def add_parameter(self, shape: Shape, name: str = "") -> HloInstruction:
        """Append a new parameter with the next parameter number."""
        p = HloInstruction("parameter", shape, name=name or f"param_{len(self.parameters)}")
        p.parameter_number = len(self.parameters)
        return self.add_instruction(p)

    def remove_detached(self, insts: Iterable[HloInstruction]) -> None:
        """Remove instructions already cut out of the graph (no operands, no users, no control
        edge of a survivor naming them, none the root): O(len(insts)), each dropped from the list
        lazily as `remove_instruction` does, its name released."""
        params = self._parameter_list()  # in step with the list before the change
        removed = self._removed
        module = self.parent
        self._edits += 1
        for inst in insts:
            removed.add(inst)
            if inst.opcode == "parameter":
                params.remove(inst)
            inst.parent = None
            if module is not None:
                module.release_name(inst.name)

    def remove_instruction(self, inst: HloInstruction) -> None:
        """Remove an instruction that has no users (and is not the root)."""
        if inst.users:
            raise ValueError(f"cannot remove {inst.name}: it still has users {[u.name for u in inst.users]}")
        if self.root is inst:
            raise ValueError(f"cannot remove {inst.name}: it is the root of {self.name}")
        if inst.parent is not self:
            raise ValueError(f"cannot remove {inst.name}: it is not an instruction of {self.name}")
        inst.detach_operands()
        # Only instructions with control predecessors can name `inst` (`control_holders`);
        # list.remove on their lists directly: this edit keeps the holders valid
        for other in self.control_successors(inst):
            while any(c is inst for c in other.control_predecessors):
                list.remove(other.control_predecessors, inst)
        params = self._parameter_list()  # in step with the list before the change
        self._removed.add(inst)  # dropped from the list when it is next read
        self._edits += 1
        if inst.opcode == "parameter":
            params.remove(inst)
        inst.parent = None
        if self.parent is not None:
            self.parent.release_name(inst.name)

    def post_order(self) -> list[HloInstruction]:
        """Instructions ordered so that operands come before users (control edges too)."""
        return instruction_post_order(self)

    def sort_instructions(self) -> None:
        """Reorder the instruction list into a post order (stable where already ordered)."""
        if not in_post_order(self):
            self.instructions = self.post_order()

    def instruction(self, name: str) -> HloInstruction:
        """The instruction called `name`."""
        for inst in self.instructions:
            if inst.name == name:
                return inst
        raise KeyError(f"no instruction named {name} in computation {self.name}")

    def to_graph(self):
        """A networkx DiGraph view (operand -> user edges) over instruction names."""
        import networkx as nx

        g = nx.DiGraph()
        for inst in self.instructions:
            g.add_node(inst.name, inst=inst)
        for inst in self.instructions:
            for op in inst.operands:
                g.add_edge(op.name, inst.name)
        return g

    def is_fusion_computation(self) -> bool:
        """Whether this is the fused computation of a fusion instruction."""
        return self.fusion_instruction is not None

    def __repr__(self) -> str:
        return f"<computation {self.name}: {len(self.instructions)} instructions>"


class HloModule:
    """A module: named computations, one of which is the entry."""

    __getattr__ = read_pending
    __getstate__ = state_to_copy

    def __init__(self, name: str) -> None:
        self.name = name
        self.computations: list[HloComputation] = []
        self.entry: HloComputation | None = None
        self.attrs: dict[str, Any] = {}  # header attributes (kept raw for printing)
        self.extra_sections: list[str] = []  # FileNames / StackFrames ... kept verbatim
        # How many instructions and computations hold each name: a name is free for
        # `unique_name` only when nothing holds it. A count, not a set, because one name may be
        # held twice (an instruction `add` and a computation `add`, which live in separate
        # namespaces in XLA): removing one must not free the name the other still holds.
        self._names: dict[str, int] = {}
        self._next_suffix: dict[str, int] = {}  # the next N `unique_name` tries for `wanted.N`
        # The decisions of the fusion passes run on this module (a passes/fusion/decisions.py
        # FusionLog, created by the first fusion pass; codegen's kernel planner adds to it):
        # None until a fusion pass runs. Typed loosely because hlo/ does not import passes/.
        self._fusion_log: Any = None
        # Reads the log on first use (`fusion_log`), for a module loaded from a compile cache
        # entry (codegen/module_cache.py), where only a report reads it; None otherwise.
        self._fusion_log_reader: Any = None

    @property
    def fusion_log(self) -> Any:
        """The decisions of the fusion passes run on this module (see __init__), or None."""
        if self._fusion_log_reader is not None:
            self._fusion_log = self._fusion_log_reader()
            self._fusion_log_reader = None
        return self._fusion_log

    @fusion_log.setter
    def fusion_log(self, log: Any) -> None:
        self._fusion_log = log
        self._fusion_log_reader = None

    # ---- names --------------------------------------------------------------------------
    # Every pass that creates, clones or renames an instruction or computation goes through
    # these (HloComputation.add_instruction and HloModule.add_computation call them), as XLA's
    # passes go through the module's NameUniquer; a module built so keeps every instruction
    # name unique module-wide, which the verifier checks.
    def unique_name(self, wanted: str) -> str:
        """`wanted` if unused in the module, else `wanted.N` for the first free N; the name
        returned is taken (release it with `release_name`)."""
        names = self._names
        if not names.get(wanted):
            names[wanted] = 1
            return wanted
        n = self._next_suffix.get(wanted, 1)
        while names.get(f"{wanted}.{n}"):
            n += 1
        self._next_suffix[wanted] = n + 1
        candidate = f"{wanted}.{n}"
        names[candidate] = 1
        return candidate

    def name_in_use(self, name: str) -> bool:
        """Whether an instruction or computation of the module holds `name`."""
        return bool(self._names.get(name))

    def reserve_name(self, name: str) -> None:
        """Mark `name` as held once more, so `unique_name` will not hand it out."""
        self._names[name] = self._names.get(name, 0) + 1

    def release_name(self, name: str) -> None:
        """Drop one hold on `name` (it is free for `unique_name` once nothing holds it)."""
        count = self._names.get(name, 0)
        if count <= 1:
            self._names.pop(name, None)
        else:
            self._names[name] = count - 1

    def rename_instruction(self, inst: HloInstruction, wanted: str) -> str:
        """Give `inst` (an instruction of this module) the name `wanted`, or `wanted.N` when
        that is taken; returns the name given."""
        if inst.name == wanted:
            return wanted
        self.release_name(inst.name)
        inst.name = self.unique_name(wanted)
        return inst.name

    # ---- computations -------------------------------------------------------------------
    def add_computation(self, comp: HloComputation, entry: bool = False) -> HloComputation:
        """Add a computation (names of it and its instructions made unique in the module)."""
        comp.name = self.unique_name(comp.name)
        comp.parent = self
        for inst in comp.instructions:
            inst.name = self.unique_name(inst.name)
        self.computations.append(comp)
        if entry:
            self.set_entry(comp)
        return comp

    def set_entry(self, comp: HloComputation) -> None:
        """Make `comp` the entry computation."""
        if self.entry is not None:
            self.entry.is_entry = False
        self.entry = comp
        comp.is_entry = True

    def remove_computation(self, comp: HloComputation) -> None:
        """Drop `comp` from the module and free its names."""
        self.computations.remove(comp)
        self.release_name(comp.name)
        for inst in comp.instructions:
            self.release_name(inst.name)

    def computation(self, name: str) -> HloComputation:
        """The computation called `name`."""
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(f"no computation named {name}")

    def computations_post_order(self) -> list[HloComputation]:
        """Computations ordered callees first, the entry last (any depth of call chains)."""
        roots = [c for c in self.computations if c is not self.entry]
        if self.entry is not None:
            roots.append(self.entry)
        return post_order(roots, _callees)

    def remove_unreachable_computations(self) -> bool:
        """Drop computations not called (transitively) from the entry; True if any went."""
        if self.entry is None:
            return False
        reachable: set[HloComputation] = set()
        stack = [self.entry]
        calling = _CALLING_ATTRS
        while stack:
            c = stack.pop()
            if c in reachable:
                continue
            reachable.add(c)
            for inst in c.instructions:
                if not calling.isdisjoint(inst.attrs):  # (most call nothing: no call made for them)
                    stack.extend(inst.called_computations())
        dead = [c for c in self.computations if c not in reachable]
        for c in dead:
            self.remove_computation(c)
        return bool(dead)

    def all_instructions(self) -> Iterator[HloInstruction]:
        """Every instruction of every computation, computation by computation."""
        for c in self.computations:
            yield from c.instructions

    # ---- text ---------------------------------------------------------------------------
    def to_text(self) -> str:
        """Canonical HLO text, in XLA's style."""
        from .printer import module_to_text

        return module_to_text(self)

    def clone(self) -> "HloModule":
        """A structural deep copy whose instructions' `origin` are this module's instructions
        (hlo/module_clone.clone_module says what is copied and why)."""
        return clone_module(self, HloComputation, HloInstruction)

    def __repr__(self) -> str:
        return f"<HloModule {self.name}: {len(self.computations)} computations>"


def _callees(comp: HloComputation) -> list[HloComputation]:
    """The computations `comp`'s instructions call, in order (repeats included). Most
    instructions call none and are passed over without a call: the module cache's key walks
    every instruction of the module on every compile."""
    out: list[HloComputation] = []
    calling = _CALLING_ATTRS
    for inst in comp.instructions:
        attrs = inst.attrs
        if attrs and not calling.isdisjoint(attrs):
            out.extend(inst.called_computations())
    return out
