"""Semantic mutations of HLO text: the text still lexes and mostly parses, but the module is
wrong in a way the verifier (or the backends) must notice, or is a different valid module.

Each mutator is `fn(text, rng) -> text`; it works on instruction lines found by a regular
expression and returns the text unchanged when the module has nothing it can mutate.
"""
from __future__ import annotations

import random
import re

from .mutate import Mutator

# `[ROOT ]name = shape opcode(operands)[, attributes]`
_INST = re.compile(r"^(?P<indent>\s*)(?P<root>ROOT\s+)?(?P<name>%?[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+"
                   r"(?P<opcode>[a-z][a-z0-9\-]*)\((?P<operands>[^()]*)\)(?P<rest>.*)$")
_ARRAY_SHAPE = re.compile(r"\b(?P<dtype>pred|[sufc]\d+|bf16|f8e\w+)\[(?P<dims>[^\]]*)\]")
_DTYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u32", "f16", "bf16", "f32", "f64", "c64"]
_COMP_HEADER = re.compile(r"^(?P<entry>ENTRY\s+)?(?P<name>%?[\w.\-]+)\s*(\(.*\)\s*->\s*.*)?\{\s*$")


def _lines(text: str) -> tuple[list[str], list[int]]:
    lines = text.split("\n")
    return lines, [i for i, line in enumerate(lines) if _INST.match(line)]


def _operands(m: re.Match) -> list[str]:
    ops = m.group("operands").strip()
    return [o.strip() for o in ops.split(",")] if ops else []


def _names(lines: list[str], idx: list[int]) -> list[str]:
    return [_INST.match(lines[i]).group("name") for i in idx]


def _rebuild(m: re.Match, **kw) -> str:
    g = {k: m.group(k) or "" for k in ("indent", "root", "name", "shape", "opcode", "operands", "rest")}
    g.update(kw)
    return f"{g['indent']}{g['root']}{g['name']} = {g['shape']} {g['opcode']}({g['operands']}){g['rest']}"


def _pick(lines, idx, rng, where=lambda m: True):
    cands = [i for i in idx if where(_INST.match(lines[i]))]
    if not cands:
        return None, None
    i = rng.choice(cands)
    return i, _INST.match(lines[i])


def change_dims(text: str, rng: random.Random) -> str:
    """Change one dimension of one instruction's shape (±1, 0, a large size), or add/drop one."""
    lines, idx = _lines(text)
    i, m = _pick(lines, idx, rng, lambda m: _ARRAY_SHAPE.search(m.group("shape")))
    if m is None:
        return text
    shapes = list(_ARRAY_SHAPE.finditer(m.group("shape")))
    sm = rng.choice(shapes)
    dims = [d for d in sm.group("dims").split(",") if d.strip()]
    r = rng.random()
    if dims and r < 0.6:
        k = rng.randrange(len(dims))
        try:
            d = int(dims[k].strip().lstrip("<="))
        except ValueError:
            d = 1
        dims[k] = str(rng.choice([d + 1, max(d - 1, 0), 0, 1, d * 2, 100003]))
    elif dims and r < 0.8:
        dims.pop(rng.randrange(len(dims)))
    else:
        dims.insert(rng.randrange(len(dims) + 1), str(rng.choice([1, 2, 3])))
    shape = m.group("shape")
    shape = shape[:sm.start("dims")] + ",".join(dims) + shape[sm.end("dims"):]
    # The layout no longer fits the rank: drop it (XLA text allows a shape without one).
    shape = re.sub(r"(\[[^\]]*\])\{[^}]*\}", r"\1", shape, count=0) if rng.random() < 0.8 else shape
    lines[i] = _rebuild(m, shape=shape)
    return "\n".join(lines)


def change_dtype(text: str, rng: random.Random) -> str:
    """Change the element type of one instruction's shape."""
    lines, idx = _lines(text)
    i, m = _pick(lines, idx, rng, lambda m: _ARRAY_SHAPE.search(m.group("shape")))
    if m is None:
        return text
    sm = rng.choice(list(_ARRAY_SHAPE.finditer(m.group("shape"))))
    shape = m.group("shape")
    shape = shape[:sm.start("dtype")] + rng.choice(_DTYPES) + shape[sm.end("dtype"):]
    lines[i] = _rebuild(m, shape=shape)
    return "\n".join(lines)


