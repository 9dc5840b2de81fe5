r"""Pareto optimality of an allocation (docs/verification.md; [TSFER] Def. 4, §6.2).

An allocation ``x`` with totals ``X`` is Pareto optimal when no feasible ``y`` gives every user at
least as many tasks and some user more. One LP over the shared feasible set χ
(:func:`~fairalloc.models.feasible.feasible_set`, solved through the solve layer) decides it:

.. math::

    \max_{y \in \chi} \ \sum_n Y_n \quad\text{s.t.}\quad Y_n \ge X_n \ \ \forall n,
    \qquad \text{domination factor} = \frac{\sum_n Y^*_n}{\sum_n X_n} \ \text{([TSFER] §6.2)}.

The factor is 1 exactly when ``x`` is Pareto optimal (then ``Y* = X``: no user can gain without
another losing); when it exceeds ``1 + tol`` the optimal ``y*`` is a dominating allocation, reported
with the users it improves. Task limits are part of χ, so a user at ``T[n]`` cannot "gain" past it.

Solver noise: ``X`` from a solver may exceed a capacity by ~1e-9, which would make ``Y ≥ X``
infeasible; the floors ``X`` are then relaxed to ``X·(1 − 1e-9)`` and once more to
``X·(1 − 1e-6)`` if that is still infeasible (the factor's error is of the same order, far below
``tol``). An allocation that is infeasible beyond that is not judged (``holds: null``; see the
``feasible`` item).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, feasible_set
from fairalloc.solvers import Session
from fairalloc.status import Status

__all__ = ["dominating_lp", "pareto"]

log = logging.getLogger(__name__)

FLOOR_SLACK = (0.0, 1e-9, 1e-6)  # relative relaxations of Y >= X tried in turn (solver noise in X)


def dominating_lp(inst: Instance, floor: np.ndarray) -> pyo.ConcreteModel:
    """χ, ``Y_n ≥ floor_n`` for every user and ``max Σ_n Y_n`` (``m.chi.X`` is ``Y``)."""
    m = pyo.ConcreteModel(name=f"pareto[{inst.name}]")
    m.chi = feasible_set(inst)
    lo = dict(zip(inst.users, map(float, floor)))
    m.dominate = pyo.Constraint(m.chi.N, rule=lambda m, u: m.chi.X[u] >= lo[u] if lo[u] > 0
                                else pyo.Constraint.Skip, doc="Y[n] >= X[n]: nobody loses")
    m.objective = pyo.Objective(expr=sum(m.chi.X[u] for u in m.chi.N), sense=pyo.maximize)
    return m


def pareto(inst: Instance, x: np.ndarray, tol: float = 1e-6, session: Session | None = None
           ) -> dict[str, Any]:
    """PO report: ``holds``, ``domination_factor`` (``ΣY*/ΣX``; ``inf`` when ``X = 0`` but χ is not
    empty), ``total_tasks``, ``max_total_tasks`` and, when ``factor > 1 + tol``, ``dominating_tasks``
    (``Y*`` per user), ``dominating_allocation`` (``{user: {server: tasks}}``) and ``improved_users``.
    """
    x = np.asarray(x, float)
    X = x.sum(axis=1)
    session = session or Session()
    out = None
    for slack in FLOOR_SLACK:
        m = dominating_lp(inst, X * (1.0 - slack))
        out = session.solve(m, "lp")
        if out.status is not Status.INFEASIBLE:
            break
        log.info("pareto LP infeasible with floors X(1 - %g); relaxing", slack)
    assert out is not None
    base: dict[str, Any] = {"holds": None, "domination_factor": None, "total_tasks": float(X.sum()),
                            "max_total_tasks": None, "dominating_tasks": None,
                            "dominating_allocation": None, "improved_users": []}
    if out.status is Status.INFEASIBLE:
        return {**base, "reason": "the allocation is not feasible, so no feasible allocation can "
                                  "dominate it (see 'feasible')"}
    if not out.ok:
        return {**base, "reason": f"the Pareto LP stopped: {out.status.value} ({out.message})"}
    y = allocation(m.chi, inst)
    Y = y.sum(axis=1)
    total, best = float(X.sum()), float(Y.sum())
    factor = best / total if total > 0 else (1.0 if best <= tol else float("inf"))
    holds = bool(factor <= 1.0 + tol)
    res = {**base, "holds": holds, "domination_factor": factor, "max_total_tasks": best}
    if not holds:
        gain = Y - X > tol * np.maximum(1.0, X)
        res["dominating_tasks"] = {u: float(v) for u, v in zip(inst.users, Y)}
        res["dominating_allocation"] = {
            u: {s: float(y[n, i]) for i, s in enumerate(inst.servers) if y[n, i] > 0}
            for n, u in enumerate(inst.users) if y[n].any()}
        res["improved_users"] = [u for u, g in zip(inst.users, gain) if g]
    return res
