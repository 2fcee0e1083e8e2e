"""The CPU target as data: the host target machine and the O3 pipeline (target.py). The
kernels are in codegen/kernels/cpu_*.py; runtime/jit.py loads their object code."""
