"""Conversion rules: one StableHLO op -> HLO instructions.

A rule is `rule(importer, op, scope) -> HloInstruction | list[HloInstruction]` (one HLO value
per MLIR result). Elementwise ops need no rule of their own: `stablehlo.log_plus_one` maps to
the registry row `log-plus-one` when that row is elementwise (see `rule_for`), so the op
registry stays the only list of opcodes. Irregular ops register a rule with `@rule(...)`.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ..hlo import opcodes
from ..hlo.attributes import ConvDimensionNumbers, Window, WindowDimension
from ..hlo.ir import HloInstruction
from ..hlo.shapes import TOKEN_SHAPE, TupleShape, array
from .stablehlo_types import dense_to_numpy, parse_dense_text

RULES: dict[str, Callable] = {}

def rule(*names: str) -> Callable[[Callable], Callable]:
    """Register a conversion rule for the MLIR ops `names`."""

    def deco(fn):
        for n in names:
            RULES[n] = fn
        return fn

    return deco


_ELEMENTWISE_RULES: dict[str, Callable] = {}  # op name -> rule derived from the registry, once


def rule_for(op_name: str) -> Callable | None:
    """The rule converting `op_name`, or None when hlofuse has none."""
    found = RULES.get(op_name) or _ELEMENTWISE_RULES.get(op_name)
    if found is None:
        # Not cached when None: the import fails on that op anyway, and the registry may grow.
        found = _elementwise_rule(op_name)
        if found is not None:
            _ELEMENTWISE_RULES[op_name] = found
    return found


def _elementwise_rule(op_name: str) -> Callable | None:
    """The rule of `stablehlo.<name>` when `<name with dashes>` is an elementwise registry row."""
    dialect, _, base = op_name.partition(".")
    if dialect != "stablehlo":
        return None
    hlo = base.replace("_", "-")
    if opcodes.is_known(hlo):
        info = opcodes.op_info(hlo)
        if info.elementwise and info.kind in ("unary", "binary", "ternary") and info.called == ():
            ternary = info.kind == "ternary"
            return lambda imp, op, scope: _elementwise(imp, op, scope, hlo, ternary)
    return None


# ---- attribute helpers ------------------------------------------------------------------
def _ints(imp, op, name: str, default=None) -> tuple[int, ...] | None:
    """An integer array attribute as a tuple (`default` when the op has none). Read once per
    distinct attribute (MLIR uniques them in the context): the bindings read an array
    element by element, several microseconds per attribute, the most expensive part of
    converting a broadcast."""
    if name not in op.attributes:
        return default
    attr = op.attributes[name]
    cache = imp.attr_values
    found = cache.get(attr)
    if found is None:
        try:
            found = tuple(int(x) for x in attr)
        except TypeError:
            found = tuple(int(x) for x in np.array(attr).reshape(-1))
        cache[attr] = found
    return found


def _int(op, name: str, default: int | None = None) -> int | None:
    if name not in op.attributes:
        return default
    return int(op.attributes[name].value)


def _bool(op, name: str, default: bool = False) -> bool:
    if name not in op.attributes:
        return default
    return bool(op.attributes[name].value)


_ENUM = re.compile(r"<\s*\w+\s+(\w+)\s*>")


def _enum(op, name: str, default: str | None = None) -> str | None:
    """The value of an enum attribute such as `#stablehlo<comparison_direction LT>`."""
    if name not in op.attributes:
        return default
    m = _ENUM.search(str(op.attributes[name]))
    if m is None:
        raise ValueError(f"cannot read attribute {name} = {op.attributes[name]}")
    return m.group(1)


def _operands(scope, op) -> list[HloInstruction]:
    values = scope.values
    try:
        return [values[v] for v in op.operands]
    except KeyError:
        return [scope.get(v) for v in op.operands]  # raises, naming the value


def _result_shape(imp, op, i: int = 0):
    return imp.shape(op.results[i].type)


def _results_shape(imp, op):
    shapes = [imp.shape(r.type) for r in op.results]
    return shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))


def _direct(name: str, **readers: Callable) -> None:
    """Register the rule for `stablehlo.<name>`: one HLO instruction `<name with dashes>` on the
    op's operands and result type, each attribute `key` read from the op by `readers[key](imp, op)`."""
    opcode = name.replace("_", "-")

    def convert(imp, op, scope):
        attrs = {key: read(imp, op) for key, read in readers.items()}
        return imp.emit(scope, opcode, _result_shape(imp, op), _operands(scope, op), attrs)

    RULES["stablehlo." + name] = convert


