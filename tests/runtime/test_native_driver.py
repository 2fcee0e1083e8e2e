"""The native CPU driver (codegen/native_plan.py, codegen/driver.py, runtime/native_driver.py):
a run is one call into compiled code; while loops update their state in place; every value's
memory is right however the schedule aliases it. Every result is checked against the interpreter."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.runtime.interpreter import evaluate

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

# A scan: the body writes row i of a stacked output with dynamic-update-slice (in place) and
# carries h; the loop runs `n` times (a parameter, so the same program runs any count).
SCAN = """
HloModule scan
body {
  p = (s32[], f32[64], f32[256,64], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[64] get-tuple-element(p), index=1
  ys = f32[256,64] get-tuple-element(p), index=2
  n = s32[] get-tuple-element(p), index=3
  t = f32[64] tanh(h)
  c = f32[64] constant({...})
  h2 = f32[64] add(t, c)
  row = f32[1,64] reshape(h2)
  zero = s32[] constant(0)
  ys2 = f32[256,64] dynamic-update-slice(ys, row, i, zero)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[64], f32[256,64], s32[]) tuple(i2, h2, ys2, n)
}
cond {
  p = (s32[], f32[64], f32[256,64], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=3
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  h0 = f32[64] parameter(0)
  n = s32[] parameter(1)
  zero = s32[] constant(0)
  z = f32[] constant(0)
  ys0 = f32[256,64] broadcast(z), dimensions={}
  init = (s32[], f32[64], f32[256,64], s32[]) tuple(zero, h0, ys0, n)
  w = (s32[], f32[64], f32[256,64], s32[]) while(init), condition=cond, body=body
  h = f32[64] get-tuple-element(w), index=1
  ys = f32[256,64] get-tuple-element(w), index=2
  ROOT out = (f32[64], f32[256,64]) tuple(h, ys)
}
""".replace("constant({...})", "constant({" + ", ".join(f"{k / 64:.4f}" for k in range(64)) + "})")


def _compile(text: str):
    module = hlofuse.parse_hlo(text)
    return module, hlofuse.compile(module, target="cpu")


def _check(text: str, *args) -> list:
    module, exe = _compile(text)
    got = list(exe(*args))
    want = evaluate(module, list(args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
    # The step interpreter runs the same kernels from Python: a second path, the same answer.
    for g, w in zip(exe.program.run_interpreted(list(args)), got):
        np.testing.assert_array_equal(g, w)
    return got


def _python_calls(fn) -> int:
    """Python function calls made while `fn()` runs (sys.setprofile sees every one)."""
    count = 0

    def hook(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def test_scan_matches_the_interpreter():
    h0 = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    for n in (0, 1, 5, 256):
        _check(SCAN, h0, np.int32(n))


def test_no_python_runs_between_kernels():
    """The Python work of a run does not grow with the kernels it runs: 1 or 200 iterations of a
    loop of kernels cost the same Python calls (argument and result handling only)."""
    module, exe = _compile(SCAN)
    program = exe.program
    assert not [ns for ns in program.code.native.steps if ns.kind == "callback"]
    h0 = np.ones(64, np.float32)
    program.run([h0, np.int32(1)])  # first run allocates the buffers
    one = _python_calls(lambda: program.run([h0, np.int32(1)]))
    many = _python_calls(lambda: program.run([h0, np.int32(200)]))
    assert one == many, (one, many)
    assert many < 60  # checking arguments, the output arrays, the call


def test_the_loop_state_is_updated_in_place():
    """The stacked output of the scan is one buffer: the while's state is the entry's result
    itself, and the body's dynamic-update-slice writes into the state with no copy."""
    _, exe = _compile(SCAN)
    native = exe.program.code.native
    body = next(p for p in native.plans if p.alias_results)
    dus = [ns for ns in body.steps if ns.kind == "kernel" and ns.step.inplace]
    assert dus, "the body's dynamic-update-slice is an in-place kernel"
    for ns in dus:
        assert all(c.src == c.dst for c in ns.pre_copies) or not ns.pre_copies
        assert ns.outs[0].kind == "result"  # written straight into the loop state
    loop = next(ns for ns in native.entry.steps if ns.kind == "while")
    assert loop.outs[2].kind == "result"  # the entry's result buffer is the loop state


SWAP = """
HloModule swap
body {
  p = (s32[], f32[8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[8] get-tuple-element(p), index=1
  b = f32[8] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  two = f32[] constant(2)
  t = f32[8] broadcast(two), dimensions={}
  a2 = f32[8] multiply(b, t)
  ROOT r = (s32[], f32[8], f32[8]) tuple(i2, a2, a)
}
cond {
  p = (s32[], f32[8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] constant(5)
  ROOT lt = pred[] compare(i, k), direction=LT
}
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[8], f32[8]) tuple(zero, a, b)
  w = (s32[], f32[8], f32[8]) while(init), condition=cond, body=body
  x = f32[8] get-tuple-element(w), index=1
  y = f32[8] get-tuple-element(w), index=2
  ROOT out = (f32[8], f32[8], f32[8], f32[8]) tuple(x, y, x, a)
}
"""


def test_state_leaves_that_swap_and_results_that_repeat():
    """The body moves leaf 1 to leaf 2 while computing leaf 1 from leaf 2 (each must read the
    old state); the entry returns one value twice and its own parameter."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    got = _check(SWAP, a, b)
    assert not np.shares_memory(got[0], got[2]) and not np.shares_memory(got[3], a)


CONDITIONAL = """
HloModule cond
b0 {
  p = f32[16] parameter(0)
  ROOT e = f32[16] exponential(p)
}
b1 {
  p = f32[16] parameter(0)
  ROOT n = f32[16] negate(p)
}
b2 {
  p = f32[16] parameter(0)
  ROOT s = f32[16] sqrt(p)
}
ENTRY e {
  k = s32[] parameter(0)
  x = f32[16] parameter(1)
  ax = f32[16] abs(x)
  ROOT c = f32[16] conditional(k, x, x, ax), branch_computations={b0, b1, b2}
}
"""


@pytest.mark.parametrize("k", [-3, 0, 1, 2, 7])
def test_conditional_branches_including_out_of_range(k):
    x = np.random.default_rng(2).standard_normal(16).astype(np.float32)
    _check(CONDITIONAL, np.int32(k), x)


def test_nested_loops_and_a_call():
    text = """
HloModule nested
inner_body {
  p = (s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  v = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j2 = s32[] add(j, one)
  v2 = f32[4] add(v, v)
  ROOT r = (s32[], f32[4]) tuple(j2, v2)
}
inner_cond {
  p = (s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(j, three), direction=LT
}
scale {
  x = f32[4] parameter(0)
  h = f32[] constant(0.5)
  hb = f32[4] broadcast(h), dimensions={}
  ROOT m = f32[4] multiply(x, hb)
}
outer_body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[4] get-tuple-element(p), index=1
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, v)
  w = (s32[], f32[4]) while(init), condition=inner_cond, body=inner_body
  v2 = f32[4] get-tuple-element(w), index=1
  v3 = f32[4] call(v2), to_apply=scale
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[4]) tuple(i2, v3)
}
outer_cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  four = s32[] constant(4)
  ROOT lt = pred[] compare(i, four), direction=LT
}
ENTRY e {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=outer_cond, body=outer_body
  ROOT v = f32[4] get-tuple-element(w), index=1
}
"""
    got = _check(text, np.array([1, -2, 3, 0.25], np.float32))
    np.testing.assert_allclose(got[0], np.array([1, -2, 3, 0.25], np.float32) * 4 ** 4)  # (2^3 / 2)^4


def test_library_callback_and_its_errors():
    """An op without compiled code (an fft here) runs through the callback; an op nothing can run
    raises its error from run(), and the next run works again."""
    fft = """
