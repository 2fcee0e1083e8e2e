"""Cold compiles of the same modules under two settings, A and B, beside XLA:CPU's.

    cold_ab_rows(texts, rounds, setting, distinct=False)

`setting(key)` is a context manager putting hlofuse in setting "a" or "b" (a module switch, a
kernel-level rule); each module is compiled cold as benchmarks/compile_time.py times it
(`measure`: a fresh cache directory, LLVM as configured), A and B alternating for `rounds`
rounds, and XLA:CPU compiles the same text once. Printed per module (medians): distinct kernels
(with `distinct`), wall and CPU seconds, LLVM's seconds (optimization + code generation, summed
over kernels) and the ratio to XLA's; then the geometric means. `module_settings` sets some of
hlofuse's module-level switches for a with block; `compiled_under(text, module, settings)`
compiles a module under them. Used by generic_kernels_ab.py and small_level_ab.py."""
from __future__ import annotations

import math
import statistics
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Callable
from unittest import mock


def cold_ab_rows(texts: dict[str, str], rounds: int, setting: Callable[[str], AbstractContextManager],
                 distinct: bool = False) -> None:
    """Print the cold-compile A/B of every module of `texts` (name -> HLO text); see the module doc."""
    from compile_time import measure

    ratios: dict[str, list[float]] = {"a": [], "b": []}
    for name, text in texts.items():
        got: dict[str, list[dict]] = {"a": [], "b": []}
        xla = None
        for r in range(rounds):
            for key in (("a", "b") if r % 2 == 0 else ("b", "a")):
                with setting(key):
                    row = measure(name, text, xla=xla is None)
                xla = row.get("xla_s", xla)
                got[key].append(row)

        def med(key: str, field: str) -> float:
            return statistics.median(r.get(field, 0.0) for r in got[key])

        llvm = {k: med(k, "llvm_optimization_s") + med(k, "code_generation_s") for k in got}
        line = f"{name:26s}"
        if distinct:
            line += f" distinct {med('a', 'distinct'):4.0f} -> {med('b', 'distinct'):4.0f},"
        line += (f" cold {med('a', 'cold_s'):6.3f} -> {med('b', 'cold_s'):6.3f} s, CPU {med('a', 'cold_cpu_s'):6.3f}"
                 f" -> {med('b', 'cold_cpu_s'):6.3f} s, LLVM {llvm['a']:6.3f} -> {llvm['b']:6.3f} s"
                 f" ({llvm['b'] / max(llvm['a'], 1e-9):.2f})")
        if xla:
            for k in got:
                ratios[k].append(med(k, "cold_s") / xla)
            line += f", XLA {xla:6.3f} s: x{ratios['a'][-1]:.2f} -> x{ratios['b'][-1]:.2f}"
        print(line, flush=True)
    if ratios["a"]:
        geo = {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in ratios.items()}
        print(f"cold / XLA:CPU geometric mean over {len(ratios['a'])}: x{geo['a']:.2f} -> x{geo['b']:.2f}")


def module_settings(module: ModuleType, settings: dict) -> AbstractContextManager:
    """A with block during which `module`'s attributes `settings` (name -> value) are set (none:
    nothing changes)."""
    return mock.patch.multiple(module, **settings) if settings else nullcontext()


def compiled_under(text: str, module: ModuleType, settings: dict):
    """`text` compiled for the CPU (cache off) with `module`'s attributes `settings` (name ->
    value) set for the compile, and LLVM's seconds (optimization + code generation)."""
    from hlofuse import compiler
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.runtime.cpu_executor import CpuProgram

    with module_settings(module, settings):
        fused, _ = compiler.optimize(parse_hlo(text))
        prog = CpuProgram.compile(fused, cache=False)
    t = prog.code.timings
    return prog, t.get("llvm optimization", 0.0) + t.get("code generation", 0.0)