def _emit_results(imp, scope, op, opcode: str, attrs: dict, operands=None) -> list[HloInstruction]:
    """Emit `opcode` with the op's (possibly tuple) result shape; one HLO value per MLIR result."""
    operands = _operands(scope, op) if operands is None else operands
    inst = imp.emit(scope, opcode, _results_shape(imp, op), operands, attrs)
    return imp.unpack(scope, inst, len(op.results))


def _broadcast_scalar(imp, scope, inst: HloInstruction, like) -> HloInstruction:
    """Broadcast a scalar operand to `like`'s dimensions (StableHLO allows scalar select/clamp operands)."""
    if inst.shape.rank == like.rank:
        return inst
    shape = array(inst.shape.dtype, like.dims)
    return imp.emit(scope, "broadcast", shape, [inst], {"dimensions": ()})


# ---- elementwise ------------------------------------------------------------------------
def _elementwise(imp, op, scope, opcode: str, ternary: bool) -> HloInstruction:
    shape = _result_shape(imp, op)
    operands = _operands(scope, op)
    if ternary:  # select and clamp take scalars in StableHLO
        operands = [_broadcast_scalar(imp, scope, o, shape) for o in operands]
    return imp.emit(scope, opcode, shape, operands)


@rule("stablehlo.compare")
def _compare(imp, op, scope):
    attrs = {"direction": _enum(op, "comparison_direction")}
    ctype = _enum(op, "compare_type")
    if ctype and ctype != "NOTYPE":
        attrs["type"] = ctype
    return imp.emit(scope, "compare", _result_shape(imp, op), _operands(scope, op), attrs)


_direct("reduce_precision", exponent_bits=lambda imp, op: _int(op, "exponent_bits"),
        mantissa_bits=lambda imp, op: _int(op, "mantissa_bits"))


# ---- leaves -----------------------------------------------------------------------------
_CACHED_CONSTANT_ELEMENTS = 1024  # larger constants are read each time (not kept with the context)


@rule("stablehlo.constant")
def _constant(imp, op, scope):
    shape = _result_shape(imp, op)
    if shape.dtype.is_complex:
        # The bindings cannot wrap complex dense attributes: read the printed op instead.
        literal = parse_dense_text(op.get_asm(), shape)
    else:
        # Read once per distinct small attribute (MLIR uniques them; JAX's programs repeat
        # their scalar and splat constants): each instruction gets its own copy.
        attr = op.attributes["value"]
        cached = imp.attr_values.get(attr)
        if cached is None:
            literal = dense_to_numpy(attr, shape)
            if literal.size <= _CACHED_CONSTANT_ELEMENTS:
                imp.attr_values[attr] = literal.copy()
        else:
            literal = cached.copy()
    inst = imp.emit(scope, "constant", shape, name="constant")
    inst.literal = literal
    return inst


_direct("iota", iota_dimension=lambda imp, op: _int(op, "iota_dimension"))


@rule("stablehlo.get_dimension_size")
def _get_dimension_size(imp, op, scope):
    operand = scope.get(op.operands[0])
    size = operand.shape.dims[_int(op, "dimension")]
    shape = _result_shape(imp, op)
    inst = imp.emit(scope, "constant", shape, name="constant")
    inst.literal = np.array(size, dtype=shape.dtype.numpy)
    return inst


