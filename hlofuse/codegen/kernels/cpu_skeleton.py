"""The CPU kernel skeleton: `void kernel(i8* noalias in..., i8* noalias out..., i64 begin, i64 end)`.

A kernel gets one raw pointer per array leaf of the fusion's parameters and outputs (then
any scratch buffers it shares with another kernel of the same fusion; args.py has the layout,
shared with the GPU skeleton), and a range of work units [begin, end) so a thread pool can
split the outer loop across cores. The loop and reduction kernels (cpu_loop.py,
cpu_reduction.py) fill the body through `param_gen`, `output_ptr`, `begin`, `end`.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.ir_helpers import I64
from ...hlo.ir import HloComputation, HloInstruction
from .args import output_leaves, param_generator, param_leaf_count, param_leaf_slots, typed_pointer

I8P = ir.IntType(8).as_pointer()


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
        for i in range(self.n_inputs + n_outputs + n_scratch):
            arg = self.function.args[i]
            arg.add_attribute("noalias")
        self.begin, self.end = self.function.args[-2], self.function.args[-1]
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
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
        """Terminate the kernel function."""
        self.builder.ret_void()
