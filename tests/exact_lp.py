"""A dense simplex in exact rational arithmetic for the small LPs of the fuzz test: ``max c·z`` subject to
``A z ≤ b``, ``z ≥ 0`` with ``b ≥ 0`` (so the slack basis is feasible and one phase suffices). Bland's rule
(lowest index enters and leaves among ties), so it terminates on degenerate LPs. Floats enter as the
exact binary fractions they are: no tolerance, no scaling, whatever the magnitudes (1e-4 … 1e10 side by
side). For a few dozen rows and columns only."""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def maximize(c: np.ndarray, A: np.ndarray, b: np.ndarray) -> tuple[Fraction, list[Fraction]]:
    """The optimum value and an optimal ``z``; raises ``ValueError`` when unbounded."""
    m, n = A.shape
    if (np.asarray(b) < 0).any():
        raise ValueError("b must be >= 0 (the slack basis must be feasible)")
    F = Fraction
    # tableau rows: [A | I | b]; objective row: reduced costs -c (maximisation)
    T = [[F(float(A[i, j])) for j in range(n)] + [F(int(i == k)) for k in range(m)] + [F(float(b[i]))]
         for i in range(m)]
    obj = [-F(float(v)) for v in c] + [F(0)] * m + [F(0)]
    basis = [n + i for i in range(m)]
    while True:
        enter = next((j for j in range(n + m) if obj[j] < 0), None)  # Bland: lowest index
        if enter is None:
            break
        best, leave = None, None
        for i in range(m):
            a = T[i][enter]
            if a > 0:
                ratio = T[i][-1] / a
                if best is None or ratio < best or (ratio == best and basis[i] < basis[leave]):
                    best, leave = ratio, i
        if leave is None:
            raise ValueError("unbounded")
        piv = T[leave][enter]
        T[leave] = [v / piv for v in T[leave]]
        for i in range(m):
            if i != leave and T[i][enter] != 0:
                f = T[i][enter]
                T[i] = [a - f * p for a, p in zip(T[i], T[leave])]
        f = obj[enter]
        obj = [a - f * p for a, p in zip(obj, T[leave])]
        basis[leave] = enter
    z = [F(0)] * (n + m)
    for i, j in enumerate(basis):
        z[j] = T[i][-1]
    return obj[-1], z[:n]
