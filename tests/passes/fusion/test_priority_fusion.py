"""Priority fusion (passes/fusion/priority_fusion.py) and its performance model (perf_model.py).

Correctness: modules fused by priority fusion compute what the interpreter computes on the
unfused module (the emulated GPU backend runs the fusions as they are). Decisions: every fusion
carries the model's estimate; a producer whose recomputation under a broadcast costs more than
the traffic it saves is refused as unprofitable (on the CPU device, where an exp costs 20 simple
operations); the most profitable producer is fused first; the algorithm is selectable
(`fusion-pipeline{algorithm=...}`, `--fusion-algorithm`). Rule 8 (duplicated indexing) is
checked on its counting function against hand counts."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import PriorityFusion, fusion_passes, module_log
from hlofuse.passes.fusion.indexing_evaluation import emitted_copies
from hlofuse.passes.fusion.perf_model import H100, HOST_CPU, Estimate, fusion_estimate, kernel_time
from hlofuse.passes.pipeline import UnknownPassError, parse_pass_list
from hlofuse.runtime.interpreter import evaluate
from repo_paths import REPO

JAX = sorted(glob.glob(os.path.join(str(REPO), "testdata", "jax", "*.hlo")))
# small modules of several kinds (reductions, softmax-like, data movement, control flow)
SAMPLE = [p for p in JAX if os.path.basename(p) in {
    "softmax.hlo", "layer_norm.hlo", "batch_norm_stats.hlo", "box_decode.hlo", "clamp_select_compare.hlo",
    "data_movement.hlo", "cond.hlo", "argmax_argmin.hlo", "cumsum_cumprod.hlo", "convert_types.hlo"}]
EXAMPLES = sorted(glob.glob(os.path.join(str(REPO), "examples", "*.hlo")))


def _inputs(module) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        if np.issubdtype(dt, np.floating) or p.shape.dtype.name.startswith("bf"):
            out.append(rng.standard_normal(p.shape.dims).astype(dt))
        elif dt == np.bool_:
            out.append(rng.integers(0, 2, p.shape.dims).astype(dt))
        else:
            out.append(rng.integers(0, 4, p.shape.dims).astype(dt))
    return out


@pytest.mark.parametrize("path", EXAMPLES + SAMPLE, ids=os.path.basename)
def test_priority_fused_module_computes_what_the_interpreter_computes(path):
    """gpu-emulated with priority fusion (the GPU default) == the interpreter on the input."""
    module = hlofuse.load(path)
    args = _inputs(module)
    want = hlofuse.compile(module, target="interpreter", fusion=False)(*args)
    exe = hlofuse.compile(module, target="gpu-emulated", algorithm="priority")
    assert "priority-fusion" in exe.fused_module.fusion_log.passes_run
    got = exe(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-4, atol=1e-5)


CHAIN = """HloModule chain
ENTRY e {
  x = f32[1024,256] parameter(0)
  y = f32[1024,256] parameter(1)
  a = f32[1024,256] add(x, y)
  m = f32[1024,256] multiply(a, a)
  n = f32[1024,256] negate(m)
  s = f32[4] parameter(2)
  t = f32[4] add(s, s)
  u = f32[4] multiply(t, t)
  ROOT r = (f32[1024,256], f32[4]) tuple(n, u)
}
"""


def _fuse(text: str, target: str = "gpu"):
    module = parse_hlo(text)
    changed = PriorityFusion(target).run(module)
    return module, [e for e in module_log(module).entries if e.pass_name == "priority-fusion"], changed


def test_every_fusion_carries_the_estimate_and_the_big_chain_goes_first():
    """Fused entries say what the model estimates; the 1 MB chain's fusions (more traffic
    saved) come before the 16-byte chain's, whatever the instruction order."""
    module, entries, changed = _fuse(CHAIN)
    assert changed
    fused = [e for e in entries if e.action == "fused"]
    assert fused and all(e.rule.startswith("fusing saves ") for e in fused)
    order = [e.producer for e in fused]
    # a (or m) first, the chain of n next (its producer is then the fusion), t and u last
    assert order[0] in ("a", "m") and order.index("t") >= 2, order
    kernels = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert len(kernels) == 2
    x, y, s = _inputs(module)
    want = evaluate(parse_hlo(CHAIN), [x, y, s])
    got = evaluate(module, [x, y, s])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


