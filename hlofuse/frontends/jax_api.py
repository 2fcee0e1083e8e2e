"""JAX entry points: `from_exported(exported, *args)`, `compile_exported(exported)` and `jit(fn)`.

A shape-polymorphic export (`jax.export.symbolic_shape("a, b")`) has `tensor<?x...>` arguments,
computes its dimension variables from them (`get_dimension_size`) and checks JAX's dimension
constraints with `custom_call @shape_assertion`. To run it, hlofuse wraps `@main` in a new
`@main` with the concrete argument types (a `stablehlo.convert` to the dynamic type in front
of a call, as JAX itself does), and lets jaxlib's `refine_polymorphic_shapes` (the StableHLO
shape refinement passes, which also evaluate the shape assertions) make every shape static.
The dimension variables are first solved from the arguments here, so that a violation is
reported in JAX's terms ("dimension variable 'b' ...") before refinement.
"""
from __future__ import annotations

import functools
import io
from typing import Any, Callable, Sequence

import numpy as np

from ..hlo.errors import InputError
from ..hlo.ir import HloModule
from .stablehlo import from_stablehlo

_POLY_MAIN = "_hlofuse_polymorphic_main"


def _spec(arg) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of an array or a jax.ShapeDtypeStruct."""
    if hasattr(arg, "shape") and hasattr(arg, "dtype") and not isinstance(arg, np.ndarray) \
            and not hasattr(arg, "__array__"):
        return tuple(int(d) for d in arg.shape), np.dtype(arg.dtype)
    a = np.asarray(arg)
    return tuple(a.shape), a.dtype


def _is_polymorphic(exported) -> bool:
    return any(not isinstance(d, (int, np.integer)) for aval in exported.in_avals for d in aval.shape)


def solve_dimension_variables(exported, specs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> dict[str, int]:
    """Bind each symbolic dimension variable to its size in the arguments; InputError on a
    count, rank, dtype or dimension mismatch (the message names the argument and dimension)."""
    avals = exported.in_avals
    if len(specs) != len(avals):
        raise InputError(f"{exported.fun_name} takes {len(avals)} arguments, got {len(specs)}")
    env: dict[str, int] = {}
    where: dict[str, str] = {}
    for i, (aval, (shape, dtype)) in enumerate(zip(avals, specs)):
        if np.dtype(aval.dtype) != dtype:
            raise InputError(f"args[{i}] of {exported.fun_name} must be {np.dtype(aval.dtype)}, got {dtype}")
        if len(aval.shape) != len(shape):
            raise InputError(f"args[{i}] of {exported.fun_name} must have rank {len(aval.shape)} "
                             f"(shape {_shape_text(aval.shape)}), got shape {shape}")
        for j, (dim, size) in enumerate(zip(aval.shape, shape)):
            var = dim._to_var() if hasattr(dim, "_to_var") else None
            if var is None:
                continue
            if var in env and env[var] != size:
                raise InputError(f"dimension variable '{var}' is {env[var]} from {where[var]} but {size} "
                                 f"from args[{i}].shape[{j}]")
            env[var] = size
            where[var] = f"args[{i}].shape[{j}]"
    for var, size in env.items():
        if size < 1:
            raise InputError(f"dimension variable '{var}' must be >= 1, got {size} from {where[var]}")
    for i, (aval, (shape, _)) in enumerate(zip(avals, specs)):
        for j, (dim, size) in enumerate(zip(aval.shape, shape)):
            want = _evaluate(dim, env)
            if want is not None and want != size:
                raise InputError(f"args[{i}].shape[{j}] must be {dim} = {want} for the "
                                 f"polymorphic shape {_shape_text(aval.shape)}, got {size}")
    _check_constraints(avals, env)
    return env


def _check_constraints(avals, env: dict[str, int]) -> None:
    """Check the explicit constraints of the symbolic scope (`a >= b`, `c == 2*d`)."""
    scopes = dict.fromkeys(d.scope for aval in avals for d in aval.shape if hasattr(d, "scope"))  # each scope once
    for scope in scopes:
        for constraint in getattr(scope, "_explicit_constraints", ()):
            value = _evaluate(constraint.diff, env)
            if value is None:
                continue
            holds = value == 0 if constraint.cmp.name == "EQ" else value >= 0
            if not holds:
                bound = ", ".join(f"{k} = {v}" for k, v in sorted(env.items()))
                raise InputError(f"the arguments violate the dimension constraint '{constraint.debug_str}' "
                                 f"({bound})")


def _evaluate(dim, env: dict[str, int]) -> int | None:
    if isinstance(dim, (int, np.integer)):
        return int(dim)
    try:
        return int(dim._evaluate(env))
    except Exception:  # noqa: BLE001 - not a form we can evaluate; refinement checks it
        return None


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _wrap_static_main(module, specs) -> None:
    """Rename @main and add a new @main with static argument types that calls it."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import func as func_dialect
    from jax._src.lib.mlir.dialects import hlo

    symtab = ir.SymbolTable(module.operation)
    old = symtab["main"]
    ftype = ir.FunctionType(ir.TypeAttr(old.attributes["function_type"]).value)
    inputs = list(ftype.inputs)
    if len(inputs) != len(specs):
        raise InputError(f"the exported @main takes {len(inputs)} arguments (platform index or effect tokens "
                         f"are not supported), got {len(specs)}")
    ir.SymbolTable.set_symbol_name(old, _POLY_MAIN)
    old.attributes["sym_visibility"] = ir.StringAttr.get("private")
    static = [ir.RankedTensorType.get(list(shape), ir.RankedTensorType(t).element_type)
              for (shape, _), t in zip(specs, inputs)]
    with ir.InsertionPoint.at_block_begin(module.body):
        new = func_dialect.FuncOp("main", (static, list(ftype.results)))
        new.attributes["sym_visibility"] = ir.StringAttr.get("public")
        block = new.add_entry_block()
        with ir.InsertionPoint(block):
            args = [hlo.convert(t, a) if a.type != t else a for a, t in zip(block.arguments, inputs)]
            call = func_dialect.CallOp(list(ftype.results), ir.FlatSymbolRefAttr.get(_POLY_MAIN), args)
            func_dialect.ReturnOp(call.results)


