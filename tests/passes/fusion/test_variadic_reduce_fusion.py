"""Variadic reduces (jax's argmax: a reduce of (value, index) pairs, whose result is a tuple)
through every target's fusion pipeline: the CPU's, and the GPU's with its legacy and its
priority fusion algorithm. The passes must not take the tuple for an array (horizontal input
fusion sorted its candidates by `loop_shape(hero).rank`, which is the reduce's tuple shape when
the reduction is not contiguous, as over the size-1 dimension of an [n, 1] input), and each
fused module must compute what the interpreter computes on the unfused one: the CPU and the
emulated GPU, fused and unfused, bit for bit (NaNs, ties and zeros of both signs in the inputs;
no transcendental op, so no rounding differs); where ptxas is installed, the GPU's PTX assembles.
"""
from __future__ import annotations

import numpy as np
import pytest

from backend_oracle import JAX_ARGMAX_REDUCER, bits_equal, run
from hlofuse.compiler import fuse, optimize
from hlofuse.emitters.gpu.ptxas import assemble, assembler
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion.horizontal_fusion import HorizontalLoopFusion
from hlofuse.runtime.gpu_executor import GpuProgram
from hlofuse.runtime.interpreter import evaluate

# jax's argmax reducer (accumulator a, ai; element b, bi), and a plain sum.
HEADER = "HloModule m\n\n" + JAX_ARGMAX_REDUCER + """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
"""
CONSTANTS = "  c = f32[] constant(-inf)\n  z = s32[] constant(0)\n  zero = f32[] constant(0)\n"
PIPELINES = [("cpu", None), ("gpu", "legacy"), ("gpu", "priority")]


def _text(dims) -> str:
    return ",".join(map(str, dims))


def _argmax(name: str, src: str, dims: tuple, rdims: tuple) -> str:
    """Lines computing `name`v, `name`x = argmax of `src` (f32[dims]) over `rdims`."""
    kept = _text(d for k, d in enumerate(dims) if k not in rdims)
    io = f"s32[{_text(dims)}] iota(), iota_dimension={(rdims or (0,))[0]}" if dims else "s32[] constant(3)"
    return (f"  {name}io = {io}\n"
            f"  {name} = (f32[{kept}], s32[{kept}]) reduce({src}, {name}io, c, z), "
            f"dimensions={{{_text(rdims)}}}, to_apply=cmp\n"
            f"  {name}v = f32[{kept}] get-tuple-element({name}), index=0\n"
            f"  {name}x = s32[{kept}] get-tuple-element({name}), index=1\n")


def _single(dims: tuple, rdims: tuple) -> str:
    kept = _text(d for k, d in enumerate(dims) if k not in rdims)
    return (HEADER + f"ENTRY e {{\n  p = f32[{_text(dims)}] parameter(0)\n" + CONSTANTS + _argmax("a", "p", dims, rdims)
            + f"  ROOT out = (f32[{kept}], s32[{kept}]) tuple(av, ax)\n}}\n")


# One argmax: over a size-1 dimension ([n,1], [1,n] over 0, [1], [1,1]) - not a contiguous
# reduction, so its loop shape is its tuple -, over nothing (a scalar), and ordinary ones.
SINGLE = [((9, 1), (1,)), ((1, 9), (1,)), ((9, 1), (0,)), ((1, 9), (0,)), ((), ()), ((1,), (0,)),
          ((7,), (0,)), ((9,), ()), ((1, 1), (0, 1)), ((3, 1, 5), (1,)), ((3, 5, 1), (2,)),
          ((9, 40), (1,)), ((300, 40), (0,))]

SEVERAL = {
    # two variadic reduces and a plain one of [9,1] inputs feeding the root: horizontal input
    # fusion's candidates (the case that crashed)
    "two_argmax_and_sum_n1": "  p = f32[9,1] parameter(0)\n  q = f32[9,1] parameter(1)\n" + CONSTANTS
    + _argmax("a", "p", (9, 1), (1,)) + _argmax("b", "q", (9, 1), (1,))
    + "  s = f32[9] reduce(p, zero), dimensions={1}, to_apply=add\n"
      "  ROOT out = (f32[9], s32[9], f32[9], s32[9], f32[9]) tuple(av, ax, bv, bx, s)\n",
    # a degenerate and a contiguous argmax side by side
    "mixed": "  p = f32[9,1] parameter(0)\n  q = f32[9,40] parameter(1)\n" + CONSTANTS
    + _argmax("a", "p", (9, 1), (1,)) + _argmax("b", "q", (9, 40), (1,))
    + "  ROOT out = (f32[9], s32[9], f32[9], s32[9]) tuple(av, ax, bv, bx)\n",
    # two scalar results
    "two_scalars": "  p = f32[1] parameter(0)\n  q = f32[1] parameter(1)\n" + CONSTANTS
    + _argmax("a", "p", (1,), (0,)) + _argmax("b", "q", (1,), (0,))
    + "  ROOT out = (f32[], s32[], f32[], s32[]) tuple(av, ax, bv, bx)\n",
    # [1,n] over dimension 0 twice, one through a producer, sharing the input
    "shared_input_1n": "  p = f32[1,40] parameter(0)\n" + CONSTANTS + "  ng = f32[1,40] negate(p)\n"
    + _argmax("a", "p", (1, 40), (0,)) + _argmax("b", "ng", (1, 40), (0,))
    + "  ROOT out = (f32[40], s32[40], f32[40], s32[40]) tuple(av, ax, bv, bx)\n",
    # a producer fused into the reduce, consumers of both results, and loop siblings
    "producers_and_consumers": "  p = f32[9,1] parameter(0)\n  q = f32[9] parameter(1)\n" + CONSTANTS
    + "  ab = f32[9,1] abs(p)\n" + _argmax("a", "ab", (9, 1), (1,))
    + "  w = f32[9] add(av, q)\n  xc = f32[9] convert(ax)\n  nq = f32[9] negate(q)\n"
      "  ROOT out = (f32[9], f32[9], f32[9], f32[9]) tuple(w, xc, nq, av)\n",
}


