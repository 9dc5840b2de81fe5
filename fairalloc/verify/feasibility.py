"""Feasibility of an allocation: the largest violation of any row of χ (docs/verification.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fairalloc.instance import Instance

__all__ = ["feasibility", "usage"]


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
