"""GPU kernels on hand-written fused modules, run by the host emulation of the grid (every
block and thread, blocks on several OS threads with real atomics) and compared with the
interpreter (float sums within tolerance, integer reductions exactly); the same kernels'
PTX is assembled by ptxas for sm_90."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import backend_cases
from backend_cases import argmax_module
from hlofuse.codegen.gpu import launch_summary
from hlofuse.codegen.kernels import gpu_reduction as rk
from hlofuse.codegen.kernels.args import output_leaves
from hlofuse.codegen.kernels.reduction_groups import reduction_groups
from hlofuse.emitters.gpu.atomics import atomic_kind
from hlofuse.emitters.gpu.ptxas import assemble, assembler
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.gpu_emulator import run_grid
from hlofuse.runtime.gpu_executor import GpuProgram
from hlofuse.runtime.interpreter import evaluate

REDUCERS = "".join(backend_cases.reducer(name, ty, op) for name, ty, op in [
    ("add_f32", "f32", "add"), ("max_f32", "f32", "maximum"), ("mul_f32", "f32", "multiply"),
    ("add_s32", "s32", "add"), ("max_s32", "s32", "maximum"), ("min_u32", "u32", "minimum"),
    ("add_s64", "s64", "add"), ("xor_s32", "s32", "xor"), ("sub_s32", "s32", "subtract"),
    ("add_f16", "f16", "add"), ("add_s16", "s16", "add"), ("or_pred", "pred", "or")])


def reduce_module(dims, rdims, ty="f32", reducer="add_f32", init="0") -> str:
    return backend_cases.reduce_module(dims, rdims, reducer, init, ty, REDUCERS)


def _input(dims, ty: str, rng) -> np.ndarray:
    if ty == "f32":
        return rng.standard_normal(dims).astype(np.float32)
    if ty == "f16":
        return rng.standard_normal(dims).astype(np.float16)
    if ty == "pred":
        return rng.random(dims) < 0.001
    dt = {"s16": np.int16, "s32": np.int32, "u32": np.uint32, "s64": np.int64}[ty]
    return rng.integers(0, 1000, dims).astype(dt)


def run_both(text: str, args: list, check_ptx: bool = False):
    """(emulated outputs, interpreter outputs, program) for module `text` on `args`."""
    module = parse_hlo(text)
    prog = GpuProgram.compile(module, emulated=True)
    got = prog.run(args)
    want = [np.asarray(w) for w in evaluate(module, args)]
    if check_ptx and assembler() is not None:
        assemble(prog.ptx(), "sm_90")
    return got, want, prog


def assert_match(got, want, exact: bool) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=2e-4, atol=2e-4)


def kinds(prog) -> set[tuple[str, str]]:
    return {(r["role"], r["kind"]) for r in launch_summary(prog)}


# ---- shapes of reductions -------------------------------------------------------------------
@pytest.mark.parametrize("dims,rdims,kind", [
    ((300, 257), (1,), "row"),        # 257 = 32 lanes * 8 + 1: the last lane's tile is partial
    ((7, 5000), (1,), "row"),          # several blocks per row (chunks > 1)
    ((1000, 130), (0,), "column"),     # 1000 = 31 * 32 + 8: a partial last tile
    ((64, 33, 40), (0, 1), "column"),  # several reduced dims, kept minor
    ((6, 50, 9), (0, 2), "row"),       # interleaved: reduced, kept, reduced
    ((4099,), (0,), "row"),            # full reduction: many blocks, one output
    ((33, 65), (0, 1), "row"),         # full reduction of a 2-D array
    ((40, 20), (1,), "per_output"),    # short rows: a thread per output, no atomics
])
def test_float_sum_shapes(dims, rdims, kind):
    rng = np.random.default_rng(1)
    got, want, prog = run_both(reduce_module(dims, rdims), [_input(dims, "f32", rng)], check_ptx=True)
    assert ("main", kind) in kinds(prog)
    assert_match(got, want, exact=False)


@pytest.mark.parametrize("ty,reducer,dims,rdims,expected_atomic", [
    ("s32", "add_s32", (1000, 77), (0,), "rmw:add"),
    ("s32", "add_s32", (77, 1000), (1,), "rmw:add"),
    ("s64", "add_s64", (5001,), (0,), "rmw:add"),
    ("s32", "max_s32", (513, 70), (0,), "rmw:max"),
    ("u32", "min_u32", (70, 513), (1,), "rmw:umin"),
    ("s32", "xor_s32", (3000,), (0,), "rmw:xor"),
])
def test_integer_reductions_are_exact(ty, reducer, dims, rdims, expected_atomic):
    rng = np.random.default_rng(2)
    text = reduce_module(dims, rdims, ty, reducer, "0" if "min" not in reducer else "4294967295")
    got, want, prog = run_both(text, [_input(dims, ty, rng)])
    hero = parse_hlo(text).computations
    comp = next(c for c in hero if c.name == reducer)
    assert atomic_kind(comp, comp.root.shape.dtype) == expected_atomic
    assert any(r["atomic"] for r in launch_summary(prog))
    assert_match(got, want, exact=True)


def test_non_identity_init_enters_once():
    """Partials start from their first element, so init=5 is added exactly once (as the
    interpreter does), whatever the number of tiles and atomics."""
    rng = np.random.default_rng(3)
    x = _input((300, 100), "s32", rng)
    got, want, _ = run_both(reduce_module((300, 100), (0,), "s32", "add_s32", "5"), [x])
    assert_match(got, want, exact=True)
    np.testing.assert_array_equal(got[0], x.sum(axis=0) + 5)


def test_cas_loop_reducers():
    """multiply and float maximum have no atomicrmw: a compare-and-swap loop combines them."""
    rng = np.random.default_rng(4)
    x = (1.0 + 0.001 * rng.standard_normal((2000, 40))).astype(np.float32)
    got, want, prog = run_both(reduce_module((2000, 40), (0,), "f32", "mul_f32", "1"), [x], check_ptx=True)
    assert_match(got, want, exact=False)
    x[5, 3] = np.nan
    got, want, _ = run_both(reduce_module((2000, 40), (0,), "f32", "max_f32", "-inf"), [x])
    assert np.isnan(got[0][3]) and np.isnan(want[0][3])
    assert_match(got, want, exact=True)
    # a reducer that is not an atomicrmw operation (and not associative): still a CAS loop
    comp = next(c for c in parse_hlo(reduce_module((4,), (0,), "s32", "sub_s32")).computations if c.name == "sub_s32")
    assert atomic_kind(comp, comp.root.shape.dtype) == "cas"


def test_two_pass_for_16_bit_and_pred():
    rng = np.random.default_rng(5)
    x = _input((500, 64), "s16", rng) % 64
    got, want, prog = run_both(reduce_module((500, 64), (0,), "s16", "add_s16"), [x], check_ptx=True)
    assert ("finish", "column") in kinds(prog) and not any(r["atomic"] for r in launch_summary(prog))
    assert_match(got, want, exact=True)
    # A narrow float rounds every step: one thread per output keeps XLA:CPU's order (exact).
    x = _input((500, 64), "f16", rng)
    got, want, prog = run_both(reduce_module((500, 64), (0,), "f16", "add_f16"), [x], check_ptx=True)
    assert kinds(prog) == {("main", "per_output")}
    assert_match(got, want, exact=True)
    p = _input((64, 700), "pred", rng)
    got, want, prog = run_both(reduce_module((64, 700), (1,), "pred", "or_pred", "false"), [p])
    assert ("finish", "row") in kinds(prog)
    assert_match(got, want, exact=True)


@pytest.mark.parametrize("dims,rd", [((50, 3000), 1), ((3000, 50), 0)])
def test_variadic_argmax_two_pass(dims, rd):
    text = argmax_module(dims, rd)
    rng = np.random.default_rng(6)
    x = rng.integers(-50, 50, dims).astype(np.float32)  # many ties: the smallest index must win
    got, want, prog = run_both(text, [x], check_ptx=True)
    assert any(r["role"] == "finish" for r in launch_summary(prog))
    assert_match(got, want, exact=True)
    np.testing.assert_array_equal(got[1], np.argmax(x, axis=rd))


MULTI = "HloModule multi\n" + backend_cases.reducer("add", "f32", "add") + """fused {
  x = f32[130,1100] parameter(0)
  sq = f32[130,1100] multiply(x, x)
  e = f32[130,1100] exponential(x)
  z = f32[] constant(0)
  s1 = f32[130] reduce(x, z), dimensions={1}, to_apply=add
  s2 = f32[130] reduce(sq, z), dimensions={1}, to_apply=add
  s3 = f32[1100] reduce(e, z), dimensions={0}, to_apply=add
  ROOT t = (f32[130], f32[130], f32[130,1100], f32[1100]) tuple(s1, s2, e, s3)
}
ENTRY main {
  x = f32[130,1100] parameter(0)
  ROOT f = (f32[130], f32[130], f32[130,1100], f32[1100]) fusion(x), kind=kInput, calls=fused
}
"""


def test_multi_output_reduction_fusion():
    """Two row reductions share one pass (one partial each) and the elementwise output is
    written from the same loop; the column reduction is its own group."""
    rng = np.random.default_rng(7)
    got, want, prog = run_both(MULTI, [rng.standard_normal((130, 1100)).astype(np.float32)], check_ptx=True)
    mains = [r for r in launch_summary(prog) if r["role"] == "main"]
    assert sorted(r["kind"] for r in mains) == ["column", "row"]
    assert not any(r["role"] == "loop" for r in launch_summary(prog))
    assert_match(got, want, exact=False)


def test_empty_reduced_dimension_gives_init():
    got, want, _ = run_both(reduce_module((5, 0), (1,), "f32", "add_f32", "2.5"), [np.zeros((5, 0), np.float32)])
    assert_match(got, want, exact=True)
    np.testing.assert_array_equal(got[0], np.full(5, 2.5, np.float32))


# ---- loop kernels ---------------------------------------------------------------------------
LOOP = """HloModule loop
fused {
  p0 = f32[@N] parameter(0)
  p1 = f32[@N] parameter(1)
  a = f32[@N] add(p0, p1)
  t = f32[@N] tanh(a)
  ROOT r = (f32[@N], f32[@N]) tuple(a, t)
}
ENTRY e {
  x = f32[@N] parameter(0)
  y = f32[@N] parameter(1)
  ROOT f = (f32[@N], f32[@N]) fusion(x, y), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("n,unroll", [(4096, 4), (1001, 1), (3, 1)])
def test_loop_kernel_unroll_and_bounds(n, unroll):
    rng = np.random.default_rng(8)
    args = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    got, want, prog = run_both(LOOP.replace("@N", str(n)), args)
    assert prog.launches[0].plan.unroll == unroll
    assert_match(got, want, exact=False)


@pytest.mark.skipif(assembler() is None, reason="neither ptxas nor nvJitLink is installed")
def test_loop_ptx_is_vectorized_and_uses_libdevice():
    prog = GpuProgram.compile(parse_hlo(LOOP.replace("@N", "4096")), emulated=True, build_only=True)
    ptx = prog.ptx()
    assert f".entry {prog.launches[0].name}(" in ptx and ".target sm_90" in ptx
    assert "ld.global.nc.v4" in ptx or "ld.global.v4" in ptx
    assert "st.global.v4" in ptx
    assert "__nv_tanhf" not in ptx  # libdevice is linked and inlined, not called
    for arch in ("sm_80", "sm_90"):
        assert len(assemble(GpuProgram.compile(parse_hlo(LOOP.replace("@N", "4096")), emulated=True,
                                               build_only=True, arch=arch).ptx(), arch)) > 0


def test_atomic_ptx_instructions():
    """The atomic paths select the GPU's atomics: red/atom add, max and a cas loop."""
    if assembler() is None:
        pytest.skip("neither ptxas nor nvJitLink is installed")
    ptx = GpuProgram.compile(parse_hlo(reduce_module((1000, 130), (0,))), emulated=True, build_only=True).ptx()
    assert "red.global.add.f32" in ptx or "atom.global.add.f32" in ptx
    ptx = GpuProgram.compile(parse_hlo(reduce_module((513, 70), (0,), "s32", "max_s32")), emulated=True,
                             build_only=True).ptx()
    assert "max.s32" in ptx
    ptx = GpuProgram.compile(parse_hlo(reduce_module((2000, 40), (0,), "f32", "mul_f32", "1")), emulated=True,
                             build_only=True).ptx()
    assert re.search(r"atom\.[a-z.]*cas\.b32", ptx)
    assemble(ptx)


# ---- the emulator ---------------------------------------------------------------------------
def test_run_grid_covers_every_block_once_on_several_threads():
    seen: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(2, timeout=5)

    def fn(begin, end):
        barrier.wait()  # both ranges are in flight at the same time
        with lock:
            seen.append((threading.get_ident(), begin, end))

    run_grid(fn, [], 37)
    blocks = sorted(b for _, begin, end in seen for b in range(begin, end))
    assert blocks == list(range(37))
    assert len({t for t, _, _ in seen}) >= 2


def test_plan_thresholds():
    """Reduction plans follow the documented thresholds."""
    def plan(dims, rdims):
        comp = next(c for c in parse_hlo(reduce_module(dims, rdims)).computations if c.name == "fused")
        return rk.plan_reduction(reduction_groups(comp)[0][0], output_leaves(comp))

    assert plan((10, rk.PER_OUTPUT_MAX), (1,)).kind == "per_output"
    p = plan((10, 5000), (1,))
    assert (p.kind, p.lanes, p.chunks) == ("row", 256, 3)
    p = plan((50, 100), (1,))  # short rows: 8 rows of 32 lanes per block, 7 blocks for 50 rows
    assert (p.kind, p.lanes, p.rows_per_block, p.launch.grid, p.launch.block) == ("row", 32, 8, 7, 256)
    p = plan((100, 64), (0,))
    assert (p.kind, p.chunks, p.launch.threads >= 64 * 4) == ("column", 4, True)


EPILOGUE = "HloModule epi\n" + backend_cases.reducer("add", "f32", "add") + """fused {
  x = f32[96,700] parameter(0)
  z = f32[] constant(0)
  r = f32[96] reduce(x, z), dimensions={1}, to_apply=add
  n = f32[] constant(700)
  nb = f32[96] broadcast(n), dimensions={}
  mean = f32[96] divide(r, nb)
  ROOT t = (f32[96], f32[96]) tuple(mean, r)
}
ENTRY e {
  x = f32[96,700] parameter(0)
  ROOT f = (f32[96], f32[96]) fusion(x), kind=kInput, calls=fused
}
"""


def test_reduction_epilogue_after_atomics():
    """mean = sum / n is computed by an epilogue kernel once the atomics are done; the sum,
    itself an output, is accumulated in place."""
    rng = np.random.default_rng(9)
    got, want, prog = run_both(EPILOGUE, [rng.standard_normal((96, 700)).astype(np.float32)], check_ptx=True)
    roles = [r["role"] for r in launch_summary(prog)]
    assert roles == ["init", "main", "epilogue"]
    assert_match(got, want, exact=False)


SOFTMAX = "HloModule softmax\n" + backend_cases.ADD_MAX_F32 + """fused {
  x = f32[50,900] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[50] reduce(x, ninf), dimensions={1}, to_apply=max
  mb = f32[50,900] broadcast(m), dimensions={0}
  s = f32[50,900] subtract(x, mb)
  e = f32[50,900] exponential(s)
  z = f32[] constant(0)
  d = f32[50] reduce(e, z), dimensions={1}, to_apply=add
  db = f32[50,900] broadcast(d), dimensions={0}
  ROOT r = f32[50,900] divide(e, db)
}
ENTRY e {
  x = f32[50,900] parameter(0)
  ROOT f = f32[50,900] fusion(x), kind=kLoop, calls=fused
}
"""


def test_softmax_in_one_fusion_materializes_its_reduces():
    """Reduces broadcast back into the loop become their own kernels writing temporaries."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((50, 900)).astype(np.float32)
    got, want, prog = run_both(SOFTMAX, [x], check_ptx=True)
    mains = [r for r in launch_summary(prog) if r["role"] == "main"]
    assert len(mains) == 2 and any(r["role"] == "loop" for r in launch_summary(prog))
    assert_match(got, want, exact=False)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got[0], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(assembler() is None, reason="neither ptxas nor nvJitLink is installed")
def test_sm80_ptx_for_reductions_and_atomics():
    """The same kernels for sm_80 (A100): atomics, CAS loops, two passes and libdevice."""
    argmax = argmax_module((50, 3000), 1)
    for text in (MULTI, argmax, reduce_module((2000, 40), (0,), "f32", "mul_f32", "1"), EPILOGUE):
        ptx = GpuProgram.compile(parse_hlo(text), emulated=True, build_only=True, arch="sm_80").ptx()
        assert ".target sm_80" in ptx
        assemble(ptx, "sm_80")
