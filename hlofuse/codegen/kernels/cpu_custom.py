"""Which non-fusible instructions the CPU backend runs as custom kernels, and how.

    comp = custom_computation(inst)   # a computation for the kernel planner, or None
    plans = plan_custom(comp, name)   # KernelPlans with KernelPlan.custom set, or None
    CUSTOM_KERNEL_EMITTERS            # KernelPlan.custom -> emitter (codegen/cpu.py uses it)

A kOutput fusion of a convolution and its elementwise epilogue runs as one conv kernel
(`runs_custom_fusion`). An instruction goes to a custom kernel when its kernel module accepts it (the convolution
kernel handles every real and integer convolution, codegen/kernels/cpu_conv.py; the
select-and-scatter kernel, cpu_select_scatter.py); anything else keeps its library rule.
"""
from __future__ import annotations

from typing import Callable

from ...hlo.ir import HloComputation, HloInstruction
from .cpu_conv import emit_conv_kernel, find_convolution
from .cpu_conv_gemm import plan_convolution
from .cpu_conv_gemm_kernel import emit_conv_gemm_kernel
from .cpu_conv_onednn_kernel import emit_onednn_conv_kernel
from .cpu_gemm_onednn import emit_onednn_matmul_kernel
from .cpu_select_scatter import emit_select_scatter_kernel, find_select_scatter, plan_select_scatter
from .cpu_rng import (
    dimension_size_root, emit_dimension_size_kernel, emit_rng_kernel, plan_dimension_size, plan_rng, rng_root,
)
from .cpu_sort import emit_sort_kernel, emit_topk_kernel, plan_sort, plan_topk, sort_root, topk_root

# opcode -> (does the kernel handle this computation's root?, planner)
_PLANNERS: dict[str, tuple[Callable, Callable]] = {
    "convolution": (find_convolution, plan_convolution),  # direct or tiled GEMM (cpu_conv_gemm.py)
    "select-and-scatter": (find_select_scatter, plan_select_scatter),
    "sort": (sort_root, plan_sort),  # planners returning (kernels, temporaries)
    "topk": (topk_root, plan_topk),
    "rng-bit-generator": (rng_root, plan_rng),  # kernels/cpu_rng.py
    "get-dimension-size": (dimension_size_root, plan_dimension_size),
}

CUSTOM_KERNEL_EMITTERS: dict[str, Callable] = {
    "conv": emit_conv_kernel,
    "conv_gemm": emit_conv_gemm_kernel,
    "onednn_conv": emit_onednn_conv_kernel,  # a oneDNN convolution primitive (cpu_conv_onednn.py)
    "onednn_matmul": emit_onednn_matmul_kernel,  # a oneDNN matmul primitive (cpu_gemm_onednn.py)
    "select_and_scatter": emit_select_scatter_kernel,
    "sort": emit_sort_kernel,
    "topk": emit_topk_kernel,
    "rng": emit_rng_kernel,
    "dimension_size": emit_dimension_size_kernel,
}


def custom_computation(inst: HloInstruction) -> HloComputation | None:
    """A one-instruction computation running `inst` as a custom kernel, or None when no custom
    kernel handles it."""
    entry = _PLANNERS.get(inst.opcode)
    if entry is None:
        return None
    from ..schedule import wrap_instruction

    comp = wrap_instruction(inst)
    return comp if entry[0](comp) is not None else None


def plan_custom(comp: HloComputation, name: str) -> tuple[list, list] | None:
    """The custom kernels computing `comp` (an instruction's computation, or a kOutput fusion
    of a convolution and its epilogue) and their temporaries' shapes, or None when it is not a
    custom kernel's."""
    for _, plan in _PLANNERS.values():
        plans = plan(comp, name)
        if plans is not None:
            return plans if isinstance(plans, tuple) else (plans, [])
    return None


def runs_custom_fusion(comp: HloComputation) -> bool:
    """Whether fused computation `comp`, not emittable by the loop emitters, is a custom
    kernel's: a convolution with its elementwise epilogue (a kOutput fusion)."""
    return find_convolution(comp) is not None
