"""Running a module on XLA:CPU through jaxlib: the reference of `hlofuse run --compare xla`.

    reference = compile_for_xla_cpu(hlo_text)    # XLA parses and compiles it, once
    outputs = reference(x, y)                      # numpy arrays, tuples flattened depth-first

XLA's own HLO parser reads the text, the module goes to StableHLO and the JAX CPU client
compiles it, as `run_hlo_module --reference_platform=cpu` would. That reaches into jaxlib's
internals (`jax._src.lib.xla_client`), so every failure is sorted here: no JAX (or a jaxlib
without those internals) is XlaUnavailableError, XLA refusing the module or failing to run it
is XlaRefusedError quoting XLA's own message; both are the user's to act on, not hlofuse bugs.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from ..hlo.errors import HloError

# XLA's statuses can carry a whole MLIR operation dump; a user needs the first part.
_MAX_MESSAGE = 2000


class XlaUnavailableError(HloError):
    """JAX is not installed, or its jaxlib lacks what hlofuse uses to drive XLA."""


class XlaRefusedError(HloError):
    """XLA's parser or compiler refused the module, or XLA:CPU failed to run it."""


def _xla_modules() -> tuple[Any, Any]:
    """(jax, xla_client), or XlaUnavailableError naming the `jax` extra."""
    try:
        import jax
        from jax._src.lib import xla_client
    except ImportError as e:
        raise XlaUnavailableError(
            f"--compare xla runs the module on XLA:CPU through JAX, which is not installed ({e}); "
            f"install hlofuse's jax extra: pip install 'hlofuse[jax]'") from None
    return jax, xla_client


def jaxlib_version() -> str:
    """The installed jaxlib's version ('X.Y.Z'), or XlaUnavailableError without JAX."""
    _xla_modules()
    import jaxlib.version

    return jaxlib.version.__version__


def _xla_message(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + " ..."


def _flatten(values: Sequence) -> list:
    """Arguments depth-first: XLA's StableHLO form takes a tuple parameter's leaves in order."""
    flat: list = []
    for v in values:
        if isinstance(v, (tuple, list)):
            flat += _flatten(v)
        else:
            flat.append(v)
    return flat


class XlaCpuExecutable:
    """A module compiled by XLA:CPU. `place` copies arguments to XLA's buffers once,
    `run_placed` runs on them and waits for the results (what `--repeat` times), and calling
    it does both and returns numpy arrays."""

    def __init__(self, executable: Any, device: Any, version: str, compile_seconds: float = 0.0,
                 token_leaves: tuple[bool, ...] = ()) -> None:
        self._executable = executable
        self._device = device
        self.version = version
        # Which of XLA's results (the entry's leaves, depth-first) are tokens: hlofuse returns
        # no value for a token, and XLA's token buffer has no numpy form (`arrays`).
        self.token_leaves = token_leaves
        # Wall seconds of XLA:CPU's compile alone (not its parsing or the StableHLO conversion):
        # what benchmarks/compile_time.py sets beside hlofuse's cold compile.
        self.compile_seconds = compile_seconds

    @property
    def label(self) -> str:
        """How output names XLA: `XLA:CPU (jaxlib X.Y.Z)`."""
        return f"XLA:CPU (jaxlib {self.version})"

    def place(self, arrays: Sequence) -> list:
        """XLA buffers on the CPU device for `arrays` (tuples flattened), placed once."""
        jax, _ = _xla_modules()
        # Without x64 JAX would narrow s64/f64 arguments to 32 bits; the module declares them.
        with jax.enable_x64(True):
            return [jax.device_put(np.asarray(a), self._device) for a in _flatten(arrays)]

    def run_placed(self, buffers: list) -> list:
        """Run on placed buffers and wait for every result; XLA's failure is XlaRefusedError."""
        try:
            results = self._executable.execute(buffers)
            for r in results:
                r.block_until_ready()
        except (RuntimeError, ValueError, TypeError) as e:
            raise XlaRefusedError(f"{self.label} failed to run the module: {_xla_message(e)}") from None
        return results

    def arrays(self, results: list) -> list[np.ndarray]:
        """`run_placed`'s results as numpy arrays, the tokens left out (as hlofuse's outputs)."""
        tokens = self.token_leaves
        return [np.asarray(r) for i, r in enumerate(results) if not (i < len(tokens) and tokens[i])]

    def __call__(self, *arrays) -> list[np.ndarray]:
        """The outputs for `arrays` as numpy arrays, tuples flattened depth-first, tokens left
        out."""
        return self.arrays(self.run_placed(self.place(arrays)))

    def memory_bytes(self) -> int:
        """Bytes XLA's run holds: its argument copies, results and temporaries (0 if unknown)."""
        try:
            stats = self._executable.get_compiled_memory_stats()
        except Exception:  # noqa: BLE001 - an estimate only; jaxlib may not report it
            return 0
        return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes)


