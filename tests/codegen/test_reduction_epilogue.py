"""Reduction epilogues that read the reduce result at another index (reverse, transpose, slice,
broadcast, reshape, pad, concatenate, dynamic-slice, and combinations).

A reduction kernel holds one output element's accumulated value at a time, so an epilogue
evaluated at output index i may only read the reduce at index i; anything else must leave the
reduction kernel (the reduce is materialized, and the epilogue runs as a loop kernel). Each
case runs three ways on the CPU and the emulated GPU: hand-fused into one kInput fusion (which
forces the reduction kernel's planning on every target), through the target's own fusion, and
unfused; every result must equal the interpreter's on the plain module exactly (s32 inputs,
so there is no rounding to excuse a difference).
"""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels.args import output_leaves
from hlofuse.codegen.kernels.reduction_groups import reads_heroes_at_output_index
from hlofuse.codegen.planning import plan_fusion
from hlofuse.hlo.parser import parse_hlo

TARGETS = ["cpu", "gpu-emulated"]

ADD = """add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] add(a, b)
}
"""

# Reduce layouts with output dimensions [4,6] (or [6,6] for the square ones): which dims are
# reduced decides the CPU loop order (row / column) and the GPU kernel kind (per_output for
# R <= 32, row, column).
LAYOUTS = {
    "row": ([4, 6, 40], [2]),
    "column": ([40, 4, 6], [0]),
    "small": ([3, 4, 6], [0]),
    "row2": ([4, 6, 5, 8], [2, 3]),
}
SQUARE = {
    "row": ([6, 6, 40], [2]),
    "column": ([40, 6, 6], [0]),
    "small": ([3, 6, 6], [0]),
}

# Epilogues of s = s32[4,6] (the reduce); `s2` is a second reduce of the same input with the
# same dimensions (multiply reducer), `k` an s32[] parameter. Each is a list of instruction
# lines, the last one the ROOT.
EPILOGUES = {
    "reverse0": ["ROOT r = s32[4,6] reverse(s), dimensions={0}"],
    "reverse1": ["ROOT r = s32[4,6] reverse(s), dimensions={1}"],
    "reverse01": ["ROOT r = s32[4,6] reverse(s), dimensions={0,1}"],
    "reverse_plus_self": ["v = s32[4,6] reverse(s), dimensions={1}", "ROOT r = s32[4,6] add(v, s)"],
    "transpose_rect": ["ROOT r = s32[6,4] transpose(s), dimensions={1,0}"],
    "slice": ["ROOT r = s32[2,3] slice(s), slice={[1:3], [1:6:2]}"],
    "slice_pad": ["pv = s32[] constant(-7)",
                  "q = s32[4,8] pad(s, pv), padding=0_0x1_1",
                  "ROOT r = s32[4,6] slice(q), slice={[0:4], [0:6]}"],
    "pad_interior": ["pv = s32[] constant(-7)", "ROOT r = s32[5,12] pad(s, pv), padding=1_0_0x1_0_1"],
    "pad_negative": ["pv = s32[] constant(-7)", "ROOT r = s32[4,6] pad(s, pv), padding=0_0x-1_1"],
    "rotate_concat": ["a = s32[4,2] slice(s), slice={[0:4], [4:6]}",
                      "c = s32[4,4] slice(s), slice={[0:4], [0:4]}",
                      "ROOT r = s32[4,6] concatenate(a, c), dimensions={1}"],
    "concat_self": ["ROOT r = s32[8,6] concatenate(s, s), dimensions={0}"],
    "dynamic_slice": ["cc = s32[4,12] concatenate(s, s), dimensions={1}",
                      "zero = s32[] constant(0)",
                      "ROOT r = s32[4,6] dynamic-slice(cc, zero, k), dynamic_slice_sizes={4,6}"],
    "reshape_reverse": ["f = s32[24] reshape(s)", "v = s32[24] reverse(f), dimensions={0}",
                        "ROOT r = s32[4,6] reshape(v)"],
    "reshape_regroup": ["ROOT r = s32[6,4] reshape(s)"],
    "broadcast_up": ["ROOT r = s32[4,3,6] broadcast(s), dimensions={0,2}"],
    "broadcast_rows": ["t = s32[4,1] slice(s), slice={[0:4], [5:6]}",
                       "u = s32[4] reshape(t)",
                       "ROOT r = s32[4,6] broadcast(u), dimensions={0}"],
    "multiply_by_iota": ["i = s32[4,6] iota(), iota_dimension=1", "ROOT r = s32[4,6] multiply(s, i)"],
    "two_heroes": ["v = s32[4,6] reverse(s2), dimensions={0}", "ROOT r = s32[4,6] subtract(s, v)"],
    "multi_output": ["v = s32[4,6] reverse(s), dimensions={1}",
                     "w = s32[4,6] multiply(s, s)",
                     "ROOT r = (s32[4,6], s32[4,6], s32[4,6]) tuple(s, v, w)"],
    "multi_output_two_reduces": ["v = s32[6,4] transpose(s2), dimensions={1,0}",
                                 "ROOT r = (s32[4,6], s32[6,4], s32[4,6]) tuple(s, v, s2)"],
    "chain": ["n = s32[4,6] negate(s)", "v = s32[4,6] reverse(n), dimensions={0}",
              "a = s32[4,6] add(v, s)", "ROOT r = s32[4,6] reverse(a), dimensions={1}"],
}

