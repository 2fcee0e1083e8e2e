"""Shape-generic elementwise loop kernels (codegen/generic_kernels.py): fusions that differ only
in their arrays' sizes compile to one kernel (per canonical row length and streaming class),
each launch walking its own rows; their values are the interpreter's, bit for bit; kernels that
are not purely elementwise over one row-major shape keep their own shape; and the IR emitted for
a kernel does not depend on its size."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import generic_kernels
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.generic_kernels import canonical_row, generic_elements
from hlofuse.codegen.kernel_key import kernel_text
from hlofuse.codegen.kernels import cpu_row
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.interpreter import evaluate

NONTEMPORAL = re.compile(r"store <\d+ x (?:float|double|i32|i64)> .*!nontemporal")


def _shape(ty: str, dims) -> str:
    return f"{ty}[{','.join(map(str, dims))}]"


def _axpy(i: int, ty: str, dims) -> tuple[str, str]:
    """Fused computation `f{i}`: (a * s + b, max(a * s + b, c)) over `dims` of `ty`, with s a
    scalar parameter broadcast and c a broadcast constant: two outputs."""
    s = _shape(ty, dims)
    comp = (f"f{i} {{\n  a = {s} parameter(0)\n  b = {s} parameter(1)\n  x = {ty}[] parameter(2)\n"
            f"  xb = {s} broadcast(x), dimensions={{}}\n  m = {s} multiply(a, xb)\n  r = {s} add(m, b)\n"
            f"  c = {ty}[] constant(3)\n  cb = {s} broadcast(c), dimensions={{}}\n"
            f"  h = {s} maximum(r, cb)\n  ROOT t = ({s}, {s}) tuple(r, h)\n}}\n")
    return comp, s


def _module(ty: str, sizes: list) -> str:
    """One `_axpy` fusion per entry of `sizes` (dimensions), each on its own parameters."""
    comps, params, calls, outs = [], [f"  x = {ty}[] parameter(0)"], [], []
    for i, dims in enumerate(sizes):
        comp, s = _axpy(i, ty, dims)
        comps.append(comp)
        params += [f"  a{i} = {s} parameter({2 * i + 1})", f"  b{i} = {s} parameter({2 * i + 2})"]
        calls.append(f"  f{i} = ({s}, {s}) fusion(a{i}, b{i}, x), kind=kLoop, calls=f{i}")
        outs.append(f"f{i}")
    shapes = ", ".join(f"({_shape(ty, d)}, {_shape(ty, d)})" for d in sizes)
    return ("HloModule generic\n\n" + "\n".join(comps) + "\nENTRY e {\n" + "\n".join(params + calls)
            + f"\n  ROOT out = ({shapes}) tuple({', '.join(outs)})\n}}\n")


def _inputs(module) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    out = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        dims = p.shape.dims
        if np.issubdtype(dt, np.integer):
            out.append(rng.integers(-1000, 1000, dims).astype(dt))
        else:
            out.append(rng.uniform(-8, 8, dims).astype(dt))
    return out


def _compile(text: str) -> CpuProgram:
    fused = hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu")[0]
    return CpuProgram.compile(fused, cache=False)


def _check(text: str, prog: CpuProgram) -> None:
    """`prog`'s outputs equal the interpreter's bit for bit."""
    module = hlofuse.parse_hlo(text)
    args = _inputs(module)
    got = prog.run(args)
    want = evaluate(module, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("ty", ["f32", "f64", "s32", "u8"])
def test_fusions_of_different_sizes_compile_to_one_kernel(ty):
    """Four sizes whose element counts are multiples of 1024 (ranks 1 to 3): one kernel."""
    sizes = [(64, 48), (4096,), (2, 8, 128), (3, 1024)]
    text = _module(ty, sizes)
    prog = _compile(text)
    code = prog.code
    assert len(code.kernels) == len(sizes)
    assert len(code.objects) == code.compiled_count == 1
    assert sorted((k.units, k.unit_elements) for k in code.kernels) == [(2, 1024), (3, 1024), (3, 1024), (4, 1024)]
    _check(text, prog)


def test_row_lengths_are_classes():
    """Element counts with different canonical rows (1024, 512, 32) are three kernels; a
    fourth size of an existing class adds none."""
    sizes = [(32, 32), (3, 512), (5, 32), (7, 32), (8, 128)]
    text = _module("f32", sizes)
    prog = _compile(text)
    rows = sorted(k.unit_elements for k in prog.code.kernels)
    assert rows == [32, 32, 512, 1024, 1024]
    assert prog.code.compiled_count == 3
    _check(text, prog)


def test_canonical_row_is_the_longest_dividing_row():
    assert canonical_row(1 << 20) == 1024
    assert canonical_row(3 * 512) == 512
    assert canonical_row(96) == 32
    assert canonical_row(100) is None and canonical_row(0) is None and canonical_row(16) is None


def test_streaming_and_plain_kernels_are_two_classes(monkeypatch):
    """With an L3 of 64 KiB, kernels moving more stream their rows (cpu_loop.streams_rows) and
    those moving less do not: one kernel per class, each size of the streaming class writing
    with non-temporal stores, values unchanged."""
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 << 10)
    sizes = [(1024,), (2, 1024), (64, 1024), (96, 1024)]  # 16 and 32 KiB moved; 1 and 1.5 MiB
    text = _module("f32", sizes)
    prog = _compile(text)
    assert prog.code.compiled_count == 2
    streaming = [o for o in prog.code.objects if NONTEMPORAL.search(str(emit_kernel_module(o.kernels[0], CpuTarget(), "k")))]
    assert len(streaming) == 1 and sorted(k.units for k in streaming[0].kernels) == [64, 96]
    _check(text, prog)


def _planned(text: str) -> CpuCode:
    fused = hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    return code


def _names_removed(ir_text: str) -> str:
    return re.sub(r'%"?[\w.$-]+"?', "%v", ir_text)


def test_emitted_ir_does_not_depend_on_the_size():
    """The same structure over [64,48] and [2,8,128], each in a module of its own: after
    `generic_kernels` the emitted IR is identical up to value names (before, it is not)."""
    texts = [_module("f32", [dims]) for dims in [(64, 48), (2, 8, 128)]]
    codes = [_planned(t) for t in texts]
    before = [_names_removed(str(emit_kernel_module(c.kernels[0], CpuTarget(), "k"))) for c in codes]
    assert before[0] != before[1]
    for c in codes:
        assert generic_kernels.generic_kernels(c.kernels, CpuTarget()) == c.kernels
    after = [_names_removed(str(emit_kernel_module(c.kernels[0], CpuTarget(), "k"))) for c in codes]
    assert after[0] == after[1]
    assert kernel_text(codes[0].kernels[0]) == kernel_text(codes[1].kernels[0])
    assert [(c.kernels[0].units, c.kernels[0].unit_elements) for c in codes] == [(3, 1024), (2, 1024)]


INELIGIBLE = {
    "a non-scalar broadcast": """HloModule m
