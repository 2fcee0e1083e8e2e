"""Loading the fusion golden cases (testdata/hlo_text/fusion/*.hlo) for the fusion tests.

A file holds cases separated by `// -----`; each has a `// RUN: passes=a,b target=gpu` line,
the input module, and CHECK lines for the fused module (matched by tests/passes/test_golden.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from repo_paths import GOLDEN

GOLDEN_DIR = GOLDEN / "fusion"


@dataclass
class FusionCase:
    """One golden case: where it is, how to run it, and the module."""

    file: str
    index: int
    name: str
    passes: list[str]
    target: str
    module: str

    @property
    def id(self) -> str:
        return f"{self.file}:{self.index}:{self.name}"


def load_cases() -> list[FusionCase]:
    """Every case of every fusion golden file, in file order."""
    out: list[FusionCase] = []
    for path in sorted(GOLDEN_DIR.glob("*.hlo")):
        for i, case in enumerate(path.read_text().split("\n// -----\n")):
            lines = case.splitlines()
            run = next(l for l in lines if "RUN:" in l)
            opts = dict(kv.split("=", 1) for kv in run.split("RUN:", 1)[1].split())
            module = "\n".join(l for l in lines if not l.lstrip().startswith("//"))
            name = re.search(r"HloModule\s+([\w.\-]+)", module).group(1)
            out.append(FusionCase(path.name, i, name, opts["passes"].split(","), opts.get("target", "gpu"),
                                  module))
    return out


def run_passes(case: FusionCase):
    """Parse the case's module and run its passes; returns the fused module."""
    from golden_harness import build_pipeline
    from hlofuse.hlo.parser import parse_hlo

    module = parse_hlo(case.module)
    # The golden harness's pipeline builder, so that a named pipeline (fusion-pipeline) runs
    # as it does in the golden test (get_pass knows single passes only).
    build_pipeline({"passes": ",".join(case.passes), "target": case.target}).run(module)
    return module
