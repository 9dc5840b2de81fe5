r"""An interior-point method for LPs with many rows of one entry per column (Schur complement).

Progressive filling's max-min LPs (``models/maxmin.py``) have ``N·K`` allocation columns and three
kinds of rows: one ``level``/``floor`` row per user, ``K·R`` capacity rows and the external rows.
Every allocation column has exactly one entry among the users' rows. In the normal equations
``A Θ Aᵀ Δy = r`` of a primal–dual interior-point method that block of rows is therefore
diagonal, and eliminating it leaves a dense Schur complement over the ``K·R + E`` coupling rows
only (1 025 × 1 025 at 2 048 users × 256 servers × 4 resources), which one dense Cholesky factor
solves. Columns with several entries among those rows (the common level ``t``) are added back by
the Sherman–Morrison–Woodbury formula. HiGHS's IPX solves the same normal equations by
preconditioned conjugate gradients; on these LPs each of its iterations took about 0.7 s at
2 048 × 256 against about 0.24 s here (``docs/solvers.md``, "Schur-complement interior point").

The method is Mehrotra's predictor–corrector on

.. math::

    \min_z \ \bar c^\top z \quad\text{s.t.}\quad \bar A z = b,\quad l \le z \le u,

where ``z`` holds the LP's columns and one activity variable per ranged row (``A x − r = 0``,
``r`` within the row's bounds; an equality row is ``A x = b``; free rows are dropped). Each bound
gets a slack and a multiplier; a free column is regularised by ``FREE_REG``. It stops at relative
primal and dual residuals below ``tol_feas`` (10⁻⁹; each row relative to its own size) and a
relative duality gap below ``tol_gap`` (10⁻¹⁰) — an interior optimum, not a vertex, as HiGHS's IPM
without crossover returns (its defaults: 10⁻⁷ feasibility, 10⁻⁸ gap). :func:`structure` says
whether an LP has the shape; :class:`SchurIPM` solves it; ``docs/solvers.md`` has the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import highspy
import numpy as np
import scipy.linalg as sla
import scipy.linalg.blas as blas
import scipy.sparse as sp

__all__ = ["MAX_COUPLING", "SchurIPM", "structure"]

log = logging.getLogger(__name__)

MAX_COUPLING = 4000  # most coupling rows: the Schur complement over them is dense (4 000² entries)
DENSE_SHARE = 0.1  # a column with entries in more than this share of the rows is added back by Woodbury
FREE_REG = 1e-10  # primal regularisation of free columns (HiGHS's units)
INF = highspy.kHighsInf


def structure(A: sp.csc_array, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(diagonal_rows, dense_columns)`` for the rows ``keep`` of ``A``, or None.

    Rows are taken in order of increasing length into the diagonal block while no column (other than
    the dense ones, with entries in more than ``DENSE_SHARE`` of the rows) has two entries there.
    None when more than ``MAX_COUPLING`` rows stay outside, or when there are more dense columns than
    a few (the Woodbury correction is one solve per dense column)."""
    m, n = A.shape
    nnz_col = np.diff(sp.csc_array(A[np.flatnonzero(keep)]).indptr)  # entries in the kept rows
    dense = np.flatnonzero(nnz_col > max(10, DENSE_SHARE * keep.sum()))
    if dense.size > 8:
        return None
    is_dense = np.zeros(n, bool)
    is_dense[dense] = True
    R = sp.csr_array(A)
    length = np.diff(R.indptr)
    covered = np.zeros(n, bool)
    diag = np.zeros(m, bool)
    for i in np.flatnonzero(keep)[np.argsort(length[keep], kind="stable")]:
        cols = R.indices[R.indptr[i]:R.indptr[i + 1]]
        cols = cols[~is_dense[cols]]
        if not covered[cols].any():
            covered[cols] = True
            diag[i] = True
    if (keep & ~diag).sum() > MAX_COUPLING or not diag.any():
        return None
    return diag, dense


