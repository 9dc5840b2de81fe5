r"""The αPF-VDS server game as arrays: the NCP (28)–(31) of [APF], its merit function Ψ (35)–(37), and the
two first-order algorithms of [APF] §5 (PS-MFA, (44)–(54); the distributed heuristic, (55)–(57)).

Server ``i`` maximises ``U_i = Σ_{n∈N_i} φ_n g_i(X_n/(φ_n γ_{n,i}))`` over its own rows ((12)–(15)) with

.. math::

    g_i'(z) = (A_i/z)^{\alpha_i} + B_i/z \qquad \text{([APF] (22); } A=1, B=0 \text{ is } z^{-\alpha}).

With ``f_{i,r} = c_{i,r} − Σ_n x_{n,i} d_{n,r}`` and ``f_{n,i} = Σ_r λ_{i,r} d_{n,r} − g_i'(s̃_{n,i})/γ_{n,i}``
the equilibria are the solutions of ``0 ≤ λ ⊥ f_{i,r} ≥ 0``, ``0 ≤ x ⊥ f_{n,i} ≥ 0`` ((28)–(31)). On the
time-shared form the single row is the server's time, ``d_{n,i} = 1/γ_{n,i}``, ``c_i = 1`` (Problem 2).

Everything here is numpy on an :class:`ApfGame`: the NCP map, the residual ``max |min(z, F(z))|``, Ψ and
its gradient (93)–(94), multipliers for a given allocation, a Newton polish on the active set, and the two
algorithms. The Pyomo models (the NCP with ``pyomo.mpec``, the per-server best responses) live in
:mod:`fairalloc.models.apf_vds`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linprog, nnls

from fairalloc.instance import Instance
from fairalloc.models._perserver import ServerRows, server_rows
from fairalloc.status import Status

__all__ = ["ApfGame", "distributed_heuristic", "fischer_burmeister", "ps_mfa"]

log = logging.getLogger(__name__)


SERVED = 1e-12  # multipliers: a pair holding at most this fraction of its user's total is taken as idle
# ... and, where that fit does not certify the server (a pair holding a few 1e-10 of its user's total
# that the equilibrium leaves idle), these larger fractions in turn: the best-certifying fit is kept
SERVED_RETRY = (1e-10, 1e-8, 1e-6)


@dataclass
class ApfGame:
    """The instance, every server's rows and the utility parameters ``α_i, A_i, B_i`` (arrays over
    servers; ``α_i`` finite)."""

    inst: Instance
    alpha: np.ndarray
    A: np.ndarray
    B: np.ndarray
    rows: list[ServerRows] = field(default_factory=list)
    lam_cap: list[np.ndarray] | None = None
    scale: np.ndarray | None = None  # c_i when A, B are those of c_i·g_i (apf_vds.utility_scale); 1 if None
    # servers with α_i = inf whose pairs are PS-DSF's leximin conditions (the Newton method's form,
    # models/_apf_newton.py; their α, A, B are 1, 1, 0 and their multipliers are 1/levels). None: no such
    leximin: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.rows:
            self.rows = server_rows(self.inst)
        self.P = self.inst.runnable
        self.phig = self.inst.weight[:, None] * self.inst.gamma  # φ_n γ_{n,i}

    # -------------------------------------------------------------- utility
    def vds(self, x: np.ndarray) -> np.ndarray:
        """``s̃[n,i]`` on runnable pairs (1 elsewhere, never used)."""
        X = x.sum(axis=1)[:, None]
        return np.where(self.P, X / np.where(self.P, self.phig, 1.0), 1.0)

    def _powers(self, z: np.ndarray) -> np.ndarray:
        """``(A_i/z)^{α_i}`` through logs (no overflow for moderate exponents; ``+∞`` at ``z = 0``, where
        ``g'`` is infinite: callers test for it instead of numpy warning on stderr)."""
        with np.errstate(over="ignore", divide="ignore"):
            return np.exp(self.alpha[None, :] * (np.log(self.A[None, :]) - np.log(z)))

    def g_prime(self, z: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._powers(z) + self.B[None, :] / z

    def g_second(self, z: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return -(self.alpha[None, :] * self._powers(z) + self.B[None, :] / z) / z

    def g(self, z: np.ndarray) -> np.ndarray:
        a, A = self.alpha[None, :], self.A[None, :]
        one = np.isclose(a, 1.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # z = 0: the limits, no warning
            power = np.where(one, A * np.log(z), A**a * z ** (1 - a) / np.where(one, 1.0, 1 - a))
            # B = 0 adds nothing, also at z = 0 (0·log 0 would be NaN and hide the power's limit)
            return power + np.where(self.B[None, :] == 0, 0.0, self.B[None, :] * np.log(z))

    def utility(self, x: np.ndarray) -> np.ndarray:
        """``U_i(x) = Σ_{n∈N_i} φ_n g_i(s̃_{n,i})`` for every server ((12))."""
        val = self.inst.weight[:, None] * self.g(self.vds(x))
        return np.where(self.P, val, 0.0).sum(axis=0)

    def marginal(self, x: np.ndarray) -> np.ndarray:
        """``∂U_i/∂x_{n,i} = g_i'(s̃_{n,i})/γ_{n,i}`` ((59)), 0 off runnable pairs."""
        return np.where(self.P, self.g_prime(self.vds(x)) / np.where(self.P, self.inst.gamma, 1.0), 0.0)

    def curvature(self, x: np.ndarray) -> np.ndarray:
        """``∂f_{n,i}/∂X_n = −g_i''(s̃_{n,i})/(φ_n γ_{n,i}²) > 0`` ((97))."""
        gam = np.where(self.P, self.inst.gamma, 1.0)
        return np.where(self.P, -self.g_second(self.vds(x)) / (self.phig * gam + (~self.P)), 0.0)

    # -------------------------------------------------------------- the NCP map
    def f_pairs(self, x: np.ndarray, lam: list[np.ndarray]) -> np.ndarray:
        """``f_{n,i}(x, λ_i)`` ((31)) on runnable pairs, 0 elsewhere."""
        f = -self.marginal(x)
        for r, li in zip(self.rows, lam):
            if len(li):
                f[:, r.server] += r.demand @ li
        return np.where(self.P, f, 0.0)

    def f_rows(self, x: np.ndarray) -> list[np.ndarray]:
        """``f_{i,r}(x_i) = c_{i,r} − Σ_n x_{n,i} d_{n,r}`` ((30))."""
        return [r.slack(x[:, r.server]) for r in self.rows]

    def residual(self, x: np.ndarray, lam: list[np.ndarray], ub: np.ndarray | None = None,
                 scaled: bool = False) -> float:
        """``max |min(z, F(z))|`` over every pair and every row. With upper bounds ``ub`` on the pairs
        (users × servers, ``inf`` = none: task limits, budgets, an edited model's bounds) a pair's term is
        the box form ``|x − clip(x − f, 0, ub)| = |min(x, max(f, x − ub))|`` (a pair at its bound may have
        ``f < 0``).

        ``scaled``: the dimensionless residual of the Newton method's certificate
        (:func:`~fairalloc.models._apf_newton.scaled_residual`), unchanged when the units of tasks,
        resources or utility change: a pair's ``x`` and ``ub`` divided by the user's total ``X_n`` and its
        ``f`` by the marginal ``g_i'(s̃_{n,i})/γ_{n,i}``; a row's ``λ`` by ``Λ_{i,r}``, the least marginal per
        unit of the row among the users it serves (the largest among all its users where it serves none,
        and never above that), and its slack by :meth:`slack_scale`. ``inf`` where
        a user that can run somewhere has ``X_n = 0`` (``g'`` is infinite there)."""
        f = self.f_pairs(x, lam)
        xt = x
        m = None
        if scaled:
            X = x.sum(axis=1)
            if ((X <= 0) & self.P.any(axis=1)).any():
                return float("inf")
            m = self.marginal(x)
            xt = x / np.where(X > 0, X, 1.0)[:, None]
            f = f / np.where(self.P, m, 1.0)
            if ub is not None:
                ub = ub / np.where(X > 0, X, 1.0)[:, None]
        with np.errstate(invalid="ignore"):  # inf − inf where no bound: the max takes f
            term = np.minimum(xt, f) if ub is None else np.minimum(xt, np.maximum(f, xt - ub))
        res = float(np.abs(term)[self.P].max(initial=0.0))
        for r, li, sl in zip(self.rows, lam, self.f_rows(x)):
            if len(li):
                if m is not None:
                    li, sl = li / self.multiplier_scale(x, r, m), sl / self.slack_scale(r)
                res = max(res, float(np.abs(np.minimum(li, sl)).max()))
        return res

    def multiplier_scale(self, x: np.ndarray, r: ServerRows, m: np.ndarray) -> np.ndarray:
        """``Λ_{i,r}`` of the scaled residual (:meth:`residual`): the least marginal per unit of the row
        among the users server ``r.server`` serves, the largest among all its users where it serves none
        (and never above that); ``m`` is :meth:`marginal` at ``x``."""
        d = r.demand[r.users]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(d > 0, m[r.users, r.server][:, None] / d, 0.0)
        big = ratio.max(axis=0, initial=0.0)
        held = (d > 0) & (x[r.users, r.server] > 0)[:, None]
        low = np.where(held, ratio, np.inf).min(axis=0, initial=np.inf)
        return np.minimum(low, np.where(big > 0, big, 1.0))

    def server_residual(self, x: np.ndarray, r: ServerRows, li: np.ndarray, m: np.ndarray,
                        ub: np.ndarray | None = None) -> float:
        """Server ``r.server``'s share of :meth:`residual` (``scaled``) with multipliers ``li`` on its rows:
        the terms of its pairs and of its rows; ``m`` is :meth:`marginal` at ``x``."""
        i = r.server
        users = np.flatnonzero(self.P[:, i])
        X = x[users].sum(axis=1)
        if not np.isfinite(m[users, i]).all() or (X <= 0).any():
            return float("inf")
        f = (r.demand[users] @ li - m[users, i]) / m[users, i] if len(li) else -np.ones(len(users))
        xt = x[users, i] / X
        term = (np.minimum(xt, f) if ub is None
                else np.minimum(xt, np.maximum(f, xt - ub[users, i] / X)))
        res = float(np.abs(term).max(initial=0.0))
        if len(li):
            sl = r.slack(x[:, i]) / self.slack_scale(r)
            res = max(res, float(np.abs(np.minimum(li / self.multiplier_scale(x, r, m), sl)).max()))
        return res

    def slack_scale(self, r: ServerRows) -> np.ndarray:
        """What a row's slack is measured against in the scaled residual: its capacity; for an external
        resource's row in the generalised game (:func:`~fairalloc.models._perserver.rows_at`, whose
        capacity is the room the other servers leave) the resource's capacity; 1 where that is 0."""
        ext = dict(zip(self.inst.external, self.inst.external_capacity))
        c = np.array([ext.get(name, cap) for name, cap in zip(r.names, r.capacity)], float)
        return np.where(c > 0, c, 1.0)

    def psi(self, x: np.ndarray, lam: list[np.ndarray]) -> float:
        """``Ψ(x, λ) = Σ_{i, n∈N_i} ψ(x_{n,i}, f_{n,i})``, ``ψ = ψ_FB²/2`` ((35)–(37))."""
        fb = fischer_burmeister(x[self.P], self.f_pairs(x, lam)[self.P])
        return float(0.5 * fb @ fb)

    def zero_lam(self) -> list[np.ndarray]:
        return [np.zeros(len(r.capacity)) for r in self.rows]

    def multiplier_bounds(self) -> list[np.ndarray]:
        r"""A priori bounds on ``λ`` at every equilibrium ([APF] (42)–(43)): a row with ``λ_{i,r} > 0`` is
        saturated, so some user ``n`` holds it and ``λ_{i,r} d_{n,r} ≤ g_i'(s̃_{n,i})/γ_{n,i}``, which is
        largest at the smallest ``X_n`` — the sharing-incentive point (41) when ``α_i ≥ 1`` (Thm 3,
        Cor. 2), the floor ``10⁻⁶·(41)`` otherwise."""
        si = self.inst.si_threshold("apf")
        out = []
        for row in self.rows:
            i = row.server
            lo = si if self.alpha[i] >= 1 else 1e-6 * si
            x = np.zeros_like(self.P, dtype=float)
            x[:, i] = lo
            term = self.marginal(x)[:, i]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(row.demand > 0, term[:, None] / row.demand, 0.0)
            out.append(ratio[row.users].max(axis=0, initial=0.0) if len(row.users)
                       else np.zeros(len(row.capacity)))
        return out

    # -------------------------------------------------------------- multipliers for a given x
    def multipliers(self, x: np.ndarray, sat_tol: float = 1e-6, ub: np.ndarray | None = None,
                    retry: bool = False) -> list[np.ndarray]:
        """The ``λ`` that best certifies ``x``: on each server, non-negative multipliers on the saturated
        rows (slack within ``sat_tol`` of :meth:`slack_scale`) with ``Σ_r λ_r d_{n,r} = m_{n,i}``
        (``m = g'(s̃_{n,i})/γ_{n,i}``) for the users it serves, ``≥`` for those it does not (``f ≥ 0``) and
        ``≤`` for pairs at their upper bound ``ub`` (task limits, budgets: ``f ≤ 0`` allowed). Every
        condition is relative to its ``m`` (the multipliers of one server can span ten orders of
        magnitude at large α): NNLS on the equations, then, where that leaves an inequality violated by
        more than the fit, the λ minimising the largest relative violation (LP; with no equations, the
        least such λ). A user is served where ``x_{n,i} > SERVED·X_n``; with ``retry`` (the certificates;
        not Newton's starts, whose paths it would change), where that fit leaves the server's
        scaled residual (:meth:`server_residual`) above 1e-12, the fits with the thresholds of
        :data:`SERVED_RETRY` are tried and the best-certifying one is kept (a user holding 6e-10 of its
        total at a server whose conditions leave it idle had made the fit fail: scaled residual 0.18 at
        an equilibrium certified at 6.4e-10). A user with ``X_n = 0`` (``g'`` infinite) leaves its
        server's λ at 0."""
        term = self.marginal(x)
        X = x.sum(axis=1)
        lam = []
        for r in self.rows:
            i = r.server
            li = np.zeros(len(r.capacity))
            if not len(li):
                lam.append(li)
                continue
            if self.leximin is not None and self.leximin[i]:
                lam.append(self.inverse_levels(x, r, sat_tol))
                continue
            sat = np.flatnonzero(r.slack(x[:, i]) <= sat_tol * self.slack_scale(r))
            if not sat.size or not np.isfinite(term[r.users, i]).all():
                lam.append(li)
                continue
            li[sat] = self._fit(x, r, sat, term, X, ub, SERVED)
            best = self.server_residual(x, r, li, term, ub) if retry else 0.0
            for served_below in SERVED_RETRY:
                if best <= 1e-12:
                    break
                cand = np.zeros(len(r.capacity))
                cand[sat] = self._fit(x, r, sat, term, X, ub, served_below)
                score = self.server_residual(x, r, cand, term, ub)
                if score < best:
                    best, li = score, cand
            lam.append(li)
        return lam

    @staticmethod
    def _fit(x: np.ndarray, r: ServerRows, sat: np.ndarray, term: np.ndarray, X: np.ndarray,
             ub: np.ndarray | None, served_below: float) -> np.ndarray:
        """:meth:`multipliers`' fit on one server's saturated rows ``sat``, with a pair taken as idle
        where it holds at most ``served_below`` of its user's total."""
        i = r.server
        share = x[r.users, i] / np.maximum(X[r.users], np.finfo(float).tiny)
        served, idle = r.users[share > served_below], r.users[share <= served_below]
        at_bound = (np.zeros(len(served), bool) if ub is None
                    else x[served, i] >= ub[served, i] - served_below * X[served])
        served, bound = served[~at_bound], served[at_bound]
        if ub is not None:  # a bound of 0 (a user at its limit elsewhere): any f
            idle = idle[ub[idle, i] > served_below * X[idle]]
        # each condition divided by its marginal; a row's column scaled by its largest entry among the
        # served users' equations (which bound λ_r·entry ≤ 1), by its least positive entry where no
        # served user demands it (the idle user that needs the most λ_r then needs v = 1): the
        # certifying v is of order one even where the entries span many decades
        rel = [r.demand[np.ix_(g, sat)] / term[g, i][:, None] for g in (served, idle, bound)]
        top = np.abs(rel[0]).max(axis=0, initial=0.0)
        others = np.abs(np.vstack(rel[1:]))
        least = np.where(others > 0, others, np.inf).min(axis=0, initial=np.inf)
        col = np.where(top > 0, top, np.where(np.isfinite(least), least, 1.0))
        Ds, Di, Db = (R / col for R in rel)
        v = np.zeros(len(sat))
        if len(served):
            v = nnls(Ds, np.ones(len(served)))[0]
        fit = np.abs(Ds @ v - 1.0).max(initial=0.0)
        worst = max((1.0 - Di @ v).max(initial=0.0), (Db @ v - 1.0).max(initial=0.0))
        if worst > max(fit, 1e-12):
            # an idle user's entry above 10⁹ asks for v ≥ 10⁻⁹ at most once clipped there (a stricter
            # condition; HiGHS refuses matrix entries above 10¹⁵)
            v = _minimax_multipliers(Ds, np.minimum(Di, 1e9), Db, v)
        return v / col

    def inverse_levels(self, x: np.ndarray, r: ServerRows, sat_tol: float = 1e-6) -> np.ndarray:
        """A leximin server's multipliers (``leximin``): ``1/L`` on a saturated row, ``L`` the largest
        weighted VDS among the users it serves that demand the row (the row's level), 0 elsewhere."""
        i = r.server
        s = x.sum(axis=1) / np.where(self.P[:, i], self.phig[:, i], 1.0)
        held = (r.demand > 0) & (x[:, i] > 0)[:, None] & self.P[:, i][:, None]
        level = np.where(held, s[:, None], 0.0).max(axis=0, initial=0.0)
        sat = r.slack(x[:, i]) <= sat_tol * self.slack_scale(r)
        with np.errstate(divide="ignore"):
            return np.where(sat & (level > 0), 1.0 / np.where(level > 0, level, 1.0), 0.0)


def fischer_burmeister(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``ψ_FB(a, b) = √(a² + b²) − a − b`` ((35)); zero iff ``a ≥ 0, b ≥ 0, ab = 0``."""
    return np.hypot(a, b) - a - b


def _minimax_multipliers(Ds: np.ndarray, Di: np.ndarray, Db: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``min t`` s.t. ``|Ds v − 1| ≤ t``, ``Di v ≥ 1 − t``, ``Db v ≤ 1 + t``, ``v ≥ 0``, ``t ≥ 0`` (a small
    dense LP over conditions already divided by their right-hand sides), then the least ``Σ v`` with ``t``
    held within 10⁻¹² of its minimum (with no equations, ``Ds`` empty, the least such ``v``). Two LPs, not
    one objective ``t + ε Σ v``: where the conditions' coefficients span ten decades the certifying ``v``
    is ~10¹⁰ and any fixed ``ε`` made ``v = 0, t = 1`` the cheaper answer (at α = 8, demands six
    decades apart: a server's multipliers fitted as zero at an equilibrium certified at 6·10⁻¹⁵).
    ``start`` where the LP fails."""
    k = Ds.shape[1]
    one = [np.ones((len(R), 1)) for R in (Ds, Di, Db)]
    A = np.vstack([np.hstack([Ds, -one[0]]), np.hstack([-Ds, -one[0]]), np.hstack([-Di, -one[1]]),
                   np.hstack([Db, -one[2]])])
    b = np.concatenate([np.ones(len(Ds)), -np.ones(len(Ds)), -np.ones(len(Di)), np.ones(len(Db))])
    res = linprog(np.r_[np.zeros(k), 1.0], A_ub=A, b_ub=b, bounds=[(0, None)] * (k + 1), method="highs")
    if res.status != 0:
        return start
    least = linprog(np.r_[np.ones(k), 0.0], A_ub=A, b_ub=b, method="highs",
                    bounds=[(0, None)] * k + [(0, float(res.x[k]) + 1e-12)])
    return least.x[:k] if least.status == 0 else res.x[:k]


# ---------------------------------------------------------------------- Newton polish
DENSE_POLISH_MAX = 2_000  # unknowns (pairs + rows) up to which the dense active-set polish may run
SPARSE_POLISH = True  # try the sparse semismooth Newton method first


def polish(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], iters: int = 30, tol: float = 1e-13,
           rounds: int = 8, tight: list[np.ndarray] | None = None,
           expired: Callable[[], bool] | None = None
           ) -> tuple[np.ndarray, list[np.ndarray], dict[str, Any]]:
    """Newton's method from an approximate solution, kept only if it lowers the NCP residual (otherwise
    the input comes back unchanged); ``details.polish.method`` says which ran.

    First the sparse semismooth Newton method of :mod:`~fairalloc.models._apf_newton` from the point (it
    stops at ``expired``); where it does not certify and the system has at most ``DENSE_POLISH_MAX``
    unknowns, the dense active-set method: Newton on the equations of an active set read off the point,
    ``f_{n,i} = 0`` on the pairs that carry tasks and ``x = 0`` elsewhere, ``f_{i,r} = 0`` on the binding
    rows and ``λ = 0`` elsewhere (:func:`_active_set`), least-squares steps (``x`` is not unique when
    servers are proportional for a user, only ``X``); a pair or row whose sign comes out wrong switches
    sides and Newton runs again (a primal–dual active-set loop, at most ``rounds`` times). ``tight``
    overrides the binding rows (the distributed heuristic's penalty multipliers say which rows bind).

    Measured: at 50 × 8, α = 3 the ``ncp`` route's relaxed points polished by the dense method alone never
    certified (status ``error`` after 44 s), the sparse method certified the first one (4.7 s); at
    200 × 32 one dense SVD ran more than 30 s past a 60 s time limit."""
    before = game.residual(x, lam)
    best = (x, lam, before, "")
    if SPARSE_POLISH and (x.sum(axis=1) > 0).all():
        from fairalloc.models._apf_newton import newton as sparse_newton

        res = sparse_newton(game, x, lam, tol=1e-10, max_iter=iters, expired=expired)
        after = game.residual(res.x, res.lam) if (res.x.sum(axis=1) > 0).all() else np.inf
        if res.ok or after < before:
            best = (res.x, res.lam, after, "semismooth newton (sparse)")
        if res.ok:
            return res.x, res.lam, {"polished": True, "residual_before": before, "residual_after": after,
                                    "certified": True, "method": best[3]}
    size = int(game.P.sum()) + sum(len(row.capacity) for row in game.rows)
    if size > DENSE_POLISH_MAX or (expired is not None and expired()):
        xb, lb, after, how = best
        return xb, lb, {"polished": after < before, "residual_before": before, "residual_after": after,
                        "method": how or "none (the sparse method did not lower the residual)"}
    support, guess = _active_set(game, x, lam)
    tight = guess if tight is None else tight
    scale = max(1.0, float(x.max(initial=1.0)))
    for _ in range(rounds):
        if expired is not None and expired():
            break
        xp, lp, _ = _newton(game, x, lam, support, tight, iters, tol)
        xp = np.where(support, xp, 0.0)
        res = game.residual(xp, lp) if (xp.sum(axis=1) > 0).all() else np.inf
        if res < best[2]:
            best = (xp, lp, res, "active-set least squares (dense)")
        if res <= 1e-12 * scale:
            break
        f, sl = game.f_pairs(xp, lp), game.f_rows(xp)
        small = 1e-12 * scale
        flip_x = (support & (xp < 0)) | (game.P & ~support & (f < -small))
        flip_r = [(t & (li < 0)) | (~t & (s < -small)) for t, li, s in zip(tight, lp, sl)]
        if not flip_x.any() and not any(fr.any() for fr in flip_r):
            break
        support = support ^ flip_x
        tight = [t ^ fr for t, fr in zip(tight, flip_r)]
    xb, lb, after, how = best
    return xb, lb, {"polished": after < before, "residual_before": before, "residual_after": after,
                    "method": how or "none"}


def _active_set(game: ApfGame, x: np.ndarray, lam: list[np.ndarray]
                ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Which side of each complementarity pair is zero, compared in each side's own scale: ``x_{n,i}/γ_{n,i}``
    against ``f_{n,i}/(g'_i(s̃_{n,i})/γ_{n,i})``, and ``λ_{i,r}`` over the largest value a user there could
    need against ``f_{i,r}/c_{i,r}`` (raw values mix tasks with utility per task)."""
    term = game.marginal(x)
    f = game.f_pairs(x, lam)
    gam = np.where(game.P, game.inst.gamma, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        support = game.P & (x / gam > f / np.where(term > 0, term, 1.0))
    tight = []
    for row, li in zip(game.rows, lam):
        t = term[:, row.server]
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(row.demand > 0, t[:, None] / np.where(row.demand > 0, row.demand, 1.0), 0.0)
        scale = np.maximum(need.max(axis=0, initial=0.0), 1e-300)
        tight.append(li / scale > row.slack(x[:, row.server]) / np.maximum(row.capacity, 1e-300))
    return support, tight


def _newton(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], support: np.ndarray,
            tight: list[np.ndarray], iters: int, tol: float
            ) -> tuple[np.ndarray, list[np.ndarray], bool]:
    pairs = np.argwhere(support)
    lam_idx = [(k, r) for k, t in enumerate(tight) for r in np.flatnonzero(t)]
    nx, nl = len(pairs), len(lam_idx)
    x = np.where(support, x, 0.0)
    lam = [np.where(t, li, 0.0) for li, t in zip(lam, tight)]
    pos = {(int(n), int(i)): k for k, (n, i) in enumerate(pairs)}

    def equations(x: np.ndarray, lam: list[np.ndarray]) -> np.ndarray:
        f, sl = game.f_pairs(x, lam), game.f_rows(x)
        return np.concatenate([f[support], [sl[k][r] for k, r in lam_idx]])

    def moved(t: float, step: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        xn = x.copy()
        xn[support] = xn[support] + t * step[:nx]
        ln = [li.copy() for li in lam]
        for b, (k, r) in enumerate(lam_idx):
            ln[k][r] += t * step[nx + b]
        return xn, ln

    F = equations(x, lam)
    for _ in range(iters):
        if np.abs(F).max(initial=0.0) <= tol * max(1.0, float(x.max(initial=1.0))):
            return x, lam, True
        J = np.zeros((nx + nl, nx + nl))
        h = game.curvature(x)
        for a, (n, i) in enumerate(pairs):
            for j in np.flatnonzero(support[n]):
                J[a, pos[(int(n), int(j))]] = h[n, i]
            for b, (k, r) in enumerate(lam_idx):
                if game.rows[k].server == i:
                    J[a, nx + b] = game.rows[k].demand[n, r]
        for b, (k, r) in enumerate(lam_idx):
            i = game.rows[k].server
            for a, (n, j) in enumerate(pairs):
                if j == i:
                    J[nx + b, a] = -game.rows[k].demand[n, r]
        if not (np.isfinite(J).all() and np.isfinite(F).all()):
            return x, lam, False  # a user's total at 0 makes g'' infinite: no Newton step from here
        try:
            step, *_ = np.linalg.lstsq(J, -F, rcond=None)
        except np.linalg.LinAlgError:  # SVD did not converge (ill-conditioned J): not polished
            return x, lam, False
        t, norm = 1.0, float(np.linalg.norm(F))
        while t > 1e-6:  # damped: full steps from a rough start can leave X > 0
            xn, ln = moved(t, step)
            if (xn.sum(axis=1) > 0).all():
                Fn = equations(xn, ln)
                if np.linalg.norm(Fn) <= (1 - 1e-4 * t) * norm:
                    break
            t *= 0.5
        else:
            return x, lam, False
        x, lam, F = xn, ln, Fn
    return x, lam, bool(np.abs(F).max(initial=0.0) <= 1e-10)


# ---------------------------------------------------------------------- PS-MFA ([APF] Alg. I)
def _gradients(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], scaled: bool = True
               ) -> tuple[float, np.ndarray, list[np.ndarray]]:
    """Ψ, ``∇_x Ψ`` ((93)) and ``∇_λ Ψ`` ((94)); ``scaled`` pairs ``x_{n,i}/γ_{n,i}`` (the share of server
    ``i``) with ``γ_{n,i} f_{n,i}`` (dimensionless) — same zeros, far better conditioning."""
    P = game.P
    sx = np.where(P, 1.0 / np.where(P, game.inst.gamma, 1.0), 0.0) if scaled else P.astype(float)
    sf = np.where(P, game.inst.gamma, 0.0) if scaled else P.astype(float)
    f = game.f_pairs(x, lam)
    a, b = x * sx, f * sf
    r = np.hypot(a, b)
    fb = r - a - b
    with np.errstate(invalid="ignore", divide="ignore"):
        da = np.where(r > 0, fb * (a / r - 1.0), 0.0) * sx
        db = np.where(r > 0, fb * (b / r - 1.0), 0.0) * sf
    h = game.curvature(x)
    gx = np.where(P, da + (db * h).sum(axis=1, keepdims=True), 0.0)
    glam = [row.demand.T @ db[:, row.server] for row in game.rows]
    return float(0.5 * (fb[P] @ fb[P])), gx, glam


def _merit(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], scaled: bool = True) -> float:
    if not scaled:
        return game.psi(x, lam)
    gam = game.inst.gamma[game.P]
    fb = fischer_burmeister(x[game.P] / gam, game.f_pairs(x, lam)[game.P] * gam)
    return float(0.5 * fb @ fb)


def _project_cone(g: np.ndarray, eq: np.ndarray, ineq: np.ndarray) -> np.ndarray:
    """Projection of ``−g`` onto ``{v : eq v = 0, ineq v ≤ 0}`` by Moreau's decomposition: ``v = −g − Mᵀw``
    with ``w`` the nearest point of the polar cone (``w ≥ 0`` on the inequality rows)."""
    if not len(eq) and not len(ineq):
        return -g
    # free multipliers of the equality rows as differences of two non-negative ones: one NNLS
    M = np.vstack([m for m in (ineq, eq, -eq) if len(m)]).T
    w, _ = nnls(M, -g)
    return -g - M @ w


def ps_mfa(game: ApfGame, x: np.ndarray, lam: list[np.ndarray] | None = None, tol: float = 1e-20,
           step_tol: float = 1e-14, max_iter: int = 20_000, sat_tol: float = 1e-12, scaled: bool = True,
           expired: Any = None) -> tuple[np.ndarray, list[np.ndarray], Status, list[dict[str, float]]]:
    r"""PS-MFA ([APF] Alg. I): projected descent on Ψ keeping (38)–(40).

    ``x``-direction: the projection of ``−∇_{x_i}Ψ`` onto ``Ω_i`` ((46), (54)) — saturated rows with
    ``λ > 0`` stay saturated, saturated rows with ``λ = 0`` may only be relieved — and, to keep the
    allocation non-negative (the paper leaves that to Ψ's penalty), ``x_{n,i} = 0`` may only grow.
    ``λ``-direction (47)–(48) on saturated rows; ``λ = 0`` on the others (40).

    Implementation choices, all keeping (51)–(53) at every iteration, each prompted by a measured stall:

    - Ψ is evaluated on the dimensionless pairs ``(x_{n,i}/γ_{n,i}, γ_{n,i} f_{n,i})`` (``scaled``; same
      zeros as (37));
    - the ``x``- and ``λ``-parts of (49)–(50) take their own step sizes, one after the other (each the
      largest step keeping (52)–(53) and ``x ≥ 0``, halved until Armijo's rule holds): with one common
      step, (47)'s ``β`` term — an ``x``-gradient in ``λ``'s units — drove ``λ`` to 75, 900 times its
      equilibrium value, on [PSDSF] Fig. 1, where Ψ is flat in ``λ`` (residual 3 after 2,000 iterations);
    - ``λ`` stays in the a-priori box of (43) (:meth:`ApfGame.multiplier_bounds`): with separate steps it
      still overshot to 892 on [PSDSF] Fig. 2 and jammed;
    - each iteration first tries the NNLS fit of ``λ`` to the current ``x`` (:func:`_lam_fit`), kept only
      if Ψ drops.

    Stops when the merit is ``≤ tol`` (status converged), when ``‖v‖ ≤ step_tol`` (converged if Ψ is tiny,
    else error: a stationary point of the projected problem that is not an equilibrium, which Lemma 4
    excludes only under Assumption 1 or 2), or after ``max_iter`` iterations.
    """
    x = np.where(game.P, np.asarray(x, float), 0.0)
    lam = [li.copy() for li in (lam or game.zero_lam())]
    game.lam_cap = game.multiplier_bounds()
    steps = [1.0, 1.0]
    trajectory: list[dict[str, float]] = []
    status = Status.ITERATION_LIMIT
    zero_l = [np.zeros_like(li) for li in lam]
    for it in range(1, max_iter + 1):
        merit, gx, glam = _gradients(game, x, lam, scaled)
        vx, sat = _x_direction(game, x, lam, gx, sat_tol)
        vl = _lam_direction(game, lam, gx, glam, sat)
        norm = float(np.sqrt((vx**2).sum() + sum((v**2).sum() for v in vl)))
        trajectory.append({"iteration": it, "merit": merit, "psi": game.psi(x, lam) if scaled else merit,
                           "ncp_residual": game.residual(x, lam), "direction": norm,
                           "step_x": steps[0], "step_lambda": steps[1]})
        if merit <= tol:
            status = Status.CONVERGED
            break
        if norm <= step_tol or (expired is not None and it % 100 == 0 and expired()):
            status = (Status.CONVERGED if merit <= 1e-12 else Status.ERROR) if norm <= step_tol \
                else Status.TIME_LIMIT
            break
        moved = False
        if np.any(vx):
            x, lam, steps[0], ok = _armijo(game, x, lam, vx, zero_l, merit, float((gx * vx).sum()),
                                           steps[0], scaled)
            moved |= ok
            merit, gx, glam = _gradients(game, x, lam, scaled)
            _, sat = _x_direction(game, x, lam, gx, sat_tol)
            vl = _lam_direction(game, lam, gx, glam, sat)
        lam, merit, fitted = _lam_fit(game, x, lam, sat, merit, scaled)
        moved |= fitted
        if fitted:
            merit, gx, glam = _gradients(game, x, lam, scaled)
            vl = _lam_direction(game, lam, gx, glam, sat)
        if any(np.any(v) for v in vl):
            slope = float(sum(g @ v for g, v in zip(glam, vl)))
            x, lam, steps[1], ok = _armijo(game, x, lam, np.zeros_like(x), vl, merit, slope, steps[1],
                                           scaled)
            moved |= ok
        if not moved:
            status = Status.CONVERGED if merit <= 1e-12 else Status.ERROR
            break
    return x, lam, status, trajectory


def _lam_fit(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], sats: list[np.ndarray], merit: float,
             scaled: bool) -> tuple[list[np.ndarray], float, bool]:
    """A λ-block step to the multipliers that fit ``x`` best: on each server, NNLS of
    ``Σ_r λ_r d_{n,r} = g'(s̃_{n,i})/γ_{n,i}`` over the users it serves and its saturated rows, within the box
    (43). Taken only if it lowers Ψ (so (51) and (53) hold); otherwise nothing moves."""
    term = game.marginal(x)
    caps = game.lam_cap or [np.full(len(li), np.inf) for li in lam]
    new = []
    for row, li, sat, cap in zip(game.rows, lam, sats, caps):
        i = row.server
        served = row.users[x[row.users, i] > 0]
        v = np.zeros_like(li)
        if sat.any() and served.size:
            D = row.demand[np.ix_(served, np.flatnonzero(sat))]
            w = game.inst.gamma[served, i] if scaled else np.ones(served.size)
            v[sat], _ = nnls(D * w[:, None], term[served, i] * w)
            v = np.minimum(v, cap)
        new.append(v)
    m = _merit(game, x, new, scaled)
    return (new, m, True) if m < merit else (lam, merit, False)


def _x_direction(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], gx: np.ndarray, sat_tol: float
                 ) -> tuple[np.ndarray, list[np.ndarray]]:
    """(54): the projection of ``−∇_{x_i}Ψ`` onto ``Ω_i`` (46) (and ``x ≥ 0``); sets ``λ = 0`` on
    unsaturated rows (40). Returns the direction and each server's saturated rows ``R_i^h`` (44)."""
    vx = np.zeros_like(x)
    sats = []
    for k, row in enumerate(game.rows):
        i, users = row.server, row.users
        sat = row.slack(x[:, i]) <= sat_tol * np.maximum(1.0, row.capacity)
        sats.append(sat)
        lam[k][~sat] = 0.0
        if not len(users):
            continue
        D = row.demand[users]
        eq = D[:, sat & (lam[k] > 0)].T
        ineq = D[:, sat & (lam[k] <= 0)].T
        at_zero = x[users, i] <= 0
        bound = -np.eye(len(users))[at_zero]
        v = _project_cone(gx[users, i], eq, np.vstack([ineq, bound]) if len(bound) else ineq)
        vx[users, i] = np.where(at_zero, np.maximum(v, 0.0), v)  # the projection's round-off must
        # not turn x = 0 into a blocking constraint
    return vx, sats


def _lam_direction(game: ApfGame, lam: list[np.ndarray], gx: np.ndarray, glam: list[np.ndarray],
                   sats: list[np.ndarray]) -> list[np.ndarray]:
    """(45), (47), (48) on the saturated rows; 0 elsewhere."""
    out = []
    caps = game.lam_cap or [np.full(len(li), np.inf) for li in lam]
    for row, li, gl, sat, cap in zip(game.rows, lam, glam, sats, caps):
        beta = -(row.demand.T @ gx[:, row.server])  # (45)
        vt = -gl + beta * ((beta * -gl) >= 0)  # (47)
        vt = np.where(sat, vt, 0.0)
        vt = np.where(li > 0, vt, np.maximum(vt, 0.0))  # (48)
        out.append(np.where(li >= cap, np.minimum(vt, 0.0), vt))  # and the box (43)
    return out


def _armijo(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], vx: np.ndarray, vl: list[np.ndarray],
            merit: float, slope: float, eta: float, scaled: bool
            ) -> tuple[np.ndarray, list[np.ndarray], float, bool]:
    """Largest feasible step (capped at 4× the last one), halved until Ψ drops by Armijo's rule (51)."""
    eta_max = _max_step(game, x, lam, vx, vl)
    eta = min(eta_max, 4.0 * eta)
    while eta > 1e-300 and slope < 0:
        xn, ln = _advance(game, x, lam, vx, vl, eta, eta >= eta_max)
        if (xn.sum(axis=1) > 0).all() and _merit(game, xn, ln, scaled) <= merit + 1e-4 * eta * slope:
            return xn, ln, eta, True
        eta *= 0.5
    return x, lam, max(eta, 1e-12), False


def _max_step(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], vx: np.ndarray,
              vl: list[np.ndarray]) -> float:
    """Largest η keeping ``x ≥ 0`` and ``X > 0``, (52) on rows not yet saturated, and (53)."""
    t = np.inf
    neg = vx < 0
    if neg.any():
        t = min(t, float(np.min(x[neg] / -vx[neg])))
    for row, li, v in zip(game.rows, lam, vl):
        grow = row.usage(vx[:, row.server])
        sl = row.slack(x[:, row.server])
        up = (grow > 0) & (sl > 0)
        if up.any():
            t = min(t, float(np.min(sl[up] / grow[up])))
        dn = v < 0
        if dn.any():
            t = min(t, float(np.min(li[dn] / -v[dn])))
    for li, v, cap in zip(lam, vl, game.lam_cap or []):
        up = v > 0
        if up.any():
            t = min(t, float(np.min(np.maximum(cap[up] - li[up], 0.0) / v[up])))
    return t if np.isfinite(t) else 1e6


def _advance(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], vx: np.ndarray,
             vl: list[np.ndarray], eta: float, at_boundary: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    xn = np.maximum(x + eta * vx, 0.0)
    ln = [np.maximum(li + eta * v, 0.0) for li, v in zip(lam, vl)]
    if game.lam_cap:
        ln = [np.minimum(li, cap) for li, cap in zip(ln, game.lam_cap)]
    if at_boundary:  # land exactly on the row that stopped the step, so it counts as saturated
        for row in game.rows:
            i = row.server
            over = row.usage(xn[:, i]) - row.capacity
            if len(over) and over.max() > 0:
                xn[:, i] *= float(np.min(row.capacity / np.maximum(row.usage(xn[:, i]), 1e-300)))
    xn[xn < 1e-15 * max(1.0, float(xn.max(initial=0.0)))] = 0.0
    return xn, ln


# ---------------------------------------------------------------------- distributed heuristic
def distributed_heuristic(game: ApfGame, x: np.ndarray, epsilon: float = 1e-1, kappa: float = 1.0,
                          tol: float = 1e-12, max_iter: int = 100_000, psi_tol: float = 1e-16,
                          expired: Any = None
                          ) -> tuple[np.ndarray, list[np.ndarray], Status, list[dict[str, float]]]:
    r"""The heuristic of [APF] §5.2: every server, in parallel, moves its own ``x_{n,i}`` along
    ``v = [−f_{n,i}(x, λ)]^+_{x}`` ((55)) with its own step ``κ_i`` ((56)), the multipliers being the
    penalty approximation ``λ_{i,r} = [Σ_m x_{m,i} d_{m,r} − c_{i,r} + ε_{i,r}]^+ / ε_{i,r}²`` ((57)) with
    ``ε_{i,r} = epsilon · c_{i,r}``. ``κ_i = kappa / L_i``, ``L_i`` the local curvature bound
    ``‖D_i diag(1/ε_i)‖² + max_n ∂f_{n,i}/∂X_n`` (all server-local data). Converged when no ``x`` moves by
    more than ``tol`` relative, or when Ψ(x, λ(x)) ≤ ``psi_tol`` (the quantity [APF] Fig. 6 plots). Its
    fixed point solves the game with the quadratic barrier of footnote 8 (rows end ≈ ε below capacity),
    so Ψ → 0 while the NCP residual stays of order ε."""
    x = np.where(game.P, np.asarray(x, float), 0.0)
    eps = [epsilon * row.capacity for row in game.rows]
    pen = np.zeros(game.inst.n_servers)
    for row, e in zip(game.rows, eps):
        if len(e):
            pen[row.server] = np.linalg.norm(row.demand[row.users] / e, 2) ** 2
    trajectory, status = [], Status.ITERATION_LIMIT
    lam = game.zero_lam()
    for it in range(1, max_iter + 1):
        lam = [np.maximum(row.usage(x[:, row.server]) - row.capacity + e, 0.0) / e**2
               for row, e in zip(game.rows, eps)]  # (57)
        f = game.f_pairs(x, lam)
        v = -f
        v = np.where((x <= 0) & (v < 0), 0.0, v)  # (55)
        kappa_i = kappa / (pen + game.curvature(x).max(axis=0) + 1e-300)
        xn = np.where(game.P, np.maximum(x + kappa_i[None, :] * v, 0.0), 0.0)  # (56)
        xn = np.where((xn.sum(axis=1) > 0)[:, None], xn, x)  # g' is infinite at X = 0: never go there
        move = float(np.abs(xn - x).max(initial=0.0))
        psi = game.psi(x, lam)
        done = move <= tol * max(1.0, float(x.max(initial=0.0))) or psi <= psi_tol
        if it == 1 or it % 10 == 0 or done:
            trajectory.append({"iteration": it, "psi": psi, "ncp_residual": game.residual(x, lam),
                               "move": move})
        if done:
            status = Status.CONVERGED
            break
        x = xn
        if expired is not None and it % 1000 == 0 and expired():
            status = Status.TIME_LIMIT
            break
    return x, lam, status, trajectory
