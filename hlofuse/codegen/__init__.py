"""Codegen: a fused module becomes kernels.

    fused module --plan--> schedule (steps, kernels, buffer assignment)
                 --emit--> an LLVM module per distinct kernel (CPU) or per program (GPU)
                 --optimize/object--> host object code (CPU) or PTX (GPU)
                 = a compiled `Program` that runtime/ loads and runs.

schedule.py   steps of every executed computation; the Planner that classifies instructions
planning.py   a fused computation split into kernels (loop, reduction, materialized reduces)
shared_expressions.py  a reduction kernel also writing an expression a later fusion reads
buffers.py    buffer assignment with liveness (one arena of temporaries per computation)
kernels/      the kernel emitters, CPU and GPU side by side (loop, reduction, skeletons, arguments)
cpu.py        the CPU planner, LLVM module assembly, O3, object code per distinct kernel
kernel_key.py the structural key that lets same-shaped kernels share one object
cache.py      the object cache: in memory, and on disk (on by default, checked before loading)
gpu.py        the GPU planner (grid launches), LLVM module assembly, PTX
program.py    the compiled program value
"""
