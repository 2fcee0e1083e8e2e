"""oneDNN primitives (convolutions, batched matrix products) made from a plain description
when a program loads, and executed by compiled kernels through addresses.

    desc = ConvDescription(src, weights, bias, dst, strides, dilates, pad_l, pad_r, post_ops)
    desc = MatmulDescription(src, weights, dst)   # [batch..., M, K] x [batch..., K, N], strided
    prim = primitive(desc)        # created once per process and description (oneDNN's JIT, ms)
    prim.impl                     # the implementation oneDNN chose ("brg:avx512_core", ...)
    register_primitives(descs)    # each one's handle block under `desc.symbol` (llvm.add_symbol)
    prim.run_numpy(arrays)        # the same execution from Python (tests, benchmarks)

Why a description and not a primitive: the module cache stores object code and the program;
a primitive is a process's object. The kernel (codegen/kernels/cpu_conv_onednn.py) refers to
the external symbol `desc.symbol`, a block of handles this module fills at load time
(`HandleBlock`), so cached object code stays valid and the primitive is re-created from the
description (pickled with the program's plan) in each process.

The block holds: the primitive, its stream and engine, the address of the thread-count cell,
the scratchpad's size, an optional weights reorder (convolutions: weights in the layout oneDNN
chose, `format_any`, reordered per call from the caller's layout), and the memory descriptor of each
execution argument in `desc.arguments()` order. A call creates its own memory
objects over the kernel's buffers and allocates its own scratchpad (user scratchpad mode):
nothing mutable is shared, so calls from several threads (several programs sharing a
primitive) are safe; oneDNN documents primitives as safe to execute concurrently in that mode.

Only the libdnnl the project already ships is used (PyPI `onednn-cpu-gomp`, oneDNN v3.2,
runtime/gemm_provider.py loads it). Its headers are not in that wheel; the few enum values
below are from `onednn-devel-cpu-gomp==2023.2.0`'s include/oneapi/dnnl/dnnl_types.h and
dnnl_common_types.h (named per constant).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..hlo.errors import UnsupportedError
from .gemm_provider import onednn_library

# dnnl_common_types.h
DNNL_SUCCESS = 0  # dnnl_success
DNNL_F32 = 3  # dnnl_data_type_t dnnl_f32
DNNL_CPU = 1  # dnnl_engine_kind_t dnnl_cpu
DNNL_STREAM_DEFAULT_FLAGS = 1  # dnnl_stream_default_flags (in order)
DNNL_MAX_NDIMS = 12  # dnnl_dims_t is int64_t[DNNL_MAX_NDIMS]
# dnnl_types.h
FORMAT_TAG_ANY = 1  # dnnl_format_tag_any
FORWARD_INFERENCE = 96  # dnnl_prop_kind_t dnnl_forward_inference
CONVOLUTION_DIRECT = 1  # dnnl_alg_kind_t dnnl_convolution_direct
ELTWISE_RELU, ELTWISE_LINEAR, ELTWISE_CLIP = 0x20, 38, 46  # dnnl_eltwise_relu/_linear/_clip
BINARY_ADD, BINARY_MUL, BINARY_MAX, BINARY_MIN, BINARY_SUB = 0x1FFF0, 0x1FFF1, 0x1FFF2, 0x1FFF3, 0x1FFF5
SCRATCHPAD_MODE_USER = 1  # dnnl_scratchpad_mode_user
QUERY_IMPL_INFO_STR = 8  # dnnl_query_impl_info_str
QUERY_WEIGHTS_MD, QUERY_SCRATCHPAD_MD = 131, 136  # dnnl_query_weights_md, dnnl_query_scratchpad_md
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS, ARG_SCRATCHPAD = 1, 17, 33, 41, 80  # DNNL_ARG_*
ARG_SRC_1 = 2  # DNNL_ARG_SRC_1
ARG_FROM, ARG_TO = 1, 17  # DNNL_ARG_FROM / DNNL_ARG_TO (a reorder's)
ARG_POST_OP_BASE = 32768  # DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) = BASE * (i + 1)

# The handle block's fixed slots (i8* each); the memory descriptors of the arguments follow.
SLOT_PRIMITIVE, SLOT_STREAM, SLOT_ENGINE, SLOT_THREADS = 0, 1, 2, 3
SLOT_SCRATCH_BYTES, SLOT_REORDER, SLOT_PACKED_BYTES, SLOT_PACKED_MD, SLOT_USER_WEIGHTS_MD = 4, 5, 6, 7, 8
FIXED_SLOTS = 9

_lock = threading.RLock()
_state: dict = {"engine": None, "stream": None}
# Keyed by description and thread count: oneDNN fixes a primitive's split over threads when it
# is made, and programs loaded under different HLOFUSE_CPU_THREADS may share a description.
_primitives: dict[tuple["Description", int], "Primitive"] = {}
_descriptors: dict[tuple["Description", int], "_Descriptor"] = {}
# Primitives a background registration made for a key another caller made first: their blocks
# are still compiled code's (register_primitives).
_other_primitives: list["Primitive"] = []
# The threads a primitive runs on (omp_set_num_threads around each call, from a cell of its
# own the handle block points at): cpu_threads.kernel_threads() of the program that loads it,
# 1 in a forked child (libgomp is not fork-safe, runtime/cpu_threads.py). oneDNN fixes a
# primitive's split over threads when it makes the descriptor (from omp_get_max_threads()), so
# descriptors are made under the same count (`_creation_threads`), a program gets the
# primitive made for its own count (`register_primitives`), and a forked child makes its
# primitives again for one thread.


def _after_fork_in_child() -> None:
    """In a forked child: one thread, and every primitive made again for it, in place (the
    handle blocks compiled code reads keep their addresses). A parent's primitive would
    start a team of the parent's thread count, which hangs the child."""
    _descriptors.clear()
    for prim in list(_primitives.values()) + _other_primitives:
        _remake_in_place(prim, 1)


