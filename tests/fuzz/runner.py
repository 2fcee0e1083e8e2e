"""The fuzz campaign: generate cases for each fuzzer, run them on the worker pool, tally them."""
from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from . import outcomes as oc
from .mutate import BYTE_MUTATORS, TOKEN_MUTATORS
from .pool import run_cases
from .report import Summary, record
from .semantic import SEMANTIC_MUTATORS

FAMILIES = {"byte": BYTE_MUTATORS, "token": TOKEN_MUTATORS, "semantic": SEMANTIC_MUTATORS}


@dataclass
class FuzzConfig:
    """What to run: case counts, the seed, workers, the per-case timeout, where reproducers go."""

    malformed: int = 0
    graphs: int = 0
    large_graphs: int = 0
    edge_cases: bool = False
    edge_opcodes: list[str] | None = None  # None: every elementwise opcode of the registry
    edge_dtypes: list[str] | None = None  # None: edge.DTYPES
    edge_backends: tuple[str, ...] = ("interpreter", "cpu", "gpu-emulated")
    seed: int = 0
    jobs: int = 2
    timeout: float = 20.0
    out: Path | None = None
    progress: bool = False


def _case_seed(seed: int, i: int) -> int:
    return (seed * 1_000_003 + i) & 0x7FFFFFFF


def malformed_cases(n: int, seed: int) -> Iterator[dict[str, Any]]:
    """`n` mutated seed modules: one to three byte, token or semantic mutations each."""
    from .seeds import load_seeds

    seeds = load_seeds()
    for i in range(n):
        s = _case_seed(seed, i)
        rng = random.Random(s)
        label, text = rng.choice(seeds)
        family = rng.choice(list(FAMILIES))
        names = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            name = rng.choice(list(FAMILIES[family]))
            text = FAMILIES[family][name](text, rng)
            names.append(name)
        yield {"id": f"malformed-{i}", "label": f"{'+'.join(names)} of {label} (case seed {s})",
               "payload": {"kind": "malformed", "text": text, "seed": s}}


def graph_cases(n: int, seed: int, large: bool = False) -> Iterator[dict[str, Any]]:
    """`n` random valid graphs (`large`: of arrays up to graphs.LARGE_ELEMENTS elements)."""
    from .graphs import random_graph

    kind = "large-graph" if large else "graph"
    for i in range(n):
        s = _case_seed(seed + (7919 if large else 0), i)
        yield {"id": f"{kind}-{i}", "label": f"random {'large ' if large else ''}graph (case seed {s})",
               "payload": {"kind": "graph", "text": random_graph(s, large=large), "seed": s}}


def edge_case_list(config: FuzzConfig) -> tuple[list[dict[str, Any]], int]:
    """The edge-case modules and how many opcode/type pairs hlofuse's verifier rejects."""
    from .edge import edge_cases

    cases, rejected = edge_cases(config.edge_opcodes, config.edge_dtypes, config.seed)
    out = [{"id": f"edge-{k}", "label": c.label,
            "payload": {"kind": "edge", "text": c.text, "args": c.args, "outputs": c.outputs,
                        "backends": list(config.edge_backends)}} for k, c in enumerate(cases)]
    return out, rejected


def _inputs_for(case: dict[str, Any]):
    payload = case["payload"]
    if payload["kind"] == "edge":
        return payload["args"]
    import hlofuse
    from hlofuse.runtime.io import parameter_shapes

    from .cases import EDGE_FRACTION
    from .values import make_inputs

    module = hlofuse.parse_hlo(payload["text"])
    return make_inputs(parameter_shapes(module), payload["seed"], EDGE_FRACTION[payload["kind"]])


def run(config: FuzzConfig) -> Summary:
    """Run the configured fuzzers; return their tally (reproducers written under config.out)."""
    summary = Summary()
    phases = []
    if config.malformed:
        phases.append(("malformed", lambda: malformed_cases(config.malformed, config.seed)))
    if config.graphs:
        phases.append(("graphs", lambda: graph_cases(config.graphs, config.seed)))
    if config.large_graphs:
        phases.append(("large graphs", lambda: graph_cases(config.large_graphs, config.seed, large=True)))
    if config.edge_cases:
        def edge():
            cases, rejected = edge_case_list(config)
            summary.counts[("edge", "type-not-accepted")] += 0  # keeps the row visible
            summary.seconds["edge-rejected"] = float(rejected)
            return iter(cases)
        phases.append(("edge", edge))
    for fuzzer, make in phases:
        start = time.monotonic()
        done = [0]

        def on_result(case, result, fuzzer=fuzzer):
            results = result if isinstance(result, list) else [result]
            for r in results:
                record(summary, fuzzer, case, r, config.out, _inputs_for)
            done[0] += 1
            if config.progress and done[0] % 100 == 0:
                print(f"  {fuzzer}: {done[0]} cases, {time.monotonic() - start:.0f} s, "
                      f"{sum(n for (f, o), n in summary.counts.items() if f == fuzzer and o in oc.FAILURES)} failures",
                      file=sys.stderr, flush=True)

        run_cases(make(), config.jobs, config.timeout, on_result)
        summary.seconds[fuzzer] = time.monotonic() - start
    return summary
