"""LLVM IR text of an llvmlite module, the same bytes as `str(module)`, written faster.

Printing a module is llvmlite's `Module.__repr__`: every instruction goes through
`_StrCaching.__str__`, `_to_string`, its class's `descr` into a buffer, a `format` and a
`_stringify_metadata` call, about 5 us each; a model's kernels have tens of thousands of
instructions (haiku's ResNet-18 training step: 26,700, 0.14 CPU-s of printing, about 40% of
the kernels' emission). `module_text` walks the module as `Module.__repr__` does and writes
the instructions the emitters make by the dozen (arithmetic, getelementptr, casts, loads,
stores, branches, compares, phis, selects, plain calls, allocas, returns) with one f-string
each, mirroring their classes' `descr` character for character (the double space of a phi or
select without flags, the trailing space a compare leaves and `rstrip` removes); any other
instruction, one with metadata, a call with attributes or fast-math flags, and every other
global, is printed by llvmlite itself. tests/emitters/test_llvm_text.py checks the text
against `str(module)` on every kernel and driver of the models it compiles.
"""
from __future__ import annotations

from llvmlite import ir
from llvmlite.ir import instructions as ins


def _generic(i) -> str:
    # Instruction.descr: "{opname}[ flags] {type} {operands}{metadata}"
    opname = i.opname if not i.flags else " ".join([i.opname] + i.flags)
    return f"{opname} {i.type} {', '.join([op.get_reference() for op in i.operands])}\n"


def _terminator(i) -> str:
    # Terminator.descr (Branch, ConditionalBranch): no newline, operands with their types
    return f"{i.opname} {', '.join([f'{op.type} {op.get_reference()}' for op in i.operands])}"


def _ret(i) -> str:
    if i.operands:
        value = i.operands[0]
        return f"{i.opname} {value.type} {value.get_reference()}\n"
    return f"{i.opname}\n"


def _compare(i) -> str:
    lhs, rhs = i.operands
    flags = "".join(" " + f for f in i.flags)
    return f"{i.opname}{flags} {i.op} {lhs.type} {lhs.get_reference()}, {rhs.get_reference()} \n"


def _cast(i) -> str:
    value = i.operands[0]
    return f"{i.opname} {value.type} {value.get_reference()} to {i.type} \n"


def _load(i) -> str:
    [ptr] = i.operands
    align = f", align {i.align:d}" if i.align is not None else ""
    return f"load {i.type}, {ptr.type} {ptr.get_reference()}{align}\n"


def _store(i) -> str:
    value, ptr = i.operands
    align = f", align {i.align:d}" if i.align is not None else ""
    return f"store {value.type} {value.get_reference()}, {ptr.type} {ptr.get_reference()}{align}\n"


def _alloca(i) -> str:
    text = f"{i.opname} {i.allocated_type}"
    if i.operands:
        count, = i.operands
        text += f", {count.type} {count.get_reference()}"
    if i.align is not None:
        text += f", align {i.align}"
    return text


def _gep(i) -> str:
    indices = ", ".join([f"{x.type} {x.get_reference()}" for x in i.indices])
    op = "getelementptr inbounds" if i.inbounds else "getelementptr"
    return f"{op} {i.source_etype}, {i.pointer.type} {i.pointer.get_reference()}, {indices} \n"


def _phi(i) -> str:
    incoming = ", ".join([f"[{v.get_reference()}, {b.get_reference()}]" for v, b in i.incomings])
    return f"phi {' '.join(i.flags)} {i.type} {incoming} \n"


def _select(i) -> str:
    c, a, b = i.operands
    return (f"select {' '.join(i.flags)} {c.type} {c.get_reference()}, {a.type} {a.get_reference()}, "
            f"{b.type} {b.get_reference()} \n")


def _call(i) -> str | None:
    # CallInstr._descr without argument or function attributes, fast-math flags or varargs
    # (llvmlite prints those: None)
    fnty = i.callee.function_type
    if i.arg_attributes or i.attributes or i.fastmath or fnty.var_arg:
        return None
    callee = f"{fnty.return_type} {i.callee.get_reference()}"
    if i.cconv:
        callee = f"{i.cconv} {callee}"
    tail = f"{i.tail} " if i.tail else ""
    args = ", ".join([f"{a.type} {a.get_reference()}" for a in i.operands[1:]])
    return f"{tail}{i.opname} {callee}({args})\n"


# by exact class: a subclass may print otherwise
_WRITERS = {
    ins.Instruction: _generic, ins.Branch: _terminator, ins.ConditionalBranch: _terminator,
    ins.Ret: _ret, ins.ICMPInstr: _compare, ins.FCMPInstr: _compare, ins.CastInstr: _cast,
    ins.LoadInstr: _load, ins.StoreInstr: _store, ins.AllocaInstr: _alloca, ins.GEPInstr: _gep,
    ins.PhiInstr: _phi, ins.SelectInstr: _select, ins.CallInstr: _call,
}
_VOID = ir.VoidType


def instruction_text(i) -> str:
    """`str(i)` for llvmlite instruction `i`."""
    write = _WRITERS.get(type(i))
    body = write(i) if write is not None and not i.metadata else None
    if body is None:
        return str(i)
    if isinstance(i.type, _VOID):
        return body.rstrip()
    return f"{i.get_reference()} = {body}".rstrip()


def function_text(fn: ir.Function) -> str:
    """`str(fn)`: its prototype (llvmlite's), then its blocks."""
    buf: list[str] = []
    fn.descr_prototype(buf)
    if fn.blocks:
        buf.append("{\n")
        for block in fn.blocks:
            buf.append(f"{block._format_name()}:\n")
            buf += [f"  {instruction_text(i)}\n" for i in block.instructions]
        buf.append("}\n")
    return "".join(buf)


def module_text(module: ir.Module) -> str:
    """`str(module)`, the same text (llvmlite's `Module.__repr__`, function bodies written here)."""
    lines = [f'; ModuleID = "{module.name}"', f'target triple = "{module.triple}"',
             f'target datalayout = "{module.data_layout}"', ""]
    lines += [t.get_declaration() for t in module.get_identified_types().values()]
    lines += [function_text(v) if type(v) is ir.Function else str(v) for v in module.globals.values()]
    lines += module._get_metadata_lines()
    return "\n".join(lines)
