"""Compile time: hlofuse beside XLA:CPU on the same HLO text, in one process.

    python benchmarks/compile_time.py [--sizes 1000,10000,100000] [--budget 600] [--no-xla]
                                      [--workloads] [--models [NAME,...]] [--json OUT]
    python benchmarks/compile_time.py --llvm-threads    # do llvmlite's calls run in parallel?
    python benchmarks/compile_time.py --kinds [--variants] [--models NAME,...]
                                      # LLVM time and IR growth per kernel kind (and other pipelines)
                                      # (every kernel ranked by LLVM ms: benchmarks/llvm_rank.py)
    python benchmarks/compile_time.py --groups [--models NAME,...]
                                      # LLVM time with the kernels in groups of 1, 4, 8, 16
    python benchmarks/compile_time.py --opt-levels [--size small|large] [--models NAME,...]
                                      # what O3 adds over O2: LLVM seconds and kernel speed

Generated modules of about 1k, 10k and 100k instructions, in two forms: a *chain* (each
elementwise op reads the one before: one deep fused kernel) and a *wide* DAG (independent
elementwise branches, added pairwise: many shallow fusions), then (--workloads) the JAX
workloads of benchmarks/workloads.py and a training step of 50 same-shaped Adam updates, then
(--models, needs the `bench` extra) the real models of benchmarks/model_zoo.py, closing with the
geometric mean of hlofuse/XLA:CPU over the models. For each: hlofuse's cold compile (an empty
cache of its own, so no row reuses another's kernels: passes, planning, emission, LLVM optimization, code
generation, loading, as `hlofuse compile --timings` shows them), its compile from the disk
cache in the same process with the memory cache cleared ('cached': the median of CACHED_HITS
compiles from the whole module's entry,
codegen/module_cache.py; 'kernels': every kernel's object from disk, but no module entry, so
the passes, planning and the driver's emission run), and XLA:CPU's compile of the same text
(benchmarks/real_models.py's XlaExecutable); time per instruction and the growth from the
previous size. A size whose predicted time (the last one's, scaled by its growth) exceeds what
is left of --budget is not run: the table says how far it got. The machine's load is printed:
these machines are shared, so compare numbers from the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Cached compiles timed per row (the median is reported): a hit is tens of ms, so one sample on a
# shared machine says more about the neighbours than about the cache.
CACHED_HITS = 5
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def chain_module(n: int) -> str:
    """About `n` instructions: a chain of add/multiply/negate/exponential on f32[8,8] (bounded:
    exp(-(x + p) / 2) contracts), so everything fuses into one deep kernel."""
    lines = ["HloModule chain", "", "ENTRY main {", "  p = f32[8,8] parameter(0)",
             "  half = f32[] constant(0.5)", "  hb = f32[8,8] broadcast(half), dimensions={}"]
    cur = "p"
    ops = ("add({cur}, p)", "multiply({cur}, hb)", "negate({cur})", "exponential({cur})")
    for i in range(max(n - 4, 1)):
        lines.append(f"  v{i} = f32[8,8] " + ops[i % 4].format(cur=cur))
        cur = f"v{i}"
    lines += [f"  ROOT out = f32[8,8] add({cur}, p)", "}"]
    return "\n".join(lines) + "\n"


def wide_module(n: int) -> str:
    """About `n` instructions: n/4 independent branches exp(x_k * c_k) + y_k over f32[16]
    (a parameter each, so they do not fold together) summed pairwise into one result."""
    branches = max(n // 4, 2)
    params = 16
    lines = ["HloModule wide", "", "ENTRY main {"]
    lines += [f"  p{j} = f32[16] parameter({j})" for j in range(params)]
    vals = []
    for k in range(branches):
        a, b = f"p{k % params}", f"p{(k * 7 + 3) % params}"
        # (names XLA's lexer cannot take for a type, such as s1 or u8)
        lines += [f"  cst{k} = f32[] constant({1 + (k % 97) / 128})",
                  f"  cb{k} = f32[16] broadcast(cst{k}), dimensions={{}}",
                  f"  mul{k} = f32[16] multiply({a}, cb{k})",
                  f"  th{k} = f32[16] tanh(mul{k})",
                  f"  sum{k} = f32[16] add(th{k}, {b})"]
        vals.append(f"sum{k}")
    level = 0
    while len(vals) > 1:
        nxt = []
        for i in range(0, len(vals) - 1, 2):
            name = f"t{level}_{i}"
            lines.append(f"  {name} = f32[16] add({vals[i]}, {vals[i + 1]})")
            nxt.append(name)
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals, level = nxt, level + 1
    lines[-1] = lines[-1].replace(f"  {vals[0]} =", f"  ROOT {vals[0]} =")
    lines.append("}")
    return "\n".join(lines) + "\n"


def adam_step_text(n_params: int = 50) -> str:
    """HLO of an Adam update of `n_params` parameters of five shapes (through JAX)."""
    import jax
    import jax.numpy as jnp

    shapes = [(256, 256), (256,), (128, 512), (512,), (64, 64)]
    params = [jnp.ones(shapes[i % len(shapes)], jnp.float32) for i in range(n_params)]

    def step(ps, gs, ms, vs, t):
        out = []
        for p, g, m, v in zip(ps, gs, ms, vs):
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            out.append((p - 1e-3 * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8), m, v))
        return out

    return jax.jit(step).lower(params, params, params, params, jnp.float32(3.0)).as_text(dialect="hlo")


def instruction_count(text: str) -> int:
    import hlofuse

    return sum(len(c.instructions) for c in hlofuse.parse_hlo(text).computations)


# Seconds after which a cold compile still running writes every thread's stack to stderr
# (real_models.stall_dump): generated modules of 100k instructions take minutes, so later than
# real_models.py's models.
STALL_DUMP_S = 120.0


# Rounds per module (--rounds): each round times hlofuse's cold compile (a fresh cache directory)
# then XLA:CPU's; the row reports the medians of both.
ROUNDS = 1


def measure(name: str, text: str, xla: bool) -> dict:
    """One row: hlofuse cold (an empty cache directory of its own) and cached compile with its
    stages, XLA:CPU's compile; with ROUNDS > 1 that many rounds, the two alternating, and the
    row of the median cold compile (the lower middle one for an even count) with the median of
    XLA:CPU's (`cold_all`, `xla_all`: every round's)."""
    import statistics

    rows = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as cache_dir:
            rows.append(_measure(name, text, xla, cache_dir))
    row = sorted(rows, key=lambda r: r["cold_s"])[(len(rows) - 1) // 2]
    row["cold_all"] = [r["cold_s"] for r in rows]
    xla_all = [r["xla_s"] for r in rows if "xla_s" in r]
    if xla_all:
        row["xla_all"], row["xla_s"] = xla_all, statistics.median(xla_all)
    return row


def _measure(name: str, text: str, xla: bool, cache_dir: str) -> dict:
    import gc

    import hlofuse
    from hlofuse.codegen import cache

    cache.memory_cache.clear()  # a kernel compiled for an earlier row is not cold
    # Each timed compile starts with no garbage of earlier ones: HLO graphs are cycles, and a
    # full collection of an earlier row's executables (0.2 s for a 3,000-instruction module's)
    # would otherwise land in whichever compile triggers it.
    gc.collect()

    start = time.perf_counter()
    module = hlofuse.parse_hlo(text)
    parse = time.perf_counter() - start
    count = sum(len(c.instructions) for c in module.computations)
    from real_models import stall_dump

    cpu0 = time.process_time()
    start = time.perf_counter()
    with stall_dump(STALL_DUMP_S):  # a cold compile that stalls leaves every thread's stack on stderr
        exe = hlofuse.compile(module, "cpu", verify=False, cache_dir=cache_dir)
    cold = time.perf_counter() - start
    cold_cpu = time.process_time() - cpu0
    code = exe.program.code
    row = {"name": name, "instructions": count, "parse_s": parse, "cold_s": cold, "cold_cpu_s": cold_cpu,
           "passes_s": sum(t for _, t, _ in exe.timings()), "kernels": len(code.kernels),
           "distinct": len(code.objects), **{k.replace(" ", "_") + "_s": v for k, v in code.timings.items()}}
    # from the disk cache with the module entry gone: every kernel's object and the driver's
    # from disk, the passes, planning and the driver's emission run again
    cache.memory_cache.clear()
    gc.collect()
    for name_ in os.listdir(cache_dir):
        if name_.endswith(cache.MODULE):
            os.remove(os.path.join(cache_dir, name_))
    start = time.perf_counter()
    hlofuse.compile(module, "cpu", verify=False, cache_dir=cache_dir)
    row["kernels_cached_s"] = time.perf_counter() - start
    # from the module entry on disk (codegen/module_cache.py): no pass, no LLVM. The median of
    # CACHED_HITS hits, wall and CPU: one wall sample on a loaded machine is 2-3x the hit's CPU.
    walls, cpus, hits = [], [], []
    for _ in range(CACHED_HITS):
        cache.memory_cache.clear()
        gc.collect()
        cpu0 = time.process_time()
        start = time.perf_counter()
        exe = hlofuse.compile(module, "cpu", verify=False, cache_dir=cache_dir)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu0)
        hits.append(exe.from_cache)
    row["cached_s"], row["cached_cpu_s"] = statistics.median(walls), statistics.median(cpus)
    row["module_hit"] = all(hits)
    if xla:
        from real_models import XlaExecutable

        try:
            row["xla_s"] = XlaExecutable(text).compile_seconds
        except Exception as e:  # XLA refusing a module is a result, not a crash of the table
            row["xla_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return row


def llvm_threads_check(jobs: int = 4) -> None:
    """Whether llvmlite's calls release the GIL (a Python thread's progress while LLVM works)
    and whether two threads compile faster than one: through llvmlite's API (`compile_ir`:
    they do not, llvmlite holds one process-wide lock around every call, llvmlite/binding/ffi.py)
    and through the lanes' path (codegen/llvm_pool.compile_timed: its long calls past the lock,
    each compilation in an LLVM context of its own)."""
    import threading

    import hlofuse
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget, compile_ir

    fused = hlofuse.compiler.optimize(hlofuse.parse_hlo(chain_module(400)), "cpu", verify=False)[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    text = str(emit_kernel_module(code.kernels[0], CpuTarget(), "f"))
    compile_ir(text)  # warm

    def spin(stop: threading.Event, out: list) -> None:
        n = 0
        while not stop.is_set():
            n += 1
        out.append(n)

    def spin_rate(work) -> float:
        stop, out = threading.Event(), []
        t = threading.Thread(target=spin, args=(stop, out))
        start = time.perf_counter()
        t.start()
        work()
        stop.set()
        t.join()
        return out[0] / (time.perf_counter() - start)

    alone = spin_rate(lambda: time.sleep(0.5))
    during = spin_rate(lambda: compile_ir(text))
    print(f"Python thread's speed while LLVM compiles: {during / alone:.2f} of its speed alone "
          f"(near 0 would mean the GIL is held)")
    from hlofuse.codegen.llvm_pool import compile_timed

    for name, compile_one in (("llvmlite's API", lambda: compile_ir(text)), ("the lanes' path", lambda: compile_timed(text, 3))):
        for threads in (1, 2):
            start, cpu = time.perf_counter(), time.process_time()
            workers = [threading.Thread(target=lambda: [compile_one() for _ in range(jobs // threads)])
                       for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            wall = time.perf_counter() - start
            print(f"{name}: {jobs} LLVM compiles on {threads} thread(s): {wall:.2f}s wall, "
                  f"{(time.process_time() - cpu) / wall:.2f} cores busy")


def opt_level_rows(texts: dict[str, tuple[str, list | None]], kinds: tuple[str, ...] | None = None) -> None:
    """For each module (name -> (HLO text, inputs or None for seeded random ones)): compile it
    with every kernel at O3 and with the kernels of `kinds` (None: all; a kind is a custom
    kernel's name, 'reduce' or 'loop') at O2 instead, print LLVM's seconds (optimization and
    code generation) for each, the median run time of each over interleaved rounds on one
    thread (the order alternating), and whether both give the same bits. codegen/cpu.py
    speed_level is chosen by this table."""
    import statistics

    import numpy as np

    import hlofuse
    import hlofuse.codegen.cpu as cpu
    from hlofuse.runtime.cpu_threads import kernel_threads
    from hlofuse.runtime.io import random_inputs

    chosen = cpu.speed_level
    print(f"one thread: {kernel_threads() == 1}")
    try:
        for name, (text, args) in texts.items():
            module = hlofuse.parse_hlo(text)
            args = random_inputs(module, seed=1) if args is None else args
            exes, llvm = {}, {}
            for level in (3, 2):
                cpu.speed_level = lambda k, small=False, level=level: level if kinds is None or kernel_kind(k) in kinds else 3
                exe = hlofuse.compile(module, "cpu", cache=False)
                t = exe.program.code.timings
                exes[level], llvm[level] = exe, t.get("llvm optimization", 0.0) + t.get("code generation", 0.0)
            for e in exes.values():
                e(*args)
            times: dict[int, list[float]] = {3: [], 2: []}
            deadline, r = time.perf_counter() + 6.0, 0
            while r < 7 or (r < 40 and time.perf_counter() < deadline):
                for level in ((3, 2) if r % 2 else (2, 3)):
                    start = time.perf_counter()
                    exes[level](*args)
                    times[level].append(time.perf_counter() - start)
                r += 1
            same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(exes[3](*args), exes[2](*args)))
            m3, m2 = statistics.median(times[3]), statistics.median(times[2])
            print(f"{name:28s} llvm O3 {llvm[3]:6.3f}s O2 {llvm[2]:6.3f}s (x{llvm[2] / max(llvm[3], 1e-9):.2f})  "
                  f"run O3 {m3 * 1e3:9.3f}ms O2 {m2 * 1e3:9.3f}ms (O2/O3 {m2 / m3:.3f})  same bits {same}", flush=True)
    finally:
        cpu.speed_level = chosen


def kernel_kind(k) -> str:
    """A kernel plan's kind: its custom emitter's name (conv, conv_gemm, gemm, row, scatter ...),
    else 'reduce' or 'loop'."""
    return k.custom or ("reduce" if k.group is not None else "loop")


def _instructions(mod) -> int:
    """LLVM IR instructions in module `mod` (llvmlite's parsed or optimized module)."""
    return sum(1 for f in mod.functions for blk in f.blocks for _ in blk.instructions)


# Pipelines --kinds --variants compiles every kernel with besides the one codegen/cpu.py
# chooses: llvmlite's PipelineTuningOptions switched off one at a time, and O2.
# "xla-cpu" is XLA:CPU's pipeline (xla/backends/cpu/codegen/ir_compiler.cc, 2026): O3 with the SLP
# vectorizer off, loop unrolling and vectorization on (docs/compile_time.md, "How XLA:CPU runs LLVM").
PIPELINE_VARIANTS = {"no-interleave": {"loop_interleaving": False}, "no-unroll": {"loop_unrolling": False},
                     "neither": {"loop_interleaving": False, "loop_unrolling": False}, "O2": {"speed_level": 2},
                     "xla-cpu": {"slp_vectorization": False}}


def variant_llvm(ir_text: str, level: int, options: dict) -> tuple[float, int]:
    """LLVM CPU seconds (parse, optimize, generate code) and instructions after optimization of
    kernel IR `ir_text` with the O`level` pipeline changed by `options` (PIPELINE_VARIANTS)."""
    import llvmlite.binding as llvm

    from hlofuse.codegen.llvm_pool import KERNEL_CODEGEN_LEVEL, target_machine
    from hlofuse.emitters.cpu.target import host_target_machine

    t0 = time.process_time()
    mod = llvm.parse_assembly(ir_text)
    pto = llvm.create_pipeline_tuning_options(speed_level=options.get("speed_level", level))
    pto.loop_vectorization = pto.slp_vectorization = True
    for name, value in options.items():
        if name != "speed_level":
            setattr(pto, name, value)
    pb = llvm.create_pass_builder(host_target_machine(), pto)
    pb.getModulePassManager().run(mod, pb)
    target_machine(KERNEL_CODEGEN_LEVEL).emit_object(mod)  # as kernels are compiled
    seconds = time.process_time() - t0
    return seconds, _instructions(mod)


def kind_rows(texts: dict[str, str], variants: bool = False) -> None:
    """For each module (name -> HLO text): its distinct kernels grouped by kind, each kind's
    count, emission seconds, LLVM CPU seconds (optimization, parsing included, then code
    generation, one thread) and LLVM IR instructions before and after optimization: which kinds
    LLVM's time goes to, and how much optimization grows them (unrolling, vectorization).
    `variants`: also each kind's LLVM seconds and instructions under PIPELINE_VARIANTS."""
    import collections

    import llvmlite.binding as llvm

    import hlofuse
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, distinct_kernels, emit_kernel_module
    from hlofuse.codegen.kernel_work import small_kernels
    from hlofuse.compiler import optimize
    from hlofuse.codegen.llvm_pool import codegen_level, optimized_kernel, target_machine
    from hlofuse.emitters.cpu.target import CpuTarget

    target = CpuTarget()
    for name, text in texts.items():
        fused = optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]
        planner = CpuPlanner()
        code = CpuCode(fused, planner)
        planner.plan(fused.entry)
        kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for o in distinct_kernels(code.kernels, target, small_kernels(planner, fused.entry)):
            c = kinds[kernel_kind(o.kernels[0])]
            t0 = time.process_time()
            ir_text = str(emit_kernel_module(o.kernels[0], target, o.symbol))
            t1 = time.process_time()
            mod = optimized_kernel(ir_text, o.speed_level)
            t2 = time.process_time()
            target_machine(codegen_level(o.speed_level)).emit_object(mod)  # as kernels are compiled
            t3 = time.process_time()
            c["kernels"] += 1
            c["emit"] += t1 - t0
            c["opt"] += t2 - t1
            c["codegen"] += t3 - t2
            c["ir_in"] += _instructions(llvm.parse_assembly(ir_text))
            c["ir_out"] += _instructions(mod)
            for vname, options in PIPELINE_VARIANTS.items() if variants else ():
                seconds, count = variant_llvm(ir_text, 3, options)  # variants of O3, whatever its level
                c[vname] += seconds
                c[vname + " ir"] += count
        total = sum(c["opt"] + c["codegen"] for c in kinds.values())
        print(f"{name}: {sum(c['kernels'] for c in kinds.values())} distinct kernels, LLVM {total:.2f} CPU-s")
        for kind, c in sorted(kinds.items(), key=lambda kv: -(kv[1]["opt"] + kv[1]["codegen"])):
            llvm_s = c["opt"] + c["codegen"]
            print(f"  {kind:20s} {int(c['kernels']):4d} kernels  emit {c['emit']:6.3f}s  opt {c['opt']:6.3f}s  "
                  f"codegen {c['codegen']:6.3f}s  ({100 * llvm_s / max(total, 1e-9):4.1f}%, "
                  f"{1e3 * llvm_s / c['kernels']:6.1f} ms each)  IR {int(c['ir_in']):7d} -> {int(c['ir_out']):7d} "
                  f"instructions (x{c['ir_out'] / max(c['ir_in'], 1):.1f})", flush=True)
            if variants:
                print("    " + "  ".join(f"{v} {c[v]:.3f}s/{int(c[v + ' ir'])}" for v in PIPELINE_VARIANTS))


def group_rows(texts: dict[str, str], sizes: tuple[int, ...] = (1, 4, 8, 16), rounds: int = 2) -> dict:
    """For each module (name -> HLO text): LLVM's CPU seconds (this process, one lane) for its
    distinct kernels compiled in groups of at most each of `sizes` kernels (codegen/cpu.py
    kernel_groups with GROUP_KERNELS set; 1: a module per kernel), the sizes alternating in
    order per round; prints the median of `rounds` per size and returns {name: {size: s}}."""
    import statistics

    import hlofuse
    from hlofuse.codegen import cpu, llvm_pool
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, distinct_kernels, kernel_groups
    from hlofuse.codegen.kernel_work import small_kernels
    from hlofuse.compiler import optimize
    from hlofuse.emitters.cpu.target import CpuTarget

    target = CpuTarget()
    chosen = cpu.GROUP_KERNELS
    out = {}
    try:
        for name, text in texts.items():
            fused = optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]
            planner = CpuPlanner()
            code = CpuCode(fused, planner)
            planner.plan(fused.entry)
            objects = distinct_kernels(code.kernels, target, small_kernels(planner, fused.entry))
            seconds: dict[int, list[float]] = {n: [] for n in sizes}
            for r in range(rounds):
                for n in (sizes if r % 2 == 0 else sizes[::-1]):
                    cpu.GROUP_KERNELS = n
                    texts_ = [(str(mod), members[0].speed_level) for members, mod in kernel_groups(objects, target)]
                    t0 = time.process_time()
                    for ir_text, level in texts_:
                        llvm_pool.compile_timed(ir_text, level)
                    seconds[n].append(time.process_time() - t0)
            out[name] = {n: statistics.median(v) for n, v in seconds.items()}
            print(f"{name:24s} {len(objects):4d} kernels, LLVM CPU s by group size: "
                  + "  ".join(f"{n}: {s:.3f}" for n, s in out[name].items()), flush=True)
    finally:
        cpu.GROUP_KERNELS = chosen
    return out


