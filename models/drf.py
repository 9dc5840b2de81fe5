r"""DRF — Dominant Resource Fairness on one resource pool ([PSDSF] §II-A; Ghodsi et al., NSDI 2011).

All servers (and external resources) are pooled into one server ``pool`` with capacities
``c_r = Σ_i c_{i,r}``; placement constraints do not exist in the pooled model ([PSDSF] (4)–(5)). DRF is
the weighted max-min of dominant shares ``s_n = X_n max_r d_{n,r}/c_r`` ([PSDSF] (2)–(3), Def. 1) — i.e.
DRFH (:mod:`~fairalloc.models.drfh`) on the pooled instance, so the model is built there, once.

On an instance with several servers the result's allocation is on the single server ``pool`` and
``details.pooled`` is true; verification then checks it against the pooled instance.

Golden numbers (docs/examples.md#drf-ghodsi): one server ``{cpu 9, mem 18}``, demands ``{1, 4}``, ``{3,
1}``: ``X = (3, 2)``.
"""

from __future__ import annotations

import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models import drfh
from fairalloc.registry import Solution, mechanism
from fairalloc.solvers import Session


def build(inst: Instance) -> pyo.ConcreteModel:
    """The DRFH model of the pooled instance."""
    inst.require_demands("drf")
    m = drfh.build(inst.pooled())
    m.name = f"drf[{inst.name}]"
    return m


@mechanism("drf", problem="lp", build=build, reference="[PSDSF] §II-A, (2)-(5), Def. 1",
           summary="weighted max-min of dominant shares on one pooled server (Ghodsi et al.)")
def solve(inst: Instance, session: Session) -> Solution:
    inst.require_demands("drf")
    pooled = inst.pooled()
    sol = drfh.solve(pooled, session)
    sol.servers = pooled.servers
    sol.details["pooled"] = inst.n_servers > 1
    return sol
