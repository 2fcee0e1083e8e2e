"""Regenerate the worked examples in docs/*.md by running them.

Each example is Python code run here; its text and its output replace what lies between

    <!-- BEGIN GENERATED: name -->
    <!-- END GENERATED: name -->

in its page, so the docs show what the code really prints. tests/test_docs.py checks that the
pages are in sync.

    python scripts/gen_docs.py          # rewrite the pages
    python scripts/gen_docs.py --check  # exit 1 and name the pages that are out of date
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")

SMALL_MODULE = '''HloModule scale_exp
ENTRY main {
  x = f32[1024] parameter(0)
  two = f32[] constant(2)
  b = f32[1024] broadcast(two), dimensions={}
  m = f32[1024] multiply(x, b)
  ROOT e = f32[1024] exponential(m)
}
'''

# name -> (page, code). The code runs with the repository root as the working directory.
EXAMPLES: dict[str, tuple[str, str]] = {
    "parser": ("parser.md", '''
import hlofuse
from hlofuse.hlo.errors import HloParseError

text = """
HloModule add_mul
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  s = f32[4] add(x, y)
  ROOT m = f32[4] multiply(s, y)
}
"""
module = hlofuse.parse_hlo(text)
print(module.to_text())
try:
    hlofuse.parse_hlo(text.replace("add(x, y)", "add(x, z)"), filename="add_mul.hlo")
except HloParseError as e:
    print(e)
'''),
    "passes": ("passes.md", '''
import hlofuse
from hlofuse.compiler import optimize
from hlofuse.passes.fusion.report import build_report

module = hlofuse.load("examples/softmax.hlo")
fused, pipeline = optimize(module, target="gpu")
print("passes:", ", ".join(p.name for p in pipeline.passes))
for inst in fused.entry.instructions:
    if inst.opcode == "fusion":
        print(inst.name, inst.attrs["kind"], [m.name for m in inst.fused_computation.instructions
                                              if m.opcode != "parameter"])
print()
print(build_report(module, fused).to_text())
'''),
    "emitters": ("emitters.md", f'''
import hlofuse
from hlofuse.codegen.gpu import compile_gpu, emit_module
from hlofuse.compiler import optimize
from hlofuse.emitters.gpu.target import GpuTarget

module = hlofuse.parse_hlo("""
{SMALL_MODULE}""")
fused, _ = optimize(module, target="gpu")
code = compile_gpu(fused)  # planned into grid launches
print([launch.name for launch in code.launches])
print(emit_module(code.launches, GpuTarget(code.arch), fused.name))
'''),
    "runtime": ("runtime.md", '''
import numpy as np
import hlofuse
from hlofuse.runtime.interpreter import evaluate

module = hlofuse.parse_hlo("""
HloModule affine_sum
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  two = f32[] constant(2)
  one = f32[] constant(1)
  twos = f32[4,8] broadcast(two), dimensions={}
  ones = f32[4,8] broadcast(one), dimensions={}
  y = f32[4,8] multiply(x, twos)
  z = f32[4,8] add(y, ones)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce(z, zero), dimensions={1}, to_apply=add
}
""")
x = np.arange(32, dtype=np.float32).reshape(4, 8)
exe = hlofuse.compile(module, target="cpu")
(out,) = exe(x)
(ref,) = evaluate(module, [x])
print("cpu:        ", out)
print("interpreter:", ref)
print("numpy:      ", (x * 2 + 1).sum(axis=1))
print("kernels:", exe.report()["before"]["kernels"], "->", exe.report()["after"]["kernels"])
'''),
    "explain": ("seeing_fusion.md", '''
import hlofuse
from hlofuse.explain import explain

module = hlofuse.load("examples/lstm_cell.hlo")
print(explain(module, ["dot_general.2", "add.9"], target="cpu"))
print(explain(module, ["add.9"], target="cpu"))
'''),
    "dump-dir": ("seeing_fusion.md", '''
import os, tempfile
from hlofuse.cli import main

with tempfile.TemporaryDirectory() as out:
    main(["compile", "examples/softmax.hlo", "--dump-dir", out, "-o", os.devnull])
    for name in sorted(os.listdir(out)):
        print(name)
    print(open(os.path.join(out, [n for n in os.listdir(out) if n.endswith("schedule.txt")][0])).read())
'''),
}

_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
                    re.S)


def run_example(code: str) -> str:
    """What `code` prints, run in a fresh namespace from the repository root."""
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<docs example>", "exec"), {"__name__": "__docs__"})
    finally:
        os.chdir(cwd)
    return out.getvalue()


def render_block(code: str, output: str) -> str:
    """The markdown of one example: its code, then its output."""
    code = textwrap.dedent(code).strip("\n")
    output = "\n".join(line.rstrip() for line in output.rstrip("\n").splitlines())
    return f"```python\n{code}\n```\n\nOutput:\n\n```text\n{output}\n```\n"


def regenerate(text: str, blocks: dict[str, str]) -> str:
    """`text` with every generated block whose name is in `blocks` replaced."""
    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in blocks:
            return m.group(0)
        return m.group(1) + blocks[name] + m.group(4)

    return _BLOCK.sub(sub, text)


def pages() -> dict[str, tuple[str, str]]:
    """page file name -> (current text, regenerated text)."""
    blocks_by_page: dict[str, dict[str, str]] = {}
    for name, (page, code) in EXAMPLES.items():
        blocks_by_page.setdefault(page, {})[name] = render_block(code, run_example(code))
    out = {}
    for page, blocks in blocks_by_page.items():
        path = os.path.join(DOCS, page)
        with open(path) as f:
            text = f.read()
        missing = [n for n in blocks if f"<!-- BEGIN GENERATED: {n} -->" not in text]
        if missing:
            raise SystemExit(f"{path}: no generated block named {', '.join(missing)}")
        out[page] = (text, regenerate(text, blocks))
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite the pages (or with --check, report the stale ones)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if a page is out of date")
    args = ap.parse_args(argv)
    stale = []
    for page, (old, new) in pages().items():
        if old == new:
            continue
        stale.append(page)
        if not args.check:
            with open(os.path.join(DOCS, page), "w") as f:
                f.write(new)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python scripts/gen_docs.py)", file=sys.stderr)
        return 1
    if not args.check:
        print(f"updated: {', '.join(stale) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
