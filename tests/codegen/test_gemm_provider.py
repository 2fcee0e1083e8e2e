"""Which library a GEMM kernel calls (runtime/gemm_provider.py): oneDNN's row-major, by-value
`dnnl_sgemm` for f32 where libdnnl is installed, the OpenBLAS scipy ships otherwise and for
f64/complex, `HLOFUSE_GEMM=openblas` forcing OpenBLAS. Each provider's results against the
reference interpreter on the layouts the row-major mapping could get wrong (transposed
operands, batch dimensions, leading dimensions of column panels, a transposed output, M, N or
K of 1), the same bits on 1, 2 and 3 threads, and the calling thread's OpenMP state left as it
was. (The other GEMM and convolution test files run on the default provider; run them again
with HLOFUSE_GEMM=openblas for the other.)"""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.hlo.errors import InputError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_arrays
from hlofuse.runtime.gemm_provider import gemm_provider, onednn_library, requested_provider
from hlofuse.runtime.jit_builtins import blas_symbol, onednn_symbol

from test_gemm import _dot_module, _random

HAVE_ONEDNN = onednn_library() is not None
PROVIDERS = [pytest.param("onednn", marks=pytest.mark.skipif(not HAVE_ONEDNN, reason="libdnnl not installed")),
             "openblas"]


@pytest.fixture(params=PROVIDERS)
def provider(request, monkeypatch) -> str:
    """Each test once per f32 GEMM provider (HLOFUSE_GEMM set for its compiles)."""
    monkeypatch.setenv("HLOFUSE_GEMM", request.param)
    return request.param


def _gemm_calls(exe) -> str:
    """The program's LLVM IR (every kernel linked)."""
    return exe.program.llvm_ir()


def _check(text: str, args: list, provider: str, threads=(1, 2, 3)):
    """Compile `text`, assert its f32 GEMMs call `provider`'s routine, that it agrees with the
    interpreter and gives the same bits on each thread count in `threads`."""
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    ir_text = _gemm_calls(exe)
    dnnl, blas = f"@{onednn_symbol()}(", f"@{blas_symbol('sgemm')}("
    assert (dnnl in ir_text) == (provider == "onednn") and (blas in ir_text) == (provider == "openblas")
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    config = exe.program.driver._config
    first = None
    for n in threads:
        config[0] = n
        got = exe(*args)
        for j, (g, w) in enumerate(zip(got, want)):
            c = compare_arrays(g, w, j)
            assert c.ok, f"{provider}, {n} threads: {c.line()}"
        if first is None:
            first = got
        for g, f in zip(got, first):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(f))
    return exe


