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

import gc
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..hlo.attributes import Raw
from ..hlo.errors import HloError, UnsupportedError
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import Shape, TupleShape
from .stablehlo_mlir import (  # noqa: F401 - parse_mlir, mlir_context: this module's API before the split
    ContextState, StableHloImportError, context_state, legalize_chlo, mlir_context, parse_mlir)
from .stablehlo_locations import read_location_metadata
from .stablehlo_types import hlo_shape

_NUMBERED = re.compile(r"(\.\d+)+$")
_FILE_LOC = re.compile(r'"([^"]*)":(\d+):(\d+)')
_NAME_LOC = re.compile(r'^loc\("([^"]*)"[()]')


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


def location_metadata(location_str: str) -> Raw | None:
    """`{op_name="jit(f)/sin" source_file="f.py" source_line=4}` for a printed location that
    has a name, else None."""
    m = _NAME_LOC.match(location_str)
    if not m:
        return None
    f = _FILE_LOC.search(location_str)
    return named_metadata(m.group(1), f.group(1) if f else None, f.group(2) if f else None)


def named_metadata(name: str, file: str | None, line: str | None) -> Raw:
    """The metadata of a location named `name` whose first file location is `file:line`
    (None: it has none; `-`, MLIR's name for parsed text, is left out), as printed text
    gives them (location_metadata)."""
    parts = [f'op_name="{_escape(name)}"']
    if file is not None and file != "-":
        parts.append(f'source_file="{_escape(file)}" source_line={line}')
    return Raw("{" + " ".join(parts) + "}")


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


@dataclass
class _BlockJob:
    """A block waiting to be converted into `scope`, and what to do with its results."""

    block: Any
    scope: Scope
    finish: Callable[[list[HloInstruction]], None]
    ops: Iterator | None = None  # where the conversion stands (set once it started)


_TERMINATORS = frozenset(("func.return", "stablehlo.return"))