# What a child process runs to see whether XLA survives compiling a module (`_probe`): the
# module's text on its standard input, exit 0 when compiled or refused with an error.
_PROBE = """
import sys
from hlofuse.runtime import xla_reference
try:
    xla_reference.compile_for_xla_cpu(sys.stdin.read())
except xla_reference.HloError:
    pass
"""


def _probe(hlo_text: str, version: str) -> None:
    """Compile `hlo_text` with XLA:CPU in a child process first: XLA stops its process on a
    failed internal check (LOG(FATAL): SIGABRT), which in this process would take the caller
    with it (XLA's own test modules did: cpu_edge_cases_test, multioutput_fusion_test, a sort
    comparator with nested computations). XlaRefusedError quoting XLA's check when the child
    died by a signal; otherwise nothing (a refusal is then reported by the compile here)."""
    import signal
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PROBE], input=hlo_text, capture_output=True, text=True)
    if done.returncode >= 0:
        return
    try:
        name = signal.Signals(-done.returncode).name
    except ValueError:
        name = f"signal {-done.returncode}"
    lines = [ln.strip() for ln in done.stderr.splitlines()]
    check = next((ln for ln in lines if "Check failed" in ln or ln.startswith("F")), "")
    raise XlaRefusedError(f"XLA:CPU (jaxlib {version}) crashed compiling the module ({name}), an internal "
                          f"check of XLA's and not an answer to compare with" + (f": {_xla_message(check)}" if check else ""))


def token_leaves(shape) -> tuple[bool, ...]:
    """For each leaf of `shape` (an hlofuse Shape: the entry's result), depth-first, whether it
    is a token: what XlaCpuExecutable needs to leave XLA's token results out."""
    if shape.is_token:
        return (True,)
    if shape.is_tuple:
        return tuple(t for e in shape.elements for t in token_leaves(e))
    return (False,)


def compile_for_xla_cpu(hlo_text: str, isolated: bool = False, tokens: tuple[bool, ...] = ()) -> XlaCpuExecutable:
    """Parse `hlo_text` with XLA's HLO parser and compile it with XLA:CPU.

    XlaUnavailableError without JAX; XlaRefusedError, quoting XLA, when XLA's parser, its
    StableHLO conversion or its compiler refuses the module. `isolated` first compiles it in
    a child process (`_probe`, a second or two), so that a module on which XLA aborts is a
    refusal rather than the end of this process (the command line's `--compare xla`). `tokens`
    (`token_leaves` of the entry's result shape) says which results are tokens; without it
    every result is taken for an array."""
    jax, xc = _xla_modules()
    version = jaxlib_version()
    if isolated:
        _probe(hlo_text, version)
    try:  # private API: a jaxlib that moved it cannot serve as the reference
        parse = xc.hlo.hlo_module_from_text
        to_stablehlo = xc._xla.mlir.hlo_to_stablehlo
        client = jax.devices("cpu")[0].client
        compile_and_load = client.compile_and_load
    except (AttributeError, RuntimeError) as e:
        raise XlaUnavailableError(f"jaxlib {version} does not offer what --compare xla uses to drive XLA "
                                  f"({type(e).__name__}: {e}); jaxlib 0.6 to 0.10 do") from None
    device = client.devices()[0]
    stage = "HLO parser"
    try:
        hlo_module = parse(hlo_text)
        stage = "conversion to StableHLO"
        stablehlo = to_stablehlo(hlo_module.as_serialized_hlo_module_proto())
        stage = "CPU compiler"
        start = time.perf_counter()
        executable = compile_and_load(stablehlo, [device], xc.CompileOptions())
        compile_seconds = time.perf_counter() - start
    except (RuntimeError, ValueError, TypeError) as e:
        raise XlaRefusedError(f"XLA:CPU (jaxlib {version}) refused the module; its {stage} says: "
                              f"{_xla_message(e)}") from None
    return XlaCpuExecutable(executable, device, version, compile_seconds, tokens)