SQUARE_EPILOGUES = {
    "transpose": ["ROOT r = s32[6,6] transpose(s), dimensions={1,0}"],
    "broadcast_transposed": ["ROOT r = s32[6,6] broadcast(s), dimensions={1,0}"],
    "transpose_add": ["t = s32[6,6] transpose(s), dimensions={1,0}", "ROOT r = s32[6,6] add(t, s)"],
    "identity_ops": ["t = s32[6,6] transpose(s), dimensions={0,1}",
                     "u = s32[6,6] broadcast(t), dimensions={0,1}",
                     "ROOT r = s32[6,6] reshape(u)"],
}

# Elementwise epilogues (and identity forms of the data ops) stay in the reduction kernel.
IN_KERNEL = {"multiply_by_iota", "identity_ops"}


def _modules(in_dims, rdims, out_dims, lines) -> tuple[str, str, list[str]]:
    """The plain module, the same computation hand-fused into one kInput fusion, and the
    parameter shapes."""
    t_in = f"s32[{','.join(map(str, in_dims))}]"
    t_out = f"s32[{','.join(map(str, out_dims))}]"
    rd = ",".join(map(str, rdims))
    body = [
        f"s = {t_out} reduce(x, z), dimensions={{{rd}}}, to_apply=add",
        f"s2 = {t_out} reduce(x, one), dimensions={{{rd}}}, to_apply=mul",
    ]
    uses_k = any(" k)" in ln or ", k" in ln for ln in lines)
    uses_s2 = any("s2" in ln for ln in lines)
    if not uses_s2:
        body = body[:1]
    shape = lines[-1].split("=", 1)[1].strip()
    res = shape[:shape.index(")") + 1] if shape.startswith("(") else shape.split()[0]
    params = [t_in] + (["s32[]"] if uses_k else [])
    consts = ["z = s32[] constant(0)", "one = s32[] constant(1)"]
    mul = "mul {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT c = s32[] multiply(a, b)\n}\n"
    head = ["x = {} parameter(0)".format(t_in)] + (["k = s32[] parameter(1)"] if uses_k else [])
    inner = "\n  ".join(head + consts + body + lines)
    plain = f"HloModule plain\n{ADD}{mul}ENTRY e {{\n  {inner}\n}}\n"
    fparams = ", ".join(["p0"] + (["p1"] if uses_k else []))
    entry_params = "\n  ".join([f"p0 = {t_in} parameter(0)"] + (["p1 = s32[] parameter(1)"] if uses_k else []))
    fused = (f"HloModule fused\n{ADD}{mul}fc {{\n  {inner}\n}}\nENTRY e {{\n  {entry_params}\n"
             f"  ROOT f = {res} fusion({fparams}), kind=kInput, calls=fc\n}}\n")
    return plain, fused, params