def refined_bytecode(exported, specs) -> bytes:
    """The exported module with static shapes for `specs`, as MLIR bytecode."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jaxlib import _jax

    with mlir.make_ir_context(), ir.Location.unknown():
        # The serialized module itself, not `exported.mlir_module()`, which deserializes it in a
        # context of its own and prints it, only for us to parse the text again.
        module = _jax.mlir.deserialize_portable_artifact(exported.mlir_module_serialized)
        _wrap_static_main(module, specs)
        try:
            refined = mlir.refine_polymorphic_shapes(module)
        except Exception as e:  # noqa: BLE001 - JAX's message says which constraint failed
            cause = e.__cause__ or e
            raise InputError(f"shapes {[s for s, _ in specs]} violate the constraints of "
                             f"{exported.fun_name}: {' '.join(str(cause).split())[:600]}") from None
        buf = io.BytesIO()
        refined.operation.write_bytecode(buf)
        return buf.getvalue()


def from_exported(exported, *args, platform: str = "cpu") -> HloModule:
    """The HloModule of a `jax.export.Exported`.

    A shape-polymorphic export needs the concrete arguments (arrays or ShapeDtypeStructs) to
    refine its shapes; its dimension constraints are checked against them (InputError). The
    module's parameters are the arguments JAX kept (`exported.module_kept_var_idx`). A module
    exported for several platforms runs its `platform` variant (the first when absent)."""
    name = f"jit_{exported.fun_name}"
    multi = len(getattr(exported, "platforms", ())) > 1
    if not _is_polymorphic(exported):
        if args:
            solve_dimension_variables(exported, [_spec(a) for a in args])
        # The portable artifact as serialized (from_stablehlo reads it directly): the text of
        # `exported.mlir_module()` costs a deserialization and a print in a context of JAX's
        # own, then a parse, about 20x the import of a small function.
        module = from_stablehlo(exported.mlir_module_serialized, module_name=name)
    else:
        if not args:
            dims = sorted({str(d) for aval in exported.in_avals for d in aval.shape if not isinstance(d, int)})
            raise InputError(f"{exported.fun_name} was exported with symbolic dimensions ({', '.join(dims)}): "
                             f"pass concrete arguments, from_exported(exported, *args)")
        specs = [_spec(a) for a in args]
        solve_dimension_variables(exported, specs)
        kept = [specs[i] for i in _kept(exported)]
        if multi:
            kept = [((), np.dtype(np.int32))] + kept
        module = from_stablehlo(refined_bytecode(exported, kept), module_name=name)
    if multi:
        platforms = [p.lower() for p in exported.platforms]
        _bind_platform_index(module, platforms.index(platform) if platform in platforms else 0)
    return module


def _bind_platform_index(module: HloModule, index: int) -> None:
    """Replace the leading platform-index parameter of a multi-platform export by a constant."""
    from ..hlo.ir import HloInstruction

    entry = module.entry
    param = entry.parameter(0)
    const = HloInstruction("constant", param.shape, name="platform_index")
    const.literal = np.array(index, dtype=param.shape.dtype.numpy)
    entry.add_instruction(const)
    entry.instructions.remove(const)
    entry.instructions.insert(entry.instructions.index(param), const)
    param.replace_all_uses_with(const)
    entry.remove_instruction(param)
    for p in entry.parameters:
        p.parameter_number -= 1


def _kept(exported) -> tuple[int, ...]:
    """Indices of the arguments the exported module takes (JAX drops unused ones)."""
    kept = getattr(exported, "module_kept_var_idx", None)
    return tuple(kept) if kept is not None else tuple(range(len(exported.in_avals)))


def _signature(args) -> tuple:
    return tuple((tuple(np.shape(a)), np.asarray(a).dtype.str if not hasattr(a, "dtype") else np.dtype(a.dtype).str)
                 for a in args)


class ExportedFunction:
    """A callable over numpy arrays that runs an Exported with hlofuse, compiling once per
    concrete signature (shape-polymorphic exports are refined for each new signature)."""

    def __init__(self, exported, target: str = "cpu", fusion: bool = True) -> None:
        self.exported = exported
        self.target = target
        self.fusion = fusion
        self.cache: dict[tuple, Any] = {}

    def executable(self, *args):
        """The compiled executable for these arguments' shapes and dtypes (cached)."""
        key = _signature(args)
        if key not in self.cache:
            self.cache[key] = compile_export(self.exported, args, self.target, self.fusion)
        return self.cache[key]

    def __call__(self, *args):
        arrays = [np.asarray(a) for a in args]
        outputs = self.executable(*arrays)(*[arrays[i] for i in _kept(self.exported)])
        return unflatten(self.exported.out_tree, [np.asarray(o) for o in outputs])


