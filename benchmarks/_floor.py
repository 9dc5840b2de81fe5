r"""The floor: the LPs of the scaling study built straight from numpy into highspy.

No Pyomo, no expression objects: χ (docs/instance-format.md#the-model) is assembled as one sparse matrix
with vectorised numpy
and passed to HiGHS once; the mechanism's loop then runs on the ``highspy.Highs`` object. The time
this takes is what the same algorithm costs with no modelling layer at all. Columns are the runnable
pairs ``(n, i)`` in row-major order (as ``chi.P``), then ``t`` when there is one; rows are

.. math::

    \sum_n d_{n,r}\, x_{n,i} \le c_{i,r}, \qquad
    \sum_{n}\sum_{i \in S_e} d_{n,e}\, x_{n,i} \le c_e, \qquad
    \sum_i x_{n,i} \le T_n

and, for the max-min forms, one row per user on its share ``κ_n X_n`` (:func:`share_coeff`):

- :func:`progressive_filling` (drfh, tsf, tsf-er): ``κ_n X_n - t ≥ 0``, ``max t``; every round
  freezes the active users whose row has a non-zero dual — fairalloc's rule
  (:mod:`fairalloc.models.maxmin`) — by setting the row's ``t`` coefficient to 0 and its lower bound
  to the user's share (less the same margin);
- :func:`equal_shares` (tsf-er ``variant=paper`` without task limits, [TSFER] (8a)–(8f)): one LP with
  ``κ_n X_n - g = 0``, ``max g``;
- :func:`weighted_sum` (utilitarian, relative-utilitarian): ``max Σ w_n X_n``.

HiGHS gets the options fairalloc would give it (:func:`fairalloc_options`): IPM for LPs with at
least ``IPM_ABOVE`` columns, HiGHS's own choice below.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp

from fairalloc.instance import Instance
from fairalloc.solvers.highs import IPM_ABOVE, new_highs

__all__ = ["FloorOutcome", "chi_matrix", "equal_shares", "fairalloc_options", "progressive_filling",
           "share_coeff", "weighted_sum"]

INF = highspy.kHighsInf


def share_coeff(inst: Instance, mechanism: str) -> np.ndarray:
    """``κ_n``: the share of user ``n`` is ``κ_n X_n`` (drfh: dominant share / φ ([PSDSF] (6));
    tsf: ``1/(φ γTSF)``; tsf-er: ``1/(φ η)`` ([TSFER] (6), §8)); or the weight of ``X_n`` in the
    objective of utilitarian (1) and relative-utilitarian (``1/η``)."""
    if mechanism == "drfh":
        return inst.dominant_coeff / inst.weight
    if mechanism == "tsf":
        return 1.0 / (inst.weight * inst.gamma_tsf)
    if mechanism in ("tsf-er", "relative-utilitarian"):
        return 1.0 / (inst.weight * inst.eta) if mechanism == "tsf-er" else 1.0 / inst.eta
    if mechanism == "utilitarian":
        return np.ones(inst.n_users)
    raise ValueError(f"no floor LP for mechanism {mechanism!r}")


def fairalloc_options(n_cols: int) -> dict[str, Any]:
    """The HiGHS options fairalloc's bridge uses for an LP with ``n_cols`` columns."""
    return {"solver": "ipm"} if n_cols >= IPM_ABOVE else {}


