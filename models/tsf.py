r"""TSF — Task Share Fairness ([PSDSF] §II-B, [APF] §2.2; Wang et al.).

A user's *task share* normalises its tasks by the tasks it could run alone on every server, counting
zero capacities but ignoring explicit placement constraints ([PSDSF] §II-B):

.. math::

    \hat\gamma_{n,i} = \min_{r:\, d_{n,r}>0} \frac{c_{i,r}}{d_{n,r}}, \qquad
    \gamma^{TSF}_n = \sum_i \hat\gamma_{n,i}, \qquad \text{task share } = \frac{X_n}{\phi_n\,\gamma^{TSF}_n}.

TSF is the weighted lexicographic max-min of task shares over χ, by progressive filling. On the
time-shared form ``γ̂`` is the rate table.

Golden numbers (docs/examples.md#psdsf-fig1, [PSDSF] Fig. 1): ``γTSF = (6, 12)``, ``X = (4, 8)``.
"""

from __future__ import annotations

import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, allocation_scale
from fairalloc.models.maxmin import leximin_model, progressive_filling
from fairalloc.registry import CANONICAL, Solution, mechanism
from fairalloc.solvers import Session


def build(inst: Instance, **_: object) -> pyo.ConcreteModel:
    """χ, the task shares ``share[n] = X_n / (φ_n γTSF_n)`` and the max-min LP."""
    return leximin_model(inst, 1.0 / (inst.weight * inst.gamma_tsf), "tsf",
                         doc="weighted task share X_n/(φ_n γTSF_n)")


@mechanism("tsf", problem="lp", build=build, needs_demands=False, params=[CANONICAL],
           reference="[PSDSF] §II-B, [APF] §2.2",
           summary="weighted lexicographic max-min of task shares X/(φ·γTSF) over χ")
def solve(inst: Instance, session: Session, canonical: bool = True) -> Solution:
    m = build(inst)
    mm = progressive_filling(m, session, m.share,
                             canonical=allocation_scale(m.chi, inst) if canonical else None)
    x = allocation(m.chi, inst)
    return Solution(x, mm.status, mm.message, details={"canonical": mm.canonical,
        "gamma_tsf": dict(zip(inst.users, inst.gamma_tsf)),
        "task_share": dict(zip(inst.users, x.sum(1) / inst.gamma_tsf)),
        "levels": {str(n): v for n, v in mm.levels.items()}, "rounds": mm.rounds, "lps": mm.lps})
