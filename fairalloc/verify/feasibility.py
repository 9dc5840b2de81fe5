"""Feasibility of an allocation: the largest violation of any row of χ (docs/verification.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fairalloc.instance import Instance

__all__ = ["feasibility", "into_rows", "usage"]


def usage(inst: Instance, x: np.ndarray) -> dict[str, np.ndarray]:
    """Per-row usage and capacity: ``server`` (K × R, or K × 1 time fraction in the time-shared form)
    and ``external`` (E)."""
    x = np.asarray(x, float)
    if inst.time_shared:
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(inst.gamma > 0, x / np.where(inst.gamma > 0, inst.gamma, 1), np.where(
                x > 0, np.inf, 0.0))
        server_used, server_cap = frac.sum(axis=0)[:, None], np.ones((inst.n_servers, 1))
    else:
        server_used, server_cap = x.T @ inst.demand, inst.capacity
    ext_used = np.array([(x[:, inst.external_scope[e]].sum(axis=1) * inst.external_demand[:, e]).sum()
                         for e in range(len(inst.external))])
    return {"server_used": server_used, "server_capacity": server_cap,
            "external_used": ext_used, "external_capacity": inst.external_capacity}


def feasibility(inst: Instance, x: np.ndarray, tol: float = 1e-6) -> dict[str, Any]:
    """The largest violation of any row of χ, relative to the row's own bound, and the worst row.

    Every row is judged relative to what it limits: a capacity row to its capacity, a task limit to
    the limit, a budget to its limit, a negative or misplaced entry to its user's ``η`` (the most
    tasks it could run alone). ``holds`` is "every relative violation ≤ tol"; ``max_violation`` is the
    worst row's violation in its own units, ``max_relative_violation`` the worst relative one.
    """
    x = np.asarray(x, float)
    rows: list[tuple[float, float, str]] = []  # (violation, scale, name)
    eta = np.asarray(inst.eta, float)

    def pos(v: float) -> float:  # a bound of 0 tolerates nothing
        return float(v) if v > 0 else 1e-300
    u = usage(inst, x)
    names = inst.resources if not inst.time_shared else ("time",)
    viol = u["server_used"] - u["server_capacity"]
    for i, r in np.ndindex(viol.shape):
        rows.append((viol[i, r], pos(u["server_capacity"][i, r]),
                     f"capacity[{inst.servers[i]},{names[r]}]"))
    for e, name in enumerate(inst.external):
        rows.append((u["external_used"][e] - inst.external_capacity[e],
                     pos(inst.external_capacity[e]), f"external[{name}]"))
    X = x.sum(axis=1)
    for n in np.flatnonzero(np.isfinite(inst.tasks)):
        rows.append((X[n] - inst.tasks[n], pos(inst.tasks[n]), f"limit[{inst.users[n]}]"))
    spent = (inst.budget_cost * x).sum(axis=1)
    for n in inst.budgeted:  # Σ_i cost[n,i]·x[n,i] ≤ B[n], relative to the limit
        rows.append((spent[n] - inst.budget_limit[n], pos(inst.budget_limit[n]),
                     f"budget[{inst.users[n]}]"))
    for n, i in np.argwhere((x > 0) & ~inst.runnable):
        rows.append((x[n, i], pos(eta[n]), f"placement[{inst.users[n]},{inst.servers[i]}]"))
    for n, i in np.argwhere(x < 0):
        rows.append((-x[n, i], pos(eta[n]), f"nonnegative[{inst.users[n]},{inst.servers[i]}]"))
    worst = max(rows, key=lambda t: t[0] / t[1], default=(0.0, 1.0, ""))
    max_violation = max(0.0, worst[0])
    return {"holds": bool(all(v <= tol * s for v, s, _ in rows)), "max_violation": max_violation,
            "max_relative_violation": max(0.0, worst[0] / worst[1]),
            "worst_row": worst[2] if worst[0] > 0 else None}


ROUNDING = 1e-12  # a row over its bound by at most this fraction is over by the sum's rounding: left


def into_rows(inst: Instance, x: np.ndarray, within: float = 1e-6) -> tuple[np.ndarray, float]:
    """``x`` with every row of χ it overruns by more than :data:`ROUNDING` and at most ``within`` of the
    row's bound held exactly: each
    entry ``x[n,i]`` is multiplied by the least ``bound/used`` of the overrun rows it enters (a capacity
    row of server ``i`` whose resource ``n`` demands, an external row in whose scope ``i`` is and whose
    resource ``n`` demands, ``n``'s task limit, ``n``'s budget where ``x[n,i]`` costs something). Rows
    overrun by more than ``within`` are left as they are (the caller reports them). Returns the new
    allocation and the largest relative overrun it removed (0 when ``x`` is returned unchanged).

    An LP solver holds its rows to its feasibility tolerance (HiGHS: 10⁻⁷ in its scaled units), so a
    vertex may overrun a capacity row by ~10⁻⁸ of it. The factor depends only on the numbers of the
    instance and of ``x``, not on units or order, so the repair keeps one answer per input; it lowers
    the entries of an overrun row by at most ``within`` of themselves."""
    x = np.array(x, float, copy=True)
    if x.shape != (inst.n_users, inst.n_servers):
        return x, 0.0
    u = usage(inst, x)
    worst = 0.0

    def factor(used: np.ndarray, bound: np.ndarray) -> np.ndarray:
        nonlocal worst
        used, bound = np.asarray(used, float), np.asarray(bound, float)
        with np.errstate(divide="ignore", invalid="ignore"):
            over = (np.isfinite(bound) & (bound > 0) & (used > bound * (1 + ROUNDING))
                    & (used <= bound * (1 + within)))
            rel = np.where(over, used / np.where(over, bound, 1.0) - 1.0, 0.0)
        worst = max(worst, float(rel.max(initial=0.0)))
        # a hair below bound/used, so that the rounded sum cannot land above the bound again
        return np.where(over, bound / np.where(over, used, 1.0) * (1 - 1e-14), 1.0)

    f = np.ones_like(x)
    srv = factor(u["server_used"], u["server_capacity"])  # (K, R)
    if (srv < 1).any():
        enters = (inst.runnable[:, :, None] if inst.time_shared else
                  np.broadcast_to(inst.demand[:, None, :] > 0, (*x.shape, srv.shape[1])))
        f = np.minimum(f, np.where(enters, srv[None], 1.0).min(axis=2))
    if len(inst.external):
        ext = factor(u["external_used"], inst.external_capacity)  # (E,)
        for e in np.flatnonzero(ext < 1):
            hit = np.outer(inst.external_demand[:, e] > 0, inst.external_scope[e])
            f = np.where(hit, np.minimum(f, ext[e]), f)
    lim = factor(x.sum(axis=1), inst.tasks)  # (N,)
    f = np.minimum(f, lim[:, None])
    if len(inst.budgeted):
        bud = factor((inst.budget_cost * x).sum(axis=1), inst.budget_limit)
        f = np.where(inst.budget_cost > 0, np.minimum(f, bud[:, None]), f)
    if worst == 0.0:
        return x, 0.0
    return x * f, worst
