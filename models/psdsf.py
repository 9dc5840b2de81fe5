r"""PS-DSF — Per-Server Dominant-Share Fairness ([PSDSF] §III; [APF] §2.3).

Every user has a *virtual dominant share* (VDS) with respect to every server it can run on,

.. math::

    \gamma_{n,i} = \delta_{n,i} \min_{r:\, d_{n,r}>0} \frac{c_{i,r}}{d_{n,r}}, \qquad
    \tilde s_{n,i} = \frac{X_n}{\phi_n\,\gamma_{n,i}}, \qquad X_n = \sum_j x_{n,j}
    \qquad \text{([PSDSF] (8), (12))}

and an allocation is PS-DSF (Def. 2) when no user's ``X_n`` can grow without taking from some user
``m`` at some server ``i`` with ``s̃_{m,i} ≤ s̃_{n,i}``. Thm 1: equivalently, every user has a *bottleneck
resource* at every eligible server — saturated, demanded by it, and held by no user of larger weighted
VDS there (:func:`fairalloc.verify.psdsf.psdsf_certificate` checks this; every result carries it).

Four ways to compute it (``-p algorithm=...``):

``fast`` (default)
    Capacity form: the best responses of ``best-response`` computed in numpy instead of by LPs
    (:func:`leximin_response`: progressive filling of server ``i``'s users' VDS with the other servers'
    tasks as offsets and task limits/budgets as column caps, one vectorised pass per saturating resource
    or capped batch), in over-relaxed Gauss–Seidel sweeps (:func:`fast`; a steady walk of the sweeps
    is extrapolated along its line), finished exactly: once the
    sweeps are close, the structure of the point (support, saturated resources, each pair's lowest
    saturated resource, users at their limits) turns Thm 1 into linear constraints in ``(x, X, τ)``
    (``τ`` a water level per saturated resource) solved as one LP (:func:`exact_finish`); the result
    must carry the certificate at ``10⁻⁹``, else the sweeps continue. A run not converged after
    ``NEWTON_AFTER`` sweeps (up to ``NEWTON_PAIRS`` users × servers) is handed to ``apf-vds``'s Newton
    method at ``α = inf`` and kept where it certifies (:func:`fast_then_newton`; ``-p newton=false``:
    the sweeps alone). Time-shared form: Thm 1 on
    one-resource servers is the KKT system of weighted proportional fairness ([APF] Thm 5 at α = 1),
    so PS-DSF is ``mnw``'s point (:func:`time_shared_mnw`), split canonically. With a ``customize``
    hook ``fast`` runs ``best-response`` (numpy cannot read the hook's edits; ``details.routed``).

``best-response``
    Server ``i``, given the other servers' allocation, solves the weighted lexicographic max-min of its
    eligible users' VDS — progressive filling (:mod:`~fairalloc.models.maxmin`) on server ``i``'s χ block
    with the other servers' tasks as constant offsets:

    .. math::

        \operatorname{lexmax}_{x_{\cdot,i} \in \chi_i}\ \Big(\frac{x_{n,i} + \sum_{j\ne i} x_{n,j}}
            {\phi_n \gamma_{n,i}}\Big)_{n \in N_i}

    At a fixed point every user is blocked at every eligible server by a saturated resource held only by
    users of no larger VDS: the certificate of Thm 1. Servers respond in turn (Gauss–Seidel sweeps) until
    no allocation moves by more than ``tol`` (status ``converged``) or ``max_iter`` sweeps pass
    (``iteration_limit``). One persistent Pyomo model per server; offsets are mutable parameters. A
    response whose LPs lose precision (status ``error``: a round's level below the last) is taken from
    the numpy :func:`leximin_response` instead (``details.numpy_responses`` counts them). A converged
    point that misses the certificate by the LPs' tolerance is settled by sweeps of the numpy response
    (``details.numpy_sweeps``; without a ``customize`` hook).

``paper``
    Algorithm I of [PSDSF] §III-C in numpy: start from DRF on each server alone; each server repeats
    "minimum VDS ``S*_i`` (16), its users ``N*_i``, their saturated resources ``R*_i``; if some
    ``r* ∈ R*_i`` passes Corollary 1 drop the users demanding it (17), else *Update-Allocation*": release
    the allocation of the largest-VDS holder ``n_r`` of each ``r ∈ R*_i`` (18), raise ``N*_i`` by ``β z*``
    with ``z* = min_r f_{i,r}/D*_{i,r}`` and ``β ∈ (0,1]`` the largest step keeping ``S*_i + βz*`` below
    the holders' new VDS. Sweeps repeat until a sweep makes no update. Two readings where the text is
    loose: Corollary 1 and the choice of ``n_r`` range over *all* users eligible at ``i`` (a user already
    given a bottleneck may still hold a resource with a larger VDS), and "saturated"/"equal" use the
    relative tolerance ``tol``.

``distributed``
    [PSDSF] §III-D: every period each server runs the same server procedure once, in a random order
    (seeded by ``seed``), from the current totals ``X_n`` only. The trajectory (largest change,
    certificate failures and totals per period) is recorded for plotting.

Every algorithm runs in normalised units (:func:`~fairalloc.models._perserver.normalized`: each resource in
its largest capacity, each user's task in its best ``γ``; the same game) unless a ``customize`` hook is
given; the allocation is mapped back and its noise set to zero before the certificate.

**One answer per input.** The fixed points are not unique, even in the totals, and which one a loop
reaches depends on the order it visits users and servers, on the last bits of the numbers and on the
vertex an LP solver returns. So every algorithm runs with users, servers and resources in name order
(:func:`~fairalloc.models._perserver.solve_in_name_order`; not with a ``customize`` hook, which receives
the instance as given), on normalised numbers rounded to 32 significant bits
(:func:`~fairalloc.models._perserver.on_grid`: other units of the same input give the same numbers),
and ``fast`` returns the canonical vertex of its finish LP (:func:`exact_finish` with ``canonical=True``:
``max Σ h[n,i] x[n,i]/k_n`` over the PS-DSF points of the structure, ``h`` the pairs' name hashes).

On the time-shared form ([PSDSF] §IV, [APF] Problem 2) each server has one resource, its time, with
per-task demand ``1/γ[n,i]``; nothing else changes.

**Task limits** (an extension; the paper's users have unlimited tasks) are accepted by ``fast`` and
``best-response`` only: server ``i`` may give user ``n`` at most ``T_n − Σ_{j≠i} x[n,j]`` (a column bound of
its model; a cap of ``fast``'s water-filling), and a user that has received ``T_n`` has its limit as its
bottleneck everywhere (the certificate's ``"tasks"``). Like PS-DSF itself, the fixed point need not be
unique: on Fig. 2 with ``T[u3] = 4`` the ``best-response`` sweeps return ``X = (2.8, 2.8, 4, 11.8)`` (``u3``
served by ``s1``), while ``(3.6, 3.6, 4, 10)`` (``u3`` on ``s2``) carries the certificate too. **Budgets**
likewise: server ``i`` may give ``n`` at most ``(B_n − Σ_{j≠i} c[n,j] x[n,j]) / c[n,i]`` where ``c[n,i] >
0`` (:func:`~fairalloc.models._perserver.coupling_room`); a spent budget is the bottleneck wherever a task
costs something (``"budget"``). **External resources** likewise (``fast`` and ``best-response``; no
pooling of identical servers): an external resource ``e`` is a resource of every server ``i`` in its scope,
with what the other servers leave of it, ``c_e − Σ_{j∈S_e, j≠i} Σ_n x[n,j] d[n,e]``, as ``i``'s capacity
(:func:`~fairalloc.models._perserver.external_room`: a row of ``fast``'s water-filling, the right-hand
side of the LP's row, one more saturated resource with its own level in :func:`exact_finish`); in the
certificate it is saturated when its pool is, and held at ``i`` by the users with ``x[m,i] d[m,e] > 0``.
On [TSFER] Fig. 2 (a link both servers share) PS-DSF gives ``x[u1,s2] = x[u2,s1] = 5``, the point of
CRU and MNW there, with cpu each user's bottleneck.

**customize**: with a hook every server's model holds a variable for every runnable pair (the others fixed
at 0, in no row: :func:`~fairalloc.models._perserver.expose_all_pairs`), so a hook for the whole
allocation runs on each; the hook's column bounds are kept under the loop's own and read by the
certificate (``"bound"``). Rows a hook adds are honoured by every response; the certificate cannot read
them, so such a run ends ``converged`` as a fixed point of the edited LPs.

Golden numbers (docs/examples.md (psdsf-fig1, psdsf-fig2, psdsf-table3)): Fig. 1 ``x[u1,s1] = x[u2,s2] =
6``; Fig. 2 ``X = (3.6, 3.6, 8, 8)``;
Table IV (weights 2, 2, 1, 1) ``X = (210, 105, 82.5, 27.5)``.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models._perserver import (
    ServerRows,
    add_room,
    canonical_split,
    column_bounds,
    coupled_users,
    coupling_room,
    expose_all_pairs,
    normalized,
    on_grid,
    require_per_server,
    room_columns,
    server_rows,
    set_room,
    solve_in_name_order,
    task_unit,
    weighted_vds,
)
from fairalloc.models._pools import solve_on_pools
from fairalloc.models.feasible import feasible_set, name_hashes
from fairalloc.models.maxmin import add_maxmin, progressive_filling
from fairalloc.registry import Param, Solution, as_bool, as_float, as_int, choice, mechanism
from fairalloc.result import snap_zeros
from fairalloc.solvers import Session
from fairalloc.status import Status, worst
from fairalloc.verify.psdsf import psdsf_certificate

__all__ = ["ServerLeximin", "algorithm_i", "best_response", "build", "distributed", "fast",
           "leximin_response", "server_procedure"]

log = logging.getLogger(__name__)

# how each server's leximin LPs are re-solved (HighsBridge.resolve). HiGHS's warm choice: 7.7 s
# for a 40 x 6 instance against 9.9 s from scratch. Primal simplex returns other optimal vertices
# of the (degenerate) best responses, and the sweeps then did not settle (309 425 LPs, cap reached)
RESOLVE = "warm"


# ---------------------------------------------------------------------- best response (LP)
class ServerLeximin:
    """Server ``i``'s best response: a persistent Pyomo model (χ restricted to ``i``, the VDS with
    offsets, the max-min block) re-solved by progressive filling whenever the offsets change."""

    def __init__(self, inst: Instance, i: int) -> None:
        self.inst, self.i = inst, i
        self.users = np.flatnonzero(inst.runnable[:, i])
        m = pyo.ConcreteModel(name=f"ps-dsf[{inst.name}]@{inst.servers[i]}")
        m.chi = feasible_set(inst, servers=[i], task_limits=False, budgets=False)
        names = [inst.users[n] for n in self.users]
        s = inst.servers[i]
        m.offset = pyo.Param(names, mutable=True, initialize=0.0,
                             doc="tasks of the user on the other servers, Σ_{j≠i} x[n,j]")
        coef = {inst.users[n]: 1.0 / (inst.weight[n] * inst.gamma[n, i]) for n in self.users}
        m.vds = pyo.Expression(names, rule=lambda m, u: coef[u] * (m.chi.x[u, s] + m.offset[u]),
                               doc="weighted VDS (x[n,i] + offset[n]) / (φ_n γ[n,i]) ([PSDSF] (12))")
        add_maxmin(m, m.vds)
        self.model = m
        self._vars = [m.chi.x[u, s] for u in names]
        # a task limit or a budget leaves room x[n,i] ≤ coupling_room(...) here: a column bound, set per
        # response (never above a bound the customize hook put on the column)
        self._limited = coupled_users(inst, i, self.users)
        self._names = names
        self._rows = [*m.maxmin.level.values(), *m.maxmin.floor.values()]  # bodies hold the offsets
        self._handle: Any = None
        self.hook_ub: np.ndarray | None = None  # the columns' upper bounds once the hook has run
        add_room(m, inst)  # an external resource: what the other servers leave, set per response

    def respond(self, x: np.ndarray, session: Session) -> tuple[np.ndarray, Any]:
        """Server ``i``'s leximin allocation given ``x`` on the other servers (column ``i`` ignored)."""
        m, blk = self.model, self.model.maxmin
        if self.hook_ub is None:
            if session.customize is not None:
                expose_all_pairs(m, self.inst, self.i)
            session.apply_customize(m)  # the user's edits first: its column bounds are kept below
            self.hook_ub = column_bounds(self._vars)
        others = x.sum(axis=1) - x[:, self.i]
        for n, u in zip(self.users, self._names):
            m.offset[u] = float(others[n])
            blk.level[u].activate()
            blk.floor_level[u] = -math.inf
        if len(self._limited):
            room = np.minimum(coupling_room(self.inst, x, self.i, self.users[self._limited]),
                              self.hook_ub[self._limited])
            for k, ub in zip(self._limited, room):
                self._vars[k].setub(float(ub))
        roomed = set_room(m, self.inst, x, self.i)
        if self._handle is not None:  # same HiGHS model, warm: push the new offsets (row constants)
            self._handle.update_rows(self._rows)
            if len(self._limited) or roomed:
                self._handle.update()  # and the limits' column bounds, the external rows' room
        out = progressive_filling(m, session, m.vds, handle=self._handle, resolve=RESOLVE)
        self._handle = out.handle
        col = np.zeros(self.inst.n_users)
        col[self.users] = [max(0.0, v.value or 0.0) for v in self._vars]
        return col, out


