"""Whether an instruction of a loop kernel reads its operands at the output's linear index: the
test shape-generic kernels (codegen/generic_kernels.py) and the loop kernels' short rows
(cpu_loop.kernel_loop_shape) share.

Such an instruction is a parameter or a broadcast of a rank-0 value to the output's dimensions,
a rank-0 value, or an elementwise op (of the op registry, without a called computation) whose
shape and operands all have the output's dimensions, every full-size array static and
row-major. A kernel made only of them computes element i of every output from element i of
every full-size input and the scalars alone: its index never needs the output's dimensions.
"""
from __future__ import annotations

from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.opcodes import op_info


def full_array(shape, dims: tuple[int, ...]) -> bool:
    """Whether `shape` is a static row-major array of dimensions `dims`."""
    return (shape.is_array and tuple(shape.dims) == dims and shape.is_static()
            and shape.is_row_major() and shape.rank > 0)


def _scalar(shape) -> bool:
    """Whether `shape` is a rank-0 array."""
    return shape.is_array and shape.rank == 0


def reads_linear_index(inst: HloInstruction, dims: tuple[int, ...]) -> bool:
    """Whether `inst`, in a loop kernel over output dimensions `dims`, reads its operands at the
    output's linear index (module docstring)."""
    shape = inst.shape
    if inst.opcode == "parameter":
        return full_array(shape, dims) or _scalar(shape)
    if inst.opcode == "constant":
        return _scalar(shape)
    if inst.opcode == "broadcast":
        return full_array(shape, dims) and _scalar(inst.operands[0].shape)
    try:
        info = op_info(inst.opcode)
    except ValueError:  # an unknown opcode: not ours to judge
        return False
    if not info.elementwise or info.called or inst.called_computations():
        return False
    if _scalar(shape):
        return all(_scalar(o.shape) for o in inst.operands)
    return full_array(shape, dims) and all(full_array(o.shape, dims) for o in inst.operands)


def all_linear(comp: HloComputation, dims: tuple[int, ...]) -> bool:
    """Whether every instruction of `comp` (a tuple root aside) reads at the linear index."""
    root = comp.root
    return all(inst is root and inst.opcode == "tuple" or reads_linear_index(inst, dims)
               for inst in comp.instructions)
