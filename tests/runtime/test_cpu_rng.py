"""rng-bit-generator on the CPU backend, bit for bit against the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.interpreter import evaluate

CASES = [
    (alg, t, dims, n)
    for alg in ("rng_three_fry", "rng_philox", "rng_default")
    for t, dims in (("u32", (3, 5)), ("u64", (7,)), ("u16", (4, 6)), ("u8", ()), ("u32", (2, 3, 1)), ("s32", (9,)))
    for n in ((2, 3) if alg != "rng_three_fry" else (2,))
]


@pytest.mark.parametrize("alg,t,dims,n", CASES)
def test_rng_bit_generator_matches_reference(alg, t, dims, n):
    shape = f"{t}[{','.join(map(str, dims))}]"
    text = (f"HloModule r\n\nENTRY e {{\n  s = u64[{n}] parameter(0)\n"
            f"  ROOT r = (u64[{n}], {shape}) rng-bit-generator(s), algorithm={alg}\n}}\n")
    module = parse_hlo(text)
    state = np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE, 7][:n], np.uint64)  # the counter carries
    got = CpuProgram.compile(module).run([state])
    want = evaluate(module, [state])
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert g.dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, np.asarray(w))


def test_threefry_known_answer():
    """Random123's published known-answer vector for Threefry2x32-20 (all-ones input and key)."""
    from hlofuse.runtime.library_rng import threefry2x32

    x0, x1 = threefry2x32(np.array([0xFFFFFFFF], np.uint32), np.array([0xFFFFFFFF], np.uint32), 0xFFFFFFFF, 0xFFFFFFFF)
    assert (int(x0[0]), int(x1[0])) == (0x1CB996FC, 0xBB002BE7)
