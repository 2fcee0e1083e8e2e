"""Every distinct kernel of some modules ranked by LLVM's CPU time: which kernels LLVM's time
goes to, and which cost the most per emitted instruction (the pathologies).

    python benchmarks/llvm_rank.py [--models NAME,... | --hlo F.hlo,...] [--top 25] [--passes 8]
                                   [--copies 5] [--release /usr/lib/llvm-22/bin] [--levels] [--json OUT]

Each kernel is compiled alone on this thread as hlofuse compiles kernels
(codegen/llvm_pool.compile_timed: parse, the O3 pipeline, code generation), its CPU
milliseconds measured by process time; `--passes N` adds each listed kernel's N slowest LLVM
passes (llvm.set_time_passes: user time summed over a pass's runs; machine passes included);
`--copies N` compiles each of the N slowest kernels under SMALL instructions as 1, 2, 4 and 8
copies in one module and fits LLVM's CPU time as a cost per module plus one per function
(kernels are compiled in groups, codegen/cpu.py: only the first is shared by a group);
`--levels` compiles every kernel at O3 and at the small level (llvm_pool.SMALL_KERNEL), the two
alternating, and tabulates by work (codegen/kernel_work.kernel_work_ns, kernels that run once
per execution) how much of LLVM's O3 time sits in kernels under each of WORK_THRESHOLDS_NS and
what the small level saves of it;
`--release DIR` also compiles each kernel with the `opt` and `llc` of DIR (a release build of
the same LLVM, e.g. Debian's llvm-22: assertions off) at the same levels for the same CPU, and
gives their CPU time (a process each, its start subtracted) and their passes' time
(`-time-passes`) beside llvmlite's, and whether both made the same machine code: what
llvmlite's LLVM, built with assertions, costs.
The machine is shared: compare figures from one run, and give the load printed with them."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def pass_times(ir_text: str, level: int) -> dict[str, float]:
    """Milliseconds per LLVM pass (middle end and code generator, summed over each pass's runs)
    of compiling kernel IR `ir_text` at O`level` as kernels are compiled (llvm.set_time_passes:
    user time; a pass LLVM runs several times is one row; analyses included)."""
    import llvmlite.binding as llvm

    from hlofuse.codegen.llvm_pool import compile_timed

    llvm.set_time_passes(True)
    try:
        compile_timed(ir_text, level)
        report = llvm.report_and_reset_timings()
    finally:
        llvm.set_time_passes(False)
    return report_ms(report)


def report_ms(report: str) -> dict[str, float]:
    """Milliseconds of user time per pass in LLVM's `-time-passes` report text (llvmlite's or
    opt's and llc's: the same format), each pass's runs summed."""
    import re

    out: dict[str, float] = {}
    # user time first; LLVM leaves out the columns (system, user + system) whose total is zero
    row = re.compile(r"\s*([\d.]+) \(\s*[\d.]+%\)(?:\s+[\d.]+ \(\s*[\d.]+%\))*\s+(\S.*)$")
    for line in report.splitlines():  # the passes' report, then the analyses'
        m = row.match(line)
        if m and m.group(2).strip() != "Total":
            name = re.sub(r" #\d+$", "", m.group(2).strip())
            out[name] = out.get(name, 0.0) + 1e3 * float(m.group(1))
    return out


# Work thresholds (estimated one-thread ns per call, codegen/kernel_work.py) `--levels` tabulates.
WORK_THRESHOLDS_NS = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000)


def level_rows(rows: list[dict]) -> None:
    """Print, for each of WORK_THRESHOLDS_NS, the kernels that run once per execution under it
    (`rows` from rank_rows with `levels`): how many, their O3 LLVM ms and share of all kernels'
    O3 ms, and what compiling them at the small level saves (in all and per module)."""
    total = sum(r["o3_ms"] for r in rows)
    modules = list(dict.fromkeys(r["module"] for r in rows))
    print(f"-- by work: kernels that run once, under each threshold (all {len(rows)} kernels at O3: "
          f"{total / 1e3:.2f} CPU-s)")
    for limit in WORK_THRESHOLDS_NS:
        under = [r for r in rows if r["once"] and r["work_ns"] < limit]
        o3, saved = sum(r["o3_ms"] for r in under), sum(r["o3_ms"] - r["small_ms"] for r in under)
        per = "  ".join(f"{m[:14]} {100 * sum(r['o3_ms'] - r['small_ms'] for r in under if r['module'] == m) / max(sum(r['o3_ms'] for r in rows if r['module'] == m), 1e-9):.0f}%"
                        for m in modules)
        print(f"  < {limit:6d} ns: {len(under):4d} kernels, O3 {o3 / 1e3:6.2f} s ({100 * o3 / max(total, 1e-9):4.1f}%), "
              f"small level saves {saved / 1e3:5.2f} s ({100 * saved / max(total, 1e-9):4.1f}%); per module: {per}",
              flush=True)