ENTRY e {
  a = f32[64,32] parameter(0)
  v = f32[32] parameter(1)
  vb = f32[64,32] broadcast(v), dimensions={1}
  ROOT r = f32[64,32] add(a, vb)
}
""",
    "a transpose": """HloModule m
ENTRY e {
  a = f32[64,32] parameter(0)
  b = f32[32,64] parameter(1)
  t = f32[64,32] transpose(b), dimensions={1,0}
  ROOT r = f32[64,32] add(a, t)
}
""",
    "a column-major layout": """HloModule m
ENTRY e {
  a = f32[64,32]{0,1} parameter(0)
  b = f32[64,32]{0,1} parameter(1)
  ROOT r = f32[64,32]{0,1} multiply(a, b)
}
""",
    "an element count not divisible by 32": """HloModule m
ENTRY e {
  a = f32[10,10] parameter(0)
  b = f32[10,10] parameter(1)
  ROOT r = f32[10,10] multiply(a, b)
}
""",
    "an iota": """HloModule m
ENTRY e {
  a = s32[64,32] parameter(0)
  i = s32[64,32] iota(), iota_dimension=1
  ROOT r = s32[64,32] add(a, i)
}
""",
    "outputs of two shapes (a kernel per shape, each writing some outputs)": """HloModule m
f {
  a = f32[64,32] parameter(0)
  b = f32[64] parameter(1)
  m = f32[64,32] multiply(a, a)
  n = f32[64] negate(b)
  ROOT t = (f32[64,32], f32[64]) tuple(m, n)
}
ENTRY e {
  a = f32[64,32] parameter(0)
  b = f32[64] parameter(1)
  ROOT r = (f32[64,32], f32[64]) fusion(a, b), kind=kLoop, calls=f
}
""",
}


@pytest.mark.parametrize("why", list(INELIGIBLE))
def test_ineligible_kernels_keep_their_shape(why):
    text = INELIGIBLE[why]
    code = _planned(text)
    before = [(k.comp, k.units, k.unit_elements) for k in code.kernels]
    assert all(generic_elements(k) is None for k in code.kernels), why
    assert generic_kernels.generic_kernels(code.kernels, CpuTarget()) == []
    assert [(k.comp, k.units, k.unit_elements) for k in code.kernels] == before
    _check(text, _compile(text))


def test_switched_off_every_size_is_its_own_kernel(monkeypatch):
    """GENERIC_KERNELS off (for A/B measurements): one kernel per size, as before."""
    monkeypatch.setattr(generic_kernels, "GENERIC_KERNELS", False)
    sizes = [(64, 48), (4096,)]
    text = _module("f32", sizes)
    prog = _compile(text)
    assert prog.code.compiled_count == 2
    _check(text, prog)


def test_one_structure_compiles_at_one_level():
    """A generic kernel chosen for the small level whose structure another size compiles at O3
    runs that kernel (`shared_levels`); where every size is small, all stay small."""
    code = _planned(_module("f32", [(64, 48), (2, 8, 128)]))
    changed = generic_kernels.generic_kernels(code.kernels, CpuTarget())
    first, second = changed
    assert generic_kernels.shared_levels(changed, {id(first), 7}) == {7}
    both = {id(first), id(second)}
    assert generic_kernels.shared_levels(changed, both) == both
    assert generic_kernels.shared_levels([], {id(first)}) == {id(first)}


def test_the_dump_shows_the_kernels_as_compiled(tmp_path):
    """`hlofuse compile --dump-dir` plans as compile_cpu does (cpu.plan_cpu): the kernels of two
    sizes of one structure are in their size-free form there too, with one kernel text."""
    from hlofuse.dump import _plan

    text = _module("f32", [(64, 32), (16, 256)])
    fused = hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu")[0]
    program = _plan(fused, "cpu")
    loops = [k for k in program.kernels if k.custom is None and k.group is None]
    assert len(loops) == 2 and all(k.comp.name.endswith(".generic") for k in loops)
    assert len({kernel_text(k) for k in loops}) == 1
    assert sorted(k.units * k.unit_elements for k in loops) == [64 * 32, 16 * 256]
