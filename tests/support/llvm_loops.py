"""Reading loop hints and sizes out of kernel IR, for the tests of which loops the CPU emitters
keep rolled (tests/codegen/test_reduction_unroll.py, test_epilogue_unroll.py)."""
from __future__ import annotations

import re

import llvmlite.binding as llvm

from hlofuse.emitters import ir_helpers
from hlofuse.emitters.cpu.target import optimized_module, pipeline_options

# An AVX2 host's code generation, whatever host runs the test (Zen 1: 16 ymm registers, no
# AVX-512), for claims about the size of AVX2 kernels after O3.
AVX2_CPU = ("znver1", "+avx,+avx2,+fma,+f16c,+bmi,+bmi2")


def loop_hint_names(ir_text: str) -> dict[str, set[str]]:
    """Loop name (a `for_range` name, copies' `.N` suffix dropped) -> the hint names its latch's
    loop ID carries (`llvm.loop.unroll.disable`, `llvm.loop.vectorize.enable`, ...)."""
    props = dict(re.findall(r'^!(\d+) = !\{ !"([\w.]+)"', ir_text, re.M))
    ids = {i: {props[o.strip().lstrip("!")] for o in ops.split(",") if o.strip().lstrip("!") in props}
           for i, ops in re.findall(r"^!(\d+) = !\{ !\1, (.*) \}", ir_text, re.M)}
    return {re.sub(r"\.\d+$", "", name): ids.get(i, set())
            for name, i in re.findall(r'br label %"([\w.]+)\.header", !llvm\.loop !(\d+)', ir_text)}


def instructions_after_o3(ir_text: str, cpu: tuple[str, str] | None = None) -> int:
    """LLVM instructions of the module after the O3 pipeline: for the host, or for `cpu` (an
    LLVM CPU name and feature string, such as AVX2_CPU) where given."""
    if cpu is None:
        mod = optimized_module(ir_text)
    else:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
        machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu[0], features=cpu[1], opt=3)
        builder = llvm.create_pass_builder(machine, pipeline_options(3))
        builder.getModulePassManager().run(mod, builder)
    return sum(1 for f in mod.functions for blk in f.blocks for _ in blk.instructions)


def all_unrolled(monkeypatch, emitter_module) -> None:
    """Make `emitter_module`'s `for_range` ignore `unroll=False` (the kernel as before the rule)."""
    real = ir_helpers.for_range

    def unrolled(b, start, stop, name="i", step=1, unroll=True):
        return real(b, start, stop, name, step)

    monkeypatch.setattr(emitter_module, "for_range", unrolled)
