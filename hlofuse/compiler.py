"""`compile`: run the pass pipeline on a module and build an executable for a target."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable

from .hlo.ir import HloModule

if TYPE_CHECKING:  # the passes load when compiling, not when hlofuse is imported
    from .passes.fusion.decisions import FusionLog

TARGETS = ("interpreter", "cpu", "gpu", "gpu-emulated")


def fusion_target(target: str) -> str:
    """The fusion policy a backend uses: XLA GPU's choices for GPU targets, XLA CPU's otherwise."""
    return "gpu" if target.startswith("gpu") else "cpu"


def reference_denormals(target: str) -> str:
    """The interpreter's denormal mode that is `target`'s oracle, read from the target's own
    `flushes_denormals`: the real GPU keeps denormals (XLA:GPU's default); the CPU and the
    emulated GPU flush them as XLA:CPU does, and so does the interpreter itself."""
    from .emitters.cpu.target import CpuTarget
    from .emitters.gpu.target import EmulatedGpuTarget, GpuTarget

    cls = {"cpu": CpuTarget, "gpu": GpuTarget, "gpu-emulated": EmulatedGpuTarget}.get(target)
    return "keep" if cls is not None and not cls.flushes_denormals else "flush"


class Executable:
    """A compiled module: call it with numpy arrays, get a tuple of numpy arrays back.

    `fused_module` is the module after the pass pipeline (made from a clone of `module`, so each
    of its instructions traces back to the user's through `HloInstruction.origin`);
    `fusion_log` holds every decision of the fusion passes and of codegen's kernel planner (None
    when no fusion pass ran); `report()` says what was fused and why.
    """

    def __init__(self, module: HloModule | Callable[[], HloModule], fused_module: HloModule, target: str,
                 run: Callable[[list], list], program: Any = None, pipeline: Any = None,
                 compile_seconds: float = 0.0, from_cache: bool = False, memory_estimate: Any = None) -> None:
        # the user's module, or the function that makes it (`compile_source` loads a hit
        # without it: it is made when first read)
        self._module = module
        self.module_entry_key: str | None = None  # the module cache entry it was stored or loaded as
        self.memory_estimate = memory_estimate  # the run's memory (runtime/memory_budget.py), where checked
        self.fused_module = fused_module
        self.target = target
        self._run = run
        self.program = program  # backend object (CpuProgram, GpuProgram) when there is one
        self.pipeline = pipeline
        self.compile_seconds = compile_seconds
        self.from_cache = from_cache  # loaded whole from a module entry (no pass ran: timings() is empty)

    @property
    def module(self) -> HloModule:
        """The user's module (made now if the executable was loaded without it)."""
        if not isinstance(self._module, HloModule):
            self._module = self._module()
        return self._module

    @property
    def fusion_log(self) -> FusionLog | None:
        """The fused module's fusion log (read on first use for an executable loaded from the
        module cache: only a report needs it)."""
        return self.fused_module.fusion_log

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
                                         dump_dir=dump_dir, algorithm=algorithm,
                                         expand_scans=target != "interpreter")
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
    and size bound), and so is the whole compile's result, keyed by the module's text and the
    options (codegen/module_cache.py): compiling the same module again loads it and runs no
    pass and no LLVM (not with `dump_dir`, whose files only a compile writes). `cache=False`
    bypasses every cache; `HLOFUSE_MODULE_CACHE=0` in the environment bypasses only the module
    entries (the passes run, kernels still come from the cache): their key sees the module,
    the options and hlofuse's source on disk, not a change made to hlofuse in this process. `algorithm`: the fusion algorithm ("legacy" or "priority"; None:
    priority on the GPU, legacy on the CPU)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target '{target}'; expected one of {', '.join(TARGETS)}")
    start = time.perf_counter()
    entry_key = None
    if target == "cpu" and cache and dump_dir is None:
        from .codegen.cache import default_cache_dir

        if cache_dir is None:
            cache_dir = default_cache_dir()
        if os.environ.get("HLOFUSE_MODULE_CACHE", "1") not in ("0", ""):
            entry_key = _entry_key(module, target, fusion, algorithm)
            exe = _load_cached(entry_key, module, target, cache_dir, start)
            if exe is not None:
                return exe
    exe = _compile_afresh(module, target, fusion, verify, dump_dir, cache_dir, cache, algorithm, start)
    if entry_key is not None:
        from .codegen.module_cache import store_entry

        program = exe.program
        if store_entry(entry_key, {"code": program.code, "fused": exe.fused_module, "estimate": exe.memory_estimate,
                                   "primitives": program.primitives}, module, cache_dir,
                       runtime=_runtime_objects(program.code)):
            exe.module_entry_key = entry_key
        exe.compile_seconds = time.perf_counter() - start
    return exe


