"""Linking a parsed computation: operands and control predecessors resolved by name (with the
shapes written at the use checked against the definition, as XLA does), parameter numbers
checked, instructions put in dependency order, and called computations resolved by name.

A mixin of the HLO parser (hlo/parser.py), which provides `lex`, `shapes`, `comp_refs`,
`computations` and `_name_pos`.
"""
from __future__ import annotations

from .ir import HloComputation, HloInstruction
from .parse_infer import same_ignoring_layout
from .parse_short_forms import Pending


class Linking:
    """The parser's linking steps (see the module docstring)."""

    def _link(self, comp: HloComputation, pending: list[Pending], by_name: dict[str, HloInstruction]) -> None:
        lex = self.lex
        numbers: dict[int, HloInstruction] = {}
        cache = self.shapes.cache
        for item in pending:
            inst = item.inst
            ops = inst.operands
            for op_name, pos, declared, declared_pos in item.operands:
                op = by_name.get(op_name)
                if op is None:
                    raise lex.error(f"operand '{op_name}' of '{inst.name}' is not defined in computation "
                                    f"'{comp.name}'", pos)
                # Usually the declared text was read before as the operand's own shape, so the
                # shape cache hands back the very same object.
                if declared is not None and cache.get(declared, declared) is not op.shape:
                    self._check_operand_shape(inst, op, declared, declared_pos or pos)
                ops.append(op)
                op.users.append(inst)  # a repeated operand (add(x, x)): already a user, kept
            for op_name, pos in item.controls:
                op = by_name.get(op_name)
                if op is None:
                    raise lex.error(f"control predecessor '{op_name}' of '{inst.name}' is not defined in "
                                    f"computation '{comp.name}'", pos)
                inst.control_predecessors.append(op)
            for key, ref in item.comp_refs:
                self.comp_refs.append((inst, key, ref))
            if inst.opcode == "parameter":
                n = inst.parameter_number
                if n in numbers:
                    raise lex.error(f"parameter number {n} is used by both '{numbers[n].name}' and '{inst.name}'",
                                    self._name_pos.get(inst, 0))
                numbers[n] = inst
        if sorted(numbers) != list(range(len(numbers))):
            missing = min(set(range(len(numbers))) - set(numbers))
            raise lex.error(f"computation '{comp.name}' has no parameter({missing}) but has "
                            f"parameter({max(numbers)})", self._name_pos.get(numbers[max(numbers)], 0))
        if self._first_unordered(comp) is not None:
            comp.sort_instructions()
            bad = self._first_unordered(comp)
            if bad is not None:
                raise lex.error(f"instruction '{bad.name}' depends on itself: its operands form a cycle",
                                self._name_pos.get(bad, 0))

    def _check_operand_shape(self, inst: HloInstruction, op: HloInstruction, declared, pos: int) -> None:
        """Like XLA, refuse an operand written with a shape other than its definition's."""
        if isinstance(declared, str):
            declared = self.shapes.cached(declared, pos)
        if declared is op.shape or op.shape is None or same_ignoring_layout(declared, op.shape):
            return
        raise self.lex.error(f"operand '{op.name}' of '{inst.name}' is written as {declared.to_text(False)} but "
                             f"'{op.name}' has shape {op.shape.to_text(False)}", pos)

    @staticmethod
    def _first_unordered(comp: HloComputation) -> HloInstruction | None:
        """The first instruction that uses something defined after it, or None."""
        seen: set[HloInstruction] = set()
        for inst in comp.instructions:
            for op in inst.operands:
                if op not in seen:
                    return inst
            for op in inst.control_predecessors:
                if op not in seen:
                    return inst
            seen.add(inst)
        return None

    def _resolve_computation_refs(self) -> None:
        lex = self.lex
        for inst, key, ref in self.comp_refs:
            found = []
            for name, pos in ref.names:
                comp = self.computations.get(name)
                if comp is None:
                    raise lex.error(f"computation '{name}' used by '{inst.name}' ({key}) is not defined", pos)
                found.append(comp)
            inst.attrs[key] = tuple(found) if ref.is_list else found[0]
            if inst.opcode == "fusion" and key == "calls":
                callee = found[0]
                if callee.fusion_instruction is not None:
                    raise lex.error(f"computation '{callee.name}' is called by two fusions "
                                    f"('{callee.fusion_instruction.name}' and '{inst.name}')", ref.names[0][1])
                callee.fusion_instruction = inst