def module_texts(models: str | None, hlo: str | None = None) -> dict[str, str]:
    """Name -> HLO text: the files of `hlo` (comma-separated paths, named by their stem) if
    given, else the real models `models` ('all' or None: every one; else NAME,NAME) as
    benchmarks/real_models.py lowers them (needs the `bench` extra)."""
    texts = {}
    if hlo:
        for path in hlo.split(","):
            with open(path) as f:
                texts[os.path.splitext(os.path.basename(path))[0]] = f.read()
        return texts
    import jax

    from model_zoo import BUILDERS

    for name in list(BUILDERS) if models in (None, "all") else models.split(","):
        model = BUILDERS[name]()
        texts[name] = jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo")
    return texts


def model_rows(which: str, xla: bool) -> list[dict]:
    """Rows for the real models (benchmarks/model_zoo.py), then the geometric mean of
    hlofuse's cold compile over XLA:CPU's; a model whose library is missing is skipped."""
    import math

    import jax

    from model_zoo import BUILDERS

    names = list(BUILDERS) if which == "all" else which.split(",")
    rows = []
    for name in names:
        try:
            model = BUILDERS[name]()
        except ImportError as e:
            print(f"{name}: skipped ({e})")
            continue
        # keep_unused, as benchmarks/real_models.py: the same HLO as the speed table
        text = jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo")
        row = measure(name, text, xla)
        print_row(row, None)
        rows.append(row)
    ratios = [r["cold_s"] / r["xla_s"] for r in rows if r.get("xla_s")]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"models: hlofuse cold / XLA:CPU compile, geometric mean x{geo:.2f} over {len(ratios)}, "
              f"worst x{max(ratios):.2f}")
    return rows


