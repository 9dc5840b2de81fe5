r"""Utilitarian and relative-utilitarian allocations ([TSFER] §3.1).

.. math::

    \text{utilitarian:}\quad \max_{x\in\chi} \sum_n X_n \qquad\qquad
    \text{relative utilitarian:}\quad \max_{x\in\chi} \sum_n \frac{X_n}{\eta_n}

``η_n`` is the most tasks ``n`` could run alone ([TSFER] (6)); normalising by it makes the objective
invariant to rescaling any user's utility. Both are single LPs over χ; their optima are usually not
unique (HiGHS returns a vertex). Neither is envy-free or sharing-incentive ([TSFER] §3.1).
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, feasible_set
from fairalloc.registry import Solution, mechanism
from fairalloc.solvers import Session


def build(inst: Instance, relative: bool = False) -> pyo.ConcreteModel:
    """χ and ``max Σ_n w_n X_n`` with ``w_n = 1`` (utilitarian) or ``1/η_n`` (relative)."""
    m = pyo.ConcreteModel(name=f"{'relative-' if relative else ''}utilitarian[{inst.name}]")
    m.chi = feasible_set(inst)
    w = dict(zip(inst.users, 1.0 / inst.eta if relative else np.ones(inst.n_users)))
    m.objective = pyo.Objective(expr=sum(w[n] * m.chi.X[n] for n in m.chi.N), sense=pyo.maximize)
    return m


def _solve(inst: Instance, session: Session, relative: bool) -> Solution:
    m = build(inst, relative)
    out = session.solve(m, "lp")
    x = allocation(m.chi, inst) if out.has_point else np.zeros((inst.n_users, inst.n_servers))
    return Solution(x, out.status, "" if out.ok else out.message,
                    details={"objective": out.objective, "eta": dict(zip(inst.users, inst.eta))})


@mechanism("utilitarian", problem="lp", needs_demands=False, reference="[TSFER] §3.1",
           build=lambda inst: build(inst, False), summary="max Σ X[n] over χ (one LP)")
def solve_utilitarian(inst: Instance, session: Session) -> Solution:
    return _solve(inst, session, relative=False)


@mechanism("relative-utilitarian", problem="lp", needs_demands=False, reference="[TSFER] §3.1",
           build=lambda inst: build(inst, True), summary="max Σ X[n]/η[n] over χ (one LP)")
def solve_relative(inst: Instance, session: Session) -> Solution:
    return _solve(inst, session, relative=True)