def chi_matrix(inst: Instance, task_limits: bool = True
               ) -> tuple[np.ndarray, sp.csr_array, np.ndarray, np.ndarray]:
    """χ as ``(pairs, A, lo, up)``: ``lo ≤ A x ≤ up`` over the runnable pairs, rows that carry no
    term dropped (as :func:`fairalloc.models.feasible.feasible_set` does). Capacity form only."""
    pairs = np.argwhere(inst.runnable)
    n, i = pairs[:, 0], pairs[:, 1]
    P, K, R = len(pairs), inst.n_servers, len(inst.resources)
    col = np.arange(P)
    blocks, ups = [], []
    d = inst.demand[n]  # (P, R)
    rr, cc = np.nonzero(d.T > 0)  # resource, pair
    blocks.append(sp.csr_array((d.T[rr, cc], (i[cc] * R + rr, col[cc])), shape=(K * R, P)))
    ups.append(inst.capacity.reshape(-1))  # row i*R + r
    for e in range(len(inst.external)):
        blocks.append(sp.csr_array((inst.external_demand[n, e] * inst.external_scope[e, i])[None, :]))
        ups.append(np.array([inst.external_capacity[e]]))
    if task_limits:
        lim = np.flatnonzero(np.isfinite(inst.tasks))
        row_of = np.full(inst.n_users, -1)
        row_of[lim] = np.arange(lim.size)
        sel = row_of[n] >= 0
        blocks.append(sp.csr_array((np.ones(sel.sum()), (row_of[n[sel]], col[sel])),
                                   shape=(lim.size, P)))
        ups.append(inst.tasks[lim])
    A = sp.csr_array(sp.vstack(blocks, format="csr"))
    up = np.concatenate(ups)
    keep = np.diff(A.indptr) > 0
    return pairs, sp.csr_array(A[keep]), np.full(int(keep.sum()), -INF), up[keep]


@dataclass
class FloorOutcome:
    x: np.ndarray  # users × servers
    objective: float  # the first LP's optimum (the max-min level, or the weighted sum)
    levels: np.ndarray  # level each user was frozen at (NaN for one-LP forms)
    status: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    iterations: int = 0
    shape: tuple[int, int, int] = (0, 0, 0)  # rows, columns, nonzeros of the first LP

    @property
    def lps(self) -> int:
        return len(self.rounds)


def _pass(A: sp.csr_array, cost: np.ndarray, col_lo: np.ndarray, row_lo: np.ndarray,
          row_up: np.ndarray, options: dict[str, Any] | None) -> highspy.Highs:
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = cost
    lp.col_lower_ = col_lo
    lp.col_upper_ = np.full(A.shape[1], INF)
    lp.row_lower_, lp.row_upper_ = row_lo, row_up
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data
    h = new_highs()
    for k, v in (fairalloc_options(A.shape[1]) if options is None else options).items():
        h.setOptionValue(k, v)
    h.passModel(lp)
    return h


def _share_lp(inst: Instance, coeff: np.ndarray, equal: bool, options: dict[str, Any] | None,
              task_limits: bool = True) -> tuple[highspy.Highs, np.ndarray, int, tuple[int, int, int]]:
    """χ plus one row ``κ_n X_n - t ≥ 0`` (``= 0`` if ``equal``) per user, ``max t``."""
    pairs, A, lo, up = chi_matrix(inst, task_limits)
    P, N = len(pairs), inst.n_users
    L = sp.csr_array((coeff[pairs[:, 0]], (pairs[:, 0], np.arange(P))), shape=(N, P))
    M = sp.csr_array(sp.vstack([sp.hstack([A, sp.csr_array((A.shape[0], 1))]),
                                sp.hstack([L, sp.csr_array(-np.ones((N, 1)))])], format="csr"))
    cost = np.zeros(P + 1)
    cost[-1] = 1.0
    h = _pass(M, cost, np.concatenate([np.zeros(P), [-INF]]), np.concatenate([lo, np.zeros(N)]),
              np.concatenate([up, np.zeros(N) if equal else np.full(N, INF)]), options)
    return h, pairs, A.shape[0], (*M.shape, M.nnz)


def _allocation(inst: Instance, pairs: np.ndarray, values: np.ndarray) -> np.ndarray:
    x = np.zeros((inst.n_users, inst.n_servers))
    x[pairs[:, 0], pairs[:, 1]] = np.maximum(values[:len(pairs)], 0.0)
    return x


def _iterations(h: highspy.Highs) -> int:
    info = h.getInfo()
    return sum(max(0, int(v)) for v in (info.simplex_iteration_count, info.ipm_iteration_count,
                                         info.crossover_iteration_count, info.pdlp_iteration_count))


