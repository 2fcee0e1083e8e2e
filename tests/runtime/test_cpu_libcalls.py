"""The builtins LLVM's code generator calls on its own (runtime/jit_builtins.py): the JIT
provides correct half-precision conversions, kernels that need them run (an f16 atan2 and an
f64 -> f16 convert segfaulted calling address 0), and an unresolvable symbol is an error.

References are numpy's own conversions (correctly rounded, round-half-to-even)."""
from __future__ import annotations

import ctypes
import platform

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

import hlofuse
from hlofuse.emitters.cpu.target import host_target_machine, new_host_target_machine
from hlofuse.runtime.jit import JitModule
from hlofuse.runtime.jit_builtins import UnresolvedSymbolError, register_builtins, undefined_symbols
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.interpreter import evaluate

_TYPES = {"f16": (ir.HalfType(), np.float16, np.uint16), "f32": (ir.FloatType(), np.float32, np.uint32),
          "f64": (ir.DoubleType(), np.float64, np.uint64)}


def _converter(name: str, src: str, dst: str, tm=None):
    """A JIT-compiled loop `out[i] = name(in[i])` calling builtin `name` explicitly (through the
    symbol the JIT registered), or, for name=None, an `fptrunc`/`fpext` LLVM lowers as it likes
    for target machine `tm`; returns a numpy-to-numpy function."""
    sty, snp, _ = _TYPES[src]
    dty, dnp, _ = _TYPES[dst]
    module = ir.Module("conv")
    module.triple = llvm.get_process_triple()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [sty.as_pointer(), dty.as_pointer(), ir.IntType(64)]),
                     "conv")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    src_ptr, dst_ptr, n = fn.args
    with b.if_then(b.icmp_signed(">", n, ir.Constant(ir.IntType(64), 0))):
        loop = b.append_basic_block("loop")
        done = b.append_basic_block("done")
        head = b.block
        b.branch(loop)
        b.position_at_end(loop)
        i = b.phi(ir.IntType(64))
        i.add_incoming(ir.Constant(ir.IntType(64), 0), head)
        x = b.load(b.gep(src_ptr, [i]))
        if name is not None:
            y = b.call(ir.Function(module, ir.FunctionType(dty, [sty]), name), [x])
        elif _TYPES[src][1]().itemsize > _TYPES[dst][1]().itemsize:
            y = b.fptrunc(x, dty)
        else:
            y = b.fpext(x, dty)
        b.store(y, b.gep(dst_ptr, [i]))
        nxt = b.add(i, ir.Constant(ir.IntType(64), 1))
        i.add_incoming(nxt, loop)
        b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
        b.position_at_end(done)
    b.ret_void()
    llmod = llvm.parse_assembly(str(module))
    llmod.verify()
    obj = (tm or host_target_machine()).emit_object(llmod)
    jit = JitModule(object_code=obj)
    cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(jit.address("conv"))

    def run(values: np.ndarray) -> np.ndarray:
        values = np.ascontiguousarray(values, dtype=snp)
        out = np.empty(values.shape, dnp)
        cfn(values.ctypes.data, out.ctypes.data, values.size)
        return out

    run.jit = jit  # keep the machine code alive
    run.obj = obj
    return run


