"""IREE beside XLA:CPU: the same JAX function's StableHLO compiled by IREE (llvm-cpu) and timed
in the benchmarks' process (issue 13 item 6, issue 14 item 3).

IREE (PyPI `iree-base-compiler` + `iree-base-runtime`, the optional `iree` extra) is a second
reference next to XLA:CPU: on convolutions and transcendental chains it is faster than XLA, so
"within IREE's time" is the bar there. benchmarks/real_models.py and benchmarks/run.py take an
`--iree` flag that adds its column; this module holds everything IREE-specific so that those
scripts stay importable and runnable without IREE.

What is compiled: `jax.jit(fn).lower(*args).as_text()`, the StableHLO module of the very
lowering whose HLO text (`as_text(dialect="hlo")`) hlofuse and XLA:CPU compile, so all three
start from the same program. IREE compiles it for the `llvm-cpu` backend with the host's CPU
features (`--iree-llvmcpu-target-cpu=host`) and runs it on the `local-task` driver with one
worker per core this process may use (`--task_topology_group_count`, XLA:CPU's and hlofuse's
thread count too). Inputs are placed on the device once, outside the timed calls; a timed call
is one invocation of the compiled function, which returns when its results are ready
(`to_host` of a CPU buffer maps it, it does not copy). The outputs are checked against XLA's
(hlofuse.runtime.compare tolerances) before any timing.

Without IREE installed every entry point degrades to a printed note (`iree_status`), never an
exception.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable, Sequence

import numpy as np

# The note printed instead of the IREE column when the packages are missing.
INSTALL_HINT = "pip install -e '.[iree]' (iree-base-compiler, iree-base-runtime)"

# Compiler flags: llvm-cpu for this host's CPU (AVX2/AVX-512 as available), as XLA:CPU and
# hlofuse both compile for the host. Otherwise IREE's defaults: with IREE 3.13 on the 2-core
# host, --iree-opt-level=O3 and --iree-llvmcpu-enable-ukernels=all (alone or together) moved
# the flax MNIST CNN by under 7% (64.5 ms default; 62.9, 64.3, 68.7 ms; load 4), noise.
COMPILE_FLAGS = ("--iree-llvmcpu-target-cpu=host",)

_runtime_threads: int | None = None  # the worker count the IREE runtime was started with


def iree_status() -> str | None:
    """None when IREE's compiler and runtime import; otherwise the reason, as a one-line note."""
    try:
        import iree.compiler  # noqa: F401
        import iree.runtime  # noqa: F401
    except ImportError as e:
        return f"IREE not installed ({e}); no IREE column. Install: {INSTALL_HINT}"
    return None


def add_iree_flag(parser: argparse.ArgumentParser) -> None:
    """Add the `--iree` option (an IREE column beside XLA:CPU) to a benchmark's parser."""
    parser.add_argument("--iree", action="store_true",
                        help="also compile the same StableHLO with IREE (llvm-cpu) and time it beside XLA:CPU "
                             "(needs the `iree` extra; a note, not an error, when missing)")


def resolve_iree_flag(wanted: bool, say: Callable[[str], None] = print) -> bool:
    """Whether the IREE column is on: `wanted` (the --iree flag) and IREE importable; the reason
    it is off is said through `say` when it was wanted."""
    if not wanted:
        return False
    note = iree_status()
    if note is not None:
        say(note)
        return False
    return True


def default_threads() -> int:
    """The cores this process may run on (the thread count every side of the benchmark uses)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def runtime_flags(threads: int) -> list[str]:
    """The IREE runtime flags for `threads` workers: a fixed group count, no spinning (the
    machines are shared; spinning workers would take time from the other sides)."""
    if threads < 1:
        raise ValueError(f"IREE needs at least one worker thread, not {threads}")
    return [f"--task_topology_group_count={threads}", "--task_worker_spin_us=0"]


def _start_runtime(threads: int) -> None:
    """Parse the runtime flags once: IREE reads them when it first creates the task executor,
    so a second, different thread count in one process is refused rather than silently ignored."""
    global _runtime_threads
    import iree.runtime as ireert

    if _runtime_threads is None:
        ireert.flags.parse_flags(*runtime_flags(threads))
        _runtime_threads = threads
    elif _runtime_threads != threads:
        raise ValueError(f"the IREE runtime already runs {_runtime_threads} workers; cannot switch to {threads}")


def stablehlo_text(fn: Callable, args: Sequence) -> str:
    """The StableHLO module (MLIR text) of `jax.jit(fn)` on `args`, unused parameters kept so
    the arguments line up with the HLO text's parameters."""
    import jax

    return jax.jit(fn, keep_unused=True).lower(*args).as_text()


