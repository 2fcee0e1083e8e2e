"""HLO text inputs shared by the parser/printer tests: the JAX corpus, golden-test inputs and
hand-written modules covering XLA syntax that JAX rarely produces."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from repo_paths import REPO as ROOT


def corpus_files() -> list[Path]:
    """Every testdata/jax/*.hlo (before and after optimization) and testdata/hlo_text/<pass>/*.hlo."""
    files = sorted((ROOT / "testdata" / "jax").glob("*.hlo"))
    files += sorted((ROOT / "testdata" / "hlo_text").glob("**/*.hlo"))
    return files


def input_text(path: Path) -> str:
    """The module text of a corpus file: golden tests keep their input before the first CHECK line."""
    text = path.read_text()
    cut = text.find("// CHECK")
    return text if cut < 0 else text[:cut]


EDGE_MODULES = {
    "shapes_and_layouts": """HloModule shapes, entry_computation_layout={(f32[8,128]{0,1:T(8,128)}, s32[<=8]{0}, (f32[], token[]))->f32[8,128]{0,1:T(8,128)}}

ENTRY %e (a: f32[8,128], b: s32[<=8], t: (f32[], token[])) -> f32[8,128] {
  %a = f32[8,128]{0,1:T(8,128)} parameter(0)
  %b = s32[<=8]{0} parameter(1)
  %t = (f32[], token[]) parameter(2)
  %tk = token[] get-tuple-element(%t), index=1
  %s = s32[] get-dimension-size(%b), dimensions={0}
  %six = (f32[], f32[], f32[], f32[], f32[], f32[], f32[]) tuple(%s0, %s0, %s0, %s0, %s0, %s0, %s0)
  %s0 = f32[] get-tuple-element(%t), index=0
  ROOT %r = f32[8,128]{0,1:T(8,128)} copy(%a)
}
""",
    "constants": """HloModule constants

ENTRY %e () -> (f32[4], bf16[3], c64[2], pred[3], s8[2,0], u64[2], f8e4m3fn[2], f16[2,2,1,1], s4[3], f64[2]) {
  %a = f32[4]{0} constant({inf, -inf, nan, 1.17549435e-38})
  %b = bf16[3]{0} constant({0.1001, -3, 65280})
  %c = c64[2]{0} constant({(1, 2), (-0.5, 1e+20)})
  %d = pred[3]{0} constant({1, 0, 1})
  %e = s8[2,0]{1,0} constant({ {}, {} })
  %f = u64[2]{0} constant({0, 18446744073709551615})
  %g = f8e4m3fn[2]{0} constant({448, -0.001953125})
  %h = f16[2,2,1,1]{3,2,1,0} constant({ { /*i0=0*/ { /*i1=0*/ {1} }, { /*i1=1*/ {2} } }, { /*i0=1*/ { /*i1=0*/ {3} }, { /*i1=1*/ {4} } } })
  %i = s4[3]{0} constant({-8, 0, 7})
  %j = f64[2]{0} constant({0.1, 1e-300})
  %p = pred[] constant(false)
  %z = f32[1000]{0} constant({...})
  ROOT %t = (f32[4]{0}, bf16[3]{0}, c64[2]{0}, pred[3]{0}, s8[2,0]{1,0}, /*index=5*/u64[2]{0}, f8e4m3fn[2]{0}, f16[2,2,1,1]{3,2,1,0}, s4[3]{0}, f64[2]{0}) tuple(%a, %b, %c, %d, %e, %f, %g, %h, %i, %j)
}
""",
    "control_flow_and_attributes": """HloModule cf, replica_count=2

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%cond (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (bp: (s32[], f32[4])) -> (s32[], f32[4]) {
  %bp = (s32[], f32[4]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%bp), index=0
  %one = s32[] constant(1)
  %i1 = s32[] add(%bi, %one)
  %v = f32[4]{0} get-tuple-element(%bp), index=1
  %v2 = f32[4]{0} multiply(%v, %v)
  ROOT %t = (s32[], f32[4]{0}) tuple(%i1, %v2)
}

%fused (p0: f32[4], p1: f32[]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %p1 = f32[] parameter(1)
  %fb = f32[4]{0} broadcast(%p1), dimensions={}
  ROOT %m = f32[4]{0} multiply(%p0, %fb)
}

ENTRY %main (a: f32[4], w: f32[1,5,5,2], k: f32[3,3,2,4], op: f32[5,4], idx: s32[3,1]) -> (f32[4], f32[], f32[4]) {
  %a = f32[4]{0} parameter(0), sharding={replicated}, metadata={op_name="a" source_file="x.py" source_line=1}
  %w = f32[1,5,5,2]{3,2,1,0} parameter(1)
  %k = f32[3,3,2,4]{3,2,1,0} parameter(2)
  %op = f32[5,4]{1,0} parameter(3)
  %idx = s32[3,1]{1,0} parameter(4)
  %zero = f32[] constant(0)
  %init = s32[] constant(0)
  %tup = (s32[], f32[4]{0}) tuple(%init, %a)
  %loop = (s32[], f32[4]{0}) while(%tup), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %res = f32[4]{0} get-tuple-element(%loop), index=1
  %sum = f32[] reduce(%res, %zero), dimensions={0}, to_apply=%add, metadata={op_name="jit(f)/reduce_sum"}
  %f = f32[4]{0} fusion(%res, %sum), kind=kLoop, calls=%fused, control-predecessors={%sum}
  %conv = f32[1,3,3,4]{3,2,1,0} convolution(%w, %k), window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f, operand_precision={highest,highest}
  %g = f32[3,4]{1,0} gather(%op, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
  %sc = f32[5,4]{1,0} scatter(%op, %idx, %g), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  %sl = f32[2]{0} slice(%a), slice={[0:4:2]}
  %pd = f32[9]{0} pad(%a, %zero), padding=1_2_1
  %rw = f32[4]{0} reduce-window(%a, %zero), window={size=3 pad=1_1}, to_apply=%add
  %cc = f32[4]{0} custom-call(%a), custom_call_target="my_target", api_version=API_VERSION_STATUS_RETURNING, backend_config="opaque"
  %ar = f32[4]{0} all-reduce(%a), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  %ob = f32[4]{0} opt-barrier(%ar)
  %c1 = pred[] compare(%sum, %zero), direction=GT, type=TOTALORDER
  %sel = f32[4]{0} select(pred[4]{0} %bsel, %a, %f)
  %bsel = pred[4]{0} broadcast(%c1), dimensions={}
  %it = s32[4,2]{1,0} iota(), iota_dimension=1
  ROOT %out = (f32[4]{0}, f32[], f32[4]{0}) tuple(%sel, %sum, %ob)
}
""",
    # Forms found in XLA's own tests: `name:` after the module name, a header string spanning
    # lines, narrow element types, NaN payloads, 64-bit wrap-around, keys that mean something
    # else on another opcode, custom-call attributes XLA does not check.
    "xla_test_forms": """HloModule forms:, num_partitions=2, frontend_attributes={note="two
lines"}

ENTRY %e (p: f32[8], q: s1[4], r: f4e2m1fn[2,2]) -> (f8e4m3[3], f8e3m4[2], f8e4m3fnuz[2], f8e5m2fnuz[2], f8e4m3b11fnuz[2], /*index=5*/f8e8m0fnu[2], f6e2m3fn[2], f6e3m2fn[2], s2[2], u2[2], /*index=10*/u1[2], bf16[3], f32[2], u64[2], s64[1], /*index=15*/f32[2], f32[8], f32[2]) {
  %p = f32[8]{0} parameter(0)
  %q = s1[4]{0} parameter(1)
  %r = f4e2m1fn[2,2]{1,0} parameter(2)
  %a = f8e4m3[3]{0} constant({1.5, -240, inf})
  %b = f8e3m4[2]{0} constant({0.3, nan(0x3)})
  %c = f8e4m3fnuz[2]{0} constant({0.1, -nan})
  %d = f8e5m2fnuz[2]{0} constant({57344, -1})
  %f = f8e4m3b11fnuz[2]{0} constant({-nan, 7})
  %g = f8e8m0fnu[2]{0} constant({0.5, 1024})
  %h = f6e2m3fn[2]{0} constant({7.5, -0.125})
  %i = f6e3m2fn[2]{0} constant({28, 0.0625})
  %j = s2[2]{0} constant({-2, 1})
  %k = u2[2]{0} constant({0, 3})
  %l = u1[2]{0} constant({1, 0})
  %m = bf16[3]{0} constant({-nan(0x7f), nan(0x1), -nan})
  %n = f32[2]{0} constant({nan(0x123), -nan(0x400001)})
  %o = u64[2]{0} constant({-1, 9223372036854775808})
  %s = s64[1]{0} constant({9223372036854775808})
  %dot = f32[2]{0} dot(%p2, %p2), lhs_contracting_dims={1}, rhs_contracting_dims={1}, algorithm=dot_tf32_tf32_f32
  %p2 = f32[2,4]{1,0} reshape(%p)
  %cp = f32[8]{0} collective-permute(%p, %p, %t0, %t0), source_target_pairs={{0,1},{1,0}}, slice_sizes={{4}}
  %z = s32[] constant(0)
  %t0 = (s32[]) tuple(%z)
  %cc = f32[2]{0} custom-call(%p), custom_call_target="t", window={size=2x2}, dim_labels=?b01f_0?1io->b01?f
  ROOT %out = (f8e4m3[3]{0}, f8e3m4[2]{0}, f8e4m3fnuz[2]{0}, f8e5m2fnuz[2]{0}, f8e4m3b11fnuz[2]{0}, /*index=5*/f8e8m0fnu[2]{0}, f6e2m3fn[2]{0}, f6e3m2fn[2]{0}, s2[2]{0}, u2[2]{0}, /*index=10*/u1[2]{0}, bf16[3]{0}, f32[2]{0}, u64[2]{0}, s64[1]{0}, /*index=15*/f32[2]{0}, f32[8]{0}, f32[2]{0}) tuple(%a, %b, %c, %d, %f, %g, %h, %i, %j, %k, %l, %m, %n, %o, %s, %dot, %cp, %cc)
}
""",
    # Shapes left for the parser to infer and instructions nested in operand lists (XLA's
    # short test syntax): they print as ordinary instructions named `<opcode>.anon`.
    "inferred_and_nested": """HloModule inferred

%neg (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %n = negate(%x)
}

ENTRY %e {
  %a = f32[2,10] parameter(0)
  %d = dot(%a, f32[10,3] parameter(1)), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s = add(%d, f32[2,3] broadcast(f32[] constant(1)))
  %c = conditional(pred[] parameter(2), f32[] parameter(3), f32[] parameter(4)), true_computation=%neg, false_computation=%neg
  ROOT %t = tuple(%s, (f32[], s32[]) tuple(%c, s32[] constant(7)))
}
""",
}


def literal_bits(value) -> object:
    """A comparable form of a constant's value that tells -0/0 and NaN payload signs apart."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(literal_bits(v) for v in value)
    arr = np.ascontiguousarray(value)
    return (arr.dtype.name, arr.shape, arr.tobytes())


def structure(module) -> list:
    """Everything the IR holds about a module, as plain comparable data (names included)."""
    from hlofuse.hlo.parse_attributes import encode_attribute

    out = [module.name, sorted((k, str(v)) for k, v in module.attrs.items() if k != "entry_computation_layout"),
           module.entry.name]
    for comp in sorted(module.computations, key=lambda c: c.name):
        insts = []
        for inst in comp.instructions:
            insts.append((
                inst.name, inst.opcode, str(inst.shape), [o.name for o in inst.operands],
                sorted((k, encode_attribute(k, v)) for k, v in inst.attrs.items()),
                [p.name for p in inst.control_predecessors], literal_bits(inst.literal), inst.parameter_number,
                inst.is_root(),
            ))
        fusion = comp.fusion_instruction.name if comp.fusion_instruction is not None else None
        out.append((comp.name, comp.is_entry, comp.execution_thread, fusion, sorted(insts)))
    return out
