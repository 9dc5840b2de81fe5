r"""TSF-ER — Task Share Fairness with External Resource ([TSFER] §4, Algorithm 1).

A user's *task share* normalises its tasks by ``η_n``, the most tasks it could run with every server
and every external resource to itself ([TSFER] (6); :attr:`Instance.eta`, over its eligible servers and
every, possibly scoped, external resource), and by its weight ([TSFER] §8):

.. math::

    \text{share}_n = \frac{X_n}{\phi_n\,\eta_n}.

**Algorithm 1** (``variant="paper"``) keeps a set of *saturated* users (``J_sat``, they received their
task limit ``T_n``) and of *active* users (``J_active``, all others) and repeatedly solves
LP-TaskShare:

.. math::

    \max_{g,\,x}\ g \quad \text{(8a)} \qquad\text{s.t.}\quad
    \sum_n \sum_{i \in S_e} x_{n,i} d_{n,e} \le c_e\ \forall e \ \text{(8b)}, \quad
    \sum_n x_{n,i} d_{n,r} \le c_{i,r}\ \forall i, r\ \text{(8c)}, \quad x \ge 0\ \text{(8d)},

    X_n = T_n \ \ \forall n \in J_{sat} \ \text{(8e)}, \qquad
    \frac{X_n}{\phi_n \eta_n} = g \ \ \forall n \in J_{active} \ \text{(8f)}.

(8b)–(8d) are χ without the task limits (one (8b) row per external resource, [TSFER] §8; placement
constraints as in χ). After each LP every active user with ``X_n ≥ T_n`` moves to ``J_sat``; when no
user moves, the LP's solution is returned. The rows (8e)/(8f) are (de)activated on **one persistent
model** that the solve layer re-solves warm. Users leave ``J_active`` only by reaching ``T_n``: a user
blocked by a resource the others do not use (zero capacities, placement constraints, a resource it alone
demands) holds every active user at its level by (8f), and capacity stays idle — the allocation is not
Pareto optimal then (see ``docs/mechanisms/tsf-er.md`` and ``examples/tsfer-idle.yaml``). When every
user is saturated (8f) is empty and ``g`` is unbounded; the last LP then fixes ``g = 0``, i.e. solves
(8b)–(8e) as a feasibility problem.

The **default** (``variant="leximin"``) is the exact weighted lexicographic max-min of the task shares
over χ (task limits included), by progressive filling (:mod:`~fairalloc.models.maxmin`): a user frozen
at a level — because it reached ``T_n`` (*saturated*) or because a resource blocks it — no longer holds
the others back. In the paper's setting (every server holds every resource, no placement constraints,
positive demands) both variants give the same allocation.

:func:`run` takes the share coefficients as an argument, so DRF-ER (:mod:`~fairalloc.models.drf_er`)
runs the same loop on dominant shares.

Golden numbers (docs/examples.md#tsfer-fig2, [TSFER] Fig. 2): ``η = (6, 7.5)``, task share ``5/7``, ``X =
(30/7, 75/14)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, allocation_scale, feasible_set
from fairalloc.models.maxmin import canonical_split, leximin_model, names, progressive_filling
from fairalloc.registry import CANONICAL, Param, Solution, choice, mechanism
from fairalloc.solvers import Session
from fairalloc.status import Status, worst

__all__ = ["LoopOutcome", "build", "build_lp_taskshare", "run", "task_share_coeff"]

log = logging.getLogger(__name__)

# how the loop re-solves (HighsBridge.resolve), measured on 256 x 32 with task limits: primal
# simplex from the previous basis 0.10 s, from scratch 0.21 s, HiGHS's warm dual simplex 0.94 s
ALG1_RESOLVE = "primal"

VARIANTS = ("leximin", "paper")
SAT_TOL = 1e-9  # relative: X ≥ T(1 - SAT_TOL) counts as "reached T" (line 7 of Alg. 1)


def task_share_coeff(inst: Instance) -> np.ndarray:
    """``1/(φ_n η_n)``: the task share is this times ``X_n``."""
    return 1.0 / (inst.weight * inst.eta)


def build_lp_taskshare(inst: Instance, coeff: np.ndarray, name: str = "tsf-er") -> pyo.ConcreteModel:
    """LP-TaskShare (8a)–(8f) with every user active: the first LP of Algorithm 1.

    ``m.saturated[n]`` (8e, users with a finite limit; inactive until ``n`` saturates) and
    ``m.active_share[n]`` (8f) are the rows the loop switches."""
    m = pyo.ConcreteModel(name=f"{name}[{inst.name}]")
    m.chi = feasible_set(inst, task_limits=False)  # (8b)-(8d)
    c = dict(zip(inst.users, map(float, coeff)))
    m.share = pyo.Expression(m.chi.N, rule=lambda m, n: c[n] * m.chi.X[n],
                             doc="normalised share of user n")
    m.g = pyo.Var(doc="equalised share of the active users (8a)")
    limited = {inst.users[n]: float(inst.tasks[n]) for n in np.flatnonzero(np.isfinite(inst.tasks))}
    m.saturated = pyo.Constraint(list(limited), rule=lambda m, n: m.chi.X[n] == limited[n],
                                 doc="(8e): a saturated user gets exactly its task limit")
    m.saturated.deactivate()
    m.active_share = pyo.Constraint(m.chi.N, rule=lambda m, n: m.share[n] - m.g == 0,
                                    doc="(8f): every active user has share g")
    m.objective = pyo.Objective(expr=m.g, sense=pyo.maximize)
    return m


def build(inst: Instance, variant: str = "leximin", **_: object) -> pyo.ConcreteModel:
    """The first LP: (8a)–(8f) for ``variant="paper"``, the first progressive-filling LP otherwise."""
    coeff = task_share_coeff(inst)
    if variant == "paper":
        return build_lp_taskshare(inst, coeff)
    return leximin_model(inst, coeff, "tsf-er", doc="normalised share of user n")


@dataclass
class LoopOutcome:
    """What the loop found: the allocation, and per iteration the level, the active set it solved
    for, the saturated set going in, who saturated (and, for ``leximin``, who was blocked)."""

    x: np.ndarray
    status: Status
    message: str = ""
    iterations: list[dict[str, Any]] = field(default_factory=list)
    lps: int = 0
    canonical: dict[str, Any] | None = None

    def details(self, variant: str) -> dict[str, Any]:
        """The sets of the last iteration and the story of every iteration, for ``Solution.details``."""
        last = self.iterations[-1] if self.iterations else {}
        return {"variant": variant,
                "saturated": [n for it in self.iterations for n in it["newly_saturated"]],
                "active": last.get("active", []) if variant == "paper" else [],
                "blocked": [n for it in self.iterations for n in it.get("blocked", [])],
                "iterations": self.iterations, "lps": self.lps, "canonical": self.canonical}


def run(inst: Instance, session: Session, coeff: np.ndarray, variant: str = "leximin",
        label: str = "TSF-ER", canonical: bool = True) -> LoopOutcome:
    """Algorithm 1 (``paper``) or progressive filling (``leximin``) on ``share_n = coeff_n X_n``;
    ``canonical`` picks the canonical split of the totals across servers: the leximin's
    (:func:`~fairalloc.models.maxmin.progressive_filling`), or Algorithm 1's. Every LP of Algorithm 1
    fixes every user's total (an active user's share is ``g``, a saturated user's total its limit), so
    its totals and its path are unique, but its last LP's vertex is the solver's: on random 8 × 3
    instances the four HiGHS routes returned splits up to a whole largest entry apart. Where it is kept
    (not under a ``customize`` hook, whose edits the split's own model of χ would not have), the
    split is :func:`~fairalloc.models.maxmin.canonical_split`'s, as for MNW."""
    if variant == "paper":
        out = _algorithm1(inst, session, coeff, label)
        if canonical and out.status.ok and session.customize is None:
            y, out.canonical = canonical_split(inst, session, out.x)
            if y is not None:
                out.x = y
        return out
    return _leximin(inst, session, coeff, label, canonical)


def _reached(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    return np.isfinite(T) & (X >= T * (1 - SAT_TOL))


def _algorithm1(inst: Instance, session: Session, coeff: np.ndarray, label: str) -> LoopOutcome:
    m = build_lp_taskshare(inst, coeff, label.lower())
    U, T = inst.users, inst.tasks
    active, saturated = list(range(inst.n_users)), []
    handle = session.open(m, "lp")
    if hasattr(handle, "resolve"):
        handle.resolve = ALG1_RESOLVE
    out = LoopOutcome(np.zeros((inst.n_users, inst.n_servers)), Status.OPTIMAL)
    while True:
        res = session.run(handle)
        out.lps += 1
        out.status = worst(out.status, res.status)
        if not res.ok:
            out.status = res.status
            out.message = f"LP-TaskShare {out.lps}: {res.solver} stopped ({res.status}: {res.message})"
            return out
        x = allocation(m.chi, inst)
        X = x.sum(axis=1)
        g = float(pyo.value(m.g)) if active else None
        hit = _reached(X, T)
        Q = [n for n in active if hit[n]]  # lines 6-8
        out.iterations.append({"iteration": out.lps, "level": g, "active": [U[n] for n in active],
                               "saturated": [U[n] for n in saturated],
                               "newly_saturated": [U[n] for n in Q]})
        log.info("%s Algorithm 1, LP %d: g = %s over %d active users; saturated so far: %s; "
                 "reached their limit now: %s", label, out.lps,
                 "-" if g is None else f"{g:.10g}", len(active),
                 names([U[n] for n in saturated]) or "none", names([U[n] for n in Q]) or "none")
        if not Q:  # lines 9-10
            out.x = x
            return out
        for n in Q:  # lines 11-12
            m.active_share[U[n]].deactivate()
            m.saturated[U[n]].activate()
        active = [n for n in active if n not in Q]
        saturated += Q
        if not active:  # (8f) is empty: g would be unbounded; what is left is (8b)-(8e)
            m.g.fix(0.0)
        handle.update(variables=not active)


def _leximin(inst: Instance, session: Session, coeff: np.ndarray, label: str,
             canonical: bool = True) -> LoopOutcome:
    m = leximin_model(inst, coeff, label.lower(), doc="normalised share of user n")
    mm = progressive_filling(m, session, m.share,
                             canonical=allocation_scale(m.chi, inst) if canonical else None)
    x = allocation(m.chi, inst)
    U = inst.users
    pos = {u: n for n, u in enumerate(U)}
    # a user frozen at level ℓ was stopped by its limit when ℓ = coeff·T (its floor row keeps it a
    # hair below ℓ, so compare the level, not X, with the limit)
    level = np.array([mm.levels.get(u, np.inf) for u in U])
    reached = np.isfinite(inst.tasks) & (level >= coeff * inst.tasks * (1 - 1e-7))
    out = LoopOutcome(x, mm.status, mm.message, lps=mm.lps, canonical=mm.canonical)
    done: list[str] = []
    saturated: list[str] = []
    for k, rd in enumerate(mm.rounds, 1):
        frozen = rd["frozen"]
        newly = [n for n in frozen if reached[pos[n]]]
        blocked = [n for n in frozen if not reached[pos[n]]]
        out.iterations.append({"iteration": k, "level": rd["level"],
                               "active": [n for n in U if n not in done],
                               "saturated": list(saturated), "newly_saturated": newly,
                               "blocked": blocked, "lps": rd["lps"]})
        log.info("%s round %d: level %.10g; reached their limit: %s; blocked by resources: %s; "
                 "%d users still rising", label, k, rd["level"], names(newly) or "none",
                 names(blocked) or "none", inst.n_users - len(done) - len(frozen))
        done += frozen
        saturated += newly
    return out


@mechanism("tsf-er", problem="lp", build=build, needs_demands=False,
           reference="[TSFER] §4, Alg. 1, (8a)-(8f); §8 (weights, several external resources)",
           summary="max-min of task shares X/(φ·η) with saturated/active users (TSF-ER)",
           params=[Param("variant", choice(*VARIANTS), "leximin",
                         "leximin: exact lexicographic max-min (progressive filling); paper: "
                         "Algorithm 1 as printed (users leave the active set only at T[n])"),
                   CANONICAL])
def solve(inst: Instance, session: Session, variant: str = "leximin", canonical: bool = True) -> Solution:
    coeff = task_share_coeff(inst)
    out = run(inst, session, coeff, variant, canonical=canonical)
    U = inst.users
    share = out.x.sum(axis=1) * coeff
    return Solution(out.x, out.status, out.message, details={
        "eta": dict(zip(U, inst.eta)), "task_share": dict(zip(U, share)), **out.details(variant)})
