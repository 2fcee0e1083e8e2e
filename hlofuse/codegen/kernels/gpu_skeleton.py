"""The grid kernel skeleton shared by the NVPTX and the emulated target.

A kernel gets one pointer per array leaf of the fused computation's parameters, then one per
output leaf, then one per scratch buffer (partials of a two-pass reduction). The body is
written once, as the code of ONE thread, in terms of `thread_idx`, `block_idx` (i64 values)
and the static `block_dim`/`grid_dim` of the launch:

  * NVPTX: `ptx_kernel void k(T addrspace(1)* noalias align 16 ...)`; the ids are the PTX
    special registers %tid.x and %ctaid.x.
  * emulation: `void k(i8* noalias ..., i64 block_begin, i64 block_end)` whose body is wrapped
    in `for block in [block_begin, block_end): for thread in [0, block_dim):` so a host driver
    can split the blocks of a launch across cores. Threads of a block run one after another,
    which is faithful because the kernels use no shared memory, barriers or warp shuffles:
    threads only communicate through atomics on global memory, which the host executes as
    real atomics.

Bodies never return early (out-of-range threads skip their work with `if`), so the same
body works inside the emulation's loops.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...emitters.ir_helpers import I64, const_i64, for_range
from ...hlo.dtypes import ElementType
from ...hlo.ir import HloComputation, HloInstruction
from .args import output_leaves, param_generator, param_leaf_count, param_leaf_slots, typed_pointer
from .cpu_skeleton import enter_flush_mode, flushes_denormals, leave_flush_mode

I8 = ir.IntType(8)


@dataclass(frozen=True)
class LaunchDims:
    """A one-dimensional launch: `grid` blocks of `block` threads."""

    grid: int
    block: int

    @property
    def threads(self) -> int:
        """Threads of the launch (grid * block)."""
        return self.grid * self.block


def launch_for(threads: int, max_block: int = 256) -> LaunchDims:
    """Enough blocks of at most `max_block` threads (a multiple of the warp size) for `threads`."""
    if threads <= 0:
        return LaunchDims(0, 32)
    block = min(max_block, -(-threads // 32) * 32)
    return LaunchDims(-(-threads // block), block)


class GpuKernelSkeleton:
    """One kernel `name` in `module` for fused computation `comp`, launched with `dims`.

    `scratch` lists the element types of the scratch buffers the kernel takes after the
    outputs. After construction the builder is positioned in the thread body."""

    def __init__(self, module: ir.Module, target, name: str, comp: HloComputation, dims: LaunchDims,
                 scratch: tuple[ElementType, ...] = ()) -> None:
        self.module = module
        self.target = target
        self.comp = comp
        self.dims = dims
        self.name = name
        self.leaves = output_leaves(comp)
        self.n_inputs = param_leaf_count(comp)
        self.n_outputs = len(self.leaves)
        self.scratch_types = tuple(scratch)
        self.addrspace = target.pointer_addrspace
        n_ptrs = self.n_inputs + self.n_outputs + len(self.scratch_types)
        i8p = I8.as_pointer(self.addrspace)
        extra = [I64, I64] if target.emulated else []
        self.function = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p] * n_ptrs + extra), name)
        self.function.attributes.add("nounwind")
        for arg in self.function.args[:n_ptrs]:
            arg.add_attribute("noalias")
            arg.attributes.align = 16
        if not target.emulated:
            self.function.calling_convention = "ptx_kernel"
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self._loops: list = []
        # The emulation runs on the host in the oracle's float mode, XLA:CPU's (denormals
        # flushed: cpu_skeleton.py); docs/denormals.md says why and what a real GPU does.
        self._saved_mxcsr = None
        if target.emulated and flushes_denormals(target):
            self._saved_mxcsr = enter_flush_mode(self.function, self.builder)
        if target.emulated:
            begin, end = self.function.args[-2], self.function.args[-1]
            self._loops.append(for_range(self.builder, begin, end, "block"))
            self.block_idx = self._loops[-1].__enter__()
            self._loops.append(for_range(self.builder, const_i64(0), const_i64(dims.block), "thread"))
            self.thread_idx = self._loops[-1].__enter__()
        else:
            b = self.builder
            self.thread_idx = b.zext(target.special_register(b, "tid.x"), I64)
            self.block_idx = b.zext(target.special_register(b, "ctaid.x"), I64)
        self._param_slots = param_leaf_slots(comp)

    @property
    def global_thread_idx(self) -> ir.Value:
        """blockIdx.x * blockDim.x + threadIdx.x, as i64."""
        b = self.builder
        return b.add(b.mul(self.block_idx, const_i64(self.dims.block), flags=["nuw", "nsw"]), self.thread_idx,
                     flags=["nuw", "nsw"])

    def _typed(self, arg: ir.Value, et: ElementType) -> ir.Value:
        return typed_pointer(self.builder, arg, et, self.addrspace)

    def _arg_ptr(self, k: int, et: ElementType) -> ir.Value:
        # Bitcasts are emitted at the use; LLVM hoists and merges them.
        return self._typed(self.function.args[k], et)

    def param_gen(self, p: HloInstruction):
        """Generator reading parameter `p` (nested tuples of loads for tuple parameters)."""
        return param_generator(self.builder, p, self._param_slots[p.parameter_number],
                               lambda k, leaf: self._arg_ptr(k, leaf.dtype))

    def output_ptr(self, k: int) -> ir.Value:
        """Typed pointer to output leaf `k`."""
        return self._arg_ptr(self.n_inputs + k, self.leaves[k].shape.dtype)

    def scratch_ptr(self, k: int) -> ir.Value:
        """Typed pointer to scratch buffer `k`."""
        return self._arg_ptr(self.n_inputs + self.n_outputs + k, self.scratch_types[k])

    def finish(self) -> None:
        """Close the thread body (and the emulation's loops) and return."""
        while self._loops:
            self._loops.pop().__exit__(None, None, None)
        if self._saved_mxcsr is not None:
            leave_flush_mode(self.builder, self._saved_mxcsr)
        self.builder.ret_void()
