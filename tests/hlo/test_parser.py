"""HLO text parser: hand-written edge cases of XLA's syntax, and the errors it reports."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from hlofuse.hlo.attributes import ConvDimensionNumbers, Raw, Window, WindowDimension
from hlofuse.hlo.errors import HloParseError
from hlofuse.hlo.parser import load_hlo_file, parse_hlo
from hlofuse.hlo.shapes import UNBOUNDED, ArrayShape, Layout, TokenShape, TupleShape


def module(body: str, extra: str = "") -> str:
    return f"HloModule m\n\n{extra}\nENTRY main {{\n{body}\n}}\n"


def entry_inst(text: str, name: str):
    return parse_hlo(text).entry.instruction(name)


# ---- structure ----------------------------------------------------------------------------
def test_simple_module_without_sigils():
    m = parse_hlo(module("  a = f32[2] parameter(0)\n  b = f32[2] parameter(1)\n  ROOT c = f32[2] add(a, b)"))
    assert m.name == "m"
    e = m.entry
    assert e.is_entry and e.name == "main"
    assert [i.name for i in e.instructions] == ["a", "b", "c"]
    assert [p.parameter_number for p in e.parameters] == [0, 1]
    c = e.root
    assert c.opcode == "add" and [o.name for o in c.operands] == ["a", "b"]
    assert e.instruction("a").users == [c]
    assert c.parent is e and e.parent is m


def test_sigils_and_inline_operand_shapes():
    text = """HloModule m
ENTRY %main (a: f32[2], b: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  %b = f32[2]{0} parameter(1)
  ROOT %c = f32[2]{0} add(f32[2]{0} %a, f32[2]{0} %b)
}"""
    c = parse_hlo(text).entry.root
    assert [o.name for o in c.operands] == ["a", "b"]


def test_repeated_operand_keeps_order_and_one_user_entry():
    m = parse_hlo(module("  x = f32[] parameter(0)\n  ROOT y = f32[] multiply(x, x)"))
    x = m.entry.instruction("x")
    assert [o.name for o in m.entry.root.operands] == ["x", "x"]
    assert x.users == [m.entry.root]


def test_root_defaults_to_last_instruction():
    m = parse_hlo(module("  x = f32[] parameter(0)\n  y = f32[] negate(x)"))
    assert m.entry.root.name == "y"


def test_instruction_used_before_its_definition_is_reordered():
    m = parse_hlo(module("  ROOT z = f32[] add(y, x)\n  y = f32[] negate(x)\n  x = f32[] parameter(0)"))
    assert [i.name for i in m.entry.instructions] == ["x", "y", "z"]
    assert m.entry.root.name == "z"


def test_valid_text_order_is_kept():
    body = "  b = f32[] parameter(1)\n  a = f32[] parameter(0)\n  c = f32[] constant(1)\n  ROOT d = f32[] add(a, b)"
    m = parse_hlo(module(body))
    assert [i.name for i in m.entry.instructions] == ["b", "a", "c", "d"]


def test_computation_referenced_before_definition_and_entry_defaults_to_last():
    text = """HloModule m
main {
  p = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=sum
}
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""
    m = parse_hlo(text)
    assert m.entry.name == "sum"  # no ENTRY keyword: the last computation, as in XLA
    r = m.computation("main").root
    assert r.attrs["to_apply"] is m.computation("sum")
    assert r.attrs["dimensions"] == (0,)
    assert r.called_computations() == [m.computation("sum")]


def test_fusion_sets_fusion_instruction():
    text = """HloModule m
%fused (p0: f32[2]) -> f32[2] {
  %p0 = f32[2]{0} parameter(0)
  ROOT %n = f32[2]{0} negate(%p0)
}
ENTRY %e (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  ROOT %f = f32[2]{0} fusion(%x), kind=kLoop, calls=%fused
}"""
    m = parse_hlo(text)
    f = m.entry.root
    assert f.attrs["kind"] == "kLoop"
    assert f.fused_computation is m.computation("fused")
    assert m.computation("fused").fusion_instruction is f
    assert m.computation("fused").is_fusion_computation()