def swap_operands(text: str, rng: random.Random) -> str:
    """Reverse or shuffle the operands of an instruction with two or more."""
    lines, idx = _lines(text)
    i, m = _pick(lines, idx, rng, lambda m: len(_operands(m)) >= 2)
    if m is None:
        return text
    ops = _operands(m)
    rng.shuffle(ops) if rng.random() < 0.5 else ops.reverse()
    lines[i] = _rebuild(m, operands=", ".join(ops))
    return "\n".join(lines)


def forward_operand(text: str, rng: random.Random) -> str:
    """Point an operand at a later instruction, at the instruction itself, or at a name that
    does not exist."""
    lines, idx = _lines(text)
    i, m = _pick(lines, idx, rng, lambda m: len(_operands(m)) >= 1)
    if m is None:
        return text
    ops = _operands(m)
    k = rng.randrange(len(ops))
    later = [_INST.match(lines[j]).group("name") for j in idx if j > i]
    r = rng.random()
    # The operand may carry its shape (`f32[2] %x`): replace only the name, the last word.
    head = ops[k].rsplit(" ", 1)[0] + " " if " " in ops[k] else ""
    if later and r < 0.6:
        ops[k] = head + rng.choice(later)
    elif r < 0.85:
        ops[k] = head + m.group("name")
    else:
        ops[k] = head + "no_such_value"
    lines[i] = _rebuild(m, operands=", ".join(ops))
    return "\n".join(lines)


def change_operand_count(text: str, rng: random.Random) -> str:
    """Drop one operand, or add a copy of one."""
    lines, idx = _lines(text)
    i, m = _pick(lines, idx, rng, lambda m: len(_operands(m)) >= 1)
    if m is None:
        return text
    ops = _operands(m)
    if rng.random() < 0.5:
        ops.pop(rng.randrange(len(ops)))
    else:
        ops.insert(rng.randrange(len(ops) + 1), rng.choice(ops))
    lines[i] = _rebuild(m, operands=", ".join(ops))
    return "\n".join(lines)


def change_dimensions_attr(text: str, rng: random.Random) -> str:
    """Change a `dimensions={...}` (or slice/padding/index/iota_dimension) attribute."""
    pats = [r"dimensions=\{[^}]*\}", r"index=\d+", r"iota_dimension=\d+", r"slice=\{[^}]*\}",
            r"padding=[\dx_\-]+", r"dynamic_slice_sizes=\{[^}]*\}", r"direction=\w+",
            r"lhs_contracting_dims=\{[^}]*\}", r"rhs_batch_dims=\{[^}]*\}"]
    found = [mm for p in pats for mm in re.finditer(p, text)]
    if not found:
        return text
    mm = rng.choice(found)
    key = mm.group().split("=", 1)[0]
    if key in ("index", "iota_dimension"):
        new = f"{key}={rng.choice([0, 1, 2, 3, 7, 100, -1])}"
    elif key == "direction":
        new = f"direction={rng.choice(['EQ', 'NE', 'LT', 'LE', 'GT', 'GE', 'XX'])}"
    elif key == "padding":
        new = "padding=" + "x".join(f"{rng.randint(-3, 3)}_{rng.randint(-3, 3)}" +
                                    (f"_{rng.randint(0, 2)}" if rng.random() < 0.3 else "")
                                    for _ in range(rng.randint(1, 3)))
    elif key == "slice":
        new = "slice={" + ", ".join(f"[{rng.randint(-1, 4)}:{rng.randint(0, 9)}" +
                                    (f":{rng.randint(0, 3)}]" if rng.random() < 0.3 else "]")
                                    for _ in range(rng.randint(1, 3))) + "}"
    else:
        n = rng.randint(0, 4)
        vals = [str(rng.choice([0, 1, 2, 3, 0, 1, 5, -1])) for _ in range(n)]
        new = f"{key}={{{','.join(vals)}}}"
    return text[:mm.start()] + new + text[mm.end():]


def duplicate_name(text: str, rng: random.Random) -> str:
    """Give an instruction the name of another instruction."""
    lines, idx = _lines(text)
    if len(idx) < 2:
        return text
    a, b = rng.sample(idx, 2)
    ma = _INST.match(lines[a])
    lines[a] = _rebuild(ma, name=_INST.match(lines[b]).group("name"))
    return "\n".join(lines)


