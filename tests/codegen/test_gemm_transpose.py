"""A dot whose result is transposed (attention's `bhqd -> bqhd` after its second dot) is one
kOutput fusion whose GEMM writes each element where the transpose puts it (passes/fusion/
dot_fusion.py, codegen/kernels/gemm_layout.py OutputMap): through BLAS's leading dimension
when the permuted layout is a strided matrix per batch element (the lhs and rhs swap places
when the output's unit stride is along the lhs's rows), else from a scratch result through the
epilogue's index map. Every permutation of a batched dot's result, with and without an
elementwise epilogue before the transpose, and narrow output types, against the interpreter."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels.cpu_gemm import find_gemm_dot, gemm_needs_scratch
from hlofuse.codegen.kernels.gemm_layout import output_map
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_arrays

NP = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "c64": np.complex64}


def _s(dims) -> str:
    return ",".join(str(d) for d in dims)


def _module(b: int, h: int, m: int, n: int, k: int, perm, dtype: str = "f32", out: str | None = None,
            scale: bool = False) -> str:
    """lhs [b,m,h,k] (attention's layout), rhs [b,h,k,n]; dot [b,h,m,n]; transpose by `perm`."""
    out = out or dtype
    dims = [b, h, m, n]
    tdims = [dims[p] for p in perm]
    body = f"  d = {out}[{_s(dims)}] dot(x, w), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, " \
           f"rhs_batch_dims={{0,1}}, rhs_contracting_dims={{2}}\n"
    value = "d"
    if scale:
        lit = "(0.125, 0)" if out.startswith("c") else "0.125"
        body += (f"  c = {out}[] constant({lit})\n  cb = {out}[{_s(dims)}] broadcast(c), dimensions={{}}\n"
                 f"  sd = {out}[{_s(dims)}] multiply(d, cb)\n")
        value = "sd"
    return (f"HloModule t\nENTRY e {{\n  x = {dtype}[{b},{m},{h},{k}] parameter(0)\n"
            f"  w = {dtype}[{b},{h},{k},{n}] parameter(1)\n{body}"
            f"  ROOT t = {out}[{_s(tdims)}] transpose({value}), dimensions={{{_s(perm)}}}\n}}\n")


def _random(rng, dims, dtype):
    x = rng.standard_normal(dims)
    if dtype.startswith("c"):
        x = x + 1j * rng.standard_normal(dims)
    return x.astype(NP[dtype])


def _run(text: str, args: list):
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    got = exe(*args)
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    for j, (g, w) in enumerate(zip(got, want)):
        c = compare_arrays(g, w, j)
        assert c.ok, c.line()
    return exe


def _gemm_fusion(exe):
    """The entry's one kOutput fusion (asserting there is exactly one step with kernels)."""
    fusions = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1 and fusions[0].attrs["kind"] == "kOutput", exe.fused_module.to_text()
    assert fusions[0].fused_computation.root.opcode == "transpose"
    (step,) = [s for s in exe.program._entry.steps if s.kind == "kernel"]
    assert step.kernels[-1].custom == "gemm"
    return fusions[0], step


def _swapped_dot(exe):
    """The entry's one GEMM step, a plain dot: the simplifier folded the transpose into it
    (transpose(dot(a, b)) => dot(b, a) when it only exchanges the free dimensions)."""
    assert not any(i.opcode in ("transpose", "fusion") for i in exe.fused_module.entry.instructions)
    (step,) = [s for s in exe.program._entry.steps if s.kind == "kernel"]
    assert step.kernels[-1].custom == "gemm"
    return step


def _exchanges_free_dims(perm) -> bool:
    return tuple(perm[2:]) == (3, 2)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4)))[1:])  # the identity is simplified away
