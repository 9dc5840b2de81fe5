r"""Bottleneck fairness (docs/verification.md; [APF] Def. 2, [PSDSF] §III-B, DRF's "bottleneck fairness").

**Premise** ([APF] (6)): a server resource ``ρ`` is a *bottleneck* when it is the dominant resource of
every eligible user at every server,

.. math::

    \frac{d_{n,\rho}}{c_{i,\rho}} \ \ge\ \frac{d_{n,r}}{c_{i,r}} \qquad \forall i,\ \forall r,\
    \forall n \in N_i \quad (N_i:\ \text{the users that can run on } i).

**Property**: the allocation is then weighted max-min fair in ``ρ``: the weighted amounts of ``ρ`` the
users hold, ``a_n = X_n d_{n,\rho} / \phi_n``, are the lexicographic max-min vector ``a^*`` over χ.
Under the premise every other row of a server is implied by its ``ρ`` row (``Σ_n x_{n,i} d_{n,r}/c_{i,r}
≤ Σ_n x_{n,i} d_{n,ρ}/c_{i,ρ}``), so this is single-resource max-min fairness on a bipartite
user–server graph; its unique ``a^*`` is computed by progressive filling
(:mod:`~fairalloc.models.maxmin`) on the shared χ. It is the allocation [APF] §2.2 calls fair in its
Fig. 1 example and the one PS-DSF gives under the premise ([APF] Thm 4: the PS-DSF certificate then
says "ρ is saturated at every server and each server serves only its eligible users of least
``a_n``", the optimality condition of this max-min problem).

**Measure**: ``gap = max_n |a_n − a^*_n| / a^*_n`` (0 iff max-min fair), with the user furthest off.

The premise is checked on the capacity form only: with external resources a pool outside every server
can be the real bottleneck (Def. 2 does not speak of them), and on the time-shared form each server's
one resource, its time, is demanded at a server-dependent rate (``1/γ[n,i]``), so there is no global
``ρ``; per server, max-min fairness in time is the PS-DSF certificate ([APF] Thm 5). Both report
``holds: null`` with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation
from fairalloc.models.maxmin import leximin_model, progressive_filling
from fairalloc.solvers import Session

__all__ = ["bottleneck_fair", "bottleneck_resources", "maxmin_in_resource"]


def bottleneck_resources(inst: Instance, rtol: float = 1e-12) -> list[str]:
    """Every server resource ``ρ`` satisfying [APF] (6) at every server (empty if none; the time-shared
    form and instances with external resources have none in this sense)."""
    if inst.time_shared or inst.external:
        return []
    d, c = inst.demand, inst.capacity
    found = []
    for rho in range(len(inst.resources)):
        ok = True
        for i in range(inst.n_servers):
            users = np.flatnonzero(inst.runnable[:, i])
            if not users.size:
                continue
            if c[i, rho] <= 0:
                ok = False
                break
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(d[users] > 0, d[users] / np.where(c[i] > 0, c[i], 1.0), 0.0)
            if (ratio.max(axis=1) > ratio[:, rho] * (1 + rtol)).any():
                ok = False
                break
        if ok:
            found.append(inst.resources[rho])
    return found


def maxmin_in_resource(inst: Instance, rho: str, session: Session | None = None
                       ) -> tuple[np.ndarray, Any]:
    """The weighted max-min fair totals in ``ρ``: leximin of ``X_n d_{n,ρ}/(φ_n c_ρ)`` over χ
    (``c_ρ`` the total capacity of ``ρ``, a scale only). Returns ``(X*, outcome)``."""
    r = inst.resources.index(rho)
    coef = inst.demand[:, r] / (inst.weight * inst.capacity[:, r].sum())
    m = leximin_model(inst, coef, f"maxmin[{rho}]",
                      doc="weighted share of the bottleneck resource")
    mm = progressive_filling(m, session or Session(), m.share)
    return allocation(m.chi, inst).sum(axis=1), mm


def bottleneck_fair(inst: Instance, x: np.ndarray, tol: float = 1e-6, session: Session | None = None
                    ) -> dict[str, Any]:
    """BF report: ``premise`` (a bottleneck resource exists), ``resource``, ``holds``, ``gap`` and the
    worst ``user`` with its weighted amount of ``ρ`` (``share``) and the max-min fair one
    (``fair_share``), both in units of ``ρ`` per unit weight."""
    base: dict[str, Any] = {"holds": None, "premise": False, "resource": None, "gap": None}
    if inst.time_shared:
        return {**base, "reason": "time-shared form: no demand vectors, so no global bottleneck "
                                  "resource ([APF] Def. 2); per server, max-min fairness in time is the "
                                  "PS-DSF certificate ([APF] Thm 5)"}
    if inst.external:
        return {**base, "reason": "external resources: [APF] Def. 2 covers server resources only, and "
                                  "an external pool can be the real bottleneck"}
    found = bottleneck_resources(inst)
    if not found:
        return {**base, "reason": "no resource is dominant for every eligible user at every server "
                                  "([APF] (6))"}
    rho = found[0]
    r = inst.resources.index(rho)
    X = np.asarray(x, float).sum(axis=1)
    Xs, mm = maxmin_in_resource(inst, rho, session)
    if not mm.status.ok:
        return {**base, "premise": True, "resource": rho,
                "reason": f"the max-min LP stopped: {mm.status.value} ({mm.message})"}
    a = X * inst.demand[:, r] / inst.weight
    a_star = Xs * inst.demand[:, r] / inst.weight
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = np.where(a_star > 0, np.abs(a - a_star) / np.where(a_star > 0, a_star, 1.0),
                       np.where(a > 0, np.inf, 0.0))
    n = int(np.argmax(dev))
    gap = float(dev[n])
    return {"holds": bool(gap <= tol), "premise": True, "resource": rho, "gap": gap,
            "user": inst.users[n], "share": float(a[n]), "fair_share": float(a_star[n]),
            "fair_tasks": {u: float(v) for u, v in zip(inst.users, Xs)}}
