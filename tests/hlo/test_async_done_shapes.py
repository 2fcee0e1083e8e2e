"""The -done half of an asynchronous pair: its shape is checked against its -start operand, as
XLA's verifier does (a fuzzed module with a mismatched declared shape reached the interpreter,
which raised an internal error instead of the module being refused)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import VerifierError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify

VALID = {
    "all-reduce-done": ("st = f32[16] all-reduce-start(x), to_apply=add", "f32[16]"),
    "all-gather-done": ("st = (f32[16], f32[16]) all-gather-start(x), dimensions={0}", "f32[16]"),
    "collective-permute-done": ("st = (f32[16], f32[16], u32[], u32[]) collective-permute-start(x), "
                                "source_target_pairs={{0,0}}", "f32[16]"),
    "copy-done": ("st = (f32[16], f32[16], u32[]) copy-start(x)", "f32[16]"),
}

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n"


def _module(start: str, done: str, result: str) -> str:
    return (f"HloModule m\n{ADD}ENTRY main {{\n  x = f32[16] parameter(0)\n  {start}\n"
            f"  ROOT s = {result} {done}(st)\n}}\n")


@pytest.mark.parametrize("done", sorted(VALID))
def test_done_of_its_start_verifies_and_runs(done):
    start, result = VALID[done]
    module = parse_hlo(_module(start, done, result))
    verify(module)
    x = np.arange(16, dtype=np.float32)
    (out,) = hlofuse.compile(module, target="interpreter")(x)
    np.testing.assert_array_equal(out, x)  # one replica: every collective returns its input


@pytest.mark.parametrize("done", sorted(VALID))
def test_done_with_a_wrong_declared_shape_is_refused(done):
    start, _ = VALID[done]
    with pytest.raises(VerifierError, match=f"{done}"):
        verify(parse_hlo(_module(start, done, "f32[8]")))


@pytest.mark.parametrize("done", ["all-gather-done", "collective-permute-done", "copy-done"])
def test_done_of_a_plain_array_is_refused_by_name(done):
    text = f"HloModule m\nENTRY main {{\n  x = f32[16] parameter(0)\n  ROOT s = f32[16] {done}(x)\n}}\n"
    with pytest.raises(VerifierError, match=r"expects the tuple its .*-start returns, got f32\[16\]"):
        verify(parse_hlo(text))
