"""The GPU targets as data: NVPTX and host emulation (target.py), atomics for reducers
(atomics.py), PTX assembly checks (ptxas.py). The grid kernels that use them are in
codegen/kernels/gpu_*.py; runtime/gpu_executor.py launches them."""
