"""A third opinion where hlofuse and XLA:CPU disagree: the same JAX program run in f64.

Two f32 programs that sum in different orders can both be right and still differ by more than
any fixed tolerance where the result cancels (an Adam update is m / (sqrt(v) + eps): on a weight
whose gradient sums to nearly zero, a last-bit difference in the gradient is a large relative
difference in the update). Which side is wrong is then a question for a more precise run, not
for the two f32 runs: `f64_outputs` runs the model's function again under `jax.enable_x64` with
every f32 input widened to f64 (what the program computes, nearly exactly), and `judge` says,
for each output that differs from XLA's, whether hlofuse's result is as close to that f64 run
as XLA's own result is (its largest and its mean error each at most SLACK times XLA's).

Used by benchmarks/real_models.py: its `match` column says `f64` for a model whose differences
from XLA:CPU are of that kind, `NO` for one where hlofuse is farther from the f64 run (or where
no f64 run was possible: a program that fixes its own dtypes to f32 is no more precise in x64).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# How much larger than XLA:CPU's own error (largest and mean absolute error against the f64 run)
# hlofuse's may be and still count as XLA's precision: the same order, not a tie to the bit.
SLACK = 1.25


@dataclass
class Verdict:
    """One output compared with the f64 run: the largest and mean absolute errors of hlofuse's
    and of XLA's result against it, and whether hlofuse's are within SLACK of XLA's."""

    index: int
    ours_max: float
    ours_mean: float
    xla_max: float
    xla_mean: float
    ok: bool

    def line(self) -> str:
        """The verdict as one line of the benchmark's report."""
        word = "within" if self.ok else "OUTSIDE"
        return (f"out{self.index}: against the f64 run hlofuse max {self.ours_max:.3g} mean {self.ours_mean:.3g}, "
                f"XLA:CPU max {self.xla_max:.3g} mean {self.xla_mean:.3g} ({word} {SLACK}x XLA's error)")


def f64_outputs(fn, args: list) -> list[np.ndarray] | None:
    """The leaves of `fn(*args)` computed by JAX with x64 enabled and every f32 argument leaf
    widened to f64, as numpy arrays; None where that run fails or where no output became f64
    (the program fixes its dtypes, so the run is no more precise than the f32 one)."""
    import jax

    def widen(a):
        a = np.asarray(a)
        return a.astype(np.float64) if a.dtype == np.float32 else a

    try:
        with jax.enable_x64(True):
            wide = jax.tree_util.tree_map(widen, args)
            leaves = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(*wide))]
    except Exception:  # noqa: BLE001 - a program that does not run in x64 just has no third opinion
        return None
    if not any(o.dtype == np.float64 for o in leaves):
        return None
    return leaves


def judge(ours: list, xla: list, precise: list, indices: list[int]) -> list[Verdict] | None:
    """Verdicts for the outputs `indices` (those that differ from XLA's) of hlofuse's outputs
    `ours` and XLA's `xla` against `precise` (`f64_outputs`); None where the outputs do not line
    up (count, shape) or an output to judge was not computed in f64."""
    if not (len(ours) == len(xla) == len(precise)):
        return None
    verdicts = []
    for k in indices:
        o, x, p = (np.asarray(a) for a in (ours[k], xla[k], precise[k]))
        if o.shape != p.shape or x.shape != p.shape or p.dtype != np.float64:
            return None
        with np.errstate(invalid="ignore", over="ignore"):
            eo = np.abs(o.astype(np.float64) - p)
            ex = np.abs(x.astype(np.float64) - p)
        # NaN against NaN is agreement; NaN where the f64 run has a number (or the reverse) is
        # an infinite error
        eo = np.where(np.isnan(o) & np.isnan(p), 0.0, np.where(np.isnan(eo), np.inf, eo))
        ex = np.where(np.isnan(x) & np.isnan(p), 0.0, np.where(np.isnan(ex), np.inf, ex))
        om, oa = (float(eo.max()), float(eo.mean())) if eo.size else (0.0, 0.0)
        xm, xa = (float(ex.max()), float(ex.mean())) if ex.size else (0.0, 0.0)
        ok = bool(om <= SLACK * xm and oa <= SLACK * xa)
        verdicts.append(Verdict(k, om, oa, xm, xa, ok))
    return verdicts