def _inputs(module) -> list[np.ndarray]:
    """Small integers (ties), NaNs, and zeros of both signs, per parameter."""
    rng = np.random.default_rng(7)
    out = []
    for p in module.entry.parameters:
        x = rng.integers(-2, 3, p.shape.dims).astype(np.float32)
        flat = x.reshape(-1)
        flat[rng.random(flat.size) < 0.15] = np.nan
        flat[flat == 0] = np.where(rng.random(int((flat == 0).sum())) < 0.5, -0.0, 0.0)
        out.append(x)
    return out


def _check(text: str) -> None:
    module = parse_hlo(text)
    for target, algorithm in PIPELINES:
        fused, _ = optimize(module, target, algorithm=algorithm)
        verify(fused)
        if target == "gpu" and assembler() is not None:
            assemble(GpuProgram.compile(fused, emulated=True, build_only=True).ptx(), "sm_90")
    args = _inputs(module)
    want = run(text, args, "interpreter")
    for backend in ("cpu", "gpu-emulated"):
        for fusion in (True, False):
            got = run(text, args, backend, fusion)
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                assert bits_equal(g, w).all(), f"{backend} fusion={fusion} out{k}: {g} vs {w}"


@pytest.mark.parametrize("dims,rdims", SINGLE, ids=[f"{_text(d) or 'scalar'}-over-{_text(r) or 'none'}"
                                                    for d, r in SINGLE])
def test_one_variadic_reduce(dims, rdims):
    _check(_single(dims, rdims))


@pytest.mark.parametrize("name", list(SEVERAL))
def test_several_variadic_reduces(name):
    _check(HEADER + "ENTRY e {\n" + SEVERAL[name] + "}\n")


def test_horizontal_input_fusion_merges_variadic_reduces_of_one_loop():
    """Two argmaxes of [9,1] inputs loop over the same tuple shape (XLA's loop shape of a
    non-contiguous reduce is its own shape): one kInput kernel computes both. The plain sum's
    loop shape is an array, unequal to that tuple (ShapeUtil::EqualIgnoringElementType), so it
    stays a kernel of its own. (The fusion passes alone: the simplifier would first make each
    reduce over a dimension of size 1 a reshape, as XLA's does.)"""
    text = HEADER + "ENTRY e {\n" + SEVERAL["two_argmax_and_sum_n1"] + "}\n"
    for algorithm in ("legacy", "priority"):
        fused, _ = fuse(parse_hlo(text), "gpu", algorithm=algorithm)
        shapes = sorted(i.shape.to_text(with_layout=False) for i in fused.entry.instructions
                        if i.opcode == "fusion")
        assert shapes == ["((f32[9], s32[9]), (f32[9], s32[9]))", "f32[9]"], (algorithm, shapes)


LOOP_WITH_TUPLE_OUTPUT = HEADER + """
f1 {
  q = f32[9,1] parameter(0)
  io = s32[9,1] iota(), iota_dimension=1
  c = f32[] constant(-inf)
  z = s32[] constant(0)
  r = (f32[9], s32[9]) reduce(q, io, c, z), dimensions={1}, to_apply=cmp
  q1 = f32[9] reshape(q)
  n = f32[9] negate(q1)
  ROOT t = ((f32[9], s32[9]), f32[9]) tuple(r, n)
}

f2 {
  q = f32[7] parameter(0)
  ROOT n = f32[7] negate(q)
}

ENTRY main {
  x = f32[9,1] parameter(0)
  y = f32[7] parameter(1)
  a = ((f32[9], s32[9]), f32[9]) fusion(x), kind=kLoop, calls=f1
  b = f32[7] fusion(y), kind=kLoop, calls=f2
  ROOT t = (((f32[9], s32[9]), f32[9]), f32[7]) tuple(a, b)
}
"""


def test_horizontal_loop_fusion_leaves_a_tuple_output_alone():
    """A kLoop fusion with a variadic reduce among its outputs is not a horizontal fusion
    candidate (XLA: its TUPLE element type differs from its array outputs'; its outputs cannot
    be concatenated): the pass changes nothing (it sorted candidates by their first output's
    element count, which a tuple does not have)."""
    before = parse_hlo(LOOP_WITH_TUPLE_OUTPUT)
    after = parse_hlo(LOOP_WITH_TUPLE_OUTPUT)
    assert not HorizontalLoopFusion("gpu").run(after)
    verify(after)
    args = _inputs(before)
    for w, g in zip(evaluate(before, args), evaluate(after, args), strict=True):
        for wl, gl in zip(w if isinstance(w, tuple) else (w,), g if isinstance(g, tuple) else (g,), strict=True):
            assert bits_equal(np.asarray(gl), np.asarray(wl)).all()