def print_row(row: dict, prev: dict | None) -> None:
    n = row["instructions"]
    growth = ""
    if prev is not None and prev["name"].split()[0] == row["name"].split()[0]:
        growth = f" growth x{row['cold_s'] / prev['cold_s']:.1f} for x{n / prev['instructions']:.1f} instructions"
    xla = f"{row['xla_s']:7.2f}s" if "xla_s" in row else ("  error" if "xla_error" in row else "      -")
    if "xla_s" in row:
        xla += f" (x{row['cold_s'] / row['xla_s']:.2f})"
    if "xla_error" in row:
        print(f"  XLA:CPU refused {row['name']}: {row['xla_error']}")
    hit = "" if row.get("module_hit", True) else " (miss!)"
    print(f"{row['name']:22s} {n:7d} {row['cold_s']:8.2f}s {row['cold_s'] / n * 1e6:8.0f}us "
          f"{row['cached_s'] * 1e3:6.0f}ms{hit} {row['kernels_cached_s']:6.2f}s {xla}  "
          f"kernels {row['kernels']}/{row['distinct']}  "
          f"passes {row['passes_s']:.2f} plan {row.get('planning_s', 0):.2f} emit {row.get('emission_s', 0):.2f} "
          f"opt {row.get('llvm_optimization_s', 0):.2f} codegen {row.get('code_generation_s', 0):.2f} "
          f"load {row.get('loading_s', 0):.2f}{growth}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="instruction counts of the generated modules")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for the generated modules of each form")
    ap.add_argument("--no-xla", action="store_true", help="skip XLA:CPU's compile")
    ap.add_argument("--workloads", action="store_true", help="also the JAX workloads and an Adam training step")
    ap.add_argument("--forms", default="chain,wide", help="generated forms: chain, wide ('' for none)")
    ap.add_argument("--models", nargs="?", const="all", default=None,
                    help="also the real models of benchmarks/model_zoo.py (all, or NAME,NAME)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--opt-levels", action="store_true", help="only compare O2 with O3: the workloads (or the "
                                                             "--models, their convolutions only), LLVM time and speed")
    ap.add_argument("--size", choices=["small", "large"], default="large", help="workload size for --opt-levels")
    ap.add_argument("--kinds", action="store_true", help="only LLVM's CPU time and IR growth per kernel kind of "
                                                        "the --models (all by default), see kind_rows")
    ap.add_argument("--variants", action="store_true", help="with --kinds: also each kind's LLVM time and IR "
                                                           "size under other pipelines (PIPELINE_VARIANTS)")
    ap.add_argument("--hlo", help="with --kinds/--groups: HLO text files (comma-separated) instead of the models")
    ap.add_argument("--groups", action="store_true", help="only LLVM's CPU time for the --models' kernels "
                                                         "compiled in groups of 1, 4, 8, 16 (see group_rows)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds per module, hlofuse's cold compile and "
                                                          "XLA:CPU's alternating; medians reported")
    ap.add_argument("--llvm-threads", action="store_true", help="only measure whether LLVM work runs in "
                                                               "parallel on threads (see llvm_threads_check)")
    args = ap.parse_args(argv)
    global ROUNDS
    ROUNDS = args.rounds
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores")
    if args.llvm_threads:
        llvm_threads_check()
        return 0
    if args.kinds or args.groups:
        texts = module_texts(args.models, args.hlo)
        if args.groups:
            group_rows(texts)
        else:
            kind_rows(texts, args.variants)
        print(f"load average {os.getloadavg()}")
        return 0
    if args.opt_levels:
        os.environ.setdefault("HLOFUSE_CPU_THREADS", "1")  # before the runtime reads it
        import jax

        if args.models:
            from model_zoo import BUILDERS

            names = list(BUILDERS) if args.models == "all" else args.models.split(",")
            texts = {}
            for name in names:
                model = BUILDERS[name]()
                texts[name] = (jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo"), None)
            opt_level_rows(texts, kinds=("conv",))
        else:
            import numpy as np

            from workloads import WORKLOADS

            texts = {}
            for name, w in WORKLOADS.items():
                inputs = [np.asarray(a) for a in w.inputs(args.size)]
                texts[name] = (jax.jit(w.fn).lower(*inputs).as_text(dialect="hlo"), inputs)
            opt_level_rows(texts)
        print(f"load average {os.getloadavg()}")
        return 0
    print(f"{'module':22s} {'instrs':>7s} {'cold':>9s} {'per inst':>10s} {'cached':>8s} {'kernels':>7s} "
          f"{'XLA:CPU':>8s}  stages (s)")
    rows: list[dict] = []
    # one-time costs (imports, LLVM's and XLA's initialisation) are nobody's compile time
    measure("warm-up", chain_module(8), not args.no_xla)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    forms = {"chain": chain_module, "wide": wide_module}
    for form in [f for f in args.forms.split(",") if f]:
        start, prev = time.perf_counter(), None
        for n in sizes:
            left = args.budget - (time.perf_counter() - start)
            if prev is not None:
                predicted = prev["cold_s"] * (n / prev["instructions"]) ** prev.get("exponent", 1.0)
                if predicted > left:
                    print(f"{form} {n}: not run (predicted {predicted:.0f}s, {left:.0f}s of the budget left)")
                    break
            row = measure(f"{form} {n}", forms[form](n), not args.no_xla)
            if prev is not None:
                import math

                row["exponent"] = max(1.0, math.log(row["cold_s"] / prev["cold_s"]) /
                                      math.log(row["instructions"] / prev["instructions"]))
            print_row(row, prev)
            rows.append(row)
            prev = row
    if args.workloads:
        import jax

        from workloads import WORKLOADS

        for name, w in WORKLOADS.items():
            text = jax.jit(w.fn).lower(*w.inputs("small")).as_text(dialect="hlo")
            row = measure(name, text, not args.no_xla)
            print_row(row, None)
            rows.append(row)
        row = measure("adam step (50 params)", adam_step_text(), not args.no_xla)
        print_row(row, None)
        rows.append(row)
    if args.models:
        rows += model_rows(args.models, not args.no_xla)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