class Importer:
    """Converts one parsed (and CHLO-legalized) MLIR module into an HloModule.

    Blocks are converted by one loop over an explicit stack of blocks (`_run`): a rule that
    needs a region converted (a reduce body, a while body, a callee) gets its computation at
    once and the region is queued; the loop converts queued regions right after that op, before
    the op that follows it, so computations are built and named in the same order as by
    recursion, yet nesting depth costs no Python stack.
    """

    def __init__(self, mlir_module, name: str, filename: str | None = None,
                 custom_call_handler: Callable | None = None, state: ContextState | None = None) -> None:
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
        # Caches keyed by what the MLIR context uniques (types, locations, attributes): shared by the
        # imports that reuse the context when its state is given.
        self._shapes: dict = state.shapes if state is not None else {}
        self._metadata: dict = state.metadata if state is not None else {}
        self.attr_values: dict = state.attr_values if state is not None else {}  # (stablehlo_ops._ints)
        self._metadata_of: tuple[Any, Raw | None] = (None, None)  # (op, its metadata), the last looked up
        self._free: dict = {}  # first block of a region -> its free values
        self._queued: list[_BlockJob] | None = None  # regions queued by the op being converted

    # ---- errors ------------------------------------------------------------------------
    def unsupported(self, reason: str, op=None) -> UnsupportedError:
        """An UnsupportedError naming the op and its source location."""
        op = op if op is not None else self.op
        if op is None:
            return UnsupportedError(f"{self.filename or '<unknown>'}: {reason}")
        source = location_name(op)
        what = op.name + (f" ({source})" if source else "")
        return UnsupportedError(f"{location_text(op, self.filename)}: {what}: {reason}")

    # ---- types -------------------------------------------------------------------------
    def shape(self, mlir_type) -> Shape:
        """The hlofuse shape of an MLIR type (converted once per distinct type)."""
        shape = self._shapes.get(mlir_type)
        if shape is None:
            shape = self._shapes[mlir_type] = hlo_shape(mlir_type)
        return shape

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
        self._convert(block, scope, lambda results: self._finish(comp, results))
        return comp

    def _finish(self, comp: HloComputation, results: list[HloInstruction]) -> None:
        comp.root = self.pack(comp, results)
        self.module.add_computation(comp)

    def _parameter_scope(self, comp: HloComputation, block) -> Scope:
        """A scope for `comp` in which the block's arguments are its parameters `Arg_<i>`."""
        scope = Scope(comp)
        for i, arg in enumerate(block.arguments):
            p = HloInstruction("parameter", self.shape(arg.type), name=f"Arg_{i}")
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
        for value in self.free_values(region):
            # MLIR's folders hoist constants out of regions; HLO computations get their own copy.
            owner = getattr(value.owner, "operation", None)  # None for a block argument
            if owner is None or owner.name != "stablehlo.constant":
                raise self.unsupported(f"region of {name} uses a value of the enclosing function")
            scope.values[value] = self.constant_copy(owner, scope)
        self._convert(block, scope, lambda results: self._finish(comp, results))
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

        def finish(results: list[HloInstruction]) -> None:
            if extra_outputs:
                results = list(results) + passthrough
                comp.root = self._tuple(comp, results)
            else:
                comp.root = self.pack(comp, results)
            self.module.add_computation(comp)

        self._convert(block, scope, finish)
        return comp

    # ---- blocks and ops ----------------------------------------------------------------
    def block(self, block, scope: Scope) -> list[HloInstruction]:
        """Convert the ops of a block (and the regions they hold) now; return the HLO values
        of its terminator's operands."""
        out: list[HloInstruction] = []
        self._run(_BlockJob(block, scope, out.extend))
        return out

    def _convert(self, block, scope: Scope, finish: Callable[[list[HloInstruction]], None]) -> None:
        """Convert `block` and pass its results to `finish`: queued when an op is being
        converted (the loop of `_run` takes it next), else at once."""
        job = _BlockJob(block, scope, finish)
        if self._queued is None:
            self._run(job)
        else:
            self._queued.append(job)

    def _run(self, job: _BlockJob) -> None:
        """Convert `job` and the regions its ops queue, depth first, on an explicit stack."""
        from .stablehlo_ops import rule_for

        outer = self._queued, self.op
        stack = [job]
        try:
            while stack:
                job = stack[-1]
                if job.ops is None:
                    # A generator: the bindings' iterator object does not keep its position
                    # across `for` loops (iter() of it starts again).
                    job.ops = (op for op in job.block.operations)
                values = job.scope.values
                self._queued = queued = []
                for op in job.ops:
                    op = op.operation
                    self.op = op
                    name = op.name
                    if name in _TERMINATORS:
                        results = [job.scope.get(v) for v in op.operands]
                        stack.pop()
                        job.finish(results)
                        break
                    rule = rule_for(name)
                    if rule is None:
                        raise self.unsupported("hlofuse cannot import this op")
                    try:
                        results = rule(self, op, job.scope)
                    except HloError:
                        raise
                    except Exception as e:  # a malformed attribute and the like: name the op
                        raise self.unsupported(f"cannot convert: {type(e).__name__}: {e}", op) from e
                    self.op = op
                    mlir_results = op.results
                    if not isinstance(results, (list, tuple)):
                        results = [results]
                    if len(results) != len(mlir_results):
                        raise self.unsupported(f"converted to {len(results)} values, the op has {len(mlir_results)}")
                    for value, inst in zip(mlir_results, results):
                        values[value] = inst
                    if queued:  # convert the op's regions before its successors
                        stack.extend(reversed(queued))
                        break
                else:
                    raise self.unsupported("block has no terminator")
        finally:
            self._queued, self.op = outer

    def _add(self, comp: HloComputation, inst: HloInstruction) -> HloInstruction:
        _append(comp, inst)
        return inst

    def emit(self, scope: Scope, opcode: str, shape: Shape, operands=(), attrs=None, name: str | None = None) -> HloInstruction:
        """Add a new instruction to the computation being built (with XLA-style `metadata`
        naming the JAX op and source line when the MLIR op's location has them)."""
        inst = HloInstruction(opcode, shape, (), attrs, name or opcode)  # copies attrs
        metadata = self.metadata(self.op)
        if metadata is not None:
            inst.attrs.setdefault("metadata", metadata)
        _wire_operands(inst, operands)
        _append(scope.comp, inst)
        return inst

    def metadata(self, op) -> Raw | None:
        """`{op_name="jit(f)/sin" source_file="f.py" source_line=4}` for a named op, else None.

        Printing a location costs more than converting most ops (JAX's locations are call-site
        chains), so it is read once per distinct location (`loc.attr` is uniqued by MLIR) and
        once per op."""
        if op is None:
            return None
        last_op, last = self._metadata_of
        if op is last_op:
            return last
        loc = op.location.attr
        try:
            metadata = self._metadata[loc]
        except KeyError:
            metadata = self._metadata[loc] = location_metadata(str(loc))
        self._metadata_of = (op, metadata)
        return metadata

    def pack(self, comp: HloComputation, values: list[HloInstruction]) -> HloInstruction:
        """One value as is; several (or none) as a tuple."""
        if len(values) == 1:
            return values[0]
        return self._tuple(comp, values)

    def _tuple(self, comp: HloComputation, values: list[HloInstruction]) -> HloInstruction:
        """A tuple of `values` added to `comp` (its operands wired by `_wire_operands`: the
        constructor's per-operand check made the root tuple of a training step, hundreds of
        outputs, quadratic)."""
        inst = HloInstruction("tuple", TupleShape(tuple(v.shape for v in values)), (), None, "tuple")
        _wire_operands(inst, values)
        return self._add(comp, inst)

    def unpack(self, scope: Scope, inst: HloInstruction, count: int) -> list[HloInstruction]:
        """get-tuple-elements of a tuple-shaped instruction (the value itself if count == 1 and not a tuple)."""
        if not inst.shape.is_tuple:
            return [inst]
        return [self.emit(scope, "get-tuple-element", inst.shape.elements[i], [inst], {"index": i})
                for i in range(count)]

    def free_values(self, region) -> list:
        """`free_values(region)`, computed for a region and all regions nested in it by one walk
        (a nested region's list is then looked up, not recomputed by another walk)."""
        blocks = region.blocks
        if len(blocks) == 0:
            return []
        key = blocks[0]
        found = self._free.get(key)
        if found is None:
            self._free.update(_free_values_nested(region))
            found = self._free[key]
        return found


