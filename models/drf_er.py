r"""DRF-ER — Dominant Resource Fairness with External Resource ([TSFER] §3.3, its ref. [37]).

DRF-ER equalises the users' *global dominant shares* and, unlike DRF-α
(:mod:`~fairalloc.models.alpha_split`), lets the split of the external resource across servers be a
decision variable. Over all splits the feasible set is χ itself (the external rows of χ bound the total
use), so DRF-ER is TSF-ER's loop (:func:`fairalloc.models.tsf_er.run`) with the dominant share in place
of the task share:

.. math::

    c_r = \sum_i c_{i,r}\ (r \in R), \quad c_e\ (e \in E), \qquad
    \kappa_n = \max_{r \in R \cup E} \frac{d_{n,r}}{c_r}, \qquad \text{share}_n = \frac{\kappa_n X_n}{\phi_n}.

``variant="paper"`` runs Algorithm 1 ((8a)–(8f) with this share: all active users at one common
dominant share, users leave only at their task limit); the default ``leximin`` is the lexicographic
max-min of the weighted dominant shares over χ — which is exactly DRFH (:mod:`~fairalloc.models.drfh`)
on the same instance, since DRFH already counts the external resources in κ and in χ. The tests check
that identity; the paper variant differs from DRFH when a user is blocked by a resource the others do
not use.

[TSFER] Table 2: DRF-ER is EF, PO and SP but not SI.
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models import tsf_er
from fairalloc.models.maxmin import leximin_model
from fairalloc.registry import CANONICAL, Param, Solution, choice, mechanism
from fairalloc.solvers import Session


def dominant_share_coeff(inst: Instance) -> np.ndarray:
    """``κ_n/φ_n``: the weighted global dominant share is this times ``X_n``."""
    return inst.dominant_coeff / inst.weight


def build(inst: Instance, variant: str = "leximin", **_: object) -> pyo.ConcreteModel:
    """The first LP of the loop on dominant shares."""
    inst.require_demands("drf-er")
    coeff = dominant_share_coeff(inst)
    if variant == "paper":
        return tsf_er.build_lp_taskshare(inst, coeff, "drf-er")
    return leximin_model(inst, coeff, "drf-er", doc="normalised share of user n")


@mechanism("drf-er", problem="lp", build=build, reference="[TSFER] §3.3 (DRF-ER of its ref. [37])",
           summary="TSF-ER's loop on global dominant shares κX/φ (the external split is free)",
           params=[Param("variant", choice(*tsf_er.VARIANTS), "leximin",
                         "leximin: lexicographic max-min (= drfh); paper: Algorithm 1's loop"),
                   CANONICAL])
def solve(inst: Instance, session: Session, variant: str = "leximin", canonical: bool = True) -> Solution:
    inst.require_demands("drf-er")
    coeff = dominant_share_coeff(inst)
    out = tsf_er.run(inst, session, coeff, variant, label="DRF-ER", canonical=canonical)
    U = inst.users
    return Solution(out.x, out.status, out.message, details={
        "dominant_resource": dict(zip(U, inst.dominant_resource)),
        "dominant_share": dict(zip(U, inst.dominant_share(out.x))), **out.details(variant)})
