"""Property-based tests: random data-movement and reduce configurations, the interpreter against
XLA's CPU compiler on the same HLO text."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xla_oracle import run_on_xla, xla_available  # noqa: E402

from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402

pytestmark = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dims_text(dims) -> str:
    return ",".join(str(d) for d in dims)


def check(text: str, args: list[np.ndarray]) -> None:
    got = evaluate(parse_hlo(text), args)
    want = run_on_xla(text, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3)


@SETTINGS
@given(shape=shapes, data=st.data())
def test_pad_vs_xla(shape, data):
    config = []
    out = []
    for n in shape:
        interior = data.draw(st.integers(0, 2))
        spread = n + (n - 1) * interior
        lo = data.draw(st.integers(-spread, 3))
        hi = data.draw(st.integers(-(spread + lo) if spread + lo > 0 else 0, 3))
        config.append((lo, hi, interior))
        out.append(spread + lo + hi)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    pad = "x".join(f"{lo}_{hi}_{i}" for lo, hi, i in config)
    text = (f"HloModule m\nENTRY e {{\n  x = f32[{dims_text(shape)}] parameter(0)\n  v = f32[] constant(-1)\n"
            f"  ROOT p = f32[{dims_text(out)}] pad(x, v), padding={pad}\n}}\n")
    check(text, [x])


@SETTINGS
@given(shape=shapes, data=st.data())
def test_dynamic_slice_and_update_vs_xla(shape, data):
    sizes = [data.draw(st.integers(1, n)) for n in shape]
    starts = [data.draw(st.integers(-5, 6)) for _ in shape]
    x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    u = -np.arange(np.prod(sizes), dtype=np.int32).reshape(sizes) - 1
    params = "\n".join(f"  i{k} = s32[] parameter({k + 2})" for k in range(len(shape)))
    idx = ", ".join(f"i{k}" for k in range(len(shape)))
    text = (f"HloModule m\nENTRY e {{\n  x = s32[{dims_text(shape)}] parameter(0)\n"
            f"  u = s32[{dims_text(sizes)}] parameter(1)\n{params}\n"
            f"  ds = s32[{dims_text(sizes)}] dynamic-slice(x, {idx}), dynamic_slice_sizes={{{dims_text(sizes)}}}\n"
            f"  dus = s32[{dims_text(shape)}] dynamic-update-slice(x, u, {idx})\n"
            f"  ROOT t = (s32[{dims_text(sizes)}], s32[{dims_text(shape)}]) tuple(ds, dus)\n}}\n")
    check(text, [x, u] + [np.int32(s) for s in starts])


@SETTINGS
@given(shape=shapes, data=st.data())
def test_transpose_reverse_broadcast_slice_vs_xla(shape, data):
    rank = len(shape)
    perm = data.draw(st.permutations(range(rank)))
    rev = sorted(data.draw(st.sets(st.integers(0, rank - 1))))
    new_dim = data.draw(st.integers(1, 3))
    bdims = data.draw(st.permutations(range(rank + 1)))[:rank]  # operand dim i -> result dim bdims[i]
    bshape = [0] * (rank + 1)
    for i, d in enumerate(bdims):
        bshape[d] = shape[i]
    for d in range(rank + 1):
        if d not in bdims:
            bshape[d] = new_dim
    slc = []
    for n in shape:
        start = data.draw(st.integers(0, n - 1))
        limit = data.draw(st.integers(start + 1, n))
        slc.append((start, limit, data.draw(st.integers(1, 3))))
    sshape = [len(range(s, l, k)) for s, l, k in slc]
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    s = dims_text
    slice_text = ", ".join(f"[{a}:{b}:{c}]" for a, b, c in slc)
    tshape = [shape[p] for p in perm]
    text = (f"HloModule m\nENTRY e {{\n  x = f32[{s(shape)}] parameter(0)\n"
            f"  t = f32[{s(tshape)}] transpose(x), dimensions={{{s(perm)}}}\n"
            f"  r = f32[{s(shape)}] reverse(x), dimensions={{{s(rev)}}}\n"
            f"  b = f32[{s(bshape)}] broadcast(x), dimensions={{{s(bdims)}}}\n"
            f"  sl = f32[{s(sshape)}] slice(x), slice={{{slice_text}}}\n"
            f"  ROOT o = (f32[{s(tshape)}], f32[{s(shape)}], f32[{s(bshape)}], f32[{s(sshape)}]) tuple(t, r, b, sl)\n}}\n")
    check(text, [x])


@SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data(),
       opcode=st.sampled_from(["add", "maximum", "minimum", "multiply", "and", "or", "xor", "subtract"]))
def test_integer_reduce_vs_xla(shape, data, opcode):
    dims = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1))))
    out = [n for i, n in enumerate(shape) if i not in dims]
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.integers(-1000, 1000, shape).astype(np.int32)
    text = (f"HloModule m\nr {{\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
            f"  ROOT c = s32[] {opcode}(a, b)\n}}\n"
            f"ENTRY e {{\n  x = s32[{dims_text(shape)}] parameter(0)\n  z = s32[] constant(3)\n"
            f"  ROOT o = s32[{dims_text(out)}] reduce(x, z), dimensions={{{dims_text(dims)}}}, to_apply=r\n}}\n")
    if opcode == "subtract" and len(dims) != 1:
        return  # a non-associative reducer over several dimensions has no defined order
    check(text, [x])
