"""Inputs shared by the CPU and GPU backend tests: scalar reducer computations, a reduce
fusion of any shape and element type, a variadic argmax reduction (value, index), and a
corpus module with random arguments and the interpreter's outputs."""
from __future__ import annotations

import numpy as np
import pytest

from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.ir import HloModule
from hlofuse.hlo.parser import parse_hlo


def corpus_case(path: str) -> tuple[HloModule, list, list[np.ndarray]]:
    """The module in file `path`, random arguments (seed 0) and the interpreter's outputs
    for them; skips the test when the interpreter cannot run the module."""
    from hlofuse.runtime.interpreter import evaluate
    from hlofuse.runtime.io import random_inputs

    module = parse_hlo(open(path).read(), path)
    args = random_inputs(module, 0)
    try:
        want = evaluate(module, args)
    except UnsupportedError as e:
        pytest.skip(f"interpreter: {e}")
    return module, args, [np.asarray(w) for w in want]


def reducer(name: str, ty: str, op: str) -> str:
    """A scalar reducer computation `name` applying binary opcode `op` to two `ty` values."""
    return f"""{name} {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT s = {ty}[] {op}(a, b)
}}
"""


ADD_MAX_F32 = reducer("add", "f32", "add") + reducer("max", "f32", "maximum")

# The graph fuzzer's most frequent real-GPU mismatch (seeds 62, 65, 72 and 73 on an H200, CUDA
# 13.0): a max of negated s32 values over a row holding INT_MIN. The PTX negates each load and
# takes max.s32; ptxas at -O1 and above feeds one load to its three-input VIMNMX3 without the
# negation (docs/gpu_device.md, "Eighth run").
NEGATED_MAX_S32 = "HloModule negated_max\n" + reducer("max", "s32", "maximum") + """ENTRY e {
  x = s32[1,15] parameter(0)
  n = s32[1,15] negate(x)
  lo = s32[] constant(-2147483648)
  ROOT r = s32[1] reduce(n, lo), dimensions={1}, to_apply=max
}
"""


def shape_text(ty: str, dims) -> str:
    """HLO text of an array shape, e.g. f32[3,4]."""
    return f"{ty}[{','.join(map(str, dims))}]"


def reduce_module(dims, rdims, reducer: str = "add", init: str = "0", ty: str = "f32",
                  computations: str = ADD_MAX_F32) -> str:
    """A module whose entry is one kInput fusion reducing a `ty` array of `dims` over `rdims`
    with `reducer` (one of `computations`) from `init`."""
    out = [d for i, d in enumerate(dims) if i not in rdims]
    rd = ",".join(map(str, rdims))
    return f"""HloModule r
{computations}
fused {{
  p0 = {shape_text(ty, dims)} parameter(0)
  c = {ty}[] constant({init})
  ROOT r = {shape_text(ty, out)} reduce(p0, c), dimensions={{{rd}}}, to_apply={reducer}
}}
ENTRY e {{
  x = {shape_text(ty, dims)} parameter(0)
  ROOT f = {shape_text(ty, out)} fusion(x), kind=kInput, calls=fused
}}
"""


def plain_reduce_module(dims, rdims, op: str = "add", init: str = "0", ty: str = "f32") -> str:
    """A module whose entry reduces a `ty` parameter of `dims` over `rdims` with `op` of the
    reducer's two parameters from the constant `init`, unfused (the init a constant outside
    any fusion)."""
    out = [d for i, d in enumerate(dims) if i not in rdims]
    return f"""HloModule reduce
red {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT s = {ty}[] {op}(a, b)
}}
ENTRY main {{
  x = {shape_text(ty, dims)} parameter(0)
  init = {ty}[] constant({init})
  ROOT s = {shape_text(ty, out)} reduce(x, init), dimensions={{{",".join(map(str, rdims))}}}, to_apply=red
}}
"""


_ARGMAX = """HloModule argmax
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
fused {
  x = f32[DIMS] parameter(0)
  io = s32[DIMS] iota(), iota_dimension=RD
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[OUT], s32[OUT]) reduce(x, io, ninf, zero), dimensions={RD}, to_apply=argmax
}
ENTRY e {
  x = f32[DIMS] parameter(0)
  ROOT f = (f32[OUT], s32[OUT]) fusion(x), kind=kInput, calls=fused
}
"""


def argmax_module(dims, rd: int) -> str:
    """A kInput fusion computing (max, argmax) of an f32 array of `dims` over dimension `rd`
    (ties go to the smaller index, as jnp.argmax)."""
    out = [d for i, d in enumerate(dims) if i != rd]
    return (_ARGMAX.replace("DIMS", ",".join(map(str, dims))).replace("OUT", ",".join(map(str, out)))
            .replace("RD", str(rd)))
