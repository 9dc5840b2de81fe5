r"""The same LPs written the way a user would in cvxpy (what they would use instead of fairalloc).

One ``(N, K)`` variable, the constraints of χ (docs/instance-format.md#the-model) as matrix expressions,
progressive filling
as a Python loop that rebuilds the problem each round and reads the duals of the level constraints:

.. code-block:: python

    x = cp.Variable((N, K), nonneg=True)
    X = cp.sum(x, axis=1)
    chi = [inst.demand.T @ x <= inst.capacity.T,                 # Σ_n d[n,r] x[n,i] ≤ c[i,r]
           cp.sum(cp.multiply(d_e[:, None] * S_e, x)) <= c_e,   # one row per external resource
           cp.multiply(~runnable, x) == 0, X[limited] <= T]
    level = cp.multiply(coeff[active], X[active]) >= t           # duals > 1e-6: blocked users

Solved with cvxpy's default LP solver (Clarabel in cvxpy 1.9 here, an interior-point method) unless
``solver`` names another (``"HIGHS"``). Interior-point duals of users that are not blocked are of the
order of the solver tolerance, so a user is frozen when its dual exceeds ``1e-6`` (the sum of the level
duals is 1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import cvxpy as cp
import numpy as np

from fairalloc.instance import Instance

__all__ = ["CvxpyOutcome", "default_solver", "equal_shares", "progressive_filling", "weighted_sum"]

DUAL_TOL = 1e-6


def default_solver() -> str:
    """The solver cvxpy picks for an LP when none is named."""
    x = cp.Variable(2)
    prob = cp.Problem(cp.Maximize(cp.sum(x)), [x <= 1])
    prob.solve()
    return str(prob.solver_stats.solver_name)


@dataclass
class CvxpyOutcome:
    x: np.ndarray
    levels: np.ndarray
    status: str
    solver: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def objective(self) -> float:
        """The first problem's optimum (the max-min level, or the weighted sum)."""
        return self.rounds[0]["level"] if self.rounds else float("nan")

    @property
    def lps(self) -> int:
        return len(self.rounds)


def _chi(inst: Instance, x: cp.Variable, task_limits: bool = True) -> tuple[list[Any], cp.Expression]:
    X = cp.sum(x, axis=1)
    cons = [inst.demand.T @ x <= inst.capacity.T]
    for e in range(len(inst.external)):
        coef = inst.external_demand[:, e][:, None] * inst.external_scope[e][None, :]
        cons.append(cp.sum(cp.multiply(coef, x)) <= inst.external_capacity[e])
    if not inst.runnable.all():
        cons.append(cp.multiply((~inst.runnable).astype(float), x) == 0)
    lim = np.flatnonzero(np.isfinite(inst.tasks))
    if task_limits and lim.size:
        cons.append(X[lim] <= inst.tasks[lim])
    return cons, X


def _solve(prob: cp.Problem, solver: str | None) -> tuple[float, float, float]:
    """Solve; return (wall seconds, cvxpy compile seconds, solver seconds)."""
    t0 = time.perf_counter()
    prob.solve(solver=solver)
    wall = time.perf_counter() - t0
    stats = prob.solver_stats
    compile_s = float(getattr(prob, "compilation_time", 0.0) or 0.0)
    solve_s = float(stats.solve_time or 0.0) if stats is not None else 0.0
    return wall, compile_s, solve_s


def progressive_filling(inst: Instance, coeff: np.ndarray, solver: str | None = None,
                        dual_tol: float = DUAL_TOL) -> CvxpyOutcome:
    """Weighted lexicographic max-min of ``coeff·X`` over χ, one cvxpy problem per round."""
    N, K = inst.n_users, inst.n_servers
    active = np.ones(N, bool)
    floor = np.full(N, -np.inf)
    levels = np.full(N, np.nan)
    rounds: list[dict[str, Any]] = []
    tm = {"build": 0.0, "compile": 0.0, "solve": 0.0, "wall": 0.0}
    status, name = "optimal", solver or ""
    xv = np.zeros((N, K))
    while active.any():
        t0 = time.perf_counter()
        x = cp.Variable((N, K), nonneg=True)
        t = cp.Variable()
        cons, X = _chi(inst, x)
        act = np.flatnonzero(active)
        level = cp.multiply(coeff[act], X[act]) >= t
        cons.append(level)
        frz = np.flatnonzero(~active)
        if frz.size:
            cons.append(cp.multiply(coeff[frz], X[frz]) >= floor[frz])
        prob = cp.Problem(cp.Maximize(t), cons)
        tm["build"] += time.perf_counter() - t0
        wall, comp, sol = _solve(prob, solver)
        tm["wall"] += wall
        tm["compile"] += comp
        tm["solve"] += sol
        name = str(prob.solver_stats.solver_name)
        if prob.status != cp.OPTIMAL:
            status = str(prob.status)
            break
        tv = float(t.value)
        y = np.asarray(level.dual_value, float).reshape(-1)
        blocked = act[np.abs(y) > dual_tol]
        if not blocked.size:
            status = "no blocked user"
            break
        xv = np.maximum(np.asarray(x.value), 0.0)
        share = coeff * xv.sum(axis=1)
        floor[blocked] = np.minimum(tv, share[blocked]) - 1e-9 * abs(tv)
        levels[blocked] = tv
        active[blocked] = False
        rounds.append({"level": tv, "frozen": int(blocked.size), "seconds": wall})
    return CvxpyOutcome(xv, levels, status, name, rounds, tm)


def weighted_sum(inst: Instance, coeff: np.ndarray, solver: str | None = None) -> CvxpyOutcome:
    """``max Σ_n coeff_n X_n`` over χ (utilitarian: ``coeff = 1``; relative: ``1/η``)."""
    t0 = time.perf_counter()
    x = cp.Variable((inst.n_users, inst.n_servers), nonneg=True)
    cons, X = _chi(inst, x)
    return _one(inst, x, cp.Problem(cp.Maximize(coeff @ X), cons), solver, t0)


def equal_shares(inst: Instance, coeff: np.ndarray, solver: str | None = None) -> CvxpyOutcome:
    """``max g`` s.t. χ without task limits and ``coeff_n X_n = g`` ([TSFER] (8a)–(8d), (8f))."""
    t0 = time.perf_counter()
    x = cp.Variable((inst.n_users, inst.n_servers), nonneg=True)
    g = cp.Variable()
    cons, X = _chi(inst, x, task_limits=False)
    cons.append(cp.multiply(coeff, X) == g)
    return _one(inst, x, cp.Problem(cp.Maximize(g), cons), solver, t0)


def _one(inst: Instance, x: cp.Variable, prob: cp.Problem, solver: str | None, t0: float
         ) -> CvxpyOutcome:
    tm = {"build": time.perf_counter() - t0}
    wall, comp, sol = _solve(prob, solver)
    tm.update(wall=wall, compile=comp, solve=sol)
    ok = prob.status == cp.OPTIMAL
    xv = np.maximum(np.asarray(x.value), 0.0) if ok else np.zeros((inst.n_users, inst.n_servers))
    return CvxpyOutcome(xv, np.full(inst.n_users, np.nan), str(prob.status),
                        str(prob.solver_stats.solver_name),
                        [{"level": float(prob.value) if ok else float("nan"), "frozen": 0,
                          "seconds": wall}], tm)
