"""The one place that fills the op registry: every rule module of every stage, in a listed order.

The registry rows (`opcodes.py`) are facts about opcodes; the rules that give them meaning live
in the layers above (shape inference here in hlo/, the numpy interpreter and the library calls
in runtime/, the element generators in emitters/). Each stage's consumer calls
`load_rules(stage)` before it reads its rules:

  "shape"      hlo/shape_inference.infer_shape (verifier, parser)
  "reference"  runtime/interpreter Interpreter (and constant folding, which evaluates through it)
  "elemental"  emitters/elemental ElementalEmitter
  "library"    codegen/schedule Planner (unfused ops run by the compiled backends)

The modules are imported by name (importlib), so this bottom layer has no static import of the
layers above it, and nothing depends on which module happened to be imported first: a rule
module registers its rules when imported, `register_*` refuses a second rule for one slot, and
the order below is the only order there is. Loading is idempotent and cheap after the first
call (one set lookup).
"""
from __future__ import annotations

import importlib

# stage -> its rule modules, in import order. A module may import another stage's helpers but
# registers rules of its own stage only.
RULE_MODULES: dict[str, tuple[str, ...]] = {
    "shape": tuple(f"hlofuse.hlo.shape_inference_{m}" for m in (
        "elementwise", "data", "indexing", "linalg", "reduce", "control")),
    "reference": tuple(f"hlofuse.runtime.interpreter.{m}" for m in (
        "elementwise", "conversion", "data_movement", "reduction", "control_flow",
        "convolution", "dot", "gather_scatter", "windows", "sort", "fft", "rng", "linalg",
        "single_replica")),
    "elemental": tuple(f"hlofuse.emitters.elemental_{m}" for m in ("math", "convert", "complex", "data", "control")),
    "library": tuple(f"hlofuse.runtime.library_{m}" for m in ("ops", "linalg", "rng", "collectives")),
}
STAGES: tuple[str, ...] = tuple(RULE_MODULES)

_loaded: set[str] = set()


def load_rules(stage: str | None = None) -> None:
    """Import the rule modules of `stage` (every stage, in STAGES order, when None) once.

    Raises KeyError for an unknown stage; an import error of a listed module propagates (a
    missing rule module is a broken installation, not an optional feature).
    """
    if stage in _loaded:
        return
    stages = STAGES if stage is None else (stage,)
    for name in stages:
        if name in _loaded:
            continue
        for module in RULE_MODULES[name]:
            importlib.import_module(module)
        _loaded.add(name)


def loaded_stages() -> frozenset[str]:
    """The stages whose rule modules have been loaded (for tests and diagnostics)."""
    return frozenset(_loaded)