class SchurIPM:
    """Mehrotra's predictor–corrector on an LP given as HiGHS's arrays (the keys of
    :func:`~fairalloc.solvers.highs.read_lp`: ``A`` (CSC), ``c``, ``lb``, ``ub``, ``rl``, ``ru``,
    ``sense``, ``offset``)."""

    MAX_ITER = 200
    STEP = 0.995  # fraction of the step to the boundary
    REFINE = 2  # most steps of iterative refinement of a normal-equations solve (:func:`_refined`)
    START = "mehrotra"  # or "plain" (:func:`_plain_start`)
    SLOW_START, SLOW_STEP = 3, 0.01  # a start whose first 3 steps are all below 1 % is left (starts())
    STALL = 5  # iterations with the gap within tolerance and the rows not before giving up

    def __init__(self, L: dict[str, Any], tol_feas: float = 1e-9, tol_gap: float = 1e-10) -> None:
        self.L = L
        self.tol_feas, self.tol_gap = tol_feas, tol_gap
        self.stats: dict[str, Any] = {}

    def solve(self, time_limit: float | None = None) -> dict[str, Any] | None:
        """An interior optimum as ``{"status", "x", "row_value", "row_dual", "col_dual", "objective",
        "iterations"}`` in the LP's own units and HiGHS's sign conventions, or None when the LP does
        not have the shape (:func:`structure`)."""
        t0 = time.perf_counter()
        L = self.L
        A = sp.csc_array(L["A"])
        m, n = A.shape
        rl, ru = np.asarray(L["rl"], float), np.asarray(L["ru"], float)
        keep = (rl > -INF) | (ru < INF)
        st = structure(A, keep)
        if st is None:
            return None
        diag, dense = st
        sgn = 1.0 if L["sense"] == highspy.ObjSense.kMinimize else -1.0
        rows = np.flatnonzero(keep)
        mk = rows.size
        Ak = sp.csc_array(A[rows])
        eq = rl[rows] == ru[rows]
        srow = np.flatnonzero(~eq)  # kept rows (local index) with an activity variable
        ns = srow.size
        # z = [x (n), r (ns)]; Ā = [Ak, −I on srow]; b = rl on equality rows, 0 elsewhere
        b = np.where(eq, rl[rows], 0.0)
        lo = np.concatenate([np.asarray(L["lb"], float), rl[rows][srow]])
        up = np.concatenate([np.asarray(L["ub"], float), ru[rows][srow]])
        cbar = np.concatenate([sgn * np.asarray(L["c"], float), np.zeros(ns)])
        fixed = (lo > -INF) & (up - lo <= 0)  # held at lo: no slack, no multiplier, no step
        hasl, hasu = (lo > -INF) & ~fixed, (up < INF) & ~fixed
        free = ~hasl & ~hasu & ~fixed
        nz = n + ns
        S_ = sp.csc_array((-np.ones(ns), (srow, np.arange(ns))), shape=(mk, ns))
        Abar = sp.hstack([Ak, S_], format="csc")
        AbarT = sp.csr_array(Abar.T)
        is_dense = np.zeros(nz, bool)
        is_dense[dense] = True
        dU = diag[rows]  # diagonal rows, local
        Urows, Grows = np.flatnonzero(dU), np.flatnonzero(~dU)
        nd = np.flatnonzero(~is_dense)
        normal = _Normal(sp.csc_array(Abar[:, nd]), Urows, Grows)
        V = Abar[:, dense].toarray() if dense.size else np.zeros((mk, 0))
        # lower bounds are on (nearly) every column: their slacks and multipliers are full-length, 1 and
        # 0 where there is none (so that they drop out of every sum and ratio); upper bounds are on
        # few (the rows' activities): theirs are held only at iu
        iu = np.flatnonzero(hasu)
        nb = int(hasl.sum() + iu.size)
        absA = abs(Abar)
        lo_f, up_u = np.where(hasl, lo, 0.0), up[iu]
        cnorm = 1.0 + float(np.abs(cbar).max(initial=0.0))
        status = "iteration_limit"
        best: tuple[float, Any, Any] = (np.inf, None, None)
        stall = 0
        it = 0
        t_lin = 0.0

        def starts() -> Iterator[tuple[str, tuple]]:
            """The starts in the order tried: Mehrotra's; his primal point with the plain start's
            multipliers; the plain start. Each is left for the next when it is not finite, or when
            the steps from it stay below ``SLOW_STEP`` for ``SLOW_START`` iterations."""
            if self.START == "mehrotra":
                yield from _mehrotra_starts(normal, nd, dense, V, Abar, AbarT, b, cbar, lo, up, hasl, hasu,
                                            fixed)
            yield "plain", _plain_start(Ak, n, srow, cbar, lo, up, hasl, hasu, fixed)

        # the bounds' slacks are iterates of their own (z − l − s = 0 and u − z − q = 0 as residuals):
        # recomputed as z − l they would lose their digits to cancellation once far below |z|
        tried = starts()
        start_name, (z, s, q, v, p, y) = next(tried)
        ap = ad = float("nan")
        slow = it0 = 0
        for it in range(self.MAX_ITER + 1):
            if slow >= self.SLOW_START and start_name != "plain":
                log.debug("schur ipm: steps below %g for %d iterations from the %s start; the next start",
                          self.SLOW_STEP, slow, start_name)
                start_name, (z, s, q, v, p, y) = next(tried)
                slow, it0 = 0, it
            rlb = np.where(hasl, z - lo - s, 0.0)
            rub = up_u - z[iu] - q
            rp = b - Abar @ z
            rd = cbar - AbarT @ y - v
            rd[iu] += p
            rd[fixed] = 0.0  # a fixed column's reduced cost is free
            mu = (float(s @ v) + float(q @ p)) / max(nb, 1)
            obj = float(cbar @ z)
            # each row's residual relative to its own size (1 + |b_i| + Σ_j |a_ij z_j|): a row of 10⁵
            # terms (a link every user needs) is held to the same relative precision as the others
            row_size = 1.0 + np.abs(b) + absA @ np.abs(z)
            pinf = max(float((np.abs(rp) / row_size).max(initial=0.0)),
                       float((np.abs(rlb) / (1.0 + np.abs(lo_f))).max(initial=0.0)),
                       float((np.abs(rub) / (1.0 + np.abs(up_u))).max(initial=0.0)))
            dinf = float(np.abs(rd).max(initial=0.0)) / cnorm
            gap = mu * nb / (1.0 + abs(obj))
            log.debug("schur ipm %d: obj %.12g pinf %.2e dinf %.2e gap %.2e (steps %.2g, %.2g)", it, obj,
                      pinf, dinf, gap, ap, ad)
            if pinf <= self.tol_feas and dinf <= self.tol_feas and gap <= self.tol_gap:
                status = "optimal"
                break
            if not (np.isfinite(pinf) and np.isfinite(dinf) and np.isfinite(mu)):
                status = "error"
                break
            # the iterate nearest the tolerances so far: the normal equations lose digits in the
            # last iterations, and a point that stops short is still a start (the tie-break's)
            score = max(pinf / self.tol_feas, dinf / self.tol_feas, gap / self.tol_gap)
            if score < best[0]:
                best = (score, z.copy(), y.copy())
            # complementarity converged while the rows are not: the last iterations lose primal digits
            # (seen on progressive filling's tie-break LP, 2 048 × 256) rather than gain them
            stall = stall + 1 if gap <= self.tol_gap and pinf > self.tol_feas else 0
            if stall >= self.STALL:
                # rows held to within ten times the tolerance count (progressive filling's floors sit
                # 10⁻⁹ of a level below it: rounds stalled at 1.2·10⁻⁹, 512 × 64)
                status = "optimal" if pinf <= 10 * self.tol_feas and dinf <= self.tol_feas else "stalled"
                break
            if it == self.MAX_ITER:
                break
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                status = "time_limit"
                break
            tl = time.perf_counter()
            d = v / s  # 0 without a lower bound
            d[iu] += p / q
            d[free] = FREE_REG
            with np.errstate(divide="ignore"):
                theta = 1.0 / d
            theta[fixed] = 0.0
            M = normal.factor(theta[nd], theta[dense], V)
            t_lin += time.perf_counter() - tl

            it_ = _Iterate(hasl, iu, s, q, v, p, rlb, rub, rp, rd, theta)
            dz, dy, dv, dp, ds, dq = it_.direction(M, Abar, AbarT, -s * v, -q * p, self.REFINE)
            ap, ad = it_.steps(dv, dp, ds, dq)
            mu_aff = (float((s + ap * ds) @ (v + ad * dv))
                      + float((q + ap * dq) @ (p + ad * dp))) / max(nb, 1)
            sigma = min(1.0, (mu_aff / mu) ** 3) if mu > 0 else 0.0
            dz, dy, dv, dp, ds, dq = it_.direction(M, Abar, AbarT, sigma * mu - s * v - ds * dv,
                                                   sigma * mu - q * p - dq * dp, self.REFINE)
            ap, ad = it_.steps(dv, dp, ds, dq)
            ap, ad = self.STEP * ap, self.STEP * ad
            # a start the method cannot leave (steps of 10⁻⁴…10⁻⁷ from Mehrotra's on tsf's round 2 at
            # 2 048 × 256 mixed) is dropped: every step from it so far was short
            if slow == it - it0 and max(ap, ad) < self.SLOW_STEP:
                slow += 1
            z = z + ap * dz
            s = s + ap * ds  # ds and dv are 0 without a lower bound: s stays 1 and v 0 there
            q = q + ap * dq
            y = y + ad * dy
            v = v + ad * dv
            p = p + ad * dp
        if status != "optimal" and best[1] is not None:
            z, y = best[1], best[2]
        x = z[:n]
        row_dual = np.zeros(m)
        row_dual[rows] = sgn * y
        col_dual = sgn * (cbar[:n] - Ak.T @ y)
        self.stats = {"iterations": it, "seconds": time.perf_counter() - t0, "linear_algebra_seconds": t_lin,
                      "coupling_rows": int(Grows.size), "diagonal_rows": int(Urows.size),
                      "dense_columns": int(dense.size), "start": start_name}
        log.debug("schur ipm: %s after %d iterations, %.3f s (%.3f s in the normal equations; %d "
                  "coupling rows, %d diagonal, %d dense columns)", status, it, self.stats["seconds"], t_lin,
                  Grows.size, Urows.size, dense.size)
        return {"status": status, "x": x, "row_value": A @ x, "row_dual": row_dual, "col_dual": col_dual,
                "objective": float(np.asarray(L["c"], float) @ x + L.get("offset", 0.0)), "iterations": it}


