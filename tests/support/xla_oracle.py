"""Run HLO text on XLA's own CPU compiler (through jaxlib), as an independent oracle in tests.

    outputs = run_on_xla(hlo_text, [x, y])   # list of numpy arrays, tuples flattened

The module is parsed by XLA's HLO parser, converted to StableHLO and compiled by the JAX CPU
client, as `hlofuse run --compare xla` does (runtime/xla_reference.py). Only for tests: it relies on jaxlib internals and is skipped when they are missing.
"""
from __future__ import annotations

import numpy as np


def run_on_xla(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    """Compile `text` with XLA CPU and run it on `args`."""
    return compile_on_xla(text)(args)


def compile_on_xla(text: str):
    """`text` compiled with XLA CPU: a function of a list of arguments, returning the outputs
    (hlofuse's own `--compare xla` reference, runtime/xla_reference.py)."""
    from hlofuse.runtime.xla_reference import compile_for_xla_cpu

    exe = compile_for_xla_cpu(text)
    return lambda args: exe(*args)


def xla_available() -> bool:
    """True when `run_on_xla` works in this environment."""
    try:
        text = "HloModule m\nENTRY e {\n  ROOT p = s32[] parameter(0)\n}\n"
        return int(run_on_xla(text, [np.int32(3)])[0]) == 3
    except Exception:  # noqa: BLE001 - any failure means the internals moved
        return False