def move_root(text: str, rng: random.Random) -> str:
    """Remove a ROOT marker, add a second one, or move it to another instruction."""
    lines, idx = _lines(text)
    roots = [i for i in idx if _INST.match(lines[i]).group("root")]
    r = rng.random()
    if roots and r < 0.4:
        i = rng.choice(roots)
        lines[i] = _rebuild(_INST.match(lines[i]), root="")
    elif idx:
        i = rng.choice(idx)
        lines[i] = _rebuild(_INST.match(lines[i]), root="ROOT ")
        if roots and r < 0.7:
            j = rng.choice(roots)
            if j != i:
                lines[j] = _rebuild(_INST.match(lines[j]), root="")
    return "\n".join(lines)


def change_called_computation(text: str, rng: random.Random) -> str:
    """Point a to_apply/calls/condition/body/branch attribute at another computation (or none)."""
    comps = [m.group("name") for line in text.split("\n") if (m := _COMP_HEADER.match(line.strip()))]
    found = list(re.finditer(r"(to_apply|calls|condition|body|true_computation|false_computation)=(%?[\w.\-]+)",
                             text))
    if not found:
        return text
    mm = rng.choice(found)
    target = rng.choice(comps + ["missing_computation"]) if comps else "missing_computation"
    return text[:mm.start(2)] + target + text[mm.end(2):]


def change_opcode(text: str, rng: random.Random) -> str:
    """Give an instruction another opcode (often one with the same arity)."""
    from hlofuse.hlo.opcodes import OPS

    lines, idx = _lines(text)
    i, m = _pick(lines, idx, rng)
    if m is None:
        return text
    n = len(_operands(m))
    same = [o for o, info in OPS.items() if info.arity == n]
    opcode = rng.choice(same if same and rng.random() < 0.8 else sorted(OPS))
    lines[i] = _rebuild(m, opcode=opcode)
    return "\n".join(lines)


def change_parameter_number(text: str, rng: random.Random) -> str:
    """Renumber a parameter (a duplicate, a gap, a negative number)."""
    found = list(re.finditer(r"parameter\((\d+)\)", text))
    if not found:
        return text
    mm = rng.choice(found)
    return text[:mm.start(1)] + str(rng.choice([0, 1, 2, 5, 99, -1])) + text[mm.end(1):]


def delete_instruction(text: str, rng: random.Random) -> str:
    """Delete one instruction line (its users now name nothing)."""
    lines, idx = _lines(text)
    if not idx:
        return text
    del lines[rng.choice(idx)]
    return "\n".join(lines)


def change_constant(text: str, rng: random.Random) -> str:
    """Change a constant's literal: a value out of the type's range, a wrong element count."""
    found = list(re.finditer(r"constant\(([^()]*)\)", text))
    if not found:
        return text
    mm = rng.choice(found)
    new = rng.choice(["1e40", "-1", "300", "nan", "-inf", "{1, 2}", "{}", "{{1}}", "true", "0x10",
                      "9223372036854775808", "-0", "1.5", "{...}"])
    return text[:mm.start(1)] + new + text[mm.end(1):]


def move_entry(text: str, rng: random.Random) -> str:
    """Remove the ENTRY marker, or put it on another computation."""
    lines = text.split("\n")
    heads = [i for i, line in enumerate(lines) if _COMP_HEADER.match(line.strip()) and not line.startswith("HloModule")]
    if not heads:
        return text
    entry = [i for i in heads if lines[i].lstrip().startswith("ENTRY")]
    for i in entry:
        lines[i] = lines[i].replace("ENTRY ", "", 1)
    if rng.random() < 0.7:
        i = rng.choice(heads)
        lines[i] = "ENTRY " + lines[i]
    return "\n".join(lines)


SEMANTIC_MUTATORS: dict[str, Mutator] = {
    "sem-dims": change_dims, "sem-dtype": change_dtype, "sem-swap-operands": swap_operands,
    "sem-forward-operand": forward_operand, "sem-operand-count": change_operand_count,
    "sem-attr": change_dimensions_attr, "sem-duplicate-name": duplicate_name, "sem-root": move_root,
    "sem-called-computation": change_called_computation, "sem-opcode": change_opcode,
    "sem-parameter-number": change_parameter_number, "sem-delete-instruction": delete_instruction,
    "sem-constant": change_constant, "sem-entry": move_entry,
}
