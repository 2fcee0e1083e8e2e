"""The CPU kernel skeleton: `void kernel(i8* noalias in..., i8* noalias out..., i64 begin, i64 end)`.

A kernel gets one raw pointer per array leaf of the fusion's parameters and outputs (then
any scratch buffers it shares with another kernel of the same fusion), and a
range of work units [begin, end) so a thread pool can split the outer loop across cores. The
loop and reduction emitters fill the body through `param_gen`, `output_ptr`, `begin`, `end`.
"""
from __future__ import annotations

from llvmlite import ir

from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import Shape
from ..elemental import I64, Index, load_element, mem_type

I8P = ir.IntType(8).as_pointer()


def leaf_count(shape: Shape) -> int:
    """Number of array leaves of a shape."""
    return len(shape.leaves()) if shape.is_tuple else 1


class CpuKernelSkeleton:
    """One kernel function in `module` for fused computation `comp` with `n_outputs` output leaves."""

    def __init__(self, module: ir.Module, target, name: str, comp: HloComputation, n_outputs: int,
                 n_scratch: int = 0) -> None:
        self.module = module
        self.target = target
        self.comp = comp
        params = comp.parameters
        self.n_inputs = sum(leaf_count(p.shape) for p in params)
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
        self._param_leaves: dict[int, list] = {}
        k = 0
        for p in params:
            leaves = p.shape.leaves() if p.shape.is_tuple else [p.shape]
            ptrs = []
            for leaf in leaves:
                ptrs.append((self._typed(self.function.args[k], leaf.dtype), leaf))
                k += 1
            self._param_leaves[p.parameter_number] = ptrs

    def _typed(self, arg: ir.Value, et) -> ir.Value:
        return self.builder.bitcast(arg, mem_type(et).as_pointer())

    def param_gen(self, p: HloInstruction):
        """Generator reading parameter `p` (a nested tuple of loads for tuple parameters)."""
        leaves = iter(self._param_leaves[p.parameter_number])
        b = self.builder

        def build(shape):
            if shape.is_tuple:
                subs = [build(e) for e in shape.elements]
                return lambda idx: tuple(s(idx) for s in subs)
            ptr, leaf = next(leaves)

            def load(idx: Index):
                lin = idx.linear if tuple(idx.dims) == tuple(leaf.dims) else Index(b, leaf.dims, multi=idx.multi).linear
                return load_element(b, b.gep(ptr, [lin], inbounds=True), leaf.dtype)

            return load

        return build(p.shape)

    def output_ptr(self, k: int) -> ir.Value:
        """Typed pointer to output leaf `k`."""
        from .. import loop_emitter

        if not hasattr(self, "_leaves"):
            self._leaves = loop_emitter.output_leaves(self.comp)
        return self._typed(self.function.args[self.n_inputs + k], self._leaves[k].shape.dtype)

    def scratch_ptr(self, i: int, et) -> ir.Value:
        """Typed pointer to scratch buffer `i` (arguments after the outputs)."""
        return self._typed(self.function.args[self.n_inputs + self.n_outputs + i], et)

    def finish(self) -> None:
        """Terminate the kernel function."""
        self.builder.ret_void()
