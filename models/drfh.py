r"""DRFH — Dominant Resource Fairness for Heterogeneous servers ([PSDSF] §II-B; C-DRFH there when
placement constraints exist).

Each user's *global* dominant share is computed as if all servers were one pool and there were no
placement constraints ([PSDSF] (2), (6)):

.. math::

    c_r = \sum_i c_{i,r}, \qquad \kappa_n = \max_{r \in R \cup E} \frac{d_{n,r}}{c_r},
    \qquad s_n = \kappa_n X_n .

DRFH is the weighted lexicographic max-min of :math:`s_n/\phi_n` over the feasible set χ
(:mod:`~fairalloc.models.feasible`), computed by progressive filling
(:mod:`~fairalloc.models.maxmin`). External resources enter κ with their capacity ``c_e``.

Golden numbers (docs/examples.md#psdsf-fig1, [PSDSF] Fig. 1): ``X = (60/11, 72/11)``.
"""

from __future__ import annotations

import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, allocation_scale
from fairalloc.models.maxmin import leximin_model, progressive_filling
from fairalloc.registry import CANONICAL, Solution, mechanism
from fairalloc.solvers import Session


def build(inst: Instance, **_: object) -> pyo.ConcreteModel:
    """χ, the weighted dominant shares ``share[n] = κ_n X_n / φ_n`` and the max-min LP."""
    inst.require_demands("drfh")
    return leximin_model(inst, inst.dominant_coeff / inst.weight, "drfh",
                         doc="weighted global dominant share s_n/φ_n ([PSDSF] (6))")


@mechanism("drfh", problem="lp", build=build, reference="[PSDSF] §II-B, (6)", params=[CANONICAL],
           summary="weighted lexicographic max-min of global dominant shares over χ (C-DRFH)")
def solve(inst: Instance, session: Session, canonical: bool = True) -> Solution:
    m = build(inst)
    mm = progressive_filling(m, session, m.share,
                             canonical=allocation_scale(m.chi, inst) if canonical else None)
    x = allocation(m.chi, inst)
    return Solution(x, mm.status, mm.message, details={"canonical": mm.canonical,
        "dominant_resource": dict(zip(inst.users, inst.dominant_resource)),
        "dominant_share": dict(zip(inst.users, inst.dominant_share(x))),
        "levels": {str(n): v for n, v in mm.levels.items()}, "rounds": mm.rounds, "lps": mm.lps})