def _remake_in_place(prim: "Primitive", threads: int) -> None:
    """Make `prim`'s primitive again for `threads` threads, into the same handle block (compiled
    code holds its address). The former objects stay alive in `prim.keep`: a call that read
    them before the copy still runs on valid handles."""
    fresh = _create(prim.desc, threads)
    fresh.threads_cell.value = threads
    block = list(fresh.block)
    block[SLOT_THREADS] = ctypes.addressof(prim.threads_cell)  # the cell compiled code was given
    prim.threads_cell.value = threads
    for i, v in enumerate(block):
        prim.block[i] = v
    prim.keep.append(fresh)
    prim.scratch_bytes, prim.packed_bytes, prim.impl = fresh.scratch_bytes, fresh.packed_bytes, fresh.impl
    prim.threads = threads


class _creation_threads:
    """Within it, the calling thread's omp_get_max_threads() is `n` (oneDNN reads it when it
    makes a primitive descriptor)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> None:
        gomp = ctypes.CDLL("libgomp.so.1")  # libdnnl's own (loaded with it): the same handle
        self.set = gomp.omp_set_num_threads
        self.saved = gomp.omp_get_max_threads()
        self.set(self.n)

    def __exit__(self, *exc) -> None:
        self.set(self.saved)


def _threads_now() -> int:
    from .cpu_threads import kernel_threads

    return kernel_threads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class Tensor:
    """An f32 tensor in oneDNN's logical order (N, C, spatial... for data; [G,] O, I, spatial...
    for weights), its strides in elements (any layout a row-major HLO array has)."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class PostOp:
    """One oneDNN post-op: an eltwise (`alg`, alpha, beta) or a binary op (`alg`) with a second
    operand: a kernel input (`operand`, its Tensor, broadcast where a dim is 1) or, when
    `constant` holds values, those (a constant of the fused computation, shape `operand.dims`)."""

    kind: str  # "eltwise" or "binary"
    alg: int
    alpha: float = 0.0
    beta: float = 0.0
    operand: Tensor | None = None
    constant: tuple[float, ...] | None = None


