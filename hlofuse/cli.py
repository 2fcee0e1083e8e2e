"""The `hlofuse` command: run, compile, opt, fmt, conformance, explain.

Exit codes: 0 ok, 1 a mismatch found by `run --compare [interpreter|xla]`, 2 a user's mistake
(bad option, missing file, bad syntax, bad inputs, a module too big for the machine, a module
XLA refuses under `--compare xla`), 3 a bug in hlofuse.
A mistake prints one paragraph and no traceback; a bug prints one paragraph naming the
exception and where hlofuse raised it (the traceback with `--debug`). Outputs are written
atomically, so a failed command leaves no partial file.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from .cli_timings import print_timings
from .compiler import TARGETS

EXIT_MISMATCH = 1
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3


class UsageError(Exception):
    """A command-line mistake detected after argument parsing."""


def _load(path: str, fmt: str | None):
    from .loader import load_module

    return load_module(path, fmt)


def _check_run_memory(exe, module, random: bool, compare: str | None, xla_bytes: int = 0) -> None:
    """ResourceError when generating the random inputs, or the reference's run of --compare
    (the interpreter's, or XLA's `xla_bytes`) next to the backend's, needs more memory than the
    machine has (the backend's run alone was checked by compile())."""
    from .runtime.memory_budget import (MemoryEstimate, check_memory, estimate_interpreter, estimate_memory,
                                        random_inputs_bytes)

    if random:
        scratch = random_inputs_bytes(module)
        params = sum(p.shape.byte_size() for p in module.entry.parameters)
        check_memory(MemoryEstimate(module.name, exe.target, params, 0, 0, "none yet",
                                    extras=[("scratch of the random draws", scratch)],
                                    purpose="to generate its random inputs"))
    if compare:
        run = estimate_memory(exe.fused_module, exe.target, exe.program)
        if compare == "xla":
            run.extras.append(("XLA:CPU's run for --compare xla", xla_bytes))
        else:
            reference = estimate_interpreter(exe.module)
            run.extras.append(("the interpreter's run for --compare", reference.results + reference.temporaries))
        check_memory(run)


def _emit_output(text: str, output: str | None) -> None:
    if output:
        from .files import write_text_atomically

        write_text_atomically(output, text if text.endswith("\n") else text + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


# ---- run --------------------------------------------------------------------------------
COMPARE_MODES = ("interpreter", "xla")


def cmd_run(args: argparse.Namespace) -> int:
    import hlofuse

    from .files import check_output_path
    from .runtime.io import check_archive, random_inputs, read_inputs, write_outputs

    if args.output:
        check_output_path(args.output)  # before the work, not after it
    if args.inputs:
        check_archive(args.inputs)  # before the compile: a bad file is said at once
    if args.profile and args.backend != "cpu":
        raise UsageError(f"--profile times the native CPU driver's steps: it needs --backend cpu, not {args.backend}")
    from .compiler import compile_source
    from .loader import read_source

    source = read_source(args.module, args.format)
    options = dict(target=args.backend, fusion=not args.no_fusion, cache=not args.no_cache,
                   algorithm=args.fusion_algorithm)
    # compile() refuses a module too big for the machine (ResourceError) before anything of a
    # run is allocated; the inputs come after it, and random ones are checked first too.
    if args.compare == "xla":
        module = source.make_module()
        # A module XLA refuses cannot be compared: say so before hlofuse's (slower) compile.
        xla = _compile_on_xla(args, module)
        exe = hlofuse.compile(module, **options)
    else:
        # a module compiled before is found by its file's digest and not parsed (--compare
        # and --report make it: `exe.module`)
        xla = None
        exe = compile_source(source.data, source.format, source.make_module, **options)
    # the entry parameters (the fused module's are the module's own: no pass changes them)
    params = exe.fused_module
    _check_run_memory(exe, params, random=not args.inputs, compare=args.compare,
                      xla_bytes=xla.memory_bytes() if xla else 0)
    inputs = read_inputs(args.inputs, params) if args.inputs else random_inputs(params, args.seed)
    outputs = list(exe(*inputs))  # also the warm-up call of --repeat
    placed = xla.place(inputs) if xla else None
    reference = xla.arrays(xla.run_placed(placed)) if xla else None  # XLA's warm-up
    if args.report:
        print(exe.fusion_report().to_text())
    if args.repeat:
        _print_times(args.backend, exe, inputs, args.repeat, xla, placed)
    if args.profile:
        from .runtime.io import check_arguments
        from .runtime.profile import profile_text

        print(profile_text(exe.program, check_arguments(exe.program.module, inputs), args.profile))
    status = 0
    if args.compare:
        if xla is None:
            from .compiler import reference_denormals
            from .runtime.interpreter import evaluate

            mode = reference_denormals(args.backend)
            reference = evaluate(exe.module, inputs, denormals=mode)
            against = "the interpreter" + (" (denormals kept, as on the GPU)" if mode == "keep" else "")
        else:
            against = xla.label
        status = _print_comparison(outputs, reference, f"{args.backend} (fusion {'off' if args.no_fusion else 'on'})",
                                   against)
    if args.output:
        write_outputs(args.output, outputs)
    elif not args.compare and not args.repeat and not args.report and not args.profile:
        for i, o in enumerate(outputs):
            print(f"out{i} = {np.array2string(np.asarray(o), threshold=20)}")
    return status


def _compile_on_xla(args: argparse.Namespace, module):
    """The module compiled by XLA:CPU: the file's own text for HLO (the same module, read by
    XLA's parser), hlofuse's HLO text for StableHLO (XLA's HLO parser cannot read MLIR)."""
    from .loader import detect_format
    from .runtime import xla_reference

    if detect_format(args.module, args.format) == "hlo":
        with open(args.module, encoding="utf-8") as f:
            text = f.read()
    else:
        text = module.to_text()
    return xla_reference.compile_for_xla_cpu(text, isolated=True,
                                             tokens=xla_reference.token_leaves(module.entry.root.shape))


def _print_times(backend: str, exe, inputs: list, repeat: int, xla, placed) -> None:
    """Median wall time of `repeat` calls after the warm-up one; with XLA, its calls are
    interleaved with hlofuse's (so drift in the machine's load hits both) and the ratio follows."""
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        exe(*inputs)
        ours.append(time.perf_counter() - t0)
        if xla is not None:
            t0 = time.perf_counter()
            xla.run_placed(placed)
            theirs.append(time.perf_counter() - t0)
    a = statistics.median(ours) * 1e3
    print(f"{backend}: median {a:.3f} ms over {repeat} runs")
    if xla is not None:
        b = statistics.median(theirs) * 1e3
        print(f"XLA:CPU: median {b:.3f} ms over {repeat} runs")
        print(f"ratio {backend}/XLA:CPU: " + (f"{a / b:.2f}" if b > 0 else "n/a (XLA:CPU took no measurable time)"))


def _print_comparison(outputs: list, reference: list, ours: str, against: str) -> int:
    """Print the per-output comparison; EXIT_MISMATCH if any output differs, else 0."""
    from .runtime.compare import compare_outputs

    results = compare_outputs(outputs, reference)
    print(f"comparison of {ours} with {against}:")
    for r in results:
        print("  " + r.line())
    ok = all(r.ok for r in results)
    print("  result: " + ("match" if ok else "MISMATCH"))
    return 0 if ok else EXIT_MISMATCH


# ---- compile ----------------------------------------------------------------------------
def cmd_compile(args: argparse.Namespace) -> int:
    from .compiler import optimize
    from .files import check_output_path

    if args.output:
        check_output_path(args.output)
    if args.timings:  # `parse` times the parsing, not a new process's import of the parser (0.02-0.2 s)
        from .hlo import parser  # noqa: F401
    start, cpu_start = time.perf_counter(), time.process_time()
    module = _load(args.module, args.format)
    parse_seconds = time.perf_counter() - start
    emit = args.emit
    program = None
    fused, pipeline = optimize(module, args.target, fusion=not args.no_fusion, verify=args.verify or None,
                               dump_dir=args.dump_dir, passes=args.passes, algorithm=args.fusion_algorithm)
    if args.dump_dir:
        _dump_extras(args.dump_dir, module, fused, pipeline, args.target)
    if emit == "hlo":
        text = fused.to_text()
    elif emit in ("report", "json"):
        from .passes.fusion.report import build_report

        report = build_report(module, fused, fused.fusion_log)
        text = report.to_text() if emit == "report" else json.dumps(report.to_dict(), indent=2)
    elif emit in ("html", "dot"):
        from .viz import render

        text = render(module, fused, emit)
    elif emit in ("llvm", "asm"):
        if args.target != "cpu":
            raise UsageError(f"--emit {emit} is for --target cpu; use --emit ptx for the GPU")
        program = _cpu_program(fused, args)
        text = program.llvm_ir() if emit == "llvm" else program.asm()
    elif emit == "ptx":
        if args.target != "gpu":
            raise UsageError("--emit ptx needs --target gpu")
        from .runtime.gpu_executor import GpuProgram

        text = GpuProgram.compile(fused, emulated=True, build_only=True).ptx()
    else:  # argparse restricts choices; kept for safety
        raise UsageError(f"unknown --emit {emit}")
    _emit_output(text, args.output)
    if args.timings:
        if program is None and args.target == "cpu":
            program = _cpu_program(fused, args)  # the code generation stages are timed too
        print_timings(pipeline, parse_seconds, program,
                      span=(time.perf_counter() - start, time.process_time() - cpu_start))
    return 0


def _cpu_program(fused, args: argparse.Namespace):
    """The fused module compiled for the host (kernel objects from the user's compile cache
    unless --no-cache)."""
    from .codegen.cache import default_cache_dir
    from .runtime.cpu_executor import CpuProgram

    cache = not args.no_cache
    return CpuProgram.compile(fused, cache_dir=default_cache_dir() if cache else None, cache=cache)


# ---- opt --------------------------------------------------------------------------------
def cmd_opt(args: argparse.Namespace) -> int:
    """`hlofuse opt`: the passes of --passes only, in order, and the module they leave (what
    XLA's hlo-opt does), so one pass can be studied on its own."""
    from .compiler import optimize
    from .files import check_output_path

    if args.list_passes:
        print(list_passes_text())
        return 0
    if args.module is None:
        raise UsageError("opt needs a MODULE (or --list-passes)")
    if not args.passes:
        raise UsageError("opt needs --passes, e.g. --passes simplifier,cse,dce; "
                         "hlofuse opt --list-passes lists them")
    if args.output:
        check_output_path(args.output)
    module = _load(args.module, args.format)
    result, pipeline = optimize(module, args.target, passes=args.passes, verify=args.verify or None,
                                dump_dir=args.dump_dir)
    _emit_output(result.to_text(), args.output)
    if args.timings:
        print_timings(pipeline)
    return 0


def list_passes_text() -> str:
    """Every pass and named pipeline of `--passes`: its spec with its options and their
    defaults, and the first sentence of its docstring."""
    from .passes.pipeline import PASSES, PIPELINES, pass_options

    lines = []
    first_name = {}
    for name, cls in PASSES.items():
        first_name.setdefault(cls, name)
    for name in sorted([*PASSES, *PIPELINES]):
        if name in PIPELINES:
            spec = f"{name}{{{','.join(pass_options(name))}}}"
            doc = _first_sentence(PIPELINES[name].__doc__)
        else:
            cls = PASSES[name]
            defaults = _option_defaults(cls)
            # `target` comes from --target, whatever the class's own default.
            options = [o if o == "target" or o not in defaults else f"{o}={defaults[o]}"
                       for o in pass_options(name)]
            spec = name + ("{" + ",".join(options) + "}" if options else "")
            alias = first_name[cls]
            doc = f"the same pass as {alias}" if alias != name else _first_sentence(cls.__doc__)
        lines.append(f"{spec}\n    {doc}")
    lines.append("A pass's `target` defaults to --target; options go in braces: simplifier{max_fold_elements=8}.")
    return "\n".join(lines)


def _option_defaults(cls) -> dict[str, str]:
    """Option -> default as written in a spec (true/false, numbers), for a pass class."""
    import inspect

    out = {}
    for name, p in inspect.signature(cls).parameters.items():
        if p.default is not inspect.Parameter.empty and p.default is not None:
            value = p.default
            out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph (its first line is often cut mid-phrase)."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]


def _dump_extras(dump_dir: str, module, fused, pipeline, target: str) -> None:
    """After the per-pass dumps: the report, schedule, buffer assignment, each kernel's LLVM IR
    and machine code, the fusion graph and index.html (hlofuse/dump.py)."""
    from .dump import write_dump

    write_dump(dump_dir, module, fused, pipeline, target)


# ---- fmt, conformance, explain ----------------------------------------------------------
def cmd_fmt(args: argparse.Namespace) -> int:
    from .files import check_output_path

    if args.output:
        check_output_path(args.output)
    module = _load(args.module, args.format)
    _emit_output(module.to_text(), args.output)
    return 0


def cmd_conformance(args: argparse.Namespace) -> int:
    from .frontends.conformance import main_conformance

    return main_conformance(args.paths, backend=args.backend, stream=sys.stdout,
                            verbose_breakdown=args.breakdown, jobs=args.jobs)


def cmd_explain(args: argparse.Namespace) -> int:
    from .explain import explain

    module = _load(args.module, args.format)
    print(explain(module, args.instructions, target=args.target, algorithm=args.fusion_algorithm))
    return 0


# ---- parser -----------------------------------------------------------------------------
def _int_at_least(low: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    parse.__doc__ = f"An argparse type: an integer that is {what}."
    return parse


positive_int = _int_at_least(1, "at least 1")
non_negative_int = _int_at_least(0, "0 or more")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `hlofuse` command."""
    p = argparse.ArgumentParser(prog="hlofuse", description="XLA-style HLO fusion compiler.",
                                epilog="exit status: 0 ok, 1 mismatch found by run --compare, "
                                       "2 a mistake in the command or its files, 3 a bug in hlofuse")
    debug_help = "on an internal error, also print the full Python traceback"
    p.add_argument("--debug", action="store_true", help=debug_help)
    # Also accepted after the command (`hlofuse run m.hlo --debug`); SUPPRESS keeps the
    # global value when it is not repeated there.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="run, compile, opt, fmt, conformance or explain (COMMAND -h for its options)")

    def module_arg(sp):
        sp.add_argument("module", help="module file: .hlo (HLO text) or .mlir (StableHLO)")
        sp.add_argument("--format", choices=["hlo", "stablehlo"], help="override the format given by the suffix")

    def fusion_algorithm_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--fusion-algorithm", choices=["legacy", "priority"], default=None,
                        help="producer-consumer fusion: priority fusion by the performance model (the GPU "
                             "default, as XLA's GPU compiler) or the instruction fusion / fusion merger "
                             "sequence (legacy, the CPU default)")

    r = sub.add_parser("run", parents=[common], help="compile and run a module")
    module_arg(r)
    r.add_argument("--backend", choices=TARGETS, default="cpu", help="where to run it (default: cpu)")
    r.add_argument("--inputs", help=".npz with arrays arg0, arg1, ... (random seeded inputs if absent)")
    r.add_argument("-o", "--output", help="write the results as out0, out1, ... to this .npz "
                                          "(its directory must exist)")
    r.add_argument("--no-fusion", action="store_true", help="run without the fusion passes")
    fusion_algorithm_arg(r)
    r.add_argument("--compare", nargs="?", const="interpreter", choices=COMPARE_MODES, metavar="interpreter|xla",
                   help="also run the module on a reference and compare the outputs, exit 1 on a mismatch: "
                        "hlofuse's interpreter (the default) or XLA:CPU through JAX (needs the jax extra)")
    r.add_argument("--report", action="store_true", help="print the fusion report")
    r.add_argument("--profile", type=positive_int, nargs="?", const=10, metavar="N",
                   help="time every step of N runs (default 10) of the CPU program: kernel, kind, bytes, "
                        "time, GB/s, GFLOP/s and share, as XLA's profiles give")
    r.add_argument("--repeat", type=positive_int, metavar="N",
                   help="time N executions after a first, untimed one (N >= 1) and print the median "
                        "instead of the outputs; with --compare xla, XLA:CPU's too, interleaved, and the ratio")
    r.add_argument("--no-cache", action="store_true", help="compile every kernel afresh: neither read nor write "
                                                          "the compile cache (default: $HLOFUSE_CACHE_DIR, else "
                                                          "$XDG_CACHE_HOME/hlofuse)")
    r.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random inputs (default: 0)")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("compile", parents=[common], help="run the pass pipeline and print a stage")
    module_arg(c)
    c.add_argument("--target", choices=["cpu", "gpu"], default="cpu", help="fusion policy and code generator "
                                                                           "(default: cpu)")
    c.add_argument("--emit", choices=["hlo", "llvm", "asm", "ptx", "report", "json", "html", "dot"], default="hlo",
                   help="what to print: the optimized HLO (default), LLVM IR, assembly, PTX, the fusion "
                        "report as text or JSON, or the fusion graph as HTML or DOT")
    c.add_argument("-o", "--output", help="write to this file instead of standard output (its directory must exist)")
    c.add_argument("--dump-dir", help="write the module after every pass, then the report, schedule, buffer "
                                      "assignment, each kernel's LLVM IR and assembly or PTX, the graph and an "
                                      "index.html here (created if missing)")
    c.add_argument("--no-fusion", action="store_true", help="run the pipeline without the fusion passes")
    fusion_algorithm_arg(c)
    c.add_argument("--passes", help="comma-separated pass names instead of the standard pipeline")
    c.add_argument("--verify", action="store_true", help="verify the module after every pass")
    c.add_argument("--timings", action="store_true", help="print the time of each stage to standard error: "
                                                          "parsing, every pass, and for --target cpu planning, "
                                                          "emission, LLVM optimization, code generation, loading")
    c.add_argument("--no-cache", action="store_true", help="compile every kernel afresh: neither read nor write "
                                                          "the compile cache")
    c.set_defaults(func=cmd_compile)

    o = sub.add_parser("opt", parents=[common], help="run the passes named by --passes and print the module "
                                                     "(like XLA's hlo-opt)")
    o.add_argument("module", nargs="?", help="module file: .hlo (HLO text) or .mlir (StableHLO)")
    o.add_argument("--format", choices=["hlo", "stablehlo"], help="override the format given by the suffix")
    o.add_argument("--passes", metavar="SPEC,...",
                   help="passes to run in order, with options in braces: simplifier{max_fold_elements=8},cse,"
                        "fusion{target=cpu}; a named pipeline (fusion-pipeline) stands for its passes")
    o.add_argument("--target", choices=["cpu", "gpu"], default="cpu",
                   help="the target of the passes that take one and are not given it in braces (default: cpu)")
    o.add_argument("--verify", action="store_true", help="verify the module after every pass")
    o.add_argument("-o", "--output", help="write to this file instead of standard output (its directory must exist)")
    o.add_argument("--dump-dir", help="write the module before and after every pass here (created if missing)")
    o.add_argument("--timings", action="store_true", help="print per-pass timings to standard error")
    o.add_argument("--list-passes", action="store_true", help="list the passes, their options and what they do")
    o.set_defaults(func=cmd_opt)

    f = sub.add_parser("fmt", parents=[common], help="print a module as canonical HLO text")
    module_arg(f)
    f.add_argument("-o", "--output", help="write to this file instead of standard output (its directory must exist)")
    f.set_defaults(func=cmd_fmt)

    k = sub.add_parser("conformance", parents=[common], help="run StableHLO conformance test files")
    k.add_argument("paths", nargs="+", metavar="PATH", help="test files (.mlir), or folders of them")
    k.add_argument("--backend", choices=["interpreter", "cpu", "gpu-emulated", "gpu"], default="interpreter",
                   help="what runs the tests (default: interpreter; gpu needs a CUDA GPU)")
    k.add_argument("--jobs", type=positive_int, default=1, help="files run in parallel processes (default: 1)")
    k.add_argument("--breakdown", action="store_true", help="also print results by op family and element type")
    k.set_defaults(func=cmd_conformance)

    e = sub.add_parser("explain", parents=[common], help="why is (or is not) an instruction fused with another")
    module_arg(e)
    e.add_argument("instructions", nargs="+", metavar="INSTRUCTION",
                   help="names of instructions of the module (two or more: why they are or are not fused)")
    e.add_argument("--target", choices=["cpu", "gpu"], default="cpu", help="fusion policy to explain (default: cpu)")
    fusion_algorithm_arg(e)
    e.set_defaults(func=cmd_explain)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `hlofuse` console script; returns the exit status (see the module
    docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(_compare_before_module(list(sys.argv[1:] if argv is None else argv)))
    except SystemExit as e:  # a usage error (2), or --help (0): argparse has printed it
        return e.code if isinstance(e.code, int) else EXIT_USER_ERROR
    try:
        return args.func(args)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        print("hlofuse: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every failure ends as one paragraph and an exit status
        message, status = describe_failure(e, args)
        if status == EXIT_INTERNAL_ERROR and args.debug:
            import traceback

            traceback.print_exception(e, file=sys.stderr)
        print(message, file=sys.stderr)
        return status


def _compare_before_module(argv: list[str]) -> list[str]:
    """`run --compare MODULE` meant the interpreter before --compare took a value; keep that
    meaning: a `--compare` followed by a word that is no comparison mode becomes
    `--compare=interpreter`, and the word stays the module."""
    command = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    if command is None or argv[command] != "run":
        return argv
    out = list(argv)
    for i in range(command + 1, len(argv) - 1):
        following = argv[i + 1]
        if argv[i] == "--compare" and following not in COMPARE_MODES and not following.startswith("-"):
            out[i] = "--compare=interpreter"
    return out


def describe_failure(e: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    """The paragraph and exit status for exception `e` of a command: 2 for the user's
    mistakes (HloError, usage, files), 3 for anything else, which is a bug in hlofuse."""
    from .hlo.errors import HloError

    if isinstance(e, (HloError, UsageError)):
        return f"hlofuse: {e}", EXIT_USER_ERROR
    if isinstance(e, OSError) and e.filename is not None:
        # The user's files (inputs, outputs, folders); an OSError without a file name is not.
        why = {FileNotFoundError: "no such file", IsADirectoryError: "is a directory",
               PermissionError: "permission denied", NotADirectoryError: "not a directory"}.get(type(e), e.strerror)
        return f"hlofuse: {e.filename}: {why}", EXIT_USER_ERROR
    return internal_error_message(e, getattr(args, "module", None), args.command), EXIT_INTERNAL_ERROR


def internal_error_message(e: BaseException, module_file: str | None, command: str | None) -> str:
    """One paragraph for an unexpected exception: a bug in hlofuse, the command and module
    file it happened on, the exception (type and message) and where in hlofuse it was raised."""
    text = " ".join(str(e).split())
    if len(text) > 400:
        text = text[:400] + " ..."
    on = f" while running 'hlofuse {command}'" if command else ""
    if module_file:
        on += f" on {module_file}"
    where = _raised_at(e)
    return (f"hlofuse: internal error: this is a bug in hlofuse, not a mistake in your command{on}: "
            f"{type(e).__name__}{': ' + text if text else ''} (raised in {where}). Please report it with the "
            f"module and the command line; run with --debug for the full traceback.")


def _raised_at(e: BaseException) -> str:
    """`hlofuse/path.py:LINE in FUNCTION` of the innermost frame of hlofuse's own code in the
    traceback of `e` (the innermost frame at all when none is hlofuse's)."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "an unknown place"
    package = os.path.dirname(os.path.abspath(__file__))
    ours = [fr for fr in frames if os.path.abspath(fr.filename).startswith(package + os.sep)]
    frame = (ours or frames)[-1]
    path = os.path.abspath(frame.filename)
    if path.startswith(package + os.sep):
        path = os.path.join("hlofuse", os.path.relpath(path, package))
    return f"{path}:{frame.lineno} in {frame.name}"


def _silence_stdout() -> None:
    """Point standard output at /dev/null after a closed pipe (`hlofuse fmt m.hlo | head`), so
    Python's flush at exit does not report the broken pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
