"""sort with comparators that are not strict weak orders (LE, GE, EQ, NE, a constant, LT over
NaN, an xor of two tests): every backend returns a permutation of the input (keys and payload
moved together), the compiled backends agree with the interpreter, and where XLA:CPU is
deterministic (is_stable=true, whose libstdc++ std::stable_sort is safe with any comparator,
and std::sort of at most 16 elements, an insertion sort) the interpreter returns XLA's
permutation. A larger unstable sort with such a comparator is undefined in XLA (it can crash),
so it is never run on XLA here."""
from __future__ import annotations

import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse
from hlofuse.runtime.interpreter.sort import comparator_sort_order

ROOTS = {
    "LE": "ROOT r = pred[] compare(a, b), direction=LE",
    "GE": "ROOT r = pred[] compare(a, b), direction=GE",
    "EQ": "ROOT r = pred[] compare(a, b), direction=EQ",
    "NE": "ROOT r = pred[] compare(a, b), direction=NE",
    "true": "ROOT r = pred[] constant(true)",
    "false": "ROOT r = pred[] constant(false)",
    "LT_nan": "ROOT r = pred[] compare(a, b), direction=LT",
    "GT_nan": "ROOT r = pred[] compare(b, a), direction=LT",
    "xor": "h = f32[] constant(1.5)\n x = pred[] compare(a, h), direction=GT\n"
           " y = pred[] compare(b, h), direction=LT\n ROOT r = pred[] xor(x, y)",
    "LT": "ROOT r = pred[] compare(a, b), direction=LT",  # a strict weak order, for contrast
}


def sort_module(root: str, dims: tuple, stable: bool) -> str:
    """sort((f32 keys, s32 payload)) along the last dimension with comparator `root`."""
    shape = ",".join(map(str, dims))
    last = len(dims) - 1
    return (f"HloModule s\nc {{ a = f32[] parameter(0)\n b = f32[] parameter(1)\n i = s32[] parameter(2)\n"
            f" j = s32[] parameter(3)\n {root} }}\n"
            f"ENTRY e {{ x = f32[{shape}] parameter(0)\n y = s32[{shape}] parameter(1)\n"
            f" ROOT s = (f32[{shape}], s32[{shape}]) sort(x, y), dimensions={{{last}}}, to_apply=c"
            f"{', is_stable=true' if stable else ''} }}")


def inputs(name: str, dims: tuple, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 4, dims).astype(np.float32)
    if name.endswith("_nan"):
        keys.reshape(-1)[::3] = np.nan
    payload = np.broadcast_to(np.arange(dims[-1], dtype=np.int32), dims).copy()
    return [keys, payload]


def assert_permutation(out: tuple, args: list[np.ndarray]) -> None:
    keys, payload = (np.asarray(o) for o in out)
    n = args[0].shape[-1]
    assert np.array_equal(np.sort(payload.reshape(-1, n), axis=1),
                          np.broadcast_to(np.arange(n), (payload.size // n, n)))
    np.testing.assert_array_equal(keys, np.take_along_axis(args[0], payload.astype(np.int64), axis=-1))


CASES = [(name, dims, stable) for name in ROOTS for dims in [(9,), (33,), (4, 17), (2, 130)]
         for stable in (False, True)]


@pytest.mark.parametrize("name,dims,stable", CASES)
def test_backends_return_the_interpreters_permutation(name: str, dims: tuple, stable: bool) -> None:
    module = hlofuse.parse_hlo(sort_module(ROOTS[name], dims, stable))
    args = inputs(name, dims, len(name) + dims[-1])
    want = hlofuse.compile(module, target="interpreter")(*args)
    assert_permutation(want, args)
    for target, fusion in (("cpu", True), ("cpu", False), ("gpu-emulated", True)):
        got = hlofuse.compile(module, target=target, fusion=fusion)(*args)
        assert_permutation(got, args)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA client is not available")


@needs_xla
@pytest.mark.parametrize("name,dims,stable",
                         [c for c in CASES if c[2] or c[1][-1] <= 16] +
                         [(name, (3, 16), False) for name in ROOTS])
def test_interpreter_matches_xla_where_xla_is_deterministic(name: str, dims: tuple, stable: bool) -> None:
    text = sort_module(ROOTS[name], dims, stable)
    args = inputs(name, dims, len(name) + dims[-1])
    want = run_on_xla(text, args)
    got = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("stable", [True, False])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 16, 17, 50, 257])
@pytest.mark.parametrize("less_name", ["lt", "le", "true", "false", "random"])
def test_comparator_sort_order_is_a_permutation(less_name: str, n: int, stable: bool) -> None:
    """The algorithm never loses or repeats an element, whatever the comparator answers; with
    a strict weak order it is the stable sort."""
    rng = np.random.default_rng(n)
    x = rng.integers(0, 5, n)
    table = rng.integers(0, 2, (n, n)).astype(bool)
    less = {"lt": lambda i, j: x[i] < x[j], "le": lambda i, j: x[i] <= x[j], "true": lambda i, j: True,
            "false": lambda i, j: False, "random": lambda i, j: bool(table[i, j])}[less_name]
    order = comparator_sort_order(n, less, stable)
    assert sorted(order) == list(range(n))
    if less_name == "lt":
        assert order == list(np.argsort(x, kind="stable"))
    if less_name == "false":
        assert order == list(range(n))


@pytest.mark.parametrize("total", [False, True])
def test_key_sort_over_signed_zeros_and_nans(total: bool) -> None:
    """A plain LT comparator over -0/+0/NaN keys (and TOTALORDER, which orders them) on every
    backend against the interpreter."""
    type_attr = ", type=TOTALORDER" if total else ""
    text = (f"HloModule s\nc {{ a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
            f" ROOT r = pred[] compare(a, b), direction=LT{type_attr} }}\n"
            "ENTRY e { x = f32[12] parameter(0)\n ROOT s = f32[12] sort(x), dimensions={0}, to_apply=c, "
            "is_stable=true }")
    x = np.array([0.0, -0.0, np.nan, 1, -np.nan, -1, 0.0, np.inf, -0.0, np.nan, 2, -np.inf], np.float32)
    module = hlofuse.parse_hlo(text)
    want = hlofuse.compile(module, target="interpreter")(x)[0]
    for target in ("cpu", "gpu-emulated"):
        got = hlofuse.compile(module, target=target)(x)[0]
        assert got.tobytes() == want.tobytes()
    if xla_available():
        assert run_on_xla(text, [x])[0].tobytes() == want.tobytes()