def _post_op_arguments(post_ops: tuple[PostOp, ...]) -> list[tuple[int, str]]:
    """(DNNL_ARG_*, "post<i>") of each binary post-op's input operand."""
    return [(ARG_POST_OP_BASE * (i + 1) | ARG_SRC_1, f"post{i}") for i, p in enumerate(post_ops) if p.kind == "binary"]


@dataclass(frozen=True)
class ConvDescription:
    """A forward f32 convolution as oneDNN takes it: tensors, spatial strides, dilations
    (oneDNN's: 0 is none), padding, post-ops, and whether the weights go to oneDNN's own
    layout (`weights_any`: reordered per call)."""

    src: Tensor
    weights: Tensor
    bias: Tensor | None
    dst: Tensor
    strides: tuple[int, ...]
    dilates: tuple[int, ...]
    pad_l: tuple[int, ...]
    pad_r: tuple[int, ...]
    post_ops: tuple[PostOp, ...] = ()
    weights_any: bool = True

    @property
    def symbol(self) -> str:
        """The name compiled code finds this description's handle block by."""
        return "hlofuse_dnnl_conv_" + hashlib.sha1(repr(self).encode()).hexdigest()[:20]

    def arguments(self) -> list[tuple[int, str]]:
        """(DNNL_ARG_*, what) of each execution argument with a kernel buffer, in block order:
        "src", "weights", "bias", "dst", or "post<i>" (the i-th post-op's input operand)."""
        args = [(ARG_SRC, "src"), (ARG_WEIGHTS, "weights")]
        if self.bias is not None:
            args.append((ARG_BIAS, "bias"))
        args.append((ARG_DST, "dst"))
        return args + _post_op_arguments(self.post_ops)


@dataclass(frozen=True)
class MatmulDescription:
    """A batched f32 matrix product as oneDNN's matmul primitive takes it: src [batch..., M, K],
    weights [batch..., K, N], dst [batch..., M, N], each with its own strides (batch dimensions
    anywhere, transposes as strides: no copies), optional post-ops. The weights are read in
    place (no reorder: they change every call in attention)."""

    src: Tensor
    weights: Tensor
    dst: Tensor
    post_ops: tuple[PostOp, ...] = ()
    # A slice of the product that the kernel calls once per work unit (the driver's threads share
    # the units): the primitive is made for one thread, whatever the program's count.
    per_unit: bool = False
    bias = None  # no bias argument (the same execution-argument rules as ConvDescription)
    weights_any = False

    @property
    def symbol(self) -> str:
        """The name compiled code finds this description's handle block by."""
        return "hlofuse_dnnl_matmul_" + hashlib.sha1(repr(self).encode()).hexdigest()[:20]

    def arguments(self) -> list[tuple[int, str]]:
        """(DNNL_ARG_*, what) of each execution argument with a kernel buffer, in block order:
        "src", "weights", "dst", or "post<i>" (the i-th post-op's input operand)."""
        return [(ARG_SRC, "src"), (ARG_WEIGHTS, "weights"), (ARG_DST, "dst")] + _post_op_arguments(self.post_ops)


Description = ConvDescription | MatmulDescription


class OneDnnError(UnsupportedError):
    """oneDNN refused a description (no implementation, or an invalid one)."""


def available() -> bool:
    """Whether libdnnl loads in this process."""
    return onednn_library() is not None


def _lib() -> ctypes.CDLL:
    lib = onednn_library()
    if lib is None:
        raise OneDnnError("libdnnl is not installed (PyPI onednn-cpu-gomp)")
    return lib


def _check(status: int, what: str) -> None:
    if status != DNNL_SUCCESS:
        raise OneDnnError(f"oneDNN {what} failed (dnnl_status_t {status})")


def _dims(values) -> ctypes.Array:
    arr = (ctypes.c_int64 * DNNL_MAX_NDIMS)()
    for i, v in enumerate(values):
        arr[i] = int(v)
    return arr


