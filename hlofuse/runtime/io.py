"""Inputs and outputs of a run: `.npz` files (`arg0, arg1, ...` / `out0, out1, ...`),
seeded random inputs, and validation of arrays against the entry's parameters."""
from __future__ import annotations

import zipfile

import numpy as np

from ..files import write_atomically
from ..hlo.errors import InputError
from ..hlo.ir import HloInstruction, HloModule
from ..hlo.shapes import ArrayShape, Shape, TupleShape


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


def contiguous(a) -> np.ndarray:
    """`a` as a C-contiguous array of the same shape: `np.ascontiguousarray` alone turns a
    rank-0 array into shape (1,), and a scalar must stay rank 0 through a run (arguments,
    values passed through, library operands, results)."""
    arr = np.asarray(a)
    if arr.flags.c_contiguous:
        return arr
    return np.ascontiguousarray(arr).reshape(arr.shape)


def check_input(p: HloInstruction, a, label: str | None = None) -> np.ndarray | tuple:
    """Argument `a` for parameter `p` as a contiguous array (a tuple of them for tuple
    parameters); InputError, naming the argument (`argN`) and the parameter, when its element
    type or shape differs from the parameter's."""
    label = label or f"arg{p.parameter_number}"
    if p.shape.is_tuple:
        if not isinstance(a, (tuple, list)) or len(a) != len(p.shape.elements):
            raise InputError(f"{label} must be a tuple of {len(p.shape.elements)} arrays for parameter "
                             f"{p.name} of shape {p.shape.to_text(False)}")
        fake = [HloInstruction("parameter", s, name=p.name) for s in p.shape.elements]
        return tuple(check_input(f, x, f"{label}[{k}]") for k, (f, x) in enumerate(zip(fake, a)))
    want = p.shape.dtype.numpy
    arr = np.asarray(a)
    if arr.dtype != want:
        raise InputError(f"{label} has dtype {arr.dtype}, but parameter {p.name} is "
                         f"{p.shape.to_text(False)} (numpy {want})")
    if tuple(arr.shape) != tuple(p.shape.dims):
        raise InputError(f"{label} has shape {list(arr.shape)}, but parameter {p.name} is {p.shape.to_text(False)}")
    return contiguous(arr)


def check_arguments(module: HloModule, args: list) -> list:
    """The checked arguments (`check_input`) for the entry parameters of `module`."""
    params = module.entry.parameters
    if len(args) != len(params):
        raise InputError(f"module {module.name} takes {len(params)} arguments, got {len(args)}")
    return [check_input(p, a) for p, a in zip(params, args)]


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
    return check_arguments(module, args)


def write_outputs(path: str, outputs: list) -> None:
    """Write `out0, out1, ...` to an .npz file atomically (no partial file on failure)."""
    arrays = {f"out{i}": np.asarray(o) for i, o in enumerate(outputs)}
    write_atomically(path, lambda f: np.savez(f, **arrays), binary=True)