def test_header_attributes_extra_sections_and_execution_thread():
    text = """HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[2]{0})->f32[2]{0}}, input_output_alias={ {}: (0, {}, may-alias) }, replica_count=1

FileNames
1 "a.py"

StackFrames
1 {file_location_id=1 parent_frame_id=1}

%side (p: f32[2]) -> f32[2] {
  ROOT %p = f32[2]{0} parameter(0)
}, execution_thread="side"

ENTRY %e (x: f32[2]) -> f32[2] {
  ROOT %x = f32[2]{0} parameter(0)
}
"""
    m = parse_hlo(text)
    assert m.attrs["is_scheduled"] == Raw("true")
    assert m.attrs["input_output_alias"] == Raw("{ {}: (0, {}, may-alias) }")
    assert m.attrs["replica_count"] == Raw("1")
    assert m.extra_sections == ['FileNames\n1 "a.py"', "StackFrames\n1 {file_location_id=1 parent_frame_id=1}"]
    assert m.computation("side").execution_thread == "side"


def test_comments_are_skipped():
    text = """// leading comment
HloModule m /* after name */
ENTRY e { // trailing
  /* block
     comment */ a = f32[] parameter(0)
  ROOT t = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[]) tuple(a, a, a, a, a, /*index=5*/a) // done
}
// CHECK: nothing
"""
    m = parse_hlo(text)
    assert len(m.entry.root.operands) == 6


# ---- shapes -------------------------------------------------------------------------------
def test_scalar_shape_gets_default_layout():
    shape = entry_inst(module("  ROOT a = f32[] parameter(0)"), "a").shape
    assert shape == ArrayShape(shape.dtype, (), (), Layout(()))
    assert shape.dtype.name == "f32"


def test_array_shapes_layouts_and_dynamic_dimensions():
    body = """  a = f32[2,3] parameter(0)
  b = f32[8,128]{0,1:T(8,128)S(1)} parameter(1)
  c = s32[<=8,?]{1,0} parameter(2)
  d = (f32[2]{0}, (s32[], token[]), ()) parameter(3)
  ROOT t = token[] after-all()"""
    e = parse_hlo(module(body)).entry
    a, b, c, d = (e.instruction(n).shape for n in "abcd")
    assert a.dims == (2, 3) and a.layout == Layout((1, 0)) and a.dtype.name == "f32"
    assert b.layout == Layout((0, 1), "T(8,128)S(1)")
    assert c.dims == (8, UNBOUNDED) and c.dynamic == (True, True)
    assert isinstance(d, TupleShape) and isinstance(d.elements[1].elements[1], TokenShape)
    assert d.elements[2] == TupleShape(())
    assert isinstance(e.root.shape, TokenShape)


# ---- constants ----------------------------------------------------------------------------
def constant(shape: str, literal: str):
    return entry_inst(module(f"  ROOT c = {shape} constant({literal})"), "c").literal


@pytest.mark.parametrize(
    "shape, literal, expected",
    [
        ("f32[]", "1.5", np.float32(1.5)),
        ("f32[]", "-2.5e-3", np.float32(-2.5e-3)),
        ("f64[]", "1e+300", np.float64(1e300)),
        ("s32[]", "-7", np.int32(-7)),
        ("u64[]", "18446744073709551615", np.uint64(2**64 - 1)),
        ("s8[]", "-128", np.int8(-128)),
        ("pred[]", "true", np.bool_(True)),
        ("pred[]", "false", np.bool_(False)),
        ("f16[]", "0.5", np.float16(0.5)),
        ("bf16[]", "0.1001", ml_dtypes.bfloat16(0.1001)),
        ("f8e4m3fn[]", "1.5", ml_dtypes.float8_e4m3fn(1.5)),
        ("f8e5m2[]", "-3", ml_dtypes.float8_e5m2(-3)),
        ("s4[]", "-8", ml_dtypes.int4(-8)),
        ("u4[]", "15", ml_dtypes.uint4(15)),
        ("c64[]", "(1, -2.5)", np.complex64(1 - 2.5j)),
        ("c128[]", "(0, 1e-10)", np.complex128(1e-10j)),
    ],
)
def test_scalar_constants(shape, literal, expected):
    value = constant(shape, literal)
    assert value.shape == ()
    assert value.dtype == np.asarray(expected).dtype
    assert value == expected


def test_special_float_values():
    v = constant("f32[5]", "{inf, -inf, nan, -nan, 0}")
    assert v[0] == np.inf and v[1] == -np.inf
    assert math.isnan(v[2]) and not np.signbit(v[2])
    assert math.isnan(v[3]) and np.signbit(v[3])
    assert v[4] == 0