BROADCAST_EXP = """HloModule bexp
ENTRY e {
  x = f32[1000] parameter(0)
  y = f32[1000,4096] parameter(1)
  ex = f32[1000] exponential(x)
  b = f32[1000,4096] broadcast(ex), dimensions={0}
  ROOT r = f32[1000,4096] add(b, y)
}
"""


def test_recomputing_an_expensive_producer_under_a_broadcast_is_refused_on_the_cpu():
    """On the CPU device, exp recomputed 4096 times per element costs more than the 8 KB it
    saves: refused as unprofitable with the estimate; the broadcast itself is fused."""
    module, entries, _ = _fuse(BROADCAST_EXP, "cpu")
    refused = [e for e in entries if e.action == "refused" and e.producer == "ex"]
    assert refused and refused[-1].rule == "unprofitable", [e.to_text() for e in entries]
    assert "duplicating costs" in refused[-1].reason and "fusing costs" in refused[-1].reason
    assert any(e.action == "fused" and e.producer == "b" for e in entries)
    # on the H100 the same fusion pays (exp at a quarter rate over 4M elements < a launch)
    _, gpu_entries, _ = _fuse(BROADCAST_EXP, "gpu")
    assert any(e.action == "fused" and e.producer == "ex" for e in gpu_entries)


def test_estimate_text_and_kernel_time():
    """The model's arithmetic: time grows with bytes and work; the sentence names both costs."""
    assert kernel_time(2e6, 0, 0, H100) > kernel_time(1e6, 0, 0, H100) > H100.launch_overhead
    assert kernel_time(0, 0, 1e9, HOST_CPU) > kernel_time(0, 0, 1e6, HOST_CPU)
    e = Estimate(time_unfused=3e-6, time_fused=1.1e-6, bytes_saved=12_000_000, launches_saved=1,
                 duplication_cost=2e-7)
    assert e.text == "fusing saves 1.9 us: 12.0 MB less traffic, 1 launch; duplicating costs 0.2 us"
    module = parse_hlo(CHAIN)
    a = next(i for i in module.entry.instructions if i.name == "a")
    est = fusion_estimate(a, list(a.users), H100)
    # unfused: a writes 1 MB and m reads it back; fused, neither
    assert est.bytes_saved == 2 * 1024 * 256 * 4 and est.launches_saved == 1 and est.saving > 0


def test_algorithm_is_selectable():
    """The GPU default is priority fusion; legacy keeps instruction fusion and the merger;
    the pipeline spec takes the algorithm and refuses an unknown one."""
    names = lambda ps: [p.name for p in ps]  # noqa: E731
    assert "priority-fusion" in names(fusion_passes("gpu"))
    assert "fusion-merger" in names(fusion_passes("gpu", "legacy"))
    assert "priority-fusion" not in names(fusion_passes("cpu"))
    assert "horizontal-input-fusion" in names(fusion_passes("gpu", "legacy"))
    assert "fusion-merger" in names(parse_pass_list("fusion-pipeline{algorithm=legacy}"))
    with pytest.raises(UnknownPassError, match="algorithm"):
        parse_pass_list("fusion-pipeline{algorithm=greedy}")