def _append(comp: HloComputation, inst: HloInstruction) -> None:
    """Add a new instruction to a computation being built, as the HLO parser does: appended
    to the list, its name left as given. The computation's names are made unique once it is
    added to the module (`HloModule.add_computation`), which is all that `add_instruction`
    would do besides keeping its parameter and control caches in step on every call (they are
    rebuilt once when next read)."""
    if comp.parent is not None:  # already in the module (not expected): the general path
        comp.add_instruction(inst)
        return
    inst.parent = comp
    comp.instructions.append(inst)


def _wire_operands(inst: HloInstruction, operands) -> None:
    """Give a new instruction its operands, all at once, as the HLO parser does (users are an
    ordered set, hlo/users.py: a repeated operand, add(x, x), adds the user once)."""
    inst.operands.extend(operands)
    for op in inst.operands:
        op.users.append(inst)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _sym_name(func_op) -> str:
    return str(func_op.attributes["sym_name"]).strip('"')


def free_values(region) -> list:
    """Values used inside `region` (nested regions included) but defined outside it, in first-use order."""
    if len(region.blocks) == 0:
        return []
    return _free_values_nested(region)[region.blocks[0]]


def _free_values_nested(region) -> dict:
    """Free values (as `free_values`) of `region` and of every region nested in it, keyed by
    each region's first block; one iterative walk, so nesting depth costs no Python stack.

    A value used at nesting depth k and defined at depth d (-1: outside `region`) is free in
    the open regions at depths d+1 .. k; each region keeps its own first-use order."""
    depth_of: dict = {}  # value -> depth of the region defining it
    out: dict = {}
    # One frame per open region, outermost first: [ops, later sibling regions, free list, free set, key].
    stack: list[list] = []

    def open_region(r, siblings: list) -> None:
        key = r.blocks[0] if len(r.blocks) else None
        stack.append([_ops_of_region(r, len(stack), depth_of), siblings, [], set(), key])

    open_region(region, [])
    while stack:
        frame = stack[-1]
        op = next(frame[0], None)
        if op is None:
            stack.pop()
            if frame[4] is not None:
                out[frame[4]] = frame[2]
            if frame[1]:  # the op's next region, at the same depth
                open_region(frame[1][0], frame[1][1:])
            continue
        depth = len(stack) - 1
        for v in op.operands:
            for d in range(depth_of.get(v, -1) + 1, depth + 1):
                f = stack[d]
                if v not in f[3]:
                    f[3].add(v)
                    f[2].append(v)
        for v in op.results:
            depth_of[v] = depth
        regions = list(op.regions)
        if regions:
            open_region(regions[0], regions[1:])
    return out


def _ops_of_region(region, depth: int, depth_of: dict) -> Iterator:
    """The ops of a region's blocks in order, recording block arguments as defined at `depth`."""
    for b in region.blocks:
        for a in b.arguments:
            depth_of[a] = depth
        for op in b.operations:
            yield op.operation
