"""Helpers shared by the shape rules of every op family (hlo/shape_inference_*.py).

A shape rule is `fn(inst) -> Shape`. It reads the operands' shapes and the attributes,
checks what XLA's ShapeInference checks, and raises VerifierError naming the instruction
and its computation when something is wrong.
"""
from __future__ import annotations

from typing import Any, Iterable, NoReturn

from .dtypes import PRED, ElementType
from .errors import VerifierError
from .ir import HloComputation, HloInstruction
from .shapes import ArrayShape, Shape, TupleShape

_MISSING = object()

# The operand where each indexed-by-starts op's start indices begin.
FIRST_START_INDEX = {"dynamic-slice": 1, "dynamic-update-slice": 2}


def legacy_start_index_vector(inst: HloInstruction) -> HloInstruction | None:
    """The start-index vector operand of a dynamic-slice or dynamic-update-slice in the legacy
    form (`dynamic-slice(x, s32[3] starts)`: one rank-1 operand, `s32[1]` for an operand of rank
    1 too, as XLA reads it: XLA's test_utils_test slices an f32[20] at an s32[1]), else None.
    Today's form is one integer scalar per operand dimension."""
    first = FIRST_START_INDEX.get(inst.opcode)
    if first is None or len(inst.operands) != first + 1:
        return None
    vector = inst.operands[first]
    if not isinstance(vector.shape, ArrayShape) or vector.shape.rank != 1:
        return None
    return vector


def fail(inst: HloInstruction, reason: str) -> NoReturn:
    """Raise VerifierError for `inst` (named with its computation) with `reason`."""
    comp = inst.parent.name if inst.parent is not None else None
    raise VerifierError(f"{inst.opcode}: {reason}", instruction=inst.name or inst.opcode, computation=comp)


def attr(inst: HloInstruction, key: str, default: Any = _MISSING) -> Any:
    """Attribute `key` of `inst`; a VerifierError if it is required and absent."""
    value = inst.attrs.get(key, default)
    if value is _MISSING:
        fail(inst, f"missing attribute '{key}'")
    return value


def int_tuple(inst: HloInstruction, key: str, default: Any = _MISSING) -> tuple[int, ...]:
    """A dimension-list attribute as a tuple of ints (a bare int becomes a 1-tuple)."""
    value = attr(inst, key, default)
    if isinstance(value, int):
        return (value,)
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        fail(inst, f"attribute '{key}' must be a list of integers, got {value!r}")


def int_attr(inst: HloInstruction, key: str, default: Any = _MISSING) -> int:
    """An integer attribute (an int, or Raw text of one for keys the parser keeps verbatim)."""
    value = attr(inst, key, default)
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(str(value))
    except ValueError:
        fail(inst, f"attribute '{key}' must be an integer, got {value!r}")


def bool_attr(inst: HloInstruction, key: str, default: bool = False) -> bool:
    """A boolean attribute (a bool, or Raw text `true`/`false`)."""
    value = inst.attrs.get(key, default)
    if isinstance(value, bool):
        return value
    if str(value) in ("true", "false"):
        return str(value) == "true"
    fail(inst, f"attribute '{key}' must be true or false, got {value!r}")


def computation(inst: HloInstruction, key: str) -> HloComputation:
    """The computation held by attribute `key`."""
    value = attr(inst, key)
    if not isinstance(value, HloComputation):
        fail(inst, f"attribute '{key}' must name a computation, got {value!r}")
    return value


def array_operand(inst: HloInstruction, i: int) -> ArrayShape:
    """The shape of operand `i`, which must be an array."""
    if i >= len(inst.operands):
        fail(inst, f"expects an operand {i}, has {len(inst.operands)} operands")
    shape = inst.operands[i].shape
    if not isinstance(shape, ArrayShape):
        fail(inst, f"operand {i} ({inst.operands[i].name}) must be an array, has shape {shape}")
    return shape


def array_operands(inst: HloInstruction, indices: Iterable[int] | None = None) -> list[ArrayShape]:
    """Shapes of the given operands (all if None), each required to be an array."""
    idx = range(len(inst.operands)) if indices is None else indices
    return [array_operand(inst, i) for i in idx]


def declared_array(inst: HloInstruction) -> ArrayShape:
    """The instruction's own shape, which must be an array."""
    if not isinstance(inst.shape, ArrayShape):
        fail(inst, f"result must be an array, declared {inst.shape}")
    return inst.shape


def make_array(dtype: ElementType, dims: Iterable[int], dynamic: Iterable[bool] | None = None) -> ArrayShape:
    """An array shape without layout (layouts are not part of inference)."""
    dims = tuple(int(d) for d in dims)
    dyn = tuple(dynamic) if dynamic is not None else (False,) * len(dims)
    return ArrayShape(dtype, dims, dyn, None)


