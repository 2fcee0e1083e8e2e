"""emitters/llvm_text.module_text writes the same text as llvmlite's `str(module)`.

The reference is llvmlite's own printer. Checked on every kernel group and the driver of the
JAX modules of testdata (the instructions the emitters make), and on a module built here with
what the fast writers must hand back to llvmlite or spell exactly: metadata, call attributes,
fast-math flags, varargs, flags on phis, selects and compares, vector compares, alloca counts
and alignment, aligned loads and stores, returned values, quoted names, globals, declarations.
"""
from __future__ import annotations

import glob
import os

import pytest
from llvmlite import ir

from hlofuse.codegen import driver as drv
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, CpuTarget, collector_paused, distinct_kernels, kernel_groups
from hlofuse.codegen.native_plan import NativeProgram
from hlofuse.compiler import optimize
from hlofuse.emitters.llvm_text import instruction_text, module_text
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion.decisions import module_log

JAX_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "jax")
_JAX = sorted(p for p in glob.glob(os.path.join(JAX_DIR, "*.hlo")) if not p.endswith(".opt.hlo"))


def _modules(text: str) -> list[ir.Module]:
    """The kernel group modules and the driver module of the HLO module `text`."""
    fused, _ = optimize(parse_hlo(text), "cpu")
    with collector_paused():
        planner = CpuPlanner(log=module_log(fused))
        code = CpuCode(fused, planner)
        planner.plan(fused.entry)
        target = CpuTarget()
        mods = [mod for _, mod in kernel_groups(distinct_kernels(code.kernels, target), target)]
        native = NativeProgram(planner, fused.entry)
        driver = drv._Module(native, target)
        for plan in native.plans:
            drv._Function(driver, plan).emit()
    return mods + [driver.module]


@pytest.mark.parametrize("path", _JAX[::4], ids=lambda p: os.path.basename(p))
def test_kernels_and_driver_print_as_llvmlite_prints_them(path):
    for mod in _modules(open(path).read()):
        assert module_text(mod) == str(mod)


def test_driver_emits_the_text_llvmlite_prints():
    path = next(p for p in _JAX if os.path.basename(p) == "attention.hlo")
    fused, _ = optimize(parse_hlo(open(path).read()), "cpu")
    planner = CpuPlanner(log=module_log(fused))
    CpuCode(fused, planner)
    planner.plan(fused.entry)
    native = NativeProgram(planner, fused.entry)
    mod = drv._Module(native, CpuTarget())
    for plan in native.plans:
        drv._Function(mod, plan).emit()
    assert drv.emit_driver(native, CpuTarget()) == str(mod.module)


def _edge_module() -> ir.Module:
    m = ir.Module(name="edges")
    m.triple = "x86_64-unknown-linux-gnu"
    i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
    v4 = ir.VectorType(f32, 4)
    g = ir.GlobalVariable(m, i64, name="counter")
    g.initializer = ir.Constant(i64, 7)
    printf = ir.Function(m, ir.FunctionType(i32, [ir.IntType(8).as_pointer()], var_arg=True), name="printf")
    helper = ir.Function(m, ir.FunctionType(f32, [f32, f32]), name="helper")
    ir.Function(m, ir.FunctionType(ir.VoidType(), []), name="declared only")
    fn = ir.Function(m, ir.FunctionType(f32, [f32, i64, v4, ir.IntType(8).as_pointer()]), name="f \"quoted\"")
    x, n, vec, p = fn.args
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop body")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    slots = b.alloca(i64, size=ir.Constant(i32, 4), name="slots")
    slots.align = 16
    one = b.alloca(f32)
    st = b.store(x, one)
    st.align = 4
    ld = b.load(one, name="ld")
    ld.align = 4
    b.store(n, b.gep(slots, [ir.Constant(i64, 1)], inbounds=True))
    b.load(g)
    added = b.fadd(ld, x, flags=("fast",))
    tagged = b.fmul(added, added, name="tagged")
    tagged.set_metadata("fpmath", m.add_metadata([ir.Constant(f32, 2.5)]))
    b.call(helper, [added, tagged], fastmath=("nnan",))
    b.call(helper, [added, tagged], attrs=("nounwind",))
    b.call(helper, [added, tagged], tail=True)
    b.call(printf, [p, n])
    vcmp = b.fcmp_ordered("<", vec, vec, flags=("nnan",))
    b.select(b.extract_element(vcmp, ir.Constant(i32, 0)), x, ld, flags=("fast",))
    b.sext(b.icmp_signed(">", n, ir.Constant(i64, 0)), i64)
    b.branch(loop)
    b.position_at_end(loop)
    phi = b.phi(f32, name="acc", flags=("fast",))
    phi.add_incoming(added, entry)
    plain = b.phi(i64)
    plain.add_incoming(n, entry)
    nxt = b.fsub(phi, ir.Constant(f32, 1.0))
    phi.add_incoming(nxt, loop)
    plain.add_incoming(b.add(plain, ir.Constant(i64, 1), flags=("nsw",)), loop)
    b.cbranch(b.fcmp_unordered("<=", nxt, ir.Constant(f32, 0.0)), done, loop)
    b.position_at_end(done)
    b.ret(phi)
    return m


def test_edge_instructions_print_as_llvmlite_prints_them():
    m = _edge_module()
    for fn in m.functions:
        for block in fn.blocks:
            for inst in block.instructions:
                assert instruction_text(inst) == str(inst), str(inst)
    assert module_text(m) == str(m)
