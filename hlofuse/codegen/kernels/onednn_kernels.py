"""The oneDNN primitives a program's kernels call: their descriptions, collected for creation
when the program loads (runtime/cpu_executor.py; runtime/onednn_primitives.py makes them).

    descs = primitive_descriptions(kernels)   # one per oneDNN kernel, in the kernels' order
    calls_primitive(kernel)                   # whether a kernel calls one
    own_elements(kernel)                      # elements its own loops compute per call
"""
from __future__ import annotations

from .cpu_conv_onednn import onednn_convolution
from .cpu_conv_onednn_kernel import computed_elements
from .cpu_gemm_onednn import kernel_matmul

# Each oneDNN kernel kind (`KernelPlan.custom`) and the mapping its kernel calls (a matmul
# kernel of several work units calls a batch slice's primitive: cpu_gemm_onednn.kernel_matmul).
_MAPPINGS = {"onednn_conv": lambda k: onednn_convolution(k.comp), "onednn_matmul": lambda k: kernel_matmul(k)[0]}


def calls_primitive(kernel) -> bool:
    """Whether `kernel` (a KernelPlan) calls a oneDNN primitive: a function the runtime defines
    when the program that holds the kernel loads, named by the primitive's description."""
    return kernel.custom in _MAPPINGS


def _mapped(kernel):
    """The mapping `kernel` (a KernelPlan that `calls_primitive`) calls; ValueError for one whose
    computation no longer maps (a planner bug)."""
    mapped = _MAPPINGS[kernel.custom](kernel)
    if mapped is None:
        raise ValueError(f"kernel {kernel.name}: no longer maps to a oneDNN {kernel.custom[len('onednn_'):]}")
    return mapped


def primitive_descriptions(kernels) -> list:
    """The primitive description of each kernel that calls a oneDNN primitive; ValueError for
    one whose computation no longer maps (a planner bug)."""
    return [_mapped(k).desc for k in kernels if calls_primitive(k)]


def own_elements(kernel) -> int:
    """Elements the own loops of `kernel` (a KernelPlan that `calls_primitive`) compute per call,
    all its work units together: the per-feature epilogue operands it computes before each
    primitive call (cpu_conv_onednn_kernel.computed_elements), once per call (a matmul kernel of
    several work units calls its batch slice's primitive once a unit); everything else it does
    is the primitive's (codegen/kernel_work.py weighs the two). ValueError for a kernel whose
    computation no longer maps, as `primitive_descriptions`."""
    calls = 1
    if kernel.custom == "onednn_matmul" and kernel_matmul(kernel)[1] is not None:
        calls = int(kernel.units)
    return computed_elements(_mapped(kernel).sources, calls)
