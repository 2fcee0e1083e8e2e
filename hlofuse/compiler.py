"""`compile`: run the pass pipeline on a module and build an executable for a target."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .hlo.ir import HloModule

if TYPE_CHECKING:  # the passes load when compiling, not when hlofuse is imported
    from .passes.fusion.decisions import FusionLog

TARGETS = ("interpreter", "cpu", "gpu", "gpu-emulated")


def fusion_target(target: str) -> str:
    """The fusion policy a backend uses: XLA GPU's choices for GPU targets, XLA CPU's otherwise."""
    return "gpu" if target.startswith("gpu") else "cpu"


class Executable:
    """A compiled module: call it with numpy arrays, get a tuple of numpy arrays back.

    `fused_module` is the module after the pass pipeline (made from a clone of `module`, so each
    of its instructions traces back to the user's through `HloInstruction.origin`);
    `fusion_log` holds every decision of the fusion passes and of codegen's kernel planner (None
    when no fusion pass ran); `report()` says what was fused and why.
    """

    def __init__(self, module: HloModule, fused_module: HloModule, target: str,
                 run: Callable[[list], list], program: Any = None, pipeline: Any = None,
                 compile_seconds: float = 0.0) -> None:
        self.module = module
        self.fused_module = fused_module
        self.fusion_log: FusionLog | None = fused_module.fusion_log
        self.target = target
        self._run = run
        self.program = program  # backend object (CpuProgram, GpuProgram) when there is one
        self.pipeline = pipeline
        self.compile_seconds = compile_seconds

    def __call__(self, *arrays) -> tuple:
        # Every backend checks the arguments against the entry parameters (InputError).
        return tuple(self._run(list(arrays)))

    def report(self) -> dict:
        """What was fused and why, as JSON-able data (see `hlofuse compile --emit report`)."""
        return self.fusion_report().to_dict()

    def fusion_report(self):
        """The fusion report object (with `to_text()` and `to_dict()`)."""
        from .passes.fusion.report import build_report

        return build_report(self.module, self.fused_module, self.fusion_log)

    def timings(self) -> list:
        """Per-pass (name, seconds, changed) of the pipeline that built this executable."""
        return list(getattr(self.pipeline, "timings", []) or [])


def optimize(module: HloModule, target: str = "cpu", fusion: bool = True, verify: bool | None = None,
             dump_dir: str | None = None, passes: list[str] | str | None = None, algorithm: str | None = None):
    """Run the pass pipeline on a copy of `module`; return (optimized module, pipeline).

    The input is always verified (a malformed module is the user's error, not something to
    run). `verify` verifies after every pass as well; None takes the `HLOFUSE_VERIFY_PASSES`
    environment variable (the test suite sets it), off otherwise. `passes` replaces the
    standard pipeline by a pass list (`"simplifier,cse,fusion{target=cpu}"`, or its items);
    `algorithm` picks the fusion algorithm ("legacy" or "priority"; None: the target's default)."""
    from .gc_pause import gc_paused
    from .hlo.verifier import verify as verify_module
    from .passes.pipeline import PassPipeline, parse_pass_list, standard_pipeline

    if verify is None:
        verify = os.environ.get("HLOFUSE_VERIFY_PASSES", "") not in ("", "0")
    # the collector's full walks made big modules superlinear (gc_pause.py)
    with gc_paused():
        verify_module(module)
        work = module.clone()
        if passes is not None:
            spec = passes if isinstance(passes, str) else ",".join(passes)
            pipeline = PassPipeline(parse_pass_list(spec, defaults={"target": fusion_target(target)}),
                                    verify=verify, dump_dir=dump_dir)
        else:
            pipeline = standard_pipeline(target=fusion_target(target), fusion=fusion, verify=verify,
                                         dump_dir=dump_dir, algorithm=algorithm)
        pipeline.run(work)
    return work, pipeline


def fuse(module: HloModule, target: str = "cpu", verify: bool | None = None, algorithm: str | None = None):
    """The fusion half of `optimize`: the fusion passes for `target`, then DCE, on a clone of
    `module` (already through the passes before fusion: `optimize(m, target, fusion=False)`).
    Returns (fused module, pipeline); `fuse(optimize(m, t, fusion=False)[0], t)` fuses as
    `optimize(m, t)` does, and each fused instruction traces back to the instruction of `module`
    it came from (`HloInstruction.origin`)."""
    from .passes.dce import DeadCodeElimination
    from .passes.fusion import fusion_passes
    from .passes.pipeline import PassPipeline

    if verify is None:
        verify = os.environ.get("HLOFUSE_VERIFY_PASSES", "") not in ("", "0")
    work = module.clone()
    pipeline = PassPipeline([*fusion_passes(fusion_target(target), algorithm), DeadCodeElimination()], verify=verify,
                            name=f"fusion-{fusion_target(target)}")
    pipeline.run(work)
    return work, pipeline


def compile(module: HloModule, target: str = "cpu", fusion: bool = True, verify: bool | None = None,
            dump_dir: str | None = None, cache_dir: str | None = None, cache: bool = True,
            algorithm: str | None = None) -> Executable:
    """Optimize and fuse `module` for `target` and return an Executable.

    On the CPU, each kernel's object code is cached in this process and on disk, in
    `cache_dir` or by default the user's cache directory (`$HLOFUSE_CACHE_DIR`, else
    `$XDG_CACHE_HOME/hlofuse`, else `~/.cache/hlofuse`; see codegen/cache.py for its checks
    and size bound). `cache=False` bypasses both caches. `algorithm`: the fusion algorithm
    ("legacy" or "priority"; None: priority on the GPU, legacy on the CPU)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target '{target}'; expected one of {', '.join(TARGETS)}")
    start = time.perf_counter()
    fused, pipeline = optimize(module, target, fusion=fusion, verify=verify, dump_dir=dump_dir, algorithm=algorithm)
    program = None
    if target == "interpreter":
        from .runtime.interpreter import evaluate

        def run(args: list) -> list:
            return evaluate(fused, args)
    elif target == "cpu":
        from .runtime.cpu_executor import CpuProgram

        from .codegen.cache import default_cache_dir

        if cache and cache_dir is None:
            cache_dir = default_cache_dir()
        program = CpuProgram.compile(fused, cache_dir=cache_dir if cache else None, cache=cache)
        run = program.run
    else:
        from .runtime.gpu_executor import GpuProgram

        program = GpuProgram.compile(fused, emulated=(target == "gpu-emulated"))
        run = program.run
    # Nothing has been allocated for a run yet: refuse a module that cannot fit (ResourceError)
    # here rather than fail with a MemoryError halfway through a run.
    from .runtime.memory_budget import check_compiled

    check_compiled(fused, target, program)
    return Executable(module, fused, target, run, program, pipeline, time.perf_counter() - start)