def _assert_same_floats(got: np.ndarray, want: np.ndarray, uint) -> None:
    """Bit-identical, except that any NaN matches a NaN of the same sign."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    bad = np.flatnonzero(got[~nan].view(uint) != want[~nan].view(uint))
    assert bad.size == 0, f"{bad.size} wrong, first: {want[~nan][bad[:5]]} -> {got[~nan][bad[:5]]}"


def _all_halves() -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _truncation_cases(ftype) -> np.ndarray:
    """Values that stress rounding to f16: every f16 value, the exact midpoints between
    neighbours (ties go to even) and the values one ulp of `ftype` either side, the overflow
    threshold 65520, values below half the smallest subnormal, `ftype` subnormals, and
    random values over the whole exponent range."""
    h = _all_halves()
    h = h[np.isfinite(h)].astype(ftype)
    pos = np.sort(h[h >= 0])
    mids = (pos[:-1] + (pos[1:] - pos[:-1]) / 2).astype(ftype)
    mids = np.concatenate([mids, [ftype(65520.0)]])
    near = np.concatenate([mids, np.nextafter(mids, ftype(np.inf)), np.nextafter(mids, ftype(0))])
    rng = np.random.default_rng(0)
    info = np.finfo(ftype)
    rand = (rng.standard_normal(200_000) * 2.0 ** rng.integers(-30, 20, 200_000)).astype(ftype)
    wide = rng.integers(0, np.iinfo(np.uint32 if ftype == np.float32 else np.uint64).max, 100_000,
                        dtype=np.uint32 if ftype == np.float32 else np.uint64).view(ftype)
    special = np.array([0.0, np.inf, np.nan, info.max, info.tiny, info.smallest_subnormal, 2.0 ** -25,
                        2.0 ** -24, 1.5 * 2.0 ** -25, 2.0 ** -26, 65504.0, 65519.99, 1e300 if ftype == np.float64 else 3e38],
                       dtype=ftype)
    out = np.concatenate([h, near, rand, wide, special])
    return np.concatenate([out, -out])


@pytest.mark.parametrize("name,src", [("__truncdfhf2", "f64"), ("__truncsfhf2", "f32")])
def test_truncation_builtins_round_like_numpy(name, src):
    conv = _converter(name, src, "f16")
    values = _truncation_cases(_TYPES[src][1])
    with np.errstate(all="ignore"):
        want = values.astype(np.float16)
    _assert_same_floats(conv(values), want, np.uint16)


@pytest.mark.parametrize("name,dst", [("__extendhfsf2", "f32"), ("__extendhfdf2", "f64")])
def test_extension_builtins_are_exact_on_every_half(name, dst):
    conv = _converter(name, "f16", dst)
    halves = _all_halves()
    _assert_same_floats(conv(halves), halves.astype(_TYPES[dst][1]), _TYPES[dst][2])


def test_builtins_are_registered_with_the_jit():
    for name, addr in register_builtins().items():
        assert addr and llvm.address_of_symbol(name) == addr, name


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 feature set")
@pytest.mark.parametrize("src,dst", [("f32", "f16"), ("f16", "f32"), ("f64", "f16"), ("f16", "f64")])
def test_conversions_for_a_cpu_without_f16c_call_working_builtins(src, dst):
    """A baseline x86-64 (no F16C) lowers every f16 conversion to a builtin call: each one the
    code refers to resolves, and the results are numpy's."""
    llvm.initialize_native_target()
    tm = llvm.Target.from_default_triple().create_target_machine(cpu="x86-64", features="", opt=2,
                                                                 codemodel="jitdefault")
    conv = _converter(None, src, dst, tm)
    assert undefined_symbols(conv.obj) & {"__truncsfhf2", "__extendhfsf2", "__truncdfhf2"}
    values = _truncation_cases(_TYPES[src][1]) if dst == "f16" else _all_halves()
    with np.errstate(all="ignore"):
        want = values.astype(_TYPES[dst][1])
    _assert_same_floats(conv(values), want, _TYPES[dst][2])


def test_an_unresolvable_call_is_an_error_not_a_crash():
    llmod = llvm.parse_assembly("""
declare double @hlofuse_no_such_function(double)
define double @f(double %x) {
  %r = call double @hlofuse_no_such_function(double %x)
  ret double %r
}""")
    llmod.triple = llvm.get_process_triple()
    with pytest.raises(UnresolvedSymbolError, match="hlofuse_no_such_function"):
        JitModule(object_code=new_host_target_machine().emit_object(llmod))
    with pytest.raises(UnresolvedSymbolError, match="hlofuse_no_such_function"):
        JitModule(llmod)


# Ops whose f16 lowering calls __truncdfhf2 (they crashed), and their neighbours in the class:
# every f16-producing conversion and the f16 math computed through f64.
_F16_CASES = [
    ("f16", "atan2(x, y)"), ("f16", "power(x, y)"), ("f16", "divide(x, y)"), ("f16", "remainder(x, y)"),
    ("f16", "sine(x)"), ("f16", "tanh(x)"), ("f16", "exponential(x)"), ("f16", "cbrt(x)"),
    ("f64", "convert(x)"), ("f32", "convert(x)"), ("bf16", "convert(x)"), ("s32", "convert(x)"),
    ("s64", "convert(x)"), ("u64", "convert(x)"), ("c128", "real(x)"),
]


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("dims", ["", "3", "17"])
@pytest.mark.parametrize("src,expr", _F16_CASES)
def test_f16_results_match_the_interpreter(src, expr, dims, target):
    """The f16 results of these ops (scalar, a vector remainder, a vectorized loop) are the
    interpreter's; before the builtins were provided, the process died."""
    if expr.startswith("real"):
        root = f"  r = f64[{dims}] real(x)\n  ROOT a = f16[{dims}] convert(r)"
    elif expr.startswith("convert"):
        root = f"  ROOT a = f16[{dims}] convert(x)"
    else:
        root = f"  ROOT a = f16[{dims}] {expr}"
    text = (f"HloModule m\nENTRY e {{\n  x = {src}[{dims}] parameter(0)\n  y = {src}[{dims}] parameter(1)\n"
            f"{root}\n}}\n")
    module = parse_hlo(text)
    rng = np.random.default_rng(len(text))
    shape = () if not dims else (int(dims),)
    dt = module.entry.parameters[0].shape.dtype.numpy
    if np.issubdtype(dt, np.complexfloating):
        args = [(rng.standard_normal(shape) * 100 + 1j * rng.standard_normal(shape)).astype(dt) for _ in range(2)]
    elif np.issubdtype(dt, np.integer):
        args = [rng.integers(-70000, 70000, shape).astype(dt) for _ in range(2)]
    else:
        args = [(rng.standard_normal(shape) * 3 + 0.5).astype(dt) for _ in range(2)]
    want = evaluate(module, args)
    for fusion in (True, False):
        got = list(hlofuse.compile(module, target=target, fusion=fusion)(*args))
        results = compare_outputs(got, want)
        assert all(r.ok for r in results), "\n".join(r.line() for r in results)
