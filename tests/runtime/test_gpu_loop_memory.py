"""A while loop on the GPU backends holds its live state only, not every iteration's
(runtime/gpu_executor.py `_on_device`): the per-run cache of device copies kept each host
array alive for the whole run, so XLA's hlo_evaluator_test accumulation loop (thousands of
iterations over two f32[1024,1024]) took the emulation past the machine's memory. Measured
with tracemalloc, to which numpy reports its buffers; results against the interpreter."""
from __future__ import annotations

import tracemalloc

import numpy as np

import hlofuse
from hlofuse.runtime.interpreter import evaluate

from tests.runtime.test_gpu_device import _on_fake_cuda

# 150 iterations of acc := dot(acc, w) + x over f32[256,256] (256 KiB each). The dot runs on
# the host on the GPU backends (a library rule), so every iteration makes a host array the
# next kernel reads: keeping every iteration's would be at least 150 x 256 KiB = 37.5 MiB.
LOOP = """HloModule accumulate
cond {
  s = (s32[], f32[256,256], f32[256,256], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(150)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[256,256], f32[256,256], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[256,256] get-tuple-element(s), index=1
  w = f32[256,256] get-tuple-element(s), index=2
  acc = f32[256,256] get-tuple-element(s), index=3
  one = s32[] constant(1)
  j = s32[] add(i, one)
  m = f32[256,256] dot(acc, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  sum = f32[256,256] add(m, x)
  ROOT t = (s32[], f32[256,256], f32[256,256], f32[256,256]) tuple(j, x, w, sum)
}
ENTRY e {
  x = f32[256,256] parameter(0)
  w = f32[256,256] parameter(1)
  z = s32[] constant(0)
  f = f32[] constant(0)
  acc = f32[256,256] broadcast(f), dimensions={}
  init = (s32[], f32[256,256], f32[256,256], f32[256,256]) tuple(z, x, w, acc)
  loop = (s32[], f32[256,256], f32[256,256], f32[256,256]) while(init), condition=cond, body=body
  ROOT r = f32[256,256] get-tuple-element(loop), index=3
}
"""


def _args():
    x = np.random.default_rng(2).standard_normal((256, 256)).astype(np.float32)
    return [x, (np.eye(256) * 0.5).astype(np.float32)]  # acc converges to 2x


BOUND = 24 << 20  # bytes: the loop's live state and temporaries, with room to spare


def _peak_of(run) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = run()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_emulated_loop_keeps_only_its_live_state():
    module = hlofuse.parse_hlo(LOOP)
    args = _args()
    exe = hlofuse.compile(module, target="gpu-emulated")
    exe(*args)  # a first run: what is built once is not what is measured
    out, peak = _peak_of(lambda: exe(*args))
    assert peak < BOUND, f"{peak / 2**20:.1f} MiB traced during one run"
    np.testing.assert_allclose(out[0], evaluate(module, args)[0], rtol=1e-5, atol=1e-5)


def test_the_cuda_paths_forget_a_copy_when_its_array_dies(monkeypatch):
    """On CudaDevice's paths (host memory standing in for the device), copies are made and
    kept per array: they must go when the array does."""
    module = hlofuse.compiler.optimize(hlofuse.parse_hlo(LOOP), "gpu")[0]
    prog, _fake, _emulated = _on_fake_cuda(module, monkeypatch)
    args = _args()
    prog.run(args)
    out, peak = _peak_of(lambda: prog.run(args))
    assert peak < BOUND, f"{peak / 2**20:.1f} MiB traced during one run"
    np.testing.assert_allclose(out[0], evaluate(hlofuse.parse_hlo(LOOP), args)[0], rtol=1e-5, atol=1e-5)


def test_an_array_read_by_two_kernels_is_copied_once(monkeypatch):
    """The cache still does its job: the input two unfused kernels read is copied to the
    device once in a run (one host-to-device copy: the fake CUDA counts them)."""
    text = """HloModule twice
ENTRY e {
  x = f32[64] parameter(0)
  e = f32[64] exponential(x)
  s = f32[64] sine(x)
  ROOT t = (f32[64], f32[64]) tuple(e, s)
}
"""
    module = hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "gpu", fusion=False)[0]
    prog, fake, _emulated = _on_fake_cuda(module, monkeypatch)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    out = prog.run([x])
    np.testing.assert_allclose(out[0], np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(out[1], np.sin(x), rtol=1e-6, atol=1e-7)
    assert len(prog.launches) == 2 and fake.h2d == 1
