r"""Envy-freeness and sharing incentive of an allocation (docs/verification.md), as measures, not just
verdicts.

**Envy-freeness.** User ``n`` values user ``m``'s bundle by the tasks it could run with it, on the
servers where ``n`` may run ([TSFER] Lemma 2, [PSDSF] (24)):

.. math::

    U_n(a_m) = \min\Big(T_n,\ \mu^R_{n,m} \sum_{i:\,\delta_{n,i}=1} x_{m,i},\
        \min_{e:\,d_{n,e}>0} \frac{d_{m,e}}{d_{n,e}} \sum_{i \in S_e} x_{m,i}\Big),
    \qquad \mu^R_{n,m} = \min_{r \in R:\, d_{n,r}>0} \frac{d_{m,r}}{d_{n,r}}.

With weights, ``n`` compares ``X_n`` with ``U_n((φ_n/φ_m) a_m)`` (the bundle scaled by ``φ_n/φ_m``).
``MIN-EF-SAT = min(1, min_{n≠m} X_n / U_n(...))`` ([TSFER] §6.3). The external term is exact when ``n``
demands at most one external resource scoped to a subset of servers (then ``n`` runs the tasks outside
the scope on the server term alone, and ``min`` of the two bounds is the optimum of ``n``'s own small
LP); with several scoped external resources ``n``'s value is that LP, solved per pair.

On the time-shared form a bundle is a fraction of each server's time: ``x[m,i]/γ[m,i]`` of server ``i``
gives ``n`` that fraction of ``γ[n,i]`` tasks, so ``U_n(a_m) = min(T_n, Σ_{i:δ[n,i]=1} x[m,i]
γ[n,i]/γ[m,i])`` ([PSDSF] §IV).

**Sharing incentive.** ``X_n ≥ ψ_n`` for the threshold of either definition
(:meth:`Instance.si_threshold`): ``"apf"`` ([APF]/[PSDSF], every server split in proportion to the
weights) or ``"tsfer"`` ([TSFER] Def. 6, also the external resources split). A user with a task limit
cannot want more than ``T_n``, so both thresholds are capped there. ``MIN-SI-SAT = min(1, min_n
X_n/ψ_n)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fairalloc.instance import Instance

__all__ = ["SI_DEFINITIONS", "bundle_value", "envy_free", "envy_values", "sharing_incentive",
           "si_threshold"]

SI_DEFINITIONS = ("apf", "tsfer")


def _ratio_min(d: np.ndarray) -> np.ndarray:
    """``μ[n,m] = min_{r: d[n,r]>0} d[m,r]/d[n,r]`` (N×N); ``inf`` where ``n`` demands none of the
    columns of ``d``."""
    dn = d[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(dn > 0, d[None, :, :] / np.where(dn > 0, dn, 1.0), np.inf)
    return ratio.min(axis=2, initial=np.inf)


def _external_value(inst: Instance, n: int, m: int, x: np.ndarray, server_cap: np.ndarray) -> float:
    """``n``'s tasks from ``m``'s bundle when ``n`` demands several scoped external resources:
    ``max Σ_i y_i`` s.t. ``y_i ≤ server_cap_i``, ``Σ_{i∈S_e} y_i d[n,e] ≤ d[m,e] Σ_{i∈S_e} x[m,i]``."""
    from scipy.optimize import linprog

    es = np.flatnonzero(inst.external_demand[n] > 0)
    A = inst.external_scope[es].astype(float) * inst.external_demand[n, es, None]
    b = inst.external_demand[m, es] * (inst.external_scope[es] * x[m]).sum(axis=1)
    res = linprog(-np.ones(inst.n_servers), A_ub=A, b_ub=b,
                  bounds=list(zip(np.zeros(inst.n_servers), server_cap)), method="highs")
    return float(-res.fun) if res.status == 0 else 0.0


def envy_values(inst: Instance, x: np.ndarray) -> np.ndarray:
    """``V[n,m] = U_n((φ_n/φ_m) a_m)``: the tasks ``n`` could run with ``m``'s weighted bundle (N×N,
    capped at ``T_n``; the diagonal is ``X_n`` capped at ``T_n``)."""
    x = np.asarray(x, float)
    elig = inst.eligible.astype(float)
    if inst.time_shared:
        g = inst.gamma
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(g > 0, x / np.where(g > 0, g, 1.0), 0.0)  # (M, K) time fractions
        V = (elig * g) @ frac.T  # V[n, m] = Σ_i δ[n,i] γ[n,i] x[m,i]/γ[m,i]
    else:
        mu = _ratio_min(inst.demand)
        V = mu * (elig @ x.T)  # server term
        if inst.external:
            ext = inst.external_demand
            scoped = ~inst.external_scope.all(axis=1)
            several = ((ext > 0) & scoped[None, :]).sum(axis=1) > 1
            for n in np.flatnonzero(several):  # the exact small LP, pair by pair
                for m in range(inst.n_users):
                    if m != n and V[n, m] > 0:
                        cap = mu[n, m] * inst.eligible[n] * x[m]
                        V[n, m] = min(V[n, m], _external_value(inst, n, m, x, cap))
            for e in range(ext.shape[1]):  # in order of e, as each user's row is updated in turn
                users = np.flatnonzero((ext[:, e] > 0) & ~several)
                if not users.size:
                    continue
                S = inst.external_scope[e]
                # tasks n runs inside S_e are limited by m's amount of e; outside S_e, not at all
                inside = (ext[None, :, e] / ext[users, e][:, None]) * x[:, S].sum(axis=1)[None, :]
                outside = mu[users] * (elig[users][:, ~S] @ x[:, ~S].T)
                V[users] = np.minimum(V[users], outside + np.minimum(inside, V[users] - outside))
    V = V * (inst.weight[:, None] / inst.weight[None, :])
    return np.minimum(V, inst.tasks[:, None])


def bundle_value(inst: Instance, n: int, x_row: np.ndarray, *, demand: np.ndarray | None = None,
                 external_demand: np.ndarray | None = None, rates: np.ndarray | None = None) -> float:
    """``U_n`` of a bundle that is *not* a user's of ``inst``: ``x_row[i]`` tasks on server ``i`` of
    a task with per-task ``demand`` (server resources) and ``external_demand`` (or, time-shared,
    ``x_row[i]`` tasks at ``rates[i]``, i.e. the time fraction ``x_row[i]/rates[i]`` of server ``i``),
    valued by user ``n`` with its true demand, eligibility and task limit, exactly as in
    :func:`envy_values` (unweighted). The strategy-proofness search values what a liar receives this
    way: the tasks it can *really* run with the resources its misreport bought.
    """
    N = np.array([n])
    x = np.zeros((2, inst.n_servers))
    x[1] = np.asarray(x_row, float)
    if inst.time_shared:
        fake = np.asarray(rates, float)
        two = Instance.from_arrays(rates=np.vstack([inst.rates[N], fake]),
                                   tasks=[inst.tasks[n], np.inf],
                                   eligible=np.vstack([inst.eligible[N], fake > 0]),
                                   servers=inst.servers, users=[inst.users[n], "report"])
    else:
        d = inst.demand[n] if demand is None else np.asarray(demand, float)
        e = inst.external_demand[n] if external_demand is None else np.asarray(external_demand, float)
        two = Instance.from_arrays(capacity=inst.capacity, demand=np.vstack([inst.demand[N], d]),
                                   tasks=[inst.tasks[n], np.inf],
                                   eligible=np.vstack([inst.eligible[N], np.ones(inst.n_servers, bool)]),
                                   external_capacity=inst.external_capacity if inst.external else None,
                                   external_demand=np.vstack([inst.external_demand[N], e])
                                   if inst.external else None,
                                   external_scope=inst.external_scope if inst.external else None,
                                   servers=inst.servers, resources=inst.resources,
                                   external=inst.external or None, users=[inst.users[n], "report"])
    return float(envy_values(two, x)[0, 1])


def envy_free(inst: Instance, x: np.ndarray, tol: float = 1e-6) -> dict[str, Any]:
    """EF report: ``holds``, ``min_ef_sat``, the most envious ``user`` and whom it ``envies``, the
    tasks it has and would have (``own``, ``other``), and ``envious_pairs`` (how many pairs envy)."""
    x = np.asarray(x, float)
    X = x.sum(axis=1)
    V = envy_values(inst, x)
    np.fill_diagonal(V, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        sat = np.where(V > 0, X[:, None] / np.where(V > 0, V, 1.0), np.inf)
    n, m = np.unravel_index(int(np.argmin(sat)), sat.shape)
    min_sat = float(min(1.0, sat[n, m]))
    envious = sat < 1.0 - tol
    out: dict[str, Any] = {"holds": bool(not envious.any()), "min_ef_sat": min_sat,
                           "envious_pairs": int(envious.sum())}
    if envious.any():
        out.update(user=inst.users[n], envies=inst.users[m], own=float(X[n]), other=float(V[n, m]))
    return out


def si_threshold(inst: Instance, definition: str = "apf") -> np.ndarray:
    """``ψ[n]`` of ``definition`` (``"apf"`` or ``"tsfer"``), capped at the task limit ``T[n]``."""
    if definition not in SI_DEFINITIONS:
        raise ValueError(f"sharing-incentive definition {definition!r}: expected one of "
                         f"{', '.join(SI_DEFINITIONS)}")
    return np.minimum(inst.si_threshold(definition), inst.tasks)


def sharing_incentive(inst: Instance, x: np.ndarray, definition: str = "apf",
                      tol: float = 1e-6) -> dict[str, Any]:
    """SI report for one definition: ``holds``, ``min_si_sat``, the worst ``user`` with its tasks and
    ``threshold``, and how many users fall short (``short_users``)."""
    X = np.asarray(x, float).sum(axis=1)
    psi = si_threshold(inst, definition)
    with np.errstate(divide="ignore", invalid="ignore"):
        sat = np.where(psi > 0, X / np.where(psi > 0, psi, 1.0), np.inf)
    n = int(np.argmin(sat))
    short = sat < 1.0 - tol
    out: dict[str, Any] = {"holds": bool(not short.any()), "min_si_sat": float(min(1.0, sat[n])),
                           "short_users": int(short.sum())}
    if short.any():
        out.update(user=inst.users[n], tasks=float(X[n]), threshold=float(psi[n]))
    return out