def _engine_and_stream() -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
    """The process's CPU engine and stream (created once)."""
    with _lock:
        return _make_engine_and_stream()


def _make_engine_and_stream() -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
    if _state["engine"] is None:
        lib = _lib()
        engine, stream = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.dnnl_engine_create(ctypes.byref(engine), DNNL_CPU, ctypes.c_size_t(0)), "engine creation")
        _check(lib.dnnl_stream_create(ctypes.byref(stream), engine, ctypes.c_uint(DNNL_STREAM_DEFAULT_FLAGS)),
               "stream creation")
        _state["engine"], _state["stream"] = engine, stream
    return _state["engine"], _state["stream"]


def _md(t: Tensor | None, any_format: bool = False) -> ctypes.c_void_p:
    """A new memory descriptor of `t` (strided, or oneDNN's choice with `any_format`)."""
    lib = _lib()
    md = ctypes.c_void_p()
    if t is None:
        return md
    if any_format:
        _check(lib.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(t.dims), _dims(t.dims), DNNL_F32,
                                                    FORMAT_TAG_ANY), "memory descriptor")
    else:
        _check(lib.dnnl_memory_desc_create_with_strides(ctypes.byref(md), len(t.dims), _dims(t.dims), DNNL_F32,
                                                        _dims(t.strides)), "memory descriptor")
    return md


@dataclass(eq=False)
class Primitive:
    """A created primitive and the handle block compiled kernels read."""

    desc: Description
    impl: str
    block: ctypes.Array
    scratch_bytes: int
    packed_bytes: int
    keep: list = field(default_factory=list)  # descriptors, constants: alive as long as the block
    threads: int = 1  # the thread count oneDNN split the primitive for (`_creation_threads`)
    threads_cell: ctypes.c_int32 = field(default_factory=lambda: ctypes.c_int32(1))  # read by each call

    @property
    def address(self) -> int:
        """The handle block's address (what `desc.symbol` resolves to)."""
        return ctypes.addressof(self.block)

    def run_numpy(self, arrays: dict[str, np.ndarray]) -> None:
        """Execute once from Python on the f32 arrays `arrays` (keys of `desc.arguments()`;
        "dst" is written), as the compiled kernel does: per-call memory objects and scratchpad,
        weights reordered first when oneDNN chose their layout. For tests and benchmarks."""
        lib = _lib()
        engine, stream = _engine_and_stream()
        b = self.block
        mems: list[ctypes.c_void_p] = []

        def memory(md, ptr) -> ctypes.c_void_p:
            m = ctypes.c_void_p()
            _check(lib.dnnl_memory_create(ctypes.byref(m), ctypes.c_void_p(md), engine, ctypes.c_void_p(ptr)),
                   "memory creation")
            mems.append(m)
            return m

        scratch = np.empty(max(self.scratch_bytes, 1), np.uint8)
        packed = np.empty(max(self.packed_bytes, 1), np.uint8)
        handles = {name: arrays[name].ctypes.data if name in arrays else b[constant_slot(self.desc, i)]
                   for i, (_, name) in enumerate(self.desc.arguments())}
        try:
            if b[SLOT_REORDER]:
                reorder_args = (_ExecArg * 2)(_ExecArg(ARG_FROM, memory(b[SLOT_USER_WEIGHTS_MD], handles["weights"])),
                                              _ExecArg(ARG_TO, memory(b[SLOT_PACKED_MD], packed.ctypes.data)))
                _check(lib.dnnl_primitive_execute(ctypes.c_void_p(b[SLOT_REORDER]), stream, 2, reorder_args),
                       "weights reorder")
                handles["weights"] = packed.ctypes.data
            args = [_ExecArg(arg, memory(b[FIXED_SLOTS + i], handles[name]))
                    for i, (arg, name) in enumerate(self.desc.arguments())]
            if self.scratch_bytes:
                args.append(_ExecArg(ARG_SCRATCHPAD, memory(b[scratch_slot(self.desc)], scratch.ctypes.data)))
            arr = (_ExecArg * len(args))(*args)
            _check(lib.dnnl_primitive_execute(ctypes.c_void_p(b[SLOT_PRIMITIVE]), stream, len(args), arr), "execution")
        finally:
            for m in mems:
                lib.dnnl_memory_destroy(m)