def from_stablehlo(source: str | bytes, entry: str = "main", filename: str | None = None,
                   inline_calls: bool = True, custom_call_handler: Callable | None = None,
                   module_name: str | None = None) -> HloModule:
    """Import StableHLO (text or bytecode) as an HloModule whose entry is `@entry`.

    CHLO ops are legalized first. `func.call` becomes `call`; with `inline_calls` the calls
    are then inlined (as XLA's CallInliner does). `custom_call_handler(importer, op, scope, target)`
    may convert custom calls the importer does not know (return None to refuse).
    """
    state = context_state(len(source))
    # The import only builds objects that stay alive (as the HLO parser, which does the same):
    # the cyclic collector's passes over the growing graph would find nothing to free.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with state.context:
            mod = parse_mlir(source, filename)
            if isinstance(source, str) and "\n#loc" in source:  # locations as aliases, as JAX writes them
                read_location_metadata(source, state.metadata, named_metadata)
            # Text without "chlo." has no CHLO op (generic form included): no pass to run.
            if not isinstance(source, str) or "chlo." in source:
                legalize_chlo(mod, state)
            name = re.sub(r"[^A-Za-z0-9_.\-]", "_", module_name or _module_name(mod)) or "module"
            importer = Importer(mod, name, filename, custom_call_handler, state)
            module = importer.import_entry(entry)
        if inline_calls and _inline_all_calls(module):
            _remove_inlined_functions(module, importer.converted.values())
    finally:
        if gc_was_enabled:
            gc.enable()
    return module


def _remove_inlined_functions(module: HloModule, functions) -> None:
    """Drop the computations of inlined functions: what `remove_unreachable_computations`
    would drop, without its walk over every instruction's attributes (a fifth of the import
    of a JAX program). The walk converts only what the entry reaches and only `call`s name a
    function (region computations stay referenced by the copies of their instructions), so
    once no `call` is left, the functions other than the entry are exactly the unreachable
    computations."""
    if any(inst.opcode == "call" for comp in module.computations for inst in comp.instructions):
        module.remove_unreachable_computations()  # not expected: let the general walk decide
        return
    dropped = {f for f in functions if f is not module.entry}
    for comp in [c for c in module.computations if c in dropped]:
        module.remove_computation(comp)


def _module_name(mod) -> str:
    try:
        return str(mod.operation.attributes["sym_name"]).strip('"')
    except (KeyError, IndexError):
        return "module"


def inline_all_calls(module: HloModule) -> None:
    """Replace every `call` instruction by a copy of its callee; drop unreachable computations."""
    _inline_all_calls(module)
    module.remove_unreachable_computations()


def _inline_all_calls(module: HloModule) -> bool:
    """Inline every `call` (calls copied in from callees in later rounds); True if any was."""
    inlined = False
    changed = True
    while changed:
        changed = False
        for comp in list(module.computations):
            changed |= _inline_calls_of(comp)
        inlined |= changed
    return inlined


def _inline_calls_of(comp: HloComputation) -> bool:
    """Inline the calls among `comp`'s instructions (not those the copies bring in).

    Each call's copies are named and the call removed one call after the other, as
    `inline_call` does, but the instruction list is put in order once at the end (each call
    replaced by its copies where it stood): placing each copy at its call by list insertion
    made a computation with many calls quadratic."""
    snapshot = list(comp.instructions)
    copies: dict[HloInstruction, list[HloInstruction]] = {}
    for inst in snapshot:
        if inst.opcode == "call" and inst.parent is comp:
            copies[inst] = _inline_call_appending(inst)[0]
    if not copies:
        return False
    order: list[HloInstruction] = []
    for inst in snapshot:
        if inst in copies:
            order.extend(copies[inst])
        elif inst.parent is comp:
            order.append(inst)
    placed = set(order)
    comp.instructions[:] = order + [i for i in comp.instructions if i not in placed]
    return True


def _inline_call_appending(call: HloInstruction) -> tuple[list[HloInstruction], HloInstruction]:
    """Inline one `call` with its callee's copies appended to the caller's instruction list;
    returns the copies (in the callee's post order) and the instruction that replaced the call."""
    comp = call.parent
    callee: HloComputation = call.attrs["to_apply"]
    mapping: dict[HloInstruction, HloInstruction] = {}
    new: list[HloInstruction] = []
    for inst in callee.post_order():
        if inst.opcode == "parameter":
            mapping[inst] = call.operands[inst.parameter_number]
            continue
        clone = inst.clone(name=_NUMBERED.sub("", inst.name), operands=())
        _wire_operands(clone, [mapping[o] for o in inst.operands])
        mapping[inst] = clone
        comp.add_instruction(clone)
        new.append(clone)
    result = mapping[callee.root]
    call.replace_all_uses_with(result)
    comp.remove_instruction(call)
    return new, result


def inline_call(call: HloInstruction) -> HloInstruction:
    """Inline one `call`; returns the instruction that replaced it."""
    comp = call.parent
    pos = comp.instructions.index(call)
    new, result = _inline_call_appending(call)
    # Keep the instruction list in a valid order: the clones go where the call was.
    del comp.instructions[len(comp.instructions) - len(new):]
    comp.instructions[pos:pos] = new
    return result