def compile_source(source: str | bytes, kind: str, make_module: Callable[[], HloModule], target: str = "cpu",
                   fusion: bool = True, verify: bool | None = None, dump_dir: str | None = None,
                   cache_dir: str | None = None, cache: bool = True, algorithm: str | None = None) -> Executable:
    """`compile(make_module(), ...)` for the module `make_module` makes from `source` (a file's
    HLO text, StableHLO, a JAX export with its argument signature; `kind` names which, and
    whatever else the making depends on).

    A CPU compile is looked up by the source's SHA-256 first (codegen/module_cache.py
    `source_key`: a small entry naming the module entry its compile made): on a hit the module
    entry is loaded without making the module at all, no parsing or import and no printing of
    it for the key (haiku's ResNet-18 training step: about 200 ms of parsing and 18 ms of
    printing); `Executable.module` makes it when first read (a report, --compare). Otherwise
    the module is made and compiled as `compile` does, and the source entry recorded."""
    start = time.perf_counter()
    text_cached = (target == "cpu" and cache and dump_dir is None
                   and os.environ.get("HLOFUSE_MODULE_CACHE", "1") not in ("0", ""))
    if not text_cached:
        return compile(make_module(), target, fusion, verify, dump_dir, cache_dir, cache, algorithm)
    import hashlib

    from .codegen.cache import default_cache_dir
    from .codegen.module_cache import load_source, source_key, store_source
    from .emitters.cpu.target import host_fingerprint

    if cache_dir is None:
        cache_dir = default_cache_dir()
    data = source.encode() if isinstance(source, str) else bytes(source)
    key = source_key(hashlib.sha256(data).hexdigest(), kind, target, {"fusion": fusion, "algorithm": algorithm},
                     host_fingerprint())
    entry_key = load_source(key, cache_dir)
    if entry_key is not None:
        made: list[HloModule] = []

        def module() -> HloModule:  # made once, whoever asks first (the entry's reader or the user)
            if not made:
                made.append(make_module())
            return made[0]

        exe = _load_cached(entry_key, module, target, cache_dir, start)
        if exe is not None:
            return exe
    exe = compile(make_module(), target, fusion, verify, dump_dir, cache_dir, cache, algorithm)
    if exe.module_entry_key is not None:
        store_source(key, exe.module_entry_key, cache_dir)
    return exe


def _compile_afresh(module: HloModule, target: str, fusion: bool, verify: bool | None, dump_dir: str | None,
                    cache_dir: str | None, cache: bool, algorithm: str | None, start: float) -> Executable:
    """The pass pipeline and the backend's build, no module entry looked up or stored."""
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

    estimate = check_compiled(fused, target, program)
    return Executable(module, fused, target, run, program, pipeline, time.perf_counter() - start,
                      memory_estimate=estimate)


def _entry_key(module: HloModule, target: str, fusion: bool, algorithm: str | None) -> str:
    """The module entry key of compiling `module` for `target` with these options.

    The module's part is its canonical text without operand shapes: each operand's shape is
    on the operand's own line, so the text still says everything the compile depends on, and
    it is most of what a hit spends beyond loading (haiku's ResNet-18 step: 2,828 instructions,
    12-17 ms printed whole, 8-9 ms so, load 7-8). A fingerprint of the text the module was
    parsed from would be cheaper, but could not see a change made to the module after
    parsing, and a stale key would run another module's code: `compile_source` keys by the
    source where no module object exists yet to be changed."""
    from .codegen.module_cache import module_key
    from .emitters.cpu.target import host_fingerprint
    from .hlo.printer import module_to_text

    return module_key(module_to_text(module, operand_shapes=False), target,
                      {"fusion": fusion, "algorithm": algorithm}, host_fingerprint())


def _runtime_objects(code: Any) -> list:
    """The HLO objects a CPU program (`CpuCode`) loaded from a module entry reads to run through
    its native driver, whose states an entry holds first (codegen/module_cache.py `dumps`): the
    fused module and its entry computation (the program finds its entry plan by them), the
    entry's parameters (the driver's argument check) and the constants in the driver's table.
    Everything else of the fused module (most of it: the fused computations) is read on its
    first use."""
    fused = code.module
    objects = [fused, fused.entry, *fused.entry.parameters]
    objects += [entry.payload[0] for entry in code.native.table if entry.kind == "const"]
    return objects


def _load_cached(key: str, module: HloModule | Callable[[], HloModule], target: str, cache_dir: str | None,
                 start: float) -> Executable | None:
    """The Executable of the module entry under `key` (memory or disk cache), loaded and ready
    to run, or None. Its fused module and fusion log are the original compile's, read from the
    entry on first use (codegen/module_cache.py `loads`); the memory check takes the estimate
    the compile made, the oneDNN primitives the descriptions it found."""
    from .codegen.cpu import CpuCode
    from .codegen.module_cache import load_entry
    from .runtime.cpu_executor import CpuProgram
    from .runtime.memory_budget import MemoryEstimate, check_memory

    payload = load_entry(key, module, cache_dir)
    if not (isinstance(payload, dict) and isinstance(payload.get("code"), CpuCode)
            and isinstance(payload.get("fused"), HloModule) and payload["code"].module is payload["fused"]
            and isinstance(payload.get("estimate"), MemoryEstimate) and isinstance(payload.get("primitives"), list)):
        return None
    code, fused = payload["code"], payload["fused"]
    for o in code.objects:
        o.cached = True
    loaded = time.perf_counter()
    code.timings = {"module cache": loaded - start}
    # the oneDNN primitives' descriptions of the compile: derived again, they would read the
    # fused computations (haiku's ResNet-18 step: 17 ms, most of it reading them)
    program = CpuProgram.load(code, payload["primitives"])
    program.compile_seconds = time.perf_counter() - start
    check_memory(payload["estimate"])
    exe = Executable(module, fused, target, program.run, program, None, time.perf_counter() - start, from_cache=True,
                     memory_estimate=payload["estimate"])
    exe.module_entry_key = key
    return exe
