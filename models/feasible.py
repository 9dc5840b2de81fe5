r"""The feasible set χ (docs/instance-format.md#the-model; [PSDSF] (4)–(5), [TSFER] (2)) as a Pyomo block.

.. math::

    \sum_n x_{n,i}\, d_{n,r} \le c_{i,r} \quad \forall i, r \in R
        \qquad\text{(time-shared form: } \textstyle\sum_n x_{n,i}/\gamma_{n,i} \le 1\text{)}

    \sum_n \sum_{i \in S_e} x_{n,i}\, d_{n,e} \le c_e \quad \forall e \in E

    \sum_i \mathrm{cost}_{n,i}\, x_{n,i} \le B_n \quad \forall n \text{ with a budget}

    X_n = \sum_i x_{n,i} \le T_n, \qquad x_{n,i} \ge 0,
    \qquad x_{n,i} = 0 \text{ unless } \delta_{n,i} = 1 \text{ and } \gamma_{n,i} > 0

Only the pairs ``(n, i)`` a user can actually run on get a variable (``chi.P``), and only rows that
carry at least one term are written, so placement constraints make the model smaller, not just more
constrained. Rows and ``X`` are built from numpy arrays as
:class:`~fairalloc.solvers.linear.ArrayLinearExpression` objects over ``chi.family`` (the variables
``chi.x`` in ``chi.P`` order): ordinary linear expressions to Pyomo, read as arrays by the solve
layer's compiler. Every mechanism builds on this block; none copies its constraints.

Components of the block ``chi`` (indices are the instance's names, so ``m.pprint()`` reads as the math):

- ``chi.N``, ``chi.K``, ``chi.R``, ``chi.E``: users, servers, server resources, external resources
- ``chi.P``: runnable pairs ``(user, server)``; ``chi.x[n, i] ≥ 0``; ``chi.pairs`` their positions
  ``(n, i)`` as an array and ``chi.family`` the variables in the same order
- ``chi.X[n]``: total tasks ``Σ_i x[n,i]`` (an ``Expression``)
- ``chi.capacity[i, r]``, ``chi.time[i]`` (time-shared form), ``chi.external[e]``, ``chi.limit[n]``,
  ``chi.budget[n]`` (users with a budget; with ``servers`` given, only those servers' costs count)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pyomo.environ as pyo
from pyomo.common.gc_manager import PauseGC

from fairalloc.instance import Instance
from fairalloc.solvers.canonical import ColumnScale
from fairalloc.solvers.linear import VarFamily, array_sum

__all__ = ["allocation", "allocation_scale", "feasible_set", "name_hash", "name_hashes", "pair_index",
           "pair_limit", "scale_chi"]


def pair_index(inst: Instance, servers: Sequence[int] | None = None) -> np.ndarray:
    """Runnable ``(n, i)`` positions, row-major (users outer), optionally restricted to ``servers``."""
    mask = inst.runnable.copy()
    if servers is not None:
        keep = np.zeros(inst.n_servers, bool)
        keep[list(servers)] = True
        mask &= keep[None, :]
    return np.argwhere(mask)


def feasible_set(inst: Instance, servers: Sequence[int] | None = None,
                 task_limits: bool = True, budgets: bool = True) -> pyo.Block:
    """Build χ for ``inst`` as a concrete block (assign it to a model: ``m.chi = feasible_set(inst)``).

    ``servers`` restricts the block to a subset of servers (per-server mechanisms); external
    resources then count only those servers' tasks. ``task_limits=False`` omits ``X[n] ≤ T[n]`` and
    ``budgets=False`` the budget rows (the per-server mechanisms turn both into column bounds that
    depend on the other servers' tasks).
    """
    with PauseGC():  # ~10⁶ expression objects: generational GC passes would triple the build time
        return _feasible_set(inst, servers, task_limits, budgets)


def _feasible_set(inst: Instance, servers: Sequence[int] | None, task_limits: bool,
                  budgets: bool = True) -> pyo.Block:
    U, S = inst.users, inst.servers
    pairs = pair_index(inst, servers)
    b = pyo.Block(concrete=True)
    b.N = pyo.Set(initialize=U, ordered=True)
    b.K = pyo.Set(initialize=[S[i] for i in sorted(set(pairs[:, 1].tolist()))] if servers is not None
                  else S, ordered=True)
    b.R = pyo.Set(initialize=inst.resources, ordered=True)
    b.E = pyo.Set(initialize=inst.external, ordered=True)
    b.P = pyo.Set(initialize=list(zip(np.array(U, object)[pairs[:, 0]].tolist(),
                                      np.array(S, object)[pairs[:, 1]].tolist())), dimen=2, ordered=True)
    b.x = pyo.Var(b.P, domain=pyo.NonNegativeReals, initialize=0.0)
    fam = b.family = VarFamily(b.x.values())  # same order as ``pairs``
    b.pairs = pairs  # positions (n, i) of each variable, for arrays <-> model
    pos = np.arange(len(pairs))

    # pairs are row-major, so each user's variables are one contiguous block
    start = np.searchsorted(pairs[:, 0], np.arange(inst.n_users + 1)) if len(pairs) else \
        np.zeros(inst.n_users + 1, int)
    b.X = pyo.Expression(b.N, initialize={
        U[n]: array_sum(np.ones(start[n + 1] - start[n]), pos[start[n]:start[n + 1]], fam)
        for n in range(inst.n_users)})

    order = np.argsort(pairs[:, 1], kind="stable")
    by_server = np.split(order, np.flatnonzero(np.diff(pairs[order, 1])) + 1) if len(pairs) else []
    if inst.time_shared:
        rows = {}
        for g in by_server:
            i = int(pairs[g[0], 1])
            rows[S[i]] = array_sum(1.0 / inst.gamma[pairs[g, 0], i], g, fam) <= 1.0
        b.time = pyo.Constraint(list(rows), rule=lambda blk, s: rows[s])
    else:
        rows = {}
        for g in by_server:
            i = int(pairs[g[0], 1])
            d = inst.demand[pairs[g, 0]]  # (users on i) × R
            for r, rname in enumerate(inst.resources):
                nz = np.flatnonzero(d[:, r] > 0)
                if nz.size:
                    rows[S[i], rname] = array_sum(d[nz, r], g[nz], fam) <= float(inst.capacity[i, r])
        b.capacity = pyo.Constraint(list(rows), rule=lambda blk, s, r: rows[s, r])
    erows = {}
    for e, ename in enumerate(inst.external):
        sel = np.flatnonzero(inst.external_scope[e, pairs[:, 1]] & (
            inst.external_demand[pairs[:, 0], e] > 0)) if len(pairs) else np.zeros(0, int)
        if sel.size:
            erows[ename] = array_sum(inst.external_demand[pairs[sel, 0], e], sel, fam) <= float(
                inst.external_capacity[e])
    b.external = pyo.Constraint(list(erows), rule=lambda blk, e: erows[e])
    brows = {}
    for n in inst.budgeted if budgets else ():
        blk = np.arange(start[n], start[n + 1])
        cost = inst.budget_cost[n, pairs[blk, 1]] if blk.size else np.zeros(0)
        nz = np.flatnonzero(cost > 0)
        if nz.size:
            brows[U[n]] = array_sum(cost[nz], blk[nz], fam) <= float(inst.budget_limit[n])
    b.budget = pyo.Constraint(list(brows), rule=lambda blk, u: brows[u])
    if task_limits:
        limit = {U[n]: float(inst.tasks[n]) for n in np.flatnonzero(np.isfinite(inst.tasks))
                 if start[n + 1] > start[n]}
        b.limit = pyo.Constraint(list(limit), rule=lambda blk, u: blk.X[u] <= limit[u])
    return b


def pair_limit(inst: Instance) -> np.ndarray:
    """The most tasks user ``n`` can run on server ``i`` with nothing else in χ: ``γ[n,i]`` capped by
    every external resource whose scope holds ``i`` (``c_e/d[n,e]``), the task limit ``T_n`` and the
    budget (``B_n/cost[n,i]``); ``0`` off the runnable pairs. The natural unit of ``x[n,i]``."""
    lim = np.where(inst.runnable, inst.gamma, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        for e in range(len(inst.external)):
            d = inst.external_demand[:, e]
            cap = np.where(d > 0, inst.external_capacity[e] / np.where(d > 0, d, 1.0), np.inf)
            lim = np.where(inst.external_scope[e][None, :], np.minimum(lim, cap[:, None]), lim)
        lim = np.minimum(lim, inst.tasks[:, None])
        if inst.budget_cost is not None and inst.has_budgets:
            c = inst.budget_cost
            lim = np.minimum(lim, np.where(c > 0, inst.budget_limit[:, None] / np.where(c > 0, c, 1.0),
                                           np.inf))
    return lim


def scale_chi(chi: pyo.Block, suffix: pyo.Suffix, inst: Instance) -> np.ndarray:
    """Write χ's scaling into ``suffix`` (a model's export ``scaling_factor`` suffix, which Pyomo's NL
    writer applies: the solver sees ``s·v`` and ``s·row``) and return the units ``u[n,i]``: ``x[n,i]``
    is counted in units of :func:`pair_limit` (``γ[n,i]`` where that limit is 0), and every row is
    divided by its bound (the time rows' bound is 1 already), so every coefficient of a row is at
    most 1. (Units of the weighted share ``w_n·L[n,i]`` instead made MUMPS reallocate and factorise
    ten times slower on a 200 × 32 MNW.)

    An NLP then reads the same whatever units the instance is written in, and Ipopt's absolute
    tolerances become relative ones: without it, users with 10⁻⁷ tasks next to users with 10³ left 77
    of 200 wide fuzz instances' MNW uncertified (duality gaps up to 5.5·10⁻² of Σφ).
    """
    lim = pair_limit(inst)
    unit = np.where(lim > 0, lim, inst.gamma)
    for (n, i), v in zip(chi.pairs, chi.x.values()):
        suffix[v] = 1.0 / float(unit[n, i])
    for name in ("capacity", "time", "external", "budget", "limit"):
        if not hasattr(chi, name):  # chi.time only in the time-shared form, chi.limit with limits
            continue
        for con in getattr(chi, name).values():
            ub = pyo.value(con.upper)
            suffix[con] = 1.0 / ub if ub is not None and 0 < ub < np.inf else 1.0
    return unit


def allocation(chi: pyo.Block, inst: Instance, values: np.ndarray | None = None) -> np.ndarray:
    """The allocation ``x`` (users × servers) held in ``chi`` (or given as ``values`` in
    ``chi.P`` order, e.g. from :meth:`HighsBridge.values`)."""
    if values is None:
        values = np.fromiter((v.value or 0.0 for v in chi.x.values()), float, len(chi.pairs))
    x = np.zeros((inst.n_users, inst.n_servers))
    if len(chi.pairs):
        x[chi.pairs[:, 0], chi.pairs[:, 1]] = np.maximum(values, 0.0)
    return x


def name_hash(user: str, server: str) -> float:
    """A number in ``[1, 2)`` fixed by the two names alone (BLAKE2b): the canonical tie-break's weight
    of the pair, the same wherever the user and the server sit in the file."""
    digest = hashlib.blake2b(f"{user}\x00{server}".encode(), digest_size=8).digest()
    return 1.0 + int.from_bytes(digest, "big") / 2.0**64


def name_hashes(users: Sequence[str], servers: Sequence[str], pairs: np.ndarray) -> np.ndarray:
    """:func:`name_hash` of every pair ``(users[n], servers[i])`` of ``pairs`` (the same numbers;
    each user's prefix is hashed once and copied, the digests converted in one numpy call)."""
    if not len(pairs):
        return np.zeros(0)
    b2 = hashlib.blake2b
    pre = [b2(f"{u}\x00".encode(), digest_size=8) for u in users]
    enc = [str(s).encode() for s in servers]
    out = []
    for n, i in pairs.tolist():
        h = pre[n].copy()
        h.update(enc[i])
        out.append(h.digest())
    return 1.0 + np.frombuffer(b"".join(out), ">u8").astype(np.float64) / 2.0**64


def allocation_scale(chi: pyo.Block, inst: Instance) -> ColumnScale:
    """``{x[n,i]: (η_n, h[n,i])}`` (a :class:`~fairalloc.solvers.canonical.ColumnScale`, a mapping held
    as arrays): each allocation variable with its user's own scale and the pair's hashed weight, for
    the canonical tie-break (:mod:`fairalloc.solvers.canonical`), which maximises
    ``Σ h[n,i]·x[n,i]/η_n`` on the face of optima. Users with ``η_n = 0`` are left out."""
    eta = np.asarray(inst.eta, float)
    n = chi.pairs[:, 0] if len(chi.pairs) else np.zeros(0, int)
    h = name_hashes([str(u) for u in inst.users], [str(s) for s in inst.servers], chi.pairs)
    return ColumnScale(chi.family.variables, eta[n], h, group=n)


def uniform_split(inst: Instance) -> np.ndarray:
    """The weighted equal split: user ``n`` gets the share ``w_n = φ_n/Σφ`` of every server and of
    every external resource, and runs ``x[n,i] = w_n·γ[n,i]·f_n`` where ``f_n ≤ 1`` scales the user down
    to its share of the external resources and to its task limit ([APF] (41); [TSFER] Def. 6).

    Feasible, and strictly positive on every runnable pair: the starting point for the NLPs, whose
    objectives are unbounded at ``X = 0``.
    """
    w = inst.weight / inst.weight.sum()
    g = inst.gamma
    f = np.ones(inst.n_users)
    for e in range(len(inst.external)):
        use = (g * inst.external_scope[e][None, :]).sum(axis=1) * inst.external_demand[:, e]
        with np.errstate(divide="ignore"):
            f = np.minimum(f, np.where(use > 0, inst.external_capacity[e] / np.where(use > 0, use, 1),
                                       np.inf))
    x = (w * f)[:, None] * g
    X = x.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.where(X > inst.tasks, inst.tasks / X, 1.0)
    return x * cap[:, None]
