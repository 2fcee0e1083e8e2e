"""rng-bit-generator results keep their declared shapes and element types on every backend,
and their bits are XLA's: each algorithm (and state length) over every element type XLA
accepts, the compiled backends against the interpreter bit for bit, and the interpreter
against XLA:CPU itself (tests/xla_oracle.py) where jaxlib is available."""
from __future__ import annotations

import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse

# (algorithm, state words): three_fry reads a u64[2] state, Philox a u64[2] or u64[3] one.
ALGORITHMS = [("rng_default", 2), ("rng_default", 3), ("rng_three_fry", 2), ("rng_philox", 2), ("rng_philox", 3)]
TYPES = ["u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16", "bf16", "f32", "f64", "u4", "s4", "u2", "s2"]
DIMS = [(), (6,), (5,), (2, 3), (3, 0)]
STATE = np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE, 7], np.uint64)  # the counter carries


def rng_module(alg: str, words: int, ty: str, dims: tuple, state_ty: str = "u64") -> str:
    """A module returning (new state, bits) of one rng-bit-generator."""
    shape = f"{ty}[{','.join(map(str, dims))}]"
    return (f"HloModule r\nENTRY e {{\n  s = {state_ty}[{words}] parameter(0)\n"
            f"  ROOT r = ({state_ty}[{words}], {shape}) rng-bit-generator(s), algorithm={alg}\n}}\n")


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and got.dtype.itemsize == want.dtype.itemsize and got.tobytes() == want.tobytes()


def _check_shapes(module, outs) -> None:
    state_shape, bits_shape = module.entry.root.shape.elements
    assert len(outs) == 2
    for out, shape in zip(outs, (state_shape, bits_shape)):
        assert isinstance(out, np.ndarray)
        assert (out.dtype, out.shape) == (shape.dtype.numpy, tuple(shape.dims))


@pytest.mark.parametrize("dims", DIMS, ids=str)
@pytest.mark.parametrize("ty", TYPES)
@pytest.mark.parametrize("alg,words", ALGORITHMS)
def test_cpu_matches_interpreter(alg: str, words: int, ty: str, dims: tuple) -> None:
    module = hlofuse.parse_hlo(rng_module(alg, words, ty, dims))
    state = STATE[:words]
    want = hlofuse.compile(module, target="interpreter")(state)
    _check_shapes(module, want)
    got = hlofuse.compile(module, target="cpu")(state)
    _check_shapes(module, got)
    for g, w in zip(got, want):
        assert _same_bits(g, w)


@pytest.mark.parametrize("target,fusion", [("cpu", False), ("gpu-emulated", True)])
@pytest.mark.parametrize("ty,dims", [("u64", (6,)), ("u32", (5,)), ("u8", (2, 3)), ("s4", (7,)), ("bf16", ())])
@pytest.mark.parametrize("alg,words", ALGORITHMS)
def test_other_backends_match_interpreter(alg: str, words: int, ty: str, dims: tuple, target: str,
                                          fusion: bool) -> None:
    """The bits also feed a fused consumer (an add of the bits to themselves)."""
    shape = f"{ty}[{','.join(map(str, dims))}]"
    text = rng_module(alg, words, ty, dims).replace(
        "  ROOT r", "  r").replace("\n}\n", f"\n  b = {shape} get-tuple-element(r), index=1\n"
                                           f"  s2 = u64[{words}] get-tuple-element(r), index=0\n"
                                           f"  ROOT t = ({shape}, u64[{words}], {shape}) tuple(b, s2, b)\n}}\n")
    module = hlofuse.parse_hlo(text)
    state = STATE[:words]
    want = hlofuse.compile(module, target="interpreter")(state)
    got = hlofuse.compile(module, target=target, fusion=fusion)(state)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert _same_bits(g, w)


# A state longer than the algorithm reads (u64[4], u64[6]) or of another type (s64[2]) is
# refused by the verifier, as XLA refuses it: tests/hlo/test_rng_bit_generator_states.py.


@pytest.mark.parametrize("ty", ["u4", "s4", "u2", "s2"])
def test_sub_byte_values_are_the_low_bits(ty: str) -> None:
    """Sub-byte results hold the low bits of a 32-bit word as a value (numpy's int4 stores one
    per byte, in its low bits: the byte's other bits must be clear, not the rest of the word's
    low byte)."""
    bits = int(ty[1:])
    module = hlofuse.parse_hlo(rng_module("rng_philox", 2, ty, (64,)))
    wide = hlofuse.parse_hlo(rng_module("rng_philox", 2, "u32", (64,)))
    state = STATE[:2]
    words = hlofuse.compile(wide, target="interpreter")(state)[1]
    low = (words & ((1 << bits) - 1)).astype(np.int64)
    if ty.startswith("s"):
        low = np.where(low >= 1 << (bits - 1), low - (1 << bits), low)
    for target in ("interpreter", "cpu"):
        got = hlofuse.compile(module, target=target)(state)[1]
        np.testing.assert_array_equal(got.astype(np.int64), low)
        raw = got.view(np.uint8).astype(np.int64)
        assert np.all(raw == (low & ((1 << bits) - 1))), "each byte holds just the value's bits"


needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA client is not available")


@needs_xla
@pytest.mark.parametrize("dims", [(), (6,), (5,), (2, 3)], ids=str)
@pytest.mark.parametrize("ty", TYPES)
@pytest.mark.parametrize("alg,words", ALGORITHMS)
def test_interpreter_matches_xla(alg: str, words: int, ty: str, dims: tuple) -> None:
    text = rng_module(alg, words, ty, dims)
    state = STATE[:words]
    want = run_on_xla(text, [state])
    got = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(state)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        # XLA's client hands signed and float bits back as unsigned: compare shapes and bytes.
        assert _same_bits(g, w), (g, w)