def best_response(inst: Instance, session: Session, tol: float = 1e-8, max_iter: int = 200
                  ) -> tuple[np.ndarray, Status, dict[str, Any]]:
    """Gauss–Seidel sweeps of per-server leximin best responses from ``x = 0``."""
    servers = [i for i in range(inst.n_servers) if inst.runnable[:, i].any()]
    models = {i: ServerLeximin(inst, i) for i in servers}
    rows = server_rows(inst)
    x = np.zeros((inst.n_users, inst.n_servers))
    history: list[float] = []
    status, lps, jumps = Status.ITERATION_LIMIT, 0, 0
    step_before: np.ndarray | None = None
    from tqdm.auto import tqdm

    # progress on stderr when it is a terminal (a long run is thousands of LPs)
    bar = tqdm(total=max_iter, desc="ps-dsf sweeps", unit="sweep", file=sys.stderr, disable=None,
               leave=False)
    try:
        x, status, info = _sweeps(inst, session, tol, max_iter, servers, models, rows, x, history, status,
                                  lps, jumps, step_before, bar)
    finally:
        bar.close()
    if status is Status.CONVERGED and session.customize is None and not psdsf_certificate(inst, x)["holds"]:
        x, status, info["numpy_sweeps"] = _numpy_sweeps(inst, session, x, rows, servers, tol,
                                                        max_iter - info["sweeps"])
    return x, status, info


def _numpy_sweeps(inst: Instance, session: Session, x: np.ndarray, rows: Any, servers: list[int], tol: float,
                  max_iter: int) -> tuple[np.ndarray, Status, int]:
    """Gauss–Seidel sweeps of :func:`leximin_response` from ``x`` until no entry moves by more than
    ``tol`` of the largest (``converged``), at most ``max_iter``.

    The LP responses are exact only to the LPs' tolerances: where two users' VDS at a server differ by
    about 10⁻⁶ they alternate between vertices, the sweeps' change hovers near 5·10⁻⁷ and can dip
    below ``tol`` by chance at a point that misses Thm 1 (``random_instance(5, 12, 4, 3, missing=0)``:
    two VDS 1.3·10⁻⁶ apart, certificate failed). Sweeps of exact water-filling from that point settle
    it (there: 11 sweeps to ``tol``; the point after the first already certified)."""
    x = x.copy()
    for sweep in range(1, max_iter + 1):
        start = x.copy()
        for i in servers:
            x[:, i] = _numpy_response(inst, x, rows[i])
        if float(np.abs(x - start).max(initial=0.0)) <= tol * float(x.max(initial=0.0)):
            return x, Status.CONVERGED, sweep
        if session.expired():
            return x, Status.TIME_LIMIT, sweep
    return x, Status.ITERATION_LIMIT, max_iter


def _sweeps(inst: Instance, session: Session, tol: float, max_iter: int, servers: list[int],
            models: dict[int, Any], rows: Any, x: np.ndarray, history: list[float], status: Status,
            lps: int, jumps: int, step_before: np.ndarray | None, bar: Any
            ) -> tuple[np.ndarray, Status, dict[str, Any]]:
    numpy_responses = 0
    for sweep in range(1, max_iter + 1):
        start = x.copy()
        for i in servers:
            col, out = models[i].respond(x, session)
            lps += out.lps
            if out.status in (Status.ERROR, Status.INFEASIBLE) and session.customize is None:
                # the leximin LPs lost precision (seen at 50 x 8: a round's level 2.6e-6 below the last;
                # with an external resource nearly used up, a round "infeasible"): the same response in
                # numpy (leximin_response), counted in details.numpy_responses
                log.info("ps-dsf best response: server %s, %s; numpy response instead", inst.servers[i],
                         out.message)
                col = _numpy_response(inst, x, rows[i])
                numpy_responses += 1
            elif not out.status.ok:
                return x, out.status, {"sweeps": sweep, "lps": lps, "numpy_responses": numpy_responses,
                                       "max_change": history,
                                       "message": f"server {inst.servers[i]}: {out.message}",
                                       "column_bounds": hook_caps(inst, models)}
            x[:, i] = col
        step = x - start
        change = float(np.abs(step).max(initial=0.0))
        history.append(change)
        bar.update(1)
        bar.set_postfix_str(f"change {change:.2g}", refresh=False)
        log.info("ps-dsf best response: sweep %d, largest change %.3g", sweep, change)
        if change <= tol * float(x.max(initial=0.0)):  # relative to the allocation, whatever its units
            status = Status.CONVERGED
            break
        if session.expired():
            status = Status.TIME_LIMIT
            break
        if step_before is not None and _steady_drift(step_before, step) is not None:
            t = _feasible_ray(rows, x, step, inst, hook_caps(inst, models))
            if t > 1.0:  # jump along the drift to where it must stop; sweeps then decide
                x = np.maximum(x + t * step, 0.0)
                jumps += 1
                log.info("ps-dsf best response: steady drift, extrapolated %.3g sweeps ahead", t)
        step_before = step
    return x, status, {"sweeps": len(history), "lps": lps, "extrapolations": jumps,
                       "numpy_responses": numpy_responses, "max_change": history,
                       "column_bounds": hook_caps(inst, models)}


def _numpy_response(inst: Instance, x: np.ndarray, rows: ServerRows) -> np.ndarray:
    """Server ``rows.server``'s best response by :func:`leximin_response` (a full column of ``x``)."""
    i, U = rows.server, rows.users
    col = np.zeros(inst.n_users)
    col[U] = _capped_response(inst, x, i, U, inst.weight[U] * inst.gamma[U, i], rows.demand[U],
                              rows.capacity, coupled_users(inst, i, U), x[U].sum(axis=1))
    return col


def _capped_response(inst: Instance, x: np.ndarray, i: int, U: np.ndarray, w: np.ndarray, D: np.ndarray,
                     c: np.ndarray, lim: np.ndarray, X: np.ndarray) -> np.ndarray:
    """:func:`leximin_response` of server ``i`` for its users ``U`` (totals ``X``, aligned with ``U``),
    the users ``U[lim]`` capped by what their task limit or budget leaves (``coupling_room``), the
    external resources in ``i``'s scope as rows with what the other servers leave (``external_room``)."""
    cap = None
    if len(lim):
        cap = np.full(len(U), np.inf)
        cap[lim] = coupling_room(inst, x, i, U[lim])
    if inst.external:  # and the external resources, as far as the other servers leave them
        _, d, room = room_columns(inst, x, i, U)
        D, c = np.hstack([D, d]), np.concatenate([c, room])
    return leximin_response(w, D, c, X - x[U, i], cap=cap)


def _within_room(inst: Instance, x: np.ndarray, i: int, U: np.ndarray, col: np.ndarray) -> bool:
    """Server ``i``'s column ``col`` (its users ``U``) uses no more of any external resource than the other
    servers leave (``external_room``)."""
    _, d, room = room_columns(inst, x, i, U)
    return bool((col @ d <= room * (1 + 1e-12)).all())


