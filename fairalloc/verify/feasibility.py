"""Feasibility of an allocation: the largest violation of any row of χ (SPEC §3)."""

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
    """``max_violation`` over every row of χ (absolute, in the row's own units) and the worst row.

    ``holds`` is ``max_violation ≤ tol · max(1, scale of the row)``.
    """
    x = np.asarray(x, float)
    rows: list[tuple[float, float, str]] = []  # (violation, scale, name)
    u = usage(inst, x)
    names = inst.resources if not inst.time_shared else ("time",)
    viol = u["server_used"] - u["server_capacity"]
    for i, r in np.ndindex(viol.shape):
        rows.append((viol[i, r], max(1.0, u["server_capacity"][i, r]),
                     f"capacity[{inst.servers[i]},{names[r]}]"))
    for e, name in enumerate(inst.external):
        rows.append((u["external_used"][e] - inst.external_capacity[e],
                     max(1.0, inst.external_capacity[e]), f"external[{name}]"))
    X = x.sum(axis=1)
    for n in np.flatnonzero(np.isfinite(inst.tasks)):
        rows.append((X[n] - inst.tasks[n], max(1.0, inst.tasks[n]), f"limit[{inst.users[n]}]"))
    spent = (inst.budget_cost * x).sum(axis=1)
    for n in inst.budgeted:  # Σ_i cost[n,i]·x[n,i] ≤ B[n], relative to the limit
        rows.append((spent[n] - inst.budget_limit[n], max(1.0, inst.budget_limit[n]),
                     f"budget[{inst.users[n]}]"))
    for n, i in np.argwhere((x > 0) & ~inst.runnable):
        rows.append((x[n, i], 1.0, f"placement[{inst.users[n]},{inst.servers[i]}]"))
    for n, i in np.argwhere(x < 0):
        rows.append((-x[n, i], 1.0, f"nonnegative[{inst.users[n]},{inst.servers[i]}]"))
    worst = max(rows, key=lambda t: t[0] / t[1], default=(0.0, 1.0, ""))
    max_violation = max(0.0, worst[0])
    return {"holds": bool(all(v <= tol * s for v, s, _ in rows)), "max_violation": max_violation,
            "worst_row": worst[2] if worst[0] > 0 else None}