def test_every_permutation_of_a_batched_dot(perm):
    rng = np.random.default_rng(sum(p * 10 ** i for i, p in enumerate(perm)))
    b, h, m, n, k = 2, 3, 40, 48, 72
    exe = _run(_module(b, h, m, n, k, perm), [_random(rng, (b, m, h, k), "f32"), _random(rng, (b, h, k, n), "f32")])
    if _exchanges_free_dims(perm):
        _swapped_dot(exe)
    else:
        _gemm_fusion(exe)


@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (0, 3, 1, 2), (1, 0, 3, 2), (3, 2, 1, 0)])
@pytest.mark.parametrize("dtype,out", [("f32", "f32"), ("f64", "f64"), ("bf16", "bf16"), ("c64", "c64")])
def test_epilogue_before_the_transpose(perm, dtype, out):
    rng = np.random.default_rng(7)
    b, h, m, n, k = 2, 2, 33, 70, 65
    exe = _run(_module(b, h, m, n, k, perm, dtype, out, scale=True),
               [_random(rng, (b, m, h, k), dtype), _random(rng, (b, h, k, n), dtype)])
    fusion, _ = _gemm_fusion(exe)
    assert "multiply" in {i.opcode for i in fusion.fused_computation.instructions}


def test_attention_output_layout_is_written_by_blas(monkeypatch):
    """bhqd -> bqhd (the output of attention's second dot, [b,h,d,q] -> [b,q,h,d]): the output
    has unit stride along the lhs's rows (d), so BLAS writes it swapped, with ldc = h*d. (The
    sgemm kernels: oneDNN's matmul primitive would take this dot, cpu_gemm_onednn.py.)"""
    from hlofuse.codegen.kernels import cpu_gemm_onednn

    monkeypatch.setattr(cpu_gemm_onednn, "prefers_onednn_matmul", lambda comp: False)
    rng = np.random.default_rng(11)
    b, h, s, d = 2, 3, 128, 64
    text = f"""HloModule att
ENTRY e {{
  v = f32[{b},{s},{h},{d}] parameter(0)
  p = f32[{b},{h},{s},{s}] parameter(1)
  o = f32[{b},{h},{d},{s}] dot(v, p), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{1}}, rhs_batch_dims={{0,1}}, rhs_contracting_dims={{3}}
  ROOT t = f32[{b},{s},{h},{d}] transpose(o), dimensions={{0,3,1,2}}
}}
"""
    exe = _run(text, [_random(rng, (b, s, h, d), "f32"), _random(rng, (b, h, s, s), "f32")])
    fusion, step = _gemm_fusion(exe)
    comp = step.kernels[-1].comp
    dot = find_gemm_dot(comp)
    cm = output_map(comp, dot).matrix()
    assert cm is not None and cm.row_stride == 1 and cm.col_stride == h * d
    assert not gemm_needs_scratch(comp, dot) and not step.kernels[-1].scratch


def test_transposed_row_panels_of_one_matrix():
    """One matrix cut into row panels, written transposed (BLAS swapped, panels offset along
    the output's unit-stride dimension), then the same with a bias before the transpose."""
    rng = np.random.default_rng(12)
    # K = 1024: the swapped dot [40,1024] x [1024,300] has the work of two threads' shares
    # (codegen/region_cost.py), so gemm_partition cuts its columns in two
    m, k, n = 300, 1024, 40
    for extra in ("", "bias"):
        root = "d"
        lines = ""
        if extra:
            lines = f"  bb = f32[{m},{n}] broadcast(bias), dimensions={{1}}\n  a = f32[{m},{n}] add(d, bb)\n"
            root = "a"
        text = (f"HloModule p\nENTRY e {{\n  x = f32[{m},{k}] parameter(0)\n  w = f32[{k},{n}] parameter(1)\n"
                f"  bias = f32[{n}] parameter(2)\n"
                f"  d = f32[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n{lines}"
                f"  ROOT t = f32[{n},{m}] transpose({root}), dimensions={{1,0}}\n}}\n")
        exe = _run(text, [_random(rng, (m, k), "f32"), _random(rng, (k, n), "f32"), _random(rng, (n,), "f32")])
        # without the bias the simplifier makes it dot(w, x): row panels of the swapped dot
        step = _gemm_fusion(exe)[1] if extra else _swapped_dot(exe)
        assert step.kernels[-1].units > 1