def _mehrotra_starts(normal: _Normal, nd: np.ndarray, dense: np.ndarray, V: np.ndarray, Abar: sp.csc_array,
                     AbarT: sp.csr_array, b: np.ndarray, cbar: np.ndarray, lo: np.ndarray, up: np.ndarray,
                     hasl: np.ndarray, hasu: np.ndarray, fixed: np.ndarray) -> Iterator[tuple[str, tuple]]:
    """Mehrotra's starting point (Mehrotra 1992, SIAM J. Optim. 2(4), §7) as ``("mehrotra", (z, s, q,
    v, p, y))``, then on request the same primal point with the plain start's multipliers as
    ``("mehrotra-primal", …)``; nothing when the point is not finite or not interior.

    In the bounds' slacks ``w`` (``z = l + w``; ``z = u − w`` with an upper bound only; ``z = w`` if
    free) the LP is ``Ā′ w = b − Ā z_b`` with ``Ā′ = Ā Σ``, ``Σ = ±1``, and ``Ā′ Ā′ᵀ = Ā Āᵀ``: the
    normal matrix at ``Θ = I`` (0 for fixed columns), factored once. ``w̃`` is the least-norm solution,
    ``ỹ`` the least-squares multipliers of the cost and ``r̃ = Σ (c̄ − Āᵀ ỹ)`` the dual slacks; both are
    shifted to be positive (1.5 times the most negative entry), then by ``½ w·r / Σr`` and ``½ w·r /
    Σw`` so that no product ``w_j r_j`` is far from the others. A box's other slack is its distance to
    the upper bound (the point clipped a tenth of the width inside), with the multiplier that makes its
    product the average one. On tsf-er's round 2 of 2 048 × 256 mixed this took 14 iterations against
    26 from :func:`_plain_start`: the plain start puts every allocation at 1, a thousand times the
    optimum's, and the first iterations only shrink it. The second start has the plain start's
    multipliers (Mehrotra's left tsf's rounds no room to move: ``SchurIPM.SLOW_START``); both come from
    one factorisation."""
    free = ~hasl & ~hasu & ~fixed
    bounded = hasl | hasu
    if not bounded.any():
        return
    sig = np.where(hasl | free, 1.0, -1.0)
    zb = np.where(hasl | fixed, lo, np.where(hasu, up, 0.0))
    th = np.where(fixed, 0.0, 1.0)
    M = normal.factor(th[nd], th[dense], V)
    w = sig * (AbarT @ M.solve(b - Abar @ zb))
    y = M.solve(Abar @ (th * cbar))
    r = sig * (cbar - AbarT @ y)
    w[fixed] = 0.0
    if not (np.isfinite(w).all() and np.isfinite(r).all() and np.isfinite(y).all()):
        return
    wb, rb = w[bounded], r[bounded]
    wb = wb + max(-1.5 * float(wb.min()), 0.0)
    rb = rb + max(-1.5 * float(rb.min()), 0.0)
    prod, sw, sr = float(wb @ rb), float(wb.sum()), float(rb.sum())
    wb = wb + (0.5 * prod / sr if sr > 0 else 0.0)
    rb = rb + (0.5 * prod / sw if sw > 0 else 0.0)
    if not ((wb > 0).all() and (rb > 0).all()):
        return
    w[bounded] = wb
    z = zb + sig * w
    box = hasl & hasu
    width = np.where(box, up - lo, 0.0)
    z[box] = np.clip(z[box], lo[box] + 0.1 * width[box], up[box] - 0.1 * width[box])
    iu = np.flatnonzero(hasu)
    s = np.where(hasl, z - lo, 1.0)
    q = up[iu] - z[iu]

    def with_duals(rb_: np.ndarray, y_: np.ndarray) -> tuple[np.ndarray, ...]:
        r_ = r.copy()
        r_[bounded] = rb_
        mu = float(wb @ rb_) / wb.size
        return (z, s, q, np.where(hasl, r_, 0.0), np.where(hasl[iu], mu / q, r_[iu]), y_)

    yield "mehrotra", with_duals(rb, y)
    yield "mehrotra-primal", with_duals(np.full(wb.size, _plain_multiplier(cbar)), np.zeros_like(y))


