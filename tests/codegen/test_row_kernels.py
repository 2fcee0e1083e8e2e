"""Row kernels (codegen/kernels/cpu_row.py, planned by codegen/row_fusion.py): softmax-like
chains computed per row in one kernel give the interpreter's results, on many shapes and types;
the planner records the decision with its reason, and refuses (keeping the multi-kernel plan)
when a row exceeds the cache rule or the reduces are not read back along rows."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import row_fusion
from hlofuse.codegen.kernels import cpu_row, reduction_groups
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs

REDUCERS = """
max_{t} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT m = {t}[] maximum(a, b)
}}
add_{t} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}
"""


def _shape(t: str, dims) -> str:
    return f"{t}[{','.join(str(d) for d in dims)}]"


# Each pattern is the body of an ENTRY computing in type `c` from `x` (converted from the input
# type `t`); `{X}` is the row shape, `{R}` the per-row shape, `{rd}` the reduced dimensions,
# `{kd}` the broadcast dimensions of a per-row value, `{n}` the row length.
PATTERNS = {
    "softmax": """
  ninf = {c}[] constant(-inf)
  mx = {R} reduce(x, ninf), dimensions={rd}, to_apply=max_{c}
  mb = {X} broadcast(mx), dimensions={kd}
  d = {X} subtract(x, mb)
  e = {X} exponential(d)
  zero = {c}[] constant(0)
  s = {R} reduce(e, zero), dimensions={rd}, to_apply=add_{c}
  sb = {X} broadcast(s), dimensions={kd}
  y = {X} divide(e, sb)""",
    "log_softmax": """
  ninf = {c}[] constant(-inf)
  mx = {R} reduce(x, ninf), dimensions={rd}, to_apply=max_{c}
  mb = {X} broadcast(mx), dimensions={kd}
  d = {X} subtract(x, mb)
  e = {X} exponential(d)
  zero = {c}[] constant(0)
  s = {R} reduce(e, zero), dimensions={rd}, to_apply=add_{c}
  ls = {R} log(s)
  lb = {X} broadcast(ls), dimensions={kd}
  y = {X} subtract(d, lb)""",
    "layer_norm": """
  zero = {c}[] constant(0)
  s = {R} reduce(x, zero), dimensions={rd}, to_apply=add_{c}
  n = {c}[] constant({n})
  nb = {R} broadcast(n), dimensions={{}}
  mean = {R} divide(s, nb)
  mb = {X} broadcast(mean), dimensions={kd}
  xc = {X} subtract(x, mb)
  sq = {X} multiply(xc, xc)
  v = {R} reduce(sq, zero), dimensions={rd}, to_apply=add_{c}
  var = {R} divide(v, nb)
  eps = {c}[] constant(1e-5)
  epsb = {R} broadcast(eps), dimensions={{}}
  ve = {R} add(var, epsb)
  inv = {R} rsqrt(ve)
  ib = {X} broadcast(inv), dimensions={kd}
  y = {X} multiply(xc, ib)""",
    "rms_norm": """
  zero = {c}[] constant(0)
  sq = {X} multiply(x, x)
  s = {R} reduce(sq, zero), dimensions={rd}, to_apply=add_{c}
  n = {c}[] constant({n})
  nb = {R} broadcast(n), dimensions={{}}
  ms = {R} divide(s, nb)
  eps = {c}[] constant(1e-6)
  epsb = {R} broadcast(eps), dimensions={{}}
  inv = {R} rsqrt(add(ms, epsb))
  ib = {X} broadcast(inv), dimensions={kd}
  y = {X} multiply(x, ib)""",
    "l2_normalize": """
  zero = {c}[] constant(0)
  sq = {X} multiply(x, x)
  s = {R} reduce(sq, zero), dimensions={rd}, to_apply=add_{c}
  eps = {c}[] constant(1e-12)
  epsb = {R} broadcast(eps), dimensions={{}}
  nrm = {R} sqrt(maximum(s, epsb))
  b = {X} broadcast(nrm), dimensions={kd}
  y = {X} divide(x, b)""",
}


def module(pattern: str, dims, reduced: int = 1, t: str = "f32", c: str | None = None,
           both: bool = False) -> str:
    """HLO text of `pattern` over input `t[dims]`, computed in type `c` (default `t`) over the
    last `reduced` dimensions; `both` also returns the row maxima (a per-row output)."""
    c = c or t
    kept = len(dims) - reduced
    fmt = dict(c=c, X=_shape(c, dims), R=_shape(c, dims[:kept]), rd="{" + ",".join(map(str, range(kept, len(dims)))) + "}",
               kd="{" + ",".join(map(str, range(kept))) + "}", n=math.prod(dims[kept:]))
    body = PATTERNS[pattern].format(**fmt)
    head = f"  xin = {_shape(t, dims)} parameter(0)\n"
    head += f"  x = {_shape(c, dims)} convert(xin)\n" if c != t else f"  x = {_shape(c, dims)} copy(xin)\n"
    out = f"  out = {_shape(t, dims)} convert(y)\n" if c != t else f"  out = {_shape(c, dims)} copy(y)\n"
    if both:
        fmt_r = fmt["R"]
        root = (f"  ninf2 = {c}[] constant(-inf)\n  mx2 = {fmt_r} reduce(x, ninf2), dimensions={fmt['rd']}, "
                f"to_apply=max_{c}\n  ROOT r = ({_shape(t, dims)}, {fmt_r}) tuple(out, mx2)\n")
        out = out.replace("  out =", "  out =") + root
    else:
        out = out.replace("  out =", "  ROOT out =")
    return ("HloModule rows\n" + REDUCERS.format(t=c) + "ENTRY main {\n" + head + body + "\n" + out + "}\n")


def _input(dims, t: str, seed: int = 0) -> np.ndarray:
    dtype = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[t]
    return (np.random.default_rng(seed).standard_normal(dims) * 3).astype(dtype)


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")


def _row_kernels(exe) -> list:
    return [k for k in exe.program._planner.kernels if k.custom == "row"]


def _entries(exe, rule: str) -> list:
    return [e for e in exe.fused_module.fusion_log.entries if e.pass_name == "kernel-planner" and e.rule == rule]


def _check(text: str, args: list) -> list:
    exe = _compile(text)
    got = exe(*args)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
    return exe


SHAPES = [(5, 1), (7, 13), (3, 17), (4, 64), (6, 100), (2, 3, 33), (9, 130)]


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(map(str, d)))
def test_row_kernel_matches_interpreter_f32(pattern, dims):
    exe = _check(module(pattern, dims), [_input(dims, "f32")])
    if dims[-1] == 1:  # rows of one element: each reduce is a reshape (XLA's simplifier rule,
        assert not _row_kernels(exe)  # passes/simplifier.py), so no row kernel is planned
        return
    assert len(_row_kernels(exe)) == 1
    assert len(exe.program._planner.kernels) == 1  # the whole chain is one kernel
    assert _entries(exe, "row-kernel")


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
@pytest.mark.parametrize("dims", [(4, 31), (3, 257)], ids=lambda d: "x".join(map(str, d)))
def test_row_kernel_f64(pattern, dims):
    exe = _check(module(pattern, dims, t="f64"), [_input(dims, "f64")])
    assert len(_row_kernels(exe)) == 1


@pytest.mark.parametrize("t", ["bf16", "f16"])
@pytest.mark.parametrize("pattern", ["softmax", "layer_norm", "rms_norm"])
def test_narrow_inputs_computed_in_f32(pattern, t):
    dims = (6, 45)
    exe = _check(module(pattern, dims, t=t, c="f32"), [_input(dims, t)])
    assert len(_row_kernels(exe)) == 1


@pytest.mark.parametrize("t", ["bf16", "f16"])
def test_narrow_reduce_keeps_xla_order_path(t):
    """A reduce into bf16/f16 rounds per step in XLA:CPU's tree order: no row kernel, and the
    refusal says why; the result still matches the interpreter."""
    dims = (4, 70)
    exe = _check(module("softmax", dims, t=t), [_input(dims, t)])
    assert not _row_kernels(exe)
    assert any("order" in e.reason for e in _entries(exe, "row-kernel-refused"))


def test_two_reduced_dimensions():
    dims = (4, 3, 5)
    exe = _check(module("layer_norm", dims, reduced=2), [_input(dims, "f32")])
    assert len(_row_kernels(exe)) == 1


def test_per_row_output_beside_row_output():
    """A tuple of the softmax rows and the row maxima: the maxima are one value per row."""
    dims = (8, 40)
    text = module("softmax", dims, both=True)
    _check(text, [_input(dims, "f32")])


def test_rows_exceeding_the_cache_rule_keep_the_old_plan(monkeypatch):
    dims = (4, 64)  # 256 bytes per row
    monkeypatch.setattr(row_fusion, "row_budget_bytes", lambda: 128)
    exe = _check(module("softmax", dims), [_input(dims, "f32")])
    assert not _row_kernels(exe)
    assert len(exe.program._planner.kernels) > 1
    refused = _entries(exe, "row-kernel-refused")
    assert refused and "256 bytes" in refused[0].reason and "L2" in refused[0].reason


def test_decision_names_the_steps_and_the_reason():
    dims = (16, 48)
    exe = _compile(module("softmax", dims))
    (entry,) = _entries(exe, "row-kernel")
    assert entry.action == "planned" and "16 rows of 48 elements" in entry.reason
    assert "2 reduction loop(s)" in entry.reason
    text = exe.report_text() if hasattr(exe, "report_text") else str(exe.report())
    assert "row-kernel" in text or "row kernel" in text


def test_column_reduce_broadcast_back_is_refused():
    """A reduce over the leading dimension, broadcast back: not a row pattern."""
    text = """HloModule cols
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[20,8] parameter(0)
  zero = f32[] constant(0)
  s = f32[8] reduce(x, zero), dimensions={0}, to_apply=add_f32
  sb = f32[20,8] broadcast(s), dimensions={1}
  ROOT y = f32[20,8] divide(x, sb)
}
"""
    exe = _check(text, [_input((20, 8), "f32") + 10])
    assert not _row_kernels(exe)


def test_reduce_read_at_another_row_is_refused():
    """reverse(max) broadcast back reads another row's value: row_layout refuses it."""
    text = """HloModule rev
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY main {
  x = f32[6,40] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[6] reduce(x, ninf), dimensions={1}, to_apply=max_f32
  rv = f32[6] reverse(mx), dimensions={0}
  fused = (f32[6,40]) fusion(x, rv), kind=kLoop, calls=body
  ROOT y = f32[6,40] get-tuple-element(fused), index=0
}
"""
    comp = hlofuse.parse_hlo(module("softmax", (6, 40))).entry  # a plain computation to analyse
    assert isinstance(cpu_row.row_layout(comp), cpu_row.RowLayout)
    m = hlofuse.parse_hlo(text.replace("  fused = (f32[6,40]) fusion(x, rv), kind=kLoop, calls=body\n  ROOT y = f32[6,40] get-tuple-element(fused), index=0\n",
                                       "  rb = f32[6,40] broadcast(rv), dimensions={0}\n  ROOT y = f32[6,40] subtract(x, rb)\n"))
    reason = cpu_row.row_layout(m.entry)
    assert isinstance(reason, str) and "rv" in reason
    exe = _check(m.to_text(), [_input((6, 40), "f32")])
    assert not _row_kernels(exe)


