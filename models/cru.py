r"""CRU — Cautious Relative Utilitarian allocation ([TSFER] §3.1, Thm 1).

Relative utilitarian welfare restricted to envy-free, sharing-incentive allocations:

.. math::

    \max_{x \in \chi}\ \sum_n \frac{X_n}{\eta_n}
    \quad\text{s.t.}\quad
    \mu_{n,m}\,\frac{\phi_n}{\phi_m} \sum_{i:\,\delta_{n,i}=1} x_{m,i} \le X_n \ \ \forall n \ne m
    \ \text{(EF)}, \qquad X_n \ge \psi_n \ \ \forall n \ \text{(SI)},

with ``μ[n,m] = min_{r ∈ R∪E: d[n,r]>0} d[m,r]/d[n,r]`` (the tasks ``n`` runs per task of ``m``'s
bundle, [TSFER] Lemma 2; ``n`` can only use what ``m`` holds on servers where ``n`` may run) and
``ψ[n]`` the [TSFER] Def. 6 threshold with weights (``si="tsfer"``, the default; ``si="apf"`` takes the
[APF]/[PSDSF] one instead — every server split by weight, the external resources ignored, so it can be
infeasible with a scarce external resource; both capped at ``T[n]``,
:func:`fairalloc.verify.fairness.si_threshold`). The paper
writes the objective ``Σ X/n_j``, which vanishes for unlimited tasks; docs/mechanisms/index.md#decisions
fixes it to ``Σ X/η``.
Rows with ``μ = 0`` are void and not written.

**Task limits.** A user that reaches ``T[n]`` envies nobody (its utility is capped at ``T[n]``), so the
EF rows above are too strong for it and the LP can be infeasible (two identical users on one server,
``T = (1, ∞)``: SI gives ``X_2 ≥ 5``, EF of user 1 gives ``X_2 ≤ X_1 ≤ 1``). ``form="milp"`` is the exact
model: a binary ``z[n]`` per user with a finite limit marks "``n`` reaches ``T[n]``",

.. math::

    X_n \ge T_n z_n, \qquad
    \mu_{n,m}\frac{\phi_n}{\phi_m}\sum_{i:\,\delta_{n,i}=1} x_{m,i} \le X_n + M_{n,m} z_n,
    \qquad M_{n,m} = \mu_{n,m}\frac{\phi_n}{\phi_m}\min(T_m, \eta_m),

where ``M`` bounds the left-hand side on χ (``Σ_i x[m,i] ≤ min(T_m, η_m)``). "``n`` envies no ``m``"
is "``X_n ≥ T_n`` or every EF row of ``n`` holds", so one binary per user is exact. HiGHS solves it
with a relative gap of 1e-9. ``form="auto"`` (the default) runs the LP without finite limits and the
MILP with them; the result says which form ran (``details.form``).

**Canonical optimum** (default; ``-p canonical=false`` returns the solver's vertex): the LP's optima
form a face; the result is its vertex maximising ``Σ h[n,i]·x[n,i]/η_n`` (``h`` a fixed hash of the
user's and the server's names) over the face of optima of χ with the EF and SI rows, pinned by
complementary slackness (:mod:`fairalloc.solvers.canonical`) — two more LPs. The MILP's binaries are
the solver's unless ``binaries="canonical"``: then one more MILP over the MILP's optima (objective
within :data:`FACE_REL`) maximises the same weighting (:func:`_tiebreak_milp`), and
:func:`canonical_binaries` sets ``z[n] = 1`` exactly for the users at their limit in its point, before
the LP tie-break with ``z`` fixed. The solver's binaries depend on the route: on one fuzz instance
HiGHS through the bridge left a user at its limit with ``z = 0`` and Pyomo's HiGHS interface with
``z = 1``, and the canonical splits differed by 0.44 of a user's total; on another the two routes'
optima had different totals (one more user at its limit). Not the default: the extra MILP cost 2.8×
at 256 × 32 (docs/mechanisms/cru.md).

Golden numbers (docs/examples.md#tsfer-fig2, [TSFER] Fig. 2): ``x[u1,s2] = x[u2,s1] = 5``.
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
from pyomo.core.expr.numeric_expr import LinearExpression

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, allocation_scale, feasible_set
from fairalloc.registry import CANONICAL, Param, Solution, choice, mechanism
from fairalloc.solvers import Session
from fairalloc.solvers.canonical import ColumnScale, report
from fairalloc.solvers.outcome import SolveOutcome
from fairalloc.status import Status
from fairalloc.verify.fairness import SI_DEFINITIONS, si_threshold

__all__ = ["build", "canonical_binaries", "envy_coefficients", "solve"]

MILP_OPTIONS = {"mip_rel_gap": 1e-9, "mip_abs_gap": 1e-12}  # HiGHS: exact, not its default 1e-4
LIMIT_REL = 1e-9  # a user with X_n ≥ (1 − LIMIT_REL)·T_n is at its limit (canonical_binaries)
FACE_REL = 1e-9  # the MILP's optima, for the choice of its binaries: within this of the optimum


def envy_coefficients(inst: Instance) -> np.ndarray:
    """``μ[n,m] = min_{r∈R∪E: d[n,r]>0} d[m,r]/d[n,r]`` (N×N; the diagonal is 1)."""
    inst.require_demands("cru")
    d = inst.all_demand
    dn = d[:, None, :]  # (n, 1, r)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(dn > 0, d[None, :, :] / np.where(dn > 0, dn, 1.0), np.inf)
    return ratio.min(axis=2)


def canonical_binaries(m: pyo.ConcreteModel, inst: Instance, rel: float = LIMIT_REL) -> None:
    """Set ``z[n] = 1`` exactly for the users at their task limit in the MILP's point (``X_n ≥ (1 −
    rel)·T_n``), ``0`` for the others. A user at its limit envies nobody, so its EF rows are void
    whatever the solver chose: this only relaxes the rows of the solver's ``z`` (``X_n ≥ T_n z_n``
    holds to ``rel`` for the users it sets), so the point stays optimal and the canonical tie-break
    then runs on one face per set of users at their limits, not one per solver's choice."""
    X = allocation(m.chi, inst).sum(axis=1)
    pos = {u: k for k, u in enumerate(inst.users)}
    for u, z in m.z.items():
        n = pos[u]
        z.set_value(1.0 if X[n] >= (1.0 - rel) * inst.tasks[n] else 0.0)


