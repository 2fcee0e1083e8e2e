"""Draw docs/lstm_cell_fusion.svg: the fusion graph of examples/lstm_cell.hlo for the CPU,
drawn by hlofuse itself (the picture the README shows).

    python scripts/render_readme_graph.py [--target cpu|gpu] [-o docs/lstm_cell_fusion.svg]
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv: list[str] | None = None) -> int:
    """Write the SVG; print where."""
    import hlofuse
    from hlofuse.compiler import optimize
    from hlofuse.files import write_text_atomically
    from hlofuse.viz import render_svg_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", default=os.path.join(ROOT, "examples", "lstm_cell.hlo"))
    ap.add_argument("--target", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "docs", "lstm_cell_fusion.svg"))
    args = ap.parse_args(argv)
    module = hlofuse.load(args.module)
    fused, _ = optimize(module, args.target)
    write_text_atomically(args.output, render_svg_file(module, fused))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