class IreeExecutable:
    """A StableHLO module compiled by IREE for llvm-cpu and loaded on the local-task driver."""

    def __init__(self, stablehlo: str, threads: int | None = None) -> None:
        import iree.compiler as ireec
        import iree.runtime as ireert

        self.threads = default_threads() if threads is None else threads
        _start_runtime(self.threads)
        start = time.perf_counter()
        vmfb = ireec.compile_str(stablehlo, target_backends=["llvm-cpu"], input_type="stablehlo",
                                 extra_args=list(COMPILE_FLAGS))
        self.compile_seconds = time.perf_counter() - start
        self._config = ireert.Config("local-task")
        self._context = ireert.SystemContext(config=self._config)
        vm_module = ireert.VmModule.copy_buffer(self._context.instance, vmfb)
        self._context.add_vm_module(vm_module)
        self._main = self._context.modules[vm_module.name]["main"]

    def place(self, args: Sequence[np.ndarray]) -> list:
        """Device arrays of `args` (placed once, outside the timed calls)."""
        import iree.runtime as ireert

        return [ireert.asdevicearray(self._config.device, np.asarray(a)) for a in args]

    def __call__(self, buffers: list) -> list:
        """Run once on placed buffers; the results (device arrays), ready when this returns."""
        out = self._main(*buffers)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    @staticmethod
    def to_numpy(results: list) -> list[np.ndarray]:
        """The results as numpy arrays."""
        return [np.asarray(r.to_host()) for r in results]


def check_against(iree_results: list[np.ndarray], reference: list[np.ndarray]) -> tuple[bool, list[str]]:
    """Whether IREE's outputs agree with the reference's (XLA's), and the first disagreements."""
    from hlofuse.runtime.compare import compare_outputs

    if len(iree_results) != len(reference):
        return False, [f"IREE returned {len(iree_results)} outputs, the reference {len(reference)}"]
    results = compare_outputs(list(iree_results), list(reference))
    return all(r.ok for r in results), [r.line() for r in results if not r.ok][:3]


def error_summary(e: BaseException, limit: int = 200) -> str:
    """One line for a failed IREE compile or run: the compiler's first `error:` diagnostic when
    there is one (iree-compile's message starts with a generic "Error invoking ..." line and
    names the unsupported operation further down), else the message's first line."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    diagnostic = next((line for line in lines if "error:" in line), None)
    if diagnostic is not None:
        diagnostic = diagnostic[diagnostic.index("error:") + len("error:"):].strip()
    text = diagnostic or (lines[0] if lines else "")
    return f"{type(e).__name__}: {text[:limit]}"


def prepare(fn: Callable, args: Sequence[np.ndarray], reference: list[np.ndarray],
            stablehlo: str | None = None) -> tuple[dict, Callable[[], object] | None]:
    """Compile `fn` (or the given StableHLO) with IREE, place `args`, check its outputs against
    `reference` and warm it up twice. Returns the row fields (`iree_compile_s`, `iree_match`,
    `iree_mismatch`, or `iree_error`) and a zero-argument timed call (None when IREE failed)."""
    try:
        exe = IreeExecutable(stablehlo if stablehlo is not None else stablehlo_text(fn, args))
        buffers = exe.place(args)
        got = IreeExecutable.to_numpy(exe(buffers))
    except Exception as e:  # noqa: BLE001 - an IREE failure is a cell of the table, not the end of the run
        return {"iree_error": error_summary(e)}, None
    fields: dict = {"iree_compile_s": exe.compile_seconds}
    fields["iree_match"], mismatch = check_against(got, reference)
    if mismatch:
        fields["iree_mismatch"] = mismatch
    exe(buffers)
    exe(buffers)  # two untimed warm-up calls, as for the other sides

    def call() -> object:
        return exe(buffers)

    return fields, call


def ratio_columns(hlofuse_s: float, xla_s: float, iree_s: float | None) -> dict[str, float]:
    """The three ratios of the report: hlofuse/XLA, IREE/XLA and hlofuse/IREE (the last two
    only with an IREE time)."""
    cols = {"hlofuse/XLA": hlofuse_s / xla_s}
    if iree_s is not None and iree_s > 0:
        cols["IREE/XLA"] = iree_s / xla_s
        cols["hlofuse/IREE"] = hlofuse_s / iree_s
    return cols


def format_cell(row: dict, key: str = "iree_ratio", width: int = 8) -> str:
    """A table cell for an IREE figure of `row`: the number, or why there is none."""
    if "iree_error" in row:
        return f"{'failed':>{width}s}"
    if key not in row:
        return f"{'-':>{width}s}"
    return f"{row[key]:{width}.2f}"