def _plain_multiplier(cbar: np.ndarray) -> float:
    """Every bound's multiplier in the plain start: the largest cost, at least 1."""
    return max(1.0, float(np.abs(cbar).max(initial=0.0)))


def _plain_start(Ak: sp.csc_array, n: int, srow: np.ndarray, cbar: np.ndarray, lo: np.ndarray,
                 up: np.ndarray, hasl: np.ndarray, hasu: np.ndarray,
                 fixed: np.ndarray) -> tuple[np.ndarray, ...]:
    """The start when :func:`_mehrotra_starts` has none (or both are left): mid-way in a box, one unit
    inside a one-sided bound, 0 if free; the rows' activities clipped into their bounds (mid-way if
    narrower than 2); the multipliers at the largest cost (at least 1)."""
    with np.errstate(invalid="ignore"):
        z = np.where(hasl & hasu, 0.5 * (lo + up),
                     np.where(hasl, lo + 1.0, np.where(hasu, up - 1.0, 0.0)))
    z[fixed] = lo[fixed]
    if srow.size:
        r0 = (Ak @ z[:n])[srow]
        lo_s, up_s = lo[n:], up[n:]
        width = up_s - lo_s
        inner = np.where(np.isfinite(width) & (width < 2.0), 0.5 * width, 1.0)
        z[n:] = np.clip(r0, np.where(lo_s > -INF, lo_s + inner, -np.inf),
                        np.where(up_s < INF, up_s - inner, np.inf))
    scale_c = _plain_multiplier(cbar)
    iu = np.flatnonzero(hasu)
    return (z, np.where(hasl, z - lo, 1.0), up[iu] - z[iu], np.where(hasl, scale_c, 0.0),
            np.full(iu.size, scale_c), np.zeros(Ak.shape[0]))