HloModule s
ENTRY e {
  x = f32[32] parameter(0)
  e = f32[32] exponential(x)
  c = c64[32] convert(e)
  ROOT s = c64[32] fft(c), fft_type=FFT, fft_length={32}
}
"""
    x = np.random.default_rng(3).standard_normal(32).astype(np.float32)
    module, exe = _compile(fft)
    assert [ns for ns in exe.program.code.native.steps if ns.kind == "callback"]
    _check(fft, x)
    text = """
HloModule cc
ENTRY e {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT c = f32[4] custom-call(n), custom_call_target="no_such_target"
}
"""
    module = hlofuse.parse_hlo(text)
    exe = hlofuse.compile(module, target="cpu")
    with pytest.raises(UnsupportedError):
        exe(np.ones(4, np.float32))
    with pytest.raises(UnsupportedError):
        exe(np.ones(4, np.float32))


def test_results_are_fresh_and_parameters_untouched():
    text = """
HloModule fresh
ENTRY e {
  x = f32[1024] parameter(0)
  c = f32[] constant(3)
  k = f32[1024] broadcast(c), dimensions={}
  y = f32[1024] add(x, k)
  ROOT t = (f32[1024], f32[1024], f32[1024], f32[]) tuple(y, x, k, c)
}
"""
    x = np.arange(1024, dtype=np.float32)
    keep = x.copy()
    _, exe = _compile(text)
    first = exe(x)
    second = exe(x)
    np.testing.assert_array_equal(x, keep)
    for a, b in zip(first, second):
        assert not np.shares_memory(a, b)
    assert not np.shares_memory(first[1], x)
    first[0][:] = -1
    np.testing.assert_array_equal(exe(x)[0], keep + 3)


def test_zero_sized_and_scalar_values():
    text = """
