"""The math approximations (emitters/math_approx.py, math_trig.py) on their own: each f32 function's IR is
built into a one-loop LLVM function (no element generators, fusion or kernels in between),
JIT-compiled for the host and run over random-bit, moderate and special inputs, its error in
ULP measured against numpy's float64 result rounded once to f32 (an independent reference).
The bounds are the module's own claims: a few ULP for the f32 polynomial family, about half
an ULP (so at most 1) for the functions computed in f64 and rounded once."""
from __future__ import annotations

import ctypes
import math

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from hlofuse.emitters import math_approx, math_trig
from hlofuse.emitters.cpu.target import CpuTarget, host_target_machine
from tests.fuzz.values import flush_denormals

F32, I64 = ir.FloatType(), ir.IntType(64)

_erf = np.vectorize(math.erf, otypes=[np.float64])

# (math_approx function, numpy float64 reference, max ULP)
UNARY = [
    ("exp_f32", np.exp, 2),
    ("log_f32", np.log, 2),
    ("expm1_f32", np.expm1, 3),
    ("log1p_f32", np.log1p, 3),
    ("tanh_f32", np.tanh, 5),  # a rational as XLA's (test_cpu_math.py compares with XLA:CPU)
    ("logistic_f32", lambda x: 1 / (1 + np.exp(-x)), 3),
    ("sin_f32", np.sin, 1),
    ("cos_f32", np.cos, 1),
    ("tan_f32", np.tan, 1),
    ("cbrt_f32", np.cbrt, 1),
    ("erf_f32", _erf, 1),
]
BINARY = [("pow_f32", np.power, 1), ("atan2_f32", np.arctan2, 1)]
# Functions that build no denormal results, relying on the kernels' flush-to-zero mode (the
# CPU target's `flushes_denormals`): compared after flushing both sides.
FLUSHED = {"logistic_f32"}
# Functions computed in f64 whose f32 operands are read as denormals-are-zero reads them
# (math_approx.to_f64: a denormal is made a zero of its sign in the IR, so LLVM cannot fold a
# literal denormal into a normal f64): their reference reads the operands flushed too.
READS_FLUSHED = {"cbrt_f32", "erf_f32", "cos_f32", "pow_f32", "atan2_f32"}

_ENGINES: list = []  # keep the JIT engines (and their code) alive for the session


def _jit(name: str, arity: int, target: CpuTarget | None = None):
    """void f(float* a, [float* b,] float* out, i64 n): out[i] = math_approx.<name>(a[i], ...)
    (emitted for `target`, by default the host's CpuTarget)."""
    target = target or CpuTarget()
    module = ir.Module(name=f"m_{name}")
    module.triple, module.data_layout = target.triple, target.data_layout
    ptr = F32.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [I64]), name="f")
    *ins, out, n = fn.args
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    args = [b.load(b.gep(p, [i])) for p in ins]
    fn = getattr(math_approx, name, None) or getattr(math_trig, name)
    b.store(fn(b, target, *args), b.gep(out, [i]))
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    llmod = llvm.parse_assembly(str(module))
    llmod.verify()
    engine = llvm.create_mcjit_compiler(llmod, host_target_machine())
    engine.finalize_object()
    _ENGINES.append(engine)
    cptr = ctypes.POINTER(ctypes.c_float)
    return ctypes.CFUNCTYPE(None, *([cptr] * (arity + 1)), ctypes.c_int64)(engine.get_function_address("f"))


def _call(f, *xs: np.ndarray) -> np.ndarray:
    xs = [np.ascontiguousarray(x, np.float32) for x in xs]
    out = np.empty_like(xs[0])
    cptr = ctypes.POINTER(ctypes.c_float)
    f(*[x.ctypes.data_as(cptr) for x in xs], out.ctypes.data_as(cptr), len(out))
    return out