def _steady_drift(a: np.ndarray, b: np.ndarray, cos: float = 1e-6,
                  band: tuple[float, float] = (1 / (1 + 1e-3), 1 / (1 - 1e-3))) -> float | None:
    """Two consecutive sweeps moved the allocation in (nearly) the same direction (cosine at least
    ``1 − cos``), the second by ``ρ = |b|/|a|`` times the first with ``ρ`` in ``band``: Gauss–Seidel is
    walking along a ridge at a steady pace. Returns ``ρ``, or ``None`` when the steps are not alike."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na > 0 and nb > 0 and float(a.ravel() @ b.ravel()) >= (1 - cos) * na * nb and (
            band[0] * na <= nb <= band[1] * na):
        return nb / na
    return None


def hook_caps(inst: Instance, models: dict[int, Any]) -> np.ndarray:
    """``(N, K)`` upper bounds the ``customize`` hook put on the servers' columns (``inf`` elsewhere)."""
    caps = np.full((inst.n_users, inst.n_servers), np.inf)
    for i, mod in models.items():
        if mod.hook_ub is not None:
            caps[mod.users, i] = mod.hook_ub
    return caps


def _feasible_ray(rows: list[ServerRows], x: np.ndarray, step: np.ndarray, inst: Instance | None = None,
                  caps: np.ndarray | None = None, skip: float = 0.0) -> float:
    """Largest ``t`` with ``x + t·step`` in χ (non-negativity, every server's rows; task limits, budgets
    and external resources when ``inst`` is given) and below ``caps``; ``0`` when nothing bounds it. With
    ``skip > 0`` the entries that reach zero within ``skip`` steps do not bound it (they are clipped at
    zero)."""
    t = np.inf
    if inst is not None:
        for limit, use in ((inst.tasks, np.ones_like(x)), (inst.budget_limit, inst.budget_cost)):
            grow = (use * step).sum(axis=1)
            up = (grow > 0) & np.isfinite(limit)
            if up.any():
                left = limit[up] - (use[up] * x[up]).sum(axis=1)
                t = min(t, float(np.min(np.maximum(left, 0.0) / grow[up])))
        for e in range(len(inst.external)):  # an external resource: the pool over its scope
            use = inst.external_demand[:, e][:, None] * inst.external_scope[e][None, :]
            grow = float((use * step).sum())
            if grow > 0:
                t = min(t, max(float(inst.external_capacity[e] - (use * x).sum()), 0.0) / grow)
    if caps is not None:
        up = (step > 0) & np.isfinite(caps)
        if up.any():
            t = min(t, float(np.min(np.maximum(caps[up] - x[up], 0.0) / step[up])))
    neg = step < 0
    if neg.any():
        hit = x[neg] / -step[neg]
        hit = hit[hit > skip] if skip > 0 else hit
        t = min(t, float(hit.min(initial=np.inf)))
    for r in rows:
        grow = r.usage(step[:, r.server])
        up = grow > 0
        if up.any():
            t = min(t, float(np.min(np.maximum(r.slack(x[:, r.server])[up], 0.0) / grow[up])))
    return t if np.isfinite(t) else 0.0


# ---------------------------------------------------------------------- Algorithm I (numpy)
def _tol(v: float | np.ndarray, tol: float) -> float | np.ndarray:
    return tol * np.maximum(1.0, np.abs(v))


def drf_server(inst: Instance, rows: ServerRows, tol: float = 1e-9) -> np.ndarray:
    """DRF on server ``i`` alone (weighted water-filling of ``x[n,i]/(φ_n γ[n,i])``): the
    initialisation of Algorithm I."""
    i, D, c = rows.server, rows.demand, rows.capacity
    phig = inst.weight * inst.gamma[:, i]
    x = np.zeros(inst.n_users)
    active = list(rows.users)
    while active:
        rate = phig[active] @ D[active]
        free = c - x @ D
        pos = rate > 0
        t = float(np.min(free[pos] / rate[pos]))
        x[active] += phig[active] * t
        sat = (c - x @ D) <= _tol(c, tol)
        active = [n for n in active if not (D[n, sat] > 0).any()]
    return x


def server_procedure(inst: Instance, x: np.ndarray, rows: ServerRows, tol: float = 1e-9,
                     max_steps: int = 10_000) -> tuple[int, bool]:
    """The inner loop of Algorithm I at one server ("server procedure", [PSDSF] §III-C/D), in place on
    ``x``. Returns the number of Update-Allocation calls and whether the loop finished."""
    i, D, c = rows.server, rows.demand, rows.capacity
    phig = inst.weight * inst.gamma[:, i]
    elig = rows.users
    remaining = set(elig.tolist())
    updates = 0
    while remaining:
        act = np.array(sorted(remaining))
        s = np.zeros(inst.n_users)
        s[elig] = x.sum(axis=1)[elig] / phig[elig]
        S = float(s[act].min())  # (16)
        n_star = act[s[act] <= S + _tol(S, tol)]
        xi = x[:, i]
        held = xi > tol * max(1.0, float(x.max(initial=0.0)))
        usage = xi @ D
        saturated = usage >= c - _tol(c, tol)
        r_star = [r for r in np.flatnonzero(saturated) if (D[n_star, r] > 0).any()]
        bottleneck = None
        for r in r_star:  # Corollary 1, (14)-(15)
            holders = elig[held[elig] & (D[elig, r] > 0)]
            if s[holders].max(initial=-np.inf) <= S + _tol(S, tol):
                bottleneck = r
                break
        if bottleneck is not None:
            remaining -= set(act[D[act, bottleneck] > 0].tolist())  # (17)
            continue
        if updates >= max_steps:
            return updates, False
        updates += 1
        # Update-Allocation(x, i)
        f = c - usage
        n_r = set()
        for r in r_star:
            holders = elig[held[elig] & (D[elig, r] > 0)]
            n_r.add(int(holders[np.argmax(s[holders])]))  # (18)
        for n in n_r:
            f = f + xi[n] * D[n]
        d_star = phig[n_star] @ D[n_star]
        pos = d_star > 0
        z = float(np.min(f[pos] / d_star[pos]))
        beta = 1.0
        for n in n_r:
            beta = min(beta, (s[n] - S) / (z + xi[n] / phig[n]))
        x[n_star, i] += beta * phig[n_star] * z
        for n in n_r:
            x[n, i] = (1.0 - beta) * xi[n] if beta < 1.0 else 0.0
    return updates, True


def algorithm_i(inst: Instance, tol: float = 1e-9, max_iter: int = 1000, session: Session | None = None
                ) -> tuple[np.ndarray, Status, dict[str, Any]]:
    """Algorithm I of [PSDSF]: DRF per server, then server procedures in index order until a whole
    round makes no update (or ``session``'s time is up: ``time_limit``, checked after every server)."""
    rows = server_rows(inst)
    x = np.zeros((inst.n_users, inst.n_servers))
    for r in rows:
        x[:, r.server] = drf_server(inst, r, tol)
    history: list[int] = []
    for _ in range(max_iter):
        updates = 0
        for r in rows:
            u, done = server_procedure(inst, x, r, tol)
            updates += u
            if not done:
                return x, Status.ITERATION_LIMIT, {"rounds": len(history) + 1, "updates": history,
                                                   "message": f"server {inst.servers[r.server]}: "
                                                              "server procedure did not finish"}
            if session is not None and session.expired():
                return x, Status.TIME_LIMIT, {"rounds": len(history) + 1, "updates": history}
        history.append(updates)
        log.info("ps-dsf Algorithm I: round %d, %d updates", len(history), updates)
        if updates == 0:
            return x, Status.CONVERGED, {"rounds": len(history), "updates": history}
    return x, Status.ITERATION_LIMIT, {"rounds": len(history), "updates": history}


def distributed(inst: Instance, seed: int = 0, tol: float = 1e-9, max_iter: int = 1000,
                session: Session | None = None) -> tuple[np.ndarray, Status, dict[str, Any]]:
    """[PSDSF] §III-D: one server procedure per server per period, servers in a random order (until a
    period makes no update, or ``session``'s time is up: ``time_limit``, checked after every period)."""
    rng = np.random.default_rng(seed)
    rows = server_rows(inst)
    x = np.zeros((inst.n_users, inst.n_servers))
    for r in rows:
        x[:, r.server] = drf_server(inst, r, tol)
    trajectory: list[dict[str, Any]] = []
    status = Status.ITERATION_LIMIT
    for period in range(1, max_iter + 1):
        before = x.copy()
        order = rng.permutation(len(rows))
        updates = 0
        for k in order:
            u, done = server_procedure(inst, x, rows[k], tol)
            updates += u
            if not done:
                return x, Status.ITERATION_LIMIT, {"periods": period, "trajectory": trajectory}
        change = float(np.abs(x - before).max(initial=0.0))
        cert = psdsf_certificate(inst, x)
        trajectory.append({"period": period, "order": [inst.servers[rows[k].server] for k in order],
                           "updates": updates, "max_change": change,
                           "certificate_failures": len(cert["failures"]),
                           "tasks": dict(zip(inst.users, x.sum(axis=1).tolist()))})
        if updates == 0:
            status = Status.CONVERGED
            break
        if session is not None and session.expired():
            status = Status.TIME_LIMIT
            break
    final = x.sum(axis=1)
    scale = max(1.0, float(np.abs(final).max(initial=0.0)))
    for row in trajectory:
        row["distance"] = float(np.abs(np.array(list(row["tasks"].values())) - final).max()) / scale
    return x, status, {"periods": len(trajectory), "seed": seed, "trajectory": trajectory}


