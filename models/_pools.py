r"""Exact aggregation of identical servers for the per-server mechanisms (PS-DSF, αPF-VDS).

Servers ``i`` and ``j`` are *identical* when they have the same capacities (or, on the time-shared form,
the same rates for every user), the same eligible users and the same per-task budget costs. A *pool* of
``m`` identical servers is replaced by one server with ``m`` times the capacities (rates), the game is
solved on the pooled instance, and every member gets ``1/m`` of the pool's allocation — the canonical
split among identical servers (any other split that keeps each member's rows is a solution too whenever
the even one is; the even split is the one that depends on neither the order nor the names of the
servers).

**Why it is exact.** Let member ``i`` of a pool ``p`` of ``m`` servers. Then ``γ_{n,i} = γ_{n,p}/m`` for
every user, so every VDS at ``i`` is ``m`` times the VDS at ``p`` (``s̃_{n,i} = m s̃_{n,p}``) and, with the
even split, a row of ``i`` is saturated exactly when the same row of ``p`` is and is held by the same
users.

- PS-DSF ([PSDSF] Thm 1): a bottleneck resource of user ``n`` at ``p`` (saturated, demanded by ``n``, held
  by no user of larger VDS) is one at every member, because all VDS at a member are scaled by the same
  ``m``. Users' totals ``X_n`` are unchanged, so nothing changes at the other servers.
- αPF-VDS ([APF] (28)–(31), ``g'(z) = (A/z)^α + B/z``): member ``i``'s marginal is
  ``g'(s̃_{n,i})/γ_{n,i} = (1/γ_{n,p})·(m^{1−α}(A/z)^α + B/z)`` with ``z = s̃_{n,p}``, which is the pool's
  marginal when the pool's server has ``A_p = A·m^{(1−α)/α}`` and ``B_p = B``
  (:func:`pooled_utility`). With the same multipliers ``λ_i = λ_p`` every complementarity pair of the
  member is the pool's. (α = 1: ``A_p = A``; α = ∞, PS-DSF: ``A`` plays no role.)

Servers with different utility parameters (per-server ``α_i, A_i, B_i``) are never pooled together:
pass them as ``keys``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fairalloc.instance import Instance
from fairalloc.registry import Solution
from fairalloc.result import snap_zeros

__all__ = ["describe", "expand", "pool", "pooled_instance", "pooled_utility", "server_pools",
           "solve_on_pools"]


def server_pools(inst: Instance, keys: Any = None) -> list[list[int]]:
    """Groups of identical servers (indices, each group in server order, groups ordered by their first
    member). ``keys``: an optional (K, …) array of per-server values that must agree as well."""
    K = inst.n_servers
    cols = [inst.eligible.T.astype(float)]
    cols.append(inst.rates.T if inst.time_shared else inst.capacity)
    if inst.budget_cost is not None:
        cols.append(inst.budget_cost.T)
    if inst.external_scope is not None:
        cols.append(inst.external_scope.T.astype(float))
    if keys is not None:
        cols.append(np.asarray(keys, float).reshape(K, -1))
    sig = np.hstack([np.asarray(c, float).reshape(K, -1) for c in cols])
    groups: dict[bytes, list[int]] = {}
    for i in range(K):
        groups.setdefault(np.ascontiguousarray(sig[i]).tobytes(), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def pool(inst: Instance, groups: list[list[int]]) -> Instance:
    """The pooled instance: one server per group (named after its member of least name — not its first,
    which depends on the file's order, and the canonical rules hash the names) with the summed capacities
    (time-shared: rates times the group's size)."""
    first = [g[0] for g in groups]
    size = np.array([len(g) for g in groups], float)
    servers = [_pool_name(inst, g) for g in groups]
    changes: dict[str, Any] = {"servers": tuple(servers), "eligible": inst.eligible[:, first],
                               "name": inst.name}
    if inst.time_shared:
        changes["rates"] = inst.rates[:, first] * size[None, :]
    else:
        changes["capacity"] = inst.capacity[first] * size[:, None]
    if inst.budget_cost is not None:
        changes["budget_cost"] = inst.budget_cost[:, first]
    if inst.external_scope is not None:
        changes["external_scope"] = inst.external_scope[:, first]
    return inst.replace(**changes)


def expand(x_pooled: np.ndarray, groups: list[list[int]], n_servers: int) -> np.ndarray:
    """The even split of each pool's allocation over its members (users × servers of the full instance)."""
    x = np.zeros((x_pooled.shape[0], n_servers))
    for p, g in enumerate(groups):
        x[:, g] = x_pooled[:, [p]] / len(g)
    return x


def pooled_utility(groups: list[list[int]], alpha: np.ndarray, A: np.ndarray, B: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pool ``(α, A_p, B_p)`` with ``A_p = A·m^{(1−α)/α}`` (see the module docstring)."""
    first = [g[0] for g in groups]
    m = np.array([len(g) for g in groups], float)
    a, A_, B_ = (np.asarray(v, float)[first] for v in (alpha, A, B))
    with np.errstate(divide="ignore", invalid="ignore"):
        expo = np.where(np.isfinite(a), (1.0 - a) / a, -1.0)
    return a, A_ * m**expo, B_


def pooled_instance(inst: Instance, keys: Any = None) -> tuple[Instance, list[list[int]]] | None:
    """``(pooled instance, groups)`` when some servers are identical, else ``None``."""
    groups = server_pools(inst, keys)
    if len(groups) == inst.n_servers:
        return None
    return pool(inst, groups), groups


def describe(inst: Instance, groups: list[list[int]]) -> dict[str, Any]:
    """``details.pools``: the pooled server's name → its members (pools of two or more only)."""
    return {_pool_name(inst, g): [inst.servers[i] for i in g] for g in groups if len(g) > 1}


def _pool_name(inst: Instance, group: list[int]) -> str:
    return min(inst.servers[i] for i in group)


def solve_on_pools(inst: Instance, session: Any, solve: Callable[..., Solution],
                   recheck: Callable[[Instance, np.ndarray, Solution], tuple[Any, str, dict[str, Any]]],
                   keys: Any = None, pooled_params: Callable[[list[list[int]]], dict[str, Any]] | None = None,
                   **params: Any) -> Solution | None:
    """Solve on the pooled instance and split evenly, or ``None`` when no two servers are identical or a
    ``customize`` hook is given (it names the instance's own pairs).

    ``solve(pooled, session, **params)`` is the mechanism itself (``pooled_params(groups)`` overrides some
    parameters for the pooled servers, e.g. ``A_p``); ``recheck(inst, x, solution)`` returns the status,
    message and details of the even split on the *full* instance (its certificate is recomputed there).
    The pooled run's own details are kept under ``details.pooled``."""
    if getattr(session, "customize", None) is not None:
        return None
    got = pooled_instance(inst, keys)
    if got is None:
        return None
    P, groups = got
    sol = solve(P, session, **{**params, **(pooled_params(groups) if pooled_params else {})})
    # solver noise to zero first, as fairalloc.solve does for the result (a 1e-17 entry would count as a
    # served pair in the full instance's certificate)
    scale = np.maximum(np.asarray(P.eta, float), np.abs(sol.allocation).max(axis=1, initial=0.0))
    x = expand(snap_zeros(sol.allocation, sol.zero_tol, scale, np.where(P.runnable, P.gamma, np.inf)),
               groups, inst.n_servers)
    status, message, details = recheck(inst, x, sol)
    details = {**details, "pools": describe(inst, groups),
               "pooled": {"servers": len(groups), "status": sol.status.value, **sol.details}}
    return Solution(x, status, message or sol.message, details=details, zero_tol=sol.zero_tol)