HloModule z
ENTRY e {
  x = f32[0,5] parameter(0)
  s = f32[] parameter(1)
  n = f32[0,5] negate(x)
  t = f32[] tanh(s)
  ROOT r = (f32[0,5], f32[]) tuple(n, t)
}
"""
    got = _check(text, np.zeros((0, 5), np.float32), np.float32(0.5))
    assert got[1].shape == ()


def test_profile_counts_every_step():
    _, exe = _compile(SCAN)
    h0 = np.ones(64, np.float32)
    steps, seconds, calls, wall = exe.program.profile([h0, np.int32(7)], runs=3)
    loop = next(ns for ns in steps if ns.kind == "while")
    assert calls[loop.id] == 3
    body_kernels = [ns for ns in steps if ns.kind == "kernel" and ns in next(p for p in exe.program.code.native.plans
                                                                              if p.alias_results).steps]
    assert body_kernels and all(calls[ns.id] == 21 for ns in body_kernels)
    assert (seconds >= 0).all() and wall > 0


def test_two_updates_of_one_buffer_copy_it_once():
    """x with two channel slices replaced (the image-normalisation pattern): the parameter is
    copied once into the result, and the second in-place update works on the result directly."""
    text = """
HloModule norm
ENTRY e {
  x = f32[4,8,3] parameter(0)
  s0 = f32[4,8,1] slice(x), slice={[0:4], [0:8], [0:1]}
  c0 = f32[] constant(0.5)
  b0 = f32[4,8,1] broadcast(c0), dimensions={}
  u0 = f32[4,8,1] subtract(s0, b0)
  zero = s32[] constant(0)
  one = s32[] constant(1)
  d0 = f32[4,8,3] dynamic-update-slice(x, u0, zero, zero, zero)
  s1 = f32[4,8,1] slice(d0), slice={[0:4], [0:8], [1:2]}
  u1 = f32[4,8,1] multiply(s1, b0)
  ROOT d1 = f32[4,8,3] dynamic-update-slice(d0, u1, zero, zero, one)
}
"""
    x = np.random.default_rng(5).standard_normal((4, 8, 3)).astype(np.float32)
    _check(text, x)
    _, exe = _compile(text)
    copies = [c for ns in exe.program.code.native.entry.steps for c in ns.pre_copies]
    copies += exe.program.code.native.entry.final
    assert [(c.src.kind, c.dst.kind) for c in copies] == [("param", "result")], copies


TINY = """HloModule tiny
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  ROOT a = f32[4] add(x, y)
}
"""


def test_a_call_of_a_tiny_executable_stays_within_its_python_budget():
    """Per-call overhead (issue 12 item 5: at most jax.jit's) is Python work: a call of a tiny
    executable makes at most 12 Python-level calls (the executable, the driver's argument check
    and call, three data addresses, the output pool, numpy's ctypes address of the fresh output).
    np.prod on the output's dimensions once crept into the pool: four more calls and 2.4 us
    (4.1 -> 6.5 us per call)."""
    from hlofuse.compiler import compile as hl_compile

    exe = hl_compile(hlofuse.parse_hlo(TINY), target="cpu")
    x = np.ones(4, np.float32)
    exe(x, x)
    frames = []

    def hook(frame, event, arg):
        if event == "call":
            frames.append(f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_code.co_name}")

    sys.setprofile(hook)
    try:
        out = exe(x, x)
    finally:
        sys.setprofile(None)
    np.testing.assert_array_equal(out[0], x + x)
    assert len(frames) <= 12, frames
    assert not [f for f in frames if "fromnumeric" in f], frames