def test_nested_array_constants():
    np.testing.assert_array_equal(constant("s32[2,2]", "{ {1, 2}, {3, 4} }"), np.array([[1, 2], [3, 4]], np.int32))
    np.testing.assert_array_equal(constant("f32[2,1,1]", "{ { {1} }, { {2} } }"), np.array([1, 2], np.float32).reshape(2, 1, 1))
    v = constant("f32[1,1,2,2]", "{ { /*i0=0*/ { /*i1=0*/ { 1.5, -2 }, { inf, nan } } } }")
    assert v.shape == (1, 1, 2, 2) and v[0, 0, 0, 1] == -2
    np.testing.assert_array_equal(constant("pred[3]", "{1, 0, true}"), np.array([True, False, True]))
    np.testing.assert_array_equal(constant("c64[2]", "{(1, 2), (3, -4.5)}"), np.array([1 + 2j, 3 - 4.5j], np.complex64))
    assert constant("s32[2,0]", "{ {}, {} }").shape == (2, 0)
    assert constant("f32[0]", "{}").shape == (0,)


def test_elided_and_tuple_constants():
    assert constant("f32[100]", "{...}") is None
    t = constant("(s32[], f32[2])", "(1, {2, 3})")
    assert t[0] == 1 and list(t[1]) == [2.0, 3.0]


# ---- attributes ---------------------------------------------------------------------------
def test_structured_attributes():
    body = """  p = f32[4,6] parameter(0)
  q = f32[6,5] parameter(1)
  z = f32[] constant(0)
  s = f32[2,2] slice(p), slice={[0:4:2], [1:3]}
  pd = f32[7,8] pad(p, z), padding=1_2x0_2_0
  pi = f32[10,6] pad(p, z), padding=1_2_1x0_0
  d = f32[4,5] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,default}
  cmp = pred[4,6] compare(p, p), direction=LT, type=TOTALORDER
  b = f32[4,6,3] broadcast(p), dimensions={0,1}
  io = s32[4] iota(), iota_dimension=0
  ROOT t = (f32[2,2]) tuple(s)"""
    e = parse_hlo(module(body)).entry
    assert e.instruction("s").attrs["slice"] == ((0, 4, 2), (1, 3, 1))
    assert e.instruction("pd").attrs["padding"] == ((1, 2, 0), (0, 2, 0))
    assert e.instruction("pi").attrs["padding"] == ((1, 2, 1), (0, 0, 0))
    d = e.instruction("d").attrs
    assert d["lhs_contracting_dims"] == (1,) and d["rhs_contracting_dims"] == (0,)
    assert d["operand_precision"] == Raw("{highest,default}")
    assert e.instruction("cmp").attrs == {"direction": "LT", "type": "TOTALORDER"}
    assert e.instruction("b").attrs["dimensions"] == (0, 1)
    assert e.instruction("io").attrs["iota_dimension"] == 0


# operand_precision as XLA's parser takes it (jaxlib 0.10.2, probed): a list of DEFAULT, HIGH or
# HIGHEST in any case and of any length, kept as written; anything else refused, PACKED_NIBBLE
# included (XLA dropped it: two 4-bit values per s8, which hlofuse would have computed as a
# plain s8 dot).
_DOT = ("  p = s8[4,6] parameter(0)\n  q = s8[6,5] parameter(1)\n"
        "  ROOT d = s32[4,5] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}")


@pytest.mark.parametrize("value", ["{highest,highest}", "{HIGHEST, DEFAULT}", "{High,default}", "{}",
                                   "{highest}", "{highest,highest,highest}"])
def test_operand_precision_xla_accepts(value):
    d = parse_hlo(module(f"{_DOT}, operand_precision={value}")).entry.root
    assert d.attrs["operand_precision"] == Raw(value)


@pytest.mark.parametrize("value,found", [("{PACKED_NIBBLE, PACKED_NIBBLE}", "PACKED_NIBBLE"),
                                         ("{highest,fast}", "fast"), ("{3,3}", "{3,3}"),
                                         ("highest", "highest")])
def test_operand_precision_xla_refuses(value, found):
    line = f"{_DOT}, operand_precision={value}"
    err = error_of(module(line))
    assert "operand_precision" in err.message and found in err.message
    assert err.source_line.startswith("  ROOT d = s32[4,5] dot(p, q)")
    assert err.source_line[err.column - 1:].startswith(found)


