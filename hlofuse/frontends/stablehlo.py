"""StableHLO import: MLIR (text or bytecode, as JAX exports it) -> hlofuse HloModule.

The module is parsed by jaxlib's MLIR bindings (never by hand). CHLO ops are first legalized
to StableHLO by the `chlo-legalize-to-stablehlo` pass, which is the decomposition XLA itself
uses. Then every `func.func` reachable from the entry becomes an HloComputation, and each op
is converted by the rule registered for its name in `stablehlo_ops` (the op rules live there;
this file holds the walk: functions, regions, values, names and locations).

Regions of `while`, `if` and `case` may use values of the enclosing function (implicit
capture); HLO computations cannot, so captured values are passed in explicitly (added to the
loop state of a `while`, passed as branch operands of a `conditional`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ..hlo.attributes import Raw
from ..hlo.errors import HloError, UnsupportedError
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import Shape, TupleShape
from .stablehlo_types import hlo_shape

_NUMBERED = re.compile(r"(\.\d+)+$")
_FILE_LOC = re.compile(r'"([^"]*)":(\d+):(\d+)')
_NAME_LOC = re.compile(r'^loc\("([^"]*)"[()]')


class StableHloImportError(HloError):
    """The StableHLO module could not be parsed or legalized."""


def mlir_context():
    """A fresh MLIR context with the StableHLO, CHLO and func dialects (jaxlib's)."""
    from jax._src.interpreters import mlir

    return mlir.make_ir_context()


def _register_passes() -> None:
    from jaxlib.mlir._mlir_libs import _stablehlo

    if not getattr(_register_passes, "done", False):
        _stablehlo.register_stablehlo_passes()
        _register_passes.done = True


def parse_mlir(source: str | bytes):
    """Parse StableHLO text or bytecode (portable artifacts included) into an ir.Module."""
    from jax._src.lib.mlir import ir

    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
        if not data.startswith(b"ML\xefR"):
            return _parse_text(data.decode("utf-8", errors="replace"), ir)
        try:
            module = ir.Module.parse(data)
        except Exception as e:  # noqa: BLE001 - MLIR says why
            raise StableHloImportError(f"cannot read MLIR bytecode: {e}") from None
        if any(op.operation.name.startswith("vhlo.") for op in module.body.operations):
            # A portable artifact (versioned VHLO, as jax.export serializes): back to StableHLO.
            from jax._src.lib import _jax

            try:
                module = _jax.mlir.deserialize_portable_artifact(data)
            except Exception as e:  # noqa: BLE001
                raise StableHloImportError(f"cannot deserialize the StableHLO portable artifact: {e}") from None
        return module
    return _parse_text(source, ir)


def _parse_text(text: str, ir):
    try:
        return ir.Module.parse(text)
    except Exception as e:  # MLIR reports the position in its message
        raise StableHloImportError(f"cannot parse StableHLO: {e}") from None


def legalize_chlo(module) -> None:
    """Rewrite CHLO ops (erf_inv, lgamma, top_k, ...) into StableHLO, as XLA does."""
    from jax._src.lib.mlir import passmanager

    _register_passes()
    try:
        pm = passmanager.PassManager.parse("builtin.module(func.func(chlo-legalize-to-stablehlo))")
        pm.run(module.operation)
    except Exception as e:  # noqa: BLE001
        raise StableHloImportError(f"CHLO legalization failed: {e}") from None


def location_text(op, filename: str | None = None) -> str:
    """Where an MLIR op comes from: `file:line:col` of its first file location (`-`, MLIR's
    name for parsed text, replaced by `filename`), else `filename`, else `<unknown>`."""
    m = _FILE_LOC.search(str(op.location))
    if m:
        name = m.group(1)
        if name == "-" and filename:
            name = filename
        return f"{name}:{m.group(2)}:{m.group(3)}"
    return filename or "<unknown>"


def location_name(op) -> str:
    """The name location of an op (JAX's `jit(f)/sin`, `cholesky`), or ''."""
    m = _NAME_LOC.match(str(op.location))
    return m.group(1) if m else ""


@dataclass
class Scope:
    """Values visible while converting one block: MLIR value -> HLO instruction."""

    comp: HloComputation
    values: dict = field(default_factory=dict)

    def get(self, value) -> HloInstruction:
        """The HLO instruction holding an MLIR value."""
        try:
            return self.values[value]
        except KeyError:
            raise UnsupportedError(f"value {value.get_name()} is used where it is not visible") from None


class Importer:
    """Converts one parsed (and CHLO-legalized) MLIR module into an HloModule."""

    def __init__(self, mlir_module, name: str, filename: str | None = None,
                 custom_call_handler: Callable | None = None) -> None:
        self.mlir_module = mlir_module
        self.filename = filename or "<string>"
        self.module = HloModule(name)
        self.custom_call_handler = custom_call_handler
        self.funcs: dict[str, Any] = {}
        for op in mlir_module.body.operations:
            if op.operation.name == "func.func":
                self.funcs[_sym_name(op)] = op
        self.converted: dict[str, HloComputation] = {}
        self.op: Any = None  # the op being converted, for error messages

    # ---- errors ------------------------------------------------------------------------
    def unsupported(self, reason: str, op=None) -> UnsupportedError:
        """An UnsupportedError naming the op and its source location."""
        op = op if op is not None else self.op
        if op is None:
            return UnsupportedError(f"{self.filename or '<unknown>'}: {reason}")
        source = location_name(op)
        what = op.name + (f" ({source})" if source else "")
        return UnsupportedError(f"{location_text(op, self.filename)}: {what}: {reason}")

    # ---- functions ---------------------------------------------------------------------
    def import_entry(self, entry: str = "main") -> HloModule:
        """Convert `@entry` and everything it calls; the module's entry is its computation."""
        if entry not in self.funcs:
            raise StableHloImportError(
                f"no function @{entry} in the module (functions: {', '.join(sorted(self.funcs)) or 'none'})")
        comp = self.function(entry)
        self.module.set_entry(comp)
        return self.module

    def function(self, name: str) -> HloComputation:
        """The computation of `func.func @name` (converted once, callees first)."""
        if name in self.converted:
            return self.converted[name]
        if name not in self.funcs:
            raise self.unsupported(f"call of unknown function @{name}")
        func = self.funcs[name]
        block = func.regions[0].blocks[0]
        comp = HloComputation(name)
        self.converted[name] = comp
        scope = self._parameter_scope(comp, block)
        results = self.block(block, scope)
        comp.root = self.pack(comp, results)
        self.module.add_computation(comp)
        return comp

    def _parameter_scope(self, comp: HloComputation, block) -> Scope:
        """A scope for `comp` in which the block's arguments are its parameters `Arg_<i>`."""
        scope = Scope(comp)
        for i, arg in enumerate(block.arguments):
            p = HloInstruction("parameter", hlo_shape(arg.type), name=f"Arg_{i}")
            p.parameter_number = i
            scope.values[arg] = p
            self._add(comp, p)
        return scope

    def region_computation(self, region, name: str) -> HloComputation:
        """A computation from a region whose block arguments become parameters (reduce bodies,
        comparators); such regions may not use values of the enclosing function."""
        block = region.blocks[0]
        comp = HloComputation(name)
        scope = self._parameter_scope(comp, block)
        for value in free_values(region):
            # MLIR's folders hoist constants out of regions; HLO computations get their own copy.
            owner = getattr(value.owner, "operation", None)  # None for a block argument
            if owner is None or owner.name != "stablehlo.constant":
                raise self.unsupported(f"region of {name} uses a value of the enclosing function")
            scope.values[value] = self.constant_copy(owner, scope)
        results = self.block(block, scope)
        comp.root = self.pack(comp, results)
        self.module.add_computation(comp)
        return comp

    def constant_copy(self, constant_op, scope: Scope) -> HloInstruction:
        """Convert a `stablehlo.constant` op into the computation of `scope`."""
        from . import stablehlo_ops

        saved, self.op = self.op, constant_op
        try:
            return stablehlo_ops.rule_for("stablehlo.constant")(self, constant_op, scope)
        finally:
            self.op = saved

    def tuple_region_computation(self, region, name: str, state: list, extra_outputs: bool) -> HloComputation:
        """A computation taking one tuple parameter: the block arguments then captured values.

        `state` lists (mlir value or None for a block argument, shape) in tuple order. With
        `extra_outputs` the root is a tuple of the region's results followed by the captured
        values passed through (a while body); otherwise the region's results (packed).
        """
        block = region.blocks[0]
        comp = HloComputation(name)
        scope = Scope(comp)
        shape = TupleShape(tuple(s for _, s in state))
        p = HloInstruction("parameter", shape, name="param")
        p.parameter_number = 0
        self._add(comp, p)
        args = list(block.arguments)
        passthrough = []
        for i, (value, s) in enumerate(state):
            g = self._add(comp, HloInstruction("get-tuple-element", s, [p], {"index": i}, "get-tuple-element"))
            if i < len(args):
                scope.values[args[i]] = g
            else:
                scope.values[value] = g
                passthrough.append(g)
        results = self.block(block, scope)
        if extra_outputs:
            results = list(results) + passthrough
            comp.root = self._add(comp, HloInstruction("tuple", TupleShape(tuple(r.shape for r in results)),
                                                      results, name="tuple"))
        else:
            comp.root = self.pack(comp, results)
        self.module.add_computation(comp)
        return comp

    # ---- blocks and ops ----------------------------------------------------------------
    def block(self, block, scope: Scope) -> list[HloInstruction]:
        """Convert the ops of a block; return the HLO values of its terminator's operands."""
        from . import stablehlo_ops

        for op in block.operations:
            op = op.operation
            self.op = op
            if op.name in ("func.return", "stablehlo.return"):
                return [scope.get(v) for v in op.operands]
            rule = stablehlo_ops.rule_for(op.name)
            if rule is None:
                raise self.unsupported("hlofuse cannot import this op")
            try:
                results = rule(self, op, scope)
            except HloError:
                raise
            except Exception as e:  # a malformed attribute and the like: name the op
                raise self.unsupported(f"cannot convert: {type(e).__name__}: {e}", op) from e
            self.op = op  # converting nested regions moved it
            results = results if isinstance(results, (list, tuple)) else [results]
            if len(results) != len(op.results):
                raise self.unsupported(f"converted to {len(results)} values, the op has {len(op.results)}")
            for value, inst in zip(op.results, results):
                scope.values[value] = inst
        raise self.unsupported("block has no terminator")

    def _add(self, comp: HloComputation, inst: HloInstruction) -> HloInstruction:
        comp.add_instruction(inst)
        return inst

    def emit(self, scope: Scope, opcode: str, shape: Shape, operands=(), attrs=None, name: str | None = None) -> HloInstruction:
        """Add a new instruction to the computation being built (with XLA-style `metadata`
        naming the JAX op and source line when the MLIR op's location has them)."""
        attrs = dict(attrs or {})
        metadata = self.metadata(self.op)
        if metadata is not None:
            attrs.setdefault("metadata", metadata)
        inst = HloInstruction(opcode, shape, list(operands), attrs, name or opcode)
        return self._add(scope.comp, inst)

    def metadata(self, op) -> Raw | None:
        """`{op_name="jit(f)/sin" source_file="f.py" source_line=4}` for a named op, else None."""
        if op is None:
            return None
        name = location_name(op)
        if not name:
            return None
        parts = [f'op_name="{_escape(name)}"']
        m = _FILE_LOC.search(str(op.location))
        if m and m.group(1) != "-":
            parts.append(f'source_file="{_escape(m.group(1))}" source_line={m.group(2)}')
        return Raw("{" + " ".join(parts) + "}")

    def pack(self, comp: HloComputation, values: list[HloInstruction]) -> HloInstruction:
        """One value as is; several (or none) as a tuple."""
        if len(values) == 1:
            return values[0]
        return self._add(comp, HloInstruction("tuple", TupleShape(tuple(v.shape for v in values)), values, name="tuple"))

    def unpack(self, scope: Scope, inst: HloInstruction, count: int) -> list[HloInstruction]:
        """get-tuple-elements of a tuple-shaped instruction (the value itself if count == 1 and not a tuple)."""
        if not inst.shape.is_tuple:
            return [inst]
        return [self.emit(scope, "get-tuple-element", inst.shape.elements[i], [inst], {"index": i})
                for i in range(count)]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _sym_name(func_op) -> str:
    return str(func_op.attributes["sym_name"]).strip('"')


def free_values(region) -> list:
    """Values used inside `region` (nested regions included) but defined outside it, in first-use order."""
    defined = set()
    used: list = []
    seen = set()

    def visit_region(r) -> None:
        for b in r.blocks:
            for a in b.arguments:
                defined.add(a)
            for op in b.operations:
                op = op.operation
                for v in op.operands:
                    if v not in seen:
                        seen.add(v)
                        used.append(v)
                for v in op.results:
                    defined.add(v)
                for inner in op.regions:
                    visit_region(inner)

    visit_region(region)
    return [v for v in used if v not in defined]


def from_stablehlo(source: str | bytes, entry: str = "main", filename: str | None = None,
                   inline_calls: bool = True, custom_call_handler: Callable | None = None,
                   module_name: str | None = None) -> HloModule:
    """Import StableHLO (text or bytecode) as an HloModule whose entry is `@entry`.

    CHLO ops are legalized first. `func.call` becomes `call`; with `inline_calls` the calls
    are then inlined (as XLA's CallInliner does). `custom_call_handler(importer, op, scope, target)`
    may convert custom calls the importer does not know (return None to refuse).
    """
    with mlir_context():
        mod = parse_mlir(source)
        legalize_chlo(mod)
        name = re.sub(r"[^A-Za-z0-9_.\-]", "_", module_name or _module_name(mod)) or "module"
        importer = Importer(mod, name, filename, custom_call_handler)
        module = importer.import_entry(entry)
    if inline_calls:
        inline_all_calls(module)
    return module


def _module_name(mod) -> str:
    try:
        return str(mod.operation.attributes["sym_name"]).strip('"')
    except (KeyError, IndexError):
        return "module"


def inline_all_calls(module: HloModule) -> None:
    """Replace every `call` instruction by a copy of its callee; drop unreachable computations."""
    changed = True
    while changed:
        changed = False
        for comp in list(module.computations):
            for inst in list(comp.instructions):
                if inst.opcode == "call" and inst.parent is comp:
                    inline_call(inst)
                    changed = True
    module.remove_unreachable_computations()


def inline_call(call: HloInstruction) -> HloInstruction:
    """Inline one `call`; returns the instruction that replaced it."""
    comp = call.parent
    callee: HloComputation = call.attrs["to_apply"]
    mapping: dict[int, HloInstruction] = {}
    new: list[HloInstruction] = []
    for inst in callee.post_order():
        if inst.opcode == "parameter":
            mapping[id(inst)] = call.operands[inst.parameter_number]
            continue
        clone = inst.clone(name=_NUMBERED.sub("", inst.name), operands=[mapping[id(o)] for o in inst.operands])
        mapping[id(inst)] = clone
        new.append(clone)
    # Keep the instruction list in a valid order: the clones go right before the call.
    pos = comp.instructions.index(call)
    for k, clone in enumerate(new):
        comp.add_instruction(clone)
        comp.instructions.remove(clone)
        comp.instructions.insert(pos + k, clone)
    result = mapping[id(callee.root)]
    call.replace_all_uses_with(result)
    comp.remove_instruction(call)
    return result
