"""`HloInstruction`: one HLO instruction and its operand / user edits (apart from hlo/ir.py so
that neither file passes the project's ~600-line limit; `hlofuse.hlo.ir` re-exports it and its
module docstring states the IR's conventions: attributes, constants, provenance).

It needs nothing of the computations and modules at run time (they appear only in annotations and
are reached through `parent` and `attrs`), so hlo/ir.py imports this module and not the reverse.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Iterable

from . import control_list
from .attributes import COMPUTATION_ATTRS
from .opcodes import op_info
from .pending_state import read_pending, state_to_copy
from .shapes import Shape
from .users import Users

# `HloComputation` in the annotations below is hlo/ir.py's class, named but not imported (the
# annotations are strings, `from __future__ import annotations`): importing it, even under
# TYPE_CHECKING, would make ir.py and this module import each other.

# The attributes whose values are called computations, as a set: `called_computations` and
# hlo/ir.py's `_callees` test an instruction's attributes against it in one C call.
_CALLING_ATTRS = frozenset(COMPUTATION_ATTRS)


class HloInstruction:
    """One HLO instruction: an opcode applied to operands, producing a value of `shape`.

    Instructions compare and hash by identity (no `__eq__`: tests/hlo/test_ir_fast_paths.py
    checks it), so `op in inst.operands`, `inst.operands.index(op)` and `.count(op)` find the
    very instruction `op` at the speed of C: the graph's edits and fusion's look-ups use them
    instead of Python loops comparing with `is`."""

    __getattr__ = read_pending
    __getstate__ = state_to_copy

    def __init__(
        self,
        opcode: str,
        shape: Shape,
        operands: Iterable["HloInstruction"] = (),
        attrs: dict[str, Any] | None = None,
        name: str = "",
    ) -> None:
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands: list[HloInstruction] = []
        self.users: Users = Users()  # an ordered set read like a list (hlo/users.py)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self._control: control_list.ControlList = control_list.ControlList()
        self.literal = None  # numpy array for constants
        self.parameter_number: int = -1
        self.parent: HloComputation | None = None
        # the instruction this one was made from (see the module docstring); None: not a copy
        self.origin: HloInstruction | None = None
        ops = self.operands
        for op in operands:  # `append_operand`, written out (every clone comes through here)
            if op not in ops:
                op.users.append(self)
            ops.append(op)

    # ---- control edges --------------------------------------------------------------------
    def _set_control(self, value: Iterable["HloInstruction"]) -> None:
        new = control_list.ControlList(value)
        if new or self._control:  # emptying an empty list changes nothing anyone keeps
            control_list.bump()
        self._control = new

    # (read through attrgetter, in C: every walk of the graph reads it for every instruction)
    control_predecessors = property(
        attrgetter("_control"), _set_control,
        doc="""Instructions that must run before this one (a list; every change to it is counted,
        hlo/control_list.py, so computations can keep who has control edges).""")

    # ---- operands and users -------------------------------------------------------------
    def operand(self, i: int) -> "HloInstruction":
        """Operand `i`."""
        return self.operands[i]

    def append_operand(self, op: "HloInstruction") -> None:
        """Add `op` as the last operand (and this instruction to its users).

        This instruction is among `op`'s users exactly when `op` is already one of its operands
        (the invariant every edit keeps), so the check looks at our few operands, not at `op`'s
        users, which a parameter read by thousands makes long (building a module was quadratic)."""
        already = op in self.operands  # (identity: see `HloInstruction`'s docstring)
        self.operands.append(op)
        if not already:
            op.users.append(self)

    def _drop_user_if_unused(self, op: "HloInstruction") -> None:
        if op not in self.operands:
            _remove_user(op, self)

    def replace_operand(self, index: int, new: "HloInstruction") -> None:
        """Make operand `index` be `new`, keeping users in step.

        Whether this instruction is already among `new`'s users is read from our other
        operands (the invariant `append_operand` states), not from `new`'s users: fusion
        points every user of a parameter read by thousands at another instruction."""
        ops = self.operands
        old = ops[index]
        if old is new:
            return
        ops[index] = new
        self._drop_user_if_unused(old)
        if ops.count(new) == 1:  # (the one at `index`: `new` is read nowhere else here)
            new.users.append(self)

    def replace_operand_with(self, old: "HloInstruction", new: "HloInstruction") -> None:
        """Replace every occurrence of `old` among the operands by `new`."""
        if old not in self.operands:
            return
        for i, op in enumerate(self.operands):
            if op is old:
                self.replace_operand(i, new)

    def replace_all_uses_with(self, new: "HloInstruction") -> None:
        """Point every user (and the computation root, if this is it) at `new`."""
        for user in list(self.users):
            if user is new:
                continue
            user.replace_operand_with(self, new)
        if self.parent is not None and self.parent.root is self:
            self.parent.root = new

    def detach_operands(self) -> None:
        """Drop all operand edges (before removal)."""
        for op in self.operands:
            _remove_user(op, self)  # (a repeated operand's second time finds nothing)
        self.operands = []

    def user_count(self) -> int:
        """How many distinct instructions use this one."""
        return len(self.users)

    # ---- called computations ------------------------------------------------------------
    def called_computations(self) -> list["HloComputation"]:
        """Computations this instruction calls, in attribute order."""
        attrs = self.attrs
        out: list[HloComputation] = []
        if _CALLING_ATTRS.isdisjoint(attrs):  # most instructions (the module's key walks them all)
            return out
        for key in COMPUTATION_ATTRS:
            value = attrs.get(key)
            if value is None:
                continue
            if isinstance(value, (tuple, list)):
                out.extend(value)
            else:
                out.append(value)
        return out

    @property
    def fused_computation(self) -> "HloComputation":
        """The computation a `fusion` instruction calls."""
        return self.attrs["calls"]

    # ---- queries ------------------------------------------------------------------------
    def is_root(self) -> bool:
        """Whether this is the root of its computation."""
        return self.parent is not None and self.parent.root is self

    @property
    def info(self):
        """This opcode's row in the op registry."""
        return op_info(self.opcode)

    @property
    def original(self) -> "HloInstruction":
        """`origin`, or this instruction itself when it is no copy."""
        return self.origin if self.origin is not None else self

    def clone(self, name: str | None = None, operands: Iterable["HloInstruction"] | None = None) -> "HloInstruction":
        """A copy with the same opcode, shape, attributes and literal, not in any computation;
        its `origin` is this instruction's `original` (chains of clones collapse)."""
        inst = HloInstruction(
            self.opcode,
            self.shape,
            list(self.operands if operands is None else operands),
            dict(self.attrs),
            name if name is not None else self.name,
        )
        inst.literal = self.literal
        inst.parameter_number = self.parameter_number
        inst.origin = self.original
        return inst

    def to_text(self) -> str:
        """The instruction in HLO text (one line)."""
        from .printer import instruction_to_text

        return instruction_to_text(self)

    def __repr__(self) -> str:
        return f"<{self.opcode} {self.name}: {self.shape}>"


def _remove_user(op: HloInstruction, user: HloInstruction) -> None:
    """Drop `user` from `op`'s users if it is there: O(1), the others keep their order
    (hlo/users.py; a list's removal scanned a parameter's thousands of users)."""
    op.users.pop(user, None)
