"""Command line of the fuzz harness; see the package docstring (`python -m tests.fuzz --help`)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from . import __doc__ as DOC
from .cases import REAL_GPU_ENV
from .runner import FuzzConfig, run


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzers, print the summary; exit status 1 when any failure was found."""
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--malformed", type=int, default=0, help="number of mutated-module cases")
    p.add_argument("--graphs", type=int, default=0, help="number of random valid graphs")
    p.add_argument("--large-graphs", type=int, default=0,
                   help="number of random valid graphs of large arrays (the kernels' many-row paths)")
    p.add_argument("--edge-cases", action="store_true", help="elementwise ops on edge inputs against XLA:CPU")
    p.add_argument("--edge-ops", default=None, help="comma-separated opcodes for --edge-cases (default: all)")
    p.add_argument("--edge-dtypes", default=None, help="comma-separated element types for --edge-cases")
    p.add_argument("--gpu", action="store_true",
                   help="also run graphs and edge cases on the CUDA GPU of this machine (target gpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="worker processes")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per case before it counts as a hang")
    p.add_argument("--out", default=None, help="directory for reproducers (default: a new one under /tmp)")
    a = p.parse_args(argv)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="hlofuse-fuzz-failures-"))
    if a.gpu:
        os.environ[REAL_GPU_ENV] = "1"  # read by the workers (cases.graph_backends)
    config = FuzzConfig(malformed=a.malformed, graphs=a.graphs, large_graphs=a.large_graphs, edge_cases=a.edge_cases,
                        edge_opcodes=a.edge_ops.split(",") if a.edge_ops else None,
                        edge_dtypes=a.edge_dtypes.split(",") if a.edge_dtypes else None,
                        edge_backends=FuzzConfig.edge_backends + (("gpu",) if a.gpu else ()),
                        seed=a.seed, jobs=a.jobs, timeout=a.timeout, out=out, progress=True)
    start = time.monotonic()
    summary = run(config)
    print(summary.render())
    print(f"\n{time.monotonic() - start:.0f} s in all; reproducers under {out}")
    return 1 if summary.failure_count() else 0


if __name__ == "__main__":
    sys.exit(main())
