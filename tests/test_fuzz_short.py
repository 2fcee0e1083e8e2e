"""The short, deterministic run of hlofuse's fuzzing harness (tests/fuzz/): 200 mutated modules
through load -> verify -> compile(cpu) -> run, 20 random valid graphs and 8 of large arrays on
every backend, and a handful of elementwise ops on edge inputs against XLA:CPU. Each fuzzer must end with no
unexpected exception, crash, hang or mismatch; the failure message is the harness's summary
with a reproducer directory per distinct failure.

The long run is one command (see tests/fuzz/__init__.py):
    python -m tests.fuzz --malformed 10000 --graphs 1000 --edge-cases --seed 1 --jobs 2 --out DIR
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from fuzz import outcomes as oc
from fuzz.runner import FuzzConfig, run
from xla_oracle import xla_available

SEED = 20240601
EDGE_OPS = ["add", "divide", "remainder", "exponential", "convert", "compare", "maximum"]
EDGE_DTYPES = ["f32", "f16", "bf16", "s32", "u8", "pred"]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """One fuzz run shared by the tests below (its reproducers under a pytest temporary dir)."""
    config = FuzzConfig(malformed=200, graphs=20, large_graphs=8, edge_cases=xla_available(), edge_opcodes=EDGE_OPS,
                        edge_dtypes=EDGE_DTYPES, seed=SEED, jobs=2, timeout=30.0,
                        out=tmp_path_factory.mktemp("fuzz-failures"))
    return run(config)


def _check(summary, fuzzer: str, minimum_cases: int) -> None:
    total = sum(n for (f, _), n in summary.counts.items() if f == fuzzer)
    assert total >= minimum_cases, f"{fuzzer}: only {total} results\n{summary.render()}"
    bad = {o: summary.counts[(fuzzer, o)] for o in oc.FAILURES if summary.counts[(fuzzer, o)]}
    assert not bad, f"{fuzzer}: {bad}\n{summary.render()}"


def test_malformed_inputs_fail_cleanly(campaign):
    """Every mutant parses, verifies, compiles and runs, or raises an HloError with a message."""
    _check(campaign, "malformed", 200)


def test_random_graphs_agree_on_every_backend(campaign):
    """cpu, cpu without fusion and gpu-emulated match the interpreter on random valid graphs."""
    _check(campaign, "graphs", 20)
    assert campaign.counts[("graphs", oc.OK)] >= 15, campaign.render()  # the generator makes runnable graphs


def test_large_graphs_agree_on_every_backend(campaign):
    """The same on graphs of arrays up to graphs.LARGE_ELEMENTS elements (the kernels' many-row
    paths: tiles, splits, windowed sums; their first 400 found an empty f16 reduce that crashed
    planning)."""
    _check(campaign, "large graphs", 8)


def test_large_graphs_stay_within_the_inputs_budget():
    """Large graphs' parameters stay within LARGE_ELEMENTS elements and some of their arrays are
    longer than a window of 32 rows."""
    import re

    from fuzz.graphs import LARGE_ELEMENTS, random_graph

    long_dims = 0
    for seed in range(40):
        text = random_graph(seed, large=True)
        for dims in re.findall(r"\[([\d,]*)\] parameter", text):
            sizes = [int(d) for d in dims.split(",") if d]
            assert math.prod(sizes) <= LARGE_ELEMENTS, (seed, sizes)
            long_dims += any(d > 32 for d in sizes)
    assert long_dims >= 20


def test_edge_values_agree_with_xla(campaign):
    """Interpreter and cpu match XLA:CPU on NaN, ±inf, ±0, extremes and overflow (denormal-only
    differences, XLA's FTZ/DAZ, are counted apart)."""
    if not xla_available():
        pytest.skip("jaxlib's XLA CPU client is not usable here")
    _check(campaign, "edge", 20)


def test_pool_survives_crashes_and_hangs():
    """A case that kills its worker is a CRASH with the signal's name, one that never answers a
    HANG, one whose harness code raises an unexpected exception; the pool replaces a dead worker
    and the next cases still run."""
    from fuzz.pool import run_cases

    kinds = ["selftest-crash", "ping", "selftest-hang", "ping", "selftest-unknown", "ping"]
    cases = [{"id": str(i), "payload": {"kind": k}} for i, k in enumerate(kinds)]
    got = {}
    run_cases(cases, jobs=1, timeout=5.0, on_result=lambda c, r: got.__setitem__(c["id"], r))
    assert got["0"]["outcome"] == oc.CRASH and "SIGSEGV" in got["0"]["signature"]
    assert got["1"] == got["3"] == got["5"] == "pong"
    # An exception of the harness itself (here: a case kind it does not know) is reported with
    # its traceback, and the worker lives on.
    assert got["4"]["outcome"] == oc.UNEXPECTED and got["4"]["signature"].startswith("harness: ValueError"), got["4"]
    assert "unknown case kind" in got["4"]["message"] and "Traceback" in got["4"]["traceback"]
    assert got["2"]["outcome"] == oc.HANG
    assert "worker.py" in got["2"]["traceback"]  # faulthandler's stack of the hung case


# A while loop whose counter decrements from 0 while the condition is `i < 4`: it ends only when
# the s32 counter wraps, after 2^31 iterations, on every backend (the interpreter included).
LOOPS_FOR_EVER = """HloModule loops_for_ever

cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  i1 = s32[] subtract(i, one)
  v = f32[8] get-tuple-element(p), index=1
  n = f32[8] negate(v)
  ROOT t = (s32[], f32[8]) tuple(i1, n)
}

ENTRY main {
  x = f32[8] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[8]) tuple(z, x)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
"""


def test_timeout_the_interpreter_cannot_beat_is_long_running(tmp_path):
    """A case that times out and on which the interpreter alone, in a fresh worker, does not
    finish within the timeout either is LONG_RUNNING (counted apart, one reproducer, not a
    failure); one that hangs only in the compiled path (the self-test hang: its reference run
    answers at once) stays a HANG. The pool goes on with the next case either way. Both case
    kinds (a malformed module and a random graph) run in the same pool, side by side."""
    from fuzz.pool import run_cases
    from fuzz.report import Summary, record
    from fuzz.runner import _inputs_for

    kinds = ("malformed", "graph")
    cases = [{"id": f"loop-{kind}", "label": "decrementing loop",
              "payload": {"kind": kind, "text": LOOPS_FOR_EVER, "seed": 1}} for kind in kinds]
    cases += [{"id": "hang", "label": "compiled-path hang", "payload": {"kind": "selftest-hang"}},
              {"id": "ping", "payload": {"kind": "ping"}}]
    got = {}
    run_cases(cases, jobs=2, timeout=4.0, on_result=lambda c, r: got.__setitem__(c["id"], (c, r)))
    hang = got["hang"][1]
    assert hang["outcome"] == oc.HANG and "the interpreter alone finishes" in hang["message"], hang
    assert got["ping"][1] == "pong"
    for kind in kinds:
        loop_case, loop = got[f"loop-{kind}"]
        assert loop["outcome"] == oc.LONG_RUNNING, loop
        assert "while" in loop["traceback"] and "interpreter" in loop["traceback"]  # both stacks kept

        summary = Summary()
        for c, r in ((loop_case, loop), got["hang"]):
            record(summary, "malformed", c, r, tmp_path / kind,
                   lambda case: _inputs_for(case) if case is loop_case else None)
        assert summary.counts[("malformed", oc.LONG_RUNNING)] == 1
        assert summary.failure_count() == 1  # the hang, not the long-running loop
        (lr,) = summary.long_running.values()
        assert (Path(lr.reproducer) / "case.hlo").read_text() == LOOPS_FOR_EVER
        assert "--backend interpreter" in (Path(lr.reproducer) / "README.txt").read_text()
        assert "long-running [malformed] x1" in summary.render() and lr.reproducer in summary.render()


def test_minimizer_reads_a_module_without_root_as_the_parser_does():
    """A mutant may have no ROOT line (the parser takes the entry's last instruction for the
    root); the minimizer marks that root instead of failing (it raised StopIteration) or
    sweeping it away as dead code, and still shrinks the module."""
    import numpy as np

    import hlofuse
    from fuzz.minimize import cost, minimize

    text = ("HloModule no_root\n\nENTRY main {\n  x = f32[16] parameter(0)\n  y = f32[16] parameter(1)\n"
            "  a = f32[16] abs(x)\n  n = f32[16] negate(a)\n  m = f32[16] multiply(x, y)\n"
            "  t = (f32[16], f32[16]) tuple(n, m)\n}\n")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(16).astype(np.float32) for _ in range(2)]

    def still_negates(t: str, x: list) -> bool:
        """The property kept: some output is an f32[16] with no positive element (negate of abs)."""
        try:
            outs = hlofuse.compile(hlofuse.parse_hlo(t), target="interpreter")(*x)
        except hlofuse.HloError:
            return False
        return any(np.asarray(o).shape == (16,) and bool(np.all(np.asarray(o) <= 0)) for o in outs)

    assert still_negates(text, args)
    small, small_args = minimize(text, args, still_negates)
    assert still_negates(small, small_args)
    assert small.count("ROOT") == 1 and "multiply" not in small, small
    assert cost(small) < cost(text)
