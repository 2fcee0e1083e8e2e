"""f32 math functions called instead of inlined, where an element computes so many of them that
inlining each use is what LLVM's time goes to.

Each math_approx function is straight-line IR of 15-60 instructions, normally emitted at every
use. A loop kernel whose element goes through hundreds of them (benchmarks/compile_time.py's
chain: 250 exponentials in each of its kernels) is then a body of thousands of instructions,
which the loop vectorizer, InstCombine and the code generator each walk several times: 0.3 s
of LLVM per kernel. Inside `calling()`, `call` emits instead a call of an internal function
defined once per LLVM module for each math function used (`hlofuse.math.NAME.f32`), and a
vector form of it (`hlofuse.math.NAME.vLANESf32`: the same scalar body in a loop over the
lanes, which LLVM vectorizes in it) named on each call by the `vector-function-abi-variant`
attribute, so that the loop vectorizer widens the call into a call of the vector form. Both
compute each lane as the inlined body would, so the results are the same bits.

A call costs the loop what overlapping independent vectors gains it: the callee runs one
vector's dependency chain at a time. So only loops that interleave no vectors anyway call
(codegen/kernels/cpu_loop.py decides; measured there)."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

from llvmlite import ir

# Whether kernels emitted inside `calling(True)` call their math functions (a switch for A/B
# measurements: benchmarks/loop_hints_ab.py).
ENABLED = True

F32 = ir.FloatType()
I64 = ir.IntType(64)
_active: contextvars.ContextVar[bool] = contextvars.ContextVar("hlofuse_math_calls", default=False)


@contextlib.contextmanager
def calling(on: bool = True) -> Iterator[None]:
    """Within this block (in this thread), f32 math functions are emitted as calls (`call`)
    when `on` and ENABLED."""
    token = _active.set(on and ENABLED)
    try:
        yield
    finally:
        _active.reset(token)


def active() -> bool:
    """Whether f32 math functions are emitted as calls here (`calling`)."""
    return _active.get()


def call(builder: ir.IRBuilder, target, name: str, emit: Callable, args: list) -> ir.Value:
    """The value of math function `name` on f32 `args`, computed by `emit(builder, target,
    *args)` (a math_approx function), as a call of this module's internal function for it,
    defined with its vector form on first use."""
    module = builder.module
    lanes = (getattr(target, "vector_width", None) or 256) // 32
    scalar_name, vector_name = f"hlofuse.math.{name}.f32", f"hlofuse.math.{name}.v{lanes}f32"
    try:
        scalar = module.get_global(scalar_name)
    except KeyError:
        block = builder.block
        with calling(False):  # the bodies themselves inline what they compute
            scalar = _define_scalar(module, scalar_name, emit, len(args), target, builder.function)
            vector = _define_vector(module, vector_name, emit, len(args), lanes, target, builder.function)
        _keep(module, vector)
        builder.position_at_end(block)
    result = builder.call(scalar, args)
    # LLVM's vector function ABI: N<lanes>, 'v' per vector argument, the scalar name, the vector one
    variant = f"_ZGV_LLVM_N{lanes}{'v' * len(args)}_{scalar_name}({vector_name})"
    set.add(result.attributes, f'"vector-function-abi-variant"="{variant}"')  # a string attribute
    return result


def _copy_string_attributes(src: ir.Function, dst: ir.Function) -> None:
    """`dst` gets `src`'s string attributes: the kernel's denormal mode and vector width."""
    for attribute in src.attributes:
        if attribute.startswith('"'):
            set.add(dst.attributes, attribute)


def _new_function(module: ir.Module, name: str, fnty: ir.FunctionType, like: ir.Function) -> ir.Function:
    fn = ir.Function(module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")  # inlined before the vectorizer, it would be the same body again
    fn.attributes.add("nounwind")
    _copy_string_attributes(like, fn)
    return fn


def _define_scalar(module: ir.Module, name: str, emit: Callable, arity: int, target, like: ir.Function) -> ir.Function:
    fn = _new_function(module, name, ir.FunctionType(F32, [F32] * arity), like)
    fn.attributes.add("readnone")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(emit(b, target, *fn.args))
    return fn


def _define_vector(module: ir.Module, name: str, emit: Callable, arity: int, lanes: int, target,
                   like: ir.Function) -> ir.Function:
    """The vector form: its arguments stored to the stack, the scalar body in a loop over the
    lanes that LLVM vectorizes at `lanes` (then the stack slots are registers again)."""
    from .ir_helpers import for_range, loop_id

    vector, array = ir.VectorType(F32, lanes), ir.ArrayType(F32, lanes)
    fn = _new_function(module, name, ir.FunctionType(vector, [vector] * arity), like)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    slots = []
    for arg in fn.args:
        slot = b.alloca(array)
        b.store(arg, b.bitcast(slot, vector.as_pointer()))
        slots.append(slot)
    out = b.alloca(array)
    zero = ir.Constant(I64, 0)
    with for_range(b, zero, ir.Constant(I64, lanes), "lane") as i:
        values = [b.load(b.gep(s, [zero, i], inbounds=True)) for s in slots]
        b.store(emit(b, target, *values), b.gep(out, [zero, i], inbounds=True))
    latch = i.incomings[-1][1]  # for_range's back edge
    latch.terminator.set_metadata("llvm.loop", loop_id(
        module, ("llvm.loop.vectorize.width", ir.Constant(ir.IntType(32), lanes)),
        ("llvm.loop.vectorize.enable", ir.Constant(ir.IntType(1), 1))))
    b.ret(b.load(b.bitcast(out, vector.as_pointer())))
    return fn


def _keep(module: ir.Module, fn: ir.Function) -> None:
    """List `fn` in the module's `llvm.compiler.used`: an internal function nothing calls yet
    (the vector form, until the loop vectorizer calls it) is otherwise deleted as dead before
    the vectorizer runs."""
    ptr = ir.IntType(8).as_pointer()
    members = []
    try:
        old = module.get_global("llvm.compiler.used")
    except KeyError:
        old = None
    if old is not None:  # llvmlite cannot retype a global: a longer one replaces it
        members = list(old.initializer.constant)
        del module.globals["llvm.compiler.used"]
        module.scope._useset.discard("llvm.compiler.used")
    members.append(fn.bitcast(ptr))
    array = ir.ArrayType(ptr, len(members))
    used = ir.GlobalVariable(module, array, "llvm.compiler.used")
    used.linkage = "appending"
    used.section = "llvm.metadata"
    used.initializer = ir.Constant(array, members)
