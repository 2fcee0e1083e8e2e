"""XLA itself is the referee: its parser accepts what hlofuse prints, understands it the same
way (XLA's re-print, parsed back by hlofuse, has the same instructions, shapes, operands,
structured attributes and constant values), and hlofuse parses every form XLA prints."""
from __future__ import annotations

import re

import pytest

from hlofuse.hlo.attributes import Raw
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.printer import module_to_text

from hlo_corpus import EDGE_MODULES, corpus_files, input_text, literal_bits

pytest.importorskip("jax", reason="XLA's parser comes with jaxlib")
from jax._src.lib import xla_client  # noqa: E402

CASES = [pytest.param(input_text(p), id=p.name) for p in corpus_files()]
CASES += [pytest.param(text, id=name) for name, text in EDGE_MODULES.items() if name != "constants"]
# XLA cannot read back the elided `{...}` constant of the constants module; test the rest of it.
CASES.append(pytest.param(EDGE_MODULES["constants"].replace("  %z = f32[1000]{0} constant({...})\n", ""),
                          id="constants"))


# XLA refuses instruction names spelled like one of its element types (`s2`, `f32` ...);
# hlofuse accepts them, so modules using such names cannot be checked against XLA.
_XLA_RESERVED = re.compile(r"(pred|[su](1|2|4|8|16|32|64)|f(16|32|64)|bf16|c(64|128)|f[48]e\w+|token|opaque)$")


def skip_if_xla_reserved_names(module) -> None:
    bad = sorted(i.name for i in module.all_instructions() if _XLA_RESERVED.match(i.name))
    if bad:
        pytest.skip(f"XLA rejects instruction names spelled like element types: {', '.join(bad)}")


def xla_reprint(text: str, **options) -> str:
    """XLA parses `text` (raising with its own message if it rejects it) and prints it back."""
    module = xla_client.hlo.hlo_module_from_text(text)
    opts = xla_client.hlo.HloPrintOptions()
    opts.print_large_constants = True
    for key, value in options.items():
        setattr(opts, key, value)
    return module.to_string(opts)


def semantics(module) -> dict:
    """What both printers must agree on: per instruction its opcode, shape, operands, structured
    attributes, constant value and parameter number; per computation its root and entry flag."""
    out = {"entry": module.entry.name}
    for comp in module.computations:
        insts = {}
        for inst in comp.instructions:
            typed = {k: str(v) if not isinstance(v, tuple) else repr(v) for k, v in inst.attrs.items()
                     if not isinstance(v, Raw)}
            for k, v in inst.attrs.items():
                if hasattr(v, "name") and not isinstance(v, Raw):
                    typed[k] = v.name
                elif isinstance(v, tuple) and v and hasattr(v[0], "instructions"):
                    typed[k] = [c.name for c in v]
            insts[inst.name] = (inst.opcode, str(inst.shape), [o.name for o in inst.operands], typed,
                                literal_bits(inst.literal), inst.parameter_number,
                                sorted(p.name for p in inst.control_predecessors))
        out[comp.name] = (comp.root.name, comp.is_entry, insts)
    return out


@pytest.mark.parametrize("text", CASES)
def test_xla_accepts_printed_text_and_agrees_on_its_meaning(text):
    ours = parse_hlo(text)
    skip_if_xla_reserved_names(ours)
    printed = module_to_text(ours)
    theirs = parse_hlo(xla_reprint(printed, print_operand_shape=True))
    assert semantics(theirs) == semantics(ours)


@pytest.mark.parametrize("options", [
    {},
    {"print_operand_shape": False, "print_percent": False},
    {"print_metadata": False, "print_backend_config": False, "include_layout_in_shapes": False},
    {"print_program_shape": False, "print_operand_names": True, "print_result_shape": True},
])
@pytest.mark.parametrize("text", CASES[:12] + CASES[-4:])
def test_parser_accepts_every_xla_print_style(text, options):
    ours = parse_hlo(text)
    skip_if_xla_reserved_names(ours)
    reprinted = xla_reprint(module_to_text(ours), **options)
    m = parse_hlo(reprinted)
    assert module_to_text(parse_hlo(module_to_text(m))) == module_to_text(m)


@pytest.mark.parametrize("style", ["canonical", "short_parsable"])
@pytest.mark.parametrize("text", CASES[:16] + CASES[-4:])
def test_parser_reads_xla_canonical_text_with_inline_computations(text, style):
    """XLA's canonical form renames everything tmp_N and writes called computations in place
    (`to_apply={ ... }`); hlofuse reads it, prints it canonically, and XLA reads that back."""
    ours = parse_hlo(text)
    skip_if_xla_reserved_names(ours)
    options = getattr(xla_client.hlo.HloPrintOptions, style)()
    options.print_large_constants = True
    xla_text = xla_client.hlo.hlo_module_from_text(module_to_text(ours)).to_string(options)
    theirs = parse_hlo(xla_text)
    printed = module_to_text(theirs)
    assert module_to_text(parse_hlo(printed)) == printed
    xla_client.hlo.hlo_module_from_text(printed)

    def entry_ops(m):
        return sorted((i.opcode, str(i.shape)) for i in m.entry.instructions)

    assert entry_ops(theirs) == entry_ops(ours)


