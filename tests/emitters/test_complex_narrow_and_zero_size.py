"""Element generators at the edges found by fuzzing and review, each over its class, on cpu and
gpu-emulated (fused and unfused) against the interpreter, and the interpreter against XLA:CPU
(tests/xla_oracle.py) where XLA runs the module:

* bitcast-convert with complex types: a complex type to itself is a reinterpretation; complex
  <-> real and c64 <-> c128 are refused by the verifier, as XLA refuses them;
* maximum / minimum / clamp of complex values: XLA:CPU compares the real parts only and keeps
  the first operand unless the comparison is false; clamp is min(max(lo, x), hi);
* real / imag of every real float type (imag is +0 of the type, in its register form);
* reduce-window over f16 / bf16: a window loop in order, every step rounded to the type;
* zero-element results and operands of every fusible data-movement op.
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse
from hlofuse.hlo.errors import VerifierError

BACKENDS = [("cpu", True), ("cpu", False), ("gpu-emulated", True), ("gpu-emulated", False)]
needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA client is not available")


def interpret(text: str, args: list) -> list[np.ndarray]:
    return hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(*args)


def assert_same_bits(got: np.ndarray, want: np.ndarray, msg: str = "") -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, msg
    assert got.tobytes() == want.tobytes(), f"{msg}\n got {got!r}\nwant {want!r}"


def check_backends(text: str, args: list) -> list[np.ndarray]:
    """Every compiled backend bit for bit equal to the interpreter; the interpreter's outputs."""
    want = interpret(text, args)
    module = hlofuse.parse_hlo(text)
    for target, fusion in BACKENDS:
        got = hlofuse.compile(module, target=target, fusion=fusion)(*args)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_bits(g, w, f"{target} fusion={fusion}")
    return want


def check_xla(text: str, args: list, want: list[np.ndarray]) -> None:
    for g, w in zip(run_on_xla(text, args), want):
        assert_same_bits(np.asarray(g).astype(w.dtype), w, "XLA:CPU")


# ---- bitcast-convert with complex types -------------------------------------------------------
COMPLEX = {"c64": np.complex64, "c128": np.complex128}


def complex_values(ty: str, n: int = 8) -> np.ndarray:
    rng = np.random.default_rng(7)
    v = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(COMPLEX[ty])
    v[:4] = [complex(float("nan"), -0.0), complex(-0.0, float("inf")), 0, complex(1e-40, -3)]
    return v


@pytest.mark.parametrize("ty", ["c64", "c128"])
@pytest.mark.parametrize("op", ["bitcast-convert", "bitcast"])
def test_complex_bitcast_to_itself(ty: str, op: str) -> None:
    text = (f"HloModule m\nENTRY e {{\n  p = {ty}[8] parameter(0)\n  b = {ty}[8] {op}(p)\n"
            f"  ROOT n = {ty}[8] negate(b)\n}}\n")
    args = [complex_values(ty)]
    want = check_backends(text, args)
    assert_same_bits(want[0], -args[0])
    if xla_available():
        check_xla(text, args, want)


@pytest.mark.parametrize("src,dst", [("c64", "s64"), ("s64", "c64"), ("c64", "f64")])
def test_complex_bitcast_to_real_keeps_the_memory_bits(src: str, dst: str) -> None:
    """`bitcast` (not bitcast-convert) reinterprets the buffer: the compiled complex <-> 64-bit
    integer reinterpretation takes numpy's layout (real part in the low half)."""
    n = 8
    text = f"HloModule m\nENTRY e {{\n  p = {src}[{n}] parameter(0)\n  ROOT b = {dst}[{n}] bitcast(p)\n}}\n"
    x = complex_values(src, n) if src in COMPLEX else np.arange(n, dtype=np.int64) * 0x0123456789ABCDEF
    want = check_backends(text, [x])
    assert_same_bits(want[0], np.ascontiguousarray(x).view(np.dtype(want[0].dtype)).reshape(want[0].shape))


