"""The pass interface: a named transformation of a module that says whether it changed it."""
from __future__ import annotations

from ..hlo.ir import HloModule


class HloPass:
    """Base class of every pass. Subclasses set `name` and implement `run`."""

    name: str = "unnamed-pass"

    def run(self, module: HloModule) -> bool:
        """Transform `module` in place; return True if anything changed."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<pass {self.name}>"
