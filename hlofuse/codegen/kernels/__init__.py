"""Kernel emitters: a planned kernel becomes an LLVM function, the CPU's and the GPU's side by side.

args.py             kernel arguments: parameter and output leaves, typed pointers, parameter reads
reduction_groups.py what one reduction kernel writes (shared by both targets), accumulator plumbing
cpu_skeleton.py     the CPU kernel function: pointers and a range of work units for the thread pool
cpu_loop.py         CPU loop kernels (rows or flat loop nests LLVM vectorizes)
cpu_reduction.py    CPU reduction kernels (row and column loop orders, split across cores)
gpu_skeleton.py     the grid kernel function (NVPTX, or host emulation), launch dimensions
gpu_loop.py         GPU loop kernels (unrolled per thread)
gpu_reduction.py    GPU reduction kernels (per-output, row, column; atomics or two passes)

All of them compose element generators of the elemental emitter (emitters/elemental.py) over
the IR helpers (emitters/ir_helpers.py); codegen/cpu.py and codegen/gpu.py assemble them into
one LLVM module per program.
"""
