"""Element generators on the edges of what a fused computation holds, each module compiled
for the CPU and the emulated GPU, with fusion on and off, and compared with the interpreter:

- tuple-shaped values inside fusions: tuple parameters whose leaves differ in dimensions,
  nested tuples, get-tuple-element chains, tuples built and taken apart in the fusion, tuple
  roots of tuples, variadic reduce and sort results. A tuple's elements may differ in
  dimensions, so an index means something only for the element read; evaluating the whole
  tuple at it read the other leaves at a wrong-rank index (AttributeError/IndexError);
- control flow inside inlined scalar computations: a conditional (pred and index forms) or a
  while in a map's function, a conditional in a reducer. They are emitted as LLVM branches and
  loops; before, the map failed with "conditional has no element generator".
"""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.runtime.io import random_inputs

BACKENDS = ["cpu", "gpu-emulated"]


def _check(text: str, backend: str, fusion: bool, args=None) -> None:
    """Compile `text` for `backend` and compare every output with the interpreter's."""
    module = hlofuse.parse_hlo(text)
    args = random_inputs(module, 0) if args is None else args
    want = hlofuse.compile(module, target="interpreter", fusion=False)(*args)
    try:
        exe = hlofuse.compile(module, target=backend, fusion=fusion)
    except UnsupportedError as e:
        if backend.startswith("gpu") and "not available" in str(e):
            pytest.skip(str(e))
        raise
    got = exe(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


# ---- tuple-shaped values inside fusions ---------------------------------------------------------
TUPLE_CASES = {
    # gte of a tuple parameter whose leaves have different ranks (a scalar among them)
    "tuple_param_mixed_dims": """HloModule m
fc {
  p = (f32[4,8], f32[8], f32[]) parameter(0)
  a = f32[4,8] get-tuple-element(p), index=0
  b = f32[8] get-tuple-element(p), index=1
  c = f32[] get-tuple-element(p), index=2
  bb = f32[4,8] broadcast(b), dimensions={1}
  cb = f32[4,8] broadcast(c), dimensions={}
  s = f32[4,8] add(a, bb)
  ROOT e = f32[4,8] multiply(s, cb)
}
ENTRY main {
  p = (f32[4,8], f32[8], f32[]) parameter(0)
  ROOT f = f32[4,8] fusion(p), kind=kLoop, calls=fc
}
""",
    # a gte chain through a nested tuple parameter
    "nested_tuple_param_gte_chain": """HloModule m
fc {
  p = ((f32[4,8], f32[8]), f32[]) parameter(0)
  t = (f32[4,8], f32[8]) get-tuple-element(p), index=0
  a = f32[4,8] get-tuple-element(t), index=0
  b = f32[8] get-tuple-element(t), index=1
  c = f32[] get-tuple-element(p), index=1
  bb = f32[4,8] broadcast(b), dimensions={1}
  cb = f32[4,8] broadcast(c), dimensions={}
  s = f32[4,8] add(a, bb)
  ROOT e = f32[4,8] multiply(s, cb)
}
ENTRY main {
  p = ((f32[4,8], f32[8]), f32[]) parameter(0)
  ROOT f = f32[4,8] fusion(p), kind=kLoop, calls=fc
}
""",
    # nested tuples built inside the fusion and taken apart again
    "nested_tuple_built_and_read": """HloModule m
fc {
  x = f32[4,8] parameter(0)
  s = f32[] parameter(1)
  t = (f32[4,8], (f32[], f32[4,8])) tuple(x, (f32[], f32[4,8]) tuple(s, x))
  u = (f32[], f32[4,8]) get-tuple-element(t), index=1
  c = f32[] get-tuple-element(u), index=0
  cb = f32[4,8] broadcast(c), dimensions={}
  a = f32[4,8] get-tuple-element(u), index=1
  ROOT r = f32[4,8] add(a, cb)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  s = f32[] parameter(1)
  ROOT f = f32[4,8] fusion(x, s), kind=kLoop, calls=fc
}
""",
    # a fusion whose root is a tuple of tuples, leaves of different dimensions
    "root_tuple_of_tuples": """HloModule m
fc {
  x = f32[4,8] parameter(0)
  y = f32[8] parameter(1)
  e = f32[4,8] exponential(x)
  n = f32[8] negate(y)
  t = (f32[4,8], f32[8]) tuple(e, n)
  ROOT u = ((f32[4,8], f32[8]), f32[8]) tuple(t, n)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  y = f32[8] parameter(1)
  ROOT f = ((f32[4,8], f32[8]), f32[8]) fusion(x, y), kind=kLoop, calls=fc
}
""",
    # a tuple root passing a tuple parameter through beside a computed leaf
    "root_holds_tuple_param": """HloModule m
fc {
  p = (f32[4,8], f32[8]) parameter(0)
  b = f32[8] get-tuple-element(p), index=1
  n = f32[8] negate(b)
  ROOT r = (f32[8], (f32[4,8], f32[8])) tuple(n, p)
}
ENTRY main {
  p = (f32[4,8], f32[8]) parameter(0)
  ROOT f = (f32[8], (f32[4,8], f32[8])) fusion(p), kind=kLoop, calls=fc
}
""",
    # a tuple-shaped root that is a gte of a nested tuple parameter
    "root_gte_of_nested_param": """HloModule m
fc {
  p = ((f32[4,8], f32[8]), f32[]) parameter(0)
  ROOT t = (f32[4,8], f32[8]) get-tuple-element(p), index=0
}
ENTRY main {
  p = ((f32[4,8], f32[8]), f32[]) parameter(0)
  ROOT f = (f32[4,8], f32[8]) fusion(p), kind=kLoop, calls=fc
}
""",
    # unfused modules: a tuple parameter's leaves used by elementwise code
    "entry_tuple_param": """HloModule m
ENTRY main {
  p = ((f32[4,8], f32[8]), f32[]) parameter(0)
  t = (f32[4,8], f32[8]) get-tuple-element(p), index=0
  a = f32[4,8] get-tuple-element(t), index=0
  b = f32[8] get-tuple-element(t), index=1
  c = f32[] get-tuple-element(p), index=1
  bb = f32[4,8] broadcast(b), dimensions={1}
  cb = f32[4,8] broadcast(c), dimensions={}
  s = f32[4,8] add(a, bb)
  n = f32[4,8] multiply(s, cb)
  ROOT r = ((f32[4,8], f32[8]), f32[4,8]) tuple(t, n)
}
""",
    # gte of a variadic reduce (value, index), fused with an epilogue
    "variadic_reduce_gte": """HloModule m
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GE
  m = f32[] select(gt, a, b)
  mi = s32[] select(gt, ai, bi)
  ROOT r = (f32[], s32[]) tuple(m, mi)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  e = f32[4,8] exponential(x)
  i = s32[4,8] iota(), iota_dimension=1
  z = f32[] constant(-inf)
  zi = s32[] constant(0)
  r = (f32[4], s32[4]) reduce(e, i, z, zi), dimensions={1}, to_apply=argmax
  v = f32[4] get-tuple-element(r), index=0
  k = s32[4] get-tuple-element(r), index=1
  kf = f32[4] convert(k)
  ROOT o = f32[4] add(v, kf)
}
""",
    # gte of a variadic reduce inside a fusion, the reduce's tuple also a fusion output
    "variadic_reduce_in_fusion": """HloModule m
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GE
  m = f32[] select(gt, a, b)
  mi = s32[] select(gt, ai, bi)
  ROOT r = (f32[], s32[]) tuple(m, mi)
}
fc {
  x = f32[4,8] parameter(0)
  i = s32[4,8] iota(), iota_dimension=1
  z = f32[] constant(-inf)
  zi = s32[] constant(0)
  r = (f32[4], s32[4]) reduce(x, i, z, zi), dimensions={1}, to_apply=argmax
  k = s32[4] get-tuple-element(r), index=1
  ROOT o = s32[4] negate(k)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  ROOT f = s32[4] fusion(x), kind=kInput, calls=fc
}
""",
    # gte of a variadic sort
    "variadic_sort_gte": """HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY main {
  x = f32[4,8] parameter(0)
  i = s32[4,8] iota(), iota_dimension=1
  s = (f32[4,8], s32[4,8]) sort(x, i), dimensions={1}, to_apply=cmp
  v = f32[4,8] get-tuple-element(s), index=0
  k = s32[4,8] get-tuple-element(s), index=1
  kf = f32[4,8] convert(k)
  ROOT o = f32[4,8] multiply(v, kf)
}
""",
}


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(TUPLE_CASES))
def test_tuple_values_in_fusions(case, backend, fusion):
    _check(TUPLE_CASES[case], backend, fusion)


