r"""The PS-DSF certificate ([PSDSF] Def. 3, Thm 1).

A feasible allocation is PS-DSF iff every user has a *bottleneck resource* at every eligible server:
a resource ``r`` with ``d[n,r] > 0`` that is saturated at ``i`` (``Σ_m x[m,i] d[m,r] = c[i,r]``) and on
which no user with a positive allocation has a larger weighted virtual dominant share:

.. math::

    \frac{s_{n,i}}{\phi_n} \ge \frac{s_{m,i}}{\phi_m} \quad \forall m:\ x_{m,i} d_{m,r} > 0,
    \qquad s_{n,i} = X_n / \gamma_{n,i} \quad \text{([PSDSF] (12)–(13))}.

On the time-shared form each server has one resource, its time: saturated when
``Σ_m x[m,i]/γ[m,i] = 1``, demanded by every user that can run there.

Beyond the paper (its users have unlimited tasks and no budgets): a user with a task limit that has
received it (``X_n = T_n``) cannot rise anywhere: its bottleneck is its limit (``"tasks"``); a user that has
spent its budget (``Σ_j c[n,j] x[n,j] = B_n``) cannot rise where a task costs something (``c[n,i] > 0``:
``"budget"``); and a pair at an upper bound that an edited model put on ``x[n,i]`` (``bounds``, from a
``customize`` hook) cannot rise there (``"bound"``). An external resource ``e`` is a resource of every
server ``i`` in its scope, saturated when the whole pool is (``Σ_{m, j∈S_e} x[m,j] d[m,e] = c_e``) and
held at ``i`` by the users with ``x[m,i] d[m,e] > 0``: Thm 1 at server ``i`` of the generalised game where
``i`` has what the other servers leave of ``e``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fairalloc.instance import Instance

__all__ = ["psdsf_certificate"]


def psdsf_certificate(inst: Instance, x: np.ndarray, tol: float = 1e-6,
                      bounds: np.ndarray | None = None) -> dict[str, Any]:
    """Check [PSDSF] Thm 1 on ``x``; name every (user, server) pair without a bottleneck resource.

    ``tol`` is relative to what it tests: a resource is saturated when its usage is within ``tol·c`` of
    its capacity, VDS comparisons allow ``tol·s``, and a user holds a server when its tasks there are
    more than ``tol`` of its total. Returns ``holds``, ``failures`` (list of ``{user, server, reason}``)
    and, for every pair that passes, its ``bottleneck`` resource. ``bounds`` (users × servers,
    ``inf`` = none) are upper bounds on single pairs (an edited model's column bounds).
    """
    x = np.asarray(x, float)
    vds = inst.vds(x, weighted=True)
    pos = x > tol * np.abs(x).sum(axis=1, keepdims=True)
    if inst.time_shared:
        with np.errstate(divide="ignore", invalid="ignore"):
            used = np.where(inst.gamma > 0, x / np.where(inst.gamma > 0, inst.gamma, 1), 0.0).sum(0)
        demand = inst.runnable[:, :, None].astype(float)  # (N, K, 1): time, for runnable users
        usage, cap, names = used[:, None], np.ones((inst.n_servers, 1)), ("time",)
    else:
        demand = np.broadcast_to(inst.demand[:, None, :], (inst.n_users, inst.n_servers,
                                                          len(inst.resources)))
        usage, cap, names = x.T @ inst.demand, inst.capacity, inst.resources
        if inst.external:  # a row of every server in its scope, saturated when the whole pool is
            scope = inst.external_scope.T  # (K, E)
            ext = inst.external_demand[:, None, :] * scope[None]  # (N, K, E)
            total = np.einsum("nke,nk->e", ext, x)
            demand = np.concatenate([demand, ext], axis=2)
            usage = np.hstack([usage, np.broadcast_to(total, scope.shape)])
            cap = np.hstack([cap, np.broadcast_to(inst.external_capacity, scope.shape)])
            names = names + inst.external
    saturated = usage >= cap * (1 - tol)  # (K, R)
    X = x.sum(axis=1)
    at_limit = X >= inst.tasks * (1 - tol)
    B = inst.budget_limit
    spent = (inst.budget_cost * x).sum(axis=1)
    broke = np.isfinite(B) & (spent >= B * (1 - tol))
    capped = (np.zeros_like(x, bool) if bounds is None else
              np.isfinite(bounds) & (x >= bounds * (1 - tol)))
    # worst[i, r]: the largest weighted VDS among the holders of r at i (-inf when none)
    dem = demand > 0  # (N, K, R)
    held = pos[:, :, None] & dem
    worst = np.where(held, vds[:, :, None], -np.inf).max(axis=0)  # (K, R)
    ok = (dem & saturated[None] & (vds[:, :, None] >= (worst - tol * np.abs(worst))[None]))
    first = np.where(ok.any(axis=2), ok.argmax(axis=2), -1)  # the first bottleneck resource (N, K)
    # each pair's bottleneck, as an index into ``labels`` (-1: none); a limit, budget or bound comes first
    labels = (*names, "tasks", "budget", "bound")
    code = np.where(at_limit[:, None], len(names),
                    np.where(broke[:, None] & (inst.budget_cost > 0), len(names) + 1,
                             np.where(capped, len(names) + 2, first)))
    code = np.where(inst.runnable, code, -2)  # (-2: not eligible, nothing to certify)
    failures: list[dict[str, str]] = []
    for n, i in np.argwhere(code == -1):
        sat = [names[r] for r in range(len(names)) if demand[n, i, r] > 0 and saturated[i, r]]
        reason = ("no saturated resource it demands" if not sat else
                  f"a user with a larger weighted VDS holds each saturated resource ({', '.join(sat)})")
        failures.append({"user": inst.users[n], "server": inst.servers[i], "reason": reason})
    bottleneck: dict[str, dict[str, str]] = {}
    for n, row in enumerate(code):
        held_at = np.flatnonzero(row >= 0)
        if held_at.size:
            bottleneck[inst.users[n]] = {inst.servers[i]: labels[k] for i, k in zip(held_at, row[held_at])}
    return {"holds": not failures, "failures": failures, "bottleneck": bottleneck}