def test_cli_report_and_explain_show_the_estimate(tmp_path, capsys):
    """`compile --target gpu --emit report` lists priority decisions with estimates (not with
    --fusion-algorithm legacy); `explain` gives the estimate with the fused edge."""
    from hlofuse.cli import main

    path = tmp_path / "chain.hlo"
    path.write_text(CHAIN)
    assert main(["compile", str(path), "--target", "gpu", "--emit", "report"]) == 0
    out = capsys.readouterr().out
    assert "Priority fusion decisions" in out and "fusing saves" in out
    assert main(["compile", str(path), "--target", "gpu", "--emit", "report", "--fusion-algorithm", "legacy"]) == 0
    assert "Priority fusion decisions" not in capsys.readouterr().out
    assert main(["explain", str(path), "a", "m", "--target", "gpu"]) == 0
    assert "fusing saves" in capsys.readouterr().out


def _slice_pairs(levels: int) -> str:
    """A fusion whose root is `levels` rounds of add(slice even, slice odd) of its parameter."""
    n = 2 ** levels * 4
    lines, cur = [f"  p = f32[{n}] parameter(0)"], "p"
    for k in range(levels):
        n //= 2
        lines += [f"  e{k} = f32[{n}] slice({cur}), slice={{[0:{2 * n - 1}:2]}}",
                  f"  o{k} = f32[{n}] slice({cur}), slice={{[1:{2 * n}:2]}}",
                  f"  a{k} = f32[{n}] add(e{k}, o{k})"]
        cur = f"a{k}"
    lines[-1] = "  ROOT" + lines[-1][1:]
    body = "\n".join(lines)
    return (f"HloModule s\nf {{\n{body}\n}}\nENTRY e {{\n  x = f32[{2 ** levels * 4}] parameter(0)\n"
            f"  y = f32[{2 ** levels * 4}] negate(x)\n  ROOT r = f32[{n}] fusion(y), kind=kLoop, calls=f\n}}\n")


@pytest.mark.parametrize("levels", [1, 3, 4, 5])
def test_duplicated_indexing_counts_two_per_slice_pair(levels):
    """Each round of two slices doubles the indices the parameter is read at (rule 8's count)."""
    module = parse_hlo(_slice_pairs(levels))
    r = module.entry.root
    assert emitted_copies(r, r.operands[0]) == 2 ** levels


def test_remembered_kernel_facts_follow_every_fusion_step():
    """Priority fusion remembers each kernel's work, traffic and indexing analysis per revision
    of its fused computation (perf_model.KernelFacts, FusionContext.indexing): after every
    producer fused into a fusion, the remembered answers equal freshly computed ones."""
    from hlofuse.passes.fusion.fusion_utils import create_fusion, fuse_producer
    from hlofuse.passes.fusion.perf_model import KernelFacts, kernel_traffic, work

    module = parse_hlo(_slice_pairs(3))
    root = module.entry.root
    facts, memo = KernelFacts(H100), {}
    # a chain growing into one fusion a producer at a time (a broadcast in it: work grows by more
    # than the producer), beside the slice-pair fusion above, which never changes
    text = """HloModule c
ENTRY e {
  x = f32[64] parameter(0)
  b = f32[8] parameter(1)
  a0 = f32[64] negate(x)
  a1 = f32[64] exponential(a0)
  bb = f32[8,64] broadcast(a1), dimensions={1}
  s = f32[8,64] broadcast(b), dimensions={0}
  a2 = f32[8,64] multiply(bb, s)
  ROOT a3 = f32[8,64] tanh(a2)
}
"""
    module = parse_hlo(text)
    comp = module.entry
    fusion = create_fusion(comp.root, "kLoop")
    seen_work = set()
    while True:
        for inst in [fusion, root]:
            assert facts.work(inst) == work(inst, H100)
            assert facts.traffic(inst) == kernel_traffic(inst)
            for op in set(inst.operands):
                assert emitted_copies(inst, op, memo) == emitted_copies(inst, op)
        seen_work.add(facts.work(fusion))
        producer = next((o for o in fusion.operands if o.opcode != "parameter"), None)
        if producer is None:
            break
        fuse_producer(fusion, producer)
    # the facts changed as the fusion grew (the memo was not just returning its first answer)
    assert len(seen_work) == 6  # the tanh alone, then with a2, bb, s, a1 and a0 fused in