def _inputs(seed: int, n: int = 1 << 14) -> np.ndarray:
    """Random bit patterns (every binade), moderate values, tiny values and the specials."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4028235e38],
                       np.float32)
    moderate = rng.uniform(-12, 12, n // 4).astype(np.float32)
    tiny = (rng.choice([-1, 1], n // 8) * 10.0 ** rng.uniform(-8, 0, n // 8)).astype(np.float32)
    return np.concatenate([special, bits[np.isfinite(bits)], moderate, tiny])


def _ulp(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """ULP distance of f32 arrays (on the ordered integer line); NaN matches NaN only."""
    def ordered(x):
        i = np.where(np.isnan(x), 0, x).astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    d = np.abs(ordered(got) - ordered(want)).astype(np.float64)
    return np.where(np.isnan(got) | np.isnan(want), np.where(np.isnan(got) == np.isnan(want), 0, np.inf), d)


def _reference(fn, *xs: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return fn(*[x.astype(np.float64) for x in xs]).astype(np.float32)


@pytest.mark.parametrize("name, ref, max_ulp", UNARY, ids=[u[0] for u in UNARY])
def test_unary_within_its_ulp_bound(name, ref, max_ulp):
    x = _inputs(seed=sum(map(ord, name)))
    got = _call(_jit(name, 1), x)
    want = _reference(ref, flush_denormals(x) if name in READS_FLUSHED else x)
    if name in FLUSHED:  # as in the kernels, which run with denormals flushed
        got, want = flush_denormals(got), flush_denormals(want)
    err = _ulp(got, want)
    worst = int(err.argmax())
    assert err[worst] <= max_ulp, f"{name}: {err[worst]} ULP at x={x[worst]!r}"


def test_logistic_keeps_denormals_where_the_target_does():
    """On a target that keeps denormals, logistic's tiny results (x in [-103.97, -87.34])
    are denormals within the bound, not the zeros the flushing form gives there."""
    x = np.concatenate([np.linspace(-103.9, -87.4, 4001, dtype=np.float32), _inputs(seed=5)])
    keeping = CpuTarget()
    keeping.flushes_denormals = False
    got = _call(_jit("logistic_f32", 1, keeping), x)
    want = _reference(lambda v: 1 / (1 + np.exp(-v)), x)
    assert np.count_nonzero((got != 0) & (np.abs(got) < 1.1754944e-38)) > 3000
    assert _ulp(got, want).max() <= 3


@pytest.mark.parametrize("name, ref, max_ulp", BINARY, ids=[u[0] for u in BINARY])
def test_binary_within_its_ulp_bound(name, ref, max_ulp):
    rng = np.random.default_rng(sum(map(ord, name)))
    x = _inputs(seed=1)
    y = rng.permutation(_inputs(seed=2))[: len(x)]
    x = x[: len(y)]
    if name == "pow_f32":  # the moderate range, where pow's result is neither 0 nor inf for most pairs
        x, y = np.abs(rng.uniform(0, 8, 1 << 14)).astype(np.float32), rng.uniform(-20, 20, 1 << 14).astype(np.float32)
    assert name in READS_FLUSHED
    err = _ulp(_call(_jit(name, 2), x, y), _reference(ref, flush_denormals(x), flush_denormals(y)))
    worst = int(err.argmax())
    assert err[worst] <= max_ulp, f"{name}: {err[worst]} ULP at x={x[worst]!r} y={y[worst]!r}"


# cos is left out: cos of a denormal and of zero round to the same f32 (1), so no operand shows it.
@pytest.mark.parametrize("name", sorted(READS_FLUSHED - {"cos_f32"}))
def test_functions_reading_flushed_operands_read_a_denormal_as_zero(name):
    """Without the kernels' MXCSR mode (this harness sets none), only to_f64's flush in the IR
    can make a denormal operand a zero: f(d) must equal f(0) of d's sign, bit for bit, where
    numpy's f(d) differs (checked, so the test can fail)."""
    d = np.array([1e-40, -1e-40, 1.1e-38, -5e-45], np.float32)
    zero = np.copysign(np.zeros_like(d), d)
    args, zargs = {"pow_f32": ([np.full_like(d, np.inf), d], [np.full_like(d, np.inf), zero]),
                   "atan2_f32": ([d, d], [zero, zero])}.get(name, ([d], [zero]))
    ref = {u[0]: u[1] for u in UNARY + BINARY}[name]
    f = _jit(name, len(args))
    got, at_zero = _call(f, *args), _call(f, *zargs)
    assert not np.array_equal(_reference(ref, *args).view(np.uint32), at_zero.view(np.uint32))
    assert np.array_equal(got.view(np.uint32), at_zero.view(np.uint32)), f"{name}: {got} vs {at_zero} at zero"


def test_the_ulp_measure_can_fail():
    # the checker itself: one ULP apart is 1, +0/-0 are 0 apart, NaN against a number is infinite
    one = np.float32(1.0)
    assert _ulp(np.array([np.nextafter(one, np.float32(2))]), np.array([one]))[0] == 1
    assert _ulp(np.array([0.0], np.float32), np.array([-0.0], np.float32))[0] == 0
    assert _ulp(np.array([np.nan], np.float32), np.array([1.0], np.float32))[0] == np.inf
