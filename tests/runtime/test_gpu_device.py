"""The GPU backend's device path: real-GPU tests (skipped unless numba.cuda finds a CUDA GPU)
and the transfer/dispatch rules checked through the emulated device anywhere."""
from __future__ import annotations

import numpy as np
import pytest

from backend_cases import ADD_MAX_F32, NEGATED_MAX_S32
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.gpu_executor import GpuProgram, HostDevice
from hlofuse.runtime.interpreter import evaluate


def _cuda_available() -> bool:
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


HAS_GPU = _cuda_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU: numba.cuda.is_available() is False")

MODULE = "HloModule m\n" + ADD_MAX_F32 + """rows {
  x = f32[256,300] parameter(0)
  e = f32[256,300] exponential(x)
  z = f32[] constant(0)
  ROOT r = f32[256] reduce(e, z), dimensions={1}, to_apply=add
}
cols {
  x = f32[256,300] parameter(0)
  y = f32[256,300] parameter(1)
  m = f32[256,300] multiply(x, y)
  ninf = f32[] constant(-inf)
  ROOT r = f32[300] reduce(m, ninf), dimensions={0}, to_apply=max
}
ENTRY e {
  x = f32[256,300] parameter(0)
  y = f32[256,300] parameter(1)
  w = f32[300,64] parameter(2)
  r = f32[256] fusion(x), kind=kInput, calls=rows
  c = f32[300] fusion(x, y), kind=kInput, calls=cols
  d = f32[256,64] dot(y, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[256], f32[300], f32[256,64]) tuple(r, c, d)
}
"""


def _args():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((256, 300)).astype(np.float32), rng.standard_normal((256, 300)).astype(np.float32),
            rng.standard_normal((300, 64)).astype(np.float32)]


def _check(got, want):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-4, atol=1e-3)


def test_each_input_is_copied_to_the_device_once(monkeypatch):
    """x feeds two kernels, y a kernel and the host dot: one to_device per input array."""
    copies = []
    real = HostDevice.to_device

    def counting(self, a):
        copies.append(id(a))
        return real(self, a)

    monkeypatch.setattr(HostDevice, "to_device", counting)
    module = parse_hlo(MODULE)
    args = _args()
    got = GpuProgram.compile(module, emulated=True).run(args)
    _check(got, evaluate(module, args))
    assert sorted(copies) == sorted({id(args[0]), id(args[1])})


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_real_gpu_backend_without_a_gpu_says_so():
    from hlofuse.compiler import compile as hl_compile

    with pytest.raises(UnsupportedError, match="no CUDA GPU"):
        hl_compile(parse_hlo(MODULE), target="gpu")


@needs_gpu
def test_gpu_matches_interpreter():
    module = parse_hlo(MODULE)
    args = _args()
    prog = GpuProgram.compile(module, emulated=False)
    _check(prog.run(args), evaluate(module, args))


@needs_gpu
def test_gpu_and_emulation_agree_on_integer_reductions():
    text = """HloModule i
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
fused {
  x = s32[2000,130] parameter(0)
  z = s32[] constant(7)
  ROOT r = s32[130] reduce(x, z), dimensions={0}, to_apply=add
}
ENTRY e {
  x = s32[2000,130] parameter(0)
  ROOT f = s32[130] fusion(x), kind=kInput, calls=fused
}
"""
    module = parse_hlo(text)
    x = np.random.default_rng(1).integers(-1000, 1000, (2000, 130)).astype(np.int32)
    real = GpuProgram.compile(module, emulated=False).run([x])
    emulated = GpuProgram.compile(module, emulated=True).run([x])
    np.testing.assert_array_equal(real[0], emulated[0])
    np.testing.assert_array_equal(real[0], x.sum(axis=0) + 7)