def test_window_and_dim_labels():
    body = """  x = f32[1,4,4,1] parameter(0)
  w = f32[3,3,1,1] parameter(1)
  ROOT c = f32[1,2,2,1] convolution(x, w), window={size=3x3 stride=2x1 pad=1_1x0_2 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=0x1}, dim_labels=b01f_01io->b01f, feature_group_count=1"""
    c = parse_hlo(module(body)).entry.root
    assert c.attrs["window"] == Window((
        WindowDimension(size=3, stride=2, padding_low=1, padding_high=1, window_dilation=2, base_dilation=1),
        WindowDimension(size=3, stride=1, padding_low=0, padding_high=2, window_dilation=1, base_dilation=2,
                        window_reversal=True),
    ))
    dn = c.attrs["dim_labels"]
    assert isinstance(dn, ConvDimensionNumbers)
    assert (dn.input_batch, dn.input_feature, dn.input_spatial) == (0, 3, (1, 2))
    assert (dn.kernel_input_feature, dn.kernel_output_feature, dn.kernel_spatial) == (2, 3, (0, 1))
    assert c.attrs["feature_group_count"] == 1


def test_gather_and_scatter_dimension_numbers():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  op = f32[5,4] parameter(0)
  idx = s32[3,1] parameter(1)
  upd = f32[3,4] parameter(2)
  g = f32[3,4] gather(op, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=true
  ROOT s = f32[5,4] scatter(op, idx, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, unique_indices=false, to_apply=add
}"""
    m = parse_hlo(text)
    g = m.entry.instruction("g").attrs
    assert g == {"offset_dims": (1,), "collapsed_slice_dims": (0,), "start_index_map": (0,), "index_vector_dim": 1,
                 "slice_sizes": (1, 4), "indices_are_sorted": True}
    s = m.entry.root.attrs
    assert s["update_window_dims"] == (1,) and s["scatter_dims_to_operand_dims"] == (0,)
    assert s["unique_indices"] is False and s["to_apply"] is m.computation("add")


def test_control_flow_computations():
    text = """HloModule m
c { p = (s32[]) parameter(0)
  g = s32[] get-tuple-element(p), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(g, k), direction=LT }
b { p = (s32[]) parameter(0)
  ROOT q = (s32[]) tuple(g), control-predecessors={p}
  g = s32[] get-tuple-element(p), index=0 }
t { ROOT p = f32[] parameter(0) }
f { p = f32[] parameter(0)
  ROOT n = f32[] negate(p) }
ENTRY e {
  i = (s32[]) parameter(0)
  x = f32[] parameter(1)
  pr = pred[] parameter(2)
  k = s32[] parameter(3)
  w = (s32[]) while(i), condition=c, body=b
  c1 = f32[] conditional(pr, x, x), true_computation=t, false_computation=f
  ROOT c2 = f32[] conditional(k, x, x), branch_computations={t, %f}
}"""
    m = parse_hlo(text)
    e = m.entry
    assert e.instruction("w").attrs == {"condition": m.computation("c"), "body": m.computation("b")}
    assert e.instruction("c1").called_computations() == [m.computation("t"), m.computation("f")]
    assert e.root.attrs["branch_computations"] == (m.computation("t"), m.computation("f"))
    q = m.computation("b").root
    b = m.computation("b")
    assert q.control_predecessors == [b.parameter(0)]
    # names are unique in the module (as XLA makes them): b's copies of c's names get suffixes
    assert [i.name for i in b.instructions] == ["p.1", "g.1", "q"]


def test_custom_call_and_verbatim_attributes():
    body = r"""  p = f32[2] parameter(0), sharding={devices=[2]0,1}
  ROOT cc = f32[2] custom-call(p), custom_call_target="my\"target", api_version=API_VERSION_STATUS_RETURNING, metadata={op_type="foo" op_name="jit(f)/a,b{c}" source_file="/x.py" source_line=3}, backend_config={"a":{"b":[1,2]},"s":"}"}, frontend_attributes={_xla_x="1"}, replica_groups=[2,2]<=[4], unknown_thing={{0,1},{2,3}}, statistics={visualizing_index=1,stat-1=0.5}"""
    m = parse_hlo(module(body))
    cc = m.entry.root
    assert cc.attrs["custom_call_target"] == 'my"target'
    assert cc.attrs["api_version"] == Raw("API_VERSION_STATUS_RETURNING")
    assert cc.attrs["metadata"] == Raw('{op_type="foo" op_name="jit(f)/a,b{c}" source_file="/x.py" source_line=3}')
    assert cc.attrs["backend_config"] == Raw('{"a":{"b":[1,2]},"s":"}"}')
    assert cc.attrs["replica_groups"] == Raw("[2,2]<=[4]")
    assert cc.attrs["unknown_thing"] == Raw("{{0,1},{2,3}}")
    assert cc.attrs["statistics"] == Raw("{visualizing_index=1,stat-1=0.5}")
    assert m.entry.instruction("p").attrs["sharding"] == Raw("{devices=[2]0,1}")


def test_quoted_backend_config_and_opt_barrier_spelling():
    body = """  p = f32[2] parameter(0)
  ROOT o = f32[2] opt-barrier(p), backend_config="abc, def\\"" """
    root = parse_hlo(module(body)).entry.root
    assert root.opcode == "opt-barrier"
    assert root.attrs["backend_config"] == Raw('"abc, def\\""')


def test_load_hlo_file(tmp_path):
    path = tmp_path / "x.hlo"
    path.write_text(module("  ROOT a = f32[] parameter(0)"))
    assert load_hlo_file(path).entry.root.name == "a"
    path.write_text(module("  ROOT a = f32[] parameter(0"))
    with pytest.raises(HloParseError) as e:
        load_hlo_file(path)
    assert e.value.filename == str(path)


# ---- errors -------------------------------------------------------------------------------
def error_of(text: str) -> HloParseError:
    with pytest.raises(HloParseError) as e:
        parse_hlo(text)
    return e.value


def test_error_expected_paren_names_found_token_and_position():
    text = "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[2] add(a f32[2] a)\n}\n"
    err = error_of(text)
    assert err.line == 4 and err.column == 25
    assert "expected ',' or ')' but found 'f32'" in err.message
    assert err.source_line == "  ROOT b = f32[2] add(a f32[2] a)"
    assert err.render().splitlines()[-1] == " " * 24 + "^"
    assert str(err).startswith("<string>:4:25: error:")


# (body, message, body line of the error, the text the caret must point at)
@pytest.mark.parametrize(
    "body, message, line, at",
    [
        ("  ROOT a = f32[] frobnicate()", "unknown opcode 'frobnicate'", 0, "frobnicate"),
        ("  ROOT a = f32[] negate(b)", "operand 'b' of 'a' is not defined", 0, "b)"),
        ("  a = f32[] parameter(0)\n  a = f32[] parameter(1)", "instruction 'a' is defined twice", 1, "a ="),
        ("  ROOT a = f32[2] constant({1, 2, 3})", "has more than 2 elements in dimension 0", 0, "3})"),
        ("  ROOT a = f32[3] constant({1, 2})", "has 2 elements in dimension 0, expected 3", 0, "})"),
        ("  ROOT a = f32[2,2] constant({1, 2, 3, 4})", "has a value at nesting depth 1", 0, "1, 2"),
        ("  ROOT a = f32[] constant(abc)", "expected a number for f32[] but found 'abc'", 0, "abc"),
        ("  ROOT a = s8[] constant(300)", "out of range", 0, "300"),
        ("  ROOT a = f33[] parameter(0)", "unknown element type 'f33'", 0, "f33"),
        ("  ROOT a = f32[2]{0,1} parameter(0)", "not a permutation", 0, "f32"),
        ("  a = f32[] parameter(0)\n  ROOT b = f32[] add(a)", "'add' takes 2 operands but 'b' has 1", 1, "add"),
        ("  a = f32[] negate(b)\n  ROOT b = f32[] negate(a)", "cycle", 1, "b ="),
        ("  ROOT a = f32[] parameter(0)\n  ROOT b = f32[] parameter(1)", "second ROOT 'b'", 1, "b ="),
        ("  ROOT a = f32[] parameter(1)", "no parameter(0)", 0, "a ="),
        ("  a = f32[] parameter(0)\n  b = f32[] parameter(2)", "no parameter(1) but has parameter(2)", 1, "b ="),
        ("  p = f32[] parameter(0)\n  ROOT r = f32[] reduce(p, p), to_apply=nowhere", "computation 'nowhere'", 1,
         "nowhere"),
        ("  ROOT a = f32[2] broadcast(a), dimensions={x}", "expects a list of integers", 0, "{x}"),
        ("  ROOT a = f32[2] parameter(0), dimensions={0}, dimensions={0}", "given twice", 0, "dimensions={0}\n"),
        ("  ROOT a = f32[] parameter(0), window={size=2 bogus=1}", "unexpected 'bogus=1'", 0, "{size"),
        ("  ROOT a = f32[] parameter(0), dim_labels=bf_io", "dim_labels", 0, "bf_io"),
        ("  a = f32[] parameter(0)\n  ROOT c = pred[] compare(a, a), direction=LTE", "'direction' must be one of EQ",
         1, "LTE"),
        ("  a = f32[] parameter(0)\n  ROOT c = pred[] compare(a, a), direction=LT, type=BOGUS", "'type' must be one",
         1, "BOGUS"),
        ("  ROOT a = f32[] parameter(0), metadata={op_name=\"x\"", "expected '}' to close computation", 2, ""),
    ],
)
def test_errors_name_the_problem_and_position(body, message, line, at):
    text = module(body)
    err = error_of(text)
    assert message in err.message
    lines = text.split("\n")
    first = lines.index("ENTRY main {") + 1
    expected_line = first + 1 + line
    expected_column = (lines[expected_line - 1] + "\n").rindex(at) + 1 if at else 1
    assert (err.line, err.column) == (expected_line, expected_column), err.render()


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "expected 'HloModule' but found end of input"),
        ("Hlo", "expected '{' but found end of input"),
        ("HloModule", "expected a module name but found end of input"),
        ("HloModule m", "expected a computation but found end of input"),
        ("HloModule m\nENTRY e {\n", "expected '}' to close computation 'e'"),
        ("HloModule m\nENTRY e {}\n", "has no instructions"),
        ("HloModule m\nc { ROOT a = f32[] parameter(0) }\nc { ROOT a = f32[] parameter(0) }", "defined twice"),
        ("HloModule m\nENTRY a { ROOT a = f32[] parameter(0) }\nENTRY b { ROOT b = f32[] parameter(0) }",
         "second ENTRY"),
        ("HloModule m\nENTRY e { ROOT a = f32[] parameter(0) } trailing", "expected '{' but found end of input"),
        ("HloModule m\nENTRY e { ROOT a = f32[ parameter(0) }", "expected a shape but found 'f32'"),
    ],
)
def test_module_level_errors(text, message):
    assert message in error_of(text).message


