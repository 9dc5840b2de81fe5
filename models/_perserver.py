r"""What the per-server mechanisms (PS-DSF, αPF-VDS) share: each server's own rows, the weighted
virtual dominant shares, and the deviation from PS-DSF ``D_n`` of [APF] (58).

Server ``i`` sees its eligible users ``N_i`` (runnable pairs), its own resource rows and the users' totals
``X_n``. In the capacity form the rows are ``Σ_n x[n,i] d[n,r] ≤ c[i,r]`` for every resource some user of
``N_i`` demands (the rows χ writes); in the time-shared form there is one row, the server's time,
``Σ_n x[n,i]/γ[n,i] ≤ 1`` — a resource whose per-task demand ``1/γ[n,i]`` depends on the server.
:class:`ServerRows` holds both as a demand matrix and a capacity vector so the numpy algorithms (Algorithm I
of [PSDSF], PS-MFA and the distributed heuristic of [APF]) are written once.

Neither paper defines its game with a pool shared by several servers (an external resource), with task
limits or with budgets (all couple the servers' decisions into a generalised game), so
:func:`require_per_server` rejects such instances — except for the algorithms that take them as our
extension: server ``i`` may give user ``n`` only what the others leave (:func:`coupling_room`, a column
bound of server ``i``'s model), a user that has used up its limit or budget cannot rise there, and an
external resource ``e`` is a row of every server in its scope ``S_e`` whose capacity is what the other
servers of ``S_e`` leave, ``c_e − Σ_{j∈S_e, j≠i} Σ_n x[n,j] d[n,e]`` (:func:`external_room`,
:func:`rows_at`; see :mod:`~fairalloc.models.psdsf` and :mod:`~fairalloc.models.apf_vds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairalloc.errors import InstanceError
from fairalloc.instance import Instance
from fairalloc.registry import Solution

__all__ = [
    "ServerRows",
    "add_room",
    "column_bounds",
    "coupled_users",
    "coupling_room",
    "deviation_from_psdsf",
    "expose_all_pairs",
    "external_room",
    "on_grid",
    "require_per_server",
    "room_columns",
    "rows_at",
    "server_rows",
    "set_room",
    "solve_in_name_order",
    "task_unit",
    "weighted_vds",
    "with_room",
]


def solve_in_name_order(inst: Instance, session: Any, solve: Callable[..., Solution],
                        recheck: Callable[[Instance, np.ndarray, Solution], tuple[Any, str, dict[str, Any]]],
                        **params: Any) -> Solution | None:
    """Solve the instance with its users, servers, resources and external resources sorted by name and
    map the allocation back; ``None`` when all four are sorted already or a ``customize`` hook is given
    (it receives the instance, which must then be the file's).

    The sweeps of the per-server loops visit servers in index order and break ties by position, and
    where the fixed point is not unique (PS-DSF's generally is not) another order of the same input can
    end at another fixed point. Run in name order, every order of the file gives the same allocation.
    ``recheck(inst, x, solution)`` returns the status, message and details of ``x`` on the instance as
    given (its certificate recomputed there); they replace the reordered run's."""
    if getattr(session, "customize", None) is not None:
        return None
    orders = inst.name_order()
    if orders is None:
        return None
    users, servers, resources, external = orders
    sol = solve(inst.take(users, servers, resources, external), session, **params)
    x = np.empty_like(sol.allocation)
    x[np.ix_(users, servers)] = sol.allocation
    status, message, details = recheck(inst, x, sol)
    return Solution(x, status, message or sol.message, details={**sol.details, **details},
                    zero_tol=sol.zero_tol)


def require_per_server(inst: Instance, mechanism: str, allow_limits: bool = False,
                       limits_hint: str = "omit 'tasks'", budget_hint: str = "omit 'budget'",
                       allow_external: bool = False, external_hint: str = "use tsf-er, cru or mnw") -> None:
    """Raise a clear error for what the per-server games of [PSDSF]/[APF] do not define (task limits and
    budgets only where ``allow_limits``, external resources only where ``allow_external``; the hints say
    what to do instead)."""
    if inst.external and not allow_external:
        raise InstanceError(f"{inst.name}: mechanism '{mechanism}' is per-server ([PSDSF] §III, [APF] §3): "
                            f"external resources ({', '.join(inst.external)}) couple the servers and "
                            f"are not part of its game; {external_hint}")
    if inst.has_task_limits and not allow_limits:
        users = [u for u, t in zip(inst.users, inst.tasks) if np.isfinite(t)]
        raise InstanceError(f"{inst.name}: mechanism '{mechanism}' is per-server ([PSDSF] §III, [APF] §3): "
                            f"task limits (users {', '.join(users)}) couple the servers and are not "
                            f"part of its game; {limits_hint}")
    if inst.has_budgets and not allow_limits:
        users = [inst.users[n] for n in inst.budgeted]
        raise InstanceError(f"{inst.name}: mechanism '{mechanism}' is per-server ([PSDSF] §III, [APF] §3): "
                            f"budgets (users {', '.join(users)}) couple the servers and are not part of "
                            f"its game; {budget_hint}")


def task_unit(inst: Instance) -> np.ndarray:
    """``k_n = max_i γ[n,i]`` over the user's runnable servers (1 where it has none): the unit of user
    ``n``'s tasks in :func:`normalized`, free of the units of every resource."""
    k = np.where(inst.runnable, inst.gamma, 0.0).max(axis=1)
    return np.where(k > 0, k, 1.0)


def normalized(inst: Instance) -> tuple[Instance, np.ndarray, np.ndarray]:
    """The same per-server game in units where every number is near 1: each resource measured in its
    largest capacity (``ρ_r``), each user's task in ``k_n = max_i γ[n,i]`` of its own tasks. Returns
    ``(instance, k, ρ)``; an allocation ``x'`` of the normalised instance is ``x = k_n·x'`` here.

    Both games are the same: the VDS ``X_n/(φ_n γ[n,i])``, every row ``Σ_n x[n,i] d[n,r] ≤ c[i,r]`` (up to
    the factor ``ρ_r``), task limits and budgets are unchanged by the change of units, so equilibria map
    one to one; a multiplier ``λ'`` of the normalised row ``r`` is ``ρ_r λ``. External resources are
    measured in their capacity (``ρ`` then lists them after the server resources). Users who feed bytes
    next to cores, or a user whose task is 10⁻⁴ of another's, then meet the solver's tolerances at one
    scale."""
    k = task_unit(inst)
    lim = inst.tasks / k
    cost = inst.budget_cost * k[:, None]
    if inst.time_shared:
        out = inst.replace(rates=inst.rates / k[:, None], tasks=lim, budget_cost=cost)
        return out, k, np.ones(1)
    cap = inst.capacity
    rho = cap.max(axis=0)
    rho = np.where(rho > 0, rho, 1.0)
    extra: dict[str, Any] = {}
    if inst.external:  # each external resource in its own capacity
        ec = np.where(inst.external_capacity > 0, inst.external_capacity, 1.0)
        extra = {"external_capacity": inst.external_capacity / ec,
                 "external_demand": inst.external_demand * k[:, None] / ec[None, :]}
        rho = np.concatenate([rho, ec])
    out = inst.replace(capacity=cap / rho[None, :len(inst.resources)],
                       demand=inst.demand * k[:, None] / rho[None, :len(inst.resources)],
                       tasks=lim, budget_cost=cost, **extra)
    return out, k, rho


def on_grid(inst: Instance, bits: int = 32) -> Instance:
    """The instance with every capacity, demand, rate, task limit and budget rounded to the nearest
    number of ``bits`` significant bits (a change of at most ``2^-bits`` relative: 2.3·10⁻¹⁰ at 32).

    Run on :func:`normalized`'s instance: two files that state the same instance in other units give
    normalised numbers that differ in their last bits, and a loop whose fixed point is not unique (PS-DSF)
    can end at another one from such a difference. On the grid both are the same numbers, unless one lies
    within those last bits of the midpoint between two grid points (about 10⁻⁶ per number at 32 bits;
    rounding to nearest, because the numbers that are on the grid in exact arithmetic — a normalised
    demand equal to 1 — are the common ones)."""
    def grid(v: np.ndarray) -> np.ndarray:
        m, e = np.frexp(np.asarray(v, float))
        return np.ldexp(np.where(np.isfinite(m), np.round(m * 2.0**bits) / 2.0**bits, m), e)

    changes: dict[str, Any] = {"tasks": grid(inst.tasks), "budget_limit": grid(inst.budget_limit),
                               "budget_cost": grid(inst.budget_cost)}
    if inst.time_shared:
        changes["rates"] = grid(inst.rates)
    else:
        changes.update(capacity=grid(inst.capacity), demand=grid(inst.demand),
                       external_capacity=grid(inst.external_capacity),
                       external_demand=grid(inst.external_demand))
    return inst.replace(**changes)


def canonical_split(inst: Instance, x: np.ndarray, tol: float = 1e-9) -> tuple[np.ndarray, dict[str, Any]]:
    r"""One split per PS-DSF allocation on the time-shared form: users whose rates are proportional
    across servers can trade time on them without changing anything the certificate sees, so the
    totals ``X_n`` are unique but the split is not. Among the splits that keep every total, keep
    every saturated server saturated and let only the users of least weighted VDS at a server hold
    time there (exactly what Thm 1 asks on a one-resource server), take the canonical vertex
    (:mod:`fairalloc.solvers.canonical`: ``max Σ h[n,i]·x[n,i]/X_n``, ``h`` a hash of the names). The
    certificate is checked on the result; the input comes back unchanged if it fails, and on the
    capacity form (where which users may hold a resource depends on the split itself)."""
    import pyomo.environ as pyo
    from pyomo.common.collections import ComponentMap

    from fairalloc.models.feasible import feasible_set, name_hash
    from fairalloc.solvers.canonical import canonical_point
    from fairalloc.verify.psdsf import psdsf_certificate

    x = np.asarray(x, float)
    if not inst.time_shared or inst.has_task_limits or inst.has_budgets:
        return x, {"rule": "none (capacity form, task limits or budgets: the solver's split)"}
    X = x.sum(axis=1)
    s = weighted_vds(inst, x)
    least = np.nanmin(np.where(inst.runnable, s, np.inf), axis=0)
    may = inst.runnable & (s <= least[None, :] * (1 + 1e-6)) & (X[:, None] > 0)  # the certificate's ties
    used = np.where(inst.runnable, x / np.where(inst.runnable, inst.gamma, 1.0), 0.0).sum(axis=0)
    m = pyo.ConcreteModel(name=f"ps-dsf-split[{inst.name}]")
    m.chi = chi = feasible_set(inst, task_limits=False, budgets=False)
    scale = ComponentMap()
    for (n, i), v in zip(chi.pairs.tolist(), chi.x.values()):
        if may[n, i]:
            v.set_value(float(x[n, i]))
            scale[v] = (float(X[n]), name_hash(inst.users[n], inst.servers[i]))
        else:
            v.fix(0.0)
    keep = [u for n, u in enumerate(inst.users) if X[n] > 0]
    total = dict(zip(inst.users, X.tolist()))
    m.total = pyo.Constraint(keep, rule=lambda m, u: pyo.inequality(total[u] * (1 - tol), chi.X[u],
                                                                    total[u] * (1 + tol)))
    full = {srv: float(used[i]) for i, srv in enumerate(inst.servers)
            if used[i] >= 1 - 1e-6 and srv in chi.time}  # saturated stays saturated
    m.saturated = pyo.Constraint(list(full), rule=lambda m, srv: chi.time[srv].body
                                 >= full[srv] * (1 - 1e-12))
    m.objective = pyo.Objective(expr=0.0)
    out = canonical_point(m, scale)
    info = {"rule": "canonical vertex of the PS-DSF splits with these totals", "status": out.status.value}
    if not out.ok:
        return x, info
    y = np.zeros_like(x)
    for (n, i), v in zip(chi.pairs.tolist(), chi.x.values()):
        y[n, i] = max(0.0, float(v.value or 0.0))
    if not psdsf_certificate(inst, y)["holds"] or np.abs(y.sum(axis=1) - X).max(initial=0.0) > 1e-7 * max(
            1.0, float(X.max(initial=0.0))):
        info["status"] = "rejected (certificate)"
        return x, info
    return y, info


def expose_all_pairs(model: Any, inst: Instance, i: int) -> None:
    """Give server ``i``'s model a variable ``chi.x[user, server]`` for every runnable pair, so a
    ``customize`` hook written for the whole allocation (``m.chi.x["u2", "s1"].setub(0.2)``) runs on every
    server's model. The other servers' pairs are fixed at 0 and enter no row or objective: an edit of
    them does nothing here and takes effect in their own server's model."""
    chi = model.chi
    for n, j in np.argwhere(inst.runnable):
        if j != i:
            key = (inst.users[n], inst.servers[j])
            chi.P.add(key)
            chi.x[key].fix(0.0)


def column_bounds(variables: list[Any]) -> np.ndarray:
    """The upper bounds of ``variables`` (``inf`` where none): read once a ``customize`` hook has run, so
    the per-server loops keep the user's bounds when they set their own."""
    return np.array([np.inf if v.ub is None else float(v.ub) for v in variables])


def coupled_users(inst: Instance, i: int, users: np.ndarray) -> np.ndarray:
    """Positions (into ``users``) of the users whose tasks on server ``i`` are bounded by what the other
    servers leave them: a finite task limit, or a budget with a positive cost at ``i``."""
    t = np.isfinite(inst.tasks[users])
    b = np.isfinite(inst.budget_limit[users]) & (inst.budget_cost[users, i] > 0)
    return np.flatnonzero(t | b)


def coupling_room(inst: Instance, x: np.ndarray, i: int, users: np.ndarray) -> np.ndarray:
    r"""The most tasks server ``i`` may give each of ``users`` when the other servers hold ``x``:

    .. math::

        \min\Big(T_n - \sum_{j\ne i} x_{n,j},\ \frac{B_n - \sum_{j\ne i} c_{n,j} x_{n,j}}{c_{n,i}}\Big)^+

    (``inf`` for a user with neither a task limit nor a priced budget at ``i``)."""
    x = np.asarray(x, float)[users]
    room = inst.tasks[users] - (x.sum(axis=1) - x[:, i])
    cost = inst.budget_cost[users]
    priced = np.isfinite(inst.budget_limit[users]) & (cost[:, i] > 0)
    if priced.any():
        spent = (cost * x).sum(axis=1) - cost[:, i] * x[:, i]
        with np.errstate(divide="ignore", invalid="ignore"):
            left = np.where(priced, (inst.budget_limit[users] - spent) / np.where(priced, cost[:, i], 1.0),
                            np.inf)
        room = np.minimum(room, left)
    return np.maximum(room, 0.0)


@dataclass(frozen=True)
class ServerRows:
    """Server ``i``'s rows: ``demand`` (N × R_i, zero for users not in ``N_i``), ``capacity`` (R_i),
    row ``names`` and the eligible users ``users`` (indices of ``N_i``)."""

    server: int
    demand: np.ndarray
    capacity: np.ndarray
    names: tuple[str, ...]
    users: np.ndarray

    def usage(self, x_i: np.ndarray) -> np.ndarray:
        """``Σ_n x[n,i] d[n,r]`` for this server's rows."""
        return x_i @ self.demand

    def slack(self, x_i: np.ndarray) -> np.ndarray:
        return self.capacity - self.usage(x_i)


def server_rows(inst: Instance) -> list[ServerRows]:
    """Every server's rows, in the order χ (:func:`~fairalloc.models.feasible.feasible_set`) writes them."""
    out = []
    for i in range(inst.n_servers):
        users = np.flatnonzero(inst.runnable[:, i])
        if inst.time_shared:  # one row, the server's time; per-task demand 1/γ[n,i]
            if len(users):
                d = np.zeros((inst.n_users, 1))
                d[users, 0] = 1.0 / inst.gamma[users, i]
                out.append(ServerRows(i, d, np.ones(1), ("time",), users))
            else:
                out.append(ServerRows(i, np.zeros((inst.n_users, 0)), np.zeros(0), (), users))
            continue
        keep = (inst.demand[users] > 0).any(axis=0) if len(users) else np.zeros(len(inst.resources), bool)
        d = np.zeros((inst.n_users, int(keep.sum())))
        d[users] = inst.demand[np.ix_(users, np.flatnonzero(keep))]
        out.append(ServerRows(i, d, inst.capacity[i, keep].astype(float),
                              tuple(r for r, k in zip(inst.resources, keep) if k), users))
    return out


def external_room(inst: Instance, x: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The external resources server ``i``'s tasks use (``e`` with ``i`` in its scope ``S_e``) and what the
    other servers leave of each:

    .. math::

        c_e - \sum_{j \in S_e,\, j \ne i} \sum_n x_{n,j}\, d_{n,e}

    (clipped at 0) — server ``i``'s capacity of ``e`` in the generalised game (:func:`rows_at`)."""
    x = np.asarray(x, float)
    use = np.flatnonzero(inst.external_scope[:, i])
    if not len(use):
        return use, np.zeros(0)
    scope = inst.external_scope[use].astype(float)  # (E_i, K)
    scope[:, i] = 0.0
    held = np.einsum("ne,nk,ek->e", inst.external_demand[:, use], x, scope)
    return use, np.maximum(inst.external_capacity[use] - held, 0.0)


def add_room(model: Any, inst: Instance) -> None:
    """Give the external rows of a per-server model (``model.chi``, χ restricted to one server) a mutable
    right-hand side ``model.room[e]``, the capacity the other servers leave (full until
    :func:`set_room`). Nothing without external rows."""
    import pyomo.environ as pyo

    rows = model.chi.external
    if not len(rows):
        return
    full = dict(zip(inst.external, inst.external_capacity.tolist()))
    model.room = pyo.Param(list(rows), mutable=True, initialize={e: full[e] for e in rows},
                           doc="c_e − Σ_{j≠i} Σ_n x[n,j] d[n,e]: what the other servers leave")
    for e, con in rows.items():
        con.set_value(con.body <= model.room[e])


def set_room(model: Any, inst: Instance, x: np.ndarray, i: int) -> bool:
    """Set ``model.room`` (:func:`add_room`) to what the other servers leave at ``x`` (a room within
    ``10⁻⁹`` of the capacity from 0 is 0: at the LP solver's tolerance a leximin round on such a row was
    "infeasible"); ``False`` when the model has no such rows."""
    if not hasattr(model, "room"):
        return False
    use, left = external_room(inst, x, i)
    left[left <= 1e-9 * inst.external_capacity[use]] = 0.0
    for e, v in zip(use, left):
        if inst.external[e] in model.room:
            model.room[inst.external[e]] = float(v)
    return True


def rows_at(inst: Instance, x: np.ndarray, rows: list[ServerRows] | None = None) -> list[ServerRows]:
    """Every server's rows in the generalised game at ``x``: its own (:func:`server_rows`, or ``rows``),
    then one row per external resource in its scope that one of its users demands, with the demands
    ``d_{n,e}`` and the capacity the other servers leave (:func:`external_room`). Without external
    resources these are the server's own rows."""
    rows = server_rows(inst) if rows is None else rows
    if not inst.external:
        return rows
    return [with_room(inst, x, r) for r in rows]


def room_columns(inst: Instance, x: np.ndarray, i: int, users: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Server ``i``'s external rows at ``x`` for ``users``: the resources in its scope (indices), the
    users' demands of them (``len(users)`` × those) and what the other servers leave of each
    (:func:`external_room`)."""
    use, room = external_room(inst, x, i)
    return use, inst.external_demand[np.ix_(users, use)], room


def with_room(inst: Instance, x: np.ndarray, row: ServerRows) -> ServerRows:
    """Server ``row.server``'s rows with its external rows at ``x`` appended (:func:`rows_at`; those its
    users demand)."""
    if not inst.external:
        return row
    i, U = row.server, row.users
    use, d, room = room_columns(inst, x, i, U)
    keep = (d > 0).any(axis=0) if len(U) else np.zeros(len(use), bool)
    if not keep.any():
        return row
    extra = np.zeros((inst.n_users, int(keep.sum())))
    extra[U] = d[:, keep]
    return ServerRows(i, np.hstack([row.demand, extra]), np.concatenate([row.capacity, room[keep]]),
                      row.names + tuple(inst.external[e] for e in use[keep]), U)


def weighted_vds(inst: Instance, x: np.ndarray) -> np.ndarray:
    """``s̃[n,i] = X_n/(φ_n γ[n,i])`` on runnable pairs, ``nan`` elsewhere ([PSDSF] (12))."""
    X = np.asarray(x, float).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = X[:, None] / (inst.weight[:, None] * inst.gamma)
    return np.where(inst.runnable, s, np.nan)


def deviation_from_psdsf(inst: Instance, x: np.ndarray) -> np.ndarray:
    r"""``D_n(x) = Σ_i (x[n,i]/X_n)·(s̃[n,i] − min_m s̃[m,i]) / min_m s̃[m,i]`` ([APF] (58)), the minimum
    over the users eligible at ``i``. Zero at a PS-DSF allocation when every user demands every resource
    (then every user with ``x[n,i] > 0`` has the smallest weighted VDS at ``i``)."""
    x = np.asarray(x, float)
    s = weighted_vds(inst, x)
    smin = np.nanmin(np.where(inst.runnable, s, np.inf), axis=0)  # (K,)
    X = x.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(inst.runnable & (x > 0), (s - smin[None, :]) / smin[None, :], 0.0)
        return np.where(X > 0, (x * rel).sum(axis=1) / np.where(X > 0, X, 1.0), 0.0)
