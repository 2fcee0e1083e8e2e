"""The short, deterministic run of hlofuse's fuzzing harness (tests/fuzz/): 200 mutated modules
through load -> verify -> compile(cpu) -> run, 20 random valid graphs on every backend, and a
handful of elementwise ops on edge inputs against XLA:CPU. Each fuzzer must end with no
unexpected exception, crash, hang or mismatch; the failure message is the harness's summary
with a reproducer directory per distinct failure.

The long run is one command (see tests/fuzz/__init__.py):
    python -m tests.fuzz --malformed 10000 --graphs 1000 --edge-cases --seed 1 --jobs 2 --out DIR
"""
from __future__ import annotations

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
    config = FuzzConfig(malformed=200, graphs=20, edge_cases=xla_available(), edge_opcodes=EDGE_OPS,
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


def test_edge_values_agree_with_xla(campaign):
    """Interpreter and cpu match XLA:CPU on NaN, ±inf, ±0, extremes and overflow (denormal-only
    differences, XLA's FTZ/DAZ, are counted apart)."""
    if not xla_available():
        pytest.skip("jaxlib's XLA CPU client is not usable here")
    _check(campaign, "edge", 20)


def test_pool_survives_crashes_and_hangs():
    """A case that kills its worker is a CRASH with the signal's name, one that never answers a
    HANG; the pool replaces the worker and the next cases still run."""
    from fuzz.pool import run_cases

    kinds = ["selftest-crash", "ping", "selftest-hang", "ping"]
    cases = [{"id": str(i), "payload": {"kind": k}} for i, k in enumerate(kinds)]
    got = {}
    run_cases(cases, jobs=1, timeout=5.0, on_result=lambda c, r: got.__setitem__(c["id"], r))
    assert got["0"]["outcome"] == oc.CRASH and "SIGSEGV" in got["0"]["signature"]
    assert got["1"] == "pong" and got["3"] == "pong"
    assert got["2"]["outcome"] == oc.HANG
    assert "worker.py" in got["2"]["traceback"]  # faulthandler's stack of the hung case
