r"""A semismooth Newton method (primal–dual active set) for the αPF-VDS NCP (28)–(31) of [APF].

The NCP: ``0 ≤ λ_{i,r} ⊥ c_{i,r} − Σ_n x_{n,i} d_{n,r} ≥ 0`` and ``0 ≤ x_{n,i} ⊥ f_{n,i} ≥ 0`` with
``f_{n,i} = Σ_r λ_{i,r} d_{n,r} − g_i'(s̃_{n,i})/γ_{n,i}`` ((31)) and ``g_i'(z) = (A_i/z)^{α_i} + B_i/z``
((22)). It is written as ``Φ(z) = 0`` with the min function on scaled pairs,

.. math::

    Φ_{n,i} = \min\big(x_{n,i}/σ^x_{n},\ f_{n,i}/σ^f_{n,i}\big), \qquad
    Φ_{i,r} = \min\big(λ_{i,r}/σ^λ_{i,r},\ (c_{i,r} − Σ_n x_{n,i}d_{n,r})/c_{i,r}\big),

with scales fixed at the start point (``σ^x_n = X_n``, ``σ^f`` the marginal ``g'/γ``, ``σ^λ`` the largest
``g'/(γ d)`` a user of the row could need — or the row's own multiplier where that is positive but below
``ROW_SCALE_GAP`` times this bound) — the same solutions, every number of order one. At large α a
saturated row's multiplier can lie far below the bound (rows whose users' levels differ by a factor ``z``
have multipliers about ``z^α`` apart; at α ≈ 34 on a 50 × 8 instance they spanned 10⁻²⁸…45): scaled by
the bound, those rows made Newton's system singular to working precision (condition number 10⁶¹, every
step failed its line search); scaled by their multipliers, the same step certified in 15 iterations.
First, though, where the game's largest α exceeds ``SUPPORT_SCALE_ABOVE`` (4), or the game has an
external resource, every row is scaled by its multiplier kept between the least ``g'/(γd)`` of its users
in the support and the bound (:meth:`_Arrays.support_scale`, the certificate's scale below): a positive
multiplier cannot exceed the former at a solution (it would price that user out), and that user's pair
needs the multiplier to that precision — an idle row scaled by the bound left multipliers of 10⁻¹⁸ that
were 10⁻⁸ of a small user's marginal. Where Newton does not certify with these scales, it runs again from
the same start with the scales above (:func:`newton`).

**Log form** (``LOG_PAIRS``, the default): the pair's second side is ``v = log ρ_{n,i}``, ``ρ = (Σ_r
λ_{i,r} d_{n,r})/m_{n,i}`` (``m = g'/γ``), continued linearly below ``ρ = RHO0`` (where ``Σ λ d ≤ 0`` the
log is undefined) — the same sign as ``f`` (``f = m(ρ − 1)``), so the same solutions, and ``v ≈ f/m`` near
them. With ``g' = (A/z)^α`` the side is ``log(Σλd) + α log X_n + const``: linear in ``log X``, where
``f/σ^f`` is a power ``X^{−α}`` on which Newton's step can change ``X`` by at most a factor ``1 + 1/α``
per iteration from below (and overshoots from above). Its linearisation is ``Δv = (Σ_r d Δλ)/(m ρ̂) +
(ρ/ρ̂)(h/m) ΔX`` (``ρ̂ = max(ρ, RHO0)``): the elimination below is unchanged but for the two weights.

**Newton step.** The branch of each min is the active set: a pair with ``x/σ^x > f/σ^f`` is *in the
support* (its equation is ``f_{n,i} = 0``), the others have ``x_{n,i} = 0``; a row with ``λ/σ^λ > slack/c``
is *saturated* (``slack = 0``), the others have ``λ = 0``. ``f_{n,i}`` depends on ``x`` only through the
user's total ``X_n``, so with ``X`` as an explicit unknown the linearised pair equation is
``f_{n,i} + Σ_r d_{n,r}Δλ_{i,r} + h_{n,i}ΔX_n = δ_{n,i}Δx_{n,i}`` (``h = −g''/(φγ²) > 0`` ((97))) with a
Levenberg–Marquardt-type regularisation ``δ_{n,i} = δ̂ σ^f/σ^x``,
``δ̂ = min(10⁻³, max(‖Φ‖/√dim Φ, MU_FLOOR))`` (and ``δ̂ c/σ^λ`` on the saturated rows). Solving it for
``Δx_{n,i}`` eliminates every pair: what remains is a sparse system in ``(Δλ, ΔX)`` of size
``#rows + #users`` (a Schur complement; its pattern is the bipartite support graph). Its users' block is
diagonal (a pair belongs to one user), so from 200 × 32 up (``DENSE_SCHUR_MIN``) ``ΔX`` is eliminated
too and the rows' Schur complement is solved densely, BLAS on
one thread; otherwise the system goes to sparse LU (:meth:`_Arrays.solve`). The regularisation
vanishes as ``Φ → 0``, so the method keeps Newton's fast local convergence, and it makes the step
unique where the split is not (a user served on a cycle of the support graph, [APF]'s non-unique ``x``
with unique ``X``): among the splits, the one the regularised step leads to — the end point is then
certified by the residual, not by uniqueness.

**Task limits and budgets** (the variational equilibrium of the generalised game, docs/mechanisms/
apf-vds.md). A user's limit ``T_n − X_n ≥ 0`` or budget ``B_n − Σ_i c_{n,i}x_{n,i} ≥ 0`` is one more row,
treated like a capacity row: a multiplier ``μ_n ≥ 0`` shared by all servers, the pair
``0 ≤ μ_n ⊥ slack_n ≥ 0`` (scaled by ``M_n``, the largest ``m_p/coefficient`` over the user's pairs, and
``T_n`` resp. ``B_n``), and ``f_{n,i} + c_i μ_n·coef_{n,i}`` in the pair ``x_{n,i}`` — ``c_i`` the
utility scale of server ``i`` (``ApfGame.scale``), so ``μ_n`` is shared in the servers' own units of
``g_i``, not in the rescaled ones. The coefficients of ``μ`` in ``f`` (``D``) and of ``x`` in the slack
(``Dᵀ`` in the code, built separately) then differ by ``c_i``; the elimination is unchanged — the
system gains one unknown per coupling row. :func:`coupling_rows` gives their order (``NewtonResult.mu``).
An external resource is one more such row, ``c_e − Σ_{n, i∈S_e} x_{n,i} d_{n,e} ≥ 0`` over every pair of its
scope, with one shared ``μ_e`` for the pairs of finite-α servers; at a leximin server (below) it is a row
of that server's max instead, ``M_{i,e}`` with the same slack (``("external-leximin", e)``).

**Servers with α_i = ∞** (PS-DSF's leximin response, [APF] Thm 2). As ``α → ∞`` the pair's condition
``Σ_r λ_r d_{n,r} ≥ g'(s̃)/γ`` with ``g' = z^{−α}`` reads ``(Σ_r λ_r d_{n,r} γ)^{1/α} s̃_{n,i} ≥ 1``, and
``(Σ_r λ_r d_{n,r}γ)^{1/α} → max_{r: d_{n,r}>0} M_r`` with ``M_r = λ_r^{1/α}``. The limit system,

.. math::

    0 \le M_{i,r} \perp c_{i,r} − Σ_n x_{n,i} d_{n,r} \ge 0, \qquad
    0 \le x_{n,i} \perp \tilde s_{n,i} \max_{r:\,d_{n,r}>0} M_{i,r} − 1 \ge 0,

is [PSDSF] Thm 1 at server ``i``: a served user has ``s̃ = 1/max_r M_r ≤ 1/M_r`` on every row it uses,
so ``1/M_r`` is at least the VDS of every user the row serves, and every user with ``s̃ · M_r ≥ 1`` on
some row with ``M_r > 0`` (saturated) is bottlenecked there. ``ApfGame.leximin`` marks these servers;
their pairs are written as α = 1 pairs (``A = 1``, ``B = 0``: ``m = φ_n/X_n``) whose ``f`` has
``max_r M_r/γ_{n,i}`` in place of ``Σ_r λ_r d_{n,r}`` — ``f/m = s̃ max_r M_r − 1`` — while the slack keeps
the demands (``D`` and ``Dᵀ`` differ there, as on coupling rows). The max is semismooth: before each
step :meth:`_Arrays.linearize` puts ``1/γ`` at the first row attaining it and explicit zeros at the
others; a coupling row (task limit, budget) enters such a pair linearly, ``+ μ_n·coef`` as elsewhere
(``c_i = 1`` there). The row scale ``Λ`` of such a row is ``max 1/s̃`` over its users (``d' = 1/γ``). The
equilibria with such servers are not unique in general (PS-DSF's are not): the one returned is where
the path ends, certified by the residual and, independently, by Thm 1 (``details.certificate``).

**Globalisation.** A backtracking line search on ``‖Φ‖₂`` (Armijo, halving), with ``X_n`` kept above
a fraction of its current value (``g'`` is infinite at ``X_n = 0``). Where every attempt of
:func:`newton` fails, one more runs with an adaptive regularisation (``ADAPTIVE_LAST``): ``δ̂`` is
multiplied by a factor raised tenfold after a step the line search cut below ``ADAPT_BELOW`` (up to
``ADAPT_MAX``) and lowered tenfold after a full step — Levenberg–Marquardt's rule. Near a point where
many pairs are nearly degenerate (``x ≈ 0`` and ``f ≈ 0`` at once; at α ≈ 15 on a 200 × 32 instance 19
pairs in the support held less than 10⁻⁶ of their user's total and 48 outside it were within 10⁻⁶ of
entering) the system in ``(Δλ, ΔX)`` is nearly singular (condition number 2·10¹⁰ after equilibration)
and the plain step from a residual of 4.7·10⁻⁷ moved multipliers by 30 %; a larger ``δ̂`` keeps the step
short there (docs/mechanisms/apf-vds.md). A path from ``α = 1`` (weighted
proportional fairness, a convex problem) to the target ``(α_i, A_i, B_i)`` by continuation
(:func:`continuation`): the parameters move geometrically in ``α`` and linearly in ``A, B``; a step that
Newton cannot finish is halved and retried, a quick one doubles the next; where the step falls below
10⁻⁴ (a stall), the step control starts afresh from the last certified point (``STALL_RESTARTS``
times) before the path gives up. Each step starts from a
secant prediction through the last two certified points (users' totals and positive multipliers
extrapolated geometrically, each split kept), where that has the smaller :func:`scaled_residual` in the
new game than the last point itself, with the coupling rows' multipliers moved to the new game
(:func:`_recentred`). Where Newton does not certify a step (or the first game), a few
Gauss–Seidel sweeps of the servers' exact best responses from its end point give a new start
(``rescue``; the caller's :func:`~fairalloc.models.apf_vds._sweep_rescue`), and Newton runs once more
before the step is halved; a first game with leximin servers gets longer rescues after that
(``FIRST_GAME_SWEEPS``), each going on from the last one's sweeps.

**Smoothing** (cold starts on large games). From a start far from any solution (the sharing-incentive
point, where every runnable pair holds tasks) on a game of at least ``SMOOTH_PAIRS`` pairs, Newton first
runs on the smoothed function ``φ_ε(a, b) = √(a² + b² + 2ε²) − a − b``, zero exactly where ``a, b > 0``
and ``a b = ε²`` — a central path, as in interior-point methods, on which the split of a user's total is
unique — from ``ε = SMOOTH0``; whenever every component is within ``SMOOTH_NEAR·ε`` of zero, ``ε`` is cut
by a factor that starts at ``SMOOTH_CUT`` and adapts to the last re-centring (milder after a slow one,
stronger after a quick one), and below ``SMOOTH_END`` it is 0 (the plain function, with
its fast local convergence).
The Newton system is the same with ``√(a² + b² + 2ε²)`` in the derivatives. On 1000 × 250 (α = 2, plain)
the plain iteration from that point stalls at a scaled residual of 8.8·10⁻⁶ (about 7 900 pairs in the
support where a vertex split needs 2 000; the system nearly singular along the split, the line search
cutting steps to 10⁻⁶–10⁻³), and the smoothed one certifies in 108 iterations. Where it does not certify,
the plain attempts follow from the same start (:func:`newton`) — unless it never came near its central path
(no cut of ``ε``) and the caller has another route (``plain_off_path=False``: αPF-VDS's direct attempt,
which the α-continuation follows). Measured at 1000 × 250: on the scoped family at α = 2 the smoothed
attempt stalled before its first cut and the plain attempts after it stalled too (129 s in all), where
the continuation certified; on the placement family at α = 3 it stalled after three cuts and the plain
attempts after it certified (112.6 s), where the continuation did not within 120 s. Callers say which
starts are cold (``cold=True``); a start near a solution (a continuation step, the canonical split) is
not smoothed.
Smaller games keep the plain attempts only (an earlier variant with ``ε`` tied to the residual was slower
at 200 × 32: α = 3 in 3.2 s against 0.97 s), and so do games with leximin servers (``α_i = ∞``), whose
``max_r`` the smoothing leaves non-smooth: at 1000 × 250 with every fourth server leximin the direct
attempt with the smoothed one first did not certify (176 iterations, 70.6 s), and the continuation then
ran out of the 120 s; with every server leximin (PS-DSF) it certified at
200 × 32 (203 iterations, Thm 1 holding) but stalled at 1000 × 250 (residual 7·10⁻³ after 309).

**Certificate.** :func:`scaled_residual`: ``max |min(x_{n,i}/X_n, f_{n,i}/(g_i'/γ_{n,i}))|`` over pairs and
``max |min(λ_{i,r}/Λ_{i,r}, slack_{i,r}/c_{i,r})|`` over rows, ``Λ_{i,r}`` the least
``(g_i'(s̃_{n,i})/γ_{n,i})/d_{n,r}`` over the row's pairs in the support at the point (the largest over all
its pairs where it has none, and never above that; :meth:`_Arrays.support_scale`; coupling rows alike,
``f`` including ``μ``) — dimensionless, unchanged when the units of tasks, resources or utility change.
With ``λ ≤ ε Λ`` an unsaturated row's multiplier could be set to 0 moving no served pair's ``f/m`` by more
than ``ε``; scaled by the largest ratio, one user with a tiny total (a huge marginal at α = 8) let a
price of the order of the other users' marginals stand on a row with slack (a 30 × 6 instance with an
external resource: their pairs 54 % off once it was set to 0). It is taken at the
point clipped to ``x, λ ≥ 0`` (what is returned); where that fails while the unclipped point passes, Newton
goes on from the clipped point.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from fairalloc.models._apf_ncp import ApfGame

MU_FLOOR = 1e-7
ADAPTIVE_LAST = True  # where every attempt fails, one more with an adaptive regularisation (newton)
ADAPT_BELOW, ADAPT_MAX = 0.1, 1e4  # ... raised 10× after a step cut below ADAPT_BELOW, up to ADAPT_MAX
NONMONOTONE = 5
STALL = 40  # iterations without halving the merit norm: give up (the continuation halves its step)
FINE = 1e-13  # Newton's own target below the certificate's tolerance
LOG_PAIRS = True  # the pair's second side as log((Dλ)/m) (module docstring), not f/σ^f
RHO0 = 1e-3  # ... linear below (Dλ)/m = RHO0 (where Dλ ≤ 0 the log is undefined)
LOG_RHO0 = float(np.log(RHO0))
# σ^λ: a row whose multiplier lies below this fraction of its bound Λ is scaled by the multiplier (module
# docstring). Measured against 1 (every positive multiplier its own scale) on 74 runs (200 x 32 at α 0.5-16,
# 50 x 8 and 20 x 4 at α 16-128): the same or more certified, 100.9 s against 131.6 s on the 50 at α <= 8
# (two runs at a time, the two settings at different times)
ROW_SCALE_GAP = 1e-8
# ... and above this α, every row's σ^λ is its multiplier kept between the least m/d of the row's users in
# the support (the certificate's scale) and the bound Λ, with the bound scales as Newton's second try
# (newton). 23 cases at α 16-128 (20 x 4, 50 x 8, 200 x 32): 18 certified against 13. Once the certificate
# took that scale, the bound scales first lost at α = 8 with an external resource (0 of 6 at 200 x 32,
# against 6 of 6) and on α = inf mixes with one (26 of 27, 466.6 s, against 27 of 27, 125.7 s); without
# external resources they were as good below α = 4 (46 cases at 200 x 32) and certified a mix with a
# binding budget (12 x 4) that the support scales first did not: the support scales first above this α,
# and in every game with an external resource (newton)
SUPPORT_SCALE_ABOVE = 4.0
# smoothing (module docstring) on cold starts of games with at least this many pairs: from ε = SMOOTH0, cut
# by SMOOTH_CUT once every component of Φ_ε is within SMOOTH_NEAR·ε of 0, and 0 below SMOOTH_END. Measured on
# the direct attempt at 1000 x 250 (plain seed 1, α = 2; one run at a time): (ε0, cut, near) = (0.01, 0.1, 1)
# 126 iterations, (0.01, 0.2, 1) 108, (0.01, 0.3, 1) 108, (0.01, 0.3, 3) 120, (0.01, 0.2, 0.3) 118,
# (0.03, 0.2, 1) 116, (0.003, 0.1, 1) 143; ε0 = 0.1 stalled (its central path gives every idle pair of a
# user ε²/v of its total, 250 servers' worth). With a fixed cut of 0.2 the mixed family (limits, an external
# resource, placement, weights) stalled after the first cut (steps of 1-3 %); with the cut adapted to the
# last re-centring (its square root, at most 0.7, after more than 10 iterations, counted from
# the start for the first cut; its square, at least 0.05, after at most 3) it certified in 195 iterations,
# and plain α = 0.5 / 2 / 3 took 151 / 108 / 133 against 150 / 108 / 146
SMOOTH_PAIRS = 50_000
SMOOTH0, SMOOTH_CUT, SMOOTH_NEAR, SMOOTH_END = 0.01, 0.2, 1.0, 1e-12
RECENTRE_ROUNDS = 3  # continuation: the coupling rows' μ moved to each step's game (_recentred)
# continuation: a first game with leximin servers that the rescue does not certify gets longer rescues,
# each going on from the last one's sweeps (the sweeps converge there, slowly, where Newton does not)
FIRST_GAME_SWEEPS = (40, 150, 600)
LEAP_BELOW = 1e-2  # continuation: once the step is halved below this, try leaps ...
LEAP_FRACTIONS = (0.05, 0.15, 0.4, 1.0)  # ... of the rest of the path, once per point
# continuation: where the step falls below 1e-4 (a stall), the step control starts afresh from the last
# certified point this many times (the target first, then halving; the secant history dropped) before the
# path gives up. At 200 x 32, α = 16 (seeds 128-129, 16 cases): limits seed 128 stalled at t = 0.987 and
# certified after one restart (95 s through the CLI, within 120); placement seed 129 stalled at t = 0.996
# both ways; the other cases did not stall
STALL_RESTARTS = 2
# the Newton system is solved densely (Schur complement on the rows, BLAS on one thread) where rows ×
# max(rows, users) lies in [DENSE_SCHUR_MIN, DENSE_SCHUR] (DENSE_SCHUR: memory). One solve, mean of 20
# systems of a run, idle machine: 200 x 32 1.55 ms against SuperLU's 4.71 ms, 400 x 64 5.0 against 20.2,
# 600 x 100 13.5 against 51.3, 1000 x 250 99 against 421; numpy's threaded BLAS (2 threads) took 31.6 ms
# at 400 x 64 and 143 ms at 1000 x 250. Below DENSE_SCHUR_MIN (100 x 16 and smaller) a solve costs about
# a millisecond either way (20 x 4: 0.43 against 1.26 ms) and SuperLU stays: on 48 small mixes with task
# limits or budgets (12 x 4, the tests' _coupled) Newton certified 47 with it, 45 with the dense route
DENSE_SCHUR_MIN = 10_000
DENSE_SCHUR = 20_000_000
log = logging.getLogger(__name__)
_blas: Any = None


def _one_blas_thread() -> Any:
    """A context in which BLAS and LAPACK run on one thread (threadpoolctl)."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = ThreadpoolController()  # the libraries loaded now: numpy's and scipy's
    return _blas.limit(limits=1, user_api="blas")


