"""Buffer assignment: liveness-based reuse of temporaries, outputs kept out of the arena."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hlofuse.codegen.buffers import assign_buffers
from hlofuse.runtime.output_pool import OutputPool


@dataclass
class FakeStep:
    operand_steps: list[int] = field(default_factory=list)
    aliases_operands: bool = False
    kernel_leaf_bytes: list[int] = field(default_factory=list)


def test_chain_reuses_two_buffers():
    # p -> k1 -> k2 -> k3 -> k4 (root): k1..k3 are temporaries, each dead after its reader.
    steps = [FakeStep(), FakeStep([0], False, [1000]), FakeStep([1], False, [1000]),
             FakeStep([2], False, [1000]), FakeStep([3], False, [1000])]
    a = assign_buffers(steps, root_step=4)
    assert a.slots[(4, 0)].offset is None  # the result is allocated per call
    offsets = [a.slots[(i, 0)].offset for i in (1, 2, 3)]
    assert offsets[0] != offsets[1] and offsets[0] == offsets[2]  # k3 reuses k1's bytes
    assert a.arena_bytes == 2 * 1024


def test_no_reuse_while_live_and_aliases_extend_life():
    # k1 and k2 both read by k4; a tuple aliasing k1 keeps it alive until the root.
    steps = [FakeStep(), FakeStep([0], False, [64]), FakeStep([0], False, [64]), FakeStep([1], True),
             FakeStep([1, 2], False, [64]), FakeStep([3, 4], True)]
    a = assign_buffers(steps, root_step=5)
    # k1 reaches the root through the tuple: not in the arena; k4 too.
    assert a.slots[(1, 0)].offset is None and a.slots[(4, 0)].offset is None
    assert a.slots[(2, 0)].offset is not None


def test_output_pool_recycles_only_dropped_arrays():
    pool = OutputPool()
    a = pool.empty((256, 256), np.float32)
    b = pool.empty((256, 256), np.float32)
    assert a is not b  # `a` is still referenced
    addr = a.ctypes.data
    del a
    c = pool.empty((256, 256), np.float32)
    assert c.ctypes.data == addr
    view = c[0]
    del c
    d = pool.empty((256, 256), np.float32)
    assert d.ctypes.data != addr  # a live view keeps the array in use
    del view, d


def test_pooled_outputs_start_on_a_cache_line():
    """Outputs of 64 KB and more start on a 64-byte boundary (numpy's own large arrays start 16
    or 48 bytes into a line, so every vector store of a kernel split across two lines); views
    of a recycled array still keep it in use, small arrays are plain numpy arrays."""
    pool = OutputPool()
    for dims, dtype in (((4096, 2048), np.float32), ((3, 5, 7, 313), np.float64), ((1 << 16,), np.int8)):
        a = pool.empty(dims, dtype)
        assert a.ctypes.data % 64 == 0 and a.shape == dims and a.dtype == dtype and a.flags.c_contiguous
        addr = a.ctypes.data
        view = a.reshape(-1)[1:]
        del a
        assert pool.empty(dims, dtype).ctypes.data != addr  # the view keeps it in use
        del view
        assert pool.empty(dims, dtype).ctypes.data == addr
    small = pool.empty((16, 16), np.float32)
    assert small.flags.owndata


def test_program_outputs_are_aligned_and_recycled():
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.runtime.cpu_executor import CpuProgram

    prog = CpuProgram.compile(parse_hlo("""HloModule m
ENTRY e {
  x = f32[300,257] parameter(0)
  ROOT n = f32[300,257] negate(x)
}
"""))
    x = np.random.default_rng(0).standard_normal((300, 257)).astype(np.float32)
    (out,) = prog.run([x])
    np.testing.assert_array_equal(out, -x)
    addr = out.ctypes.data
    assert addr % 64 == 0
    del out
    (again,) = prog.run([x])
    assert again.ctypes.data == addr  # the dropped output's pages are reused
    np.testing.assert_array_equal(again, -x)