class _ExecArg(ctypes.Structure):
    """dnnl_exec_arg_t: {int arg; dnnl_memory_t memory;} (dnnl_types.h)."""

    _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]


def block_slots(desc: Description) -> int:
    """Slots of `desc`'s handle block: the fixed ones, a memory descriptor per argument, the
    scratchpad's descriptor, then per argument the address of its constant values (a post-op
    operand that is a constant of the fusion) or null."""
    return FIXED_SLOTS + 2 * len(desc.arguments()) + 1


def constant_slot(desc: Description, i: int) -> int:
    """The slot holding the constant values of argument `i` (null: a kernel buffer)."""
    return FIXED_SLOTS + len(desc.arguments()) + 1 + i


def scratch_slot(desc: Description) -> int:
    """The slot of the scratchpad's memory descriptor (after the arguments')."""
    return FIXED_SLOTS + len(desc.arguments())


@dataclass(eq=False)
class _Descriptor:
    """A primitive descriptor (what oneDNN would run, before its JIT) and the
    memory descriptors it was made from, alive as long as it is."""

    pd: ctypes.c_void_p
    impl: str
    mds: dict  # "src", "dst", "bias", "user_weights", "weights", post-op index -> descriptor
    keep: list


def _descriptor(desc: Description, threads: int | None = None) -> _Descriptor:
    """The primitive descriptor of `desc` for `threads` threads (default: the kernels'), made
    once per process (no code generated yet: the rule asks for the implementation of every
    candidate, the loader creates the primitives of the chosen ones). Raises OneDnnError
    when oneDNN has no implementation."""
    threads = _threads_now() if threads is None else threads
    with _lock:
        found = _descriptors.get((desc, threads))
        if found is not None:
            return found
        with _creation_threads(threads):
            found = _make_descriptor(desc)
        return _descriptors.setdefault((desc, threads), found)


def _primitive_desc(lib: ctypes.CDLL, engine, desc: Description, mds: dict, attr) -> int:
    """Create the primitive descriptor of `desc` (its kind's oneDNN call) into `mds["pd"]`;
    the dnnl_status_t."""
    pd = mds["pd"]
    if isinstance(desc, MatmulDescription):
        return lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), engine, mds["src"], mds["weights"], None,
                                                     mds["dst"], attr)
    return lib.dnnl_convolution_forward_primitive_desc_create(
        ctypes.byref(pd), engine, FORWARD_INFERENCE, CONVOLUTION_DIRECT, mds["src"], mds["weights"], mds["bias"],
        mds["dst"], _dims(desc.strides), _dims(desc.dilates), _dims(desc.pad_l), _dims(desc.pad_r), attr)


def _make_descriptor(desc: Description) -> _Descriptor:
    lib = _lib()
    engine, _ = _engine_and_stream()
    src, dst, bias = _md(desc.src), _md(desc.dst), _md(desc.bias)
    user_w = _md(desc.weights)
    w = _md(desc.weights, any_format=desc.weights_any)
    mds: dict = {"src": src, "dst": dst, "bias": bias, "user_weights": user_w, "weights": w}
    attr, post = ctypes.c_void_p(), ctypes.c_void_p()
    _check(lib.dnnl_primitive_attr_create(ctypes.byref(attr)), "attribute creation")
    _check(lib.dnnl_primitive_attr_set_scratchpad_mode(attr, SCRATCHPAD_MODE_USER), "scratchpad mode")
    _check(lib.dnnl_post_ops_create(ctypes.byref(post)), "post-ops creation")
    for i, p in enumerate(desc.post_ops):
        if p.kind == "eltwise":
            _check(lib.dnnl_post_ops_append_eltwise(post, p.alg, ctypes.c_float(p.alpha), ctypes.c_float(p.beta)),
                   "eltwise post-op")
        else:
            mds[i] = _md(p.operand)
            _check(lib.dnnl_post_ops_append_binary(post, p.alg, mds[i]), "binary post-op")
    _check(lib.dnnl_primitive_attr_set_post_ops(attr, post), "post-ops")
    pd = ctypes.c_void_p()
    status = _primitive_desc(lib, engine, desc, {**mds, "pd": pd}, attr)
    lib.dnnl_post_ops_destroy(post)
    lib.dnnl_primitive_attr_destroy(attr)
    _check(status, f"{type(desc).__name__} primitive descriptor")
    info = ctypes.c_char_p()
    _check(lib.dnnl_primitive_desc_query(pd, QUERY_IMPL_INFO_STR, 0, ctypes.byref(info)), "implementation query")
    return _Descriptor(pd, info.value.decode(), mds, list(mds.values()))