def same_dims(a: ArrayShape, b: ArrayShape) -> bool:
    """Equal dimension sizes (element types, layouts and dynamic flags ignored)."""
    return a.dims == b.dims


def check_dims_in_range(inst: HloInstruction, dims: Iterable[int], rank: int, what: str) -> tuple[int, ...]:
    """Fail unless `dims` are distinct dimension numbers in [0, rank)."""
    dims = tuple(dims)
    for d in dims:
        if not 0 <= d < rank:
            fail(inst, f"{what} {d} is out of range for rank {rank}")
    if len(set(dims)) != len(dims):
        fail(inst, f"{what} {list(dims)} contains duplicates")
    return dims


def slice_sizes(inst: HloInstruction, key: str, operand: ArrayShape) -> tuple[int, ...]:
    """The slice sizes in attribute `key`: one per operand dimension, each within its size."""
    sizes = int_tuple(inst, key)
    if len(sizes) != operand.rank:
        fail(inst, f"{key} {list(sizes)} must have {operand.rank} entries")
    for i, (s, d) in enumerate(zip(sizes, operand.dims)):
        if not 0 <= s <= d:
            fail(inst, f"slice size {s} of dimension {i} is out of range for size {d}")
    return sizes


def is_scalar_of(shape: Shape, dtype: ElementType | None = None) -> bool:
    """True for a rank-0 array (of `dtype` when given)."""
    return isinstance(shape, ArrayShape) and shape.rank == 0 and (dtype is None or shape.dtype == dtype)


def is_integer_scalar(shape: Shape) -> bool:
    """Whether `shape` is a rank-0 array of an integer type."""
    return isinstance(shape, ArrayShape) and shape.rank == 0 and shape.dtype.is_integer


def shapes_compatible(a: Shape, b: Shape) -> bool:
    """Shapes agree in structure, element types and dimension sizes (layout and
    dynamic-dimension flags ignored; they are not part of inference)."""
    if isinstance(a, TupleShape) or isinstance(b, TupleShape):
        return (
            isinstance(a, TupleShape)
            and isinstance(b, TupleShape)
            and len(a.elements) == len(b.elements)
            and all(shapes_compatible(x, y) for x, y in zip(a.elements, b.elements))
        )
    if isinstance(a, ArrayShape) or isinstance(b, ArrayShape):
        # (element types are the registry's objects: `is` answers before a dataclass ==)
        return (isinstance(a, ArrayShape) and isinstance(b, ArrayShape) and (a.dtype is b.dtype or a.dtype == b.dtype)
                and a.dims == b.dims)
    return a.is_token and b.is_token


def text(shape: Shape) -> str:
    """Shape text without layout, for messages."""
    return shape.to_text(with_layout=False)


def param_shapes(comp: HloComputation) -> list[Shape]:
    """Shapes of a computation's parameters, by parameter number."""
    return [p.shape for p in comp.parameters]


def root_shape(inst: HloInstruction, comp: HloComputation) -> Shape:
    """The shape of `comp`'s root; fail if the computation has none."""
    if comp.root is None:
        fail(inst, f"called computation {comp.name} has no root")
    return comp.root.shape


def check_signature(inst: HloInstruction, comp: HloComputation, params: list[Shape], result: Shape | None,
                    role: str) -> None:
    """Fail unless `comp` takes exactly `params` and (when given) returns `result`."""
    got = param_shapes(comp)
    if len(got) != len(params) or not all(shapes_compatible(g, p) for g, p in zip(got, params)):
        fail(inst, f"{role} computation {comp.name} must take ({', '.join(text(p) for p in params)}), "
                   f"takes ({', '.join(text(g) for g in got)})")
    if result is not None:
        r = root_shape(inst, comp)
        if not shapes_compatible(r, result):
            fail(inst, f"{role} computation {comp.name} must return {text(result)}, returns {text(r)}")


def check_scalar_reducer(inst: HloInstruction, comp: HloComputation, init_types: list[ElementType],
                         role: str = "reducer") -> None:
    """A reducer of N values: takes N accumulators then N values (scalars of the init
    types) and returns one scalar (N == 1) or a tuple of N scalars of those types."""
    scalars = [make_array(t, ()) for t in init_types]
    result: Shape = scalars[0] if len(scalars) == 1 else TupleShape(tuple(scalars))
    check_signature(inst, comp, scalars + scalars, result, role)


def check_predicate_computation(inst: HloInstruction, comp: HloComputation, params: list[Shape], role: str) -> None:
    """`comp` takes `params` and returns pred[]."""
    check_signature(inst, comp, params, make_array(PRED, ()), role)


def tuple_or_single(shapes: list[Shape]) -> Shape:
    """One shape as itself, several as a tuple."""
    return shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))
