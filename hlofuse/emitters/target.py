"""Target descriptions: what the shared emitters ask of a backend.

A Target is data plus a few hooks, not a fork of the emitters (see STYLE.md, point 6):
the triple and data layout of the LLVM module, how a math function is computed (an LLVM
intrinsic that vectorizes, one of hlofuse's polynomial approximations, or a named library
function such as libm's `expm1` or libdevice's `__nv_expm1`), and whether float reductions
may be reassociated. The CPU target lives in emitters/cpu/, a GPU target overrides
`library_name` (libdevice) and the atomics.
"""
from __future__ import annotations

from llvmlite import ir

from . import math_approx, math_calls, math_trig
from .ir_helpers import flush_denormal_bits

# Math functions that map to LLVM intrinsics LLVM can vectorize on every target.
_INTRINSICS = {
    "sqrt": "llvm.sqrt",
    "fabs": "llvm.fabs",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "rint": "llvm.rint",
    "round": "llvm.round",
    "copysign": "llvm.copysign",
    "fma": "llvm.fma",
}

# f32 functions computed by hlofuse's vectorizable approximations (math_approx, math_trig).
APPROX_F32 = {
    "exp": math_approx.exp_f32,
    "expm1": math_approx.expm1_f32,
    "log": math_approx.log_f32,
    "log1p": math_approx.log1p_f32,
    "tanh": math_approx.tanh_f32,
    "logistic": math_approx.logistic_f32,
    "erf": math_approx.erf_f32,
    "sin": math_trig.sin_f32,
    "cos": math_trig.cos_f32,
    "tan": math_trig.tan_f32,
    "atan2": math_trig.atan2_f32,
    "pow": math_approx.pow_f32,
    "cbrt": math_approx.cbrt_f32,
}

# f64 functions computed by approximations (the others call the library, e.g. libm).
_APPROX_F64 = {
    "exp": math_approx.exp_f64,
    "log": math_approx.log_f64,
}


class Target:
    """Base target: intrinsics for the simple functions, approximations for f32 (and f64
    exp/log), library calls (by `library_name`) for the other f64 functions."""

    name = "generic"
    triple = ""
    data_layout = ""
    # XLA reassociates float reductions (vectorized row reductions on CPU, trees on GPU).
    reassociate_reductions = True
    # Whether kernels run with flush-to-zero / denormals-are-zero (XLA:CPU's mode, and the
    # emulated GPU's; a real GPU keeps f32 denormals as XLA:GPU does). When set, the element
    # generators read a literal denormal operand of a flushing op as a zero of its sign
    # (elemental.ElementalEmitter.operand), because LLVM folds intrinsics on constants
    # without regard to the function's denormal mode.
    flushes_denormals = True
    # f64 functions computed by vectorizable approximations (a GPU target may clear this and
    # use its library, e.g. libdevice's __nv_exp).
    approx_f64 = _APPROX_F64

    def library_name(self, fn: str, ty: ir.Type) -> str:
        """Name of the library function computing `fn` on `ty` (libm naming on the CPU)."""
        return fn if isinstance(ty, ir.DoubleType) else fn + "f"

    def intrinsic(self, builder: ir.IRBuilder, name: str, args: list, ty: ir.Type | None = None) -> ir.Value:
        """Call LLVM intrinsic `name` overloaded on the type of the first argument (or `ty`)."""
        ty = ty or args[0].type
        module = builder.module
        fn = module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [a.type for a in args]))
        return builder.call(fn, args)

    def library_call(self, builder: ir.IRBuilder, fn: str, args: list) -> ir.Value:
        """Call the library function for `fn` (scalar; used only for f64 transcendentals)."""
        ty = args[0].type
        name = self.library_name(fn, ty)
        module = builder.module
        try:
            func = module.get_global(name)
        except KeyError:
            func = ir.Function(module, ir.FunctionType(ty, [a.type for a in args]), name)
        return builder.call(func, args)

    def math(self, builder: ir.IRBuilder, fn: str, args: list) -> ir.Value:
        """Compute math function `fn` on float values `args` (f32 or f64)."""
        ty = args[0].type
        if fn in _INTRINSICS:
            return self.intrinsic(builder, _INTRINSICS[fn], args)
        if fn == "rsqrt":
            one = ir.Constant(ty, 1.0)
            return builder.fdiv(one, self.intrinsic(builder, "llvm.sqrt", args))
        if isinstance(ty, ir.FloatType) and fn in APPROX_F32:
            if math_calls.active():  # a kernel with many math functions calls them (math_calls.py)
                return math_calls.call(builder, self, fn, APPROX_F32[fn], args)
            return APPROX_F32[fn](builder, self, *args)
        if isinstance(ty, ir.DoubleType) and fn in self.approx_f64:
            return self.approx_f64[fn](builder, self, *args)
        if fn == "logistic":
            x = args[0]
            one = ir.Constant(ty, 1.0)
            e = self.math(builder, "exp", [builder.fneg(x)])
            return builder.fdiv(one, builder.fadd(one, e))
        return self.library_call(builder, fn, args)

    def float_max(self, builder: ir.IRBuilder, a: ir.Value, b: ir.Value, is_min: bool = False) -> ir.Value:
        """NaN-propagating maximum/minimum (-0 < +0); LLVM vectorizes these intrinsics, also as
        reductions. A target without them can override with compares and selects."""
        return self.intrinsic(builder, "llvm.minimum" if is_min else "llvm.maximum", [a, b])

    def float_remainder(self, builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        """C's fmod (XLA's float `remainder`): the sign of x, NaN for an infinite x or a zero y.
        LLVM's `frem` is that on the host (a call of libm's fmodf/fmod); a target whose backend
        expands it differently overrides this.

        Under denormals-are-zero the divisor is made a zero of its sign here, on its bits: the
        registry's `flush-divisor` (docs/denormals.md), which glibc 2.36's fmodf gives by
        reading it with floating-point instructions under DAZ, but a later glibc's
        integer-only fmodf does not: fmod(1e-40, 1e-40) was 0, not NaN, on a GPU machine's
        host (the graph fuzzer, seed 62). The dividend's bits are kept by both."""
        if self.flushes_denormals:
            element = y.type.element if isinstance(y.type, ir.VectorType) else y.type
            kind = {ir.FloatType: "f32", ir.DoubleType: "f64"}.get(type(element))
            if kind is not None:
                y = flush_denormal_bits(builder, y, kind)
        return builder.frem(x, y)

    def float_to_int(self, builder: ir.IRBuilder, v: ir.Value, ty: ir.IntType, signed: bool) -> ir.Value:
        """XLA's float -> int conversion: NaN -> 0, out-of-range values saturate."""
        name = "llvm.fptosi.sat" if signed else "llvm.fptoui.sat"
        fn = builder.module.declare_intrinsic(name, [ty, v.type], ir.FunctionType(ty, [v.type]))
        return builder.call(fn, [v])

    # Address space of constant arrays emitted as LLVM globals (e.g. 1 or 4 on NVPTX).
    constant_address_space = 0
