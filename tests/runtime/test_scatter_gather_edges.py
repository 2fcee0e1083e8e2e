"""gather, scatter, dynamic-slice and dynamic-update-slice at the edges: index types u8, u32,
u64, s8, s64 (and s32) with in-range, negative and out-of-range values, and zero-size
operands, indices and updates. XLA clamps gather / dynamic-slice / dynamic-update-slice
starts into bounds and skips scatter windows that leave the operand. The interpreter is
checked against XLA:CPU (tests/xla_oracle.py) where jaxlib is available, and the compiled
backends (cpu fused and unfused, gpu-emulated) against the interpreter."""
from __future__ import annotations

import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse

BACKENDS = [("cpu", True), ("cpu", False), ("gpu-emulated", True)]
INDEX_TYPES = {"u8": np.uint8, "u32": np.uint32, "u64": np.uint64, "s8": np.int8, "s32": np.int32, "s64": np.int64}
VALUES = [0, 2, 3, 4, 7, 127, 255, 2**31, 2**32 - 1, 2**63, 2**64 - 1, -1, -128, -(2**63)]
ADD = "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"


def representable(ty: str, v: int) -> bool:
    info = np.iinfo(INDEX_TYPES[ty])
    return info.min <= v <= info.max


def index_cases() -> list[tuple[str, int]]:
    return [(ty, v) for ty in INDEX_TYPES for v in VALUES if representable(ty, v)]


def modules(ty: str) -> dict[str, str]:
    """One module per op, taking (operand, index[, updates])."""
    return {
        "scatter": f"HloModule m\n{ADD}ENTRY e {{ o = f32[5] parameter(0)\n i = {ty}[2,1] parameter(1)\n"
                   f" u = f32[2] parameter(2)\n ROOT s = f32[5] scatter(o, i, u), update_window_dims={{}}, "
                   "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add }",
        "scatter_window": f"HloModule m\n{ADD}ENTRY e {{ o = f32[5,3] parameter(0)\n i = {ty}[2,1] parameter(1)\n"
                          f" u = f32[2,2,3] parameter(2)\n ROOT s = f32[5,3] scatter(o, i, u), "
                          "update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, "
                          "index_vector_dim=1, to_apply=add }",
        "gather": f"HloModule m\nENTRY e {{ o = f32[5,3] parameter(0)\n i = {ty}[2,1] parameter(1)\n"
                  " ROOT g = f32[2,2,3] gather(o, i), offset_dims={1,2}, collapsed_slice_dims={}, "
                  "start_index_map={0}, index_vector_dim=1, slice_sizes={2,3} }",
        "dynamic_slice": f"HloModule m\nENTRY e {{ o = f32[5] parameter(0)\n i = {ty}[] parameter(1)\n"
                         " ROOT d = f32[2] dynamic-slice(o, i), dynamic_slice_sizes={2} }",
        "dynamic_update_slice": f"HloModule m\nENTRY e {{ o = f32[5] parameter(0)\n u = f32[2] parameter(1)\n"
                                f" i = {ty}[] parameter(2)\n ROOT d = f32[5] dynamic-update-slice(o, u, i) }}",
    }


def arguments(op: str, ty: str, v: int) -> list:
    dt = INDEX_TYPES[ty]
    pair = np.array([[v], [1]], dtype=dt)  # the second index stays in bounds
    if op == "scatter":
        return [np.zeros(5, np.float32), pair, np.array([1, 2], np.float32)]
    if op == "scatter_window":
        return [np.zeros((5, 3), np.float32), pair, np.arange(12, dtype=np.float32).reshape(2, 2, 3) + 1]
    if op == "gather":
        return [np.arange(15, dtype=np.float32).reshape(5, 3), pair]
    if op == "dynamic_slice":
        return [np.arange(5, dtype=np.float32), dt(v)]
    return [np.zeros(5, np.float32), np.array([8, 9], np.float32), dt(v)]


OPS = ["scatter", "scatter_window", "gather", "dynamic_slice", "dynamic_update_slice"]


def _params():
    return [pytest.param(op, ty, v, id=f"{op}-{ty}-{v}") for op in OPS for ty, v in index_cases()]


@pytest.mark.parametrize("op,ty,v", _params())
def test_compiled_matches_interpreter(op: str, ty: str, v: int) -> None:
    module = hlofuse.parse_hlo(modules(ty)[op])
    args = arguments(op, ty, v)
    want = hlofuse.compile(module, target="interpreter")(*args)
    for target, fusion in BACKENDS:
        got = hlofuse.compile(module, target=target, fusion=fusion)(*args)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w, err_msg=f"{target} fusion={fusion}")


needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA client is not available")


@needs_xla
@pytest.mark.parametrize("op,ty,v", [pytest.param(op, ty, v, id=f"{op}-{ty}-{v}") for op in OPS
                                     for ty, v in index_cases()])
def test_interpreter_matches_xla(op: str, ty: str, v: int) -> None:
    text = modules(ty)[op]
    args = arguments(op, ty, v)
    want = run_on_xla(text, args)
    got = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