def _args(in_dims, uses_k: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(sum(in_dims))
    # Small values keep the multiply reducer's products meaningful (wrapping is exact either way).
    x = rng.integers(-3, 4, size=in_dims).astype(np.int32)
    return [x] + ([np.int32(5)] if uses_k else [])


def _check_all(plain: str, fused: str, args, name: str) -> None:
    want = hlofuse.compile(parse_hlo(plain), target="interpreter")(*args)
    for target in TARGETS:
        for label, text, fusion in (("hand-fused", fused, False), ("fused", plain, True), ("unfused", plain, False)):
            got = hlofuse.compile(parse_hlo(text), target=target, fusion=fusion)(*args)
            assert len(got) == len(want)
            for j, (g, w) in enumerate(zip(got, want)):
                np.testing.assert_array_equal(g, w, err_msg=f"{name}: {target} {label}, output {j}")


def _case(layouts, epilogues, out_dims):
    return [pytest.param(layouts[lk], epilogues[ek], out_dims, ek, id=f"{lk}-{ek}")
            for lk in layouts for ek in epilogues]


@pytest.mark.parametrize("layout,lines,out_dims,name",
                         _case(LAYOUTS, EPILOGUES, [4, 6]) + _case(SQUARE, SQUARE_EPILOGUES, [6, 6]))
def test_epilogue_matches_interpreter(layout, lines, out_dims, name):
    """Every index-remapping epilogue, on every reduce layout, fused by hand, by the compiler
    and not at all, on the CPU and the emulated GPU, equals the interpreter exactly."""
    in_dims, rdims = layout
    plain, fused, params = _modules(in_dims, rdims, out_dims, lines)
    _check_all(plain, fused, _args(in_dims, len(params) > 1), name)


def _planned(fused: str):
    module = parse_hlo(fused)
    comp = module.entry.root.attrs["calls"]
    return plan_fusion(comp, "f")[0]


@pytest.mark.parametrize("name", sorted(set(EPILOGUES) | set(SQUARE_EPILOGUES)))
def test_epilogue_planning(name):
    """Elementwise epilogues (and identity data ops) stay in the single reduction kernel;
    an epilogue that reads the reduce at another index is not in a reduction kernel's
    epilogue: it is written by a loop kernel after the reduce is materialized."""
    lines, out_dims = (EPILOGUES[name], [4, 6]) if name in EPILOGUES else (SQUARE_EPILOGUES[name], [6, 6])
    in_dims, rdims = ([out_dims[0], out_dims[1], 40], [2])
    _, fused, _ = _modules(in_dims, rdims, out_dims, lines)
    kernels = _planned(fused)
    if name in IN_KERNEL:
        assert len(kernels) == 1 and kernels[0].group is not None
        return
    for kp in kernels:
        if kp.group is None:
            continue
        leaves = output_leaves(kp.comp)
        for k in kp.group.epilogue:
            assert reads_heroes_at_output_index(leaves[k].inst, kp.group.heroes)
    assert any(kp.group is None for kp in kernels), f"{name}: no loop kernel for the remapping epilogue"


def test_issue_example_reverse_after_column_reduce():
    """The reported case: reverse(reduce over dim 0) of [[0,1],[2,3],[4,5]] is [9, 6]
    (numpy: the column sums [6, 9], reversed)."""
    text = ADD.join(["HloModule m\n", """ENTRY e {
  p = s32[3,2] parameter(0)
  z = s32[] constant(0)
  s = s32[2] reduce(p, z), dimensions={0}, to_apply=add
  ROOT r = s32[2] reverse(s), dimensions={0}
}
"""])
    x = np.arange(6, dtype=np.int32).reshape(3, 2)
    want = x.sum(axis=0)[::-1]
    for target in ("interpreter", *TARGETS):
        for fusion in (True, False):
            got = hlofuse.compile(parse_hlo(text), target=target, fusion=fusion)(x)[0]
            np.testing.assert_array_equal(got, want, err_msg=f"{target} fusion={fusion}")


def test_split_row_reduction_epilogue():
    """A row reduction with few outputs and many elements is split across cores (partial and
    combine kernels) on the CPU; a reversing epilogue must not ride in its combine kernel."""
    in_dims, rdims, out_dims = [2, 3, 1 << 16], [2], [2, 3]
    lines = ["ROOT r = s32[2,3] reverse(s), dimensions={0,1}"]
    plain, fused, _ = _modules(in_dims, rdims, out_dims, lines)
    args = _args(in_dims, False)
    want = hlofuse.compile(parse_hlo(plain), target="interpreter")(*args)
    np.testing.assert_array_equal(want[0], args[0].sum(axis=2)[::-1, ::-1])
    for text, fusion in ((fused, False), (plain, True)):
        got = hlofuse.compile(parse_hlo(text), target="cpu", fusion=fusion)(*args)
        np.testing.assert_array_equal(got[0], want[0])


def test_full_reduction_scalar_epilogue():
    """A full reduction's single element may be read at any index: broadcast, reshape and
    slice of the scalar stay correct (and stay in the reduction kernel when the result is a scalar)."""
    lines = ["b = s32[4] broadcast(s), dimensions={}", "v = s32[1] slice(b), slice={[2:3]}",
             "ROOT r = s32[] reshape(v)"]
    plain, fused, _ = _modules([5, 8], [0, 1], [], lines)
    args = _args([5, 8], False)
    _check_all(plain, fused, args, "full")
    assert len(_planned(fused)) == 1
    np.testing.assert_array_equal(hlofuse.compile(parse_hlo(plain), target="interpreter")(*args)[0],
                                  args[0].sum())