def compile_export(exported, args: tuple, target: str, fusion: bool = True) -> Callable:
    """`compile(from_exported(exported, *args), target)`, found on the CPU by the export's
    serialized module and the arguments' signature when compiled before, without importing it
    (compiler.compile_source: a new process's first call of a function jitted before)."""
    import jax

    from ..compiler import compile_source

    if args:  # the arguments' check of the import (InputError), made on a hit too
        solve_dimension_variables(exported, [_spec(a) for a in args])
    described = repr((_signature(args), _kept(exported), exported.fun_name, tuple(getattr(exported, "platforms", ()))))
    source = bytes(exported.mlir_module_serialized) + b"\0" + described.encode()
    return compile_source(source, f"jax-export {jax.__version__}", lambda: from_exported(exported, *args), target,
                          fusion=fusion)


def compile_module(module: HloModule, target: str, fusion: bool = True) -> Callable:
    """hlofuse.compile(module, target, fusion)."""
    from ..compiler import compile as hlo_compile

    return hlo_compile(module, target, fusion=fusion)


def unflatten(tree, leaves: list):
    """Rebuild the function's output structure; one leaf comes back as the array itself."""
    import jax

    return jax.tree_util.tree_unflatten(tree, leaves)


def compile_exported(exported, target: str = "cpu", fusion: bool = True) -> ExportedFunction:
    """Run a jax.export.Exported through hlofuse: `compile_exported(exp)(x, y)`."""
    return ExportedFunction(exported, target, fusion)


class JitFunction:
    """`hlofuse.jit(fn)`: trace with JAX, export, compile with hlofuse; cached per signature."""

    def __init__(self, fn: Callable, target: str = "cpu", fusion: bool = True) -> None:
        self.fn = fn
        self.target = target
        self.fusion = fusion
        self.cache: dict[tuple, ExportedFunction] = {}
        functools.update_wrapper(self, fn)

    def lower(self, *args) -> ExportedFunction:
        """The exported (and, on first call, compiled) function for these arguments."""
        import jax

        key = _signature(args)
        if key not in self.cache:
            specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
            exported = jax.export.export(jax.jit(self.fn))(*specs)
            self.cache[key] = ExportedFunction(exported, self.target, self.fusion)
        return self.cache[key]

    def module(self, *args) -> HloModule:
        """The imported HloModule for these arguments (before hlofuse's passes)."""
        return from_exported(self.lower(*args).exported, *args)

    def __call__(self, *args):
        import jax

        # As jax.jit does: float64/int64 inputs become 32-bit unless x64 is enabled.
        arrays = [np.asarray(a) for a in args]
        arrays = [a.astype(jax.dtypes.canonicalize_dtype(a.dtype), copy=False) for a in arrays]
        return self.lower(*arrays)(*arrays)


def jit(fn: Callable | None = None, *, target: str = "cpu", fusion: bool = True) -> Callable:
    """Compile a JAX function with hlofuse; usable as `@jit` or `@jit(target="interpreter")`.

    Calls return numpy arrays in the function's output structure."""
    if fn is None:
        return lambda f: JitFunction(f, target, fusion)
    return JitFunction(fn, target, fusion)
