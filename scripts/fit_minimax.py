"""Fit the minimax polynomials and rationals that hlofuse/emitters/math_approx.py evaluates.

Run:  python scripts/fit_minimax.py            (prints every fit below, coefficients highest first)

A fit minimises the maximum RELATIVE error of P(t)/Q(t) (Q(0) = 1; a polynomial when Q has
degree 0) over points clustered at the ends of [a, b], by Loeb's linearisation (each step a
least-squares solve of P - f*Q weighted by 1/(f*Q_previous)) with Lawson's multiplicative
weights, which drive the weighted least-squares solution to the minimax one. The basis is
(t/b)**k so that the solves stay well conditioned; the coefficients are then rescaled to t.

The printed error is the f64 fit's; with the coefficients rounded to f32 (as math_approx
keeps them) the measured ULP errors are in tests/emitters/test_cpu_math.py.
"""
from __future__ import annotations

import math

import numpy as np


def fit(f, a: float, b: float, m: int, n: int = 0, points: int = 6000, steps: int = 300):
    """Relative-error minimax P/Q of degrees (m, n) for f on [a, b] (b > 0, |a| <= b).

    Returns (p, q, max relative error), p and q lowest degree first, q[0] = 1."""
    k = np.arange(points)
    t = np.concatenate([[a, b], (a + b) / 2 - (b - a) / 2 * np.cos(np.pi * (k + 0.5) / points)])
    y = f(t)
    s = t / b
    basis = np.vander(s, max(m, n) + 1, increasing=True)
    pm, qm = basis[:, :m + 1], basis[:, 1:n + 1]
    q_prev = np.ones_like(t)
    w = np.full(t.size, 1.0 / t.size)
    best = (math.inf, None, None)
    for _ in range(steps):
        scale = np.sqrt(w) / np.abs(y * q_prev)
        sol = np.linalg.lstsq(np.hstack([pm, -y[:, None] * qm]) * scale[:, None], y * scale, rcond=None)[0]
        p, q = sol[:m + 1], np.concatenate([[1.0], sol[m + 1:]])
        qv = np.polynomial.polynomial.polyval(s, q)
        err = np.abs(np.polynomial.polynomial.polyval(s, p) / qv / y - 1)
        if err.max() < best[0] and np.all(qv > 0):
            best = (float(err.max()), p, q)
        q_prev = qv
        w = w * err
        w /= w.sum()
    e, p, q = best
    return p / b ** np.arange(m + 1), q / b ** np.arange(n + 1), e


def _show(name: str, p, q, e: float) -> None:
    print(f"{name}: max relative error {e:.3g}")
    print("  P =", [float(np.float32(c)) for c in p[::-1]])
    if len(q) > 1:
        print("  Q =", [float(np.float32(c)) for c in q[::-1]])


def main() -> None:
    """Print the fits math_approx uses."""
    # tanh_f32: tanh(x) = x + x*z*P(z), z = x*x, for |x| < 0.65: degree 4 (_TANH_P).
    def small(z):
        x = np.sqrt(z)
        return (np.tanh(x) / x - 1) / z

    _show("tanh: (tanh(x)/x - 1)/x**2 on x**2 in [0, 0.65**2]", *fit(small, 1e-8, 0.65 * 0.65, 4))


if __name__ == "__main__":
    main()
