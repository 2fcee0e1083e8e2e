"""The GPU backend's emitters: NVPTX and host-emulation targets, grid kernel skeletons, loop
and reduction kernels (see codegen/gpu.py for how they are planned and emitted,
runtime/gpu_executor.py for how they are launched)."""