def test_instruction_spread_over_lines():
    text = """HloModule m
ENTRY e {
  a = f32[2] parameter(0)
  ROOT r = f32[2]
      add(
        f32[2] a,   // first
        a)
      , metadata={op_name="x"}, sharding={
         replicated}
}"""
    r = parse_hlo(text).entry.root
    assert [o.name for o in r.operands] == ["a", "a"]
    assert r.attrs["metadata"] == Raw('{op_name="x"}')
    assert r.attrs["sharding"] == Raw("{\n         replicated}")


def test_xla_test_style_snippets():
    text = """HloModule async, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%async_comp (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %cc = f32[4]{0} custom-call(%p), custom_call_target="foo", output_to_operand_aliasing={{}: (0, {})}
}, execution_thread="foo_thread"

%lt (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %r = pred[] compare(%a, %b), direction=LT
}

ENTRY %e (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0), parameter_replication={false}
  %start = ((f32[4]{0}), f32[4]{0}, u32[]) async-start(%x), async_execution_thread="foo_thread", calls=%async_comp
  %done = f32[4]{0} async-done(%start)
  %i = s32[4]{0} iota(), iota_dimension=0
  %s = (f32[4]{0}, s32[4]{0}) sort(%done, %i), dimensions={0}, is_stable=true, to_apply=%lt
  %d = f32[4]{0} domain(%x), domain={kind="sharding", entry={maximal device=0}, exit={replicated}}
  ROOT %g = f32[4]{0} get-tuple-element(%s), index=0, sharding={{maximal device=0}, {replicated}}
}
"""
    m = parse_hlo(text)
    assert m.computation("async_comp").execution_thread == "foo_thread"
    start = m.entry.instruction("start")
    assert start.attrs["calls"] is m.computation("async_comp")
    assert start.attrs["async_execution_thread"] == Raw('"foo_thread"')
    assert m.entry.instruction("s").attrs["to_apply"] is m.computation("lt")
    assert m.entry.instruction("d").attrs["domain"] == Raw('{kind="sharding", entry={maximal device=0}, exit={replicated}}')
    assert m.computation("async_comp").root.attrs["output_to_operand_aliasing"] == Raw("{{}: (0, {})}")


