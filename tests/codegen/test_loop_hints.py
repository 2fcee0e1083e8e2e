"""Loops over outputs (rows) around a short row are kept from LLVM's loop vectorizer
(kernels/loop_hints.py): otherwise it fully unrolls the short row and vectorises across outputs,
gathering each vector through interleaved strided loads (row sums of 16 f32: 15x slower). The
hint is set where a row (or a column block) fills a vector register and left off narrower ones,
where packing several outputs into a vector is the better use of it. Results are checked against
numpy and the interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from backend_cases import reduce_module, reducer
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.cpu_executor import CpuProgram
from test_row_kernels import _input, module

NO_VECTORIZE = re.compile(r'!\{\s*!"llvm\.loop\.vectorize\.enable", i1 false\s*\}')


def _widest_vector(ir_text: str) -> int:
    """The most lanes of any vector type in `ir_text` (an interleaved group of strided loads
    shows as a vector of lanes x stride elements)."""
    return max((int(n) for n in re.findall(r"<(\d+) x (?:float|i32)>", ir_text)), default=1)


@pytest.mark.parametrize("n", [16, 32, 64])
def test_short_row_sums_are_not_vectorised_across_rows(n):
    rows = 8192
    prog = CpuProgram.compile(parse_hlo(reduce_module((rows, n), (1,))))
    ir_text = prog.llvm_ir()
    assert NO_VECTORIZE.search(ir_text)
    assert _widest_vector(ir_text) <= 64
    x = np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_narrow_rows_may_be_vectorised_across_rows():
    prog = CpuProgram.compile(parse_hlo(reduce_module((8192, 3), (1,))))
    assert not NO_VECTORIZE.search(prog.llvm_ir())
    x = np.random.default_rng(3).standard_normal((8192, 3)).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("columns", [16, 32])
def test_integer_column_blocks_are_not_vectorised_along_the_reduction(columns):
    """Integer adds need no reassociation flag for LLVM to vectorise along the reduced
    dimension, so the float rule (no reassoc) does not cover them: the hint does."""
    rows = 8192
    text = reduce_module((rows, columns), (0,), ty="s32", computations=reducer("add", "s32", "add"))
    prog = CpuProgram.compile(parse_hlo(text))
    ir_text = prog.llvm_ir()
    assert NO_VECTORIZE.search(ir_text) and _widest_vector(ir_text) <= 64
    x = np.random.default_rng(columns).integers(-1000, 1000, (rows, columns), dtype=np.int32)
    (got,) = prog.run([x])
    np.testing.assert_array_equal(got, x.sum(axis=0, dtype=np.int64).astype(np.int32))


@pytest.mark.parametrize("pattern", ["layer_norm", "softmax"])
@pytest.mark.parametrize("n", [16, 32])
def test_short_row_kernels_are_not_vectorised_across_rows(pattern, n):
    dims = (2048, n)
    text = module(pattern, dims)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["row"]
    assert NO_VECTORIZE.search(exe.program.llvm_ir())
    x = _input(dims, "f32", seed=n)
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(exe(x)), list(want)):
        assert r.ok, r


# ---- interleaving of latency-bound loops (cpu_loop.interleave_count) ----------------------------

VECTOR_DIVIDES = re.compile(r"= fdiv (?:fast |arcp |contract |afn |reassoc |nnan |ninf |nsz )*<\d+ x (?:float|double)>")


def _unary_chain(dims: tuple[int, ...], ops: list[str]) -> str:
    """A module applying `ops` (unary opcodes) in turn to an f32 parameter of `dims`."""
    shape = f"f32[{','.join(map(str, dims))}]"
    lines, prev = [f"  p = {shape} parameter(0)"], "p"
    for k, op in enumerate(ops):
        lines.append(f"  {'ROOT ' if k == len(ops) - 1 else ''}v{k} = {shape} {op}({prev})")
        prev = f"v{k}"
    return "HloModule m\n\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


CHAIN = ["tanh", "exponential", "log-plus-one", "logistic", "erf"]


def _comp(text: str):
    return parse_hlo(text).entry


@pytest.mark.parametrize("dims,bits,want", [
    ((256, 1024), 512, 8),  # f32: 16 lanes, 8 vectors of a 1024-element row
    ((128, 64), 512, 4),  # a 64-element row holds 4 vectors of 16 lanes, not 8
    ((128, 48), 512, 2),
    ((128, 64), 256, 4),  # 8 lanes (AVX2): 8 vectors would fit; 16 registers take 4
    ((128, 64), None, 4),  # no width named: AVX2's 256 bits and 16 registers assumed
    ((1 << 20,), 512, 8),  # flat mode: no row to fit in
    ((4096, 8, 3), 512, 1),  # plane mode: its inner loop is unrolled, not vectorised
])
def test_interleave_count_fits_the_row(dims, bits, want):
    from hlofuse.codegen.kernels.cpu_loop import interleave_count, loop_shape

    comp = _comp(_unary_chain(dims, CHAIN))
    assert interleave_count(comp, loop_shape(dims), bits) == want


@pytest.mark.parametrize("length", [5, 6, 7, 12, 13, 24, 25])
def test_interleave_count_bounds_the_copies_of_math_functions(length):
    """Interleaved copies of the element's math functions stay within _INTERLEAVE_BUDGET (the
    IR LLVM compiles grows with them): fewer vectors for a longer chain, none once two copies
    would not fit."""
    from hlofuse.codegen.kernels import cpu_loop

    dims = (256, 4096)
    ops = (CHAIN * 5)[:length]
    count = cpu_loop.interleave_count(_comp(_unary_chain(dims, ops)), cpu_loop.loop_shape(dims), 512)
    budget = cpu_loop._INTERLEAVE_BUDGET
    assert count * length <= budget or count == 1
    assert count == 1 or count == cpu_loop._INTERLEAVE or 2 * count * length > budget
    assert (count == 1) == (2 * length > budget)


@pytest.mark.parametrize("ops,want", [(["sqrt"], 2), (["rsqrt", "sqrt"], 2), (["sqrt", "exponential"], 8)])
def test_divider_only_elements_interleave_two_vectors(ops, want):
    """Divides and square roots are instructions of the core's divider, not long chains: two
    interleaved vectors hide their latency, eight spilled registers (cpu_loop._DIVIDER_MATH)."""
    from hlofuse.codegen.kernels.cpu_loop import interleave_count, loop_shape

    text = _unary_chain((256, 1024), ops)
    assert interleave_count(_comp(text), loop_shape((256, 1024)), 512) == want


@pytest.mark.parametrize("ops", [["negate"], ["abs", "negate"], ["convert"]])
def test_loops_without_math_keep_llvms_choice(ops):
    from hlofuse.codegen.kernels.cpu_loop import interleave_count, loop_shape

    text = _unary_chain((256, 1024), ops)
    assert interleave_count(_comp(text), loop_shape((256, 1024)), 512) == 1


@pytest.mark.parametrize("dims", [(64, 1000), (16, 4096), (3001,)])
@pytest.mark.usefixtures("kernels_at_o3")
def test_latency_bound_loops_are_interleaved_and_exact(dims):
    """A chain of transcendentals is interleaved (LLVM honours the hint: the optimized kernel
    holds at least twice the vector divides of the kernel compiled without it, where the
    vectorised loop has one copy of each); results equal the unhinted kernel's bit for bit,
    including a row whose length leaves a remainder (1000 = 7 x 128 + 104) and a flat loop."""
    from hlofuse.codegen.kernels import cpu_loop

    text = _unary_chain(dims, CHAIN)
    prog = CpuProgram.compile(parse_hlo(text), cache=False)
    hinted = len(VECTOR_DIVIDES.findall(prog.llvm_ir()))
    x = np.random.default_rng(len(dims)).standard_normal(dims).astype(np.float32) * 3
    (got,) = prog.run([x])
    saved = cpu_loop._INTERLEAVE
    try:  # llvm_ir() emits the kernels again: read it while the patch holds
        cpu_loop._INTERLEAVE = 1
        plain = CpuProgram.compile(parse_hlo(text), cache=False)
        unhinted = len(VECTOR_DIVIDES.findall(plain.llvm_ir()))
    finally:
        cpu_loop._INTERLEAVE = saved
    assert unhinted >= 1 and hinted >= 2 * unhinted, (hinted, unhinted)
    np.testing.assert_array_equal(got, plain.run([x])[0])
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(x)[0]
    for r in compare_outputs([got], [want]):
        assert r.ok, r


def _gates(n: int, wide: bool) -> str:
    """LSTM gates over f32[n,128] rows, as JAX lowers them: the four gates column slices of
    one f32[n,512] (`wide`, jnp.split) or four f32[n,128] parameters; three sigmoids as
    1 / (1 + exp(-x)) and two tanh: 8 math functions."""
    if wide:
        head = f"  z = f32[{n},512] parameter(0)\n" + "".join(
            f"  {g} = f32[{n},128] slice(z), slice={{[0:{n}], [{128 * k}:{128 * k + 128}]}}\n" for k, g in enumerate("ifgo"))
    else:
        head = "".join(f"  {g} = f32[{n},128] parameter({k})\n" for k, g in enumerate("ifgo"))
    s = f"f32[{n},128]"
    sigmoid = "".join(f"  n{g} = {s} negate({g})\n  e{g} = {s} exponential(n{g})\n  a{g} = {s} add(e{g}, one)\n"
                      f"  s{g} = {s} divide(one, a{g})\n" for g in "ifo")
    return (f"HloModule g\nENTRY e {{\n{head}  c = {s} parameter({1 if wide else 4})\n  k1 = f32[] constant(1)\n"
            f"  one = {s} broadcast(k1), dimensions={{}}\n{sigmoid}  tg = {s} tanh(g)\n  m1 = {s} multiply(sf, c)\n"
            f"  m2 = {s} multiply(si, tg)\n  c2 = {s} add(m1, m2)\n  tc = {s} tanh(c2)\n  h = {s} multiply(so, tc)\n"
            f"  ROOT t = ({s}, {s}) tuple(h, c2)\n}}\n")


@pytest.mark.parametrize("bits,wide,want", [
    (512, True, 8),  # slices of a wider row: the whole 128-element row (8 x 16 lanes) an iteration
    (512, False, 4),  # contiguous rows: the copies budget (8 math functions x 8 > 48) halves it
    (256, True, 4),  # 8 lanes: a row is 16 vectors, more than _INTERLEAVE: the budget's count
])
def test_rows_read_from_wider_rows_are_walked_whole(bits, wide, want):
    """cpu_loop._reads_wider_rows: a loop reading column slices of a wider operand walks a row
    of up to _INTERLEAVE vectors in one iteration, over the copies budget."""
    from hlofuse.codegen.kernels.cpu_loop import interleave_count, loop_shape

    assert interleave_count(_comp(_gates(64, wide)), loop_shape((64, 128)), bits) == want


def test_rows_walked_whole_are_exact():
    """The gates over slices, walked a row an iteration, equal the kernel interleaved by the
    budget bit for bit, and the interpreter within tolerance."""
    from hlofuse.codegen.kernels import cpu_loop

    text = _gates(300, True)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((300, 512)).astype(np.float32) * 2, rng.standard_normal((300, 128)).astype(np.float32)]
    got = CpuProgram.compile(parse_hlo(text), cache=False).run(args)
    saved = cpu_loop._reads_wider_rows
    try:
        cpu_loop._reads_wider_rows = lambda params, row: False
        plain = CpuProgram.compile(parse_hlo(text), cache=False).run(args)
    finally:
        cpu_loop._reads_wider_rows = saved
    for g, p in zip(got, plain):
        np.testing.assert_array_equal(g, p)
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
