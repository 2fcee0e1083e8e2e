"""The pass interface: a named transformation of a module that says whether it changed it.

A pass is a value: a frozen dataclass whose fields are its options (`AlgebraicSimplifier(
max_fold_elements=8)`), found by name in the one pass table (`passes/pipeline.py: PASSES`).
It keeps no state between runs; whatever it needs while running lives in locals or in a
per-run object it builds inside `run`.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..hlo.ir import HloModule


class HloPass:
    """Base class of every pass. Subclasses set the class variable `name` and implement `run`."""

    name: ClassVar[str] = "unnamed-pass"

    def run(self, module: HloModule) -> bool:
        """Transform `module` in place; return True if anything changed."""
        raise NotImplementedError

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The options this pass takes: its dataclass fields (none for a pass that is no
        dataclass, such as the pipeline runner)."""
        if dataclasses.is_dataclass(cls):
            return tuple(f.name for f in dataclasses.fields(cls))
        return ()

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={getattr(self, k, '?')!r}" for k in self.option_names())
        return f"<pass {self.name}{'{' + options + '}' if options else ''}>"
