"""What `hlofuse compile --dump-dir DIR` writes after the per-pass HLO dumps.

The pass pipeline writes `0000.<module>.before_optimizations.hlo` ... `NNNN.<module>.<pass>.hlo`
(passes/pipeline.py); `write_dump` continues that numbering, one number per file, so `ls`
lists the whole compile in pipeline order:

    NNNN+1.<module>.fusion_report.txt      the report, as `--emit report` prints it
    NNNN+2.<module>.fusion_report.json     the same report as JSON
    NNNN+3.<module>.schedule.txt           the entry computation's steps
    NNNN+4.<module>.buffer_assignment.txt  its values, arena slots, live ranges, aliases
    then per kernel: .kernel.<name>.unoptimized.ll, .kernel.<name>.ll, .kernel.<name>.s (CPU)
    or .kernel.<name>.ptx (GPU); on the CPU the native driver's memory plan (.native_plan.txt:
    where every value of every computation lives, the copies, the loops) and its LLVM IR
    (.driver.ll); then .fusion_graph.html, and index.html linking them all.

Nothing here runs unless --dump-dir is given: the planning and the per-kernel LLVM work are
done again for the dump (the compile itself does not keep the unoptimised IR).
"""
from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass

from .files import write_text_atomically
from .passes.pipeline import file_safe

BOOKKEEPING = ("param", "const", "tuple", "gte")  # steps that run no code and own no buffer


@dataclass
class DumpFile:
    """One file of the dump: its name in the dump folder and a one-line description."""

    name: str
    description: str


class _Writer:
    """Writes numbered files into the dump folder, continuing the pass dumps' numbering."""

    def __init__(self, dump_dir: str, module_name: str, first: int) -> None:
        self.dir = dump_dir
        self.module = file_safe(module_name)
        self.next = first
        self.files: list[DumpFile] = []

    def write(self, suffix: str, text: str, description: str) -> None:
        name = f"{self.next:04d}.{self.module}.{file_safe(suffix)}"
        self.next += 1
        write_text_atomically(os.path.join(self.dir, name), text if text.endswith("\n") else text + "\n",
                              create_dirs=True)
        self.files.append(DumpFile(name, description))


def _pass_dumps(dump_dir: str, count: int) -> list[DumpFile]:
    """The pipeline's dumps of this compile (numbers 0..count), as they lie in the folder."""
    pattern = re.compile(r"^(\d{4})\..*\.hlo$")
    found = []
    for name in sorted(os.listdir(dump_dir)):
        m = pattern.match(name)
        if m and int(m.group(1)) <= count:
            label = name.rsplit(".", 2)[-2]
            found.append(DumpFile(name, "the module before any pass" if int(m.group(1)) == 0
                                  else f"the module after pass {label}"))
    return found


def write_dump(dump_dir: str, module, fused, pipeline, target: str) -> list[DumpFile]:
    """Write the report, schedule, buffer assignment, every kernel's LLVM IR and machine code,
    the fusion graph and index.html for `fused` (compiled from `module` by `pipeline` for
    `target`) into `dump_dir`; return every file of the dump in order (pass dumps included)."""
    from .passes.fusion.report import build_report
    from .viz import render

    passes = len(getattr(pipeline, "passes", []))
    os.makedirs(dump_dir, exist_ok=True)
    w = _Writer(dump_dir, fused.name, passes + 1)
    # The report comes first: planning below must not change what it says.
    report = build_report(module, fused, fused.fusion_log)
    w.write("fusion_report.txt", report.to_text(), "the fusion report (what --emit report prints)")
    w.write("fusion_report.json", json.dumps(report.to_dict(), indent=2), "the fusion report as JSON")
    program = _plan(fused, target)
    plan = program.entry
    w.write("schedule.txt", schedule_text(plan), "the entry computation's schedule: steps, kernels, output buffers")
    w.write("buffer_assignment.txt", buffer_assignment_text(plan),
            "the entry computation's buffers: size, live range, sharing, aliases")
    if target == "gpu":
        _gpu_kernels(w, program)
    else:
        _cpu_kernels(w, program)
        _cpu_driver(w, program)
    w.write("fusion_graph.html", render(module, fused, "html"), "the fusion graph (interactive)")
    files = _pass_dumps(dump_dir, passes) + w.files
    index = index_html(fused.name, files)
    write_text_atomically(os.path.join(dump_dir, "index.html"), index, create_dirs=True)
    return files + [DumpFile("index.html", "this page")]


def _plan(fused, target: str):
    """The program's plan (no kernel compiled): a CpuCode or a GpuCode without code."""
    if target == "gpu":
        from .codegen.gpu import compile_gpu

        return compile_gpu(fused, lenient=True)
    from .codegen.cpu import CpuPlanner, plan_cpu

    # no log: the dump must not add decisions to the module's log; the kernels as compiled
    # (shape-generic ones in their size-free form, codegen/generic_kernels.py)
    return plan_cpu(fused, CpuPlanner(lenient=True))