def test_async_shorthand_gets_an_explicit_computation():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  start = ((f32[4]), f32[4], u32[]) custom-call-start(x), async_execution_thread="t", custom_call_target="foo", metadata={op_name="a"}
  upd = ((f32[4]), f32[4], u32[]) custom-call-update(start)
  ROOT done = f32[4] custom-call-done(upd)
}"""
    m = parse_hlo(text)
    start = m.entry.instruction("start")
    assert start.opcode == "async-start"
    assert set(start.attrs) == {"async_execution_thread", "metadata", "calls"}
    comp = start.attrs["calls"]
    assert comp.execution_thread == "t"
    assert comp.root.opcode == "custom-call" and comp.root.attrs == {"custom_call_target": "foo"}
    assert [p.shape for p in comp.parameters] == [m.entry.instruction("x").shape]
    assert comp.root.shape == m.entry.instruction("x").shape
    assert [i.opcode for i in m.entry.instructions[2:]] == ["async-update", "async-done"]
    assert "unknown opcode 'frob-start'" in error_of(text.replace("custom-call-start", "frob-start")).message


def test_module_without_header_is_named_after_its_entry():
    text = """add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

fusion {
  %operand_1 = f32[50,5]  parameter(0)
  %indices =  s32[24,1] iota(), iota_dimension=0
  %update_1 = f32[24,5] parameter(1)

  ROOT %scatter = f32[50,5] scatter(
      %operand_1, %indices, %update_1),
    update_window_dims={1},
    inserted_window_dims={0},
    scatter_dims_to_operand_dims={0},
    index_vector_dim=1,
    to_apply=add
}
"""
    m = parse_hlo(text)
    assert m.name == "module_fusion"  # XLA's name for a header-less module
    assert m.entry.name == "fusion"
    assert m.entry.root.attrs["update_window_dims"] == (1,)


def test_binary_file_is_a_parse_error(tmp_path):
    path = tmp_path / "bad.hlo"
    path.write_bytes(b"HloModule m\n\xff\xfe")
    with pytest.raises(HloParseError) as e:
        load_hlo_file(path)
    assert (e.value.line, e.value.column) == (2, 1)
    assert "UTF-8" in e.value.message


def test_windows_line_endings():
    text = (
        'HloModule m, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n\nFileNames\n1 "a.py"\n\n'
        'ENTRY e {\n  a = f32[2] parameter(0), metadata={op_name="x"}\n  ROOT b = f32[2] negate(a)\n}\n'
    )
    m = parse_hlo(text.replace("\n", "\r\n"))
    assert m.extra_sections == ['FileNames\n1 "a.py"']
    assert m.entry.instruction("a").attrs["metadata"] == Raw('{op_name="x"}')


def test_trailing_debug_sections_are_kept_and_printed_after_the_header():
    text = """HloModule m

