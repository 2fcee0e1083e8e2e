"""The verifier takes exactly the rng-bit-generator states and bit types XLA compiles.

XLA's parser reads any state, but XLA:CPU's compile (its RngBitGeneratorExpander, and the
StableHLO op it goes through) takes only a u64[2] state for rng_three_fry and a u64[2] or u64[3]
one for rng_philox and rng_default: s64 (for every algorithm and bit type), u32, f64 ... states
and other lengths or ranks are refused, and so are pred, s1/u1 and complex bits. Every
combination below is put to XLA itself (its parser, then its CPU compiler) and to hlofuse,
whose verdicts must agree: a refusal is a VerifierError naming the instruction and the rule."""
from __future__ import annotations

import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse
from hlofuse.hlo.errors import VerifierError

pytestmark = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA client is not available")

ALGORITHMS = ["rng_default", "rng_three_fry", "rng_philox"]
STATE_TYPES = ["u64", "s64", "u32", "f64"]
STATE_DIMS = [(2,), (3,), (4,), (1,), (), (1, 2), (2, 2), (6,)]
# s4/u2/f8 are sub-byte / narrow outputs; u64/s64/f64 the 64-bit ones (B's report named those).
SOME_BITS = ["u32", "u64", "s64", "s4", "u2", "f8e4m3fn"]
# f6e2m3fn / f6e3m2fn are left out: XLA:CPU knows no f6 type at all, in any op.
ALL_BITS = ["u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16", "bf16", "f32", "f64", "u4", "s4",
            "u2", "s2", "u1", "s1", "pred", "c64", "c128", "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4",
            "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f8e8m0fnu", "f4e2m1fn"]


def rbg_module(alg: str | None, state: str, bits: str) -> str:
    """rng-bit-generator(s) returning (state, bits); no `algorithm=` when alg is None."""
    algorithm = f", algorithm={alg}" if alg else ""
    return (f"HloModule r\nENTRY e {{\n  s = {state} parameter(0)\n"
            f"  ROOT r = ({state}, {bits}) rng-bit-generator(s){algorithm}\n}}\n")


def xla_verdict(text: str) -> str | None:
    """None when XLA parses and compiles `text` for its CPU; else the stage and message."""
    import jax
    from jax._src.lib import xla_client as xc

    try:
        module = xc.hlo.hlo_module_from_text(text)
    except Exception as e:  # noqa: BLE001 - XLA's statuses arrive as assorted exceptions
        return f"parser: {str(e).splitlines()[0]}"
    try:
        stablehlo = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        client = jax.devices("cpu")[0].client
        client.compile_and_load(stablehlo, client.devices()[:1], xc.CompileOptions())
    except Exception as e:  # noqa: BLE001
        return f"compile: {str(e).splitlines()[0][:200]}"
    return None


def hlofuse_verdict(text: str) -> str | None:
    """None when hlofuse verifies and compiles `text` (interpreter), else the VerifierError."""
    try:
        hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")
    except VerifierError as e:
        assert e.instruction == "r", str(e)
        assert "rng-bit-generator" in str(e), str(e)
        return str(e)
    return None


def _check(text: str) -> None:
    xla, ours = xla_verdict(text), hlofuse_verdict(text)
    assert (xla is None) == (ours is None), f"XLA: {xla or 'accepts'}\nhlofuse: {ours or 'accepts'}\n{text}"


def _shape(ty: str, dims: tuple) -> str:
    return f"{ty}[{','.join(map(str, dims))}]"


@pytest.mark.parametrize("bits", SOME_BITS)
@pytest.mark.parametrize("state_dims", STATE_DIMS, ids=str)
@pytest.mark.parametrize("state_ty", STATE_TYPES)
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_states_agree_with_xla(alg: str, state_ty: str, state_dims: tuple, bits: str) -> None:
    _check(rbg_module(alg, _shape(state_ty, state_dims), f"{bits}[4]"))


@pytest.mark.parametrize("bits", ALL_BITS)
@pytest.mark.parametrize("state", ["u64[2]", "u64[3]", "s64[2]"])
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_bit_types_agree_with_xla(alg: str, state: str, bits: str) -> None:
    _check(rbg_module(alg, state, f"{bits}[2,3]"))


@pytest.mark.parametrize("state", ["u64[2]", "u64[3]"])
def test_missing_algorithm_agrees_with_xla(state: str) -> None:
    """XLA's parser requires `algorithm=`."""
    _check(rbg_module(None, state, "u32[4]"))


@pytest.mark.parametrize("alg,state", [("rng_three_fry", "u64[3]"), ("rng_philox", "s64[2]"),
                                       ("rng_default", "u64[4]"), ("rng_philox", "u32[4]")])
def test_refusal_names_the_instruction_and_the_rule(alg: str, state: str) -> None:
    text = rbg_module(alg, state, "u32[4]")
    assert xla_verdict(text) is not None  # XLA refuses it too
    allowed = "u64[2]" if alg == "rng_three_fry" else "u64[2] or u64[3]"
    with pytest.raises(VerifierError) as info:
        hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    assert info.value.instruction == "r"
    assert f"rng-bit-generator: {alg} takes a {allowed} state" in str(info.value)
    assert str(info.value).splitlines()[0].endswith(f"the state is {state}")  # then the line, a caret


@pytest.mark.parametrize("alg,words", [("rng_default", 2), ("rng_default", 3), ("rng_three_fry", 2),
                                       ("rng_philox", 2), ("rng_philox", 3)])
def test_accepted_states_still_run_like_xla(alg: str, words: int) -> None:
    """What the rule accepts runs, and gives XLA's bits and state."""
    text = rbg_module(alg, f"u64[{words}]", "u32[5]")
    state = np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE, 7], np.uint64)[:words]
    want = run_on_xla(text, [state])
    for target in ("interpreter", "cpu"):
        got = hlofuse.compile(hlofuse.parse_hlo(text), target=target)(state)
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