def test_layout_blas_cannot_write_goes_through_scratch():
    """[b,h,m,n] -> [m,b,n,h]: neither the rows nor the columns have unit stride, so the GEMM
    writes a scratch result and the epilogue moves it through the transpose's index map."""
    b, h, m, n, k = 2, 3, 40, 48, 72
    exe = _run(_module(b, h, m, n, k, (2, 0, 3, 1)),
               [_random(np.random.default_rng(1), (b, m, h, k), "f32"),
                _random(np.random.default_rng(2), (b, h, k, n), "f32")])
    _, step = _gemm_fusion(exe)
    assert step.kernels[-1].scratch


def test_transpose_of_a_dot_with_another_reader_is_not_fused():
    """The dot has a second user: it is not duplicated into the transpose's fusion."""
    text = """HloModule two
ENTRY e {
  x = f32[128,64] parameter(0)
  w = f32[64,96] parameter(1)
  d = f32[128,96] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[96,128] transpose(d), dimensions={1,0}
  n = f32[128,96] negate(d)
  ROOT r = (f32[96,128], f32[128,96]) tuple(t, n)
}
"""
    rng = np.random.default_rng(4)
    exe = _run(text, [_random(rng, (128, 64), "f32"), _random(rng, (64, 96), "f32")])
    assert len([i for i in exe.fused_module.entry.instructions if i.opcode == "dot"]) == 1


@pytest.mark.parametrize("scale", [False, True])
def test_transpose_then_reshape_merging_heads(scale):
    """Attention's output `[b,h,d,q] -> [b,q,h,d] -> [b,q,h*d]` (the reshape moves no element in
    a row-major buffer): one kOutput fusion rooted at the reshape, BLAS writing it in place."""
    rng = np.random.default_rng(13)
    b, h, s, d = 2, 4, 96, 32
    epi = (f"  c = f32[] constant(0.5)\n  cb = f32[{b},{h},{d},{s}] broadcast(c), dimensions={{}}\n"
           f"  o2 = f32[{b},{h},{d},{s}] multiply(o, cb)\n") if scale else ""
    text = f"""HloModule heads
ENTRY e {{
  v = f32[{b},{s},{h},{d}] parameter(0)
  p = f32[{b},{h},{s},{s}] parameter(1)
  o = f32[{b},{h},{d},{s}] dot(v, p), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{1}}, rhs_batch_dims={{0,1}}, rhs_contracting_dims={{3}}
{epi}  t = f32[{b},{s},{h},{d}] transpose({"o2" if scale else "o"}), dimensions={{0,3,1,2}}
  ROOT r = f32[{b},{s},{h * d}] reshape(t)
}}
"""
    exe = _run(text, [_random(rng, (b, s, h, d), "f32"), _random(rng, (b, h, s, s), "f32")])
    fusions = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1 and fusions[0].attrs["kind"] == "kOutput"
    assert fusions[0].fused_computation.root.opcode == "reshape"
    (step,) = [st for st in exe.program._entry.steps if st.kind == "kernel"]
    assert step.kernels[-1].custom == "gemm" and not step.kernels[-1].scratch


def test_reshape_of_a_dot_is_its_output():
    rng = np.random.default_rng(14)
    text = """HloModule r
ENTRY e {
  x = f32[96,80] parameter(0)
  w = f32[80,64] parameter(1)
  d = f32[96,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[96,8,8] reshape(d)
}
"""
    exe = _run(text, [_random(rng, (96, 80), "f32"), _random(rng, (80, 64), "f32")])
    (fusion,) = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert fusion.attrs["kind"] == "kOutput"