def _tiebreak_milp(m: pyo.ConcreteModel, session: Session, options: dict | None, optimum: float,
                   sc: ColumnScale) -> SolveOutcome:
    """The MILP once more over its optima (the objective row held within :data:`FACE_REL` of
    ``optimum``), maximising the canonical weighting ``Σ h[n,i]·x[n,i]/η_n``: which users reach their
    limits is then the rule's choice, not the solver's. Leaves its point in ``m`` (the first solve's
    where it fails); the model's own objective is restored. ``sc``: the tie-break's
    :func:`~fairalloc.models.feasible.allocation_scale`."""
    before = [(v, v.value) for v in m.component_data_objects(pyo.Var, descend_into=True)]
    m.tiebreak = pyo.Objective(expr=LinearExpression(
        constant=0.0, linear_coefs=(sc.h / sc.s).tolist(), linear_vars=list(sc.variables)),
        sense=pyo.maximize)
    m.face = pyo.Constraint(expr=m.objective.expr >= optimum - FACE_REL * max(abs(optimum), 1e-300))
    m.objective.deactivate()
    try:
        out = session.run(session.open(m, "milp", options))
        if not out.ok:
            for v, val in before:
                v.set_value(val, skip_validation=True)
        return out
    finally:
        m.objective.activate()
        m.del_component(m.tiebreak)
        m.del_component(m.face)


def _form(inst: Instance, form: str) -> str:
    if form == "auto":
        return "milp" if inst.has_task_limits else "lp"
    return form


