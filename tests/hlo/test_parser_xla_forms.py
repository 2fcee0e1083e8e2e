"""Syntax forms found in XLA's own tests (hlo_parser_test.cc and friends), written by hand:
element types beyond the common ones, NaN payloads, literal ranges, keys that mean different
things on different opcodes, header and comment forms, and the checks XLA makes on them."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlofuse.hlo.attributes import ConvDimensionNumbers, Raw
from hlofuse.hlo.errors import HloParseError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.printer import module_to_text


def constant(shape: str, literal: str):
    """The parsed instruction of `ROOT c = <shape> constant(<literal>)`."""
    return parse_hlo(f"HloModule m\nENTRY e {{\n  ROOT c = {shape} constant({literal})\n}}\n").entry.root


def printed_literal(shape: str, literal: str) -> str:
    line = module_to_text(parse_hlo(f"HloModule m\nENTRY e {{\n  ROOT c = {shape} constant({literal})\n}}\n"))
    return line.split("constant(", 1)[1].rsplit(")", 1)[0]


def bits(arr: np.ndarray) -> list[int]:
    arr = np.ascontiguousarray(arr)
    return arr.reshape(-1).view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.itemsize]).tolist()


# ---- element types -----------------------------------------------------------------------
# The printed text is XLA's own (checked against jaxlib's printer): `%.<max_digits10>g`.
@pytest.mark.parametrize("name, dtype, values, printed", [
    ("s1", ml_dtypes.int1, [-1, 0], "{-1, 0}"),
    ("s2", ml_dtypes.int2, [-2, 1], "{-2, 1}"),
    ("u1", ml_dtypes.uint1, [0, 1], "{0, 1}"),
    ("u2", ml_dtypes.uint2, [0, 3], "{0, 3}"),
    ("f8e4m3", ml_dtypes.float8_e4m3, [240.0, -0.5], "{240, -0.5}"),
    ("f8e3m4", ml_dtypes.float8_e3m4, [15.5, 0.25], "{15.5, 0.25}"),
    ("f8e4m3fnuz", ml_dtypes.float8_e4m3fnuz, [240.0, -0.125], "{240, -0.125}"),
    ("f8e5m2fnuz", ml_dtypes.float8_e5m2fnuz, [57344.0, 3.0], "{5.7e+04, 3}"),
    ("f8e4m3b11fnuz", ml_dtypes.float8_e4m3b11fnuz, [30.0, -1.0], "{30, -1}"),
    ("f8e8m0fnu", ml_dtypes.float8_e8m0fnu, [0.5, 1024.0], "{0.5, 1e+03}"),
    ("f6e2m3fn", ml_dtypes.float6_e2m3fn, [7.5, -0.125], "{7.5, -0.125}"),
    ("f6e3m2fn", ml_dtypes.float6_e3m2fn, [28.0, 0.0625], "{28, 0.062}"),
    ("f4e2m1fn", ml_dtypes.float4_e2m1fn, [6.0, -0.5], "{6, -0.5}"),
])
def test_narrow_element_types_parse_and_print(name, dtype, values, printed):
    text = "{" + ", ".join(repr(v) for v in values) + "}"
    c = constant(f"{name}[2]", text)
    assert c.shape.dtype.name == name and c.literal.dtype == np.dtype(dtype)
    assert c.literal.astype(np.float64).tolist() == values
    assert printed_literal(f"{name}[2]", text) == printed
    assert constant(f"{name}[2]", printed).literal.astype(np.float64).tolist() == values


def test_narrow_integer_ranges():
    with pytest.raises(HloParseError, match="value 2 is out of range for s2"):
        constant("s2[]", "2")
    with pytest.raises(HloParseError, match="value -1 is out of range for u1"):
        constant("u1[]", "-1")


def test_narrow_float_prints_enough_digits_to_read_back():
    # 0.1 rounds to 0.1015625 in f8e4m3fnuz (3 mantissa bits): 3 significant digits identify it.
    c = constant("f8e4m3fnuz[]", "0.1")
    assert float(c.literal) == 0.1015625
    assert printed_literal("f8e4m3fnuz[]", "0.1") == "0.102"


# ---- literal values ------------------------------------------------------------------------
def test_nan_payloads_are_kept_and_printed():
    c = constant("bf16[3]", "{-nan(0x7f), nan(0x1), -nan}")
    assert bits(c.literal) == [0xFFFF, 0x7F81, 0xFFC0]
    assert printed_literal("bf16[3]", "{-nan(0x7f), nan(0x1), -nan}") == "{-nan(0x7f), nan(0x1), -nan}"
    c = constant("f32[]", "nan(0x123)")
    assert bits(c.literal) == [0x7F800123]
    # The quiet NaN's own payload prints as plain nan.
    assert printed_literal("f32[]", "nan(0x400000)") == "nan"


@pytest.mark.parametrize("shape, literal", [
    ("bf16[]", "nan(0x80)"),        # 7 mantissa bits
    ("f8e4m3fn[]", "nan(0x1)"),     # a single NaN, no payloads
    ("f16[]", "nan(0x0)"),          # that would be infinity
])
def test_impossible_nan_payloads_are_refused(shape, literal):
    with pytest.raises(HloParseError, match="tries to set NaN payload"):
        constant(shape, literal)


@pytest.mark.parametrize("shape, literal", [
    ("f16[]", "-65520"), ("bf16[]", "1e100"), ("f64[]", "1.8e308"), ("c64[]", "(1e100, 0)"),
    ("f8e4m3fn[]", "1000"), ("f32[2]", "{1, 1e39}"),
])
def test_finite_floats_too_large_for_their_type_are_refused(shape, literal):
    with pytest.raises(HloParseError, match="out of range"):
        constant(shape, literal)


def test_infinities_and_largest_finite_values_are_accepted():
    assert constant("f16[2]", "{65504, -inf}").literal.tolist() == [65504.0, -np.inf]
    assert float(constant("f8e4m3fn[]", "448").literal) == 448.0
    assert float(constant("f32[]", "1e-50").literal) == 0.0  # underflow is rounding, not an error


def test_64_bit_literals_wrap_like_xla():
    assert int(constant("u64[]", "-1").literal) == 2**64 - 1
    assert int(constant("s64[]", "9223372036854775808").literal) == -2**63
    with pytest.raises(HloParseError, match="out of range for u32"):
        constant("u32[]", "-1")
    with pytest.raises(HloParseError, match="out of range for u64"):
        constant("u64[]", "18446744073709551616")


# ---- attributes whose meaning depends on the opcode ----------------------------------------
def test_dot_algorithm_is_kept_verbatim_and_rng_algorithm_checked():
    m = parse_hlo("""HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  ROOT d = f32[2,2] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={1}, algorithm=dot_bf16_bf16_f32_x3
}
""")
    assert m.entry.root.attrs["algorithm"] == Raw("dot_bf16_bf16_f32_x3")
    assert "algorithm=dot_bf16_bf16_f32_x3" in module_to_text(m)
    with pytest.raises(HloParseError, match="'algorithm' must be one of"):
        parse_hlo("HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
                  "  ROOT r = (u64[2], u32[4]) rng-bit-generator(s), algorithm=dot_any\n}\n")


def test_slice_sizes_of_a_collective_permute_are_a_list_of_lists():
    m = parse_hlo("""HloModule m