# ---- control flow in inlined scalar computations ------------------------------------------------
_BRANCHES = """
tb {
  t = (f32[], f32[]) parameter(0)
  a = f32[] get-tuple-element(t), index=0
  b = f32[] get-tuple-element(t), index=1
  ROOT r = f32[] add(a, b)
}
fb {
  t = (f32[], f32[]) parameter(0)
  a = f32[] get-tuple-element(t), index=0
  b = f32[] get-tuple-element(t), index=1
  ROOT r = f32[] multiply(a, b)
}
"""

CONTROL_CASES = {
    # a tuple-shaped kLoop fusion in a map's function (XLA's multioutput_fusion_test MapMOF:
    # "fusion ... has no element generator"), and a call in a reducer: both inlined
    "map_tuple_fusion": """
fused_computation {
  p = f32[] parameter(0)
  multiply = f32[] multiply(p, p)
  less-than = pred[] compare(p, multiply), direction=LT
  ROOT tuple = (pred[], f32[]) tuple(less-than, multiply)
}
map_computation {
  p0 = f32[] parameter(0)
  fusion = (pred[], f32[]) fusion(p0), kind=kLoop, calls=fused_computation
  gte0 = pred[] get-tuple-element(fusion), index=0
  gte1 = f32[] get-tuple-element(fusion), index=1
  const = f32[] constant(0)
  ROOT select = f32[] select(gte0, gte1, const)
}
ENTRY main {
  x = f32[5,7] parameter(0)
  e = f32[5,7] exponential(x)
  ROOT map = f32[5,7] map(e), dimensions={0,1}, to_apply=map_computation
}
""",
    "reducer_call": """
max_abs {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(f32[] abs(a), f32[] abs(b))
}
reducer {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] call(a, b), to_apply=max_abs
}
ENTRY main {
  x = f32[6,33] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[6] reduce(x, z), dimensions={1}, to_apply=reducer
}
""",
    # pred conditional on a tuple operand in a map's function, fused with producers/consumers
    "map_pred_conditional": _BRANCHES + """
body {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  z = f32[] constant(0)
  p = pred[] compare(x, z), direction=GT
  t = (f32[], f32[]) tuple(x, y)
  ROOT c = f32[] conditional(p, t, t), true_computation=tb, false_computation=fb
}
ENTRY main {
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  e = f32[4,8] exponential(y)
  m = f32[4,8] map(x, e), dimensions={0,1}, to_apply=body
  ROOT n = f32[4,8] negate(m)
}
""",
    # index conditional (out-of-range indices take the last branch) with a tuple result
    "map_index_conditional_tuple_result": """HloModule m
b0 {
  x = f32[] parameter(0)
  ROOT t = (f32[], s32[]) tuple(f32[] negate(x), s32[] constant(0))
}
b1 {
  x = f32[] parameter(0)
  ROOT t = (f32[], s32[]) tuple(f32[] exponential(x), s32[] constant(1))
}
b2 {
  x = f32[] parameter(0)
  h = f32[] constant(0.5)
  ROOT t = (f32[], s32[]) tuple(f32[] multiply(x, h), s32[] constant(2))
}
body {
  k = s32[] parameter(0)
  x = f32[] parameter(1)
  c = (f32[], s32[]) conditional(k, x, x, x), branch_computations={b0, b1, b2}
  v = f32[] get-tuple-element(c), index=0
  w = s32[] get-tuple-element(c), index=1
  ROOT r = f32[] add(v, f32[] convert(w))
}
ENTRY main {
  k = s32[6,5] parameter(0)
  x = f32[6,5] parameter(1)
  ROOT m = f32[6,5] map(k, x), dimensions={0,1}, to_apply=body
}
""",
    # a while with a data-dependent trip count in a map's function
    "map_while": """HloModule m
cond {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(0)
  ROOT lt = pred[] compare(i, n), direction=GT
}
step {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  h = f32[] constant(0.5)
  ROOT t = (s32[], f32[]) tuple(s32[] subtract(i, one), f32[] add(f32[] multiply(x, h), h))
}
body {
  k = s32[] parameter(0)
  x = f32[] parameter(1)
  w = (s32[], f32[]) while((s32[], f32[]) tuple(k, x)), condition=cond, body=step
  ROOT r = f32[] get-tuple-element(w), index=1
}
ENTRY main {
  k = s32[6,5] parameter(0)
  x = f32[6,5] parameter(1)
  ROOT m = f32[6,5] map(k, x), dimensions={0,1}, to_apply=body
}
""",
    # a reducer choosing by a conditional (the larger magnitude wins)
    "reduce_conditional_reducer": """HloModule m
keep_a {
  t = (f32[], f32[]) parameter(0)
  ROOT a = f32[] get-tuple-element(t), index=0
}
keep_b {
  t = (f32[], f32[]) parameter(0)
  ROOT b = f32[] get-tuple-element(t), index=1
}
bigger {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  p = pred[] compare(f32[] abs(a), f32[] abs(b)), direction=GE
  t = (f32[], f32[]) tuple(a, b)
  ROOT c = f32[] conditional(p, t, t), true_computation=keep_a, false_computation=keep_b
}
ENTRY main {
  x = f32[6,33] parameter(0)
  n = f32[6,33] negate(x)
  z = f32[] constant(0)
  ROOT r = f32[6] reduce(n, z), dimensions={1}, to_apply=bigger
}
""",
}


