"""Shrink a failing module: `python -m tests.fuzz.minimize DIR` (a reproducer directory with
case.hlo and case.npz) writes DIR/min.hlo and DIR/min.npz, the smallest module found that
still fails with the same outcome and signature.

Greedy passes over the ENTRY computation, repeated until nothing changes: make an earlier
instruction the ROOT, or replace an instruction by a new parameter holding its value (as the
interpreter computes it); after each, instructions and parameters nothing uses are deleted.
The check runs in this process (a crash cannot be minimized this way).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .semantic import _INST


def classify(text: str, args: list, backend: str, fusion: bool) -> tuple[str, str]:
    """(outcome, signature) of `text` run on `backend` against the interpreter with `args`."""
    import hlofuse
    from hlofuse.hlo.verifier import verify

    from . import cases

    try:
        module = hlofuse.parse_hlo(text)
        verify(module)
        got = hlofuse.compile(module, target=backend, fusion=fusion)(*args)
    except Exception as e:  # noqa: BLE001
        r = cases._error_result(e, "run")
        return r["outcome"], r["signature"]
    r = cases._against_interpreter(module, args, got, backend, 0)
    return r["outcome"], r["signature"].split(":")[0]


def _entry_bounds(lines: list[str]) -> tuple[int, int]:
    start = next(i for i, l in enumerate(lines) if l.startswith("ENTRY"))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "}")
    return start + 1, end


def _insts(lines, lo, hi):
    return [(i, _INST.match(lines[i])) for i in range(lo, hi) if _INST.match(lines[i])]


def _uses(lines, lo, hi, name: str) -> int:
    pat = re.compile(r"[(,\s]" + re.escape(name) + r"[,)\s]")
    return sum(1 for i in range(lo, hi) if not lines[i].lstrip().startswith(name + " ")
               and pat.search(lines[i].split("=", 1)[1] if "=" in lines[i] else ""))


def _sweep(text: str, args: list) -> tuple[str, list]:
    """Delete instructions nothing uses, then unused parameters (renumbering the others and
    dropping their inputs), until none is left."""
    while True:
        lines = text.split("\n")
        lo, hi = _entry_bounds(lines)
        dead = [(i, m) for i, m in _insts(lines, lo, hi)
                if not m.group("root") and _uses(lines, lo, hi, m.group("name")) == 0]
        if not dead:
            return text, args
        i, m = dead[-1]
        lines = lines[:i] + lines[i + 1:]
        if m.group("opcode") == "parameter":
            k = int(m.group("operands"))
            lines = [re.sub(r"parameter\((\d+)\)", lambda mm: f"parameter({int(mm.group(1)) - (int(mm.group(1)) > k)})", l)
                     for l in lines]
            args = args[:k] + args[k + 1:]
        text = "\n".join(lines)


def cost(text: str) -> tuple[int, int]:
    """What the minimizer shrinks: instructions in the entry, then characters."""
    lines = text.split("\n")
    lo, hi = _entry_bounds(lines)
    return len(_insts(lines, lo, hi)), len(text)


def _candidates(text: str, args: list):
    """Smaller variants of (text, args) (each swept of dead code), most promising first."""
    lines = text.split("\n")
    lo, hi = _entry_bounds(lines)
    insts = _insts(lines, lo, hi)
    root = next(i for i, m in insts if m.group("root"))
    # 0. the module header's attributes (entry layout...) and instruction metadata.
    first = lines[0].split(",")[0]
    if first != lines[0]:
        yield "\n".join([first] + lines[1:]), args
    stripped = re.sub(r", metadata=\{[^{}]*\}", "", text)
    if stripped != text:
        yield stripped, args
    # 1. a root tuple without one of its elements.
    rm = _INST.match(lines[root])
    shapes = {m.group("name"): m.group("shape") for _, m in insts}
    elems = [o.strip() for o in rm.group("operands").split(",") if o.strip()]
    if rm.group("opcode") == "tuple" and len(elems) > 1 and all(e in shapes for e in elems):
        for k in range(len(elems)):
            keep = elems[:k] + elems[k + 1:]
            new = lines[:]
            new[root] = (f"  ROOT min_root = ({', '.join(shapes[e] for e in keep)}) tuple({', '.join(keep)})")
            yield _sweep("\n".join(new), args)
    # 2. an earlier instruction as the root.
    for i, m in insts:
        if i == root or m.group("opcode") == "parameter":
            continue
        new = lines[:]
        new[root] = f"  ROOT min_root = {m.group('shape')} copy({m.group('name')})"
        yield _sweep("\n".join(new), args)
    # 3. an instruction replaced by a parameter holding its value (computed by the interpreter).
    for i, m in insts:
        if m.group("root") or m.group("opcode") in ("parameter", "constant") or not m.group("operands").strip():
            continue
        value = _value_of(text, args, m.group("name"), m.group("shape"))
        if value is None:
            continue
        new = lines[:]
        new[i] = f"  {m.group('name')} = {m.group('shape')} parameter({len(args)})"
        yield _sweep("\n".join(new), args + [value])


def _value_of(text: str, args: list, name: str, shape: str):
    import hlofuse

    lines = text.split("\n")
    lo, hi = _entry_bounds(lines)
    root = next(i for i, m in _insts(lines, lo, hi) if m.group("root"))
    lines[root] = f"  ROOT min_probe = {shape} copy({name})"
    try:
        return hlofuse.compile(hlofuse.parse_hlo("\n".join(lines)), target="interpreter")(*args)[0]
    except Exception:  # noqa: BLE001 - a tuple-shaped value or anything else: not a candidate
        return None


def mark_root(text: str) -> str:
    """`text` with its entry's root marked ROOT: without a ROOT line the last instruction is the
    root (as the parser reads it), which the passes below would otherwise take for dead code."""
    lines = text.split("\n")
    lo, hi = _entry_bounds(lines)
    insts = _insts(lines, lo, hi)
    if not insts or any(m.group("root") for _, m in insts):
        return text
    i, m = insts[-1]
    lines[i] = f"{m.group('indent')}ROOT {lines[i].lstrip()}"
    return "\n".join(lines)


def minimize(text: str, args: list, check: Callable[[str, list], bool], rounds: int = 50) -> tuple[str, list]:
    """The smallest (text, args) reached greedily for which `check` stays true."""
    marked = mark_root(text)
    if marked != text:
        if not check(marked, args):  # the parser disagrees about the root: leave it as it is
            return text, args
        text = marked
    text, args = _sweep(text, args)
    for _ in range(rounds):
        for cand_text, cand_args in _candidates(text, args):
            if cost(cand_text) < cost(text) and check(cand_text, cand_args):
                text, args = cand_text, cand_args
                break
        else:
            break
    return text, args


def load_args(text: str, data) -> list:
    """The arrays of an .npz reproducer, typed as the module's parameters (np.savez stores
    bfloat16 and the 8-bit float types as raw void bytes)."""
    import hlofuse
    from hlofuse.runtime.io import parameter_shapes

    shapes = parameter_shapes(hlofuse.parse_hlo(text))
    args = []
    for i, shape in enumerate(shapes):
        a = data[f"arg{i}"]
        if a.dtype.kind == "V":
            a = a.view(shape.dtype.numpy)
        args.append(a)
    return args


def main(argv: list[str] | None = None) -> int:
    """Minimize the reproducer in a directory written by the harness."""
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.minimize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--no-fusion", action="store_true")
    a = p.parse_args(argv)
    d = Path(a.dir)
    text = (d / "case.hlo").read_text()
    data = np.load(d / "case.npz")
    args: list[Any] = load_args(text, data)
    want = classify(text, args, a.backend, not a.no_fusion)
    print(f"original: {want}", file=sys.stderr)
    if want[0] == "ok":
        print("the case does not fail here", file=sys.stderr)
        return 1
    np.seterr(all="ignore")
    small, small_args = minimize(text, args, lambda t, x: classify(t, x, a.backend, not a.no_fusion) == want)
    (d / "min.hlo").write_text(small)
    np.savez(d / "min.npz", **{f"arg{i}": np.asarray(x) for i, x in enumerate(small_args)})
    print(small)
    for i, x in enumerate(small_args):
        print(f"arg{i} = {np.asarray(x).dtype}{list(np.shape(x))} {np.asarray(x).ravel()[:8].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