ENTRY e {
  p = f32[8] parameter(0)
  z = s32[] constant(0)
  t = (s32[]) tuple(z)
  ROOT cp = f32[8] collective-permute(p, p, t, t), source_target_pairs={{0,1}}, slice_sizes={{2},{4}}
}
""")
    assert m.entry.root.attrs["slice_sizes"] == Raw("{{2},{4}}")
    g = parse_hlo("""HloModule m
ENTRY e {
  o = f32[5,4] parameter(0)
  i = s32[3,1] parameter(1)
  ROOT g = f32[3,4] gather(o, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
}
""").entry.root
    assert g.attrs["slice_sizes"] == (1, 4)


def test_custom_call_keeps_attributes_xla_does_not_check():
    root = parse_hlo("HloModule m\nENTRY e {\n  ROOT r = f32[4] custom-call(), custom_call_target=\"x\", "
                     "window={size=2}, dim_labels=?b0f_0?io->b0?f\n}\n").entry.root
    assert root.attrs["dim_labels"] == Raw("?b0f_0?io->b0?f")
    conv = parse_hlo("""HloModule m
ENTRY e {
  a = f32[1,4,1] parameter(0)
  k = f32[1,1,1] parameter(1)
  ROOT c = f32[1,4,1] convolution(a, k), window={size=1}, dim_labels=b0f_0io->b0f
}
""").entry.root
    assert isinstance(conv.attrs["dim_labels"], ConvDimensionNumbers)
    with pytest.raises(HloParseError, match="dim_labels"):
        parse_hlo("HloModule m\nENTRY e {\n  a = f32[1,4,1] parameter(0)\n  k = f32[1,1,1] parameter(1)\n"
                  "  ROOT c = f32[1,4,1] convolution(a, k), window={size=1}, dim_labels=?0f_0io->b0f\n}\n")


# ---- module structure ----------------------------------------------------------------------
def test_module_name_may_end_with_a_colon():
    m = parse_hlo("HloModule my_mod:\nENTRY e {\n  ROOT c = f32[] constant(1)\n}\n")
    assert m.name == "my_mod"
    assert module_to_text(m).startswith("HloModule my_mod, ")


def test_old_mac_line_endings_with_line_comments():
    m = parse_hlo("HloModule m\r// note\rENTRY e {\r  // inside\r  ROOT c = f32[] constant(2) // after\r}")
    assert m.entry.root.opcode == "constant" and float(m.entry.root.literal) == 2.0


def test_header_string_spanning_lines_prints_back_verbatim():
    text = 'HloModule m, frontend_attributes={doc="first line\n  second line"}\n\nENTRY e {\n  ROOT c = f32[] constant(1)\n}\n'
    m = parse_hlo(text)
    assert str(m.attrs["frontend_attributes"]) == '{doc="first line\n  second line"}'
    printed = module_to_text(m)
    assert module_to_text(parse_hlo(printed)) == printed


def test_unterminated_block_comment_is_named():
    with pytest.raises(HloParseError, match="unterminated comment") as e:
        parse_hlo("HloModule m\nENTRY e {\n  /* never closed\n  ROOT c = f32[] constant(1)\n}\n")
    assert (e.value.line, e.value.column) == (3, 3)


def test_signature_must_agree_with_the_body():
    with pytest.raises(HloParseError, match=r"declared to return f32\[1\] but its root 'r' has shape f32\[2\]"):
        parse_hlo("HloModule m\nENTRY %e () -> f32[1] {\n  ROOT %r = f32[2] constant({1, 2})\n}\n")
    # XLA's parser checks only the result: declared parameters are read and not compared (the
    # parameter instructions' own shapes count), so these parse as they do there.
    m = parse_hlo("HloModule m\nENTRY %e (p: s32[]) -> f32[] {\n  ROOT %p = f32[] parameter(0)\n}\n")
    assert m.entry.parameters[0].shape.to_text(False) == "f32[]"
    m = parse_hlo("HloModule m\nENTRY %e (p: f32[], q: f32[]) -> f32[] {\n  ROOT %p = f32[] parameter(0)\n}\n")
    assert len(m.entry.parameters) == 1
    # Layouts may differ: XLA's signatures print none.
    parse_hlo("HloModule m\nENTRY %e (p: f32[2,3]) -> f32[2,3] {\n  ROOT %p = f32[2,3]{0,1} parameter(0)\n}\n")


# ---- shapes left for the parser to infer, and instructions nested in operand lists ---------
def test_shapes_left_out_are_inferred_with_default_layouts():
    m = parse_hlo("""HloModule m
neg {
  x = f32[] parameter(0)
  ROOT n = negate(x)
}

ENTRY e {
  a = f32[2,10] parameter(0)
  b = f32[10,3] parameter(1)
  d = dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = add(d, d)
  p = pred[] parameter(2)
  f = f32[] parameter(3)
  c = conditional(p, f, f), true_computation=neg, false_computation=neg
  ROOT t = tuple(s, c)
}
""")
    e = m.entry
    assert str(e.instruction("d").shape) == "f32[2,3]{1,0}"
    assert str(e.instruction("s").shape) == "f32[2,3]{1,0}"
    assert str(e.instruction("c").shape) == "f32[]"
    assert str(e.root.shape) == "(f32[2,3]{1,0}, f32[])"
    printed = module_to_text(m)
    assert "%s = f32[2,3]{1,0} add(" in printed and module_to_text(parse_hlo(printed)) == printed


def test_nested_instructions_become_anon_instructions_before_their_user():
    m = parse_hlo("""HloModule m
ENTRY e {
  ROOT r = multiply(f32[4] parameter(0),
                    negate(f32[4] parameter(1)))
}
""")
    e = m.entry
    assert [(i.name, i.opcode) for i in e.instructions] == [
        ("parameter.anon", "parameter"), ("parameter.anon.1", "parameter"), ("negate.anon", "negate"),
        ("r", "multiply")]
    assert [o.name for o in e.root.operands] == ["parameter.anon", "negate.anon"]
    assert [p.parameter_number for p in e.parameters] == [0, 1]
    assert str(e.root.shape) == "f32[4]{0}"


def test_broadcast_of_a_scalar_may_leave_out_its_dimensions():
    m = parse_hlo("HloModule m\nENTRY e {\n  s = f32[] parameter(0)\n  ROOT b = f32[2,3] broadcast(s)\n}\n")
    assert m.entry.root.attrs["dimensions"] == ()
    with pytest.raises(HloParseError, match="needs dimensions"):
        parse_hlo("HloModule m\nENTRY e {\n  v = f32[3] parameter(0)\n  ROOT b = f32[2,3] broadcast(v)\n}\n")


@pytest.mark.parametrize("body, message", [
    ("  ROOT p = parameter(0)", "cannot infer the shape of 'p'"),
    ("  ROOT c = constant(1)", "the shape of constant 'c' must be written out"),
    ("  a = f32[4] parameter(0)\n  ROOT r = reshape(a)", "cannot infer the shape of 'r'"),
    ("  a = f32[4] parameter(0)\n  ROOT r = add(a, f32[5] parameter(1))", "cannot infer the shape of 'r'"),
])
def test_shapes_that_cannot_be_inferred_are_errors(body, message):
    with pytest.raises(HloParseError, match=message):
        parse_hlo(f"HloModule m\nENTRY e {{\n{body}\n}}\n")


# ---- a single instruction instead of a module ----------------------------------------------
def test_a_lone_instruction_is_a_module_whose_operands_are_parameters():
    m = parse_hlo("%sum = f32[2,3]{1,0} add(f32[2,3]{1,0} %a, f32[2,3]{1,0} %b), metadata={op_name=\"s\"}")
    e = m.entry
    assert e.name == "_" and e.root.name == "sum" and e.root.opcode == "add"
    assert [(p.name, p.parameter_number, str(p.shape)) for p in e.parameters] == [
        ("a", 0, "f32[2,3]{1,0}"), ("b", 1, "f32[2,3]{1,0}")]
    assert e.root.attrs["metadata"] == Raw('{op_name="s"}')


def test_a_lone_canonical_instruction_names_itself_and_its_operands():
    m = parse_hlo("s32[4]{0} multiply(s32[4]{0}, s32[4]{0})")
    e = m.entry
    assert [i.name for i in e.instructions] == ["_0", "_1", "_"]
    assert [o.name for o in e.root.operands] == ["_0", "_1"]


def test_a_lone_instruction_may_call_computations_written_in_place():
    m = parse_hlo("""%r = f32[] reduce(f32[8] %v, f32[] %z), dimensions={0}, to_apply=
{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %x, f32[] %y)
}""")
    root = m.entry.root
    assert [p.name for p in m.entry.parameters] == ["v", "z"]
    callee = root.attrs["to_apply"]
    assert [p.name for p in callee.parameters] == ["x", "y"] and callee.root.opcode == "add"
    printed = module_to_text(m)
    assert module_to_text(parse_hlo(printed)) == printed


@pytest.mark.parametrize("text, message", [
    ("%m = f32[2] multiply(%a, %b)", "needs its shape"),
    ("p = f32[3] parameter(-1)", "parameter number must be >= 0"),
    ("a = f32[2] negate(f32[2] x)\nb = f32[2] negate(f32[2] y)", "the end of the text after a single instruction"),
])
def test_lone_instruction_errors(text, message):
    with pytest.raises(HloParseError, match=message):
        parse_hlo(text)


def test_operand_written_with_another_shape_is_refused():
    with pytest.raises(HloParseError, match=r"operand 'c' of 'r' is written as f32\[2,5\] but 'c' has shape f32\[2,2\]"):
        parse_hlo("HloModule m\nENTRY e {\n  c = f32[2,2] parameter(0)\n  ROOT r = f32[2,2] negate(f32[2,5] c)\n}\n")
    # Another layout is fine: XLA compares shapes without layouts here.
    parse_hlo("HloModule m\nENTRY e {\n  c = f32[2,2]{0,1} parameter(0)\n  ROOT r = f32[2,2] negate(f32[2,2]{1,0} c)\n}\n")


def test_opaque_shape():
    m = parse_hlo("HloModule m\nENTRY e {\n  p = (f32[2], opaque[]) parameter(0)\n"
                  "  ROOT o = opaque[] get-tuple-element(p), index=1\n}\n")
    assert str(m.entry.root.shape) == "opaque[]"
    assert "opaque[] get-tuple-element(" in module_to_text(m)
    with pytest.raises(HloParseError, match="an opaque shape is written 'opaque\\[\\]'"):
        parse_hlo("HloModule m\nENTRY e {\n  ROOT p = opaque[2] parameter(0)\n}\n")


# ---- async chains ----------------------------------------------------------------------------
_ASYNC_CALLEE = "wrapped {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n\n"


@pytest.mark.parametrize("body, message", [
    ("  s = (f32[4], f32[4], s32[]) async-start(x), calls=wrapped\n  ROOT d = f32[4] async-done(s)",
     r"must have shape \(\(operands...\), outputs, state...\)"),
    ("  t = ((f32[4]), f32[4], s32[]) tuple(x, x, z)\n  ROOT d = f32[4] async-done(t)",
     "must take the async-start or async-update of its chain"),
    ("  s = ((f32[4]), f32[4], s32[]) async-start(x), calls=wrapped\n"
     "  u = ((f32[4]), f32[4], u32[]) async-update(s)\n  ROOT d = f32[4] async-done(u)",
     "must have its operand's shape"),
    ("  s = ((f32[4]), f32[4], s32[]) async-start(x), calls=wrapped\n  ROOT d = f32[4] add-done(s)",
     "'d' is written add-done but its async-start 's' wraps negate"),
    ("  s = ((f32[4]), f32[4], s32[]) async-start(x), calls=wrapped\n  d = f32[4] async-done(s)\n"
     "  s2 = ((f32[4]), f32[4], s32[]) async-start(x), calls=wrapped\n  ROOT d2 = f32[4] async-done(s2)",
     "computation 'wrapped' is wrapped by two async ops"),
])
def test_async_chains_are_checked_like_xla(body, message):
    text = f"HloModule m\n\n{_ASYNC_CALLEE}ENTRY e {{\n  x = f32[4] parameter(0)\n  z = s32[] parameter(1)\n{body}\n}}\n"
    with pytest.raises(HloParseError, match=message):
        parse_hlo(text)


def test_well_formed_async_chain_parses():
    m = parse_hlo(f"HloModule m\n\n{_ASYNC_CALLEE}ENTRY e {{\n  x = f32[4] parameter(0)\n"
                  "  s = ((f32[4]), f32[4], s32[]) async-start(x), calls=wrapped\n"
                  "  u = ((f32[4]), f32[4], s32[]) async-update(s), calls=wrapped\n"
                  "  ROOT d = f32[4] negate-done(u)\n}\n")
    assert m.entry.root.opcode == "async-done"


def test_layout_suffix_prints_without_blanks_as_xla_does():
    m = parse_hlo("HloModule m\nENTRY e {\n  ROOT p = f32[4,8,128]{ 0, 1, 2 : T(2, * , 128) S(1) } parameter(0)\n}\n")
    assert str(m.entry.root.shape) == "f32[4,8,128]{0,1,2:T(2,*,128)S(1)}"
