"""Run every HLO file of a directory through hlofuse's command line and sort the outcomes: a
corpus sweep (XLA's own test modules, a model zoo's dumps, a user's bug reports).

    python scripts/hlo_sweep.py DIR [--out results.json] [--jobs 2] [--timeout 180]

Each module runs as `hlofuse run FILE --no-cache` four ways, a process each (a crash is an
outcome, not the end of the sweep): the CPU against the interpreter, the CPU without fusion,
the emulated GPU against the interpreter, and the interpreter against XLA:CPU (`--compare xla`,
needs the jax extra). The exit status says what happened (0 agreed, 1 a mismatch, 2 the
module was refused with a message, 3 a bug in hlofuse, negative a signal); where the CPU run
refuses a module, XLA's own parser is asked whether it reads it, which tells a gap in hlofuse
(XLA reads it) from a malformed or XLA-internal module. The table at the end counts each way's
outcomes and lists every module that did not agree everywhere, with hlofuse's message
(or its first mismatch); the JSON keeps every run's last lines. A rerun with the same --out skips the modules
already recorded as agreeing everywhere and runs the rest again.

How XLA's test modules were swept (docs/parser.md, "XLA's own test modules"): their HLO texts
were taken from openxla/xla's xla/tests and xla/service/cpu test sources into a directory
outside the repository (they are XLA's, not hlofuse's), then swept with this script.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import glob
import json
import os
import subprocess
import sys

RUNS = {
    "cpu": ["--backend", "cpu", "--compare"],
    "cpu-nofusion": ["--backend", "cpu", "--no-fusion", "--compare"],
    "gpu-emulated": ["--backend", "gpu-emulated", "--compare"],
    "interpreter-vs-xla": ["--backend", "interpreter", "--compare", "xla"],
}
_XLA_PARSES = """import sys
from jax._src.lib import xla_client
xla_client.hlo.hlo_module_from_text(sys.stdin.read())
"""


def xla_parses(text: str, timeout: float) -> bool | None:
    """Whether XLA's HLO parser reads `text` (None: JAX is not installed or the parse hung)."""
    try:
        done = subprocess.run([sys.executable, "-c", _XLA_PARSES], input=text, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if "No module named 'jax'" in done.stderr:
        return None
    return done.returncode == 0


def sweep_one(path: str, timeout: float) -> dict:
    """The four runs of one module: exit status and last lines of each (module docstring)."""
    hlofuse = [sys.executable, "-m", "hlofuse.cli", "run", path, "--no-cache"]
    result: dict = {"file": os.path.basename(path), "runs": {}}
    for name, flags in RUNS.items():
        try:
            done = subprocess.run(hlofuse + flags, capture_output=True, text=True, timeout=timeout)
            status, tail = done.returncode, (done.stdout + done.stderr).strip().splitlines()[-6:]
        except subprocess.TimeoutExpired:
            status, tail = "timeout", []
        result["runs"][name] = {"status": status, "tail": tail if status != 0 else []}
        if name == "cpu" and status == 2:  # refused: is it a gap (XLA reads it) or the module's fault?
            with open(path, encoding="utf-8") as f:
                result["xla_parses"] = xla_parses(f.read(), timeout)
            break
    return result


def agreed(result: dict) -> bool:
    """Whether every run of a module agreed (exit status 0)."""
    return all(run["status"] == 0 for run in result["runs"].values()) and len(result["runs"]) == len(RUNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--out", default="hlo_sweep.json")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    args = ap.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.directory, "*.hlo")))
    done: dict[str, dict] = {}
    if os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as f:
            done = {r["file"]: r for r in json.load(f) if agreed(r)}
    todo = [f for f in files if os.path.basename(f) not in done]
    print(f"{len(files)} modules, {len(todo)} to run", flush=True)
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        for result in pool.map(lambda p: sweep_one(p, args.timeout), todo):
            done[result["file"]] = result
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(list(done.values()), f, indent=1)
    results = sorted(done.values(), key=lambda r: r["file"])
    print(f"\n{sum(agreed(r) for r in results)} of {len(results)} modules agreed in every run")
    for name in RUNS:
        counts: dict[str, int] = {}
        for r in results:
            if name in r["runs"]:
                key = str(r["runs"][name]["status"])
                counts[key] = counts.get(key, 0) + 1
        print(f"  {name:20s} " + ", ".join(f"exit {k}: {v}" for k, v in sorted(counts.items())))
    for r in results:
        if agreed(r):
            continue
        bad = {k: v["status"] for k, v in r["runs"].items() if v["status"] != 0}
        tails = [line for v in r["runs"].values() for line in v["tail"]]
        last = next((line for line in tails if line.startswith("hlofuse:") or "MISMATCH" in line), tails[-1] if tails else "")
        parses = f" (XLA's parser reads it: {r['xla_parses']})" if "xla_parses" in r else ""
        print(f"{r['file']}: {bad}{parses}\n    {last[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
