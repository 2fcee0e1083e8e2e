"""The CPU kernel skeleton: `void kernel(i8* noalias in..., i8* noalias out..., i64 begin, i64 end)`.

A kernel gets one raw pointer per array leaf of the fusion's parameters and outputs (then
any scratch buffers it shares with another kernel of the same fusion; args.py has the layout,
shared with the GPU skeleton), and a range of work units [begin, end) so a thread pool can
split the outer loop across cores. The loop and reduction kernels (cpu_loop.py,
cpu_reduction.py) fill the body through `param_gen`, `output_ptr`, `begin`, `end`.

Floating point runs as on XLA:CPU, with denormals flushed: on x86 the kernel sets MXCSR's
flush-to-zero and denormals-are-zero bits at entry and restores the caller's MXCSR before it
returns, so every thread that runs a kernel (the caller's, the thread pool's, libgomp's) gets
the mode for exactly the kernel's duration, and Python and numpy around it keep IEEE
semantics. The function also carries `"denormal-fp-math"="preserve-sign,preserve-sign"`, which
tells LLVM the mode is on, so its constant folding flushes the same way the hardware does.
(`benchmarks/kernel_limits.py --cases mxcsr` measures the cost per call: ~20 ns; docs/denormals.md
has the semantics.) On AVX-512 hosts the function also carries `"prefer-vector-width"="512"`
(the target's `vector_width`): LLVM's default there is mostly 256 bits, measured slower.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.cpu.target import add_string_attribute
from ...emitters.ir_helpers import I64
from ...hlo.ir import HloComputation, HloInstruction
from .args import output_leaves, param_generator, param_leaf_count, param_leaf_slots, typed_pointer

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
# MXCSR bits: FTZ (flush-to-zero, bit 15) and DAZ (denormals-are-zero, bit 6).
MXCSR_FTZ_DAZ = 0x8040


def is_x86(target) -> bool:
    """Whether `target` generates x86 code (MXCSR, SSE/AVX non-temporal stores)."""
    return str(getattr(target, "triple", "")).startswith(("x86_64", "i386", "i686"))


def flushes_denormals(target) -> bool:
    """True where the kernel skeleton can set the flush mode itself (x86: MXCSR)."""
    return is_x86(target)


def _mxcsr_intrinsic(module: ir.Module, name: str) -> ir.Function:
    full = f"llvm.x86.sse.{name}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I8P]), full)
    return fn


def enter_flush_mode(function: ir.Function, b: ir.IRBuilder) -> ir.Value:
    """At the builder's position (a kernel's entry): save MXCSR, set FTZ and DAZ, and mark
    `function` as running with denormals flushed. Returns the slot of the caller's MXCSR, for
    `leave_flush_mode` before every return."""
    add_string_attribute(function, "denormal-fp-math", "preserve-sign,preserve-sign")
    saved = b.alloca(I32, name="mxcsr.saved")
    flushing = b.alloca(I32, name="mxcsr.ftz")
    b.call(_mxcsr_intrinsic(b.module, "stmxcsr"), [b.bitcast(saved, I8P)])
    b.store(b.or_(b.load(saved), ir.Constant(I32, MXCSR_FTZ_DAZ)), flushing)
    b.call(_mxcsr_intrinsic(b.module, "ldmxcsr"), [b.bitcast(flushing, I8P)])
    return saved


def leave_flush_mode(b: ir.IRBuilder, saved: ir.Value) -> None:
    """Restore the caller's MXCSR saved by `enter_flush_mode`."""
    b.call(_mxcsr_intrinsic(b.module, "ldmxcsr"), [b.bitcast(saved, I8P)])


class CpuKernelSkeleton:
    """One kernel function in `module` for fused computation `comp` with `n_outputs` output leaves."""

    def __init__(self, module: ir.Module, target, name: str, comp: HloComputation, n_outputs: int,
                 n_scratch: int = 0) -> None:
        self.module = module
        self.target = target
        self.comp = comp
        self.n_inputs = param_leaf_count(comp)
        self.n_outputs = n_outputs
        self.n_scratch = n_scratch
        fnty = ir.FunctionType(ir.VoidType(), [I8P] * (self.n_inputs + n_outputs + n_scratch) + [I64, I64])
        self.function = ir.Function(module, fnty, name)
        self.function.attributes.add("nounwind")
        width = getattr(target, "vector_width", None)
        if width:  # 512 on AVX-512 hosts (emitters/cpu/target.py preferred_vector_width)
            add_string_attribute(self.function, "prefer-vector-width", str(width))
        for i in range(self.n_inputs + n_outputs + n_scratch):
            arg = self.function.args[i]
            arg.add_attribute("noalias")
        self.begin, self.end = self.function.args[-2], self.function.args[-1]
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self._saved_mxcsr = enter_flush_mode(self.function, self.builder) if flushes_denormals(target) else None
        # Parameter pointers are cast once, in the entry block.
        self._param_slots = param_leaf_slots(comp)
        self._param_ptrs = {k: self._typed(self.function.args[k], leaf.dtype)
                            for slots in self._param_slots.values() for k, leaf in slots}
        self._leaves = output_leaves(comp)

    def _typed(self, arg: ir.Value, et) -> ir.Value:
        return typed_pointer(self.builder, arg, et)

    def param_gen(self, p: HloInstruction):
        """Generator reading parameter `p` (a nested tuple of loads for tuple parameters)."""
        return param_generator(self.builder, p, self._param_slots[p.parameter_number],
                               lambda k, leaf: self._param_ptrs[k])

    def output_ptr(self, k: int) -> ir.Value:
        """Typed pointer to output leaf `k`."""
        return self._typed(self.function.args[self.n_inputs + k], self._leaves[k].shape.dtype)

    def scratch_ptr(self, i: int, et) -> ir.Value:
        """Typed pointer to scratch buffer `i` (arguments after the outputs)."""
        return self._typed(self.function.args[self.n_inputs + self.n_outputs + i], et)

    def finish(self) -> None:
        """Restore the caller's floating-point mode and terminate the kernel function."""
        if self._saved_mxcsr is not None:
            leave_flush_mode(self.builder, self._saved_mxcsr)
        self.builder.ret_void()