# (lhs dims, rhs dims, lhs batch, lhs contracting, rhs batch, rhs contracting)
LAYOUTS = {
    "plain": ((96, 300), (300, 80), [], [1], [], [0]),
    "lhs transposed": ((300, 96), (300, 80), [], [0], [], [0]),
    "rhs transposed": ((96, 300), (80, 300), [], [1], [], [1]),
    "both transposed": ((300, 96), (80, 300), [], [0], [], [1]),
    "batch leading": ((3, 40, 300), (3, 300, 24), [0], [2], [0], [1]),
    "batch in the middle": ((40, 3, 300), (300, 3, 24), [1], [2], [1], [0]),
    "two batch dims, rhs transposed": ((2, 3, 40, 300), (2, 3, 24, 300), [0, 1], [3], [0, 1], [3]),
    "M = 1": ((1, 512), (512, 256), [], [1], [], [0]),
    "N = 1": ((256, 512), (512, 1), [], [1], [], [0]),
    "K = 1": ((512, 1), (1, 384), [], [1], [], [0]),
    "M = 1, rhs transposed": ((1, 512), (256, 512), [], [1], [], [1]),
    "N = 1, lhs transposed": ((512, 256), (512, 1), [], [0], [], [0]),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_f32_layouts_match_the_interpreter(name, provider):
    ldims, rdims, lb, lc, rb, rc = LAYOUTS[name]
    rng = np.random.default_rng(7)
    _check(_dot_module(ldims, rdims, lb, lc, rb, rc, "f32"), [_random(rng, ldims, "f32"), _random(rng, rdims, "f32")],
           provider)


@pytest.mark.parametrize("rhs_transposed", [False, True])
def test_column_panels_read_and_write_at_their_leading_dimensions(rhs_transposed, provider):
    """A short matrix cut into column panels: each unit's call starts n0 columns into the rhs
    and C, whose leading dimensions are the whole matrix's, not the panel's."""
    from hlofuse.codegen.kernels.cpu_gemm import dot_dims, find_gemm_dot
    from hlofuse.codegen.kernels.gemm_partition import gemm_partition

    rdims, rc = ((2048, 768), [1]) if rhs_transposed else ((768, 2048), [0])
    rng = np.random.default_rng(3)
    exe = _check(_dot_module((32, 768), rdims, [], [1], [], rc, "f32"),
                 [_random(rng, (32, 768), "f32"), _random(rng, rdims, "f32")], provider)
    (kernel,) = [k for s in exe.program._entry.steps for k in s.kernels if getattr(k, "custom", None) == "gemm"]
    assert gemm_partition(dot_dims(find_gemm_dot(kernel.comp)), "f32").col_panels >= 2


def test_transposed_output_written_through_ldc(provider):
    """Attention's second dot with its bhqd -> bqhd transpose: C's unit stride is along M
    (BLAS's operands swapped), and the call writes straight into the transposed output."""
    text = """HloModule t
ENTRY e {
  p = f32[2,4,96,96] parameter(0)
  v = f32[2,4,96,32] parameter(1)
  d = f32[2,4,96,32] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}
  ROOT t = f32[2,96,4,32] transpose(d), dimensions={0,2,1,3}
}
"""
    rng = np.random.default_rng(5)
    _check(text, [_random(rng, (2, 4, 96, 96), "f32"), _random(rng, (2, 4, 96, 32), "f32")], provider)


def test_convolution_gemm_calls_the_provider(provider, monkeypatch):
    """The tiled-GEMM convolution kernel (cpu_conv_gemm_kernel.py) calls the same routine (an
    input gradient's `01oi` weights: a shape class its rule runs as GEMMs where oneDNN's
    convolution primitive, cpu_conv_onednn.py, does not take it first)."""
    from hlofuse.codegen.kernels import cpu_conv_gemm

    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    text = """HloModule c
ENTRY e {
  x = f32[2,20,20,32] parameter(0)
  w = f32[3,3,48,32] parameter(1)
  ROOT c = f32[2,20,20,48] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01oi->b01f
}
"""
    rng = np.random.default_rng(9)
    exe = _check(text, [_random(rng, (2, 20, 20, 32), "f32"), _random(rng, (3, 3, 48, 32), "f32")], provider)
    assert any(getattr(k, "custom", None) == "conv_gemm" for s in exe.program._entry.steps for k in s.kernels)


def test_f64_stays_on_openblas(provider):
    rng = np.random.default_rng(1)
    text = _dot_module((64, 300), (300, 48), [], [1], [], [0], "f64")
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    ir_text = _gemm_calls(exe)
    assert f"@{blas_symbol('dgemm')}(" in ir_text and f"@{onednn_symbol()}(" not in ir_text
    assert gemm_provider("f64") == "openblas"
    args = [_random(rng, (64, 300), "f64"), _random(rng, (300, 48), "f64")]
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    assert compare_arrays(exe(*args)[0], want[0], 0).ok


# Run in a fresh process: libgomp's pool, once started by anything, would hide a team oneDNN
# started; there a run on one thread must start none.
_THREAD_PROBE = """
import ctypes, os, sys
import numpy as np
import hlofuse
from hlofuse.runtime.jit_builtins import onednn_symbol
sys.path.insert(0, sys.argv[1])
from test_gemm import _dot_module
gomp = ctypes.CDLL("libgomp.so.1")
gomp.omp_set_num_threads(3)
exe = hlofuse.compile(hlofuse.parse_hlo(_dot_module((512, 512), (512, 512), [], [1], [], [0], "f32")), target="cpu")
assert f"@{onednn_symbol()}(" in exe.program.llvm_ir()
a = np.ones((512, 512), np.float32)
before = len(os.listdir("/proc/self/task"))
(c,) = exe(a, a)
assert (c == 512).all()
print(before, len(os.listdir("/proc/self/task")), gomp.omp_get_max_threads())
"""


@pytest.mark.skipif(not HAVE_ONEDNN, reason="libdnnl not installed")
def test_onednn_is_the_default_and_starts_no_team_of_its_own():
    """Unset HLOFUSE_GEMM takes oneDNN; a GEMM kernel the driver runs serially
    (HLOFUSE_CPU_THREADS=1) makes oneDNN compute on the calling thread, starting no thread (the
    kernel sets the thread's OpenMP count to 1 around its calls), and leaves that count as it
    found it (3)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "HLOFUSE_GEMM"}
    env["HLOFUSE_CPU_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", _THREAD_PROBE, os.path.dirname(__file__)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    before, after, count = (int(x) for x in out.stdout.split()[-3:])
    assert after == before and count == 3


def test_the_provider_is_part_of_the_target_fingerprint(monkeypatch):
    monkeypatch.setenv("HLOFUSE_GEMM", "openblas")
    forced = CpuTarget().fingerprint()
    assert forced.endswith("gemm-f32=openblas")
    monkeypatch.setenv("HLOFUSE_GEMM", "onednn")
    assert (CpuTarget().fingerprint() != forced) == HAVE_ONEDNN


def test_an_unknown_provider_is_an_input_error(monkeypatch):
    monkeypatch.setenv("HLOFUSE_GEMM", "mkl")
    with pytest.raises(InputError, match="HLOFUSE_GEMM"):
        gemm_provider("f32")


def test_without_libdnnl_f32_falls_back_to_openblas(monkeypatch):
    """Where libdnnl does not load (another platform), f32 GEMMs call OpenBLAS, the default
    request notwithstanding, and still match the interpreter."""
    from hlofuse.runtime import gemm_provider as gp

    monkeypatch.delenv("HLOFUSE_GEMM", raising=False)
    monkeypatch.setitem(gp._loaded, "lib", None)
    assert gemm_provider("f32") == "openblas" and CpuTarget().fingerprint().endswith("gemm-f32=openblas")
    rng = np.random.default_rng(4)
    _check(_dot_module((96, 300), (300, 80), [], [1], [], [0], "f32"),
           [_random(rng, (96, 300), "f32"), _random(rng, (300, 80), "f32")], "openblas", threads=(1, 2))
