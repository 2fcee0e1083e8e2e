"""The CPU target: host target machine, LLVM optimization and JIT, kernel skeletons."""