# ---------------------------------------------------------------------- fast (numpy best responses)
def leximin_response(w: np.ndarray, D: np.ndarray, c: np.ndarray, o: np.ndarray, tol: float = 1e-12,
                     cap: np.ndarray | None = None) -> np.ndarray:
    r"""Server ``i``'s exact best response in numpy: the weighted lexicographic max-min of
    ``(o_n + x_n)/w_n`` over ``0 ≤ x ≤ cap``, ``x @ D ≤ c`` (``w_n = φ_n γ[n,i]``, ``o_n = Σ_{j≠i} x[n,j]``,
    ``cap_n`` what a task limit or budget leaves, :func:`~fairalloc.models._perserver.coupling_room`; the
    users of ``N_i`` only).

    Progressive filling on a water level ``t``: user ``n`` holds ``max(0, t w_n − o_n)`` until a resource
    it demands saturates or it reaches ``cap_n``, then freezes. Between two events, each resource's usage
    is a piecewise linear, increasing function of ``t`` with breakpoints at the entry levels ``o_n/w_n``;
    with the users sorted by entry level its values at all breakpoints are one cumulative sum, so the next
    saturation level ``t_r`` of every resource is found in one vectorised pass. Users whose cap level
    ``(o_n + cap_n)/w_n`` lies below ``min_r t_r`` reach their caps first (capping only lowers usage, so
    the true next saturation is later still): they all freeze in the same pass. Each pass saturates a
    resource or caps a user. At the end every user of ``N_i`` is capped or demands a saturated resource
    whose holders all have a VDS ``≤`` its own: the server's part of [PSDSF] Thm 1.
    """
    m, R = D.shape
    x = np.zeros(m)
    if m == 0 or R == 0:
        return x
    e = o / w
    order = np.argsort(e, kind="stable")
    es, Ds, ws, os_ = e[order], D[order], w[order], o[order]
    capl = None if cap is None else (os_ + cap[order]) / ws  # level at which a user reaches its cap
    # one row per resource, the users in entry order along it (the reductions run along contiguous rows):
    # w d on the first R rows and o d on the last R, so one cumulative sum serves both
    WO = np.empty((2 * R, m))
    np.multiply(Ds.T, ws, out=WO[:R])
    np.multiply(Ds.T, os_, out=WO[R:])
    demands = Ds.T > 0
    free = np.ones(m, bool)
    nfree = m
    fixed = np.zeros(R)  # usage of the frozen users
    open_ = np.ones(R, bool)
    cols = np.arange(R)
    cum, masked = np.empty((2 * R, m)), np.empty((2 * R, m))
    usage, over = np.empty((R, m)), np.empty((R, m), bool)
    while nfree:
        np.cumsum(np.multiply(WO, free, out=masked) if nfree < m else WO, axis=1, out=cum)
        cum_w, cum_o = cum[:R], cum[R:]
        room = c - fixed
        np.multiply(cum_w, es, out=usage)
        np.subtract(usage, cum_o, out=usage)
        np.greater_equal(usage, room[:, None], out=over)  # usage at each entry level ≥ capacity
        k = over.argmax(axis=1)
        crossed = over[cols, k]
        k[~crossed] = m  # the first entry level at or over capacity (m: none)
        # the users entered before it (k = 0 wraps around: masked below)
        prev_w, prev_o = cum_w[cols, k - 1], cum_o[cols, k - 1]
        last_w = cum_w[:, -1]
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where((k > 0) & (prev_w > 0), (room + prev_o) / prev_w, np.inf)
        level = np.where(crossed, np.minimum(level, es[np.minimum(k, m - 1)]), level)
        level[k == 0] = es[0]
        level[~open_ | (last_w <= 0)] = np.inf
        t = float(level.min())
        if capl is not None:
            capped = free & (capl <= t)
            if capped.any():  # these reach their caps before any resource saturates
                idx = np.flatnonzero(capped)
                xs = np.maximum(capl[idx] * ws[idx] - os_[idx], 0.0)
                x[order[idx]] = xs
                fixed += xs @ Ds[idx]
                free[idx] = False
                nfree -= len(idx)
                continue
        if t == np.inf:
            break
        sat = level <= t + tol * max(1.0, abs(t))
        idx = np.flatnonzero(free & demands[sat].any(axis=0))
        xs = np.maximum(t * ws[idx] - os_[idx], 0.0)
        x[order[idx]] = xs
        fixed += xs @ Ds[idx]
        free[idx] = False
        nfree -= len(idx)
        open_ &= ~sat
    return x


