"""Pass registry and pipeline: run passes in order, verify, time and dump after each.

Passes are found by name (`--passes dce,cse`): `register_pass(name, factory)` maps a name to
a zero-argument factory returning a fresh pass value; `get_pass(name)` builds one.
"""
from __future__ import annotations

import inspect
import os
import re
import time
from typing import Any, Callable, Iterable

from ..files import write_text_atomically
from ..hlo.errors import HloError
from ..hlo.ir import HloModule
from .pass_base import HloPass

PassFactory = Callable[[], HloPass]

_REGISTRY: dict[str, PassFactory] = {}
_BUILTINS_LOADED = False


class UnknownPassError(HloError):
    """A pass name that no module registered."""


class PipelineVerifyError(HloError):
    """The verifier rejected the module after a pass; the message names the pass."""


def register_pass(name: str, factory: PassFactory) -> None:
    """Make `get_pass(name)` build a pass with `factory()` (a later registration replaces it)."""
    _REGISTRY[name] = factory


def _load_builtins() -> None:
    # Importing the pass modules registers them; the fusion passes live in another package
    # that may not be importable yet, so it is optional.
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from . import batchnorm_expander, constant_folding, cse, dce, simplifier  # noqa: F401

    try:
        from . import fusion as fusion_pkg

        getattr(fusion_pkg, "register_passes", lambda: None)()
    except ImportError:
        pass


def registered_passes() -> list[str]:
    """Names of all registered passes, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_pass(name: str, **options: Any) -> HloPass:
    """A fresh pass registered as `name`, built with those `options` its factory accepts
    (e.g. `target="gpu"` reaches only passes that take a target); UnknownPassError lists the
    known names for an unknown one."""
    _load_builtins()
    name = name.strip()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownPassError(f"unknown pass '{name}'; known passes: {', '.join(sorted(_REGISTRY))}") from None
    return factory(**_accepted_options(factory, options))


def _accepted_options(factory: PassFactory, options: dict[str, Any]) -> dict[str, Any]:
    if not options:
        return {}
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params and k != "name"}


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "module"


class PassPipeline(HloPass):
    """Passes run in order. Options: verify after each pass, dump the module before and after
    each pass to `dump_dir` (XLA's numbering: `0000.<module>.before_optimizations.hlo`, then
    `NNNN.<module>.<pass>.hlo`), and per-pass wall times in `timings` as (name, seconds, changed)
    (always recorded; they cost nothing)."""

    name = "pipeline"

    def __init__(self, passes: Iterable[HloPass], verify: bool = False, dump_dir: str | None = None,
                 timings: bool = False, name: str = "pipeline") -> None:
        self.passes = list(passes)
        self.verify = verify
        self.dump_dir = dump_dir
        self.record_timings = timings
        self.name = name
        self.timings: list[tuple[str, float, bool]] = []

    def _dump(self, module: HloModule, index: int, label: str) -> None:
        if not self.dump_dir:
            return
        path = os.path.join(self.dump_dir, f"{index:04d}.{_file_safe(module.name)}.{_file_safe(label)}.hlo")
        write_text_atomically(path, module.to_text())

    def _verify(self, module: HloModule, after: str) -> None:
        from ..hlo.verifier import verify  # written by another part; imported only when asked

        try:
            verify(module)
        except HloError as e:
            raise PipelineVerifyError(f"the module is invalid after pass '{after}': {e}") from e

    def run(self, module: HloModule) -> bool:
        """Run every pass on `module`; True if any changed it."""
        self.timings = []
        self._dump(module, 0, "before_optimizations")
        changed_any = False
        for k, p in enumerate(self.passes, start=1):
            start = time.perf_counter()
            changed = bool(p.run(module))
            self.timings.append((p.name, time.perf_counter() - start, changed))
            changed_any |= changed
            if self.verify:
                self._verify(module, p.name)
            self._dump(module, k, p.name)
        return changed_any

    def __repr__(self) -> str:
        return f"<pipeline {', '.join(p.name for p in self.passes)}>"


def _fusion_passes(target: str) -> list[HloPass]:
    try:
        from .fusion import fusion_passes
    except ImportError:
        return []  # the fusion package is not there yet: optimize without fusion
    return list(fusion_passes(target))


def standard_pipeline(target: str = "cpu", fusion: bool = True, verify: bool = False,
                      dump_dir: str | None = None, timings: bool = False) -> PassPipeline:
    """batchnorm-expander, simplifier, cse, dce, then (with `fusion`) the fusion passes for
    `target`, then dce."""
    passes = [get_pass("batchnorm-expander"), get_pass("simplifier"), get_pass("cse"), get_pass("dce")]
    if fusion:
        passes += _fusion_passes(target)
    passes.append(get_pass("dce"))
    return PassPipeline(passes, verify=verify, dump_dir=dump_dir, timings=timings, name=f"standard-{target}")


def parse_pass_list(spec: str, **options: Any) -> list[HloPass]:
    """Passes for a comma-separated list of names (`"simplifier,cse,dce"`)."""
    return [get_pass(n, **options) for n in spec.split(",") if n.strip()]