def build(inst: Instance, form: str = "auto", si: str = "tsfer", **_: object) -> pyo.ConcreteModel:
    """χ, the EF and SI rows and ``max Σ X/η``; with ``form="milp"`` also ``z`` and the big-M rows."""
    inst.require_demands("cru")
    form = _form(inst, form)
    U = inst.users
    m = pyo.ConcreteModel(name=f"cru[{inst.name}]")
    m.chi = feasible_set(inst)
    chi = m.chi
    eta, phi, T = inst.eta, inst.weight, inst.tasks
    psi = si_threshold(inst, si)
    m.objective = pyo.Objective(expr=sum(chi.X[U[n]] / float(eta[n]) for n in range(inst.n_users)),
                                sense=pyo.maximize)
    m.sharing_incentive = pyo.Constraint(chi.N, rule=lambda m, u: chi.X[u] >= float(
        psi[U.index(u)]), doc=f"X[n] >= psi[n] (sharing incentive, si={si})")

    mu = envy_coefficients(inst)
    xs = list(chi.x.values())
    pairs = chi.pairs
    reach = [n for n in range(inst.n_users) if form == "milp" and np.isfinite(T[n])]
    if reach:
        m.z = pyo.Var([U[n] for n in reach], domain=pyo.Binary, doc="1: user n reaches T[n]")
        m.reach = pyo.Constraint([U[n] for n in reach],
                                 rule=lambda m, u: chi.X[u] >= float(T[U.index(u)]) * m.z[u])
    rows = {}
    for n in range(inst.n_users):
        for k in range(inst.n_users):
            if k == n or mu[n, k] <= 0:
                continue
            sel = np.flatnonzero((pairs[:, 0] == k) & inst.eligible[n, pairs[:, 1]])
            if not sel.size:
                continue
            a = float(mu[n, k] * phi[n] / phi[k])
            lhs = LinearExpression(constant=0.0, linear_coefs=[a] * sel.size,
                                   linear_vars=[xs[j] for j in sel])
            rhs = chi.X[U[n]]
            if n in reach:
                rhs = rhs + a * float(min(T[k], eta[k])) * m.z[U[n]]
            rows[U[n], U[k]] = lhs <= rhs
    m.envy_free = pyo.Constraint(list(rows), rule=lambda m, n, k: rows[n, k],
                                 doc="user n values m's bundle (on n's servers) at most X[n]")
    return m


@mechanism("cru", problem="lp", build=build, reference="[TSFER] §3.1, Thm 1",
           summary="max Σ X/η over χ with EF and SI rows (one LP; exact MILP with task limits)",
           params=[Param("form", choice("auto", "lp", "milp"), "auto",
                         "auto: the LP without finite task limits, the exact MILP with them; lp: "
                         "the paper's LP (may be infeasible with limits); milp: always the MILP"),
                   Param("si", choice(*SI_DEFINITIONS), "tsfer",
                         "sharing-incentive rows: tsfer ([TSFER] Def. 6) or apf (every server split by "
                         "weight; may be infeasible with a scarce external resource)"),
                   Param("binaries", choice("solver", "canonical"), "solver",
                         "the MILP's binaries (who is at its task limit): the solver's, or canonical "
                         "(one more MILP over its optima, maximising the canonical weighting; the "
                         "same on every solver route, about 3x the time)"),
                   CANONICAL])
def solve(inst: Instance, session: Session, form: str = "auto", si: str = "tsfer",
          binaries: str = "solver", canonical: bool = True) -> Solution:
    ran = _form(inst, form)
    m = build(inst, ran, si)
    problem = ran = "milp" if hasattr(m, "z") else "lp"  # milp without finite limits is the LP
    options = MILP_OPTIONS if problem == "milp" and "highs" in session.solver_for(problem).name \
        else None
    out = session.run(session.open(m, problem, options))
    status, message = out.status, "" if out.ok else out.message
    can = None
    if out.ok and canonical:
        scale = allocation_scale(m.chi, inst)
        if hasattr(m, "z") and binaries == "canonical":
            pick = _tiebreak_milp(m, session, options, float(out.objective), scale)
            if pick.ok:
                canonical_binaries(m, inst)
            else:  # the solver's binaries stand
                message = (f"canonical choice of the binaries failed ({pick.status.value}: "
                           f"{pick.message}); the solver's")
        can = session.canonical(m, scale, out.objective)
        if not can.ok:  # the LP's vertex stands: optimal, but not the canonical one
            message = f"canonical tie-break failed ({can.status.value}: {can.message}); solver's vertex"
    x = allocation(m.chi, inst) if out.has_point else np.zeros((inst.n_users, inst.n_servers))
    if out.status is Status.INFEASIBLE and ran == "lp" and inst.has_task_limits:
        message = ("the paper's CRU LP is infeasible with these task limits (a user at its limit "
                   "envies nobody, which the LP's EF rows ignore); form=milp (the default 'auto') "
                   "solves the exact model")
    U = inst.users
    details = {"form": ran, "objective": out.objective, "eta": dict(zip(U, inst.eta)),
               "si": si, "si_threshold": dict(zip(U, si_threshold(inst, si))),
               "envy_rows": len(m.envy_free),
               "canonical": None if can is None else report(can)}
    if hasattr(m, "z") and out.has_point:
        details["reached_limit"] = [u for u in m.z if (m.z[u].value or 0) > 0.5]
    if out.kkt is not None:
        details["kkt"] = out.kkt
    return Solution(x, status, message, details=details)