# Kernels of fewer emitted instructions than this are "small" for `--copies`.
SMALL = 200


def copies_module(ir_text: str, n: int) -> str:
    """Kernel module `ir_text` (one function definition, as emit_kernel_module makes it) with
    its function defined `n` times under different names."""
    import re

    name = re.search(r'define void @"([^"]+)"', ir_text).group(1)
    head, _, rest = ir_text.partition("define void")
    body, _, tail = ("define void" + rest).partition("\n}\n")
    return head + "".join(body.replace(name, f"{name}_{i}") + "\n}\n" for i in range(n)) + tail


def per_function_fit(ir_text: str, level: int, rounds: int = 3) -> tuple[float, float, dict[int, float]]:
    """LLVM CPU milliseconds of `ir_text`'s function compiled 1, 2, 4 and 8 times in one module
    (compile_timed; the least of `rounds`), fitted by least squares as (ms per module, ms per
    function), with the measured ms per copy count."""
    from hlofuse.codegen.llvm_pool import compile_timed

    ms = {}
    for n in (1, 2, 4, 8):
        text = copies_module(ir_text, n)
        best = float("inf")
        for _ in range(rounds):
            t0 = time.process_time()
            compile_timed(text, level)
            best = min(best, time.process_time() - t0)
        ms[n] = 1e3 * best
    xs, ys = list(ms), list(ms.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope, ms


def _text_section(obj: bytes) -> bytes:
    """The bytes of object file `obj`'s code sections, in order."""
    import llvmlite.binding as llvm

    return b"".join(sec.data() for sec in llvm.ObjectFileRef.from_data(obj).sections() if sec.is_text())


class ReleaseTools:
    """`opt` and `llc` of directory `bindir` compiling kernel IR as codegen/llvm_pool.compile_timed
    does (the O3 pipeline, the code generator at KERNEL_CODEGEN_LEVEL, the host CPU and its
    features, the JIT's code model), each a process of its own; `startup` is their CPU seconds
    on an empty module (the median of 5), subtracted from every figure."""

    def __init__(self, bindir: str) -> None:
        import shutil
        import tempfile
        import weakref

        import llvmlite.binding as llvm

        from hlofuse.codegen.llvm_pool import KERNEL_CODEGEN_LEVEL
        from hlofuse.emitters.cpu.target import host_cpu

        cpu, features = host_cpu()
        self.dir = tempfile.mkdtemp(prefix="llvm_rank_")
        weakref.finalize(self, shutil.rmtree, self.dir, True)
        target = [f"-mcpu={cpu}", f"-mattr={features}"]
        self.opt = [os.path.join(bindir, "opt"), "-O3", *target]
        self.llc = [os.path.join(bindir, "llc"), f"-O{KERNEL_CODEGEN_LEVEL}", *target,
                    "-code-model=large", "-filetype=obj"]  # llvmlite's "jitdefault" on x86-64
        empty = f'target triple = "{llvm.get_process_triple()}"\ndefine void @f() {{\n  ret void\n}}\n'
        self.startup = 0.0
        self.startup = sorted(self.compile(empty)[0] for _ in range(5))[2]

    def compile(self, ir_text: str) -> tuple[float, bytes]:
        """CPU seconds of both tools on `ir_text` (startup subtracted) and the object they make.
        The start subtracted is itself noisy (30-35 ms against kernels of 5-20 ms: the same 408
        kernels gave x1.23 and x1.80 in two runs); `pass_ms` is the steadier comparison."""
        import resource
        import subprocess

        def children() -> float:
            r = resource.getrusage(resource.RUSAGE_CHILDREN)
            return r.ru_utime + r.ru_stime

        src, bc, obj = (os.path.join(self.dir, n) for n in ("k.ll", "k.bc", "k.o"))
        with open(src, "w") as f:
            f.write(ir_text)
        c0 = children()
        subprocess.run([*self.opt, src, "-o", bc], check=True)
        subprocess.run([*self.llc, bc, "-o", obj], check=True)
        seconds = children() - c0 - self.startup
        with open(obj, "rb") as f:
            return seconds, f.read()

    def pass_ms(self, ir_text: str) -> dict[str, float]:
        """Milliseconds of user time per pass of both tools on `ir_text` (`-time-passes`, as
        `pass_times` reads llvmlite's): no process, parsing or writing costs."""
        import subprocess

        src, bc, obj = (os.path.join(self.dir, n) for n in ("k.ll", "k.bc", "k.o"))
        with open(src, "w") as f:
            f.write(ir_text)
        report = subprocess.run([*self.opt, "-time-passes", src, "-o", bc], check=True, capture_output=True,
                                text=True).stderr
        report += subprocess.run([*self.llc, "-time-passes", bc, "-o", obj], check=True, capture_output=True,
                                 text=True).stderr
        return report_ms(report)


def rank_rows(texts: dict[str, str], top: int = 25, passes: int = 0, copies: int = 0,
              release: str | None = None, levels: bool = False) -> list[dict]:
    """Every distinct kernel of every module (name -> HLO text), compiled alone on this thread
    as kernels are (codegen/llvm_pool.compile_timed), ranked by LLVM CPU milliseconds (parse +
    optimize, code generation) and by milliseconds per emitted instruction; prints the `top`
    of each list (`passes` > 0: also each listed kernel's slowest passes; `copies` > 0: the
    per-module and per-function fit of the `copies` slowest small kernels; `release`: a directory
    of release `opt` and `llc` to time beside llvmlite, `ReleaseTools`; `levels`: each kernel
    also at O3 and at the small level, `level_rows`) and returns the rows. Each kernel is
    compiled at its own level (codegen/kernel_work.small_kernels); a row has its work estimate
    and whether it runs once per execution (the small level's candidates, before the program's
    budget)."""
    import llvmlite.binding as llvm

    import hlofuse
    from compile_time import _instructions, kernel_kind
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, distinct_kernels, emit_kernel_module
    from hlofuse.codegen.kernel_work import kernel_work_ns, once_kernels, small_kernels
    from hlofuse.codegen.llvm_pool import SMALL_KERNEL, compile_timed
    from hlofuse.compiler import optimize
    from hlofuse.emitters.cpu.target import CpuTarget

    target = CpuTarget()
    tools = ReleaseTools(release) if release else None
    rows = []
    for name, text in texts.items():
        fused = optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]
        planner = CpuPlanner()
        code = CpuCode(fused, planner)
        planner.plan(fused.entry)
        once = once_kernels(planner, fused.entry)
        for o in distinct_kernels(code.kernels, target, small_kernels(planner, fused.entry)):
            k = o.kernels[0]
            ir_text = str(emit_kernel_module(k, target, o.symbol))
            t0 = time.process_time()
            obj, opt, gen = compile_timed(ir_text, o.speed_level)
            cpu = time.process_time() - t0
            emitted = _instructions(llvm.parse_assembly(ir_text))
            rows.append({"module": name, "kernel": k.name, "kind": kernel_kind(k), "uses": len(o.kernels),
                         "ir_in": emitted, "ms": 1e3 * cpu, "opt_ms": 1e3 * opt, "codegen_ms": 1e3 * gen,
                         "ir_text": ir_text, "level": o.speed_level, "work_ns": kernel_work_ns(k),
                         "once": id(k) in once})
            if levels:  # the two levels alternate in order from kernel to kernel
                for level in ((3, SMALL_KERNEL) if len(rows) % 2 else (SMALL_KERNEL, 3)):
                    t0 = time.process_time()
                    compile_timed(ir_text, level)
                    rows[-1]["o3_ms" if level == 3 else "small_ms"] = 1e3 * (time.process_time() - t0)
            if tools is not None:
                seconds, release_obj = tools.compile(ir_text)
                rows[-1]["release_ms"] = 1e3 * seconds
                # the release tools run O3: compared with llvmlite at O3, whatever the kernel's level
                obj3 = obj if o.speed_level == 3 else compile_timed(ir_text, 3)[0]
                rows[-1]["same_code"] = _text_section(obj3) == _text_section(release_obj)
                rows[-1]["pass_ms"] = sum(pass_times(ir_text, 3).values())
                rows[-1]["release_pass_ms"] = sum(tools.pass_ms(ir_text).values())
    total = sum(r["ms"] for r in rows)
    print(f"{len(rows)} distinct kernels, LLVM {total / 1e3:.2f} CPU-s")
    if tools is not None:
        rel = sum(r["release_ms"] for r in rows)
        print(f"release opt + llc ({release}): {rel / 1e3:.2f} CPU-s (llvmlite x{total / max(rel, 1e-9):.2f}; "
              f"each process's start, {1e3 * tools.startup:.1f} ms, subtracted), the same machine code for "
              f"{sum(r['same_code'] for r in rows)} of {len(rows)} kernels")
        lite, rel = sum(r["pass_ms"] for r in rows), sum(r["release_pass_ms"] for r in rows)
        print(f"  their timed passes (user time, -time-passes): llvmlite {lite / 1e3:.2f} s, release "
              f"{rel / 1e3:.2f} s (x{lite / max(rel, 1e-9):.2f})")
    for title, key in (("by LLVM ms", lambda r: -r["ms"]), ("by LLVM ms per emitted instruction",
                                                             lambda r: -r["ms"] / max(r["ir_in"], 1))):
        print(f"-- top {top} {title}")
        for r in sorted(rows, key=key)[:top]:
            print(f"  {r['module'][:22]:22s} {r['kernel'][:28]:28s} {r['kind']:10s} x{r['uses']:<3d} "
                  f"{r['ir_in']:6d} instr  {r['ms']:7.1f} ms (opt {r['opt_ms']:6.1f}, codegen "
                  f"{r['codegen_ms']:6.1f})  {1e3 * r['ms'] / max(r['ir_in'], 1):6.1f} us/instr"
                  + (f"  release {r['release_ms']:6.1f} ms" if "release_ms" in r else ""), flush=True)
            if passes:
                times = pass_times(r["ir_text"], r["level"])
                print("      " + ", ".join(f"{p} {t:.1f}" for p, t in
                                           sorted(times.items(), key=lambda kv: -kv[1])[:passes]))
    if copies:
        small = sorted((r for r in rows if r["ir_in"] < SMALL), key=lambda r: -r["ms"])[:copies]
        print(f"-- {len(small)} slowest kernels under {SMALL} instructions as 1/2/4/8 copies a module")
        for r in small:
            fixed, per, ms = per_function_fit(r["ir_text"], r["level"])
            print(f"  {r['module'][:22]:22s} {r['kernel'][:28]:28s} {r['ir_in']:4d} instr  "
                  + " ".join(f"x{n} {v:6.1f}" for n, v in ms.items())
                  + f" ms  -> {fixed:5.1f} ms a module + {per:5.1f} ms a function", flush=True)
    if levels:
        level_rows(rows)
    for r in rows:
        del r["ir_text"]
    return rows


def main(argv: list[str] | None = None) -> int:
    from compile_time import module_texts

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="all", help="real models of benchmarks/model_zoo.py (all, or NAME,NAME)")
    ap.add_argument("--hlo", help="HLO text files (comma-separated) instead of the models")
    ap.add_argument("--top", type=int, default=25, help="kernels listed per ranking")
    ap.add_argument("--passes", type=int, default=0, help="each listed kernel's slowest N passes")
    ap.add_argument("--copies", type=int, default=0,
                    help="fit per-module and per-function LLVM time of the N slowest small kernels")
    ap.add_argument("--release", metavar="DIR",
                    help="also time each kernel with DIR's opt and llc (a release build of the same LLVM)")
    ap.add_argument("--levels", action="store_true",
                    help="also every kernel at O3 and at the small level: LLVM time by work threshold")
    ap.add_argument("--json", help="write every kernel's row here")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores")
    rows = rank_rows(module_texts(args.models, args.hlo), args.top, args.passes, args.copies, args.release,
                     args.levels)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
