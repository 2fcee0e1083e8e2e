"""Reading loop hints and sizes out of kernel IR, for the tests of which loops the CPU emitters
keep rolled (tests/codegen/test_reduction_unroll.py, test_epilogue_unroll.py)."""
from __future__ import annotations

import re

from hlofuse.emitters import ir_helpers
from hlofuse.emitters.cpu.target import optimized_module


def loop_hint_names(ir_text: str) -> dict[str, set[str]]:
    """Loop name (a `for_range` name, copies' `.N` suffix dropped) -> the hint names its latch's
    loop ID carries (`llvm.loop.unroll.disable`, `llvm.loop.vectorize.enable`, ...)."""
    props = dict(re.findall(r'^!(\d+) = !\{ !"([\w.]+)"', ir_text, re.M))
    ids = {i: {props[o.strip().lstrip("!")] for o in ops.split(",") if o.strip().lstrip("!") in props}
           for i, ops in re.findall(r"^!(\d+) = !\{ !\1, (.*) \}", ir_text, re.M)}
    return {re.sub(r"\.\d+$", "", name): ids.get(i, set())
            for name, i in re.findall(r'br label %"([\w.]+)\.header", !llvm\.loop !(\d+)', ir_text)}


def instructions_after_o3(ir_text: str) -> int:
    """LLVM instructions of the module after the O3 pipeline."""
    mod = optimized_module(ir_text)
    return sum(1 for f in mod.functions for blk in f.blocks for _ in blk.instructions)


def all_unrolled(monkeypatch, emitter_module) -> None:
    """Make `emitter_module`'s `for_range` ignore `unroll=False` (the kernel as before the rule)."""
    real = ir_helpers.for_range

    def unrolled(b, start, stop, name="i", step=1, unroll=True):
        return real(b, start, stop, name, step)

    monkeypatch.setattr(emitter_module, "for_range", unrolled)
