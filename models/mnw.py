r"""MNW — maximum Nash welfare (Eisenberg–Gale; proportional fairness) ([TSFER] §3.2).

.. math::

    \max_{x \in \chi,\ u} \ \sum_n \phi_n \log u_n \qquad \text{s.t.}\quad u_n = X_n = \sum_i x_{n,i}

over the feasible set χ (task limits included). The auxiliary ``u[n]`` keeps the Hessian diagonal
(``log(Σ_i x[n,i])`` would give dense blocks; ~3× faster at 50k variables, ``SOLVERS.md``). The log is
unbounded at ``X = 0``, so the solve starts from the weighted equal split
(:func:`~fairalloc.models.feasible.uniform_split`, strictly positive) and ``u[n] ≥ 0`` is only a bound
Ipopt's interior point never touches.

With unlimited tasks MNW is EF, PO and SI but not SP ([TSFER] Thm 2). It is the α = 1 case of αPF-VDS
when demands are server-independent ([APF] Thm 2) — the two are computed independently and compared in
the tests. ``form="epigraph"`` writes ``max Σ φ_n t_n`` s.t. ``exp(t_n) ≤ u_n`` instead, the form in
which SCIP closes the gap (``--solver scip``; used automatically then).

Golden numbers (SPEC §4.4, [TSFER] Fig. 2): ``x[u1,s2] = x[u2,s1] = 5``.
"""

from __future__ import annotations

import math

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, feasible_set, uniform_split
from fairalloc.registry import Param, Solution, choice, mechanism
from fairalloc.solvers import Session


def build(inst: Instance, form: str = "log") -> pyo.ConcreteModel:
    """χ, ``u[n] = X[n]`` and the Nash-welfare objective, initialised at the weighted equal split."""
    m = pyo.ConcreteModel(name=f"mnw[{inst.name}]")
    m.chi = feasible_set(inst)
    start = uniform_split(inst)
    for (n, i), v in zip(m.chi.pairs, m.chi.x.values()):
        v.set_value(float(start[n, i]))
    X0 = dict(zip(inst.users, start.sum(axis=1)))
    phi = dict(zip(inst.users, inst.weight))
    m.u = pyo.Var(m.chi.N, bounds=(0, None), initialize=X0, doc="u[n] = X[n]")
    m.define_u = pyo.Constraint(m.chi.N, rule=lambda m, n: m.u[n] == m.chi.X[n])
    if form == "epigraph":
        m.t = pyo.Var(m.chi.N, initialize={n: math.log(X0[n]) for n in m.chi.N})
        m.epigraph = pyo.Constraint(m.chi.N, rule=lambda m, n: pyo.exp(m.t[n]) <= m.u[n])
        m.objective = pyo.Objective(expr=sum(phi[n] * m.t[n] for n in m.chi.N), sense=pyo.maximize)
    else:
        m.objective = pyo.Objective(expr=sum(phi[n] * pyo.log(m.u[n]) for n in m.chi.N),
                                    sense=pyo.maximize)
    return m


@mechanism("mnw", problem="nlp", needs_demands=False, build=build, reference="[TSFER] §3.2, Thm 2",
           summary="max Σ φ[n] log X[n] over χ (Eisenberg–Gale), by Ipopt",
           params=[Param("form", choice("log", "epigraph"), "log",
                         "objective form: log, or the epigraph exp(t) <= u (default for SCIP)")])
def solve(inst: Instance, session: Session, form: str = "log") -> Solution:
    if session.solver_for("nlp").name == "scip":
        form = "epigraph"
    m = build(inst, form)
    out = session.solve(m, "nlp")
    x = allocation(m.chi, inst) if out.has_point else np.zeros((inst.n_users, inst.n_servers))
    return Solution(x, out.status, "" if out.ok else out.message, zero_tol=1e-7, details={
        "objective": out.objective, "form": form, "kkt": out.kkt,
        "start": dict(zip(inst.users, uniform_split(inst).sum(axis=1)))})