# ---- data movement ----------------------------------------------------------------------
@rule("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(imp, op, scope):
    operand = scope.get(op.operands[0])
    shape = _result_shape(imp, op)
    dims = _ints(imp, op, "broadcast_dimensions", ())
    # StableHLO may stretch a size-1 operand dimension; HLO broadcast cannot, so such
    # dimensions are reshaped away first (as XLA's importer does).
    stretched = [i for i, d in enumerate(dims) if operand.shape.dims[i] == 1 and shape.dims[d] != 1]
    if stretched:
        keep = [i for i in range(len(dims)) if i not in stretched]
        reshaped = array(operand.shape.dtype, [operand.shape.dims[i] for i in keep])
        operand = imp.emit(scope, "reshape", reshaped, [operand])
        dims = tuple(dims[i] for i in keep)
    return imp.emit(scope, "broadcast", shape, [operand], {"dimensions": dims})


@rule("stablehlo.broadcast")
def _broadcast(imp, op, scope):
    operand = scope.get(op.operands[0])
    shape = _result_shape(imp, op)
    sizes = _ints(imp, op, "broadcast_sizes", ())
    dims = tuple(range(len(sizes), len(sizes) + operand.shape.rank))
    return imp.emit(scope, "broadcast", shape, [operand], {"dimensions": dims})


_direct("reshape")
_direct("transpose", dimensions=lambda imp, op: _ints(imp, op, "permutation"))


@rule("stablehlo.slice")
def _slice(imp, op, scope):
    start = _ints(imp, op, "start_indices")
    limit = _ints(imp, op, "limit_indices")
    strides = _ints(imp, op, "strides", (1,) * len(start))
    return imp.emit(scope, "slice", _result_shape(imp, op), _operands(scope, op),
                    {"slice": tuple(zip(start, limit, strides))})


_direct("dynamic_slice", dynamic_slice_sizes=lambda imp, op: _ints(imp, op, "slice_sizes"))
_direct("dynamic_update_slice")
_direct("concatenate", dimensions=lambda imp, op: (_int(op, "dimension"),))


@rule("stablehlo.pad")
def _pad(imp, op, scope):
    lo, hi = _ints(imp, op, "edge_padding_low"), _ints(imp, op, "edge_padding_high")
    interior = _ints(imp, op, "interior_padding", (0,) * len(lo))
    return imp.emit(scope, "pad", _result_shape(imp, op), _operands(scope, op),
                    {"padding": tuple(zip(lo, hi, interior))})


_direct("reverse", dimensions=lambda imp, op: _ints(imp, op, "dimensions"))


@rule("stablehlo.gather")
def _gather(imp, op, scope):
    from jaxlib.mlir._mlir_libs import _stablehlo as hlo

    dn = hlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    attrs = {
        "offset_dims": tuple(dn.offset_dims),
        "collapsed_slice_dims": tuple(dn.collapsed_slice_dims),
        "start_index_map": tuple(dn.start_index_map),
        "operand_batching_dims": tuple(dn.operand_batching_dims),
        "start_indices_batching_dims": tuple(dn.start_indices_batching_dims),
        "index_vector_dim": int(dn.index_vector_dim),
        "slice_sizes": _ints(imp, op, "slice_sizes"),
        "indices_are_sorted": _bool(op, "indices_are_sorted"),
    }
    return imp.emit(scope, "gather", _result_shape(imp, op), _operands(scope, op), attrs)


@rule("stablehlo.tuple")
def _tuple(imp, op, scope):
    operands = _operands(scope, op)
    return imp.emit(scope, "tuple", TupleShape(tuple(o.shape for o in operands)), operands)


@rule("stablehlo.get_tuple_element")
def _get_tuple_element(imp, op, scope):
    return imp.emit(scope, "get-tuple-element", _result_shape(imp, op), _operands(scope, op),
                    {"index": _int(op, "index")})


@rule("stablehlo.optimization_barrier")
def _optimization_barrier(imp, op, scope):
    operands = _operands(scope, op)
    tup = imp.emit(scope, "tuple", TupleShape(tuple(o.shape for o in operands)), operands)
    barrier = imp.emit(scope, "opt-barrier", tup.shape, [tup], name="opt-barrier")
    return imp.unpack(scope, barrier, len(operands))


# ---- reductions, windows, sort, scatter ---------------------------------------------------
def _window(sizes, strides=None, padding=None, base=None, window_dil=None, reversal=None) -> Window:
    n = len(sizes)
    strides = strides or (1,) * n
    padding = padding or ((0, 0),) * n
    base = base or (1,) * n
    window_dil = window_dil or (1,) * n
    reversal = reversal or (False,) * n
    return Window(tuple(
        WindowDimension(int(sizes[i]), int(strides[i]), int(padding[i][0]), int(padding[i][1]),
                        int(window_dil[i]), int(base[i]), bool(reversal[i]))
        for i in range(n)))


def _padding(op, name: str = "padding"):
    if name not in op.attributes:
        return None
    pads = np.array(op.attributes[name]).reshape(-1, 2)
    return tuple((int(a), int(b)) for a, b in pads)


@rule("stablehlo.reduce")
def _reduce(imp, op, scope):
    body = imp.region_computation(op.regions[0], "reduce_body")
    return _emit_results(imp, scope, op, "reduce", {"dimensions": _ints(imp, op, "dimensions"), "to_apply": body})


@rule("stablehlo.reduce_window")
def _reduce_window(imp, op, scope):
    body = imp.region_computation(op.regions[0], "reduce_window_body")
    window = _window(_ints(imp, op, "window_dimensions"), _ints(imp, op, "window_strides"), _padding(op),
                     _ints(imp, op, "base_dilations"), _ints(imp, op, "window_dilations"))
    return _emit_results(imp, scope, op, "reduce-window", {"window": window, "to_apply": body})


@rule("stablehlo.select_and_scatter")
def _select_and_scatter(imp, op, scope):
    select = imp.region_computation(op.regions[0], "select")
    scatter = imp.region_computation(op.regions[1], "scatter")
    rank = len(imp.shape(op.operands[0].type).dims)
    window = _window(_ints(imp, op, "window_dimensions", (1,) * rank), _ints(imp, op, "window_strides"), _padding(op))
    return imp.emit(scope, "select-and-scatter", _result_shape(imp, op), _operands(scope, op),
                    {"window": window, "select": select, "scatter": scatter})


@rule("stablehlo.scatter")
def _scatter(imp, op, scope):
    from jaxlib.mlir._mlir_libs import _stablehlo as hlo

    dn = hlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    body = imp.region_computation(op.regions[0], "scatter_body")
    attrs = {
        "update_window_dims": tuple(dn.update_window_dims),
        "inserted_window_dims": tuple(dn.inserted_window_dims),
        "scatter_dims_to_operand_dims": tuple(dn.scattered_dims_to_operand_dims),
        "input_batching_dims": tuple(dn.input_batching_dims),
        "scatter_indices_batching_dims": tuple(dn.scatter_indices_batching_dims),
        "index_vector_dim": int(dn.index_vector_dim),
        "indices_are_sorted": _bool(op, "indices_are_sorted"),
        "unique_indices": _bool(op, "unique_indices"),
        "to_apply": body,
    }
    return _emit_results(imp, scope, op, "scatter", attrs)


@rule("stablehlo.sort")
def _sort(imp, op, scope):
    comparator = imp.region_computation(op.regions[0], "compare")
    rank = len(imp.shape(op.results[0].type).dims)
    dim = _int(op, "dimension", -1)
    attrs = {"dimensions": (dim % rank if rank else 0,), "is_stable": _bool(op, "is_stable"),
             "to_apply": comparator}
    return _emit_results(imp, scope, op, "sort", attrs)


@rule("stablehlo.map")
def _map(imp, op, scope):
    body = imp.region_computation(op.regions[0], "map_body")
    return imp.emit(scope, "map", _result_shape(imp, op), _operands(scope, op),
                    {"dimensions": _ints(imp, op, "dimensions"), "to_apply": body})


# ---- linear algebra ---------------------------------------------------------------------
@rule("stablehlo.dot_general")
def _dot_general(imp, op, scope):
    from jaxlib.mlir._mlir_libs import _stablehlo as hlo

    dn = hlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    attrs = {
        "lhs_batch_dims": tuple(dn.lhs_batching_dimensions),
        "lhs_contracting_dims": tuple(dn.lhs_contracting_dimensions),
        "rhs_batch_dims": tuple(dn.rhs_batching_dimensions),
        "rhs_contracting_dims": tuple(dn.rhs_contracting_dimensions),
    }
    return imp.emit(scope, "dot", _result_shape(imp, op), _operands(scope, op), attrs)


@rule("stablehlo.dot")
def _dot(imp, op, scope):
    lhs, rhs = _operands(scope, op)
    attrs = {"lhs_batch_dims": (), "lhs_contracting_dims": (lhs.shape.rank - 1,),
             "rhs_batch_dims": (), "rhs_contracting_dims": (0,)}
    return imp.emit(scope, "dot", _result_shape(imp, op), [lhs, rhs], attrs)


@rule("stablehlo.convolution")
def _convolution(imp, op, scope):
    from jaxlib.mlir._mlir_libs import _stablehlo as hlo

    lhs, rhs = _operands(scope, op)
    dn = hlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    numbers = ConvDimensionNumbers(
        dn.input_batch_dimension, dn.input_feature_dimension, tuple(dn.input_spatial_dimensions),
        dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension,
        tuple(dn.kernel_spatial_dimensions),
        dn.output_batch_dimension, dn.output_feature_dimension, tuple(dn.output_spatial_dimensions))
    sizes = tuple(rhs.shape.dims[d] for d in numbers.kernel_spatial)
    reversal = None
    if "window_reversal" in op.attributes:
        reversal = tuple(bool(x) for x in op.attributes["window_reversal"])
    window = _window(sizes, _ints(imp, op, "window_strides"), _padding(op), _ints(imp, op, "lhs_dilation"),
                     _ints(imp, op, "rhs_dilation"), reversal)
    attrs = {"window": window, "dim_labels": numbers,
             "feature_group_count": _int(op, "feature_group_count", 1),
             "batch_group_count": _int(op, "batch_group_count", 1)}
    return imp.emit(scope, "convolution", _result_shape(imp, op), [lhs, rhs], attrs)


_direct("fft", fft_type=lambda imp, op: _enum(op, "fft_type"), fft_length=lambda imp, op: _ints(imp, op, "fft_length"))
_direct("triangular_solve", left_side=lambda imp, op: _bool(op, "left_side"), lower=lambda imp, op: _bool(op, "lower"),
        unit_diagonal=lambda imp, op: _bool(op, "unit_diagonal"),
        transpose_a=lambda imp, op: _enum(op, "transpose_a", "NO_TRANSPOSE"))
_direct("cholesky", lower=lambda imp, op: _bool(op, "lower"))


@rule("stablehlo.batch_norm_training", "stablehlo.batch_norm_inference", "stablehlo.batch_norm_grad")
def _batch_norm(imp, op, scope):
    opcode = op.name.split(".")[1].replace("_", "-")
    attrs = {"epsilon": float(op.attributes["epsilon"].value), "feature_index": _int(op, "feature_index")}
    return _emit_results(imp, scope, op, opcode, attrs)


# ---- random numbers ---------------------------------------------------------------------
@rule("stablehlo.rng_bit_generator")
def _rng_bit_generator(imp, op, scope):
    algorithm = "rng_" + _enum(op, "rng_algorithm", "DEFAULT").lower().replace("_", "")
    algorithm = {"rng_threefry": "rng_three_fry"}.get(algorithm, algorithm)
    return _emit_results(imp, scope, op, "rng-bit-generator", {"algorithm": algorithm})


@rule("stablehlo.rng")
def _rng(imp, op, scope):
    a, b = _operands(scope, op)[:2]
    dist = "rng_" + _enum(op, "rng_distribution").lower()
    return imp.emit(scope, "rng", _result_shape(imp, op), [a, b], {"distribution": dist})


# ---- tokens -------------------------------------------------------------------------------
@rule("stablehlo.after_all", "stablehlo.create_token")
def _after_all(imp, op, scope):
    return imp.emit(scope, "after-all", TOKEN_SHAPE, _operands(scope, op))


# ---- control flow and calls -------------------------------------------------------------
def _unique(values):
    out, seen = [], set()
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


@rule("stablehlo.while")
def _while(imp, op, scope):
    operands = _operands(scope, op)
    captured = _unique(imp.free_values(op.regions[0]) + imp.free_values(op.regions[1]))
    state = [(None, o.shape) for o in operands] + [(c, scope.get(c).shape) for c in captured]
    init_values = operands + [scope.get(c) for c in captured]
    shape = TupleShape(tuple(s for _, s in state))
    init = imp.emit(scope, "tuple", shape, init_values)
    cond = imp.tuple_region_computation(op.regions[0], "while_cond", state, extra_outputs=False)
    body = imp.tuple_region_computation(op.regions[1], "while_body", state, extra_outputs=True)
    loop = imp.emit(scope, "while", shape, [init], {"condition": cond, "body": body})
    return [imp.emit(scope, "get-tuple-element", shape.elements[i], [loop], {"index": i})
            for i in range(len(operands))]


def _branch(imp, scope, region, name: str):
    captured = imp.free_values(region)
    state = [(c, scope.get(c).shape) for c in captured]
    comp = imp.tuple_region_computation(region, name, state, extra_outputs=False)
    values = [scope.get(c) for c in captured]
    operand = imp.emit(scope, "tuple", TupleShape(tuple(v.shape for v in values)), values)
    return comp, operand


@rule("stablehlo.if")
def _if(imp, op, scope):
    pred = scope.get(op.operands[0])
    true_comp, true_op = _branch(imp, scope, op.regions[0], "true_branch")
    false_comp, false_op = _branch(imp, scope, op.regions[1], "false_branch")
    return _emit_results(imp, scope, op, "conditional",
                         {"true_computation": true_comp, "false_computation": false_comp},
                         [pred, true_op, false_op])


@rule("stablehlo.case")
def _case(imp, op, scope):
    index = scope.get(op.operands[0])
    comps, operands = [], []
    for i, region in enumerate(op.regions):
        comp, operand = _branch(imp, scope, region, f"branch_{i}")
        comps.append(comp)
        operands.append(operand)
    return _emit_results(imp, scope, op, "conditional", {"branch_computations": tuple(comps)},
                         [index] + operands)


def _call(imp, op, scope, callee: str):
    return _emit_results(imp, scope, op, "call", {"to_apply": imp.function(callee)})


@rule("func.call")
def _func_call(imp, op, scope):
    return _call(imp, op, scope, str(op.attributes["callee"]).lstrip("@").strip('"'))


@rule("stablehlo.composite")
def _composite(imp, op, scope):
    return _call(imp, op, scope, str(op.attributes["decomposition"]).lstrip("@").strip('"'))


# Custom calls that only annotate a value for the partitioner: on one device they are the value.
_ANNOTATIONS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")


@rule("stablehlo.custom_call")
def _custom_call(imp, op, scope):
    target = str(op.attributes["call_target_name"]).strip('"')
    if target in _ANNOTATIONS and len(op.operands) == 1 == len(op.results):
        return scope.get(op.operands[0])
    if imp.custom_call_handler is not None:
        results = imp.custom_call_handler(imp, op, scope, target)
        if results is not None:
            return results
    if target.startswith("check.") and not op.results:
        # A test assertion of the StableHLO test suite (the conformance runner evaluates them);
        # it computes nothing, so running such a file elsewhere simply skips it.
        return []
    raise imp.unsupported(f"custom_call @{target} is not supported (hlofuse runs no external library calls)")