ZERO_SIZE = {
    "scatter_no_indices": (f"HloModule m\n{ADD}ENTRY e {{ o = f32[5] parameter(0)\n i = s32[0,1] parameter(1)\n"
                           " u = f32[0] parameter(2)\n ROOT s = f32[5] scatter(o, i, u), update_window_dims={}, "
                           "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
                           "to_apply=add }",
                           [np.ones(5, np.float32), np.zeros((0, 1), np.int32), np.zeros(0, np.float32)]),
    "scatter_empty_operand": (f"HloModule m\n{ADD}ENTRY e {{ o = f32[0,3] parameter(0)\n i = u32[2,1] parameter(1)\n"
                              " u = f32[2,3] parameter(2)\n ROOT s = f32[0,3] scatter(o, i, u), "
                              "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                              "index_vector_dim=1, to_apply=add }",
                              [np.ones((0, 3), np.float32), np.zeros((2, 1), np.uint32), np.ones((2, 3), np.float32)]),
    "scatter_empty_windows": (f"HloModule m\n{ADD}ENTRY e {{ o = f32[4,0] parameter(0)\n i = s32[2,1] parameter(1)\n"
                              " u = f32[2,0] parameter(2)\n ROOT s = f32[4,0] scatter(o, i, u), "
                              "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                              "index_vector_dim=1, to_apply=add }",
                              [np.ones((4, 0), np.float32), np.zeros((2, 1), np.int32), np.ones((2, 0), np.float32)]),
    "scatter_empty_update_windows": (f"HloModule m\n{ADD}ENTRY e {{ o = f32[4,3] parameter(0)\n"
                                     " i = u8[2,1] parameter(1)\n u = f32[2,0] parameter(2)\n"
                                     " ROOT s = f32[4,3] scatter(o, i, u), update_window_dims={1}, "
                                     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
                                     "to_apply=add }",
                                     [np.ones((4, 3), np.float32), np.array([[1], [9]], np.uint8),
                                      np.ones((2, 0), np.float32)]),
    "scatter_no_updates_two_operands": (
        "HloModule m\nadd2 { a = f32[] parameter(0)\n b = s32[] parameter(1)\n c = f32[] parameter(2)\n"
        " d = s32[] parameter(3)\n x = f32[] add(a, c)\n y = s32[] add(b, d)\n ROOT t = (f32[], s32[]) tuple(x, y) }\n"
        "ENTRY e { o = f32[3] parameter(0)\n p = s32[3] parameter(1)\n i = s64[0,1] parameter(2)\n"
        " u = f32[0] parameter(3)\n v = s32[0] parameter(4)\n"
        " ROOT s = (f32[3], s32[3]) scatter(o, p, i, u, v), update_window_dims={}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add2 }",
        [np.ones(3, np.float32), np.arange(3, dtype=np.int32), np.zeros((0, 1), np.int64), np.zeros(0, np.float32),
         np.zeros(0, np.int32)]),
    "gather_no_indices": ("HloModule m\nENTRY e { o = f32[5,3] parameter(0)\n i = u32[0,1] parameter(1)\n"
                          " ROOT g = f32[0,3] gather(o, i), offset_dims={1}, collapsed_slice_dims={0}, "
                          "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3} }",
                          [np.ones((5, 3), np.float32), np.zeros((0, 1), np.uint32)]),
    "gather_empty_operand": ("HloModule m\nENTRY e { o = f32[0,3] parameter(0)\n i = s8[2,1] parameter(1)\n"
                             " ROOT g = f32[2,0,3] gather(o, i), offset_dims={1,2}, collapsed_slice_dims={}, "
                             "start_index_map={0}, index_vector_dim=1, slice_sizes={0,3} }",
                             [np.ones((0, 3), np.float32), np.array([[4], [-2]], np.int8)]),
    "gather_empty_slice": ("HloModule m\nENTRY e { o = f32[5,3] parameter(0)\n i = u64[2,1] parameter(1)\n"
                           " ROOT g = f32[2,0,3] gather(o, i), offset_dims={1,2}, collapsed_slice_dims={}, "
                           "start_index_map={0}, index_vector_dim=1, slice_sizes={0,3} }",
                           [np.ones((5, 3), np.float32), np.array([[9], [2]], np.uint64)]),
    "dynamic_slice_empty": ("HloModule m\nENTRY e { o = f32[0,3] parameter(0)\n i = s32[] parameter(1)\n"
                            " j = s32[] parameter(2)\n ROOT d = f32[0,2] dynamic-slice(o, i, j), "
                            "dynamic_slice_sizes={0,2} }",
                            [np.ones((0, 3), np.float32), np.int32(1), np.int32(5)]),
    "dynamic_update_slice_empty_update": ("HloModule m\nENTRY e { o = f32[4] parameter(0)\n u = f32[0] parameter(1)\n"
                                          " i = u8[] parameter(2)\n ROOT d = f32[4] dynamic-update-slice(o, u, i) }",
                                          [np.ones(4, np.float32), np.zeros(0, np.float32), np.uint8(200)]),
}


@pytest.mark.parametrize("name", sorted(ZERO_SIZE))
def test_zero_size(name: str) -> None:
    text, args = ZERO_SIZE[name]
    module = hlofuse.parse_hlo(text)
    want = hlofuse.compile(module, target="interpreter")(*args)
    if xla_available():
        for g, w in zip(want, run_on_xla(text, args)):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    for target, fusion in BACKENDS:
        got = hlofuse.compile(module, target=target, fusion=fusion)(*args)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
