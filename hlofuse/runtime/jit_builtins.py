"""Runtime library calls LLVM's code generator inserts on its own, provided to the JIT (jit.py).

LLVM lowers some IR operations to calls of compiler-rt / libgcc "builtins" rather than to
instructions. On x86-64 the ones hlofuse's IR can produce are the half-precision conversions:
`fptrunc double -> half` is always `__truncdfhf2` (no x86 instruction rounds f64 to f16 in one
step; the DAG combiner even creates such a truncation for `copysign(half, fpext(x))`), and
without F16C `__truncsfhf2` / `__extendhfsf2` handle every f32 <-> f16 conversion.

The JIT cannot find these in the Python process: libgcc_s is loaded RTLD_LOCAL (by llvmlite),
and older libgcc versions lack the half builtins entirely. MCJIT then silently binds the
call to address 0 and the kernel dies with SIGSEGV (an f16 atan2 did, and any f64 -> f16
convert). So hlofuse compiles its own definitions once per process, from integer arithmetic
only (a float definition would lower to a call of itself), and registers their addresses
with `llvm.add_symbol` before any kernel is loaded. `undefined_symbols` + `check_resolvable`
turn any other unresolvable symbol into an error instead of a crash.
"""
from __future__ import annotations

import struct
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from ..emitters.cpu.target import new_host_target_machine

_lock = threading.Lock()
_registered: dict[str, int] = {}
_engines: list = []  # the engines holding the builtins' machine code, alive for the process
_scratch: list[bool] = []  # [True] once the scratch allocator is registered


@dataclass(frozen=True)
class _Format:
    """An IEEE binary floating-point format: total, exponent and stored mantissa bits."""

    ir_type: ir.Type
    bits: int
    exp_bits: int
    mant_bits: int

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def exp_max(self) -> int:
        return (1 << self.exp_bits) - 1


F16 = _Format(ir.HalfType(), 16, 5, 10)
F32 = _Format(ir.FloatType(), 32, 8, 23)
F64 = _Format(ir.DoubleType(), 64, 11, 52)


