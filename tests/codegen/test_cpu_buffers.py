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
