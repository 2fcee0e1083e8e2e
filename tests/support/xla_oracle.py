"""Run HLO text on XLA's own CPU compiler (through jaxlib), as an independent oracle in tests.

    outputs = run_on_xla(hlo_text, [x, y])   # list of numpy arrays, tuples flattened

The module is parsed by XLA's HLO parser, converted to StableHLO and compiled by the JAX CPU
client. Only for tests: it relies on jaxlib internals and is skipped when they are missing.
"""
from __future__ import annotations

import numpy as np


def run_on_xla(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    """Compile `text` with XLA CPU and run it on `args`."""
    return compile_on_xla(text)(args)


def compile_on_xla(text: str):
    """`text` compiled with XLA CPU: a function of a list of arguments, returning the outputs."""
    import jax
    from jax._src.lib import xla_client as xc

    module = xc.hlo.hlo_module_from_text(text)
    stablehlo = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    client = jax.devices("cpu")[0].client
    exe = client.compile_and_load(stablehlo, client.devices()[:1], xc.CompileOptions())

    def run(args: list[np.ndarray]) -> list[np.ndarray]:
        with jax.enable_x64(True):  # keep 64-bit argument types even when JAX runs without x64
            buffers = [jax.device_put(np.asarray(a)) for a in args]
        return [np.asarray(o) for o in exe.execute(buffers)]

    return run


def xla_available() -> bool:
    """True when `run_on_xla` works in this environment."""
    try:
        text = "HloModule m\nENTRY e {\n  ROOT p = s32[] parameter(0)\n}\n"
        return int(run_on_xla(text, [np.int32(3)])[0]) == 3
    except Exception:  # noqa: BLE001 - any failure means the internals moved
        return False
