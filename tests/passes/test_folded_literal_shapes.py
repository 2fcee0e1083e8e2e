"""Constants the passes fold keep literals of their own shape: np.ascontiguousarray made a
scalar's value 1-d, and the reduce planner's `float(init.literal)` then failed under numpy 2
on a u8 sum whose init the simplifier had folded (the large-graph fuzzer, seed 74: an
internal error of `hlofuse run`)."""
from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.compiler import optimize
from hlofuse.runtime.io import random_inputs

# power(convert(false), 1) folds to a broadcast zero, the sum's init a folded select of constants
SEED_74 = """HloModule folded_init

add_u8 {
  a = u8[] parameter(0)
  b = u8[] parameter(1)
  ROOT r = u8[] add(a, b)
}

ENTRY main {
  f = pred[] constant(false)
  fb = pred[64,32,64] broadcast(f), dimensions={}
  z = u8[64,32,64] convert(fb)
  one = u8[] constant(1)
  ones = u8[64,32,64] broadcast(one), dimensions={}
  p = u8[64,32,64] power(z, ones)
  zero = u8[] constant(0)
  s = u8[] reduce(p, zero), dimensions={0,1,2}, to_apply=add_u8
  t = u8[] select(f, zero, s)
  b = u8[2,4] broadcast(t), dimensions={}
  ROOT out = (u8[2,4]) tuple(b)
}
"""


def _constants_of_the_wrong_shape(module) -> list[str]:
    return [f"{c.name}/{i.name}: literal {np.asarray(i.literal).shape}, shape {i.shape.dims}"
            for c in module.computations for i in c.instructions
            if i.opcode == "constant" and i.shape.is_array and i.literal is not None
            and np.asarray(i.literal).shape != tuple(i.shape.dims)]


def test_folded_constants_have_their_shapes_literals():
    module = hlofuse.parse_hlo(SEED_74)
    for target in ("cpu", "gpu"):
        fused, _ = optimize(module, target, fusion=False)
        assert _constants_of_the_wrong_shape(fused) == [], target


def test_the_seed_74_module_compiles_and_gives_the_interpreters_answer():
    module = hlofuse.parse_hlo(SEED_74)
    args = random_inputs(module, seed=74)
    want = hlofuse.compile(module, "interpreter")(*args)
    for target in ("cpu", "gpu-emulated"):
        got = hlofuse.compile(module, target, cache=False)(*args)
        assert [g.tobytes() for g in got] == [np.asarray(w).tobytes() for w in want], target