def test_l2_size_is_read_from_the_host():
    size = cpu_row.l2_cache_bytes()
    assert size >= 64 << 10 and size & (size - 1) == 0 or size % 1024 == 0
    assert cpu_row.row_budget_bytes() == int(size * cpu_row.ROW_L2_FRACTION)


def test_softmax_computes_exp_once_and_reuses_it():
    """XLA's fusions each hold a copy of exp(x - max) (the sum's and the division's); the row
    kernel's computation has one (merged), stored by the sum loop in the output row and read
    back by the division loop."""
    exe = _check(module("softmax", (16, 48)), [_input((16, 48), "f32")])
    (kernel,) = _row_kernels(exe)
    comp = kernel.comp
    exps = [i for i in comp.instructions if i.opcode == "exponential"]
    assert len(exps) == 1
    layout = cpu_row.row_layout(comp)
    assert cpu_row.reused_values(comp, layout) == {0: exps[0]}
    llvm = exe.program.llvm_ir()
    row_fn = llvm[llvm.index(f"@{kernel.name}("):]
    row_fn = row_fn[:row_fn.index("\n}\n")]
    # exp's range reduction once per vector of the row, in the sum loop only: on AVX-512 (16
    # lanes) the loop unrolled x4, 4 calls; on the Zen 1 AVX2 host (8 lanes) the row's 6
    # vectors, 6 calls (12 if the division loop computed exp again).
    lanes = reduction_groups.lanes_of(CpuTarget().vector_width, 32)
    assert row_fn.count("llvm.rint") <= max(4, -(-48 // lanes)), row_fn.count("llvm.rint")


@pytest.mark.parametrize("pattern", ["log_softmax", "layer_norm", "rms_norm"])
def test_nothing_expensive_shared_means_nothing_stored(pattern):
    """log-softmax's output reads x - max (cheap), not exp; norms share no expensive value."""
    exe = _check(module(pattern, (8, 40)), [_input((8, 40), "f32")])
    (kernel,) = _row_kernels(exe)
    assert cpu_row.reused_values(kernel.comp, cpu_row.row_layout(kernel.comp)) == {}


def test_narrow_output_does_not_hold_the_f32_exp():
    """Computed in f32, written in bf16: output rows cannot hold exp exactly, so none is stored."""
    exe = _check(module("softmax", (6, 64), t="bf16", c="f32"), [_input((6, 64), "bf16")])
    (kernel,) = _row_kernels(exe)
    assert cpu_row.reused_values(kernel.comp, cpu_row.row_layout(kernel.comp)) == {}


CAUSAL = """HloModule causal
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[3,SZ,SZ] parameter(0)
  i0 = s32[SZ,SZ] iota(), iota_dimension=0
  i1 = s32[SZ,SZ] iota(), iota_dimension=1
  ge = pred[SZ,SZ] compare(i0, i1), direction=GE
  m = pred[3,SZ,SZ] broadcast(ge), dimensions={1,2}
  big = f32[] constant(-1e9)
  bb = f32[3,SZ,SZ] broadcast(big), dimensions={}
  xm = f32[3,SZ,SZ] select(m, x, bb)
  ninf = f32[] constant(-inf)
  mx = f32[3,SZ] reduce(xm, ninf), dimensions={2}, to_apply=max_f32
  mb = f32[3,SZ,SZ] broadcast(mx), dimensions={0,1}
  d = f32[3,SZ,SZ] subtract(xm, mb)
  ex = f32[3,SZ,SZ] exponential(d)
  zero = f32[] constant(0)
  s = f32[3,SZ] reduce(ex, zero), dimensions={2}, to_apply=add_f32
  sb = f32[3,SZ,SZ] broadcast(s), dimensions={0,1}
  ROOT y = f32[3,SZ,SZ] divide(ex, sb)
}
"""


@pytest.mark.parametrize("n", [7, 64, 100])
def test_causal_masked_softmax_with_nan_and_infinities(n):
    """Attention's masked softmax: the max row pass propagates NaN (a NaN row gives NaN), +inf
    gives NaN (inf - inf), and is vectorised (llvm.maximum on vectors); results as the interpreter's."""
    x = _input((3, n, n), "f32")
    x[0, n - 1, 2] = np.nan
    x[1, n - 1, 0] = np.inf
    x[2, n // 2, : n // 2 + 1] = -np.inf
    exe = _check(CAUSAL.replace("SZ", str(n)), [x])
    (kernel,) = _row_kernels(exe)
    llvm = exe.program.llvm_ir()
    row_fn = llvm[llvm.index(f"@{kernel.name}("):]
    row_fn = row_fn[:row_fn.index("\n}\n")]
    if n >= 64:
        assert "@llvm.maximum.v" in row_fn