def _create(desc: Description, threads: int | None = None) -> Primitive:
    threads = _threads_now() if threads is None else threads
    with _lock, _creation_threads(threads):
        return _make(desc, threads)


def _make(desc: Description, threads: int) -> Primitive:
    lib = _lib()
    lib.dnnl_primitive_desc_query_md.restype = ctypes.c_void_p
    lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
    engine, stream = _engine_and_stream()
    d = _descriptor(desc, threads)
    pd, impl, keep = d.pd, d.impl, [d]
    src, dst, bias, user_w, w = (d.mds[k] for k in ("src", "dst", "bias", "user_weights", "weights"))
    post_mds = {k: v for k, v in d.mds.items() if isinstance(k, int)}
    prim = ctypes.c_void_p()
    _check(lib.dnnl_primitive_create(ctypes.byref(prim), pd), "primitive creation")
    keep.append(prim)
    chosen_w = lib.dnnl_primitive_desc_query_md(pd, QUERY_WEIGHTS_MD, 0)
    scratch_md = lib.dnnl_primitive_desc_query_md(pd, QUERY_SCRATCHPAD_MD, 0)
    scratch_bytes = int(lib.dnnl_memory_desc_get_size(ctypes.c_void_p(scratch_md))) if scratch_md else 0
    reorder, packed_bytes = ctypes.c_void_p(), 0
    if desc.weights_any and not lib.dnnl_memory_desc_equal(user_w, ctypes.c_void_p(chosen_w)):
        rpd = ctypes.c_void_p()
        _check(lib.dnnl_reorder_primitive_desc_create(ctypes.byref(rpd), user_w, engine, ctypes.c_void_p(chosen_w),
                                                      engine, None), "weights reorder descriptor")
        _check(lib.dnnl_primitive_create(ctypes.byref(reorder), rpd), "weights reorder")
        keep += [rpd, reorder]
        packed_bytes = int(lib.dnnl_memory_desc_get_size(ctypes.c_void_p(chosen_w)))
    args = desc.arguments()
    block = (ctypes.c_void_p * block_slots(desc))()
    block[SLOT_PRIMITIVE], block[SLOT_STREAM], block[SLOT_ENGINE] = prim.value, stream.value, engine.value
    threads_cell = ctypes.c_int32(threads)
    block[SLOT_THREADS] = ctypes.addressof(threads_cell)
    block[SLOT_SCRATCH_BYTES] = scratch_bytes or None
    block[SLOT_REORDER] = reorder.value
    block[SLOT_PACKED_BYTES] = packed_bytes or None
    block[SLOT_PACKED_MD] = chosen_w if reorder.value else None
    block[SLOT_USER_WEIGHTS_MD] = user_w.value
    mds = {"src": src, "bias": bias, "dst": dst,
           "weights": ctypes.c_void_p(chosen_w) if reorder.value else (w if not desc.weights_any else user_w)}
    for i, (_, name) in enumerate(args):
        block[FIXED_SLOTS + i] = (post_mds[int(name[4:])] if name.startswith("post") else mds[name]).value
    block[scratch_slot(desc)] = scratch_md or None
    for i, (_, name) in enumerate(args):
        if name.startswith("post") and desc.post_ops[int(name[4:])].constant is not None:
            values = np.ascontiguousarray(desc.post_ops[int(name[4:])].constant, np.float32)
            keep.append(values)
            block[constant_slot(desc, i)] = values.ctypes.data
    return Primitive(desc, impl, block, scratch_bytes, packed_bytes, keep, threads, threads_cell)