def _cpu_kernels(w: _Writer, program) -> None:
    """Each kernel's LLVM IR as emitted, optimized at its level, and the host assembly."""
    from .codegen.cpu import emit_kernel_module
    from .codegen.llvm_pool import codegen_level, level_tag, optimized_kernel, target_machine
    from .emitters.cpu.target import CpuTarget

    target = CpuTarget()
    for k in program.kernels:
        text = str(emit_kernel_module(k, target, k.name))
        w.write(f"kernel.{k.name}.unoptimized.ll", text, f"kernel {k.name}: LLVM IR as emitted")
        level = program.kernel_level(k)
        optimized = optimized_kernel(text, level)
        w.write(f"kernel.{k.name}.ll", str(optimized), f"kernel {k.name}: LLVM IR optimized ({level_tag(level)})")
        w.write(f"kernel.{k.name}.s", target_machine(codegen_level(level)).emit_assembly(optimized),
                f"kernel {k.name}: host assembly")


def _cpu_driver(w: _Writer, program) -> None:
    """The native driver's memory plan and LLVM IR (codegen/native_plan.py, codegen/driver.py)."""
    from .codegen.driver import emit_driver
    from .codegen.native_plan import NativeProgram
    from .emitters.cpu.target import CpuTarget

    native = NativeProgram(program.planner, program.module.entry)
    w.write("native_plan.txt", native_plan_text(native),
            "the native driver's plan: every computation's values, where they live, copies, loops")
    w.write("driver.ll", emit_driver(native, CpuTarget()), "the native driver: LLVM IR as emitted")


def _loc_text(loc) -> str:
    return {"param": f"params[{loc.index}]", "result": f"results[{loc.index}]", "arena": f"arena+{loc.index}",
            "table": f"table[{loc.index}]"}.get(loc.kind, "-")


def native_plan_text(native) -> str:
    """Every computation the driver runs: its steps with what they read and write, the copies
    before them and the moves of the result (the table's entries at the end)."""
    lines = [f"native driver: {len(native.plans)} computations, {len(native.steps)} steps, "
             f"{len(native.table)} table entries"]
    for plan in native.plans:
        mode = ", updates its parameters in place (a while body)" if plan.alias_results else ""
        lines += ["", f"function {plan.index}: computation {plan.comp.name}, arena {plan.arena_bytes} B{mode}"]
        for ns in plan.steps:
            if ns.kind == "none":
                continue
            ins = ", ".join(_loc_text(x) for x in ns.ins)
            outs = ", ".join(_loc_text(x) for x in ns.outs)
            callees = " calls " + ", ".join(f"function {c.index}" for c in ns.callees) if ns.callees else ""
            lines.append(f"  step {ns.id:4d} {ns.kind:11s} {ns.step.inst.name}: ({ins}) -> ({outs}){callees}")
            for c in ns.pre_copies:
                lines.append(f"             copy {c.nbytes} B {_loc_text(c.src)} -> {_loc_text(c.dst)} first")
        for c in plan.staged + plan.final:
            lines.append(f"  result      copy {c.nbytes} B {_loc_text(c.src)} -> {_loc_text(c.dst)}")
    lines += ["", "table:"]
    for n, e in enumerate(native.table):
        what = e.payload if e.kind == "kernel" else (
            f"computation {e.payload.comp.name}, {e.payload.arena_bytes} B" if e.kind == "arena" else
            e.payload[0].name if e.kind == "const" else str(e.payload))
        lines.append(f"  table[{n}] {e.kind}: {what}")
    return "\n".join(lines) + "\n"


def _gpu_kernels(w: _Writer, program) -> None:
    """Each launch's NVPTX LLVM IR as emitted, optimized (libdevice linked), and its PTX."""
    from .codegen.gpu import emit_module
    from .emitters.gpu.target import GpuTarget, compile_ptx

    target = GpuTarget(program.arch)
    for launch in program.launches:
        mod = emit_module([launch], target, launch.name)
        w.write(f"kernel.{launch.name}.unoptimized.ll", str(mod), f"kernel {launch.name}: NVPTX LLVM IR as emitted")
        optimized, ptx = compile_ptx(mod, program.arch)
        w.write(f"kernel.{launch.name}.ll", optimized, f"kernel {launch.name}: NVPTX LLVM IR optimized (O3)")
        w.write(f"kernel.{launch.name}.ptx", ptx, f"kernel {launch.name}: PTX for {program.arch}")


def _kernel_names(step) -> list[str]:
    return [k.name for k in step.kernels]


def _live_ranges(plan) -> tuple[list[int], dict[int, int]]:
    """Per step, its alias class (the smallest step index of the class: a tuple, gte, library
    or call value may share its operands' buffers), and each class's last step that reads it
    (codegen/buffers.py's liveness, recomputed for display)."""
    steps = plan.steps
    cls = list(range(len(steps)))

    def find(i: int) -> int:
        while cls[i] != i:
            i = cls[i]
        return i

    for i, s in enumerate(steps):
        if s.aliases_operands:
            for j in s.operand_steps:
                a, b = find(i), find(j)
                if a != b:
                    cls[max(a, b)] = min(a, b)
    classes = [find(i) for i in range(len(steps))]
    last: dict[int, int] = {}
    for i, s in enumerate(steps):
        last[classes[i]] = max(last.get(classes[i], i), i)
        for j in s.operand_steps:
            last[classes[j]] = max(last.get(classes[j], j), i)
    return classes, last