class _Normal:
    """``Ā Θ Āᵀ`` of the non-dense columns in blocks — the diagonal rows' diagonal ``D``, the coupling
    block ``M_GG`` and ``M_GU`` — accumulated from index arrays built once (a ``bincount`` each, and
    one sparse product for ``M_GG``), and a solver for the whole matrix (:meth:`factor`)."""

    def __init__(self, A: sp.csc_array, Urows: np.ndarray, Grows: np.ndarray) -> None:
        mk, n = A.shape
        if not A.has_sorted_indices:
            A = A.sorted_indices()
        self.mk, self.Urows, self.Grows = mk, Urows, Grows
        nU, nG = Urows.size, Grows.size
        self.nU, self.nG = nU, nG
        local = np.full(mk, -1)
        local[Urows] = np.arange(nU)
        local[Grows] = np.arange(nG)
        inU = np.zeros(mk, bool)
        inU[Urows] = True
        col = np.repeat(np.arange(n), np.diff(A.indptr))
        row, val = A.indices, A.data
        u = inU[row]
        # each column's one entry among the diagonal rows (row, value); columns without one: value 0
        self.urow = np.zeros(n, np.int64)
        self.uval = np.zeros(n)
        self.urow[col[u]] = local[row[u]]
        self.uval[col[u]] = val[u]
        # M_GU[g, u(j)] += a_gj θ_j a_u(j)j over the coupling entries of columns with a diagonal entry
        g = ~u & (self.uval[col] != 0)
        self.gu_idx = local[row[g]] * nU + self.urow[col[g]]
        self.gu_col, self.gu_val = col[g], val[g] * self.uval[col[g]]
        # M_GG[g1, g2] += a_g1j θ_j a_g2j over pairs of coupling entries in one column (its lower
        # triangle, g1 ≥ g2: all that the Cholesky factor reads). The pairs are a sparse matrix P from
        # the columns' θ to the few entries of M_GG they reach (3 585 of 1 025² at 2 048 × 256), so
        # that M_GG is one product P θ: column-wise, θ read in order, the sums kept in cache
        G = ~u
        gc, gr, gv = col[G], local[row[G]], val[G]  # by column, rows ascending within one (CSC order)
        start = np.searchsorted(gc, np.arange(n + 1))
        cnt = np.diff(start)
        tgt, pv, cols_, npair = [], [], [], []
        for k in np.unique(cnt[cnt > 0]):
            cols = np.flatnonzero(cnt == k)
            pos = start[cols][:, None] + np.arange(k)[None, :]  # (columns, k) entry positions
            r, v_ = gr[pos], gv[pos]
            i1, i2 = np.triu_indices(k)  # i1 ≤ i2, so r[:, i2] ≥ r[:, i1]: row and column in the triangle
            tgt.append((r[:, i2] * nG + r[:, i1]).ravel())
            pv.append((v_[:, i1] * v_[:, i2]).ravel())
            cols_.append(cols)
            npair.append(np.full(cols.size, i1.size))
        self.gg_cols = np.concatenate(cols_) if cols_ else np.zeros(0, np.int64)  # P's columns: these θ
        if tgt:
            tgt_ = np.concatenate(tgt)
            seen = np.zeros(nG * nG, bool)
            seen[tgt_] = True
            self.gg_targets = np.flatnonzero(seen)  # P's rows: these entries of M_GG (flat)
            ids = (np.cumsum(seen) - 1).astype(np.int32)
            indptr = np.concatenate([[0], np.cumsum(np.concatenate(npair))])
            self.P = sp.csc_array((np.concatenate(pv), ids[tgt_], indptr),
                                  shape=(self.gg_targets.size, self.gg_cols.size))
        else:
            self.gg_targets, self.P = np.zeros(0, np.int64), None

    def factor(self, th: np.ndarray, th_dense: np.ndarray, V: np.ndarray) -> _Factored:
        """A solver for ``Ā Θ Āᵀ w = r``: the diagonal block eliminated, the Schur complement over the
        coupling rows factored by Cholesky, the dense columns (``V``, ``Θ`` = ``th_dense``) added by
        Woodbury."""
        nU, nG, Urows, Grows = self.nU, self.nG, self.Urows, self.Grows
        DU = np.bincount(self.urow, weights=th * self.uval * self.uval, minlength=nU)
        Dinv = 1.0 / np.where(DU > 0, DU, 1e-300)
        F = LU = None
        if nG:
            MGU = np.bincount(self.gu_idx, weights=self.gu_val * th[self.gu_col], minlength=nG * nU)
            MGU = MGU.reshape(nG, nU)
            MGG = np.zeros(nG * nG)
            if self.P is not None:
                gg = self.P @ th[self.gg_cols]
                MGG[self.gg_targets] = gg
                low = sp.csr_array((gg, np.divmod(self.gg_targets, nG)), shape=(nG, nG))
                Gsym = low + low.T - sp.diags_array(low.diagonal())  # M_GG itself, for mul
            else:
                Gsym = sp.csr_array((nG, nG))
            # the lower triangle of S = M_GG − M_GU D⁻¹ M_UG, by a symmetric rank-k update
            Sc = blas.dsyrk(-1.0, MGU * np.sqrt(Dinv), beta=1.0, c=MGG.reshape(nG, nG), lower=1,
                            overwrite_c=1)
            # positive definite in exact arithmetic; late iterations lose it to cancellation: a
            # growing diagonal shift, an LU factor as the last resort
            dmax = max(float(np.abs(np.diag(Sc)).max()), 1e-300)
            for rel in (1e-14, 1e-12, 1e-10):
                try:
                    F = sla.cho_factor(Sc + rel * dmax * np.eye(nG), lower=True, check_finite=False)
                    if rel > 1e-14:
                        log.debug("schur ipm: Cholesky of the complement with a shift of %.0e", rel)
                    break
                except np.linalg.LinAlgError:
                    continue
            if F is None:
                low = np.tril(Sc)
                LU = sla.lu_factor(low + np.tril(low, -1).T, check_finite=False)

        def solve0(r: np.ndarray) -> np.ndarray:
            rU, rG = r[Urows], r[Grows]
            tmp = Dinv * rU
            w = np.empty(self.mk)
            if not nG:
                w[Urows] = tmp
                return w
            rhs = rG - MGU @ tmp
            wG = (sla.cho_solve(F, rhs, check_finite=False) if F is not None
                  else sla.lu_solve(LU, rhs, check_finite=False))
            w[Urows], w[Grows] = Dinv * (rU - MGU.T @ wG), wG
            return w

        def mul(w: np.ndarray) -> np.ndarray:
            """``Ā Θ Āᵀ w`` from the blocks: the residual iterative refinement corrects (a few dense
            products of the coupling rows' size, not two passes over ``Ā``)."""
            out = np.empty(self.mk)
            wU = w[Urows]
            out[Urows] = DU * wU
            if nG:
                wG = w[Grows]
                out[Urows] += MGU.T @ wG
                out[Grows] = MGU @ wU + Gsym @ wG
            if th_dense.size:
                out += V @ (th_dense * (V.T @ w))
            return out

        if not th_dense.size:
            return _Factored(solve0, mul)
        Z = np.column_stack([solve0(V[:, k]) for k in range(V.shape[1])])
        C = np.diag(1.0 / th_dense) + V.T @ Z
        Cf = sla.lu_factor(C, check_finite=False)

        def solve(r: np.ndarray) -> np.ndarray:
            w = solve0(r)
            return w - Z @ sla.lu_solve(Cf, V.T @ w, check_finite=False)

        return _Factored(solve, mul)