def _control_args(text: str):
    """Arguments that reach every branch: selectors spanning -2..4 (out of range both ways),
    trip counts 0..5, floats in [-2, 2]."""
    module = hlofuse.parse_hlo(text)
    rng = np.random.default_rng(1)
    out = []
    for p in module.entry.parameters:
        dims = tuple(p.shape.dims)
        if p.shape.dtype.name == "s32":
            out.append(rng.integers(-2, 5, dims).astype(np.int32))
        else:
            out.append(rng.uniform(-2, 2, dims).astype(np.float32))
    return out


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CONTROL_CASES))
def test_control_flow_in_scalar_computations(case, backend, fusion):
    text = CONTROL_CASES[case]
    if not text.startswith("HloModule"):
        text = "HloModule m\n" + text
    _check(text, backend, fusion, _control_args(text))


@pytest.mark.parametrize("backend", BACKENDS + ["interpreter"])
def test_a_fusion_and_a_call_in_scalar_computations_against_numpy(backend):
    """The two inlined-call cases above against numpy, not only the interpreter: the map gives
    x*x where x < x*x, else 0; the reduce the largest |x| of each row."""
    x = np.random.default_rng(4).uniform(-2, 2, (5, 7)).astype(np.float32)
    exe = hlofuse.compile(hlofuse.parse_hlo("HloModule m\n" + CONTROL_CASES["map_tuple_fusion"]), target=backend)
    e = np.exp(x)
    np.testing.assert_allclose(exe(x)[0], np.where(e < e * e, e * e, 0), rtol=1e-6)
    y = np.random.default_rng(5).uniform(-2, 2, (6, 33)).astype(np.float32)
    exe = hlofuse.compile(hlofuse.parse_hlo("HloModule m\n" + CONTROL_CASES["reducer_call"]), target=backend)
    np.testing.assert_array_equal(exe(y)[0], np.abs(y).max(axis=1))


def test_array_conditional_is_refused_by_name():
    """A conditional on arrays has no element-by-element form: a fusion holding one (written
    by hand; the fusion passes never make it) is refused naming the instruction."""
    text = _BRANCHES.replace("f32[]", "f32[4]").replace("f32[4] get", "f32[4] get") + """
fc {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  t = (f32[4], f32[4]) tuple(x, x)
  ROOT c = f32[4] conditional(p, t, t), true_computation=tb, false_computation=fb
}
ENTRY main {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  ROOT f = f32[4] fusion(p, x), kind=kLoop, calls=fc
}
"""
    module = hlofuse.parse_hlo("HloModule m\n" + text)
    with pytest.raises(UnsupportedError, match=r"conditional instruction c\b"):
        hlofuse.compile(module, target="cpu")(np.bool_(True), np.ones(4, np.float32))