def primitive(desc: Description, threads: int | None = None) -> Primitive:
    """The primitive of `desc` made for `threads` threads (default: the kernels' count now),
    created on first use in this process (raises OneDnnError when oneDNN has no
    implementation for it)."""
    threads = _threads_now() if threads is None else threads
    with _lock:
        prim = _primitives.get((desc, threads))
        if prim is None:
            prim = _primitives[(desc, threads)] = _create(desc, threads)
        return prim


def implementation(desc: Description) -> str | None:
    """The implementation oneDNN chooses for `desc` ("brg:avx512_core", "jit:avx512_core",
    "gemm:jit", "ref:any" ...), or None when it has none or libdnnl is absent."""
    if not available():
        return None
    try:
        return _descriptor(desc).impl
    except OneDnnError:
        return None


def register_primitives(descs, background: bool = False) -> Callable[[], None]:
    """Create each description's primitive for the loading program's thread count
    (cpu_threads.kernel_threads(); where not yet) and make its handle block resolvable under
    `desc.symbol` for the object code about to load. MCJIT binds the symbol when that code
    loads, so a program loaded earlier under another thread count keeps its own primitive
    (one made for one thread and called on two ran attention's p.v dot 1.35x slower); a
    description called once per work unit (`per_unit`) gets one made for one thread.
    Programs loading concurrently under different thread counts may race on the symbol.

    With `background`, the primitives this process has not made yet are made on a thread of
    their own: their handle blocks exist (and are registered) at once and the thread fills
    them, while the caller loads the object code (oneDNN's primitive JIT and LLVM's linking
    both run outside the GIL: a cached compile's two largest native costs side by side). The
    function returned waits for the thread (raising its OneDnnError); the blocks must not be
    read before it returns. Without, everything is made now and it returns at once."""
    import llvmlite.binding as llvm

    from .cpu_threads import kernel_threads

    descs = list(descs)
    if not descs:
        return _nothing_to_wait_for
    threads = kernel_threads()
    later: dict[tuple[Description, int], ctypes.Array] = {}
    for desc in descs:
        key = (desc, 1 if getattr(desc, "per_unit", False) else threads)
        with _lock:
            made = _primitives.get(key)
        if made is not None or not background:
            llvm.add_symbol(desc.symbol, (made or primitive(*key)).address)
        else:
            if key not in later:
                later[key] = (ctypes.c_void_p * block_slots(desc))()
            llvm.add_symbol(desc.symbol, ctypes.addressof(later[key]))
    if not later:
        return _nothing_to_wait_for
    failure: list[BaseException] = []

    def make_all() -> None:
        try:
            for (desc, count), block in later.items():
                fresh = _create(desc, count)
                for i, value in enumerate(fresh.block):
                    block[i] = value
                fresh.keep.append(fresh.block)  # (its values now live in `block`)
                fresh.block = block
                with _lock:  # kept alive as long as the process: compiled code holds `block`
                    if (desc, count) in _primitives:  # made meanwhile by another caller
                        _other_primitives.append(fresh)
                    else:
                        _primitives[(desc, count)] = fresh
        except BaseException as e:  # noqa: BLE001 - given to the caller by `wait`
            failure.append(e)

    worker = threading.Thread(target=make_all, name="hlofuse-onednn-primitives", daemon=True)
    worker.start()

    def wait() -> None:
        worker.join()
        if failure:
            raise failure[0]

    return wait


def _nothing_to_wait_for() -> None:
    """`register_primitives`' wait when nothing was left to a thread."""