def test_inline_computations_are_parsed_in_place():
    text = """HloModule m
ENTRY e {
  tmp_0 = f32[4] parameter(0)
  tmp_1 = f32[] constant(0)
  tmp_2 = f32[] reduce(f32[4] tmp_0, f32[] tmp_1), dimensions={0}, to_apply=
  {
    tmp_0 = f32[] parameter(0)
    tmp_1 = f32[] parameter(1)
    ROOT tmp_2 = f32[] add(f32[] tmp_0, f32[] tmp_1)
  }
  tmp_3 = s32[] constant(1)
  ROOT tmp_4 = f32[] conditional(s32[] tmp_3, f32[] tmp_2, f32[] tmp_2), branch_computations={
  {
    ROOT tmp_0 = f32[] parameter(0)
  },
  {
    tmp_0 = f32[] parameter(0)
    ROOT tmp_1 = f32[] negate(f32[] tmp_0)
  }
  }
}"""
    m = parse_hlo(text)
    reduce = m.entry.instruction("tmp_2")
    body = reduce.attrs["to_apply"]
    assert body.root.opcode == "add" and len(body.parameters) == 2
    branches = m.entry.root.attrs["branch_computations"]
    assert [b.root.opcode for b in branches] == ["parameter", "negate"]
    assert len({c.name for c in m.computations}) == 4


# ---- random modules: a DAG of elementwise, broadcast, reduce and tuple ops ------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_UNARY = ["negate", "abs", "exponential", "tanh", "sqrt", "floor", "copy"]
_BINARY = ["add", "multiply", "subtract", "maximum", "minimum", "divide", "power"]


@st.composite
def random_modules(draw) -> str:
    dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    shape = f"f32[{','.join(map(str, dims))}]"
    lines = [f"  p{i} = {shape} parameter({i})" for i in range(draw(st.integers(1, 3)))]
    names = [f"p{i}" for i in range(len(lines))]
    for k in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["unary", "binary", "const", "compare_select"]))
        if kind == "unary":
            lines.append(f"  v{k} = {shape} {draw(st.sampled_from(_UNARY))}({draw(st.sampled_from(names))})")
        elif kind == "binary":
            a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
            lines.append(f"  v{k} = {shape} {draw(st.sampled_from(_BINARY))}({a}, {b})")
        elif kind == "const":
            value = draw(st.floats(allow_nan=True, allow_infinity=True, width=32))
            lines.append(f"  c{k} = f32[] constant({'nan' if value != value else repr(float(value))})")
            lines.append(f"  v{k} = {shape} broadcast(c{k}), dimensions={{}}")
        else:
            a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
            direction = draw(st.sampled_from(["EQ", "NE", "LT", "LE", "GT", "GE"]))
            lines.append(f"  m{k} = pred[{','.join(map(str, dims))}] compare({a}, {b}), direction={direction}")
            lines.append(f"  v{k} = {shape} select(m{k}, {a}, {b})")
        names.append(f"v{k}")
    lines.append("  z = f32[] constant(0)")
    lines.append(f"  r = f32[] reduce({names[-1]}, z), dimensions={{{','.join(map(str, range(len(dims))))}}}, "
                 "to_apply=add_f32")
    lines.append(f"  ROOT t = ({shape}, f32[]) tuple({names[-1]}, r)")
    adder = "add_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    return "HloModule random\n\n" + adder + "\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_modules())
def test_random_modules_round_trip_and_agree_with_xla(text):
    ours = parse_hlo(text)
    printed = module_to_text(ours)
    assert module_to_text(parse_hlo(printed)) == printed
    theirs = parse_hlo(xla_reprint(printed, print_operand_shape=True))
    assert semantics(theirs) == semantics(ours)


@pytest.mark.parametrize("text", CASES)
def test_attributes_print_in_xlas_order(text):
    ours = parse_hlo(text)
    skip_if_xla_reserved_names(ours)
    # The parser keeps attributes in text order, so XLA's printing order can be read back.
    printed = parse_hlo(module_to_text(ours))
    theirs = parse_hlo(xla_reprint(module_to_text(ours)))
    mine = {i.name: list(i.attrs) for i in printed.all_instructions()}
    xlas = {i.name: list(i.attrs) for i in theirs.all_instructions() if i.name in mine}
    assert xlas == {n: mine[n] for n in xlas}
