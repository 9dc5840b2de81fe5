r"""Utilitarian and relative-utilitarian allocations ([TSFER] §3.1).

.. math::

    \text{utilitarian:}\quad \max_{x\in\chi} \sum_n X_n \qquad\qquad
    \text{relative utilitarian:}\quad \max_{x\in\chi} \sum_n \frac{X_n}{\eta_n}

``η_n`` is the most tasks ``n`` could run alone ([TSFER] (6)); normalising by it makes the objective
invariant to rescaling any user's utility. Both are single LPs over χ; their optima are usually not
unique (a solver returns a vertex). Neither is envy-free or sharing-incentive ([TSFER] §3.1).

**Canonical optimum** (default; ``-p canonical=false`` returns the solver's vertex): among the
optimal allocations (the face of optima pinned by complementary slackness with the LP's multipliers;
:mod:`fairalloc.solvers.canonical`), the vertex maximising ``Σ_{n,i} h_{n,i} x_{n,i}/η_n`` with ``h`` a
fixed hash of the user's and the server's names — two more LPs (the welfare LP again, for its
multipliers, and the tie-break). It does not depend on the solver, its algorithm, the order of users
and servers in the file or the units of a resource; ``details.canonical.face`` says how the face was
pinned.
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, allocation_scale, feasible_set
from fairalloc.registry import CANONICAL, Solution, mechanism
from fairalloc.solvers import Session
from fairalloc.solvers.canonical import report


def build(inst: Instance, relative: bool = False) -> pyo.ConcreteModel:
    """χ and ``max Σ_n w_n X_n`` with ``w_n = 1`` (utilitarian) or ``1/η_n`` (relative)."""
    m = pyo.ConcreteModel(name=f"{'relative-' if relative else ''}utilitarian[{inst.name}]")
    m.chi = feasible_set(inst)
    w = dict(zip(inst.users, 1.0 / inst.eta if relative else np.ones(inst.n_users)))
    m.objective = pyo.Objective(expr=sum(w[n] * m.chi.X[n] for n in m.chi.N), sense=pyo.maximize)
    return m


def _solve(inst: Instance, session: Session, relative: bool, canonical: bool) -> Solution:
    m = build(inst, relative)
    out = session.solve(m, "lp")
    status, message = out.status, "" if out.ok else out.message
    details = {"objective": out.objective, "eta": dict(zip(inst.users, inst.eta))}
    if out.ok and canonical:
        can = session.canonical(m, allocation_scale(m.chi, inst), out.objective)
        details["canonical"] = report(can)
        if not can.ok:  # the LP's vertex stands: optimal, but not the canonical one
            message = f"canonical tie-break failed ({can.status.value}: {can.message}); solver's vertex"
    x = allocation(m.chi, inst) if out.has_point else np.zeros((inst.n_users, inst.n_servers))
    return Solution(x, status, message, details=details)


@mechanism("utilitarian", problem="lp", needs_demands=False, reference="[TSFER] §3.1", params=[CANONICAL],
           build=lambda inst, **p: build(inst, False), summary="max Σ X[n] over χ (one LP)")
def solve_utilitarian(inst: Instance, session: Session, canonical: bool = True) -> Solution:
    return _solve(inst, session, relative=False, canonical=canonical)


@mechanism("relative-utilitarian", problem="lp", needs_demands=False, reference="[TSFER] §3.1",
           params=[CANONICAL], build=lambda inst, **p: build(inst, True),
           summary="max Σ X[n]/η[n] over χ (one LP)")
def solve_relative(inst: Instance, session: Session, canonical: bool = True) -> Solution:
    return _solve(inst, session, relative=True, canonical=canonical)
