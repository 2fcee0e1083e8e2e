"""The GPU backend's emitters: NVPTX and host-emulation targets, grid kernel skeletons, loop
and reduction kernels (see runtime/gpu_executor.py for how they are launched)."""