class _Rows:
    """Rows of a sparse LP assembled from arrays (:func:`exact_finish`): coefficients as COO entries,
    right-hand sides 0 unless given, rows numbered in the order their blocks were opened."""

    def __init__(self) -> None:
        self.n = 0
        self.coo: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.rhs: list[tuple[np.ndarray, np.ndarray]] = []

    def block(self, counts: np.ndarray) -> np.ndarray:
        """Open ``counts.sum()`` rows, ``counts[j]`` for the ``j``-th item: the first row of each item."""
        first = self.n + np.cumsum(counts) - counts
        self.n += int(np.sum(counts))
        return first

    def add(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        """Coefficients ``vals`` at ``(rows, cols)``."""
        self.coo.append((np.asarray(rows, int), np.asarray(cols, int), np.asarray(vals, float)))

    def set(self, rows: np.ndarray, rhs: np.ndarray | float) -> None:
        """Right-hand sides of ``rows``."""
        self.rhs.append((np.asarray(rows, int), np.asarray(rhs, float)))

    def matrix(self, ncols: int) -> tuple[Any, np.ndarray]:
        import scipy.sparse as sp

        r, c = (np.concatenate([e[j] for e in self.coo] or [np.zeros(0, int)]) for j in (0, 1))
        v = np.concatenate([e[2] for e in self.coo] or [np.zeros(0)])
        b = np.zeros(self.n)
        for at, val in self.rhs:
            b[at] = val
        return sp.csr_array((v, (r, c)), shape=(self.n, ncols)), b


def exact_finish(inst: Instance, x: np.ndarray, theta: float = 1e-6, sat_tol: float = 1e-7,
                 relax: bool = False, drop: np.ndarray | None = None, out: dict[str, Any] | None = None,
                 time_limit: float | None = None, memo: dict[bytes, Any] | None = None,
                 canonical: bool = False, work: float | None = None,
                 stats: dict[str, Any] | None = None) -> np.ndarray | None:
    r"""The PS-DSF allocation with the *structure* of ``x`` (an approximate fixed point), solved exactly
    as one LP; ``None`` when the structure read from ``x`` admits none.

    Read from ``x``: the pairs that may hold tasks (``x[n,i] > θ X_n``, the support ``S``), the saturated
    resources ``(i,r)`` (usage within ``sat_tol·c``), the users at their task limits or budgets, and for
    every other runnable pair ``(n,i)`` the saturated resource ``r(n,i)`` it demands with the lowest water
    level (the largest VDS among its holders in ``x``). With a free level ``τ[i,r]`` per saturated
    resource, Thm 1 becomes linear in ``(x, X, τ)`` once this structure is fixed:

    .. math::

        \sum_n x_{n,i} d_{n,r} = c_{i,r}\ ((i,r)\ \text{saturated}), \qquad
        X_m \le \phi_m\gamma_{m,i}\,\tau_{i,r}\ \ ((m,i) \in S,\ d_{m,r} > 0), \qquad
        X_n \ge \phi_n\gamma_{n,i}\,\tau_{i,r(n,i)},

    with χ's rows (capacities, ``X_n ≤ T_n``, budgets, external resources) and ``x = 0`` off ``S``; an
    external resource is a resource of every server in its scope, saturated (and its row an equality)
    when its pool is, with a level ``τ[i,e]`` per server; a user at its limit or budget needs no
    bottleneck (``X_n = T_n``, budget spent). Any solution is PS-DSF: every holder of a saturated ``r`` at
    ``i`` has a weighted VDS ``≤ τ[i,r]``, and every user's VDS at ``i`` is ``≥ τ`` of a saturated
    resource it demands. HiGHS (highspy, zero objective; its interior point method with crossover,
    ``OWN_LP_SOLVER``) finds one — a vertex where the solution is not unique, which one depending on
    the solver and on the last bits of the data;
    ``canonical=True`` takes the *canonical* one instead, the vertex maximising ``Σ h[n,i] x[n,i]/k_n``
    (``h`` the pair's :func:`~fairalloc.models.feasible.name_hash`, ``k_n`` the user's best ``γ``:
    free of units and of the order of the file), unique for almost every ``h`` (for the LP without
    slacks).
    The caller re-checks Thm 1 (:func:`~fairalloc.verify.psdsf.psdsf_certificate`).
    ``relax=True`` gives each Thm 1 row a slack and minimises their sum (χ's rows stay hard): a feasible
    point that breaks Thm 1 least for this structure, from which the sweeps continue; the support pairs
    whose holder rows needed slack are put in ``out["offenders"]`` (a mask; ``drop`` excludes pairs from
    the support in a second try), the largest slack relative to ``max X`` in ``out["slack"]`` (their sum
    in ``out["slack_total"]``).

    *Row generation.* There is one row ``X_n ≥ φ_n γ[n,i] τ`` per user and server (``N·K``, against a few
    per user for the rest), and at a point near a fixed point most users sit well above their level at
    most servers (plain seed 8 at 200 × 32 after 413 sweeps: 81 % of them more than 5 % above). Those
    with a VDS more than ``LAZY_GAP`` above the level estimate are left out at first; every left-out row
    the LP's solution violates (by more than ``10⁻¹⁰ max X``) is added, with its slack when relaxed, and
    the LP solved again, until none is. The restricted LP is a relaxation of the full one, so the answer
    is the full LP's: infeasible exactly when it is, and with the same least total slack.

    *Memo.* The LP depends on ``x`` only through that structure, and the sweeps' restarts often read the
    same structure again (200 × 32 weights seed 5: one plain LP five times, about 4 s each, as HiGHS
    ends it with status "unknown"). With a ``memo`` dict, the answer (and ``out``) is kept per structure
    and a repeat returns it without solving; an LP stopped by ``time_limit`` (the session's end) is not
    kept.

    *Solvers.* The LP without slacks and without the canonical objective goes to HiGHS's interior point
    method with crossover, the relaxed and the canonical LPs to its dual simplex. At 1000 × 250 one LP
    of the first kind ran 318.7 s in the dual simplex without ending (infeasible: 0.7 s by the interior
    point method); on 32 instances at 200 × 32 and 400 × 64 the two methods gave the same sweeps and
    allocations (the PS-DSF page of the docs has the measurements). The interior point method was
    slower on a relaxed LP (86.8 s against 34.4 s).

    *Work cap.* With ``work``, each LP stops after ``work × (rows + columns)`` of HiGHS's simplex
    interrupt checks (:func:`~fairalloc.solvers.highs.solve_arrays`'s ``work_limit``) and counts as no
    answer (kept in the memo as such): a cap that does not depend on the machine's speed, so the
    caller's path does not either. The interior point method makes no such checks; it ended every LP
    measured within 5.4 s (1000 × 250). ``stats`` receives HiGHS's iterations of the call (``"nit"``:
    simplex, interior point and crossover, summed over the row-generation rounds), the checks
    (``"work"``) and ``"capped"`` (true when the cap stopped an LP).
    """
    import scipy.sparse as sp

    from fairalloc.solvers.highs import solve_arrays

    N, K = x.shape
    rows = [r for r in server_rows(inst) if len(r.users)]
    X = x.sum(axis=1)
    if not (X > 0).all():
        return None
    vds = weighted_vds(inst, x)
    T, B, cost = inst.tasks, inst.budget_limit, inst.budget_cost
    at_limit = np.isfinite(T) & (X >= T * (1 - 1e-6))
    broke = np.isfinite(B) & ((cost * x).sum(axis=1) >= B * (1 - 1e-6))
    support = (x > theta * X[:, None]) & inst.runnable
    if drop is not None:
        support &= ~drop
    pairs = np.argwhere(support)
    P = len(pairs)
    pid = -np.ones((N, K), int)
    pid[pairs[:, 0], pairs[:, 1]] = np.arange(P)
    eq, ub = _Rows(), _Rows()  # rows numbered in the order of the loops below
    # per user: X_n = Σ_i x[n,i], then its limit X_n ≤ T_n and its budget Σ_i cost x ≤ B_n (equalities
    # where they bind), one user after the other
    lim_eq, bud_eq = np.isfinite(T) & at_limit, np.isfinite(B) & broke
    lim_ub, bud_ub = np.isfinite(T) & ~at_limit, np.isfinite(B) & ~broke
    first_eq = eq.block(1 + lim_eq + bud_eq)
    first_ub = ub.block(lim_ub.astype(int) + bud_ub)
    owner = pairs[:, 0]
    eq.add(first_eq[owner], np.arange(P), np.ones(P))
    eq.add(first_eq, P + np.arange(N), -np.ones(N))
    for rows_of, sel, at in ((eq, lim_eq, first_eq + 1), (ub, lim_ub, first_ub)):
        n = np.flatnonzero(sel)
        rows_of.add(at[n], P + n, np.ones(len(n)))
        rows_of.set(at[n], T[n])
    for rows_of, sel, at in ((eq, bud_eq, first_eq + 1 + lim_eq), (ub, bud_ub, first_ub + lim_ub)):
        n, on = np.flatnonzero(sel), np.flatnonzero(sel[owner])
        rows_of.add(at[owner[on]], on, cost[owner[on], pairs[on, 1]])
        rows_of.set(at[n], B[n])
    key = [np.packbits(m).tobytes() for m in (support, at_limit, broke)]
    key.append(bytes([relax, canonical]))
    ntau = 0
    holder_row: list[tuple[np.ndarray, np.ndarray, int]] = []  # (ub row indices, holders m, server i)
    lazy: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # bottleneck rows left out: users, τ, φγ
    wg = inst.weight[:, None] * inst.gamma
    # external resources: saturated when their pool over the scope is; one capacity row each (below)
    pool_use = np.einsum("ne,nk,ek->e", inst.external_demand, x, inst.external_scope.astype(float))
    pool_sat = pool_use >= inst.external_capacity * (1 - sat_tol)
    for r in rows:
        i, D, c = r.server, r.demand, r.capacity
        own = len(c)
        hu = np.flatnonzero(pid[:, i] >= 0)
        sat = (x[:, i] @ D) >= c * (1 - sat_tol)
        if inst.external:  # the external resources in i's scope: rows of server i in Thm 1
            use = np.flatnonzero(inst.external_scope[:, i])
            ext = np.zeros((N, len(use)))
            ext[r.users] = inst.external_demand[np.ix_(r.users, use)]
            D, sat = np.hstack([D, ext]), np.concatenate([sat, pool_sat[use]])
        level = np.full(D.shape[1], np.inf)  # τ estimate: the largest holder VDS (0 when none)
        col = np.full(D.shape[1], -1)
        for k in range(D.shape[1]):
            users = hu[D[hu, k] > 0]
            if k < own:  # the server's own capacity row (an external one's is global, below)
                rows_of = eq if sat[k] else ub
                row = rows_of.block(np.ones(1, int))
                rows_of.add(np.repeat(row, len(users)), pid[users, i], D[users, k])
                rows_of.set(row, c[k])
            if sat[k]:
                col[k] = P + N + ntau
                ntau += 1
                level[k] = float(vds[users, i].max(initial=0.0))
                # holders: X_m ≤ φ_m γ[m,i] τ[i,k]
                at = ub.block(np.ones(len(users), int))
                holder_row.append((at, users, i))
                ub.add(at, P + users, np.ones(len(users)))
                ub.add(at, np.full(len(users), col[k]), -wg[users, i])
        U = r.users[~(at_limit[r.users] | (broke[r.users] & (cost[r.users, i] > 0)))]
        dem = (D[U] > 0) & sat
        if not dem.any(axis=1).all():  # a user with no saturated resource: no PS-DSF point here
            return None
        k_n = np.argmin(np.where(dem, level, np.inf), axis=1)  # X_n ≥ φ_n γ[n,i] τ[i,r(n,i)]
        key += [np.packbits(sat).tobytes(), k_n.astype(np.int32).tobytes()]
        with np.errstate(divide="ignore", invalid="ignore"):
            far = vds[U, i] > (1 + LAZY_GAP) * level[k_n]  # well above its level: left out at first
        at = ub.block(np.ones(int((~far).sum()), int))
        ub.add(at, P + U[~far], -np.ones(len(at)))
        ub.add(at, col[k_n[~far]], wg[U[~far], i])
        lazy.append((U[far], col[k_n[far]], wg[U[far], i]))
    for e in range(len(inst.external)):  # Σ_{pairs in scope} x d_e ≤ c_e (= where saturated)
        on = np.flatnonzero(inst.external_scope[e, pairs[:, 1]] & (inst.external_demand[pairs[:, 0], e] > 0))
        rows_of = eq if pool_sat[e] else ub
        row = rows_of.block(np.ones(1, int))
        rows_of.add(np.repeat(row, len(on)), on, inst.external_demand[pairs[on, 0], e])
        rows_of.set(row, inst.external_capacity[e])
    key.append(np.packbits(pool_sat).tobytes())
    structure = b"|".join(key)
    if memo is not None:
        if relax and out is None:  # a relaxed answer is kept with its out, for a later caller that asks
            out = {}
        if structure in memo:  # this structure's LP solved before
            y, kept = memo[structure]
            if out is not None and kept is not None:
                out.update(kept)
            return None if y is None else y.copy()
    nv = P + N + ntau
    Aeq, beq = eq.matrix(nv)
    Aub, bub = ub.matrix(nv)
    lazy_n, lazy_col, lazy_w = (np.concatenate([z[j] for z in lazy] or [np.zeros(0)]) for j in range(3))
    lazy_n, lazy_col = lazy_n.astype(int), lazy_col.astype(int)
    opts: dict[str, Any] = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10,
                            "solver": "simplex" if canonical or relax else OWN_LP_SOLVER}
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    added = np.zeros(0, int)  # the left-out rows found violated so far
    while True:
        # the rows kept, then the left-out ones found violated (-X_n + φγτ ≤ 0)
        more = sp.csr_array((np.r_[-np.ones(len(added)), lazy_w[added]],
                             (np.r_[np.arange(len(added)), np.arange(len(added))],
                              np.r_[P + lazy_n[added], lazy_col[added]])), shape=(len(added), nv))
        A_ub, b_ub, A_eq = sp.vstack([Aub, more]).tocsr(), np.r_[bub, np.zeros(len(added))], Aeq
        obj = np.zeros(nv)
        if canonical:  # max Σ h x/k: one vertex of the structure's PS-DSF points, fixed by the names
            obj[:P] = -name_hashes(inst.users, inst.servers, pairs) / task_unit(inst)[owner]
        lower = np.r_[np.zeros(P + N), np.full(ntau, -np.inf)]  # x, X ≥ 0; the levels τ free
        if relax:  # Thm 1's rows (right-hand side 0) get a slack each, its total minimised
            thm = np.flatnonzero(b_ub == 0.0)
            A_ub = sp.hstack([A_ub, sp.csr_array((-np.ones(len(thm)), (thm, np.arange(len(thm)))),
                                                 shape=(A_ub.shape[0], len(thm)))]).tocsr()
            A_eq = sp.hstack([Aeq, sp.csr_array((Aeq.shape[0], len(thm)))]).tocsr()
            obj = np.concatenate([obj, np.ones(len(thm))])
            lower = np.r_[lower, np.zeros(len(thm))]
        if deadline is not None:
            opts["time_limit"] = max(1.0, deadline - time.perf_counter())
        size = A_ub.shape[0] + A_eq.shape[0] + A_ub.shape[1]  # rows + columns
        cap = None if work is None else max(1, math.ceil(work * size))
        res = solve_arrays(obj, A_ub, b_ub, A_eq, beq, lower, np.full(len(lower), np.inf), opts, cap)
        capped = res.status is Status.ITERATION_LIMIT
        if stats is not None:
            stats["nit"] = stats.get("nit", 0) + res.iterations
            stats["work"] = stats.get("work", 0) + res.work
            stats["capped"] = capped
        if res.status is not Status.OPTIMAL:
            # stopped by the session's time limit: not kept (another call may have the time it needs)
            if memo is not None and res.status is not Status.TIME_LIMIT:
                memo[structure] = (None, None)
            return None
        z = res.x
        viol = lazy_w * z[lazy_col] - z[P + lazy_n] > 1e-10 * max(1.0, float(z[P:P + N].max(initial=0.0)))
        viol[added] = False
        if not viol.any():
            break
        added = np.union1d(added, np.flatnonzero(viol))
    y = np.zeros_like(x)
    y[pairs[:, 0], pairs[:, 1]] = np.maximum(res.x[:P], 0.0)
    if relax and out is not None:
        slack = np.zeros(len(b_ub))
        slack[thm] = res.x[nv:]
        big = 1e-9 * max(1.0, float(X.max()))
        out["slack"] = float(slack.max(initial=0.0)) / max(1.0, float(X.max()))
        out["slack_total"] = res.objective / max(1.0, float(X.max()))
        off = np.zeros_like(support)
        for ks, ms, i in holder_row:
            off[ms[slack[ks] > big], i] = True
        out["offenders"] = off
    if memo is not None:
        memo[structure] = (y.copy(), dict(out) if relax else None)
    return y


