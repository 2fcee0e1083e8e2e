"""The oneDNN primitives a program's kernels call: their descriptions, collected for creation
when the program loads (runtime/cpu_executor.py; runtime/onednn_primitives.py makes them).

    descs = primitive_descriptions(kernels)   # one per oneDNN kernel, in the kernels' order
    calls_primitive(kernel)                   # whether a kernel calls one
"""
from __future__ import annotations

from .cpu_conv_onednn import onednn_convolution
from .cpu_gemm_onednn import kernel_matmul

# Each oneDNN kernel kind (`KernelPlan.custom`) and the mapping its kernel calls (a matmul
# kernel of several work units calls a batch slice's primitive: cpu_gemm_onednn.kernel_matmul).
_MAPPINGS = {"onednn_conv": lambda k: onednn_convolution(k.comp), "onednn_matmul": lambda k: kernel_matmul(k)[0]}


def calls_primitive(kernel) -> bool:
    """Whether `kernel` (a KernelPlan) calls a oneDNN primitive: a function the runtime defines
    when the program that holds the kernel loads, named by the primitive's description."""
    return kernel.custom in _MAPPINGS


def primitive_descriptions(kernels) -> list:
    """The primitive description of each kernel that calls a oneDNN primitive; ValueError for
    one whose computation no longer maps (a planner bug)."""
    out = []
    for k in kernels:
        mapping = _MAPPINGS.get(k.custom)
        if mapping is None:
            continue
        mapped = mapping(k)
        if mapped is None:
            raise ValueError(f"kernel {k.name}: no longer maps to a oneDNN {k.custom[len('onednn_'):]}")
        out.append(mapped.desc)
    return out
