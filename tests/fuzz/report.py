"""Tallies of fuzz outcomes, reproducer files, and the summary table."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import outcomes as oc


@dataclass
class Failure:
    """One distinct failure signature: how often it happened and its (shortest) reproducer."""

    fuzzer: str
    outcome: str
    signature: str
    count: int = 0
    message: str = ""
    reproducer: str = ""
    text_len: int = 1 << 60


@dataclass
class Summary:
    """Counts per (fuzzer, outcome), the distinct failures, and notes (denormal counts...)."""

    counts: Counter = field(default_factory=Counter)
    failures: dict[tuple[str, str, str], Failure] = field(default_factory=dict)
    # Per fuzzer, the cases the interpreter does not finish either (not failures) and one reproducer.
    long_running: dict[tuple[str, str, str], Failure] = field(default_factory=dict)
    # Real-GPU mismatches that ptxas -O0 does not make (the assembler's bugs), with reproducers.
    ptxas: dict[tuple[str, str, str], Failure] = field(default_factory=dict)
    expected: Counter = field(default_factory=Counter)  # (fuzzer, expected-error signature) -> count
    denormal: Counter = field(default_factory=Counter)  # denormal-only signatures
    skipped: Counter = field(default_factory=Counter)  # (fuzzer, skipped signature) -> count
    seconds: dict[str, float] = field(default_factory=dict)

    def failure_count(self) -> int:
        """Cases in a failure class (unexpected, crash, hang, mismatch, generator-invalid)."""
        return sum(n for (_, o), n in self.counts.items() if o in oc.FAILURES)

    def table(self) -> str:
        """Counts per outcome class (columns) per fuzzer (rows)."""
        fuzzers = sorted({f for f, _ in self.counts})
        cols = [o for o in oc.ORDER if any(self.counts[(f, o)] for f in fuzzers)] or [oc.OK]
        width = max([len(c) for c in cols] + [8])
        lines = ["fuzzer".ljust(10) + "".join(c.rjust(width + 2) for c in cols) + "  seconds".rjust(10)]
        for f in fuzzers:
            secs = self.seconds.get(f)
            lines.append(f.ljust(10) + "".join(str(self.counts[(f, c)]).rjust(width + 2) for c in cols)
                         + (f"{secs:10.1f}" if secs is not None else ""))
        return "\n".join(lines)

    def render(self) -> str:
        """The table, then each distinct failure with its count and reproducer."""
        out = [self.table(), ""]
        if self.denormal:
            out.append("denormal-only differences from XLA (known, docs/denormals.md: its cbrt, power and atan2 "
                       "approximations, and the LLVM folds it gets on bf16 compares): "
                       f"{sum(self.denormal.values())} in {len(self.denormal)} signatures")
            by_prefix: dict[str, list[str]] = {}
            for sig, n in sorted(self.denormal.items()):
                prefix, _, what = sig.rpartition(": ")
                by_prefix.setdefault(prefix, []).append(what + (f" x{n}" if n > 1 else ""))
            for prefix, whats in by_prefix.items():
                out.append(f"  {prefix}: {', '.join(whats)}")
            out.append("")
        kept_apart = [(f"long-running [{f.fuzzer}] x{f.count} (timed out, and the interpreter does not finish "
                       f"within the timeout either: the program itself runs long, not a failure)", f)
                      for f in self.long_running.values()]
        kept_apart += [(f"ptxas miscompile [{f.fuzzer}] {f.signature}  x{f.count} (right with the kernels "
                        f"assembled by ptxas -O0: the assembler's bug, not hlofuse's; HLOFUSE_PTXAS_LEVEL=0 "
                        f"avoids it)", f) for f in self.ptxas.values()]
        for line, f in kept_apart:
            out.append(line)
            if f.reproducer:
                out.append(f"      reproducer: {f.reproducer}")
            out.append("")
        if self.skipped:
            out.append("skipped: " + "; ".join(f"[{f}] {sig} x{n}" for (f, sig), n in self.skipped.most_common()))
            out.append("")
        # On generated valid modules an HloError is not the user's mistake: list them.
        generated = [(k, n) for k, n in self.expected.most_common() if k[0] != "malformed"]
        if generated:
            out.append("expected-error outcomes on generated (valid) modules:")
            out += [f"  {n:6d}  [{f}] {sig}" for (f, sig), n in generated]
            out.append("")
        fails = sorted(self.failures.values(), key=lambda f: (-f.count, f.signature))
        out.append(f"{len(fails)} distinct failure signatures" + (":" if fails else "."))
        for f in fails:
            out.append(f"  [{f.fuzzer}] {f.outcome}: {f.signature}  x{f.count}")
            if f.message:
                out.append(f"      {f.message.splitlines()[0][:200]}")
            if f.reproducer:
                out.append(f"      reproducer: {f.reproducer}")
        return "\n".join(out)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:90].strip("_") or "case"


def _save_inputs(path: Path, args: list) -> None:
    arrays = {f"arg{i}": np.asarray(a) for i, a in enumerate(args) if not isinstance(a, tuple)}
    np.savez(path, **arrays)


def record(summary: Summary, fuzzer: str, case: dict[str, Any], result: dict[str, Any], out_dir: Path | None,
           inputs_for) -> None:
    """Count `result`; for a failure, remember its signature and keep the shortest reproducer
    (`case.hlo`, `case.npz` from `inputs_for(case)`, and `README.txt` saying what failed)."""
    outcome = result["outcome"]
    summary.counts[(fuzzer, outcome)] += 1
    sig = result.get("signature", "")
    if outcome == oc.EXPECTED:
        summary.expected[(fuzzer, sig)] += 1
    if outcome == oc.SKIPPED:
        summary.skipped[(fuzzer, sig)] += 1
    if outcome == oc.DENORMAL:
        summary.denormal[sig] += 1
    if outcome in oc.FAILURES:
        kept = summary.failures
    elif outcome == oc.PTXAS_MISCOMPILE:
        kept = summary.ptxas
    elif outcome == oc.LONG_RUNNING:  # one reproducer per fuzzer, whatever the signature
        kept = summary.long_running
        sig = ""
    else:
        return
    key = (fuzzer, outcome, sig)
    f = kept.get(key)
    if f is None:
        f = kept[key] = Failure(fuzzer, outcome, sig, message=result.get("message", ""))
    f.count += 1
    text = case["payload"].get("text", "")
    if out_dir is None or len(text) >= f.text_len:
        return
    f.text_len = len(text)
    f.message = result.get("message", "") or f.message
    d = out_dir / fuzzer / _slug(f"{outcome}-{sig}" if sig else outcome)
    d.mkdir(parents=True, exist_ok=True)
    (d / "case.hlo").write_text(text)
    try:
        args = inputs_for(case)
    except Exception:  # noqa: BLE001 - a module we cannot make inputs for still has its text
        args = None
    if args is not None:
        _save_inputs(d / "case.npz", args)
    backend = "cpu"
    m = re.match(r"(edge )?(cpu|gpu-emulated|gpu|interpreter)", sig)
    if m:
        backend = m.group(2)
    if outcome == oc.LONG_RUNNING:
        backend = "interpreter"
    nofusion = " --no-fusion" if "(no fusion)" in sig else ""
    command = (f"hlofuse run {d / 'case.hlo'} --backend {backend}{nofusion}"
               + (f" --inputs {d / 'case.npz'}" if args is not None else "") + " --compare")
    lines = [f"{outcome}: {sig or result.get('signature', '')}", f"case: {case.get('label', '')}", f"message: {f.message.splitlines()[0] if f.message else ''}",
             f"reproduce: {command}"]
    if result.get("history"):
        # A crash can be the late effect of an earlier case in the same process: keep those too.
        h = d / "history"
        h.mkdir(exist_ok=True)
        for k, prev in enumerate(result["history"]):
            payload = prev["payload"].get("case", prev["payload"])  # a reference run: its case's text
            (h / f"{k:03d}-{prev['id']}.hlo").write_text(payload.get("text", ""))
        lines.append(f"history: {len(result['history'])} cases the same worker ran before, oldest first, in history/")
    if result.get("traceback"):
        lines += ["", result["traceback"]]
    (d / "README.txt").write_text("\n".join(lines) + "\n")
    f.reproducer = str(d)
