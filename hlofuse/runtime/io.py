"""Inputs and outputs of a run: `.npz` files (`arg0, arg1, ...` / `out0, out1, ...`),
seeded random inputs, and validation of arrays against the entry's parameters.

numpy has no dtype of its own for bf16, the f8/f6/f4 floats or s4/u4/s2/u2/s1/u1 (ml_dtypes
supplies them), so an .npz holds such an array as raw void of the element's byte width (`|V2`,
`|V1`), and so do our outputs: `read_inputs` reinterprets a plain void of exactly that width as
the parameter's type, and nothing else."""
from __future__ import annotations

import os
import weakref
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
        if t.bits < 8:  # the 1-, 2- and 4-bit integers: every value of the type
            lo, hi = (0, (1 << t.bits) - 1) if t.kind == "uint" else (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1)
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


# Keyed by id(): numpy arrays are not hashable. The weak reference in the entry tells
# whether the id still names the same array.
_addresses: dict[int, tuple] = {}


def data_address(x: np.ndarray) -> int:
    """The data address of array `x`: `x.ctypes.data` costs a microsecond, so addresses of
    arrays seen before (inputs passed again, recycled outputs) are remembered, under a weak
    reference that tells whether the id still names the same array, with the shape (an
    array's data moves only when `ndarray.resize` changes its size)."""
    hit = _addresses.get(id(x))
    if hit is not None and hit[0]() is x and hit[2] == x.shape:
        return hit[1]
    addr = x.ctypes.data
    if len(_addresses) > 1024:
        _addresses.clear()
    _addresses[id(x)] = (weakref.ref(x), addr, x.shape)
    return addr


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


_NPZ_HINT = "--inputs takes an .npz archive of arrays arg0, arg1, ..., as numpy.savez writes"


def check_archive(path: str) -> None:
    """InputError unless `path` is a zip archive; names what it is instead (missing, a folder,
    empty, a single .npy array, something else), where numpy's own errors would not."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file ({_NPZ_HINT})")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory ({_NPZ_HINT})")
    try:
        with open(path, "rb") as f:
            head = f.read(len(np.lib.format.MAGIC_PREFIX))
    except OSError as e:
        raise InputError(f"{path}: cannot read inputs: {e.strerror or e}") from None
    if not head:
        raise InputError(f"{path}: the file is empty ({_NPZ_HINT})")
    if head == np.lib.format.MAGIC_PREFIX:
        raise InputError(f"{path}: is a single .npy array, not an .npz archive ({_NPZ_HINT}, "
                         f"e.g. numpy.savez(path, arg0=x))")
    if not zipfile.is_zipfile(path):
        raise InputError(f"{path}: not an .npz archive, or a truncated one ({_NPZ_HINT})")


def _from_file(arr, p: HloInstruction, label: str) -> np.ndarray:
    """Array `arr` read for parameter `p`, reinterpreted where numpy stores the element type as
    raw void: numpy has no native bf16, f8, s4, ... so `numpy.savez` writes such arrays (ours
    from `write_outputs` included) as `|V<bytes>`. Only a plain void of exactly the element's
    byte width becomes that type; any other dtype is left for `check_input` to refuse."""
    if not isinstance(arr, np.ndarray):
        raise InputError(f"{label} is not a .npy array in the archive")
    want = p.shape.dtype.numpy
    dt = arr.dtype
    is_raw_void = dt.kind == "V" and dt.names is None and dt.subdtype is None
    if not (is_raw_void and want is not None and want.kind == "V" and dt.itemsize == want.itemsize):
        return arr
    bits = p.shape.dtype.bits
    if bits < 8:
        # Sub-byte types keep their value in the low bits of a byte; a set high bit is not a
        # value of the type (numpy would mask it, a compiled kernel reading the byte would not).
        raw = arr.view(np.uint8)
        bad = np.flatnonzero(raw >> bits)
        if bad.size:
            where = [int(i) for i in np.unravel_index(int(bad[0]), arr.shape)] if arr.ndim else []
            byte = int(raw.reshape(-1)[bad[0]])
            raise InputError(f"{label}: byte {byte:#04x} at index {where} is not a {p.shape.dtype.name} value "
                             f"(parameter {p.name} is {p.shape.to_text(False)})")
    return arr.view(want)


def read_inputs(path: str, module: HloModule) -> list:
    """Read `arg0, arg1, ...` from an .npz file and check them against the entry parameters.
    Raw void arrays of an element type numpy lacks (bf16, f8, s4, ...) are reinterpreted as it
    (`_from_file`). Every unreadable file (missing, empty, a .npy, not a zip, damaged) raises
    InputError naming the file."""
    params = module.entry.parameters
    for p in params:
        if isinstance(p.shape, TupleShape):
            raise InputError(f"{path}: parameter {p.parameter_number} is a tuple {p.shape.to_text(False)}; "
                             f".npz inputs must be arrays")
    check_archive(path)
    n = len(params)
    try:
        with np.load(path, allow_pickle=False) as data:
            names = set(data.files)
            stored = {f"arg{i}": data[f"arg{i}"] for i in range(n) if f"arg{i}" in names}
    except Exception as e:  # noqa: BLE001 - see below
        # Only numpy's and zipfile's reading runs in this block, and a damaged archive makes it
        # raise almost anything (BadZipFile, zlib.error, EOFError, ValueError, SyntaxError and
        # tokenize.TokenError from a bad .npy header, MemoryError from a header that claims too
        # many elements, NotImplementedError for an unknown compression ...): all of them mean
        # the file cannot be read.
        raise InputError(f"{path}: cannot read inputs ({type(e).__name__}: {e}); {_NPZ_HINT}") from None
    missing = [f"arg{i}" for i in range(n) if f"arg{i}" not in stored]
    if missing:
        raise InputError(f"{path}: missing arrays {', '.join(missing)} (the module takes {n} inputs "
                         f"named arg0..arg{n - 1}); found {sorted(names)}")
    args = [_from_file(stored[f"arg{i}"], p, f"{path}: arg{i}") for i, p in enumerate(params)]
    try:
        return check_arguments(module, args)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def _to_file(o) -> np.ndarray:
    """Output `o` as `numpy.savez` stores it: element types numpy lacks (bf16, f8, s4, ...) as a
    raw void of their byte width (what numpy itself writes for them), so that `read_inputs`,
    told the element type by the module, reads them back bit for bit."""
    arr = np.asarray(o)
    if arr.dtype.kind == "V" and arr.dtype.names is None:
        return arr.view(np.dtype(f"V{arr.dtype.itemsize}"))
    return arr


def write_outputs(path: str, outputs: list) -> None:
    """Write `out0, out1, ...` to an .npz file atomically (no partial file on failure).
    Numpy-native types (pred, integers, f16, f32, f64, c64, c128) keep their dtype; bf16, f8,
    f6, f4 and s4/u4/s2/u2/s1/u1 are stored as raw void of the element's byte width (`|V2` for
    bf16, `|V1` for the others, sub-byte values in the low bits): view them as the module's
    result type, e.g. `np.load(f)["out0"].view(ml_dtypes.bfloat16)`; `run --inputs` does that
    from the parameter types."""
    arrays = {f"out{i}": _to_file(o) for i, o in enumerate(outputs)}
    write_atomically(path, lambda f: np.savez(f, **arrays), binary=True)