ENTRY e {
  ROOT a = f32[] parameter(0), metadata={op_name="a" stack_frame_id=1}
}

FileNames
1 "x.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
"""
    m = parse_hlo(text)
    assert [s.split("\n")[0] for s in m.extra_sections] == ["FileNames", "FunctionNames", "FileLocations",
                                                             "StackFrames"]
    printed = m.to_text()
    assert printed.index("StackFrames\n1 {file_location_id=1 parent_frame_id=1}") < printed.index("ENTRY")
    assert parse_hlo(printed).extra_sections == m.extra_sections


@pytest.mark.parametrize("attr", ["lower", "left_side", "unit_diagonal"])
def test_linear_algebra_flags_are_booleans(attr):
    """`lower=false` was kept as the text "false", whose truth value is True: the CPU's cholesky
    rule computed a lower factor for lower=false. The parser now reads these flags as booleans
    and refuses anything but true or false."""
    op = ("cholesky(a)" if attr == "lower" else "triangular-solve(a, a), transpose_a=NO_TRANSPOSE")
    text = f"HloModule m\nENTRY e {{\n  a = f32[4,4] parameter(0)\n  ROOT r = f32[4,4] {op}, {attr}=false\n}}\n"
    assert parse_hlo(text).entry.root.attrs[attr] is False
    with pytest.raises(HloParseError, match="expects true or false"):
        parse_hlo(text.replace(f"{attr}=false", f"{attr}=no"))