REFUSED_BITCASTS = [("c64[4]", "s64[4]"), ("c64[4]", "u64[4]"), ("c64[4]", "f64[4]"), ("s64[4]", "c64[4]"),
                    ("f64[4]", "c64[4]"), ("c64[4]", "f32[4,2]"), ("f32[4,2]", "c64[4]"), ("c128[4]", "f64[4,2]"),
                    ("c128[4]", "c64[4,2]"), ("c64[4,2]", "c128[4]")]


@pytest.mark.parametrize("src,dst", REFUSED_BITCASTS)
def test_complex_bitcast_convert_refused_like_xla(src: str, dst: str) -> None:
    text = f"HloModule m\nENTRY e {{\n  p = {src} parameter(0)\n  ROOT r = {dst} bitcast-convert(p)\n}}\n"
    with pytest.raises(VerifierError, match="bitcast"):
        hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")
    if xla_available() and src != "c64[4,2]":  # XLA:CPU aborts the process on c64 -> c128
        with pytest.raises(Exception):
            run_on_xla(text, [np.zeros([int(d) for d in src[src.index("[") + 1:-1].split(",")],
                                       {"c": np.complex64, "s": np.int64, "u": np.uint64}.get(src[0], np.float64)
                                       if src[:4] != "c128" else np.complex128)])


# ---- complex maximum / minimum / clamp --------------------------------------------------------
NAN = float("nan")
EDGE = [1 + 1j, 1 + 2j, 1 - 3j, 5j, 2 - 1j, complex(NAN, 7), complex(0, NAN), complex(-0.0, 1), complex(0.0, -1)]


@pytest.mark.parametrize("ty", ["c64", "c128"])
@pytest.mark.parametrize("op", ["maximum", "minimum", "clamp"])
def test_complex_extrema(ty: str, op: str) -> None:
    arity = 3 if op == "clamp" else 2
    combos = list(itertools.product(EDGE, repeat=arity))
    n = len(combos)
    args = [np.array([c[k] for c in combos], COMPLEX[ty]) for k in range(arity)]
    params = "\n".join(f"  p{k} = {ty}[{n}] parameter({k})" for k in range(arity))
    operands = ", ".join(f"p{k}" for k in range(arity))
    text = f"HloModule m\nENTRY e {{\n{params}\n  ROOT r = {ty}[{n}] {op}({operands})\n}}\n"
    want = check_backends(text, args)

    def mx(a, b):
        return a if a.real >= b.real else b

    def mn(a, b):
        return a if a.real <= b.real else b

    fn = {"maximum": mx, "minimum": mn, "clamp": lambda lo, x, hi: mn(mx(lo, x), hi)}[op]
    numpy_model = np.array([fn(*(COMPLEX[ty](v) for v in c)) for c in combos], COMPLEX[ty])
    assert_same_bits(want[0], numpy_model)
    if xla_available():
        check_xla(text, args, want)


@needs_xla
@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("n", [16, 100])
def test_complex_extremum_reduce_interpreter_matches_xla(op: str, n: int) -> None:
    """A complex max/min reduce depends on the order (ties keep the accumulator): the
    interpreter takes XLA:CPU's (tree windows of 32, each folded in order)."""
    text = (f"HloModule m\nr {{ a = c64[] parameter(0)  b = c64[] parameter(1)  ROOT c = c64[] {op}(a, b) }}\n"
            f"ENTRY e {{ p = c64[6,{n}] parameter(0)  z = c64[] constant((-100, 0))\n"
            "  ROOT r = c64[6] reduce(p, z), dimensions={1}, to_apply=r }")
    rng = np.random.default_rng(n)
    x = (rng.integers(-2, 3, (6, n)) + 1j * rng.integers(-9, 9, (6, n))).astype(np.complex64)
    for i in range(6):
        x[i, rng.integers(0, n, 2)] = complex(NAN, i)
    want = interpret(text, [x])
    check_xla(text, [x], want)
    if n <= 32:  # one window: the compiled in-order loop is XLA's order
        check_backends(text, [x])


# ---- real / imag of real floats ---------------------------------------------------------------
REAL_FLOATS = ["bf16", "f16", "f32", "f64", "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz",
               "f8e4m3b11fnuz", "f8e8m0fnu", "f4e2m1fn", "f6e2m3fn", "f6e3m2fn"]