__all__ = ["NewtonResult", "continuation", "coupling_rows", "newton", "scaled_residual"]


class _Arrays:
    """The game flattened: runnable pairs ``p = (n_p, i_p)``, rows ``k = (i_k, r_k)``, the sparse
    pair–row coefficients ``D[p, k] = d_{n_p, r_k}`` (``i_p = i_k``) and pair–user incidence ``E``."""

    def __init__(self, game: ApfGame) -> None:
        self.game = game
        inst = game.inst
        self.N = inst.n_users
        pn, pi = np.nonzero(game.P)
        self.pn, self.pi = pn, pi
        self.np_ = len(pn)
        pid = -np.ones(game.P.shape, int)
        pid[pn, pi] = np.arange(self.np_)
        ri, rc, rv, caps, rserver = [], [], [], [], []
        self.row_slices = []
        k = 0
        for row in game.rows:
            start = k
            for r in range(len(row.capacity)):
                users = row.users[row.demand[row.users, r] > 0]
                ri.extend(pid[users, row.server].tolist())
                rc.extend([k] * len(users))
                rv.extend(row.demand[users, r].tolist())
                caps.append(row.capacity[r])
                rserver.append(row.server)
                k += 1
            self.row_slices.append(slice(start, k))
        self.ns = k  # server rows; then the coupling rows (task limits, budgets), one per user and kind
        sv = list(rv)  # the slack's coefficients: those of f, except c_i on coupling rows
        scale = np.ones(inst.n_servers) if game.scale is None else np.asarray(game.scale, float)
        self.coupling: list[tuple[str, int]] = []
        cost = inst.budget_cost
        for kind, limit in (("tasks", inst.tasks), ("budget", inst.budget_limit)):
            for n in np.flatnonzero(np.isfinite(limit)):
                ps = np.flatnonzero(pn == n)
                coef = np.ones(len(ps)) if kind == "tasks" else cost[n, pi[ps]]
                use = coef > 0
                if not use.any():
                    continue
                ps, coef = ps[use], coef[use]
                ri.extend(ps.tolist())
                rc.extend([k] * len(ps))
                rv.extend((coef * scale[pi[ps]]).tolist())  # μ_n in the servers' own utility units
                sv.extend(coef.tolist())
                caps.append(float(limit[n]))
                self.coupling.append((kind, int(n)))
                k += 1
        lex = np.zeros(inst.n_servers, bool) if game.leximin is None else np.asarray(game.leximin, bool)
        lex_rows = []  # (row, its server): an external resource's row at a leximin server (below)
        for e in range(len(inst.external)):  # an external resource: every pair of its scope that uses it
            use = inst.external_scope[e, pi] & (inst.external_demand[pn, e] > 0)
            if not use.any():
                continue
            ps = np.flatnonzero(use)
            coef = inst.external_demand[pn[ps], e]
            # one shared price for the finite servers' pairs; a leximin server's pairs take their own
            # row's multiplier into their max instead (explicit zeros here keep the slack's pattern)
            if (~lex[pi[ps]]).any():
                ri.extend(ps.tolist())
                rc.extend([k] * len(ps))
                rv.extend(np.where(lex[pi[ps]], 0.0, coef * scale[pi[ps]]).tolist())
                sv.extend(coef.tolist())
                caps.append(float(inst.external_capacity[e]))
                self.coupling.append(("external", e))
                k += 1
            for i in np.unique(pi[ps][lex[pi[ps]]]):
                ri.extend(ps.tolist())
                rc.extend([k] * len(ps))
                rv.extend(np.where(pi[ps] == i, coef, 0.0).tolist())  # in server i's max only
                sv.extend(coef.tolist())
                caps.append(float(inst.external_capacity[e]))
                self.coupling.append(("external-leximin", e))
                lex_rows.append((k, int(i)))
                k += 1
        self.nr = k
        # the rows a leximin pair's max ranges over: its server's own, and that server's rows of external
        # resources (their slack is the whole pool's: with several leximin servers in a scope the pool's
        # split between them is not unique, and the regularised step picks one, as for splits)
        self.row_server = np.full(k, -1)
        self.row_server[:self.ns] = rserver
        for row, i in lex_rows:
            self.row_server[row] = i
        self.cap = np.asarray(caps, float)
        self.cap_scale = np.where(self.cap > 0, self.cap, 1.0)  # a row's slack scale (1 at zero capacity)
        self.D = sp.csr_matrix((rv, (ri, rc)), shape=(self.np_, self.nr))
        self.DT = sp.csr_matrix((sv, (rc, ri)), shape=(self.nr, self.np_))
        self.E = sp.csr_matrix((np.ones(self.np_), (pn, np.arange(self.np_))), shape=(self.N, self.np_))
        self.gam = inst.gamma[pn, pi]
        self.phig = game.phig[pn, pi]
        self.alpha = game.alpha[pi]
        self.A = game.A[pi]
        self.B = game.B[pi]
        with np.errstate(divide="ignore"):
            self._logA = np.log(self.A)  # (marginal's constants, computed once)
        self._Apos = self.A > 0
        self._A_pos_all, self._B_zero = bool(self._Apos.all()), bool((self.B == 0).all())
        self._phig_gam = self.phig * self.gam
        self._by_row: tuple[np.ndarray, ...] | None = None  # (_row_ratios)
        self._schur_index: tuple[Any, ...] | None = None  # (_schur)
        self._pattern: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._transpose: tuple[np.ndarray, ...] | None = None  # (_entries: the fixed part of _pattern)
        self._coo: sp.coo_matrix | None = None
        self.lex: np.ndarray | None = None  # the leximin pairs (module docstring), if any
        if game.leximin is not None and game.leximin[pi].any():
            self._leximin(game.leximin)

    def _leximin(self, servers: np.ndarray) -> None:
        """The entries of ``D`` at the leximin servers' pairs and rows: ``1/γ_p`` at the pair's selected
        row (:meth:`linearize`), explicit zeros at its others (the pattern stays that of ``Dᵀ``); ``f``
        takes the maximum over them. Their coupling rows' entries stay linear."""
        D = self.D.tocsr()
        D.sort_indices()
        pair = np.repeat(np.arange(self.np_), np.diff(D.indptr))
        # the entries of leximin pairs in their own server's rows (and its external rows), grouped by pair
        self._lex_entry = servers[self.pi[pair]] & (self.row_server[D.indices] == self.pi[pair])
        self._lex_k = D.indices[self._lex_entry]
        self._lex_g = 1.0 / self.gam[pair[self._lex_entry]]
        lp = pair[self._lex_entry]
        self._lex_start = np.flatnonzero(np.r_[True, lp[1:] != lp[:-1]])
        self.lex = lp[self._lex_start]
        self._lex_owner = np.repeat(np.arange(len(self.lex)), np.diff(np.r_[self._lex_start, len(lp)]))
        ratio = D.copy()
        ratio.data = ratio.data.copy()
        ratio.data[self._lex_entry] = self._lex_g
        # m/d' with d' = 1/γ at every leximin entry (_row_ratios), without the explicit zeros (a pair in the
        # slack of an external row it does not pay for)
        ratio.eliminate_zeros()
        self._coo = ratio.tocoo()
        D.data = D.data.copy()
        self.D = D
        self._D_linear = D.copy()  # D without the leximin entries: the part of f linear in λ
        self._D_linear.data[self._lex_entry] = 0.0
        self.linearize(np.zeros(self.nr))

    # -------------------------------------------------------------- conversions
    def pack(self, x: np.ndarray, lam: list[np.ndarray], mu: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        xp = np.asarray(x, float)[self.pn, self.pi]
        lv = np.concatenate([np.asarray(li, float) for li in lam]) if lam else np.zeros(0)
        nc = self.nr - self.ns
        mu = np.zeros(nc) if mu is None or len(mu) != nc else np.asarray(mu, float)
        return xp, np.concatenate([lv, mu])

    def unpack(self, xp: np.ndarray, lv: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
        x = np.zeros(self.game.P.shape)
        x[self.pn, self.pi] = xp
        return x, [lv[s].copy() for s in self.row_slices], lv[self.ns:].copy()

    # -------------------------------------------------------------- the map
    def totals(self, xp: np.ndarray) -> np.ndarray:
        return np.bincount(self.pn, weights=xp, minlength=self.N)

    def marginal(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``m_p = g'(s̃)/γ`` and ``h_p = ∂m_p/∂X`` with the sign of ``∂f/∂X`` (``−g''/(φγ²) > 0``)."""
        z = X[self.pn] / self.phig
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            # exp(α (log A − log z)) where A > 0, else 0, computed in place
            pw = np.log(z)
            np.subtract(self._logA, pw, out=pw)
            pw *= self.alpha
            np.exp(pw, out=pw)
            if not self._A_pos_all:
                pw = np.where(self._Apos, pw, 0.0)
            if self._B_zero and z.min() > 0:  # B/z = 0 left out (b + 0 = b; at z = 0, B/z is NaN)
                return pw / self.gam, self.alpha * pw / z / self._phig_gam
            bz = self.B / z
            h = (self.alpha * pw + bz) / z / self._phig_gam
            return (pw + bz) / self.gam, h

    def f(self, xp: np.ndarray, lv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        X = self.totals(xp)
        m, h = self.marginal(X)
        if self.lex is None:
            Dl = self.D @ lv
        else:  # the linear terms (coupling rows) and max_r M_{i,r}/γ_{n,i} at the leximin pairs
            Dl = self._D_linear @ lv
            Dl[self.lex] += np.maximum.reduceat(lv[self._lex_k] * self._lex_g, self._lex_start)
        return Dl - m, self.cap - self.DT @ xp, m, h

    def linearize(self, lv: np.ndarray) -> None:
        """Set ``D`` to the derivative of ``f`` in ``λ`` at ``lv`` before a Newton step: ``f`` is linear in
        ``λ`` but at the leximin pairs, where the derivative of ``max_r M_r/γ`` is ``1/γ`` at the first
        row attaining the maximum (an element of the generalised Jacobian)."""
        if self.lex is None:
            return
        vals = lv[self._lex_k] * self._lex_g
        top = np.maximum.reduceat(vals, self._lex_start)[self._lex_owner]
        pos = np.arange(len(vals))
        first = np.full(len(self.lex), len(vals))
        np.minimum.at(first, self._lex_owner[vals >= top], pos[vals >= top])
        sel = np.zeros(len(vals))
        sel[first] = self._lex_g[first]
        self.D.data[self._lex_entry] = sel
        self._pattern = None

    def _entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The pair–row entries ``(k, p)`` with the slack's coefficient ``Dᵀ[k,p]`` and f's ``D[p,k]``
        (they differ by ``c_i`` on coupling rows only; the same pattern)."""
        if self._transpose is None:  # the pattern, fixed: Dᵀ's entries and where each of D's lands in it
            DT = self.DT.tocsr(copy=True)
            DT.sum_duplicates()
            at = self.D.copy()  # (D has no duplicate entries: built through COO, which sums them)
            at.data = np.arange(at.nnz, dtype=float)
            at = at.T.tocsr(copy=True)
            at.sum_duplicates()  # (sorts each row's entries, as DT's)
            assert at.nnz == self.D.nnz
            assert np.array_equal(DT.indptr, at.indptr) and np.array_equal(DT.indices, at.indices)
            self._transpose = (np.repeat(np.arange(self.nr), np.diff(DT.indptr)), DT.indices, DT.data,
                               at.data.astype(np.int64))
        if self._pattern is None:  # D's values (they change at leximin pairs, linearize) in Dᵀ's order
            k, p, dt, perm = self._transpose
            self._pattern = (k, p, dt, self.D.data[perm])
        return self._pattern

    def solve(self, dl: np.ndarray, bl: np.ndarray, qv: np.ndarray, qhh: np.ndarray, rhs_l: np.ndarray,
              rhs_X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The Newton system after the pairs are eliminated (module docstring), in ``(Δλ, ΔX)``:

        ``[diag(dl) + diag(bl) Dᵀ Q_v D,  diag(bl) Dᵀ Q_h Eᵀ] [Δλ]   [rhs_l]``
        ``[E Q_v D,                       I + E Q_h Eᵀ     ] [ΔX] = [rhs_X]``

        with ``Q_v = diag(qv)``, ``Q_h = diag(qhh)`` (``qh·h``). Every pair belongs to one user, so the
        users' block is diagonal (at least 1, unless a pair's ``ρ`` is negative in the log form): ``ΔX`` is
        eliminated exactly and the rows' Schur complement (``nr × nr``) is solved densely by LU with
        partial pivoting, BLAS on one thread, where that pays and fits (``DENSE_SCHUR_MIN``,
        ``DENSE_SCHUR``); otherwise, or when a diagonal entry is below 1/2, the whole sparse system goes to
        SuperLU (which pivots).
        ``None``: singular, or a number not finite (but for an infinite ``dl``)."""
        N, nr = self.N, self.nr
        if np.isnan(dl).any() or not all(np.isfinite(v).all() for v in (bl, qv, qhh, rhs_l, rhs_X)):
            # a wild trial point's numbers: no step (as before, when they reached the solvers), but
            # without SuperLU's BLAS printing to file descriptor 1 on them. (An infinite diagonal entry
            # dl holds its multiplier: both paths solve that as they always did)
            return None
        diag_X = 1.0 + np.bincount(self.pn, weights=qhh, minlength=N)
        if nr == 0:
            return np.zeros(0), rhs_X / diag_X
        if DENSE_SCHUR_MIN <= nr * max(nr, N) <= DENSE_SCHUR and diag_X.min() >= 0.5:
            with _one_blas_thread():
                return self._schur(dl, bl, qv, qhh, rhs_l, rhs_X, diag_X)
        H = sp.csr_matrix((qhh, (np.arange(self.np_), self.pn)), shape=(self.np_, N))
        QD = sp.diags(qv) @ self.D
        Bl = sp.diags(bl)
        K = sp.bmat([[sp.diags(dl) + Bl @ (self.DT @ QD), Bl @ (self.DT @ H)],
                     [self.E @ QD, sp.diags(diag_X)]], format="csc")
        try:
            sol = splu(K).solve(np.concatenate([rhs_l, rhs_X]))
        except RuntimeError:  # exactly singular
            return None
        return sol[:nr], sol[nr:]

    def _schur(self, dl: np.ndarray, bl: np.ndarray, qv: np.ndarray, qhh: np.ndarray, rhs_l: np.ndarray,
               rhs_X: np.ndarray, diag_X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`solve` with ``ΔX`` eliminated: the rows' Schur complement, dense, by LU."""
        N, nr = self.N, self.nr
        k, p, dt, d = self._entries()
        if self._schur_index is None:  # (the pattern's, fixed)
            self._schur_index = (k * N + self.pn[p], self.pn[p] * nr + k,
                                 np.repeat(np.arange(self.np_), np.diff(self.D.indptr)), self.D.copy())
        lX, Xl, d_row, QD = self._schur_index
        # rows × users: Σ_p bl_k Dᵀ[k,p] qh_p h_p over the user's pairs; users × rows: Σ_p qv_p D[p,k]
        KlX = np.bincount(lX, weights=bl[k] * dt * qhh[p], minlength=nr * N).reshape(nr, N)
        KXl = np.bincount(Xl, weights=qv[p] * d, minlength=N * nr).reshape(N, nr)
        # rows × rows: diag(bl) Dᵀ diag(qv) D, the diagonal factors applied to the entries (the products
        # and sums of the sparse products with diagonal matrices, without building those)
        np.multiply(self.D.data, qv[d_row], out=QD.data)  # (D's pattern; its values change at leximin pairs)
        Kll = (self.DT @ QD).toarray()
        Kll *= bl[:, None]
        Kll[np.diag_indices(nr)] += dl
        S = Kll - KlX @ (KXl / diag_X[:, None])
        r = rhs_l - KlX @ (rhs_X / diag_X)
        try:
            with warnings.catch_warnings():  # an exactly singular S: tested below
                warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
                lu = scipy.linalg.lu_factor(S, check_finite=False)
        except (ValueError, np.linalg.LinAlgError):
            return None
        if not np.all(np.abs(np.diag(lu[0])) > 0):
            return None
        dlam = scipy.linalg.lu_solve(lu, r, check_finite=False)
        return dlam, (rhs_X - KXl @ dlam) / diag_X

    def _row_ratios(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``m_p / d_{p,k}`` for every entry of ``D``, with its pair ``p``; the entries sorted by their row
        ``k`` (:meth:`_per_row`)."""
        if self._by_row is None:
            if self._coo is None:
                self._coo = self.D.tocoo()
            C = self._coo
            order = np.argsort(C.col, kind="stable")
            ks = C.col[order]
            starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]]) if len(ks) else np.zeros(0, int)
            self._by_row = (C.row[order], C.data[order], starts, ks[starts])
        p, d, _, _ = self._by_row
        return m[p] / d, p

    def _per_row(self, ufunc: np.ufunc, values: np.ndarray, initial: float) -> np.ndarray:
        """``ufunc`` (``np.minimum`` or ``np.maximum``) over each row's entries of ``values`` (one per entry,
        in the order of :meth:`_row_ratios`), ``initial`` included: what ``ufunc.at`` gives from
        ``initial``, by one ``reduceat``."""
        _, _, starts, rows = self._by_row
        out = np.full(self.nr, initial)
        if len(starts):
            out[rows] = ufunc(initial, ufunc.reduceat(values, starts))
        return out

    def support_scale(self, xp: np.ndarray, m: np.ndarray, bound: np.ndarray,
                      _ratios: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """``min_{p in row k, x_p > 0} m_p / d_{p,k}`` (at most ``bound``; ``bound`` where the row has no
        pair in the support): a row's multiplier above it would price that pair out, and below it the
        pair's equation needs the multiplier to that precision."""
        ratio, p = self._row_ratios(m) if _ratios is None else _ratios
        low = self._per_row(np.minimum, np.where(xp[p] > 0, ratio, np.inf), np.inf)
        return np.minimum(low, bound)

    def certificate_scale(self, xp: np.ndarray, m: np.ndarray) -> np.ndarray:
        """``Λ_k``, the certificate's row scale (module docstring): :meth:`support_scale` capped by
        :meth:`lam_scale`."""
        ratios = self._row_ratios(m)
        return self.support_scale(xp, m, self.lam_scale(m, ratios), ratios)

    def lam_scale(self, m: np.ndarray, _ratios: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """``max_{p in row k} m_p / d_{p,k}``: the largest multiplier row ``k`` can need (Newton's scale
        ``σ^λ``; the certificate's ``Λ_k`` is :meth:`support_scale` below it)."""
        ratio, _ = self._row_ratios(m) if _ratios is None else _ratios
        out = self._per_row(np.maximum, ratio, 0.0)
        return np.where(out > 0, out, 1.0)


def scaled_residual(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], mu: np.ndarray | None = None,
                    arrays: _Arrays | None = None) -> float:
    """The dimensionless NCP residual (module docstring): pairs ``|min(x/X_n, (f + μ)/(g'/γ))|``, rows
    ``|min(λ/Λ, slack/c)|``, coupling rows ``|min(μ/M, slack/T)|`` (``mu``: the coupling multipliers in
    the order of :func:`coupling_rows`, zero if ``None``; ``arrays``: the game's, if already built — 0.8 s
    at 1000 × 250, against 0.03 s for the residual itself)."""
    a = _Arrays(game) if arrays is None else arrays
    return _packed_residual(a, *a.pack(x, lam, mu))


def _packed_residual(a: _Arrays, xp: np.ndarray, lv: np.ndarray) -> float:
    """:func:`scaled_residual` of a packed point (``inf`` where a user's total is not positive)."""
    if (a.totals(xp) <= 0).any():
        return float("inf")
    f, sl, m, _ = a.f(xp, lv)
    return _residual(a, xp, lv, f, sl, m)


def _residual(a: _Arrays, xp: np.ndarray, lv: np.ndarray, f: np.ndarray, sl: np.ndarray, m: np.ndarray
              ) -> float:
    """:func:`scaled_residual` from the packed point and its ``f``, slacks and marginals (Newton has
    them at hand); a row of zero capacity has its slack taken unscaled."""
    X = a.totals(xp)
    res = np.abs(np.minimum(xp / X[a.pn], f / m)).max(initial=0.0)
    if a.nr:
        res = max(res, np.abs(np.minimum(lv / a.certificate_scale(xp, m), sl / a.cap_scale)).max())
    return float(res)


def coupling_rows(game: ApfGame) -> list[tuple[str, int]]:
    """The coupling rows of the game, in the order of ``mu``: ``("tasks", n)`` for a finite task limit,
    ``("budget", n)`` for a finite budget with a positive cost on some runnable pair, ``("external", e)``
    for an external resource some runnable pair of its scope uses."""
    return _Arrays(game).coupling


@dataclass
class NewtonResult:
    x: np.ndarray
    lam: list[np.ndarray]
    ok: bool
    iterations: int
    residual: float
    message: str = ""
    mu: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cuts: int = 0  # how often a smoothed attempt cut ε (0: it never came near its central path)


def _fb_norm(a: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """``√(a² + b² + 2ε²)`` without overflow (``hypot``; the plain ``√(a² + b²)`` at ``ε = 0``)."""
    return np.hypot(np.hypot(a, b), np.sqrt(2.0) * eps) if eps > 0 else np.hypot(a, b)


def _fb(a: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """The (smoothed) Fischer–Burmeister function ``√(a² + b² + 2ε²) − a − b``: zero exactly where
    ``a, b ≥ 0`` and ``a b = ε²``."""
    r = _fb_norm(a, b, eps)
    r -= a
    r -= b
    return r


def newton(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], tol: float = 1e-10, max_iter: int = 100,
           expired: Callable[[], bool] | None = None, mu: np.ndarray | None = None,
           log_pairs: bool | None = None, arrays: _Arrays | None = None, cold: bool = False,
           plain_off_path: bool = True) -> NewtonResult:
    """Regularised semismooth Newton on ``Φ = 0`` (module docstring) from ``(x, λ)``; ``ok`` when
    :func:`scaled_residual` ``≤ tol``. By default the pairs are in log form; where that does not certify
    (seen with binding budgets: the log form stalls at the start point) and time is left, the f/σ^f form
    is tried from the same start and the best end point is returned. Above ``SUPPORT_SCALE_ABOVE``, and
    in a game with an external resource, each form is tried with the rows scaled from the support first,
    then with the bound scales; where none certifies, the first of them once more with the adaptive
    regularisation (``ADAPTIVE_LAST``, module docstring). ``cold``: the start is far from any solution
    (the sharing-incentive point); on a game of at least ``SMOOTH_PAIRS`` pairs a smoothed attempt comes
    first (module docstring); ``plain_off_path=False``: where it fails without ever cutting ``ε``, the
    plain attempts do not follow (the caller has another route). ``arrays``: the game's, if already
    built."""
    a = _Arrays(game) if arrays is None else arrays
    support = bool(a.game.alpha.max() > SUPPORT_SCALE_ABOVE
                   or any(kind.startswith("external") for kind, _ in a.coupling))
    forms = [True, False] if log_pairs is None and LOG_PAIRS else [bool(log_pairs)]
    # (pair form, row scales from the support): the support scales first above SUPPORT_SCALE_ABOVE, and
    # where they do not certify, the bound scales from the same start (module docstring); then the
    # f/σ^f form the same way (a binding budget needed it with the bound scales: 12 x 4, plain)
    attempts = [(f, s, 0.0, False) for f in forms for s in ([True, False] if support else [False])]
    if ADAPTIVE_LAST:
        attempts.append((*attempts[0][:3], True))
    if cold and a.np_ >= SMOOTH_PAIRS and a.lex is None:  # (not with leximin servers: module docstring)
        attempts = [(attempts[0][0], attempts[0][1], SMOOTH0, False), *attempts]
    best, total = None, 0
    for log_form, from_support, smooth, adaptive in attempts:
        r = _newton(a, x, lam, tol, max_iter, expired, mu, log_form, from_support, smooth, adaptive=adaptive)
        total += r.iterations
        if best is None or r.ok or r.residual < best.residual:
            best = r
        if r.ok or (expired is not None and expired()):
            break
        if smooth and not r.cuts and not plain_off_path:  # never near its central path: the caller's route
            break
    return replace(best, iterations=total)


# Newton's trial points can be wild (at α = 8 a user holding almost nothing has a marginal that overflows
# to inf); every step checks its numbers are finite (the linear system's inputs and solution, the line
# search's merit), so numpy's warnings about them would only be noise on stderr
@np.errstate(over="ignore", divide="ignore", invalid="ignore")
def _newton(a: _Arrays, x: np.ndarray, lam: list[np.ndarray], tol: float, max_iter: int,
            expired: Callable[[], bool] | None, mu: np.ndarray | None, log_pairs: bool,
            support: bool = False, smooth: float = 0.0, adaptive: bool = False) -> NewtonResult:
    xp, lv = a.pack(x, lam, mu)
    eps = smooth  # the smoothing: φ_ε(u, v) = √(u² + v² + 2ε²) − u − v, zero where u v = ε²
    cut, cut_at, cuts = SMOOTH_CUT, 0, 0
    X0 = a.totals(xp)
    if (X0 <= 0).any():
        xp = xp + 1e-3 * (X0[a.pn] <= 0)  # every user must hold something: g' is infinite at 0
        X0 = a.totals(xp)
    f, sl, m, h = a.f(xp, lv)
    sx = X0[a.pn]
    sf = m.copy()
    sl_ = a.lam_scale(m)
    if support:  # σ^λ (module docstring)
        sl_ = np.clip(np.maximum(lv, 0.0), a.support_scale(xp, m, sl_), sl_)
    else:
        sl_ = np.where((lv > 0) & (lv < ROW_SCALE_GAP * sl_), lv, sl_)
    sc = a.cap_scale

    def side(f: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pair's second side ``v`` and ``dv/dρ``, ``ρ = (Dλ)/m``: ``f/σ^f`` (``log_pairs`` off), else
        ``log ρ`` (linear below ``RHO0``), the same sign as ``f``."""
        if not log_pairs:
            return f / sf, sf
        rho = (f + m) / m
        low = rho < RHO0
        with np.errstate(divide="ignore", invalid="ignore"):
            if not low.any():  # (the lines below with every ρ at or above ρ0)
                return np.log(rho), rho
            v = np.where(low, LOG_RHO0 + (rho - RHO0) / RHO0, np.log(np.where(low, 1.0, rho)))
        return v, np.where(low, RHO0, rho)

    def phi(xp: np.ndarray, lv: np.ndarray, parts: tuple | None = None) -> tuple[np.ndarray, tuple]:
        f, sl, m, h = a.f(xp, lv) if parts is None else parts
        u, v = xp / sx, side(f, m)[0]
        p, q = lv / sl_, sl / sc
        return np.concatenate([_fb(u, v, eps), _fb(p, q, eps)]), (f, sl, m, h)

    F, (f, sl, m, h) = phi(xp, lv)
    norm = float(np.linalg.norm(F))
    npr = a.np_
    it = 0
    res = _residual(a, xp, lv, f, sl, m)
    message = ""
    recent = [norm]  # a non-monotone line search (Grippo–Lampariello–Lucidi): the last NONMONOTONE norms
    best = (res, xp, lv)
    trace = [norm]
    lm = 1.0  # the regularisation's factor (adaptive: raised after a short step, lowered after a full one)
    extra = 0  # once certified, a few more steps towards FINE (round-off may stop them: no matter)
    while True:
        if res <= FINE or (res <= tol and extra >= 5):
            break
        if res <= tol:
            extra += 1
        if it >= max_iter:
            message = f"Newton: {max_iter} iterations, residual {res:.1e}"
            break
        if expired is not None and expired():
            message = "time limit"
            break
        it += 1
        a.linearize(lv)
        mu = lm * min(1e-3, max(norm / np.sqrt(len(F)), MU_FLOOR))
        u, (v, drho) = xp / sx, side(f, m)
        r = _fb_norm(u, v, eps)
        with np.errstate(invalid="ignore", divide="ignore"):
            ap = np.where(r > 0, 1 - u / r, 1.0) + mu  # −∂φ/∂u, regularised
            bp = np.where(r > 0, 1 - v / r, 1.0)
        pl, ql = lv / sl_, sl / sc
        rl = _fb_norm(pl, ql, eps)
        with np.errstate(invalid="ignore", divide="ignore"):
            al = np.where(rl > 0, 1 - pl / rl, 1.0) + mu
            bl = np.where(rl > 0, 1 - ql / rl, 1.0)
        phx, phl = F[:npr], F[npr:]
        # pairs: ap Δx/sx + bp Δv = φ with Δv = (D Δλ)/(m ρ̂) + (ρ/ρ̂)(h/m) ΔX (log form, ρ̂ = max(ρ, ρ0);
        # f/σ^f: Δv = (D Δλ + h ΔX)/σ^f)  ⇒  Δx = w φ − q_D ∘ D Δλ − q_H ∘ h ΔX
        w = sx / ap
        if log_pairs:
            qv = w * bp / (m * drho)
            qh = qv * (f + m) / m
        else:
            qv = qh = w * bp / sf
        wphi = w * phx
        # rows: al Δλ/sλ − bl (Dᵀ Δx)/c = φ;  users: ΔX = Σ Δx
        rhs_l = phl + (bl / sc) * (a.DT @ wphi)
        rhs_X = a.E @ wphi
        sol = a.solve(al / sl_, bl / sc, qv, qh * h, rhs_l, rhs_X)
        if sol is None or not np.isfinite(sol[0]).all() or not np.isfinite(sol[1]).all():
            message = "Newton: singular system"
            break
        dl, dX = sol
        dx = wphi - qv * (a.D @ dl) - qh * h * dX[a.pn]
        X = a.totals(xp)
        t = 1.0
        while t > 1e-10:
            if expired is not None and t < 0.5 and expired():
                t = 0.0
                break
            xn, ln = xp + t * dx, lv + t * dl
            Xn = a.totals(xn)
            if (Xn >= 0.05 * X).all():
                Fn, parts = phi(xn, ln)
                with np.errstate(over="ignore", invalid="ignore"):  # a wild trial point: nn = inf, rejected
                    nn = float(np.linalg.norm(Fn))
                if np.isfinite(nn) and nn <= (1 - 1e-4 * t) * max(recent):
                    break
            t *= 0.5
        else:
            message = f"Newton: line search failed at residual {res:.1e}"
            break  # (after the certificate: round-off, the point is kept)
        if t == 0.0:
            message = "time limit"
            break
        if log.isEnabledFor(logging.DEBUG):
            log.debug("newton it %d: |Phi| %.3e -> %.3e, step %.1e, mu %.1e, support %d, saturated %d",
                      it, norm, nn, t, mu, int((xp / sx > side(f, m)[0]).sum()),
                      int((lv / sl_ > sl / sc).sum()))
        if adaptive:
            lm = min(10 * lm, ADAPT_MAX) if t < ADAPT_BELOW else max(1.0, lm / 10) if t == 1.0 else lm
        xp, lv, F, norm = xn, ln, Fn, nn
        trace.append(norm)
        if len(trace) > STALL and min(trace[-STALL:]) > 0.5 * min(trace[:-STALL]):
            message = f"Newton: stalled ({STALL} iterations without halving ‖Φ‖), residual {res:.1e}"
            break
        recent = [*recent, norm][-NONMONOTONE:]
        f, sl, m, h = parts
        if eps > 0 and float(np.abs(F).max()) <= SMOOTH_NEAR * eps:  # near the smoothed path: ε down
            # a slow re-centring after the last cut: a milder cut; a quick one: a stronger cut
            took, cut_at = it - cut_at, it
            cut = min(0.7, cut ** 0.5) if took > 10 else max(0.05, cut * cut) if took <= 3 else cut
            eps = eps * cut if eps * cut >= SMOOTH_END else 0.0
            cuts += 1
            F, _ = phi(xp, lv, parts)
            norm = float(np.linalg.norm(F))
            recent, trace = [norm], [norm]
            if log.isEnabledFor(logging.DEBUG):
                log.debug("newton smoothing: eps %.1e", eps)
        res = _residual(a, xp, lv, f, sl, m)
        if res <= tol and ((xp < 0).any() or (lv < 0).any()):
            # what is returned is the point clipped to x, λ ≥ 0: certify that one (a pair at x = −1e-9
            # that wants more passes the unclipped check and fails at x = 0)
            xc, lc = np.maximum(xp, 0.0), np.maximum(lv, 0.0)
            if (a.totals(xc) > 0).all():
                clip_parts = a.f(xc, lc)
                fc, slc, mc, _ = clip_parts
                clipped = _residual(a, xc, lc, fc, slc, mc)
                res = max(res, clipped)
                if clipped > tol:
                    # ... and go on from there: a multiplier at −1e-18 that Newton's own scale sees as
                    # 0 can be 10⁻⁸ of a small user's marginal at large α (20 x 4, α ≈ 19); from the
                    # clipped point Newton's step keeps such a λ (or x) at exactly 0
                    xp, lv = xc, lc
                    F, parts = phi(xp, lv, clip_parts)
                    norm = float(np.linalg.norm(F))
                    f, sl, m, h = parts
                    recent, trace = [norm], [norm]
        if res < best[0]:
            best = (res, xp, lv)
        if best[0] <= tol:
            recent = [norm]  # certified: monotone from here
    # the best point seen; the solution is in the x ≥ 0, λ ≥ 0 orthant, round-off may leave −1e-17
    _, xp, lv = best
    xp, lv = np.maximum(xp, 0.0), np.maximum(lv, 0.0)
    res = _packed_residual(a, xp, lv)
    x, lam, mu = a.unpack(xp, lv)
    ok = res <= tol
    return NewtonResult(x, lam, ok, it, res, "" if ok else (message or "not converged"), mu, cuts)


_Point = tuple[float, np.ndarray, list[np.ndarray]]  # (t, x, λ) of a certified point of the path


def _predict(before: _Point, last: _Point, tn: float,
             rescale: Callable[[float, float, list[np.ndarray]], list[np.ndarray]]
             ) -> tuple[np.ndarray, list[np.ndarray]]:
    """The secant prediction at ``tn`` through two certified points ``(t, x, λ)`` of the path (``λ`` in
    the utility scale of its own game; the result in ``tn``'s): each user's total and each positive
    multiplier extrapolated geometrically, by at most a factor 2 resp. 10³, each user's split kept."""
    (t0, x0, l0), (t1, x1, l1) = before, last
    s = (tn - t1) / (t1 - t0)
    X0, X1 = x0.sum(axis=1), x1.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        grow = np.where((X0 > 0) & (X1 > 0), X1 / X0, 1.0)
    x = x1 * np.clip(grow**s, 0.5, 2.0)[:, None]
    lam = []
    for a, b in zip(rescale(t0, t1, l0), l1):
        lam.append(_secant(a, b, s))
    return x, rescale(t1, tn, lam)


def _recentred(a: _Arrays, x: np.ndarray, lam: list[np.ndarray], mu: np.ndarray | None,
               rounds: int | None = None) -> np.ndarray | None:
    """The coupling rows' multipliers ``μ`` (task limits, budgets, external resources) moved to a start
    ``(x, λ)`` in another game of the path: each positive ``μ_j`` scaled so that, over the pairs in the
    support (``x_{n,i} > 10⁻⁶ X_n``) whose price it enters, the median of ``ρ_p = (Dλ)_p/m_p`` with the
    other prices kept is 1 (``rounds`` Jacobi passes, since a user's pair can carry two such rows;
    ``RECENTRE_ROUNDS`` unless given, read at each call; 0 keeps ``μ``). The servers' rows' ``λ``
    follow the path in each game's utility scale (``rescale``), but ``μ`` is in the servers' own units
    of ``g_i``, in which the marginals move with ``α`` by ``(A_i/s̃)^{Δα}``: kept as it was, an
    external resource's ``μ_e`` priced the pairs of 154 of 200 users at ``ρ ≈ 0.2`` after a step from
    ``α = 6.7`` to ``7.0`` (200 × 32 ``mixed``), and Newton spent 400 iterations without certifying the
    step; from the recentred ``μ``, 35 (docs/mechanisms/apf-vds.md). Rows of leximin servers
    (``external-leximin``) carry levels and are kept."""
    rounds = RECENTRE_ROUNDS if rounds is None else rounds
    if mu is None or not len(mu) or not rounds:
        return mu
    xp, lv = a.pack(x, lam, mu)
    X = a.totals(xp)
    held = xp > 1e-6 * X[a.pn]
    cols = a.D.tocsc()
    shared = [a.ns + j for j, (kind, _) in enumerate(a.coupling)
              if kind in ("tasks", "budget", "external") and lv[a.ns + j] > 0]
    for _ in range(rounds if shared else 0):
        f, _, m, _ = a.f(xp, lv)
        scale = np.ones(len(lv))
        for j in shared:
            p = cols.indices[cols.indptr[j]:cols.indptr[j + 1]]
            q = cols.data[cols.indptr[j]:cols.indptr[j + 1]] * lv[j]
            use = held[p] & (q > 0) & np.isfinite(m[p])
            # the factor on μ_j that makes pair p's price its marginal: (m − other prices)/q, the other
            # prices being f + m − q
            need = 1.0 - f[p][use] / q[use]
            need = need[need > 0]
            if len(need):
                scale[j] = float(np.median(need))
        lv = lv * scale
    return a.unpack(xp, lv)[2]


def _secant(a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    """Multipliers ``b`` moved on geometrically by ``s`` steps of ``a → b`` (where both are positive), by at
    most a factor 10³."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.where((a > 0) & (b > 0), b / a, 1.0)
        return b * np.clip(q**s, 1e-3, 1e3)


def _rescued(game: ApfGame, trial: NewtonResult,
             rescue: Callable[..., tuple[np.ndarray, list[np.ndarray]]] | None, tol: float, max_iter: int,
             expired: Callable[[], bool] | None, arrays: _Arrays | None = None, more: tuple[int, ...] = ()
             ) -> tuple[NewtonResult, bool]:
    """Where ``trial`` is not certified and time is left: Newton once more from ``rescue``'s new start;
    the better of the two (its iterations added) and whether the second certified. ``more``: where that
    does not certify either, further rescues of these many sweeps, each going on from the last one's
    swept point (not from Newton's end point), with Newton after each."""
    if trial.ok or rescue is None or (expired is not None and expired()):
        return trial, False
    x, lam = trial.x, trial.lam
    for sweeps in (None, *more):
        if sweeps is not None and expired is not None and expired():
            break
        x, lam = rescue(game, x, lam) if sweeps is None else rescue(game, x, lam, sweeps=sweeps)
        again = newton(game, x, lam, tol, max_iter=max_iter, expired=expired, mu=trial.mu, arrays=arrays)
        if again.ok or again.residual < trial.residual:
            trial = replace(again, iterations=trial.iterations + again.iterations)
        if again.ok:
            return trial, True
    return trial, False


def continuation(make_game: Callable[[float], ApfGame], x0: np.ndarray, lam0: list[np.ndarray],
                 rescale: Callable[[float, float, list[np.ndarray]], list[np.ndarray]],
                 tol: float = 1e-10, expired: Callable[[], bool] | None = None, progress: Any = None,
                 max_steps: int = 200, max_iter: int = 60, first_step: float = 1.0,
                 mu0: np.ndarray | None = None, cold: bool = False,
                 rescue: Callable[[ApfGame, np.ndarray, list[np.ndarray]],
                                  tuple[np.ndarray, list[np.ndarray]]] | None = None
                 ) -> tuple[NewtonResult, list[dict[str, Any]]]:
    """Newton along the path ``t ∈ [0, 1]`` of games ``make_game(t)`` from ``(x0, λ0)`` (a solution, or a
    start, at ``t = 0``). ``rescale(t_old, t_new, λ)`` maps multipliers between the games' utility
    scales. ``rescue(game, x, λ)``: a new start ``(x, λ)`` from the end point of a step Newton did not
    certify (the first game at ``t = 0`` too), from which Newton runs once more before the step is halved
    (:func:`_rescued`). ``cold``: ``x0`` is far from any solution (:func:`newton`). Returns the last
    result (at ``t = 1`` if ``ok``) and the path taken."""
    history: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    g0 = make_game(0.0)
    res = newton(g0, x0, lam0, tol, max_iter=4 * max_iter, expired=expired, mu=mu0, cold=cold)
    lex = g0.leximin is not None and bool(g0.leximin.any())
    res, rescued = _rescued(g0, res, rescue, tol, 4 * max_iter, expired,
                            more=FIRST_GAME_SWEEPS if lex else ())
    history.append({"t": 0.0, "iterations": res.iterations, "residual": res.residual, "ok": res.ok,
                    **({"rescued": True} if rescued else {})})
    if not res.ok:
        return res, history
    t, step = 0.0, first_step
    leaps: list[float] = []  # pending leaps past a point where small steps fail
    leapt_from = -1.0
    restarts = 0
    certified = [(0.0, res.x, res.lam)]  # the path's last two certified points: the secant prediction
    while t < 1.0 and len(history) < max_steps:
        if expired is not None and expired():
            res.ok, res.message = False, "time limit"
            break
        tn = leaps.pop(0) if leaps else min(1.0, t + step)
        game = make_game(tn)
        arrays = _Arrays(game)  # built once for the step: the guard below and Newton
        x, lam = res.x, rescale(t, tn, res.lam)
        if len(certified) >= 2:
            xs, ls = _predict(certified[-2], certified[-1], tn, rescale)
            if (scaled_residual(game, xs, ls, res.mu, arrays)
                    < scaled_residual(game, x, lam, res.mu, arrays)):
                x, lam = xs, ls
        mu = _recentred(arrays, x, lam, res.mu)
        trial = newton(game, x, lam, tol, max_iter=max_iter, expired=expired,
                       mu=mu, arrays=arrays)  # μ is in the servers' own (unscaled) units
        trial, rescued = _rescued(game, trial, rescue, tol, max_iter, expired, arrays)
        history.append({"t": tn, "iterations": trial.iterations, "residual": trial.residual,
                        "ok": trial.ok, **({"rescued": True} if rescued else {})})
        log.info("apf-vds newton continuation: t = %.4f %s in %d iterations (residual %.1e, %.1f s)", tn,
                 "certified after the rescue" if rescued else "certified" if trial.ok else "not certified",
                 trial.iterations, trial.residual, time.perf_counter() - t0)
        if trial.ok:
            if progress is not None:
                progress.update(tn - t)
            if leaps or tn - t > 2 * step:  # a leap landed: go on from there at a moderate step
                step, leaps = min(step * 4, tn - t), []
            t, res = tn, trial
            certified = [*certified[-1:], (tn, trial.x, trial.lam)]
            if trial.iterations <= 30:
                step = min(1.0, 2 * step)
        elif leaps:
            continue
        else:
            step = min(step, tn - t) / 2
            if step < LEAP_BELOW and leapt_from != t:
                # the path of solutions can have kinks (a pair entering or leaving a support) where
                # Newton from the nearby certified point fails at every small step while a larger one
                # lands past the kink (measured at 200 x 32: α = 8 → 8.05 failed, 8 → 9 certified)
                leapt_from = t
                leaps = [min(1.0, t + f * (1.0 - t)) for f in LEAP_FRACTIONS]
                continue
            if step < 1e-4:
                if restarts < STALL_RESTARTS:  # the step control afresh (STALL_RESTARTS)
                    restarts += 1
                    step, leapt_from, certified = 1.0 - t, -1.0, certified[-1:]
                    history[-1]["restart"] = True
                    continue
                res = NewtonResult(res.x, res.lam, False, trial.iterations, trial.residual,
                                   f"continuation stalled at t = {t:.4f} ({trial.message})", res.mu)
                break
    if t < 1.0 and res.ok:
        res = NewtonResult(res.x, res.lam, False, res.iterations, res.residual,
                           f"continuation ended at t = {t:.4f} of 1", res.mu)
    history[-1]["seconds"] = time.perf_counter() - t0
    return res, history