@needs_gpu
def test_kernels_assembled_by_ptxas_at_a_chosen_level(monkeypatch):
    """HLOFUSE_PTXAS_LEVEL assembles the kernels with ptxas -O<n> in place of the driver's JIT:
    the same answers at every level, and at -O0 the right one for the negated max that the
    assembler's optimizer got wrong (whatever the JIT gives for it on this machine's CUDA)."""
    from hlofuse.compiler import compile as hl_compile
    from hlofuse.runtime.gpu_executor import PTXAS_LEVEL_ENV

    module = parse_hlo(MODULE)
    args = _args()
    want = evaluate(module, args)
    for level in ("0", "3"):
        monkeypatch.setenv(PTXAS_LEVEL_ENV, level)
        _check(GpuProgram.compile(module, emulated=False).run(args), want)
    x = np.array([[5, -7, np.iinfo(np.int32).min, 23, 9, -1, 0, 40, -23, 7, 3, 2, 1, 8, 12]], np.int32)
    monkeypatch.setenv(PTXAS_LEVEL_ENV, "0")
    got = hl_compile(parse_hlo(NEGATED_MAX_S32), target="gpu")(x)
    np.testing.assert_array_equal(np.asarray(got[0]), evaluate(parse_hlo(NEGATED_MAX_S32), [x])[0])
    assert int(np.asarray(got[0])[0]) == 23


@needs_gpu
def test_gpu_minimum_and_maximum_keep_the_nan_operand():
    """max.NaN/min.NaN return the canonical NaN; the target selects the NaN operand itself, so
    a -NaN keeps its sign through elementwise and reduced extrema, which a TOTALORDER compare
    shows (the large-graph fuzzer, seed 61, found the lost sign on an H200)."""
    text = """HloModule m
mn {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] minimum(a, b)
}
ENTRY e {
  x = f32[64,512] parameter(0)
  y = f32[64,512] parameter(1)
  lo = f32[64,512] minimum(x, y)
  hi = f32[64,512] maximum(x, y)
  below = pred[64,512] compare(lo, x), direction=LT, type=TOTALORDER
  inf = f32[] constant(inf)
  r = f32[64] reduce(y, inf), dimensions={1}, to_apply=mn
  ROOT t = (f32[64,512], f32[64,512], pred[64,512], f32[64]) tuple(lo, hi, below, r)
}
"""
    module = parse_hlo(text)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    y = rng.standard_normal((64, 512)).astype(np.float32)
    neg_nan = np.array(0xFFC00001, np.uint32).view(np.float32)
    x[::3, ::5] = -neg_nan
    y[1::4, ::7] = neg_nan  # where both are NaNs, x's (the first operand's) is the answer
    got = GpuProgram.compile(module, emulated=False).run([x, y])
    want = evaluate(module, [x, y], denormals="keep")
    for g, w in zip(got[:3], want[:3]):  # elementwise: the NaN operand itself, bit for bit
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8))
    # A reduction's NaN payload is the implementation's (numpy's quietens it); its sign is not.
    r, want_r = np.asarray(got[3]), np.asarray(want[3])
    np.testing.assert_array_equal(np.signbit(r), np.signbit(want_r))
    np.testing.assert_array_equal(r, want_r)  # equal numbers, NaN where NaN


@needs_gpu
def test_gpu_workload_through_compile_api():
    import hlofuse

    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    def softmax(x):
        e = jnp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    x = np.random.default_rng(2).standard_normal((64, 1000)).astype(np.float32)
    module = hlofuse.parse_hlo(jax.jit(softmax).lower(x).as_text(dialect="hlo"))
    (got,) = hlofuse.compile(module, target="gpu")(x)
    np.testing.assert_allclose(got, np.asarray(softmax(x)), rtol=1e-5, atol=1e-6)


