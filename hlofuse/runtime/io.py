"""Inputs and outputs of a run: `.npz` files (`arg0, arg1, ...` / `out0, out1, ...`),
seeded random inputs, and validation of arrays against the entry's parameters."""
from __future__ import annotations

import zipfile

import numpy as np

from ..files import write_atomically
from ..hlo.errors import InputError
from ..hlo.ir import HloModule
from ..hlo.shapes import ArrayShape, Shape, TupleShape, flatten_shapes


def parameter_shapes(module: HloModule) -> list[Shape]:
    """Shapes of the entry computation's parameters, in parameter order."""
    return [p.shape for p in module.entry.parameters]


def _random_array(shape: ArrayShape, rng: np.random.Generator) -> np.ndarray:
    t = shape.dtype
    dims = tuple(max(d, 0) for d in shape.dims)
    if t.is_pred:
        return rng.integers(0, 2, dims).astype(np.bool_)
    if t.is_integer:
        info = np.iinfo(np.int8 if t.bits <= 8 else np.int16)
        lo = 0 if t.kind == "uint" else info.min // 4
        hi = info.max // 4
        if t.bits == 4:
            lo, hi = (0, 15) if t.kind == "uint" else (-8, 7)
        return rng.integers(lo, hi + 1, dims).astype(t.numpy)
    if t.is_complex:
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(t.numpy)
    return rng.standard_normal(dims).astype(t.numpy)


def random_inputs(module: HloModule, seed: int = 0) -> list:
    """Seeded random arrays for every entry parameter (tuple parameters get tuples)."""
    rng = np.random.default_rng(seed)

    def make(shape: Shape):
        if isinstance(shape, TupleShape):
            return tuple(make(e) for e in shape.elements)
        if not isinstance(shape, ArrayShape):
            raise InputError(f"cannot make a random input of shape {shape}")
        return _random_array(shape, rng)

    return [make(s) for s in parameter_shapes(module)]


def check_inputs(module: HloModule, args: list) -> None:
    """Raise InputError unless `args` match the entry parameters in count, shapes and dtypes."""
    shapes = parameter_shapes(module)
    if len(args) != len(shapes):
        raise InputError(f"module {module.name} takes {len(shapes)} inputs, {len(args)} were given")
    for i, (arg, shape) in enumerate(zip(args, shapes)):
        _check_one(f"arg{i}", arg, shape)


def _check_one(label: str, arg, shape: Shape) -> None:
    if isinstance(shape, TupleShape):
        if not isinstance(arg, tuple) or len(arg) != len(shape.elements):
            raise InputError(f"{label} must be a tuple of {len(shape.elements)} arrays for shape {shape}")
        for j, (a, s) in enumerate(zip(arg, shape.elements)):
            _check_one(f"{label}[{j}]", a, s)
        return
    if not isinstance(shape, ArrayShape):
        return
    arr = np.asarray(arg)
    if arr.dtype != shape.dtype.numpy:
        raise InputError(f"{label} has dtype {arr.dtype}, the parameter is {shape.to_text(False)}"
                         f" ({shape.dtype.numpy})")
    if shape.is_static() and tuple(arr.shape) != tuple(shape.dims):
        raise InputError(f"{label} has shape {list(arr.shape)}, the parameter is {shape.to_text(False)}")


def read_inputs(path: str, module: HloModule) -> list:
    """Read `arg0, arg1, ...` from an .npz file and check them against the entry parameters."""
    try:
        with np.load(path, allow_pickle=False) as data:
            names = set(data.files)
            n = len(module.entry.parameters)
            missing = [f"arg{i}" for i in range(n) if f"arg{i}" not in names]
            if missing:
                raise InputError(f"{path}: missing arrays {', '.join(missing)} (the module takes {n} inputs "
                                 f"named arg0..arg{n - 1}); found {sorted(names)}")
            args = [data[f"arg{i}"] for i in range(n)]
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"{path}: cannot read inputs: {e}") from None
    for i, shape in enumerate(parameter_shapes(module)):
        if isinstance(shape, TupleShape):
            raise InputError(f"{path}: parameter {i} is a tuple {shape}; .npz inputs must be arrays")
    check_inputs(module, args)
    return args


def write_outputs(path: str, outputs: list) -> None:
    """Write `out0, out1, ...` to an .npz file atomically (no partial file on failure)."""
    arrays = {f"out{i}": np.asarray(o) for i, o in enumerate(outputs)}
    write_atomically(path, lambda f: np.savez(f, **arrays), binary=True)


def flatten_values(value) -> list[np.ndarray]:
    """Flatten nested tuples of arrays depth-first."""
    if isinstance(value, (tuple, list)):
        out: list[np.ndarray] = []
        for v in value:
            out.extend(flatten_values(v))
        return out
    return [value]


def output_count(module: HloModule) -> int:
    return len(flatten_shapes(module.entry.root.shape))