def _numpy_type(ty: str):
    from hlofuse.hlo.dtypes import element_type

    return element_type(ty).numpy


@pytest.mark.parametrize("ty", REAL_FLOATS)
@pytest.mark.parametrize("op", ["real", "imag"])
def test_real_imag_of_real_float(ty: str, op: str) -> None:
    dt = _numpy_type(ty)
    x = np.array([1.5, -2, NAN, np.inf, -0.0, 0.25, 3, -1]).astype(dt)
    text = (f"HloModule m\nENTRY e {{\n  p = {ty}[8] parameter(0)\n  r = {ty}[8] {op}(p)\n"
            f"  q = {ty}[8] {op}(p)\n  ROOT t = ({ty}[8], {ty}[8]) tuple(r, q)\n}}\n")
    want = check_backends(text, [x])
    expected = x if op == "real" else np.zeros(8, np.float32).astype(dt)
    assert_same_bits(want[0], expected)
    if xla_available() and ty not in ("f6e2m3fn", "f6e3m2fn"):
        check_xla(text, [x], want)


# ---- reduce-window over narrow floats ---------------------------------------------------------
NARROW = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
INIT = {"add": "0", "multiply": "1", "maximum": "-inf"}
# (input length, window, stride, padding)
WINDOWS = [(256, 256, 256, "0_0"), (64, 64, 64, "0_0"), (40, 8, 4, "0_0"), (100, 33, 17, "0_0"), (50, 7, 3, "2_1"),
           (30, 30, 1, "0_0")]


def reduce_window_module(ty: str, op: str, n: int, size: int, stride: int, pad: str) -> str:
    lo, hi = (int(p) for p in pad.split("_"))
    out = (n + lo + hi - size) // stride + 1
    return (f"HloModule m\nr {{ a = {ty}[] parameter(0)  b = {ty}[] parameter(1)  ROOT c = {ty}[] {op}(a, b) }}\n"
            f"ENTRY e {{ p = {ty}[3,{n}] parameter(0)  i = {ty}[] constant({INIT[op]})\n"
            f"  ROOT r = {ty}[3,{out}] reduce-window(p, i), window={{size=1x{size} stride=1x{stride} pad=0_0x{pad}}}, "
            "to_apply=r }")