def _buffer_words(plan, i: int) -> str:
    """Where step `i`'s output lives, in a few words."""
    step = plan.steps[i]
    slots = [plan.assignment.slots[(i, k)] for k in range(len(step.kernel_leaf_bytes))]
    if slots:
        return ", ".join(f"{s.nbytes} B fresh per call" if s.offset is None else f"{s.nbytes} B at arena+{s.offset}"
                         for s in slots)
    if step.kind == "param":
        return f"entry parameter {step.inst.parameter_number} (not copied)"
    if step.kind == "const":
        return "constant"
    if step.kind == "unsupported":
        return "none (cannot run here)"
    return "aliases its operands" if step.kind in ("tuple", "gte") else "allocated by the step (may alias its operands)"


def schedule_text(plan) -> str:
    """The entry computation's steps in order: index, instruction, kind, the kernels it
    launches and where its output buffers live."""
    lines = [f"schedule of computation {plan.comp.name}: {len(plan.steps)} steps, root step {plan.root_step}",
             "step  kind     instruction  <- operand steps",
             ""]
    for i, s in enumerate(plan.steps):
        lines.append(f"{i:4d}  {s.kind:8s} {s.inst.name} = {s.inst.opcode} {s.inst.shape}"
                     f"  <- {s.operand_steps or '-'}")
        if s.kernels:
            lines.append(f"        kernels: {', '.join(_kernel_names(s))}")
        if s.temps:
            lines.append(f"        temporaries between its kernels: {', '.join(str(t) for t in s.temps)}")
        lines.append(f"        output: {_buffer_words(plan, i)}")
    return "\n".join(lines)


def buffer_assignment_text(plan) -> str:
    """The entry computation's buffer assignment: every value (step) with its size, live
    range and buffer; the arena's slots with the values that share each; and which values
    alias an entry parameter or the output."""
    a = plan.assignment
    classes, last = _live_ranges(plan)
    root_class = classes[plan.root_step]
    lines = [f"buffer assignment of computation {plan.comp.name}: arena {a.arena_bytes} B, "
             f"{a.reused_bytes} B served from freed temporaries", "",
             "values (step: instruction kind bytes live [first step, last step] buffer):"]
    for i, s in enumerate(plan.steps):
        nbytes = s.inst.shape.byte_size() if hasattr(s.inst.shape, "byte_size") else 0
        lines.append(f"  {i:4d}: {s.inst.name} {s.kind} {nbytes} B live [{i}, {last[classes[i]]}] "
                     f"{_buffer_words(plan, i)}")
    lines += ["", "arena slots (offset, bytes, values placed there over time with their live ranges):"]
    by_offset: dict[int, list[tuple[int, int, int]]] = {}
    for (i, k), slot in sorted(a.slots.items()):
        if slot.offset is not None:
            by_offset.setdefault(slot.offset, []).append((i, k, slot.nbytes))
    for off in sorted(by_offset):
        users = by_offset[off]
        lines.append(f"  arena+{off}: {max(n for _, _, n in users)} B, shared by "
                     + ", ".join(f"{plan.steps[i].inst.name}[{k}] live [{i}, {last[classes[i]]}]"
                                 for i, k, _ in users))
    if not by_offset:
        lines.append("  (none: no temporary between kernels)")
    lines += ["", "aliases (values that share a buffer with an entry parameter or the output):"]
    params: dict[int, list] = {}
    for i, s in enumerate(plan.steps):
        if s.kind == "param":
            params.setdefault(classes[i], []).append(s.inst)
    for i, s in enumerate(plan.steps):
        what = []
        if s.kind != "param" and classes[i] in params:
            what.append("may alias entry parameter " + ", ".join(f"{p.parameter_number} ({p.name})"
                                                                 for p in params[classes[i]]))
        if classes[i] == root_class:
            what.append("is (part of) the output, fresh per call")
        if what:
            lines.append(f"  {s.inst.name}: {'; '.join(what)}")
    return "\n".join(lines)


def index_html(module_name: str, files: list[DumpFile]) -> str:
    """A plain page listing every dumped file in order with its description, links relative."""
    rows = "\n".join(f'<li><a href="{html.escape(f.name)}">{html.escape(f.name)}</a> — {html.escape(f.description)}</li>'
                     for f in files)
    graph = next((f.name for f in files if f.name.endswith(".fusion_graph.html")), None)
    embed = (f'<h2>Fusion graph</h2>\n<iframe src="{html.escape(graph)}" style="width:100%;height:80vh"></iframe>\n'
             if graph else "")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>hlofuse dump of "
            f"{html.escape(module_name)}</title></head>\n<body>\n<h1>hlofuse dump of {html.escape(module_name)}</h1>\n"
            f"<p>Files in pipeline order.</p>\n<ol>\n{rows}\n</ol>\n{embed}</body></html>\n")