LP_WORK = 1.0  # fast: a finish LP stops after this many x (rows + columns) HiGHS simplex interrupt checks
# (exact_finish's work cap). Uncapped, on 200 x 32 weights seed 5 through solve, the LPs HiGHS did not
# end stopped without an answer after 13-198x. Through solve on the 64 unseen 200 x 32 instances: with
# 1x all 64 certified, slowest 27.0 s; with 2x the same sweeps, slowest 44.6 s (each capped LP costs
# time); with 8x one ended time_limit (placement seed 16) and an LP ended (infeasible or optimal) after 7x
OWN_LP_SOLVER = "ipm"  # exact_finish: HiGHS's method for the structure's own LP (no objective, no slack)
LAZY_GAP = 0.05  # exact_finish: bottleneck rows of users this far above their level join only when violated
MAX_JUMPS = 15  # restarts of the sweeps from the relaxed finish's point ...
JUMP_PAIRS = 200 * 32  # ... up to this many users x servers; scaled down beyond it (none past 192 000) ...
JUMP_STALL = 6  # ... and none after this many in a row that did not cut the least slack by 30 %; then the
# sweeps resume from the iterate the first restart replaced (measured at 200 x 32: restarts finish most
# instances in 50-110 sweeps; where they do not, sweeps from their points took 1.2-7.6x as many as
# sweeps without restarts)
PRUNES = 0  # further relaxed re-solves without the holders that needed slack (measured: 2 was slower)
PRUNE_CHANGE = 1e-4  # after the restarts, the relaxed LP (for the holders to drop) below this change only
DRAINING = (1e-2, 1e-1)  # pairs whose response fell by this much since the last attempt: dropped
DRIFT = (1e-4, (0.8, 1.02))  # a steady walk of the sweeps: cosine within 1e-4, step ratio in this band ...
DRIFT_MAX = 200.0  # ... extrapolated at most this many sweeps ahead
OMEGAS = (1.5, 1.0, 0.7, 0.5)  # over-relaxation factors, the next one after 100 sweeps without progress


def fast(inst: Instance, session: Session | None = None, tol: float = 1e-9, max_iter: int = 5000,
         omega: float = 1.5, progress: bool | None = None, finish: bool = True,
         x0: np.ndarray | None = None, handover: tuple[int, Callable[[], np.ndarray | None]] | None = None
         ) -> tuple[np.ndarray, Status, dict[str, Any]]:
    r"""PS-DSF by Gauss–Seidel sweeps of exact numpy best responses (:func:`leximin_response`),
    over-relaxed, finished exactly (:func:`exact_finish`) and certified by [PSDSF] Thm 1.

    Server ``i`` computes its weighted leximin of the VDS ``(x[n,i] + Σ_{j≠i} x[n,j])/(φ_n γ[n,i])``
    ([PSDSF] (12)) given the other servers' tasks, the same response as ``best-response``'s LPs but by
    vectorised water-filling (no LP; task limits and budgets are column caps, ``coupling_room``). The
    column moves to ``x + ω(response − x)`` (successive over-relaxation, ``ω = omega``; after
    100 sweeps without progress ``ω`` moves on to 1, 0.7, 0.5: a stalled or cycling sweep changes pace).

    **Steady walks.** While the support and the saturated resources stay the same, a sweep is an affine
    map; with an eigenvalue at (or near) 1 the iterate walks along a line at a constant pace, for hundreds
    of sweeps, until an entry reaches zero and the structure changes. When two sweeps' steps point the
    same way (cosine within ``DRIFT[0]`` of 1) with a ratio ``ρ`` in ``DRIFT[1]``, the iterate jumps
    along the step to where the first entry that does not reach zero within one more sweep does
    (``_feasible_ray`` with ``skip=1``; at most ``DRIFT_MAX`` sweeps ahead), or, when the steps shrink
    (``ρ < 1``), to the geometric limit ``ρ/(1 − ρ)`` steps ahead if that is nearer
    (``details.finish.drifts``). The next sweeps restore χ.

    The sweeps converge only linearly (and at 200 × 32 they may cycle), so once the responses move by
    less than ``10⁻³`` relative (again each time they have shrunk tenfold, and every 25 sweeps), the
    structure of the current responses is solved exactly (:func:`exact_finish`, ``finish=False`` skips
    it); a candidate that carries the certificate at ``10⁻⁹`` ends the run (``details.finish``). When
    no exact candidate exists, the relaxed LP's point (Thm 1 broken least, χ kept) replaces the
    iterate (``details.finish.jumps``, at most ``MAX_JUMPS``, fewer beyond ``JUMP_PAIRS`` users ×
    servers, none beyond 192 000: at 1000 × 250 the one relaxed LP took 48–137 s, and without it the
    sweeps certified in 248 s, 1 114 sweeps, where with it they ended ``time_limit`` at 300 s) and the
    next attempt follows 5 sweeps later. When the restarts are used up, or
    ``JUMP_STALL`` of them in a row have not cut the least relaxed slack (``details.finish.slacks``)
    by 30 %, the sweeps resume from the iterate the first restart replaced, at its ``ω``
    (``details.finish.resumed``: the sweep): on the 200 × 32 placement instances (seeds 0–2) the
    sweeps went on from the restarts' points for 1.2–7.6 times as many sweeps as without restarts.
    Each structure's answer is kept (``exact_finish``'s ``memo``): a structure read again costs no LP.
    One finish LP on the simplex runs at most ``LP_WORK × (rows + columns)`` HiGHS simplex interrupt checks
    (``details.finish.capped`` counts those it stopped; their structures are kept as no answer): an LP
    that HiGHS does not end (192 s on one 200 × 32 instance, 1 379 iterations) would otherwise take the
    session's time. The cap counts HiGHS's work, not seconds, so the path does not depend on the
    machine's speed.
    Each attempt first solves the structure's LP without slacks (a few hundred columns at 200 × 32,
    infeasible in milliseconds unless the structure is right); the relaxed LP, with one slack per
    Thm 1 row (35 000 columns at 400 × 64, tens of seconds), is solved only while a restart may use
    its point or once the relative change is below ``PRUNE_CHANGE``, and not at all where no restart
    is made (beyond 192 000 users × servers: at 1000 × 250, ``random_instance(2, 1000, 250, 4)``'s four
    relaxed LPs took 142 s of 283.4 s, and without them it certified in 141.2 s after the same 1 118
    sweeps, at the same allocation; seed 1, whose one relaxed LP took 8.7 s, the same 1 876 sweeps and
    allocation in 408.4 s against 395.8 s, other runs beside both). **Pruning.** The support pairs
    whose holder rows needed slack in the relaxed LP leave the support, and the structure's LP is
    solved again without them (``drop``; ``details.finish.pruned``: 1 when this finished the run): a
    point read near a fixed point may count as holders pairs that hold almost nothing, and each
    forces its user's VDS to the level of every saturated resource it demands there. **Draining
    pairs.** Once the restarts are over, between the plain LP and the relaxed one, the structure's LP
    is solved without the pairs whose response fell by more than ``DRAINING`` (1 %, then 10 %) since
    the previous attempt (``details.finish.draining``: the fraction, when this finished the run). Near
    a slow fixed point nearly every held pair is at its user's bottleneck level, many more than a
    PS-DSF vertex needs (on plain seed 8 at 200 × 32: about 670 where the certified point has 324);
    each one held is a holder row that makes the LP over-determined, and the pairs the sweeps are
    emptying are the ones the fixed point will not hold.
    ``x0`` starts the sweeps from a given allocation instead of 0 (e.g. ``apf-vds`` at α = 3,
    whose α → ∞ limit PS-DSF is; measured on the 200 × 32 placement instance it saved little: 926
    sweeps against 1004). Otherwise the sweeps stop at a fixed point (every response
    reproduces its column to ``10⁻³·tol`` relative, then one plain sweep makes every column its server's
    response), at ``max_iter`` (``iteration_limit``) or when ``session``'s time is up (``time_limit``).
    Like Algorithm I it returns *a* PS-DSF allocation. ``handover = (n, solve)``: after sweep ``n``,
    ``solve()`` is called once; a point it returns ends the run (``converged`` after ``n`` sweeps; the
    caller has certified it), as the canonical vertex of its structure where that carries the
    certificate, as a fixed point does; with ``None`` the sweeps go on as if it had not been called
    (:func:`fast_then_newton`).
    """
    from tqdm.auto import tqdm

    rows = [r for r in server_rows(inst) if len(r.users)]
    pre = []
    for r in rows:
        U = r.users
        lim = coupled_users(inst, r.server, U)
        pre.append((r.server, U, inst.weight[U] * inst.gamma[U, r.server], r.demand[U], r.capacity, lim))
    x = np.zeros((inst.n_users, inst.n_servers)) if x0 is None else np.array(x0, float)
    resp = np.zeros_like(x)
    fp = 1e-3 * tol
    history: list[float] = []
    status = Status.ITERATION_LIMIT
    omegas = [omega, *(o for o in OMEGAS if o != omega)]
    om, best, best_at = omegas[0], np.inf, 0
    next_try, last_try = 1e-2, 0
    report: dict[str, Any] = {"attempts": 0}
    checkpoint: tuple[np.ndarray, float] | None = None
    step_before = None
    before: np.ndarray | None = None  # the responses at the previous exact-finish attempt
    # restarts solve the relaxed LP, whose size grows with users x servers: fewer of them on large instances
    max_jumps = min(MAX_JUMPS, round(MAX_JUMPS * JUMP_PAIRS / max(1, inst.n_users * inst.n_servers)))

    def may_jump() -> bool:  # until the restarts are used up or stop lowering the relaxed LP's slack
        slacks = report.get("slacks", [])
        stalled = len(slacks) > JUMP_STALL and min(slacks[-JUMP_STALL:]) > 0.7 * min(slacks[:-JUMP_STALL])
        return "resumed" not in report and report.get("jumps", 0) < max_jumps and not stalled

    memo: dict[bytes, Any] = {}  # the finish LPs' answers per structure (exact_finish's memo)

    def certified(z: np.ndarray | None) -> bool:
        return z is not None and psdsf_certificate(inst, z, tol=1e-9)["holds"]

    def structure_lp(at: np.ndarray | None = None, **kw: Any) -> np.ndarray | None:
        """:func:`exact_finish` on the current responses (or on ``at``), within the session's remaining
        time and ``LP_WORK`` (an LP that HiGHS cannot end costs at most that; its structure is not tried
        again)."""
        stats: dict[str, Any] = {}
        y = exact_finish(inst, resp if at is None else at, 1e-6, 1e-7, memo=memo, work=LP_WORK,
                         time_limit=None if session is None else session.remaining(), stats=stats, **kw)
        if stats.get("capped"):
            report["capped"] = report.get("capped", 0) + 1
        return y

    def canonical_vertex(y: np.ndarray) -> np.ndarray:
        """The canonical vertex of ``y``'s structure where that carries the certificate, else ``y``
        (``report["canonical"]``: which)."""
        z = structure_lp(at=y, canonical=True)
        report["canonical"] = certified(z)
        return z if report["canonical"] else y

    def finished(y: np.ndarray | None, pruned: int, drop: np.ndarray | None = None
                 ) -> tuple[np.ndarray, Status, dict[str, Any]] | None:
        """The run's result when ``y``, an exact finish's point (of the responses' structure without
        ``drop``), carries the certificate: that structure's canonical vertex where it carries it too,
        else the canonical vertex of ``y``'s own structure, else ``y``."""
        if not certified(y):
            return None
        # one answer per input: where the structure's LP has several solutions, the solver's vertex moves
        # with the last bits of the data (another unit, another route); its canonical vertex does not
        z = structure_lp(drop=drop, canonical=True)
        if not certified(z):  # (a relaxed LP's point: its slacks on rows the point does not use)
            z = structure_lp(at=y, canonical=True)
        report["canonical"] = certified(z)
        y = z if report["canonical"] else y
        report.update(sweep=sweep, pruned=pruned, change=rel)
        log.info("ps-dsf fast: exact finish after %d sweeps", sweep)
        return y, Status.CONVERGED, {"sweeps": sweep, "omega": om, "finish": report, "max_change": history}

    bar = tqdm(total=max_iter, desc="ps-dsf fast", unit="sweep", file=sys.stderr,
               disable=None if progress is None else not progress, leave=False)
    try:
        for sweep in range(1, max_iter + 1):
            if sweep - best_at >= 100:  # stalled (a cycle of the responses): change ω
                om = omegas[(omegas.index(om) + 1) % len(omegas)]
                best_at = sweep
            X = x.sum(axis=1)
            resid = 0.0
            start = x.copy()
            for i, U, w, D, c, lim in pre:
                old = x[U, i]
                col = _capped_response(inst, x, i, U, w, D, c, lim, X[U])
                resp[U, i] = col
                resid = max(resid, float(np.abs(col - old).max(initial=0.0)))
                new = col if om == 1.0 else np.maximum(old + om * (col - old), 0.0)
                if len(lim):  # over-relaxation must not pass a task limit or budget
                    new[lim] = np.minimum(new[lim], np.maximum(col[lim], old[lim]))
                if om != 1.0 and inst.external and not _within_room(inst, x, i, U, new):
                    new = col  # nor what the other servers leave of an external resource
                X[U] += new - old
                x[U, i] = new
            history.append(resid)
            rel = resid / max(1e-300, float(x.max(initial=0.0)))
            if rel < 0.5 * best:
                best, best_at = rel, sweep
            bar.update(1)
            bar.set_postfix_str(f"change {rel:.2g}", refresh=False)
            if resid <= fp * max(1.0, float(x.max(initial=0.0))):
                status = Status.CONVERGED
                break
            step = x - start  # (the jump moves x; the finish below reads the responses)
            rho = None if step_before is None else _steady_drift(step_before, step, *DRIFT)
            if rho is not None:  # a steady walk: jump to where it leaves the line or to its limit
                t = _feasible_ray([], x, step, skip=1.0)
                if rho < 1 - 1e-3:
                    t = min(t, rho / (1 - rho))
                if t > 1.0:
                    x = np.maximum(x + min(t, DRIFT_MAX) * step, 0.0)
                    report["drifts"] = report.get("drifts", 0) + 1
                    step = None
            step_before = step
            if finish and (rel <= next_try or (sweep - last_try >= 25 and next_try < 1e-2)):
                last_try, next_try = sweep, min(next_try, rel) / 10
                report["attempts"] += 1
                drop, jump = None, None
                # the structure's own LP first (no slack: a small LP, infeasible unless the structure
                # is right); the relaxed one, much larger, only when its point may be used or, close
                # to a fixed point, to name the holders to drop
                done = finished(structure_lp(), 0)
                if done:
                    return done
                tried = None  # the last set dropped: a larger fall that leaves the same set is not re-solved
                for fall in DRAINING if before is not None and not may_jump() else ():
                    # pairs the sweeps are emptying: the structure's LP without them
                    draining = (resp < (1 - fall) * before) & (resp > 0)
                    if draining.any() and (tried is None or not np.array_equal(draining, tried)):
                        tried = draining
                        done = finished(structure_lp(drop=draining), 0, draining)
                        if done:
                            report["draining"] = fall
                            return done
                before = resp.copy()
                # no relaxed LP where no restart is made (beyond 192 000 users x servers)
                relaxed = may_jump() or (max_jumps > 0 and rel <= PRUNE_CHANGE)
                for prune in range(PRUNES + 1 if relaxed else 0):
                    out: dict[str, Any] = {}
                    y = structure_lp(relax=True, drop=drop, out=out)
                    if y is None:
                        break
                    done = finished(y, prune, out["offenders"] if drop is None else drop | out["offenders"])
                    if done:
                        return done
                    jump = y if jump is None else jump
                    report.setdefault("slacks", []).append(out["slack"])
                    if not out["offenders"].any():
                        break
                    # holders that needed slack leave the support (the LP could not empty them)
                    drop = out["offenders"] if drop is None else drop | out["offenders"]
                    # the structure's own LP again without them
                    done = finished(structure_lp(drop=drop), prune + 1, drop)
                    if done:
                        return done
                if jump is not None and may_jump():
                    if checkpoint is None:
                        checkpoint = (x.copy(), om)
                    # the point that breaks Thm 1 least: plain sweeps on from there
                    x, om = jump, 1.0
                    report["jumps"] = report.get("jumps", 0) + 1
                    last_try = sweep - 20  # and try again in 5 sweeps
                elif checkpoint is not None and "resumed" not in report:
                    # the restarts did not finish: back to the sweeps' own path where the first left it
                    report["resumed"] = sweep
                    x, om = checkpoint
                    best, best_at, next_try, last_try = np.inf, sweep, 1e-2, sweep
            if session is not None and session.expired():
                status = Status.TIME_LIMIT
                break
            if handover is not None and sweep == handover[0]:
                y = handover[1]()
                if y is not None:  # certified by the caller: its canonical vertex, as at a fixed point
                    y = canonical_vertex(y) if finish else y
                    return y, Status.CONVERGED, {"sweeps": sweep, "omega": om, "finish": report,
                                                 "max_change": history}
    finally:
        bar.close()
    X = x.sum(axis=1)
    for i, U, w, D, c, lim in pre:  # a plain sweep: every column its server's (feasible) response
        col = _capped_response(inst, x, i, U, w, D, c, lim, X[U])
        X[U] += col - x[U, i]
        x[U, i] = col
    if finish and status is Status.CONVERGED:  # a fixed point of the sweeps: its canonical vertex, as above
        x = canonical_vertex(x)
    log.info("ps-dsf fast: %d sweeps, %s", len(history), status.value)
    return x, status, {"sweeps": len(history), "omega": om, "finish": report, "max_change": history}