def reduce_window_input(ty: str, op: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = 1 + 0.05 * rng.standard_normal((3, n)) if op == "multiply" else rng.standard_normal((3, n))
    return x.astype(NARROW[ty])


def in_order(x: np.ndarray, op: str, size: int, stride: int, pad: str) -> np.ndarray:
    """numpy model: each window folded in order from the init value, rounded every step."""
    lo, hi = (int(p) for p in pad.split("_"))
    dt = x.dtype
    fn = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum}[op]
    n = x.shape[1]
    out = np.empty((3, (n + lo + hi - size) // stride + 1), dt)
    for i in range(3):
        for o in range(out.shape[1]):
            acc = np.float32(float(INIT[op]))
            for k in range(size):
                pos = o * stride + k - lo
                if 0 <= pos < n:
                    acc = np.float32(dt.type(fn(acc, np.float32(x[i, pos]))))
            out[i, o] = acc
    return out


@pytest.mark.parametrize("ty", list(NARROW))
@pytest.mark.parametrize("op", ["add", "multiply", "maximum"])
@pytest.mark.parametrize("n,size,stride,pad", WINDOWS[:-1])
def test_narrow_reduce_window_in_order(ty: str, op: str, n: int, size: int, stride: int, pad: str) -> None:
    text = reduce_window_module(ty, op, n, size, stride, pad)
    x = reduce_window_input(ty, op, n)
    want = check_backends(text, [x])
    assert_same_bits(want[0], in_order(x, op, size, stride, pad))
    if not xla_available():
        return
    got = np.asarray(run_on_xla(text, [x])[0])
    if ty == "f16" and op != "maximum" and size >= 128:
        # XLA:CPU lets LLVM vectorize long f16 window loops (partial sums per vector lane, an
        # order set by the host's vector width); only the value is comparable.
        np.testing.assert_allclose(got.astype(np.float32), want[0].astype(np.float32), rtol=2e-2)
    else:
        assert_same_bits(got, want[0], "XLA:CPU")


@needs_xla
@pytest.mark.parametrize("ty", list(NARROW))
@pytest.mark.parametrize("op", ["add", "multiply"])
@pytest.mark.parametrize("n", [30, 100, 300])
def test_narrow_reduce_window_that_xla_makes_a_reduce(ty: str, op: str, n: int) -> None:
    """No stride, padding or dilation and whole-dimension windows: XLA's simplifier turns the
    reduce-window into a reduce, which takes XLA's narrow-float reduce order."""
    text = reduce_window_module(ty, op, n, n, 1, "0_0")
    x = reduce_window_input(ty, op, n)
    want = interpret(text, [x])
    check_xla(text, [x], want)


# ---- zero-element arrays ----------------------------------------------------------------------
ADD = "add { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y) }\n"
F0 = np.zeros(0, np.float32)
ZERO_SIZE = {
    "concatenate_empty": ("a = f32[0] parameter(0)\n ROOT c = f32[0] concatenate(a, a), dimensions={0}", [F0]),
    "concatenate_empty_negate": ("a = f32[0] parameter(0)\n c = f32[0] concatenate(a, a), dimensions={0}\n"
                                 " ROOT n = f32[0] negate(c)", [F0]),
    "concatenate_empty_c64": ("a = c64[0] parameter(0)\n ROOT c = c64[0] concatenate(a, a), dimensions={0}",
                              [np.zeros(0, np.complex64)]),
    "concatenate_empty_bf16": ("a = bf16[0,1] parameter(0)\n c = bf16[0,2] concatenate(a, a), dimensions={1}\n"
                               " ROOT n = bf16[0,2] negate(c)", [np.zeros((0, 1), ml_dtypes.bfloat16)]),
    "concatenate_empty_and_full": ("a = f32[0,3] parameter(0)\n b = f32[2,3] parameter(1)\n"
                                   " c = f32[2,3] concatenate(a, b, a), dimensions={0}\n ROOT n = f32[2,3] negate(c)",
                                   [np.zeros((0, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)]),
    "concatenate_full_and_empty_minor": ("a = f32[2,0] parameter(0)\n b = f32[2,3] parameter(1)\n"
                                         " c = f32[2,3] concatenate(b, a), dimensions={1}\n ROOT n = f32[2,3] negate(c)",
                                         [np.zeros((2, 0), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)]),
    "slice_to_empty": ("a = f32[4] parameter(0)\n s = f32[0] slice(a), slice={[2:2]}\n ROOT n = f32[0] negate(s)",
                       [np.ones(4, np.float32)]),
    "pad_of_empty": ("a = f32[0] parameter(0)\n z = f32[] constant(7)\n p = f32[3] pad(a, z), padding=1_2\n"
                     " ROOT n = f32[3] negate(p)", [F0]),
    "pad_of_empty_rows": ("a = f32[0,2] parameter(0)\n z = f32[] constant(7)\n ROOT p = f32[2,2] pad(a, z), "
                          "padding=1_1x0_0", [np.zeros((0, 2), np.float32)]),
    "broadcast_to_empty": ("a = f32[3] parameter(0)\n b = f32[0,3] broadcast(a), dimensions={1}\n"
                           " ROOT n = f32[0,3] negate(b)", [np.ones(3, np.float32)]),
    "broadcast_of_empty": ("a = f32[0] parameter(0)\n b = f32[2,0] broadcast(a), dimensions={1}\n"
                           " ROOT n = f32[2,0] negate(b)", [F0]),
    "reduce_over_empty_dim": ("a = f32[3,0] parameter(0)\n z = f32[] constant(5)\n"
                              " ROOT r = f32[3] reduce(a, z), dimensions={1}, to_apply=add",
                              [np.zeros((3, 0), np.float32)]),
    "reduce_over_empty_dim_fused": ("a = f32[3,0] parameter(0)\n n = f32[3,0] negate(a)\n z = f32[] constant(5)\n"
                                    " r = f32[3] reduce(n, z), dimensions={1}, to_apply=add\n"
                                    " ROOT e = f32[3] exponential(r)", [np.zeros((3, 0), np.float32)]),
    "reduce_all_of_empty": ("a = f32[0] parameter(0)\n z = f32[] constant(5)\n"
                            " ROOT r = f32[] reduce(a, z), dimensions={0}, to_apply=add", [F0]),
    "reduce_to_empty": ("a = f32[0,4] parameter(0)\n z = f32[] constant(5)\n"
                        " ROOT r = f32[0] reduce(a, z), dimensions={1}, to_apply=add", [np.zeros((0, 4), np.float32)]),
    "iota_empty": ("i = s32[0] iota(), iota_dimension=0\n ROOT n = s32[0] negate(i)", []),
    "iota_empty_root": ("ROOT i = f32[0,2] iota(), iota_dimension=1", []),
    "constant_empty": ("c = f32[0] constant({})\n ROOT n = f32[0] negate(c)", []),
    "gather_no_indices": ("o = f32[5,3] parameter(0)\n i = s32[0,1] parameter(1)\n"
                          " g = f32[0,3] gather(o, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
                          "index_vector_dim=1, slice_sizes={1,3}\n ROOT n = f32[0,3] negate(g)",
                          [np.ones((5, 3), np.float32), np.zeros((0, 1), np.int32)]),
    "gather_empty_slice": ("o = f32[5,3] parameter(0)\n i = s32[2,1] parameter(1)\n"
                           " g = f32[2,0,3] gather(o, i), offset_dims={1,2}, collapsed_slice_dims={}, "
                           "start_index_map={0}, index_vector_dim=1, slice_sizes={0,3}\n ROOT n = f32[2,0,3] negate(g)",
                           [np.ones((5, 3), np.float32), np.zeros((2, 1), np.int32)]),
    "dynamic_slice_empty": ("o = f32[5] parameter(0)\n i = s32[] parameter(1)\n"
                            " d = f32[0] dynamic-slice(o, i), dynamic_slice_sizes={0}\n ROOT n = f32[0] negate(d)",
                            [np.ones(5, np.float32), np.int32(2)]),
    "dynamic_slice_of_empty": ("o = f32[0,3] parameter(0)\n i = s32[] parameter(1)\n j = s32[] parameter(2)\n"
                               " ROOT d = f32[0,2] dynamic-slice(o, i, j), dynamic_slice_sizes={0,2}",
                               [np.ones((0, 3), np.float32), np.int32(2), np.int32(1)]),
    "reverse_empty": ("a = f32[0,2] parameter(0)\n r = f32[0,2] reverse(a), dimensions={0}\n ROOT n = f32[0,2] negate(r)",
                      [np.zeros((0, 2), np.float32)]),
    "transpose_reshape_empty": ("a = f32[0,2] parameter(0)\n t = f32[2,0] transpose(a), dimensions={1,0}\n"
                                " r = f32[2,0,1] reshape(t)\n ROOT n = f32[2,0,1] negate(r)",
                                [np.zeros((0, 2), np.float32)]),
    "select_empty": ("p = pred[0] parameter(0)\n a = f32[0] parameter(1)\n ROOT s = f32[0] select(p, a, a)",
                     [np.zeros(0, bool), F0]),
    "map_empty": ("a = f32[0] parameter(0)\n ROOT m = f32[0] map(a, a), dimensions={0}, to_apply=add", [F0]),
    "tuple_with_empty": ("a = f32[0] parameter(0)\n b = f32[2] parameter(1)\n n = f32[0] negate(a)\n"
                         " m = f32[2] negate(b)\n ROOT t = (f32[0], f32[2]) tuple(n, m)", [F0, np.ones(2, np.float32)]),
}


@pytest.mark.parametrize("name", list(ZERO_SIZE))
def test_zero_element_arrays(name: str) -> None:
    body, args = ZERO_SIZE[name]
    text = f"HloModule m\n{ADD}ENTRY e {{\n {body}\n}}\n"
    want = check_backends(text, args)
    if xla_available():
        check_xla(text, args, want)