class _Factored(NamedTuple):
    """The normal matrix factored: ``solve(r)`` for ``w`` in ``Ā Θ Āᵀ w = r``, and ``mul(w)``."""

    solve: Any
    mul: Any


class _Iterate(NamedTuple):
    """One iterate's lower-bound mask, upper-bounded columns ``iu``, slacks, multipliers, residuals and
    ``Θ`` (the lower bounds' arrays full-length, the upper bounds' at ``iu``): the Newton direction
    (predictor or corrector, by the complementarity right-hand sides ``rl``, ``ru``) and the step
    lengths to the boundary."""

    hasl: np.ndarray
    iu: np.ndarray
    s: np.ndarray
    q: np.ndarray
    v: np.ndarray
    p: np.ndarray
    rlb: np.ndarray
    rub: np.ndarray
    rp: np.ndarray
    rd: np.ndarray
    theta: np.ndarray

    def direction(self, M: _Factored, Abar: Any, AbarT: Any, rl: np.ndarray, ru: np.ndarray,
                  refine: int) -> tuple[np.ndarray, ...]:
        hasl, iu, s, q, v, p, theta = self.hasl, self.iu, self.s, self.q, self.v, self.p, self.theta
        g = np.where(hasl, (rl - v * self.rlb) / s, 0.0) - self.rd
        g[iu] -= (ru - p * self.rub) / q
        rhs = self.rp - Abar @ (theta * g)
        dy = _refined(M, rhs, refine)
        dz = theta * (AbarT @ dy + g)
        ds = np.where(hasl, dz + self.rlb, 0.0)
        dq = self.rub - dz[iu]
        dv = np.where(hasl, (rl - v * ds) / s, 0.0)
        dp = (ru - p * dq) / q
        return dz, dy, dv, dp, ds, dq

    def steps(self, dv: np.ndarray, dp: np.ndarray, ds: np.ndarray, dq: np.ndarray) -> tuple[float, float]:
        # without a lower bound s = 1, v = 0 and ds = dv = 0: no ratio there
        ap = min(_ratio(self.s, ds), _ratio(self.q, dq))
        ad = min(_ratio(self.v, dv), _ratio(self.p, dp))
        return ap, ad


def _refined(M: _Factored, rhs: np.ndarray, most: int, tol: float = 1e-12) -> np.ndarray:
    """``Ā Θ Āᵀ w = rhs`` by the factor and up to ``most`` steps of iterative refinement, stopping once
    the residual is within ``tol`` of ``rhs`` (largest entries): most iterations need none."""
    w = M.solve(rhs)
    lim = tol * float(np.abs(rhs).max(initial=0.0))
    for _ in range(most):
        res = rhs - M.mul(w)
        if float(np.abs(res).max(initial=0.0)) <= lim:
            break
        w = w + M.solve(res)
    return w


def _ratio(v: np.ndarray, dv: np.ndarray) -> float:
    neg = dv < 0
    if not neg.any():
        return 1.0
    return float(min(1.0, np.min(-v[neg] / dv[neg])))