def time_shared_mnw(inst: Instance, session: Session) -> tuple[np.ndarray, Status, dict[str, Any]]:
    r"""PS-DSF on the time-shared form as maximum Nash welfare (``mnw``, Eisenberg–Gale, Ipopt).

    With one resource per server (its time, per-task demand ``1/γ[n,i]``), the KKT conditions of
    ``max Σ φ_n log X_n`` over χ are ``φ_n/X_n ≤ λ_i/γ[n,i]``, with equality where ``x[n,i] > 0``:
    every user's weighted VDS ``X_n/(φ_n γ[n,i])`` is at least ``1/λ_i`` at every eligible server, with
    equality for the holders, and ``λ_i > 0`` saturates the server — exactly [PSDSF] Thm 1's bottleneck
    condition (the argument of [APF] Thm 5 for α = 1). Task limits and budgets add ``ν_n ≥ 0`` to the
    left side, which only lowers a holder's VDS (or makes the limit its bottleneck), so the certificate
    still holds. The totals are unique (strictly concave in ``X``); the caller splits canonically and
    checks Thm 1."""
    from fairalloc.models import mnw

    sol = mnw.solve(inst, session)
    status = sol.status
    if status.ok:
        status = Status.CONVERGED
    return np.asarray(sol.allocation, float), status, {
        "route": "mnw (time-shared: Thm 1 = the KKT conditions of max Σ φ log X)",
        "mnw_status": sol.status.value, "relative_gap": sol.details.get("relative_gap"),
        **({"message": sol.message} if sol.message and not sol.status.ok else {})}


# ---------------------------------------------------------------------- mechanism
NEWTON_AFTER = 2000  # fast: sweeps before the Newton method is tried (fast_then_newton) ...
NEWTON_PAIRS = 400 * 64  # ... on instances of up to this many users x servers