def progressive_filling(inst: Instance, coeff: np.ndarray, options: dict[str, Any] | None = None,
                        dual_tol: float = 1e-9, tol: float = 1e-9) -> FloorOutcome:
    """Progressive filling on the numpy-built LP (the same freezing rule as fairalloc's)."""
    t0 = time.perf_counter()
    h, pairs, first, shape = _share_lp(inst, coeff, False, options)
    N, P = inst.n_users, len(pairs)
    t_build = time.perf_counter() - t0
    active = np.ones(N, bool)
    levels = np.full(N, np.nan)
    rounds: list[dict[str, Any]] = []
    t_solve = t_load = 0.0
    iters = 0
    status = "optimal"
    values = np.zeros(P + 1)
    while active.any():
        t1 = time.perf_counter()
        if len(rounds) == 1:  # re-solves by primal simplex from the previous basis, as fairalloc's
            h.setOptionValue("simplex_strategy", 4)  # progressive filling does (IPM ignores it)
        h.run()
        dt = time.perf_counter() - t1
        t_solve += dt
        t1 = time.perf_counter()
        iters += _iterations(h)
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            status = h.modelStatusToString(h.getModelStatus())
            break
        sol = h.getSolution()
        values = np.asarray(sol.col_value)
        t = float(values[P])
        y = np.asarray(sol.row_dual)[first:first + N]
        share = np.asarray(sol.row_value)[first:first + N] + t  # active rows: κ X - t
        blocked = np.flatnonzero(active & (np.abs(y) > dual_tol))
        if not blocked.size:
            status = "no blocked user"
            break
        floor = np.minimum(t, share[blocked]) - tol * abs(t)
        levels[blocked] = t
        active[blocked] = False
        rows = (first + blocked).astype(np.int32)
        for r in rows.tolist():
            h.changeCoeff(r, P, 0.0)
        h.changeRowsBounds(len(rows), rows, floor, np.full(len(rows), INF))
        t_load += time.perf_counter() - t1
        rounds.append({"level": t, "frozen": int(blocked.size), "seconds": dt})
    t1 = time.perf_counter()
    x = _allocation(inst, pairs, values)
    t_load += time.perf_counter() - t1
    return FloorOutcome(x, rounds[0]["level"] if rounds else float("nan"), levels, status, rounds,
                        {"build": t_build, "solve": t_solve, "solution_load": t_load}, iters, shape)


def _one_lp(inst: Instance, h: highspy.Highs, pairs: np.ndarray, t_build: float,
            shape: tuple[int, int, int]) -> FloorOutcome:
    t1 = time.perf_counter()
    h.run()
    dt = time.perf_counter() - t1
    ok = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    t1 = time.perf_counter()
    obj = float(h.getInfo().objective_function_value) if ok else float("nan")
    x = _allocation(inst, pairs, np.asarray(h.getSolution().col_value)) if ok else \
        np.zeros((inst.n_users, inst.n_servers))
    load = time.perf_counter() - t1
    return FloorOutcome(x, obj, np.full(inst.n_users, np.nan),
                        "optimal" if ok else h.modelStatusToString(h.getModelStatus()),
                        [{"level": obj, "frozen": 0, "seconds": dt}],
                        {"build": t_build, "solve": dt, "solution_load": load}, _iterations(h), shape)


def equal_shares(inst: Instance, coeff: np.ndarray, options: dict[str, Any] | None = None
                 ) -> FloorOutcome:
    """``max g`` s.t. χ without task limits, ``κ_n X_n = g`` for every user: the one LP of [TSFER]
    Algorithm 1 when no user has a task limit ((8a)–(8d), (8f))."""
    t0 = time.perf_counter()
    h, pairs, _, shape = _share_lp(inst, coeff, True, options, task_limits=False)
    return _one_lp(inst, h, pairs, time.perf_counter() - t0, shape)


def weighted_sum(inst: Instance, coeff: np.ndarray, options: dict[str, Any] | None = None
                 ) -> FloorOutcome:
    """``max Σ_n coeff_n X_n`` over χ."""
    t0 = time.perf_counter()
    pairs, A, lo, up = chi_matrix(inst)
    h = _pass(A, coeff[pairs[:, 0]], np.zeros(len(pairs)), lo, up, options)
    return _one_lp(inst, h, pairs, time.perf_counter() - t0, (*A.shape, A.nnz))
