"""Plane mode of CPU loop kernels (codegen/kernels/cpu_loop.py): a loop over an output with a
short last dimension (<= 4, e.g. image channels) and rank >= 3 walks planes of its last two
dimensions, so only the plane number is divided into outer indices. Results against the
interpreter on every mode boundary; the structural claim (an operand read at another shape -
the channel a dynamic-update-slice writes back - is read with strided loads, not gathers) on
the optimized LLVM IR."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels.cpu_loop import loop_shape
from hlofuse.hlo.parser import parse_hlo


@pytest.mark.parametrize("dims,mode", [
    ((64, 224, 224, 3), (64 * 224, 224 * 3)),   # plane mode
    ((70, 9, 3), (70, 27)),                     # plane mode, rank 3
    ((63, 9, 3), (63 * 9, 3)),                  # too few planes for the threads: rows
    ((64, 1, 3), (64, 3)),                      # a plane of one row is a row
    ((1000, 3), (1000, 3)),                     # rank 2: rows (no division to avoid)
    ((64, 9, 40), (64 * 9, 40)),                # a long row: rows
    ((64, 9, 7), (64 * 9 * 7, 1)),              # flat
])
def test_loop_shape_modes(dims, mode):
    ls = loop_shape(dims)
    assert (ls.units, ls.unit_elements) == mode


CHANNEL_SET = """HloModule m
ENTRY e {
  x = f32[D0,D1,C] parameter(0)
  k = f32[] constant(0.5)
  kb = f32[D0,D1,C] broadcast(k), dimensions={}
  y = f32[D0,D1,C] multiply(x, kb)
  s = f32[D0,D1,1] slice(y), slice={[0:D0], [0:D1], [1:2]}
  one = f32[] constant(1)
  ob = f32[D0,D1,1] broadcast(one), dimensions={}
  u = f32[D0,D1,1] subtract(s, ob)
  z = s32[] constant(0)
  c = s32[] constant(1)
  ROOT r = f32[D0,D1,C] dynamic-update-slice(y, u, z, z, c)
}
"""


def _channel_module(d0: int, d1: int, c: int):
    return parse_hlo(CHANNEL_SET.replace("D0", str(d0)).replace("D1", str(d1)).replace("C", str(c)))


@pytest.mark.parametrize("d0,d1,c", [(70, 9, 3), (64, 33, 4), (63, 9, 3), (65, 1, 2), (200, 5, 3)])
def test_channel_update_matches_interpreter(d0, d1, c):
    x = np.random.default_rng(d0 + d1 + c).standard_normal((d0, d1, c)).astype(np.float32)
    got = hlofuse.compile(_channel_module(d0, d1, c), target="cpu")(x)[0]
    want = hlofuse.compile(_channel_module(d0, d1, c), target="interpreter")(x)[0]
    np.testing.assert_array_equal(got, want)


def test_channel_update_reads_without_gathers():
    # One loop kernel over the image (the multiply fuses into the dynamic-update-slice, which
    # then is a select): the channel the update reads back is a strided load in plane mode.
    exe = hlofuse.compile(_channel_module(128, 40, 3), target="cpu")
    assert [i.opcode for i in exe.fused_module.entry.instructions].count("fusion") == 1
    ir_text = exe.program.llvm_ir()
    assert "<16 x float>" in ir_text or "<8 x float>" in ir_text  # vectorized
    assert "llvm.masked.gather" not in ir_text