class _FakeDeviceArray:
    """Host memory posing as a numba device array (only what CudaDevice uses)."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.host.ctypes.data, False), "shape": self.host.shape, "typestr": "|u1", "version": 3}

    def copy_to_host(self):
        return self.host.copy()


class _FakeCuda:
    def __init__(self) -> None:
        self.h2d = 0
        self.d2h = 0

    def to_device(self, a):
        self.h2d += 1
        return _FakeDeviceArray(np.array(a, copy=True))

    def device_array(self, n, dtype):
        return _FakeDeviceArray(np.empty(n, dtype))

    def synchronize(self):
        pass


def _on_fake_cuda(module, monkeypatch):
    """`module` compiled for the GPU with CudaDevice's code paths on host memory: the fake
    numba.cuda above for memory, the emulated kernels for the launches."""
    from hlofuse.runtime import gpu_executor as ge
    from hlofuse.runtime.gpu_emulator import run_grid

    prog = GpuProgram.compile(module, emulated=True, build_only=True)
    # Loads the emulated kernels (emulated.functions, by launch name), which the fake launches run.
    emulated = ge.HostDevice(prog.launches, prog.code.emulated_module())
    fake = _FakeCuda()
    dev = ge.CudaDevice.__new__(ge.CudaDevice)
    dev.cuda = fake
    monkeypatch.setattr(dev, "launch", lambda launch, ptrs: run_grid(emulated.functions[launch.name], ptrs, launch.dims.grid), raising=False)
    prog.device = dev
    return prog, fake, emulated


def test_cuda_device_transfers_with_host_memory_standing_in(monkeypatch):
    """CudaDevice's byte buffers (bf16 and pred included), one copy per input and per output,
    with the emulated kernels standing in for the launches."""
    text = """HloModule t
fused {
  x = bf16[300] parameter(0)
  p = pred[300] parameter(1)
  c = f32[300] convert(x)
  n = f32[300] negate(c)
  s = f32[300] select(p, c, n)
  ROOT t = (f32[300], pred[300]) tuple(s, p)
}
ENTRY e {
  x = bf16[300] parameter(0)
  p = pred[300] parameter(1)
  ROOT f = (f32[300], pred[300]) fusion(x, p), kind=kLoop, calls=fused
}
"""
    module = parse_hlo(text)
    prog, fake, emulated = _on_fake_cuda(module, monkeypatch)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(300).astype(module.entry.parameters[0].shape.dtype.numpy)
    p = rng.random(300) < 0.5
    got = prog.run([x, p])
    want = evaluate(module, [x, p])
    assert fake.h2d == 2
    assert emulated.module is not None
    for g, w in zip(got, want):
        assert g.dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, np.asarray(w))


def test_kernel_pointer_arguments_are_accepted_by_cuda_core():
    """The launch arguments CudaDevice passes are of a type cuda.core's argument packer takes
    (a real H200 refused the ctypes.c_void_p it was given before): checked on its packer
    itself, which needs no GPU."""
    handler = pytest.importorskip("cuda.core._kernel_arg_handler")
    from hlofuse.runtime.gpu_executor import kernel_arguments

    addresses = [0, 0x7F00_0000_1000, 2**64 - 8]
    args = kernel_arguments(addresses)
    assert [int(a) for a in args] == addresses
    handler.ParamHolder(args)  # raises TypeError for an unsupported argument type
    with pytest.raises(TypeError):
        handler.ParamHolder([__import__("ctypes").c_void_p(16)])


CONTROL_FLOW = """HloModule loops
cond {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[64] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  h = f32[] constant(0.5)
  hb = f32[64] broadcast(h), dimensions={}
  y = f32[64] add(x, hb)
  ROOT t = (s32[], f32[64]) tuple(j, y)
}
gt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GT
}
ENTRY e {
  x = f32[64] parameter(0)
  z = s32[] constant(0)
  s0 = (s32[], f32[64]) tuple(z, x)
  w = (s32[], f32[64]) while(s0), condition=cond, body=body
  y = f32[64] get-tuple-element(w), index=1
  ROOT r = f32[64] sort(y), dimensions={0}, is_stable=true, to_apply=gt
}
"""


def test_while_condition_and_sort_comparator_read_device_results_on_the_host(monkeypatch):
    """On the real GPU a called computation's result is device memory: the while loop's
    condition and the sort's comparator must bring it to the host before testing it (a real
    H200 looped for ever on a condition it read as an always-true object)."""
    module = parse_hlo(CONTROL_FLOW)
    prog, _, _ = _on_fake_cuda(module, monkeypatch)
    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    got = prog.run([x])
    want = evaluate(module, [x])
    np.testing.assert_array_equal(got[0], np.asarray(want[0]))
    y = x.copy()
    for _ in range(5):
        y += np.float32(0.5)
    np.testing.assert_array_equal(got[0], np.sort(y)[::-1])