def fast_then_newton(inst: Instance, session: Session, tol: float, max_iter: int,
                     unrounded: Instance | None = None) -> tuple[np.ndarray, Status, dict[str, Any]]:
    """:func:`fast`, and where its sweeps have not converged after ``NEWTON_AFTER`` of them, the same game
    solved by ``apf-vds``'s semismooth Newton method with ``α = inf`` at every server
    (:func:`fairalloc.models.apf_vds.leximin_newton`; [APF] Thm 2: that game is PS-DSF). Its point is
    kept where it carries the Thm 1 certificate at ``10⁻⁹``, and :func:`fast` returns the canonical
    vertex of its structure where that carries it too, as for a fixed point of its own; otherwise the
    sweeps go on to ``max_iter``. ``details.newton``: the sweeps before it, its status, scaled NCP
    residual, seconds, and whether its point was kept (``certified``) as that vertex (``canonical``).
    The call is :func:`fast`'s ``handover``: where the Newton method does not certify, the sweeps go on
    exactly as without it.
    :func:`solve` calls this on instances of up to ``NEWTON_PAIRS`` users × servers.

    The Newton method runs on ``unrounded`` where given: the normalised instance before
    :func:`~fairalloc.models._perserver.on_grid` (as ``apf-vds`` has it; its path rounds to its own
    grid, so the answer still does not depend on the units). Its path is sensitive to the last bits of
    the data: on 200 × 32 × 6 instances (seeds 106–107, eight families, in name order, without the
    sweeps) it certified 14 of 16 from the unrounded numbers and 11 of 16 from the 32-bit grid, with
    different failures.

    Measured on 64 instances ``random_instance(seed, 200, 32, 6)``, seeds 106–109, eight families (the
    table in docs/mechanisms/psdsf.md): the sweeps alone end ``iteration_limit`` on three (they cycle:
    ``plain`` 106 and ``placement`` 107 also at 30 000 sweeps); handed over after 2 000 sweeps, all 64
    certify, the slowest in 64.3 s (``weights`` 109: the Newton method failed there in 30.9 s and the
    sweeps went on, as alone, to 2 202). Where the Newton method fails, it costs its time and nothing
    else: the first version resumed the sweeps from their iterate with a fresh ``ω``, and ``plain`` 113
    then took 4 820 sweeps (118.4 s) where alone it takes 2 253 (now 75.4 s with the failed Newton
    run). After 1 000 sweeps the cycling runs ended sooner, but four of the five runs that the sweeps
    certify within 1 052–2 520 sweeps took 2.6–21.6 s longer. At 400 × 64 × 4 (seed 1) ``plain``
    takes 1 219 sweeps (105.4 s; 109.8 s handed over after 1 000, the Newton method certifying in
    28.4 s); at 1000 × 250 the sweeps certify in 1 114 sweeps (248 s) and the Newton method alone had
    a scaled residual of 0.029 after 120 s: hence ``NEWTON_PAIRS``."""
    report: dict[str, Any] = {}

    def newton() -> np.ndarray | None:
        from fairalloc.models import apf_vds  # (here: its import takes 0.15 s, and most runs never hand over)

        start = time.perf_counter()
        sol = apf_vds.leximin_newton(inst if unrounded is None else unrounded, session)
        y = sol.allocation
        report.update(after_sweeps=NEWTON_AFTER, status=sol.status.value,
                      ncp_residual_scaled=sol.details.get("ncp_residual_scaled"),
                      certified=sol.status.ok and psdsf_certificate(inst, y, tol=1e-9)["holds"],
                      seconds=time.perf_counter() - start)
        return y if report["certified"] else None

    x, status, info = fast(inst, session, tol, max_iter, handover=(NEWTON_AFTER, newton))
    if report.get("certified"):  # fast took the canonical vertex of the point's structure
        report["canonical"] = info["finish"]["canonical"]
        log.info("ps-dsf fast: %d sweeps, then certified by the Newton method", NEWTON_AFTER)
    return x, status, {**info, **({"newton": report} if report else {})}

LIMITS_HINT = "only algorithm=fast and best-response support task limits; omit 'tasks' for the others"
BUDGET_HINT = "only algorithm=fast and best-response support budgets; omit 'budget' for the others"
EXTERNAL_HINT = "only algorithm=fast and best-response support external resources; or use tsf-er, cru or mnw"


def build(inst: Instance, **_: Any) -> pyo.ConcreteModel:
    """The best-response model of the first server that has eligible users (offsets 0)."""
    require_per_server(inst, "ps-dsf", allow_limits=True, allow_external=True)
    i = next(i for i in range(inst.n_servers) if inst.runnable[:, i].any())
    return ServerLeximin(inst, i).model


PARAMS = [
    Param("algorithm", choice("fast", "best-response", "paper", "distributed"), "fast",
          "fast (numpy best responses, over-relaxed Gauss–Seidel, exact finish; time-shared: mnw), "
          "best-response (per-server leximin LPs), paper (Algorithm I) or distributed ([PSDSF] §III-D)"),
    Param("tol", as_float, 1e-8, "convergence tolerance (relative change per sweep; ties and "
          "saturation in Algorithm I)", lambda v: None if v > 0 else "must be > 0"),
    Param("max_iter", as_int, 5000, "cap on sweeps / rounds / periods",
          lambda v: None if v > 0 else "must be > 0"),
    Param("seed", as_int, 0, "random server order of the distributed algorithm"),
    Param("pool", as_bool, True, "solve each group of identical servers as one server and split it evenly "
          "(exact, models/_pools.py; not with external resources); false: the full game"),
    Param("newton", as_bool, True, "fast: where the sweeps have not converged after NEWTON_AFTER (2000) "
          "sweeps, solve the game by apf-vds's Newton method at alpha = inf, up to 400 x 64 users x "
          "servers (where it does not certify, the sweeps go on); false: the sweeps alone"),
]


def _recheck(inst: Instance, x: np.ndarray, pooled: Solution) -> tuple[Status, str, dict[str, Any]]:
    """The even split of a pooled solution, certified on every server of the full instance."""
    cert = psdsf_certificate(inst, x)
    status, message = pooled.status, pooled.message
    if status.ok and not cert["holds"]:
        status = worst(status, Status.ERROR)
        message = "the even split of the pooled solution fails the PS-DSF certificate (details.certificate)"
    return status, message, {"algorithm": pooled.details.get("algorithm"), "certificate": cert,
                             "weighted_vds": _vds_by_pair(inst, x)}


def _vds_by_pair(inst: Instance, x: np.ndarray) -> dict[str, dict[str, float]]:
    """``details.weighted_vds``: user → server → weighted VDS on runnable pairs."""
    vds = weighted_vds(inst, x)
    at = [np.flatnonzero(row) for row in inst.runnable]
    return {u: dict(zip([inst.servers[i] for i in at[n]], vds[n, at[n]].tolist()))
            for n, u in enumerate(inst.users)}


@mechanism("ps-dsf", problem="lp", build=build, needs_demands=False, params=PARAMS,
           reference="[PSDSF] §III, Def. 2, Thm 1, Alg. I",
           summary="per-server dominant-share fairness: leximin of VDS at every server (fixed point)")
def solve(inst: Instance, session: Session, algorithm: str = "fast", tol: float = 1e-8,
          max_iter: int = 5000, seed: int = 0, pool: bool = True, newton: bool = True) -> Solution:
    require_per_server(inst, "ps-dsf", allow_limits=algorithm in ("fast", "best-response"),
                       limits_hint=LIMITS_HINT, budget_hint=BUDGET_HINT,
                       allow_external=algorithm in ("fast", "best-response"), external_hint=EXTERNAL_HINT)
    # one answer per input: the loops run with users, servers and resources in name order (the fixed
    # point need not be unique, and which one the sweeps reach depends on the order they visit)
    ordered = solve_in_name_order(inst, session, solve, _recheck, algorithm=algorithm, tol=tol,
                                  max_iter=max_iter, seed=seed, pool=pool, newton=newton)
    if ordered is not None:
        return ordered
    # identical servers: one server each group, split evenly, certified on every server (not with external
    # resources: what a pooled server may use of them is not written)
    if pool and not inst.external:
        pooled = solve_on_pools(inst, session, solve, _recheck, algorithm=algorithm, tol=tol,
                                max_iter=max_iter, seed=seed, pool=False, newton=newton)
        if pooled is not None:
            return pooled
    bounds = None
    route: dict[str, Any] = {}
    if algorithm == "fast" and session.customize is not None:  # numpy cannot read a hook's edits
        algorithm = "best-response"
        route = {"routed": "fast -> best-response (a customize hook edits the per-server LPs)"}
    edited = session.customize is not None
    # the loops run in normalised units (each resource in its largest capacity, each user's task in its
    # best γ: the same game, _perserver.normalized), so the answer does not depend on the units; a
    # customize hook sees the instance's own
    unrounded, k, _ = (inst, np.ones(inst.n_users), None) if edited else normalized(inst)
    norm = unrounded if edited else on_grid(unrounded)  # and other units give the same numbers there
    if algorithm == "fast" and inst.time_shared:
        x, status, info = time_shared_mnw(inst, session)
        k = np.ones(inst.n_users)
    elif algorithm == "best-response":
        x, status, info = best_response(norm, session, tol, max_iter)
        bounds = info.pop("column_bounds")
    elif algorithm == "paper":
        x, status, info = algorithm_i(norm, min(tol, 1e-9), max_iter, session)
    elif algorithm == "fast" and newton and max_iter > NEWTON_AFTER and norm.runnable.size <= NEWTON_PAIRS:
        x, status, info = fast_then_newton(norm, session, min(tol, 1e-9), max_iter, unrounded)
    elif algorithm == "fast":
        x, status, info = fast(norm, session, min(tol, 1e-9), max_iter)
    else:
        x, status, info = distributed(norm, seed, min(tol, 1e-9), max_iter, session)
    # back in the instance's units, the loops' noise set to zero as the result's will be (a user starved
    # to 10⁻¹⁵ tasks would otherwise count as holding its noise, and fail the certificate)
    x = x * k[:, None]
    x = snap_zeros(x, 1e-9, np.maximum(inst.eta, np.abs(x).max(axis=1, initial=0.0)),
                   np.where(inst.runnable, inst.gamma, np.inf))
    split = None
    if status is Status.CONVERGED and not edited:  # one split per allocation (time-shared form)
        x, split = canonical_split(inst, x)
    cert = psdsf_certificate(inst, x, bounds=bounds)
    message = info.pop("message", "") or ("" if status.ok else f"{algorithm}: {status.value}")
    if status is Status.CONVERGED and not cert["holds"] and edited:
        # the hook added rows the certificate cannot read: what remains is the fixed point itself, every
        # server's leximin LP of the edited model solved to optimality at it
        message = ("fixed point of the edited per-server leximin LPs; the Thm 1 certificate reads column "
                   "bounds only and names pairs the other edits block (details.certificate)")
    elif status is Status.CONVERGED and not cert["holds"]:
        log.warning("ps-dsf (%s) converged but the certificate fails: %s", algorithm, cert["failures"])
        status = worst(status, Status.ERROR)
        message = "fixed point reached but the PS-DSF certificate fails (see details.certificate)"
    return Solution(x, status, message, details={
        "algorithm": algorithm, **route, **info, "certificate": cert,
        **({"canonical": split} if split else {}), "weighted_vds": _vds_by_pair(inst, x)})
