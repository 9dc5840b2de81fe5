"""Independent reference computations for the tests: χ as dense matrices and progressive filling by
scipy's ``linprog`` with one probe LP per user. Nothing here imports fairalloc's models or solve layer,
so agreement is evidence, not the code compared with itself."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog


def chi(inst):
    """``A_ub x ≤ b_ub`` and bounds for x flattened row-major (user n, server i) -> n*K + i."""
    N, K = inst.n_users, inst.n_servers
    if inst.rates is not None:
        can = inst.eligible & (inst.rates > 0)
    else:
        can = np.array([[inst.eligible[n, i] and all(inst.capacity[i, r] > 0
                                                       for r in range(len(inst.resources))
                                                       if inst.demand[n, r] > 0)
                         for i in range(K)] for n in range(N)])
    rows, rhs = [], []
    if inst.rates is not None:
        for i in range(K):
            a = np.zeros((N, K))
            for n in range(N):
                if can[n, i]:
                    a[n, i] = 1.0 / inst.rates[n, i]
            rows.append(a.ravel())
            rhs.append(1.0)
    else:
        for i in range(K):
            for r in range(len(inst.resources)):
                a = np.zeros((N, K))
                a[:, i] = inst.demand[:, r]
                rows.append(a.ravel())
                rhs.append(inst.capacity[i, r])
    for e in range(len(inst.external)):
        a = np.zeros((N, K))
        for i in range(K):
            if inst.external_scope[e, i]:
                a[:, i] = inst.external_demand[:, e]
        rows.append(a.ravel())
        rhs.append(inst.external_capacity[e])
    for n in range(N):
        if np.isfinite(inst.tasks[n]):
            a = np.zeros((N, K))
            a[n, :] = 1
            rows.append(a.ravel())
            rhs.append(inst.tasks[n])
    bounds = [(0, None if can[n, i] else 0) for n in range(N) for i in range(K)]
    return np.array(rows), np.array(rhs), bounds


def leximin(inst, coef, tol=1e-9):
    """Lexicographic max-min of ``coef[n]·X[n]`` over χ; returns X. Variables: x (N·K) then t."""
    A, b, bounds = chi(inst)
    N, K = inst.n_users, inst.n_servers
    nx = N * K
    S = np.zeros((N, nx))
    for n in range(N):
        S[n, n * K:(n + 1) * K] = coef[n]
    A0 = np.hstack([A, np.zeros((len(A), 1))])
    level = np.full(N, np.nan)
    while np.isnan(level).any():
        act = np.isnan(level)
        # max t: coef X_n >= t (active), >= level_n (frozen)
        G = [np.append(-S[n], 1.0 if act[n] else 0.0) for n in range(N)]
        h = [0.0 if act[n] else -level[n] * (1 - tol) for n in range(N)]
        c = np.zeros(nx + 1)
        c[-1] = -1
        res = linprog(c, A_ub=np.vstack([A0, G]), b_ub=np.concatenate([b, h]),
                      bounds=[*bounds, (None, None)], method="highs")
        assert res.status == 0, res.message
        t = -res.fun
        froze = False
        for n in np.flatnonzero(act):
            # can n rise above t while the other active users keep t?
            G2 = [-S[m] for m in range(N)]
            h2 = [-(t if act[m] else level[m]) * (1 - tol) for m in range(N)]
            res2 = linprog(-S[n], A_ub=np.vstack([A, G2]), b_ub=np.concatenate([b, h2]),
                           bounds=bounds, method="highs")
            assert res2.status == 0, res2.message
            if -res2.fun <= t + 1e-7 * max(1, abs(t)):
                level[n] = t
                froze = True
        assert froze
    return level / np.asarray(coef)


# ---------------------------------------------------------------------- TSF-ER family (additive)
def _no_limits(inst):
    return inst.replace(tasks=np.full(inst.n_users, np.inf))


def _totals_matrix(N, K):
    S = np.zeros((N, N * K))
    for n in range(N):
        S[n, n * K:(n + 1) * K] = 1.0
    return S


def eta(inst):
    """η[n]: max X[n] over χ without task limits and with every other user absent (one LP each)."""
    A, b, bounds = chi(_no_limits(inst))
    N, K = inst.n_users, inst.n_servers
    out = np.zeros(N)
    for n in range(N):
        bn = [bd if k // K == n else (0, 0) for k, bd in enumerate(bounds)]
        c = np.zeros(N * K)
        c[n * K:(n + 1) * K] = -1
        res = linprog(c, A_ub=A, b_ub=b, bounds=bn, method="highs")
        assert res.status == 0, res.message
        out[n] = -res.fun
    return out


def pareto_improvement(inst, X):
    """LP ``max Σ Y[n]`` over χ with ``Y[n] ≥ X[n]``: returns (Y, y, factor ΣY/ΣX)."""
    A, b, bounds = chi(inst)
    N, K = inst.n_users, inst.n_servers
    S = _totals_matrix(N, K)
    res = linprog(-np.ones(N * K), A_ub=np.vstack([A, -S]), b_ub=np.concatenate([b, -np.asarray(X)]),
                  bounds=bounds, method="highs")
    assert res.status == 0, res.message
    Y = S @ res.x
    return Y, res.x.reshape(N, K), Y.sum() / np.sum(X)


def algorithm1(inst, coef, tol=1e-9):
    """[TSFER] Algorithm 1 as printed, on shares ``coef[n]·X[n]``: LP (8) with equality rows for the
    active users and ``X = T`` for the saturated ones; returns X."""
    A, b, bounds = chi(_no_limits(inst))
    N, K = inst.n_users, inst.n_servers
    S = _totals_matrix(N, K)
    T = inst.tasks
    active, sat = list(range(N)), []
    while True:
        Aeq, beq = [], []
        for n in active:  # coef X_n - g = 0
            Aeq.append(np.append(coef[n] * S[n], -1.0))
            beq.append(0.0)
        for n in sat:
            Aeq.append(np.append(S[n], 0.0))
            beq.append(T[n])
        c = np.zeros(N * K + 1)
        c[-1] = -1.0
        gb = (None, None) if active else (0, 0)
        res = linprog(c, A_ub=np.hstack([A, np.zeros((len(A), 1))]), b_ub=b, A_eq=np.array(Aeq),
                      b_eq=np.array(beq), bounds=[*bounds, gb], method="highs")
        assert res.status == 0, res.message
        X = S @ res.x[:-1]
        Q = [n for n in active if np.isfinite(T[n]) and X[n] >= T[n] * (1 - tol)]
        if not Q:
            return X
        active = [n for n in active if n not in Q]
        sat += Q


def envy_mu(inst):
    """μ[n,m] = min over resources n demands (server and external) of d[m,r]/d[n,r]."""
    d = np.hstack([inst.demand, inst.external_demand])
    N = inst.n_users
    mu = np.ones((N, N))
    for n in range(N):
        for m in range(N):
            mu[n, m] = min(d[m, r] / d[n, r] for r in range(d.shape[1]) if d[n, r] > 0)
    return mu


def cru_bruteforce(inst):
    """CRU with task limits by enumeration: for every set Z of users with finite limits, Z at their
    limit with their EF rows dropped, one LP; the best objective wins. Returns (objective, X)."""
    from itertools import combinations

    A, b, bounds = chi(inst)
    N, K = inst.n_users, inst.n_servers
    S = _totals_matrix(N, K)
    et = eta(inst)
    w = inst.weight / inst.weight.sum()
    psi = np.minimum(w * et, inst.tasks)  # [TSFER] Def. 6 with weights: η on capacities scaled by w
    mu = envy_mu(inst)
    finite = [n for n in range(N) if np.isfinite(inst.tasks[n])]
    best = (-np.inf, None)
    for k in range(len(finite) + 1):
        for Z in combinations(finite, k):
            G, h = [A, -S], [b, -psi]  # χ, SI
            for n in range(N):
                if n in Z:
                    G.append(-S[n:n + 1])
                    h.append([-inst.tasks[n]])
                    continue
                for m in range(N):
                    if m == n or mu[n, m] <= 0:
                        continue
                    row = np.zeros(N * K)
                    for i in range(K):
                        if inst.eligible[n, i]:
                            row[m * K + i] = mu[n, m] * inst.weight[n] / inst.weight[m]
                    G.append((row - S[n])[None, :])
                    h.append([0.0])
            res = linprog(-(S.T @ (1 / et)), A_ub=np.vstack(G), b_ub=np.concatenate(h),
                          bounds=bounds, method="highs")
            if res.status == 0 and -res.fun > best[0]:
                best = (-res.fun, S @ res.x)
    return best