def _emit_truncate(module: ir.Module, name: str, src: _Format, dst: _Format) -> None:
    """`dst name(src x)`: x rounded to nearest-even in `dst` (overflow to infinity, gradual
    underflow to subnormals, NaN stays a quiet NaN with its sign and top payload bits)."""
    fn = ir.Function(module, ir.FunctionType(dst.ir_type, [src.ir_type]), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    it = ir.IntType(src.bits)

    def c(v: int) -> ir.Constant:
        return ir.Constant(it, v)

    sm, dm = src.mant_bits, dst.mant_bits
    bits = b.bitcast(fn.args[0], it)
    sign = b.lshr(bits, c(src.bits - 1))
    exp = b.and_(b.lshr(bits, c(sm)), c(src.exp_max))
    mant = b.and_(bits, c((1 << sm) - 1))
    is_norm = b.icmp_unsigned("!=", exp, c(0))
    sig = b.select(is_norm, b.or_(mant, c(1 << sm)), mant)
    # Biased exponent in dst (a source subnormal has exponent 1 - bias and no implicit bit).
    dexp = b.add(b.select(is_norm, exp, c(1)), c(dst.bias - src.bias))
    dst_normal = b.icmp_signed(">", dexp, c(0))
    # Normal result: ((dexp - 1) << dm) + rounded significand (its implicit bit, and a carry
    # out of rounding, step the exponent field). Subnormal: shift further right by 1 - dexp.
    base = b.select(dst_normal, b.shl(b.sub(dexp, c(1)), c(dm)), c(0))
    extra = b.select(dst_normal, c(0), b.sub(c(1), dexp))
    # Past sm + 2 bits the value is below half the smallest subnormal: clamp (keeps shifts legal).
    limit = c(sm + 2 - (sm - dm))
    extra = b.select(b.icmp_signed(">", extra, limit), limit, extra)
    shift = b.add(extra, c(sm - dm))
    q = b.lshr(sig, shift)
    rem = b.and_(sig, b.sub(b.shl(c(1), shift), c(1)))
    half = b.shl(c(1), b.sub(shift, c(1)))
    tie_odd = b.and_(b.icmp_unsigned("==", rem, half), b.trunc(q, ir.IntType(1)))
    round_up = b.or_(b.icmp_unsigned(">", rem, half), tie_odd)
    mag = b.add(b.add(base, q), b.zext(round_up, it))
    inf = c(dst.exp_max << dm)
    mag = b.select(b.icmp_unsigned(">=", mag, inf), inf, mag)
    nan = b.or_(c((dst.exp_max << dm) | (1 << (dm - 1))), b.lshr(mant, c(sm - dm)))
    special = b.select(b.icmp_unsigned("!=", mant, c(0)), nan, inf)
    mag = b.select(b.icmp_unsigned("==", exp, c(src.exp_max)), special, mag)
    out = b.or_(mag, b.shl(sign, c(dst.bits - 1)))
    b.ret(b.bitcast(b.trunc(out, ir.IntType(dst.bits)), dst.ir_type))


def _emit_extend(module: ir.Module, name: str, src: _Format, dst: _Format) -> None:
    """`dst name(src x)`: x exactly, for a format `dst` with more exponent and mantissa bits.
    The significand goes through `uitofp` and a power-of-two multiply, both exact here."""
    fn = ir.Function(module, ir.FunctionType(dst.ir_type, [src.ir_type]), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    it = ir.IntType(dst.bits)

    def c(v: int) -> ir.Constant:
        return ir.Constant(it, v)

    sm, dm = src.mant_bits, dst.mant_bits
    bits = b.zext(b.bitcast(fn.args[0], ir.IntType(src.bits)), it)
    sign = b.shl(b.lshr(bits, c(src.bits - 1)), c(dst.bits - 1))
    exp = b.and_(b.lshr(bits, c(sm)), c(src.exp_max))
    mant = b.and_(bits, c((1 << sm) - 1))
    is_norm = b.icmp_unsigned("!=", exp, c(0))
    sig = b.select(is_norm, b.or_(mant, c(1 << sm)), mant)
    # value = sig * 2**(e - bias - sm), with e - bias - sm a normal exponent of dst.
    scale_exp = b.add(b.select(is_norm, exp, c(1)), c(dst.bias - src.bias - sm))
    scale = b.bitcast(b.shl(scale_exp, c(dm)), dst.ir_type)
    value = b.bitcast(b.fmul(b.uitofp(sig, dst.ir_type), scale), it)
    special = b.or_(c(dst.exp_max << dm), b.shl(mant, c(dm - sm)))
    mag = b.select(b.icmp_unsigned("==", exp, c(src.exp_max)), special, value)
    b.ret(b.bitcast(b.or_(mag, sign), dst.ir_type))


# name -> (emitter, source format, destination format): the builtins' names and ABI are
# compiler-rt's (half passed and returned in an SSE register on x86-64, as LLVM calls them).
_BUILTINS = {
    "__truncdfhf2": (_emit_truncate, F64, F16),
    "__truncsfhf2": (_emit_truncate, F32, F16),
    "__extendhfsf2": (_emit_extend, F16, F32),
    "__extendhfdf2": (_emit_extend, F16, F64),
}
# Older names of the same functions some LLVM targets call.
_ALIASES = {"__gnu_f2h_ieee": "__truncsfhf2", "__gnu_h2f_ieee": "__extendhfsf2"}


def builtins_module() -> ir.Module:
    """The LLVM module defining the builtins (host triple; no float op that needs a builtin)."""
    module = ir.Module(name="hlofuse_builtins")
    module.triple = llvm.get_process_triple()
    for name, (emit, src, dst) in _BUILTINS.items():
        emit(module, name, src, dst)
    return module


def register_builtins(needed: set[str] | None = None) -> dict[str, int]:
    """Compile the builtins once per process and make their symbols visible to every JIT
    (`llvm.add_symbol`); returns name -> address. The GEMM libraries' routines are registered
    too (each once per process), checked on every call: oneDNN's only once f32 GEMM kernels
    call it (`register_onednn`), which HLOFUSE_GEMM may decide after the first JIT.

    `needed`: the symbols the objects about to be loaded call (`undefined_symbols`); only what
    they call is registered then (None: everything). Most programs call none of the half
    builtins nor BLAS: compiling the builtins (14 ms of CPU) and importing scipy for BLAS
    (0.2-0.4 s) would be most of loading a program from the compile cache in a new process."""
    def wanted(names) -> bool:
        return needed is None or not needed.isdisjoint(names)

    with _lock:
        if not _registered and wanted(list(_BUILTINS) + list(_ALIASES)):
            llmod = llvm.parse_assembly(str(builtins_module()))
            llmod.verify()
            engine = llvm.create_mcjit_compiler(llmod, new_host_target_machine())
            engine.finalize_object()
            _engines.append(engine)
            for name in _BUILTINS:
                _registered[name] = engine.get_function_address(name)
            for alias, name in _ALIASES.items():
                _registered[alias] = _registered[name]
            for name, addr in _registered.items():
                llvm.add_symbol(name, addr)
        if not _scratch and wanted((SCRATCH_ALLOC, SCRATCH_FREE)):
            register_scratch_allocator()
            _scratch.append(True)
    if wanted([blas_symbol(r) for r in GEMM_ROUTINES]):
        try:
            register_blas()  # GEMM kernels call BLAS (below); without scipy they cannot be loaded
        except ImportError:
            pass  # check_resolvable then names the missing routines
    if wanted((onednn_symbol(), ONEDNN_GET_THREADS, ONEDNN_SET_THREADS) + ONEDNN_PRIMITIVE_API):
        register_onednn()
    return _registered


# ---- scratch memory ----------------------------------------------------------------------------
#
# A kernel that needs working memory per thread (the convolution GEMM kernels' patch tiles,
# codegen/kernels/cpu_conv_gemm.py) allocates it per call (each call runs on one thread) from
# libc: `i8* hlofuse_scratch_alloc(i64 alignment, i64 bytes)` is aligned_alloc,
# `void hlofuse_scratch_free(i8*)` is free. MCJIT does not search the process for libc's
# symbols, so they are registered like the BLAS routines.
SCRATCH_ALLOC, SCRATCH_FREE = "hlofuse_scratch_alloc", "hlofuse_scratch_free"


def register_scratch_allocator() -> None:
    """Register SCRATCH_ALLOC and SCRATCH_FREE (libc's aligned_alloc and free)."""
    import ctypes

    # The process's global symbols, libc's among them: ctypes.util.find_library("c") runs an
    # ldconfig subprocess (9-22 ms of wall time in a cached compile's new process).
    libc = ctypes.CDLL(None)
    for name, fn in ((SCRATCH_ALLOC, libc.aligned_alloc), (SCRATCH_FREE, libc.free)):
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


def undefined_symbols(obj: bytes) -> set[str] | None:
    """Names an ELF64 little-endian relocatable object refers to but does not define (None for
    another object format, which is then not checked)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for _, sh_type, _, _, offset, size, link, _, _, _ in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        strtab = sections[link][4]
        for k in range(size // 24):
            st_name, _, _, st_shndx, _, _ = struct.unpack_from("<IBBHQQ", obj, offset + 24 * k)
            if st_shndx == 0 and st_name:  # SHN_UNDEF
                end = obj.index(b"\0", strtab + st_name)
                names.add(obj[strtab + st_name:end].decode())
    return names


class UnresolvedSymbolError(RuntimeError):
    """Compiled code calls a function the JIT cannot find (it would be called at address 0)."""


def check_resolvable(obj: bytes, names: set[str] | None = None) -> None:
    """Raise UnresolvedSymbolError naming every symbol of object `obj` that neither the process
    nor `llvm.add_symbol` provides (MCJIT would silently bind it to address 0). `names`: its
    `undefined_symbols` when the caller has them already."""
    if names is None:
        names = undefined_symbols(obj)
    if not names:
        return
    missing = sorted(n for n in names if not llvm.address_of_symbol(n))
    if missing:
        raise UnresolvedSymbolError("compiled kernels call functions this process does not provide: "
                                    + ", ".join(missing))


# ---- BLAS ------------------------------------------------------------------------------------
#
# GEMM kernels (codegen/kernels/cpu_gemm.py) call the Fortran BLAS `?gemm_` routines of the
# OpenBLAS that scipy ships, through the function pointers scipy.linalg.cython_blas exports as
# PyCapsules (numba's np.dot uses the same). They are registered under hlofuse's own names
# (`blas_symbol`), so no other `sgemm_` the process may hold (a system BLAS) is picked by accident.
# That OpenBLAS is told once to use one thread: a GEMM kernel's work units (batch elements x
# row panels) are already split over hlofuse's threads, and OpenBLAS's own threads would spin
# against them (numpy's OpenBLAS is a different library, untouched).

GEMM_ROUTINES = ("sgemm", "dgemm", "cgemm", "zgemm")
_blas: dict[str, int] = {}


def blas_symbol(routine: str) -> str:
    """The name compiled kernels call BLAS routine `routine` (e.g. "sgemm") by."""
    return f"hlofuse_blas_{routine}"


def _capsule_address(capsule) -> int:
    import ctypes

    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return api.PyCapsule_GetPointer(capsule, api.PyCapsule_GetName(capsule))


def _single_threaded_scipy_blas() -> bool:
    """Set scipy's OpenBLAS to one thread (its `scipy_openblas_set_num_threads`); False when
    that library is not found."""
    import ctypes
    import glob
    import os

    import scipy

    libdir = os.path.join(os.path.dirname(os.path.dirname(scipy.__file__)), "scipy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*.so*")):
        lib = ctypes.CDLL(path)  # already loaded by scipy.linalg: the same handle
        for name in ("scipy_openblas_set_num_threads", "openblas_set_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(1)
                return True
    return False


def blas_available() -> bool:
    """Whether the BLAS routines of GEMM_ROUTINES can be registered (scipy is importable)."""
    try:
        return bool(register_blas())
    except ImportError:
        return False


def register_blas() -> dict[str, int]:
    """Register the GEMM routines' addresses with `llvm.add_symbol` under `blas_symbol` names
    (once per process) and make scipy's OpenBLAS single-threaded; returns name -> address.
    Raises ImportError when scipy is missing."""
    with _lock:
        if _blas:
            return _blas
        from scipy.linalg import cython_blas

        capsules = cython_blas.__pyx_capi__
        for routine in GEMM_ROUTINES:
            addr = _capsule_address(capsules[routine])
            llvm.add_symbol(blas_symbol(routine), addr)
            _blas[blas_symbol(routine)] = addr
        _single_threaded_scipy_blas()
        return _blas


# ---- oneDNN ----------------------------------------------------------------------------------
#
# f32 GEMM kernels call oneDNN's `dnnl_sgemm` where runtime/gemm_provider.py finds libdnnl
# (loaded there, RTLD_LOCAL); its address is registered under hlofuse's own name like the BLAS
# routines'.
# oneDNN runs a call on omp_get_max_threads() threads of libgomp unless it is already inside a
# parallel region: a GEMM kernel's units are hlofuse's (codegen/kernels/gemm_partition.py), so
# the kernel sets the calling thread's OpenMP thread count to 1 around its calls and restores it
# (codegen/kernels/blas_call.py). Those two libgomp functions are registered here, from the
# libgomp libdnnl itself links (the one the driver's GOMP_parallel comes from).

ONEDNN_SGEMM = "dnnl_sgemm"
ONEDNN_GET_THREADS, ONEDNN_SET_THREADS = "hlofuse_onednn_get_threads", "hlofuse_onednn_set_threads"
# oneDNN's primitive API, which convolution kernels call (codegen/kernels/cpu_conv_onednn.py,
# runtime/onednn_primitives.py): hlofuse's name -> libdnnl's.
DNNL_MEMORY_CREATE, DNNL_MEMORY_DESTROY, DNNL_EXECUTE = (
    "hlofuse_dnnl_memory_create", "hlofuse_dnnl_memory_destroy", "hlofuse_dnnl_primitive_execute")
ONEDNN_PRIMITIVE_API = (DNNL_MEMORY_CREATE, DNNL_MEMORY_DESTROY, DNNL_EXECUTE)
_onednn: dict[str, int] = {}


def onednn_symbol() -> str:
    """The name compiled kernels call oneDNN's `dnnl_sgemm` by."""
    return f"hlofuse_{ONEDNN_SGEMM}"


def register_onednn() -> int | None:
    """Register `dnnl_sgemm`'s address under `onednn_symbol()`, libgomp's
    `omp_get_max_threads` / `omp_set_num_threads` under ONEDNN_GET_THREADS / ONEDNN_SET_THREADS,
    and the primitive API's `dnnl_memory_create`, `dnnl_memory_destroy` and
    `dnnl_primitive_execute` under ONEDNN_PRIMITIVE_API's names (once per process); returns
    dnnl_sgemm's address, or None when f32 GEMM kernels call OpenBLAS (HLOFUSE_GEMM=openblas,
    or no libdnnl). libdnnl is then left unloaded (20-30 ms and about 22 MB of resident memory
    per process otherwise); a later JitModule registers it if the provider changes in between
    (every JitModule calls register_builtins, which calls this)."""
    import ctypes

    from .gemm_provider import gemm_provider, onednn_library

    if gemm_provider("f32") != "onednn":
        return None
    lib = onednn_library()
    with _lock:
        if not _onednn:
            gomp = ctypes.CDLL("libgomp.so.1")  # loaded with libdnnl, its dependency: the same handle
            for name, fn in ((onednn_symbol(), lib.dnnl_sgemm), (ONEDNN_GET_THREADS, gomp.omp_get_max_threads),
                             (ONEDNN_SET_THREADS, gomp.omp_set_num_threads),
                             (DNNL_MEMORY_CREATE, lib.dnnl_memory_create),
                             (DNNL_MEMORY_DESTROY, lib.dnnl_memory_destroy),
                             (DNNL_EXECUTE, lib.dnnl_primitive_execute)):
                _onednn[name] = ctypes.cast(fn, ctypes.c_void_p).value
                llvm.add_symbol(name, _onednn[name])
        return _onednn[onednn_symbol()]
