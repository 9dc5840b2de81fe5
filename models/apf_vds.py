r"""αPF-VDS — α-proportional fairness on virtual dominant shares ([APF] §3–5).

Every server ``i`` maximises its own utility of the weighted VDS ``s̃_{n,i} = X_n/(φ_n γ_{n,i})`` over its own
allocation, given the other servers' (Problem 1, (12)–(15); time-shared servers: Problem 2, (17)–(21)):

.. math::

    \max_{x_{\cdot,i}}\ U_i = \sum_{n \in N_i} \phi_n\, g_i\!\Big(\frac{X_n}{\phi_n\gamma_{n,i}}\Big)
    \quad\text{s.t.}\quad \sum_{n\in N_i} x_{n,i} d_{n,r} \le c_{i,r}\ \ \forall r, \qquad x_{n,i} \ge 0,

    g_i'(z) = (A_i/z)^{\alpha_i} + B_i/z
    \qquad \text{((22); default } A_i = 1, B_i = 0\text{: } g'(z) = z^{-\alpha}).

The allocation is a Nash equilibrium of this concave game, i.e. a solution of the NCP (28)–(31):

.. math::

    0 \le \lambda_{i,r} \perp c_{i,r} - \sum_n x_{n,i} d_{n,r} \ge 0, \qquad
    0 \le x_{n,i} \perp \sum_r \lambda_{i,r} d_{n,r} - \frac{g_i'(\tilde s_{n,i})}{\gamma_{n,i}} \ge 0 .

α = 1 (A = 1, B = 0) is weighted proportional fairness — the same point as ``mnw`` ([APF] Thm 2; demands
are server-independent in the capacity form, and on time-shared servers the NCP is MNW's KKT system too);
α → ∞ approaches PS-DSF (Thm 2), and with a bottleneck resource at every server, or on time-shared
servers, every α gives PS-DSF (Thms 4–5). ``alpha`` may be one value, ``inf`` (PS-DSF), or one value per
server ("servers with heterogeneous objectives", §3.4).

``-p algorithm=...``:

``newton`` (default)
    A semismooth Newton method on the NCP (:mod:`~fairalloc.models._apf_newton`): the Fischer–Burmeister
    form ((35)) of every pair on scaled sides; ``f_{n,i}`` (31) depends on ``x`` only through ``X_n``, so
    the pair unknowns are eliminated and each step solves a sparse system in ``(Δλ, ΔX)`` (#rows + #users)
    by LU, Levenberg–Marquardt-regularised where the split is not unique; a non-monotone Armijo search on
    ``‖Φ‖``; Newton at the target from the sharing-incentive point (41) first, and where that does not
    certify α-continuation from weighted proportional fairness (α = 1, A = 1, B = 0, from the same
    point) to the target ``(α_i, A_i, B_i)``. Certified by the dimensionless residual
    ``details["ncp_residual_scaled"]`` (:func:`~fairalloc.models._apf_newton.scaled_residual`) ``≤ tol``
    (default 1e-8); otherwise ``ncp`` runs instead (``details["newton"]["fallback"]``). Task limits and
    budgets: the variational equilibrium (below); ``alpha=inf`` at every server is PS-DSF, solved by
    mechanism ``ps-dsf`` (``fast``); a mix of finite and ``inf`` entries is solved here too, the
    ``inf`` servers' pairs being PS-DSF's leximin conditions (:mod:`~fairalloc.models._apf_newton`,
    leximin pairs; task limits and budgets included), and ``customize`` hooks keep the ``ncp`` route.
    The certified point's split is replaced by the canonical one (:func:`_canonical_split`).
``ncp``
    :func:`build` is the NCP as a Pyomo model — ``x[n,i] ⊥ f[n,i]`` and ``λ[i,r] ⊥ slack[i,r]`` as
    ``pyomo.mpec`` ``Complementarity`` components over χ (:mod:`~fairalloc.models.feasible`), with
    ``u[n] = X[n] ≥ ε`` so ``g'`` is never evaluated at 0 — the model to print and edit. It is solved by
    Ipopt through :class:`~fairalloc.models._mpec.ScholtesRelaxation` (``mpec.simple_nonlinear``,
    ``x·f ≤ τ`` for ``τ = 10⁻² … 10⁻⁹, 0``, warm started), from the sharing-incentive point ([APF] (41)).
``best-response``
    Gauss–Seidel sweeps: each server solves its own concave problem (12)–(15) exactly, by Newton's method
    on its dual (:class:`NumpyBestResponse`), or by Ipopt where that does not certify and under a
    ``customize`` hook (a persistent model per server, the other servers' tasks as variables pinned by
    their bounds), servers with
    ``α = inf`` compute PS-DSF's leximin response instead (numpy, :class:`NumpyLeximin`); until no
    allocation moves by more than ``tol``. At the sweep cap the point still counts as ``converged``
    when it is certified: the NCP residual at the finite-α servers and, at the ``α = inf`` servers,
    [PSDSF] Thm 1 at ``10⁻⁸`` (``details.certificate``, computed whenever some ``α_i = inf``; a run
    whose sweeps stop without it ends ``error``).
``ps-mfa``
    [APF] Alg. I: projected descent on the merit function Ψ (:func:`~fairalloc.models._apf_ncp.ps_mfa`).
``distributed``
    [APF] §5.2: parallel per-server steps with penalty multipliers (57)
    (:func:`~fairalloc.models._apf_ncp.distributed_heuristic`).

Task limits and budgets (our extension) make it a generalised game (server ``i`` may give user ``n`` at
most ``T_n − Σ_{j≠i} x_{n,j}``, :func:`~fairalloc.models._perserver.coupling_room`), whose equilibria are
not unique. ``newton`` returns the *variational equilibrium*: the limit priced the same on every server,
a shared ``μ_n ≥ 0`` with ``0 ≤ μ_n ⊥ T_n − X_n ≥ 0`` and ``0 ≤ x_{n,i} ⊥ f_{n,i} + μ_n ≥ 0`` (budgets:
``ν_n c_{n,i}``), in each server's own units of ``g_i`` — one of the generalised equilibria (each
server's KKT conditions hold with ``μ_n`` on its coupling row), the canonical one we return;
``details["limit_multipliers"]``, ``details["budget_multipliers"]``. **External resources** likewise:
``e`` is a row of every server in its scope with what the others leave of it
(:func:`~fairalloc.models._perserver.rows_at`), and ``newton`` prices it the same on every server, one
``μ_e ≥ 0`` with ``0 ≤ μ_e ⊥ c_e − Σ_{n, i∈S_e} x_{n,i} d_{n,e} ≥ 0`` and ``+ μ_e d_{n,e}`` in ``f_{n,i}`` for
``i ∈ S_e`` (``details["external_multipliers"]``). At α = 1 every server's marginal utility is
``φ_n/X_n``, the gradient of ``Σ φ_n log X_n``, so this equilibrium is MNW's point (tested). At a server
with ``α_i = inf`` the external resource is one more row of its leximin max, with its own multiplier
``M_{i,e}`` and the pool's slack ([PSDSF] Thm 1 at that server; a shared price entering linearly was not:
the point reached on 3 of 9 small cases failed Thm 1 there). ``best-response`` (and ``ncp``, which
hands such instances to it) returns the fixed point of its sweeps instead — a generalised equilibrium
that depends on the server order, a column bound (or, for an external resource, a row's capacity) per
response. Either way the certificate includes the NCP residual in box form (:func:`pair_bounds`), each
server's external rows at their room, and the gains; ``ps-mfa`` and ``distributed`` reject external
resources. A ``customize`` hook edits the NCP model
(bounded pairs re-posed as ``0 ≤ x ≤ u ⊥ f``, certificate :func:`edited_ncp_residual`) or every
server's NLP.

Every other algorithm's end point is then *polished*: Newton's method on the equations of its active set
(:func:`~fairalloc.models._apf_ncp.polish`; ``polish=false`` turns it off), kept only if it lowers the NCP
residual. The result carries the NCP residual ``max |min(z, F(z))|``, Ψ, the multipliers and every
server's best-response gain (:func:`nash_conditions`), plus the algorithm's trajectory.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import pyomo.environ as pyo
from pyomo.mpec import Complementarity, complements

from fairalloc.errors import ParameterError
from fairalloc.instance import Instance
from fairalloc.models._apf_ncp import ApfGame, distributed_heuristic, ps_mfa
from fairalloc.models._apf_ncp import polish as newton_polish
from fairalloc.models._apf_newton import _Arrays, continuation, coupling_rows, newton, scaled_residual
from fairalloc.models._mpec import ScholtesRelaxation
from fairalloc.models._perserver import (
    ServerRows,
    add_room,
    column_bounds,
    coupled_users,
    coupling_room,
    deviation_from_psdsf,
    expose_all_pairs,
    normalized,
    on_grid,
    require_per_server,
    rows_at,
    server_rows,
    set_room,
    solve_in_name_order,
    with_room,
)
from fairalloc.models._pools import pooled_utility, solve_on_pools
from fairalloc.models.feasible import allocation, feasible_set, uniform_split
from fairalloc.models.psdsf import ServerLeximin, leximin_response
from fairalloc.registry import Param, Solution, as_bool, as_float, as_floats, as_int, choice, mechanism
from fairalloc.solvers import Session
from fairalloc.solvers.outcome import SolveOutcome
from fairalloc.status import Status, worst
from fairalloc.verify.psdsf import psdsf_certificate

__all__ = ["ServerBestResponse", "build", "nash_conditions", "utility_parameters"]

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------- parameters
def _per_server(value: Any, inst: Instance, name: str) -> np.ndarray:
    try:
        vals = as_floats(value)
    except (ValueError, TypeError) as exc:
        raise ParameterError(f"apf-vds: parameter {name}={value!r}: {exc}") from None
    arr = np.asarray(vals if isinstance(vals, list) else [vals] * inst.n_servers, float)
    if arr.shape != (inst.n_servers,):
        raise ParameterError(f"apf-vds: parameter {name}={value!r}: give one value or one per server "
                             f"({inst.n_servers}: {', '.join(inst.servers)})")
    return arr


def utility_parameters(inst: Instance, alpha: Any = 1.0, A: Any = None, B: Any = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(α_i, A_i, B_i)`` per server from scalars, lists or CLI strings (``"3"``, ``"1,2"``, ``"inf"``)."""
    a = _per_server(alpha, inst, "alpha")
    A_ = _per_server(1.0 if A is None else A, inst, "A")
    B_ = _per_server(0.0 if B is None else B, inst, "B")
    if not (a > 0).all():
        raise ParameterError(f"apf-vds: parameter alpha={alpha!r}: must be > 0")
    if not (A_ >= 0).all() or not (B_ >= 0).all() or not np.isfinite(A_).all() or not np.isfinite(B_).all():
        raise ParameterError(f"apf-vds: parameters A={A!r}, B={B!r}: must be finite and >= 0")
    bad = np.isfinite(a) & (A_ == 0) & (B_ == 0)
    if bad.any():
        raise ParameterError(f"apf-vds: A = B = 0 at server {inst.servers[int(np.argmax(bad))]}: "
                             "g' would vanish (give A > 0 or B > 0)")
    return a, A_, B_


def _game(inst: Instance, alpha: np.ndarray, A: np.ndarray, B: np.ndarray,
          scale: np.ndarray | None = None, leximin: bool = False) -> ApfGame:
    """The numpy game; servers with α = inf (PS-DSF) are left out of the NCP, or, with ``leximin``, kept
    with PS-DSF's leximin conditions as their pairs (the Newton method's form, ``ApfGame.leximin``).
    ``scale``: the ``c_i`` when ``A, B`` are those of ``c_i g_i`` (:func:`utility_scale`), so coupling
    multipliers stay shared in the servers' own units."""
    finite = np.isfinite(alpha)
    if leximin and not finite.all():
        return ApfGame(inst, np.where(finite, alpha, 1.0), np.where(finite, A, 1.0), np.where(finite, B, 0.0),
                       scale=scale, leximin=~finite)
    g = ApfGame(inst, np.where(finite, alpha, 1.0), A, B, scale=scale)
    if not finite.all():
        g.P = g.P & finite[None, :]
        g.rows = [r for r in g.rows if finite[r.server]]
    return g


def utility_scale(inst: Instance, alpha: np.ndarray, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``c_i = 1/g_i'(z_i)`` with ``z_i`` the median weighted VDS at server ``i`` at the sharing-incentive
    point ((41)). Server ``i``'s best response is unchanged when its utility is multiplied by ``c_i > 0``
    — so the equilibria are too — while ``c_i g_i'`` is of order one where the solution lives instead of
    ``z^{-α}`` (10¹⁶ at α = 16, z = 0.1). ``c_i g_i'`` is again of the form (22) with
    ``A_i c_i^{1/α_i}`` and ``B_i c_i``; the multipliers scale by ``c_i``."""
    s = uniform_split(inst).sum(axis=1)[:, None] / (inst.weight[:, None] * np.where(
        inst.runnable, inst.gamma, np.nan))
    c = np.ones(inst.n_servers)
    for i in range(inst.n_servers):
        if np.isfinite(alpha[i]) and inst.runnable[:, i].any():
            z = float(np.nanmedian(s[:, i]))
            c[i] = 1.0 / ((A[i] / z) ** alpha[i] + B[i] / z)
    return c


def _scaled(alpha: np.ndarray, A: np.ndarray, B: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    finite = np.isfinite(alpha)
    return (np.where(finite, A * c ** (1.0 / np.where(finite, alpha, 1.0)), A), np.where(finite, B * c, B))


def _floor(inst: Instance) -> np.ndarray:
    """``ε_n``: a lower bound on ``X_n`` far below the sharing-incentive point ((41))."""
    return 1e-6 * inst.si_threshold("apf")


# ---------------------------------------------------------------------- the NCP model
def _row_constraints(chi: pyo.Block, inst: Instance) -> dict[tuple[str, str], Any]:
    if inst.time_shared:
        return {(s, "time"): chi.time[s] for s in chi.time}
    return {(s, r): chi.capacity[s, r] for (s, r) in chi.capacity}


def _coefficient(inst: Instance, n: int, i: int, r: str) -> float:
    """``d_{n,r}`` (capacity form) or ``1/γ_{n,i}`` (the server's time, time-shared form)."""
    if r == "time":
        return 1.0 / float(inst.gamma[n, i])
    return float(inst.demand[n, inst.resources.index(r)])


def build(inst: Instance, alpha: Any = 1.0, A: Any = None, B: Any = None, **_: Any) -> pyo.ConcreteModel:
    """The NCP (28)–(31) as a Pyomo model with ``pyomo.mpec`` complementarity, started at the
    sharing-incentive point ([APF] (41)) with multipliers that make every ``f[n,i] ≥ 0``."""
    require_per_server(inst, "apf-vds")
    a, A_, B_ = utility_parameters(inst, alpha, A, B)
    if not np.isfinite(a).all():
        raise ParameterError("apf-vds: alpha=inf (PS-DSF) has no NCP form; use algorithm=best-response "
                             "or mechanism ps-dsf")
    U, S = inst.users, inst.servers
    uidx, sidx = {u: n for n, u in enumerate(U)}, {s: i for i, s in enumerate(S)}
    m = pyo.ConcreteModel(name=f"apf-vds[{inst.name}]")
    m.chi = chi = feasible_set(inst, task_limits=False)
    m.alpha = pyo.Param(chi.K, mutable=True, initialize=dict(zip(S, a)), doc="α_i of g_i' ((22))")
    m.A = pyo.Param(chi.K, mutable=True, initialize=dict(zip(S, A_)), doc="A_i of g_i' ((22))")
    m.B = pyo.Param(chi.K, mutable=True, initialize=dict(zip(S, B_)), doc="B_i of g_i' ((22))")
    start = uniform_split(inst)
    for (n, i), v in zip(chi.pairs, chi.x.values()):
        v.set_value(float(start[n, i]))
    X0 = start.sum(axis=1)
    eps = _floor(inst)
    m.u = pyo.Var(chi.N, bounds=lambda m, u: (float(eps[uidx[u]]), None),
                  initialize={u: float(X0[n]) for n, u in enumerate(U)},
                  doc="u[n] = X[n], bounded away from 0 where g' is infinite")
    m.define_u = pyo.Constraint(chi.N, rule=lambda m, u: m.u[u] == chi.X[u])
    cons = _row_constraints(chi, inst)
    m.ROWS = pyo.Set(initialize=list(cons), dimen=2, ordered=True, doc="(server, resource) rows of χ")
    rows_at: dict[str, list[str]] = {}
    for s, r in cons:
        rows_at.setdefault(s, []).append(r)
    phig = {(u, s): float(inst.weight[uidx[u]] * inst.gamma[uidx[u], sidx[s]]) for u, s in chi.P}
    m.marginal = pyo.Expression(chi.P, rule=lambda m, u, s: (1.0 / float(inst.gamma[uidx[u], sidx[s]])) * (
        (m.A[s] * phig[u, s] / m.u[u]) ** m.alpha[s] + m.B[s] * phig[u, s] / m.u[u]),
        doc="∂U_i/∂x[n,i] = g_i'(s̃[n,i])/γ[n,i] ((59))")
    m.slack = pyo.Expression(m.ROWS, rule=lambda m, s, r: cons[s, r].upper - cons[s, r].body,
                             doc="f[i,r] = c[i,r] − Σ_n x[n,i] d[n,r] ((30))")
    lam0 = _start_multipliers(inst, start, a, A_, B_)
    m.lam = pyo.Var(m.ROWS, bounds=(0, None), initialize=lam0, doc="λ[i,r] ((28))")
    m.f = pyo.Expression(chi.P, rule=lambda m, u, s: sum(
        _coefficient(inst, uidx[u], sidx[s], r) * m.lam[s, r] for r in rows_at.get(s, [])
        if _coefficient(inst, uidx[u], sidx[s], r) > 0) - m.marginal[u, s],
        doc="f[n,i] = Σ_r λ[i,r] d[n,r] − g_i'(s̃[n,i])/γ[n,i] ((31))")
    m.x_perp_f = Complementarity(chi.P, rule=lambda m, u, s: complements(chi.x[u, s] >= 0, m.f[u, s] >= 0),
                                 doc="0 ≤ x[n,i] ⊥ f[n,i] ≥ 0 ((29))")
    m.lam_perp_slack = Complementarity(m.ROWS, rule=lambda m, s, r: complements(
        m.lam[s, r] >= 0, m.slack[s, r] >= 0), doc="0 ≤ λ[i,r] ⊥ f[i,r] ≥ 0 ((28))")
    for c in cons.values():  # the complementarity carries the capacity rows
        c.deactivate()
    return m


def _start_multipliers(inst: Instance, x: np.ndarray, a: np.ndarray, A: np.ndarray, B: np.ndarray
                       ) -> dict[tuple[str, str], float]:
    """``λ_{i,r} = max_{m: d_{m,r}>0} (g'(s̃_{m,i})/γ_{m,i}) / d_{m,r}`` so that every ``f[n,i] ≥ 0``."""
    game = ApfGame(inst, a, A, B)
    term = game.marginal(x)
    out = {}
    for row in game.rows:
        for k, r in enumerate(row.names):
            d = row.demand[row.users, k]
            use = d > 0
            out[inst.servers[row.server], r] = float((term[row.users[use], row.server] / d[use]).max(
                initial=0.0))
    return out


def _ncp_point(m: pyo.ConcreteModel, inst: Instance, game: ApfGame) -> tuple[np.ndarray, list[np.ndarray]]:
    x = allocation(m.chi, inst)
    lam = []
    for row in game.rows:
        s = inst.servers[row.server]
        lam.append(np.array([max(0.0, m.lam[s, r].value or 0.0) for r in row.names]))
    return x, lam


# ---------------------------------------------------------------------- per-server best responses
class ServerBestResponse:
    """Server ``i``'s problem (12)–(15) (or (18)–(21)) as a persistent Pyomo NLP: ``x[n,i]`` on χ restricted
    to ``i``, the other servers' tasks ``offset[n]`` as variables pinned by their bounds (so a warm Ipopt
    handle re-reads them), ``u[n] = offset[n] + x[n,i] ≥ ε``, objective ``Σ φ_n g_i(u_n/(φ_n γ_{n,i}))``."""

    def __init__(self, inst: Instance, i: int, alpha: float, A: float, B: float) -> None:
        self.inst, self.i = inst, i
        self.users = np.flatnonzero(inst.runnable[:, i])
        s = inst.servers[i]
        names = [inst.users[n] for n in self.users]
        m = pyo.ConcreteModel(name=f"apf-vds[{inst.name}]@{s}")
        m.chi = feasible_set(inst, servers=[i], task_limits=False, budgets=False)
        eps = dict(zip(inst.users, _floor(inst)))
        m.offset = pyo.Var(names, initialize=0.0, doc="Σ_{j≠i} x[n,j] (pinned by its bounds)")
        m.u = pyo.Var(names, bounds=lambda m, u: (float(eps[u]), None), initialize=1.0)
        m.define_u = pyo.Constraint(names, rule=lambda m, u: m.u[u] == m.offset[u] + m.chi.x[u, s])
        phig = {inst.users[n]: float(inst.weight[n] * inst.gamma[n, i]) for n in self.users}
        phi = {inst.users[n]: float(inst.weight[n]) for n in self.users}

        def g(z: Any) -> Any:
            power = A * pyo.log(z) if math.isclose(alpha, 1.0) else A**alpha * z ** (1 - alpha) / (1 - alpha)
            return power + B * pyo.log(z) if B else power

        m.objective = pyo.Objective(expr=sum(phi[u] * g(m.u[u] / phig[u]) for u in names),
                                    sense=pyo.maximize, doc="U_i = Σ φ_n g_i(X_n/(φ_n γ[n,i])) ((12))")
        self.model, self._names, self.handle = m, names, None
        self._x = [m.chi.x[u, s] for u in names]
        self._rows = list(m.chi.capacity.values()) if not inst.time_shared else list(m.chi.time.values())
        self._limited = coupled_users(inst, i, self.users)  # task limits, budgets: per-response bounds
        self.hook_ub: np.ndarray | None = None
        add_room(m, inst)  # an external resource: what the other servers leave, set per response

    def column_ub(self, x: np.ndarray) -> np.ndarray:
        """Upper bounds of server ``i``'s columns given ``x`` elsewhere: the hook's bounds and what task
        limits and budgets leave (``inf`` where none)."""
        ub = np.full(len(self.users), np.inf) if self.hook_ub is None else self.hook_ub.copy()
        if len(self._limited):
            ub[self._limited] = np.minimum(ub[self._limited], coupling_room(self.inst, x, self.i,
                                                                            self.users[self._limited]))
        return ub

    def respond(self, x: np.ndarray, session: Session) -> tuple[np.ndarray, Any]:
        m = self.model
        if self.hook_ub is None:
            if session.customize is not None:
                expose_all_pairs(m, self.inst, self.i)
            session.apply_customize(m)  # the user's edits first: its column bounds are kept below
            self.hook_ub = column_bounds(self._x)
        if len(self._limited):
            for k, ub in zip(self._limited, self.column_ub(x)[self._limited]):
                self._x[k].setub(float(ub))
        set_room(m, self.inst, x, self.i)
        others = x.sum(axis=1) - x[:, self.i]
        for n, u, v in zip(self.users, self._names, self._x):
            m.offset[u].setlb(float(others[n]))
            m.offset[u].setub(float(others[n]))
            m.offset[u].set_value(float(others[n]))
            # (a failed solver's point can hold x < 0: a start value only, kept inside the domain)
            v.set_value(max(0.0, min(float(x[n, self.i]), v.ub if v.ub is not None else math.inf)))
            m.u[u].set_value(max(float(x[n].sum()), m.u[u].lb))
        if self.handle is None:
            # a column bounded by a limit, a budget or the hook: Ipopt's default tolerance leaves such a
            # column μ/z ≈ 1e-5 short of its bound when the user barely wants more there, and the next
            # server then takes the rest (a drift of 1e-5 per sweep); a tight barrier ends at the bound
            bounded = len(self._limited) or session.customize is not None
            self.handle = session.open(m, "nlp", TIGHT if bounded else None)
        else:
            self.handle.update()
        out = session.run(self.handle)
        col = np.zeros(self.inst.n_users)
        if out.has_point:
            col[self.users] = [max(0.0, v.value or 0.0) for v in self._x]
        return col, out

    def multipliers(self) -> np.ndarray | None:
        """``λ_{i,r}`` from the last solve (``d U_i*/d c_{i,r} ≥ 0``), in :func:`server_rows` order."""
        dual = getattr(self.model, "dual", None)
        if dual is None:
            return None
        return np.array([max(0.0, float(dual.get(c, 0.0))) for c in self._rows])


TIGHT = {"tol": 1e-12, "bound_relax_factor": 0.0}


class NumpyLeximin:
    """Server ``i``'s PS-DSF best response (``α_i = inf``) in numpy: the weighted leximin of its users'
    VDS given the other servers, by :func:`~fairalloc.models.psdsf.leximin_response` (the response of
    ``ps-dsf``'s ``fast``; task limits and budgets as column caps). Used instead of the leximin LPs of
    :class:`~fairalloc.models.psdsf.ServerLeximin` unless a ``customize`` hook edits those."""

    def __init__(self, inst: Instance, i: int) -> None:
        self.inst, self.i = inst, i
        row = next(r for r in server_rows(inst) if r.server == i)
        self.users = U = row.users
        self._w = inst.weight[U] * inst.gamma[U, i]
        self.row = row
        self._limited = coupled_users(inst, i, U)
        self.hook_ub = None

    def respond(self, x: np.ndarray, session: Session) -> tuple[np.ndarray, SolveOutcome]:
        return self.column(x), SolveOutcome(status=Status.OPTIMAL, solver="numpy-leximin")

    def column(self, x: np.ndarray) -> np.ndarray:
        """The response to ``x``: server ``i``'s column."""
        U = self.users
        cap = None
        if len(self._limited):
            cap = np.full(len(U), np.inf)
            cap[self._limited] = coupling_room(self.inst, x, self.i, U[self._limited])
        row = with_room(self.inst, x, self.row)  # and the external resources the other servers leave
        col = np.zeros(self.inst.n_users)
        col[U] = leximin_response(self._w, row.demand[U], row.capacity, x[U].sum(axis=1) - x[U, self.i],
                                  cap=cap)
        return col


class NumpyBestResponse:
    """Server ``i``'s best response (finite ``α_i``) by :func:`numpy_best_response`, certified by its
    duality gap; where that does not certify, by Ipopt (:class:`ServerBestResponse`, built on first use).
    Used instead of Ipopt unless a ``customize`` hook edits the Pyomo models. ``row``: the server's
    :class:`ServerRows` if the caller has them (else read from the instance once). ``hold_rows``: the
    column itself is wanted (sweeps), not only its utility (a gain): :func:`numpy_best_response`."""

    def __init__(self, inst: Instance, i: int, alpha: float, A: float, B: float,
                 row: ServerRows | None = None, hold_rows: bool = True) -> None:
        self.inst, self.i, self.params, self.hold_rows = inst, i, (alpha, A, B), hold_rows
        self.row = row if row is not None else server_rows(inst)[i]
        self.users = self.row.users
        self._limited = coupled_users(inst, i, self.users)
        self.ipopt: ServerBestResponse | None = None
        self._lam: np.ndarray | None = None

    def numpy_response(self, x: np.ndarray, prices: np.ndarray | None = None
                       ) -> tuple[np.ndarray, float, float, np.ndarray] | None:
        """:func:`numpy_best_response` to ``x`` within the room task limits, budgets and external resources
        leave, or ``None``; ``λ`` of the server's own rows (``prices``: of its own rows, or of those and
        its external rows, :func:`~fairalloc.models._perserver.rows_at`)."""
        ub = np.full(len(self.users), np.inf)
        if len(self._limited):
            ub[self._limited] = coupling_room(self.inst, x, self.i, self.users[self._limited])
        out = numpy_best_response(self.inst, self.i, *self.params, x, ub, prices=prices,
                                  row=with_room(self.inst, x, self.row), hold_rows=self.hold_rows)
        if out is None or len(out[3]) == len(self.row.capacity):
            return out
        return out[0], out[1], out[2], out[3][:len(self.row.capacity)]

    def respond(self, x: np.ndarray, session: Session, prices: np.ndarray | None = None
                ) -> tuple[np.ndarray, SolveOutcome]:
        """The response to ``x``; ``prices``: a start for the dual (:func:`numpy_best_response`)."""
        fast_br = self.numpy_response(x, prices)
        if fast_br is not None:
            self._lam = fast_br[3]
            return fast_br[0], SolveOutcome(status=Status.OPTIMAL, solver="numpy-dual-newton")
        if self.ipopt is None:
            self.ipopt = ServerBestResponse(self.inst, self.i, *self.params)
        self._lam = None
        return self.ipopt.respond(x, session)

    def multipliers(self) -> np.ndarray | None:
        """``λ_{i,r}`` of the last response (the dual's prices, or Ipopt's), in :func:`server_rows` order."""
        return self.ipopt.multipliers() if self._lam is None and self.ipopt is not None else self._lam


def _make_responders(inst: Instance, alpha: np.ndarray, A: np.ndarray, B: np.ndarray, lp: bool = True,
                     rows: list[ServerRows] | None = None
                     ) -> dict[int, ServerBestResponse | NumpyBestResponse | ServerLeximin | NumpyLeximin]:
    """Each server's best responder: the Pyomo models (Ipopt, leximin LPs) when ``lp`` (a ``customize``
    hook edits them), else numpy (:class:`NumpyBestResponse`, :class:`NumpyLeximin`). ``rows``: the
    servers' :class:`ServerRows` (at least those with a finite ``α``), if the caller has them."""
    out: dict[int, Any] = {}
    row_of = {r.server: r for r in (server_rows(inst) if rows is None else rows)}
    for i in range(inst.n_servers):
        if not inst.runnable[:, i].any():
            continue
        if math.isinf(alpha[i]):
            out[i] = ServerLeximin(inst, i) if lp else NumpyLeximin(inst, i)
        elif lp:
            out[i] = ServerBestResponse(inst, i, float(alpha[i]), float(A[i]), float(B[i]))
        else:
            out[i] = NumpyBestResponse(inst, i, float(alpha[i]), float(A[i]), float(B[i]), row=row_of[i])
    return out


def _start(inst: Instance) -> np.ndarray:
    """The sharing-incentive point ((41)), except that users with a task limit or a budget start at 0:
    the servers, in index order, then give them what their limit or budget allows (a generalised game:
    the equilibrium reached depends on that order, as for PS-DSF's best responses)."""
    x = uniform_split(inst)
    x[np.isfinite(inst.tasks) | np.isfinite(inst.budget_limit)] = 0.0
    return x


def best_response(inst: Instance, session: Session, alpha: np.ndarray, A: np.ndarray, B: np.ndarray,
                  tol: float = 1e-9, max_iter: int = 500
                  ) -> tuple[np.ndarray, Status, dict[str, Any], dict[int, Any]]:
    """Gauss–Seidel sweeps of exact per-server best responses from the sharing-incentive point."""
    # α = inf servers: the numpy leximin (the LPs lost precision at 50 x 8), the LPs under a hook
    responders = _make_responders(inst, alpha, A, B, lp=session.customize is not None)
    kkt, session.kkt = session.kkt, False  # per-sweep KKT residuals cost more than the solves
    try:
        return _sweeps(inst, session, responders, _start(inst), tol, max_iter)
    finally:
        session.kkt = kkt


def _sweeps(inst: Instance, session: Session, responders: dict[int, Any], x: np.ndarray, tol: float,
            max_iter: int) -> tuple[np.ndarray, Status, dict[str, Any], dict[int, Any]]:
    history: list[float] = []
    status = Status.ITERATION_LIMIT
    for sweep in range(1, max_iter + 1):
        start = x.copy()
        for i, resp in responders.items():
            col, out = resp.respond(x, session)
            if not out.status.ok:
                return x, out.status, {"sweeps": sweep, "max_change": history, "message":
                                       f"server {inst.servers[i]}: {out.message}"}, responders
            x[:, i] = col
        change = float(np.abs(x - start).max(initial=0.0))
        history.append(change)
        log.info("apf-vds best response: sweep %d, largest change %.3g", sweep, change)
        if change <= tol * max(1.0, float(x.max(initial=0.0))):
            status = Status.CONVERGED
            break
        if session.expired():
            status = Status.TIME_LIMIT
            break
    info: dict[str, Any] = {"sweeps": len(history), "max_change": history}
    if not status.ok and history:
        info["message"] = (f"best responses stopped ({status.value}) after {len(history)} sweeps, largest "
                           f"change in the last {history[-1]:.1e}")
    return x, status, info, responders


GAP = 1e-11  # numpy_best_response: the largest relative duality gap accepted (else Ipopt answers)
FEASIBLE = 1e-10  # ... and its rows' use within this much of their capacity where priced (stopping rule)
FEASIBLE_ITER = 20  # ... sought for at most this many iterations once the gap is closed
LOG_STEP_ABOVE = 8.0  # ... and above this α, Newton's step in log prices is tried first (the docstring)


class _ServerUtility:
    """``g`` of (22) for one server (``α``, ``A``, ``B`` scalars): value, derivatives and ``g'^{-1}``.
    Where ``z`` is so small that a power overflows (at α = 8 and A = 1, ``z < 10⁻³⁸·⁵``) the value is
    the limit, ``±inf``: the callers test for it, and run under ``np.errstate`` (:func:`numpy_best_response`,
    its only user: one ``errstate`` per response, not one per evaluation — a response makes hundreds)."""

    def __init__(self, alpha: float, A: float, B: float) -> None:
        self.a, self.A, self.B = alpha, A, B
        self.log = math.isclose(alpha, 1.0)

    def g(self, z: np.ndarray) -> np.ndarray:
        a, A = self.a, self.A
        power = A * np.log(z) if self.log else A**a * z ** (1 - a) / (1 - a)
        return power + self.B * np.log(z)

    def gp(self, z: np.ndarray) -> np.ndarray:
        return (self.A / z) ** self.a + self.B / z

    def gpp(self, z: np.ndarray) -> np.ndarray:
        return -(self.a * (self.A / z) ** self.a + self.B / z) / z

    def inverse(self, y: np.ndarray) -> np.ndarray:
        """``z`` with ``g'(z) = y > 0``: closed form for one term, else Newton on ``log z`` inside the
        bracket ``[max(A y^{-1/α}, B/y), max(A (y/2)^{-1/α}, 2B/y)]`` (``g'`` is decreasing)."""
        a, A, B = self.a, self.A, self.B
        if B == 0:
            return A * y ** (-1.0 / a)
        if A == 0:
            return B / y
        lo = np.log(np.maximum(A * y ** (-1.0 / a), B / y))
        hi = np.log(np.maximum(A * (y / 2) ** (-1.0 / a), 2 * B / y))
        t = 0.5 * (lo + hi)
        for _ in range(100):
            z = np.exp(t)
            F = np.log(self.gp(z)) - np.log(y)  # decreasing in t
            done = np.abs(F) <= 4e-16
            if done.all():
                break
            lo, hi = np.where(F > 0, t, lo), np.where(F > 0, hi, t)
            step = t - F / (self.gpp(z) * z / self.gp(z))
            t = np.where(done, t, np.where((step > lo) & (step < hi), step, 0.5 * (lo + hi)))
        return np.exp(t)


def _use(col: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``Σ_n col_n d_n`` with a user that wants an unbounded amount (``col_n = inf``) counted only on the
    rows it needs (``inf · 0`` as 0; under :func:`numpy_best_response`'s ``errstate``)."""
    return (np.where(d > 0, col[:, None], 0.0) * d).sum(axis=0)


def _coordinate_sweep(lam: np.ndarray, rows: np.ndarray, grad: Callable[[np.ndarray], np.ndarray],
                      scale: np.ndarray) -> np.ndarray:
    """One sweep of exact minimisation of a convex function of prices ``λ ≥ 0`` along each coordinate of
    ``rows`` in turn, from its gradient ``grad``: the root of the increasing ``∂_r`` in ``λ_r``,
    bracketed by doubling or halving ``λ_r`` (from ``scale_r`` where ``λ_r = 0``), then bisected in
    ``log λ_r`` until ``|∂_r|`` is 10⁻³ of its start — steps in each price's own scale, whatever the
    others' are (the caller's Newton steps finish)."""
    lam = lam.copy()
    for r in rows:
        def g(v: float, r: int = r) -> float:
            trial = lam.copy()
            trial[r] = v
            return float(grad(trial)[r])

        g0 = g(lam[r])
        if not g0 < 0 and not (g0 > 0 and lam[r] > 0):
            continue  # at its minimum (or at 0 with room, or undefined)
        if g0 < 0:  # over-full: the price rises
            lo, hi = lam[r], (2.0 * lam[r] if lam[r] > 0 else scale[r])
            if not hi > 0:
                continue
            bracketed = False
            for _ in range(200):
                if g(hi) >= 0:
                    bracketed = True
                    break
                if hi > 1e300:  # doubling again would overflow (seen at α = 8, decades apart)
                    break
                lo, hi = hi, 2.0 * hi
            if not bracketed:
                lam[r] = hi
                continue
        else:  # room left at a positive price: it falls
            lo, hi = 0.5 * lam[r], lam[r]
            for _ in range(200):
                if g(lo) <= 0:
                    break
                lo, hi = 0.5 * lo, lo
            else:
                lam[r] = 0.0
                continue
        best = (abs(g0), lam[r])
        for _ in range(100):  # until ∂_r is 10⁻³ of where it started, or the bracket is at round-off
            if hi - lo <= 1e-13 * hi:
                break
            mid = math.sqrt(lo) * math.sqrt(hi) if lo > 0 else 0.5 * hi  # (lo·hi overflows above ~1e154)
            gm = g(mid)
            best = min(best, (abs(gm), mid))
            if abs(gm) <= 1e-3 * abs(g0):
                break
            if gm < 0:
                lo = mid
            else:
                hi = mid
        lam[r] = best[1]
    return lam


@np.errstate(over="ignore", divide="ignore", invalid="ignore")  # one for the response (its trial points)
def numpy_best_response(inst: Instance, i: int, alpha: float, A: float, B: float, x: np.ndarray,
                        ub: np.ndarray | None = None, max_iter: int = 200, prices: np.ndarray | None = None,
                        row: ServerRows | None = None, hold_rows: bool = True
                        ) -> tuple[np.ndarray, float, float, np.ndarray] | None:
    r"""Server ``i``'s exact best response (12)–(15) given the other servers' tasks, by Newton's method on
    its dual (a problem in one price per row of the server): ``(column, U_i at it, dual bound, λ)``, or
    ``None`` if it did not converge (the caller then uses Ipopt, :class:`ServerBestResponse`).

    For prices ``λ ≥ 0`` on the server's rows user ``n`` takes
    ``x_n(λ) = clip(φ_n γ_{n,i} g'^{-1}(γ_{n,i} λ·d_n) − o_n, 0, ub_n)`` (``o_n = Σ_{j≠i} x_{n,j}``, ``ub``
    the room task limits and budgets leave); the dual ``Φ(λ) = Σ_n φ_n g(s̃_n(λ)) − Σ_n (λ·d_n) x_n(λ) +
    λ·c`` is convex with gradient ``c − Σ_n x_n(λ) d_n`` and Hessian ``Σ_n φ_nγ_{n,i}²/|g''| d_n d_nᵀ`` over
    the users strictly inside their bounds; projected Newton with an Armijo search on ``Φ``, its system
    scaled to a unit diagonal (the rows' prices can be 10¹⁴ apart) — above ``α = LOG_STEP_ABOVE``, where
    the rows are priced, first Newton's step on ``log use_r = log c_r`` in ``log λ_r`` (kept where ``Φ``
    falls by Armijo's rule; exact for a single user's ``use ∝ λ^(-1/α)``, where the step in ``λ``
    overshoots: at α = 16 a row used 10 % below capacity has a price 5.4 times too high, and the step
    takes it to −1.8 times itself) — and where a step is not usable, one
    sweep of exact minimisation along each price (:func:`_coordinate_sweep`). It stops once the gap is
    closed and, with ``hold_rows`` (the column itself is wanted, not only its utility), the priced rows
    are held to ``FEASIBLE`` (the gap alone leaves the columns of users with large VDS loose). The column
    is ``x(λ*)`` scaled onto the rows if it is a hair outside; ``U_i(column) ≤ max U_i ≤ Φ(λ*)``, so the
    gap between the last two numbers bounds the error of a gain computed from either. ``A``, ``B``: the
    server's own (utility-scaled or not: the argmax is the same). ``prices``: a start for ``λ`` in the same
    units (an equilibrium's multipliers make the check of an equilibrium immediate); else the largest
    marginal utility per unit of each row at ``x``. ``row``: server ``i``'s :class:`ServerRows` (else
    read from the instance)."""
    rows = row if row is not None else server_rows(inst)[i]
    U = rows.users
    if not len(U):
        return np.zeros(inst.n_users), 0.0, 0.0, np.zeros(len(rows.capacity))
    u = _ServerUtility(alpha, A, B)
    d, c = rows.demand[U], rows.capacity
    gam = inst.gamma[U, i]
    phi = inst.weight[U]
    phig = phi * gam
    x = np.asarray(x, float)
    o = x[U].sum(axis=1) - x[U, i]
    cap = np.full(len(U), np.inf) if ub is None else np.asarray(ub, float)
    if (d <= 0).all(axis=1).any():
        return None  # a user that needs none of the server's rows: its best response is unbounded

    def primal(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = d @ lam  # (a trial price past 1e308 gives inf: the dual is then inf)
        want = np.where(p > 0, phig * u.inverse(np.where(p > 0, gam * p, 1.0)) - o, np.inf)
        col = np.minimum(np.maximum(want, 0.0), cap)  # (np.clip's, without its dispatch)
        return col, p, want

    def dual(lam: np.ndarray) -> float:
        col, p, _ = primal(lam)
        if not (np.isfinite(col).all() and np.isfinite(p).all()):
            return np.inf
        return float(np.sum(phi * u.g((o + col) / phig)) - p @ col + lam @ c)

    def feasible(col: np.ndarray) -> tuple[np.ndarray, float]:
        """``col = x(λ)`` scaled onto the rows if it is a hair outside, and ``U_i`` there."""
        use = col @ d
        over = np.max(np.where(use > 0, use / np.maximum(c, 1e-300), 0.0), initial=0.0)
        col = col / max(1.0, over)
        return col, float(np.sum(phi * u.g((o + col) / phig)))

    def projected(lam: np.ndarray, grad: np.ndarray) -> np.ndarray:
        return np.where((lam <= 0) & (grad >= 0), 0.0, grad)

    z0 = x[U].sum(axis=1) / phig
    # users without any task yet (limits start at 0) value the first one infinitely, and so, to the
    # precision of a float, do users with too few (at α = 8 and A = 1, z below 10⁻³⁸·⁵: Newton's trial
    # points); both start from the median user's marginal (an infinite price made every later one NaN)
    held = z0 > 0
    held[held] = np.isfinite(u.gp(z0[held]))
    z0 = np.where(held, z0, float(np.median(z0[held])) if held.any() else 1.0)
    m0 = u.gp(z0) / gam
    lam = np.where(d > 0, m0[:, None] / np.where(d > 0, d, 1.0), 0.0).max(axis=0)
    lam0 = lam.copy()  # each row's scale for a price at 0 that must rise
    val = dual(lam)
    if prices is not None and len(prices) < len(lam):  # the own rows' prices; the external rows' as above
        prices = np.concatenate([np.asarray(prices, float), lam[len(prices):]])
    if prices is not None and len(prices) == len(lam) and (np.asarray(prices) >= 0).all():
        given = np.asarray(prices, float)
        given_val = dual(given)
        if given_val < val:
            lam, val = given, given_val
    extra = 0
    for _ in range(max_iter):
        col, _, want = primal(lam)
        # (``col @ d`` gives NaN where a user wants unboundedly many tasks; the sweep below counts such a
        # user on its own rows only, :func:`_use`. Kept as measured: the forms agree for finite columns)
        grad = c - col @ d
        if np.isfinite(val) and np.isfinite(col).all():
            low = feasible(col)[1]
            # the gap bounds the utility's error, not the column's: users of large VDS add next to nothing
            # to U_i, so their tasks can be 10⁻³ off at a gap of 10⁻¹³; the rows are held too, for at
            # most FEASIBLE_ITER more iterations (prices 10⁻¹⁸ of another row's may not get there)
            if val - low <= 0.1 * GAP * max(1.0, abs(low)):
                held = (np.abs(projected(lam, grad)) <= FEASIBLE * np.maximum(c, 1e-300)).all()
                if not hold_rows or held or extra >= FEASIBLE_ITER:
                    break
                extra += 1
        fixed = (lam <= 0) & (grad >= 0)
        free = (want > 0) & (want < cap)
        z = (o + col) / phig
        w = np.where(free, phig * gam / np.abs(u.gpp(z)), 0.0)
        H = (d * w[:, None]).T @ d
        F = ~fixed
        step = np.full_like(lam, np.nan)
        # Newton over the rows with curvature; a price that no user strictly inside its bounds depends on
        # (Φ linear in it) and whose row is not at its kink goes to the sweep below first
        flat = F & (np.diag(H) <= 0)
        F &= ~flat
        kinked = bool((flat & (np.abs(grad) > 1e-12 * np.maximum(c, 1e-300))).any())
        Hf = H[np.ix_(F, F)]
        dg = np.diag(Hf).copy()
        if F.any():
            # Newton's step with Hf scaled to a unit diagonal: the rows' prices and curvatures can be
            # orders of magnitude apart (an external row's room of 3 % next to the server's own rows:
            # curvature 10⁻⁴ against 10¹⁰), and a regularisation relative to the trace swamped the small
            # ones, so their prices crawled for the 200 iterations
            s = 1.0 / np.sqrt(dg)
            Hs = s[:, None] * Hf * s[None, :]
            Hs[np.diag_indices_from(Hs)] += 1e-12
            try:  # (an inf step is not newton_ok below)
                step[F] = s * np.linalg.solve(Hs, -s * grad[F])
            except np.linalg.LinAlgError:
                pass
        step[~F] = 0.0
        newton_ok = (np.isfinite(step).all() and step @ grad < 0
                     and not (np.abs(step) > 1e3 * np.maximum(lam, lam0)).any())
        gnorm = float(np.linalg.norm(projected(lam, grad)))
        found = False
        use = c - grad
        if (alpha > LOG_STEP_ABOVE and F.any() and not kinked and (lam[F] > 0).all() and (use[F] > 0).all()
                and (c[F] > 0).all()):
            # Newton on log use_r(λ) = log c_r in log λ_r: exact for a user's use ∝ λ^(-1/α), where the step
            # in λ overshoots (at α = 16, use 10 % short: the step takes the price to −1.8 times itself)
            try:
                dmu = np.linalg.solve(Hf * lam[F][None, :], use[F] * np.log(use[F] / c[F]))
            except np.linalg.LinAlgError:
                dmu = None
            if dmu is not None and np.isfinite(dmu).all():
                new = lam.copy()
                new[F] = lam[F] * np.exp(np.clip(dmu, -50.0, 50.0))
                nv = dual(new)
                found = bool(nv < val and nv <= val - 1e-4 * abs(grad @ (new - lam)))
        t = 1.0
        while newton_ok and not kinked and not found and t > 1e-12:
            new = np.maximum(lam + t * step, 0.0)
            nv = dual(new)
            if nv <= val - 1e-4 * abs(grad @ (new - lam)):
                found = True
                break
            # near λ* Φ is flat to round-off while the gap is first order in the gradient: there a
            # step that lowers the projected gradient is taken
            if nv <= val + 1e-13 * max(1.0, abs(val)) and np.isfinite(nv):
                g_new = c - primal(new)[0] @ d
                if np.linalg.norm(projected(new, g_new)) < (1 - 1e-4 * t) * gnorm:
                    found = True
                    break
            t *= 0.5
        if not found:
            # no usable curvature (a row that no user strictly inside its bounds needs: Φ is linear in
            # its price there), a wild step, or a Newton step the search cannot use (prices orders of
            # magnitude apart: an external row's room of 3 % next to the server's own rows): one sweep
            # of exact minimisation along each price in turn, in the price's own scale
            new = _coordinate_sweep(lam, np.flatnonzero(~fixed), lambda v: c - _use(primal(v)[0], d), lam0)
            nv = dual(new)
            # accepted where Φ falls, or stays within round-off (prices 10⁻¹⁴ of another row's move Φ by
            # less than its round-off, and their rows are still over-full) while the gradient shrinks
            found = bool(nv < val) or bool(nv <= val + 1e-13 * max(1.0, abs(val)) and np.linalg.norm(
                projected(new, c - _use(primal(new)[0], d))) < gnorm)
        if not found:
            break  # no more progress: judged below
        lam, val = new, nv
    col = primal(lam)[0]
    if not np.isfinite(col).all():
        return None
    col, primal_value = feasible(col)
    bound = dual(lam)
    if not np.isfinite(bound) or bound - primal_value > GAP * max(1.0, abs(primal_value)):
        return None
    out = np.zeros(inst.n_users)
    out[U] = col
    return out, primal_value, bound, lam


# ---------------------------------------------------------------------- Nash conditions
def best_response_gains(inst: Instance, x: np.ndarray, alpha: np.ndarray, A: np.ndarray, B: np.ndarray,
                        session: Session | None = None, responders: dict[int, Any] | None = None,
                        prices: dict[int, np.ndarray] | None = None) -> dict[str, float | None]:
    """``U_i(BR_i(x_{−i}), x_{−i}) − U_i(x)`` for every server with finite ``α_i``: the exact best response by
    Newton's method on the server's dual (:func:`numpy_best_response`; its duality gap at most ``GAP``
    relative) or, under a ``customize`` hook or where that does not converge, by Ipopt; scaled onto
    server ``i``'s rows if left a hair outside, so the gain is never flattered by an infeasible point.
    ``None`` for ``α_i = inf`` servers, failed solves, and servers not reached before ``session``'s
    time limit (a diagnostic: it never holds the result past the limit). ``prices``: multipliers per
    server (the user's ``g``; :func:`server_rows` order) to start the numpy route from."""
    session = session or Session()
    game = ApfGame(inst, np.where(np.isfinite(alpha), alpha, 1.0), A, B)
    c = utility_scale(inst, alpha, A, B)
    As, Bs = _scaled(alpha, A, B, c)  # same argmax, tame numbers
    rows = {r.server: r for r in server_rows(inst)}
    base = game.utility(x)
    x = np.asarray(x, float)
    gains: dict[str, float | None] = {}
    for i in range(inst.n_servers):
        s = inst.servers[i]
        if not inst.runnable[:, i].any():
            gains[s] = 0.0
            continue
        if math.isinf(alpha[i]) or session.expired():
            gains[s] = None
            continue
        if session.customize is None:  # numpy (the hook edits the Pyomo model of the Ipopt route)
            start = None if prices is None or i not in prices else c[i] * np.asarray(prices[i], float)
            fast = NumpyBestResponse(inst, i, float(alpha[i]), float(As[i]), float(Bs[i]), row=rows[i],
                                     hold_rows=False)  # a gain needs the utility: the gap certifies it
            col, out = fast.respond(x, session, prices=start)
        else:
            resp = (responders or {}).get(i)
            if not isinstance(resp, ServerBestResponse):
                resp = ServerBestResponse(inst, i, float(alpha[i]), float(As[i]), float(Bs[i]))
            col, out = resp.respond(x, session)
        if not out.has_point:
            gains[s] = None
            continue
        row = with_room(inst, x, rows[i])
        use = row.usage(col)
        scale = float(np.min(np.where(use > 0, row.capacity / np.where(use > 0, use, 1.0), np.inf),
                             initial=np.inf))
        y = x.copy()
        y[:, i] = col * min(1.0, scale)
        gains[s] = max(0.0, float(game.utility(y)[i] - base[i]))
    return gains


def pair_bounds(inst: Instance, x: np.ndarray, bounds: np.ndarray | None = None) -> np.ndarray | None:
    """Every pair's upper bound at ``x``: ``bounds`` (an edited model's) and what task limits and budgets
    leave it given the other servers; ``None`` when there are none."""
    if bounds is None and not (inst.has_task_limits or inst.has_budgets):
        return None
    ub = np.full(x.shape, np.inf) if bounds is None else np.array(bounds, float)
    for i in range(inst.n_servers):
        users = np.flatnonzero(inst.runnable[:, i])
        lim = users[coupled_users(inst, i, users)]
        if len(lim):
            ub[lim, i] = np.minimum(ub[lim, i], coupling_room(inst, x, i, lim))
    return ub


def nash_conditions(inst: Instance, x: np.ndarray, alpha: Any = 1.0, A: Any = None, B: Any = None,
                    lam: list[np.ndarray] | None = None, session: Session | None = None,
                    gains: bool = True, bounds: np.ndarray | None = None,
                    witness: dict[str, float] | None = None) -> dict[str, Any]:
    r"""The Nash-equilibrium conditions of αPF-VDS at ``x`` (docs/verification.md):

    - ``ncp_residual``: ``max |min(z, F(z))|`` over (28)–(29), with the multipliers ``lam`` if given, else
      the ones that best certify ``x`` (:meth:`ApfGame.multipliers`);
    - ``ncp_residual_scaled``: the same terms made dimensionless (``ApfGame.residual(scaled=True)``, the
      Newton method's certificate) — unchanged when the units of tasks, resources or utility change;
    - ``psi``: the merit ``Ψ(x, λ)`` of (35)–(37);
    - ``per_server_gain``: each server's best-response gain (``None`` where ``α_i = inf``);
    - ``best_response_gain``: the largest of them;
    - ``relative_gain``: the largest ``gain_i / Σ_{n∈N_i} φ_n s̃_{n,i} g_i'(s̃_{n,i})``. The denominator is
      ``dU_i/dt`` when every user's total is scaled by ``1 + t``, so a relative gain ``ε`` is what server
      ``i`` would get, to first order, from every total growing by ``1 + ε`` — free of units, unlike the
      gain itself (``U_i`` scales with the units for ``α_i ≠ 1``).

    ``alpha``, ``A``, ``B`` as for the mechanism (one value, ``"inf"``, or one per server). Servers with
    ``α_i = inf`` are left out of the residual and Ψ (PS-DSF has no NCP; check its certificate).

    Task limits and budgets bound each pair by what the other servers leave it
    (:func:`~fairalloc.models._perserver.coupling_room`); ``bounds`` (users × servers) adds an edited
    model's column bounds. A pair at its bound then counts in the residual in box form (``f < 0`` allowed).
    An external resource is a row of every server in its scope, with the capacity the others leave
    (:func:`~fairalloc.models._perserver.rows_at`): each server's own KKT conditions in the generalised
    game (``lam`` then lists those rows' multipliers after the server's own, or is recomputed).

    ``witness``: multipliers keyed ``"server,row"`` (a result's ``details.multipliers``), used instead of
    the fit where they certify ``x`` with a smaller scaled residual. The fit looks only at rows within
    1e-6 of full; at α = 8 with demands six decades apart Newton's certificate held (1e-11) with a
    multiplier, negligible on its row's scale, that keeps a user of tiny marginal per unit off a row
    with room, and the fit then reported 1.0 while every server's best-response gain was 0.
    """
    require_per_server(inst, "apf-vds", allow_limits=True, allow_external=True)
    a, A_, B_ = utility_parameters(inst, alpha, A, B)
    x = np.asarray(x, float)
    game = _game(inst, a, A_, B_)
    game.rows = rows_at(inst, x, game.rows)  # external resources: each server's room at x
    if lam is not None and [len(li) for li in lam] != [len(r.capacity) for r in game.rows]:
        lam = None
    ub = pair_bounds(inst, x, bounds)
    if lam is None:
        lam = game.multipliers(x, ub=ub, retry=True)
        if witness:  # a result's own multipliers ("server,row"), where they certify x better than the fit
            given = [np.array([witness.get(f"{inst.servers[r.server]},{name}", np.nan) for name in r.names],
                              float) for r in game.rows]
            if all(np.isfinite(li).all() and (li >= 0).all() for li in given) and (
                    game.residual(x, given, ub, scaled=True) < game.residual(x, lam, ub, scaled=True)):
                lam = given
    out: dict[str, Any] = {"ncp_residual": game.residual(x, lam, ub),
                           "ncp_residual_scaled": game.residual(x, lam, ub, scaled=True),
                           "psi": game.psi(x, lam),
                           "multipliers": {f"{inst.servers[r.server]},{name}": float(v)
                                           for r, li in zip(game.rows, lam) for name, v in zip(r.names, li)}}
    if gains:
        per = best_response_gains(inst, x, a, A_, B_, session,
                                  prices={r.server: li for r, li in zip(game.rows, lam)})
        known = [g for g in per.values() if g is not None]
        out["best_response_gain"] = max(known) if known else None
        out["per_server_gain"] = per
        s = game.vds(x)
        unit = np.where(game.P, inst.weight[:, None] * s * game.g_prime(s), 0.0).sum(axis=0)
        rel = [g / unit[i] if unit[i] > 0 else (0.0 if g == 0 else math.inf)
               for i, g in enumerate(per.values()) if g is not None]
        out["relative_gain"] = max(rel) if rel else None
        if session is not None and session.expired():
            out["gains_note"] = ("the time limit ended the best-response gains: servers not reached "
                                 "have None")
    else:
        out["best_response_gain"], out["per_server_gain"], out["relative_gain"] = None, {}, None
    return out


# ---------------------------------------------------------------------- mechanism
PARAMS = [
    Param("alpha", as_floats, 1.0, "α of g'(z) = (A/z)^α + B/z: one value, inf (PS-DSF), or one per server"),
    Param("A", as_floats, 1.0, "A_i of (22): one value or one per server"),
    Param("B", as_floats, 0.0, "B_i of (22): one value or one per server"),
    Param("algorithm", choice("newton", "ncp", "best-response", "ps-mfa", "distributed"), "newton",
          "newton (semismooth Newton at the target, α-continuation where that fails; falls back to ncp "
          "if not certified), ncp (Pyomo MPEC by Ipopt), best-response (Gauss–Seidel), ps-mfa "
          "([APF] Alg. I) or distributed ([APF] (55)-(57))"),
    Param("tol", as_float, 0.0, "stopping tolerance (0: the algorithm's default — newton: scaled NCP "
          "residual 1e-8; best-response: relative change 1e-9; ps-mfa: merit 1e-16; distributed: Ψ 1e-12)",
          lambda v: None if v >= 0 else "must be >= 0"),
    Param("max_iter", as_int, 0, "iteration cap (0: the algorithm's default)",
          lambda v: None if v >= 0 else "must be >= 0"),
    Param("epsilon", as_float, 0.1, "distributed: penalty width ε = epsilon·c of (57)",
          lambda v: None if v > 0 else "must be > 0"),
    Param("kappa", as_float, 1.0, "distributed: step κ_i = kappa / (local curvature bound)",
          lambda v: None if v > 0 else "must be > 0"),
    Param("polish", as_bool, True, "finish with Newton's method on the active set of the NCP"),
    Param("gains", as_bool, True, "solve every server's best response at the result to report its gain"),
    Param("pool", as_bool, True, "solve each group of identical servers (same α, A, B) as one server and "
          "split it evenly (exact with A_p = A·m^((1−α)/α), models/_pools.py; not with task limits, "
          "budgets or external resources); false: the full game"),
]


def _recheck(alpha: Any, A: Any, B: Any) -> Any:
    """The even split of a pooled solution, certified on every server of the full instance: its NCP
    residual (box form where limits or budgets bound pairs) and, where every α_i is finite, the scaled one
    (≤ 1e-8). Gains are those of the pooled game (``details.pooled``)."""

    def recheck(inst: Instance, x: np.ndarray, pooled: Solution) -> tuple[Status, str, dict[str, Any]]:
        a, A_, B_ = utility_parameters(inst, alpha, A, B)
        game = _game(inst, a, A_, B_)
        lam = game.multipliers(x, retry=True)
        details: dict[str, Any] = {"algorithm": pooled.details.get("algorithm"), "alpha": a.tolist(),
                                   "A": A_.tolist(), "B": B_.tolist(),
                                   "ncp_residual": game.residual(x, lam, pair_bounds(inst, x))}
        status, message = pooled.status, pooled.message
        if np.isfinite(a).all():
            details["ncp_residual_scaled"] = res = scaled_residual(game, x, lam)
            if status.ok and not res <= 1e-8:
                status = worst(status, Status.ERROR)
                message = f"the even split of the pooled solution has scaled NCP residual {res:.1e} > 1e-8"
        return status, message, details

    return recheck

LIMITS_HINT = "only algorithm=best-response (or newton/ncp, which then use it) supports task limits"
BUDGET_HINT = "only algorithm=best-response (or newton/ncp, which then use it) supports budgets"
# Pyomo NCP + relaxation + NL file + CasADi function, measured 1.4 s at 400 pairs, 5.9 s at 1600; the
# fallback runs only with 4 times this left (Ipopt's iterations come on top)
NCP_SETUP_SECONDS_PER_PAIR = 4e-3


def _ncp_setup_seconds(inst: Instance) -> float:
    """About how long building the Pyomo NCP, its NL file and CasADi function takes (uninterruptible)."""
    return NCP_SETUP_SECONDS_PER_PAIR * int(inst.runnable.sum())


# the significant bits of the numbers Newton's path runs on (_solve_newton): 36 moves each by at most
# 1.5e-11 of itself. On 36 small instances (6 × 3, four families, α = 0.5, 2, 3) the largest certificate
# on the input was 4.6e-11 with it, 1.1e-9 with 32 bits (PS-DSF's grid), 2.9e-12 unrounded (52)
GRID_BITS = 36
# the Newton steps on the input's own game after the path (_solve_newton) are not kept where the path's
# point certifies on the input and they move some user's total by more than this many times the point's
# scaled residual there (relative). Restatement sweeps, decades apart (30 x 8 x 4 seeds 804-805; 30 x 8
# seeds 804, 805, 808; 100 x 16 x 4 seed 807; 377 runs whose steps lowered the residual): at most 50
# times, 12 on all but one; seed 808 scoped at α = 8 (30 x 8 x 4): 1 100 and 2 200 times (1.1e-7 and
# 2.1e-7 from a point at 9.9e-11), and the two statements had ended 1.1e-7 apart
ON_INPUT_GAIN = 100.0
POLISH_FROM_TAU = 1e-4  # the Scholtes loop hands its relaxed points to the polish from this τ on
DIRECT_FIRST = True  # Newton at the target from the sharing-incentive point before the continuation
DEFAULT_ITER = {"best-response": 500, "ps-mfa": 5_000, "distributed": 100_000, "newton": 150}
DEFAULT_TOL = {"best-response": 1e-9, "ps-mfa": 1e-16, "distributed": 1e-12, "newton": 1e-8}
ROUTES_WITH_LIMITS = ("newton", "ncp", "best-response")
EXTERNAL_HINT = ("only algorithm=newton or best-response (ncp hands it to best-response), without a "
                 "customize hook, supports external resources; or use tsf-er, cru or mnw")


def _coupled(inst: Instance) -> bool:
    """Task limits, budgets or external resources: rows coupling the servers (a generalised game)."""
    return bool(inst.has_task_limits or inst.has_budgets or inst.external)


@mechanism("apf-vds", problem="nlp", build=build, needs_demands=False, params=PARAMS,
           reference="[APF] §3–5, (12)–(15), (22), (28)–(31), Alg. I, (55)–(57)",
           summary="αPF-VDS: Nash equilibrium of per-server α-fair utilities of VDS (NCP, semismooth Newton)")
def solve(inst: Instance, session: Session, alpha: Any = 1.0, A: Any = 1.0, B: Any = 0.0,
          algorithm: str = "newton", tol: float = 0.0, max_iter: int = 0, epsilon: float = 0.1,
          kappa: float = 1.0, polish: bool = True, gains: bool = True, pool: bool = True) -> Solution:
    """Identical servers with the same ``(α_i, A_i, B_i)`` are solved as one (``pool``,
    :mod:`~fairalloc.models._pools`). Solved in normalised units
    (:func:`~fairalloc.models._perserver.normalized`: each resource in its largest capacity, each user's
    task in its best ``γ``), the same game with every number near 1; the allocation and the multipliers
    are mapped back. A ``customize`` hook sees the instance's own units. One answer per input: users,
    servers and resources in name order, and Newton's path on the normalised numbers rounded to
    ``GRID_BITS`` significant bits (:func:`_solve_newton`; the canonical split and the certificate on
    the input's own numbers).

    Every ``α_i = inf`` with ``newton`` or ``ncp``: the game is PS-DSF ([APF] Thm 2), solved by mechanism
    ``ps-dsf`` with its ``fast`` algorithm (:func:`_as_psdsf`)."""
    if algorithm in ("newton", "ncp") and np.isinf(utility_parameters(inst, alpha, A, B)[0]).all():
        return _as_psdsf(inst, session, algorithm, pool)
    # one answer per input: solved with users, servers and resources in name order. Where the equilibrium
    # is not unique (external resources at α = 8: distinct certified equilibria) which one Newton's
    # continuation reaches depends on the order it is given; in name order, two statements of 30 × 8 and
    # 100 × 16 instances whose totals had ended 0.2–0.4 % apart agree to 10⁻¹⁴
    a, A_, B_ = utility_parameters(inst, alpha, A, B)
    orders = None if session.customize is not None else inst.name_order()
    if orders is not None:
        servers = orders[1]

        def in_file_order(_inst: Instance, _x: np.ndarray, sol: Solution
                          ) -> tuple[Status, str, dict[str, Any]]:
            # the game is the same with its rows and columns permuted: the certificate holds as computed;
            # the per-server parameters are listed in the file's order again
            return sol.status, sol.message, {"alpha": a.tolist(), "A": A_.tolist(), "B": B_.tolist()}

        ordered = solve_in_name_order(inst, session, solve, in_file_order, alpha=a[servers].tolist(),
                                      A=A_[servers].tolist(), B=B_[servers].tolist(), algorithm=algorithm,
                                      tol=tol, max_iter=max_iter, epsilon=epsilon, kappa=kappa,
                                      polish=polish, gains=gains, pool=pool)
        if ordered is not None:
            return ordered
    # pooled only without task limits, budgets and external resources (the even split's certificate
    # with the shared multipliers of the variational equilibrium is not written yet)
    if pool and session.customize is None and not _coupled(inst):
        def pooled_params(groups: list[list[int]]) -> dict[str, Any]:
            pa, pA, pB = pooled_utility(groups, a, A_, B_)
            return {"alpha": pa.tolist(), "A": pA.tolist(), "B": pB.tolist()}

        pooled = solve_on_pools(inst, session, solve, _recheck(alpha, A, B), keys=np.c_[a, A_, B_],
                                pooled_params=pooled_params, algorithm=algorithm, tol=tol, max_iter=max_iter,
                                epsilon=epsilon, kappa=kappa, polish=polish, gains=gains, pool=False)
        if pooled is not None:
            return pooled
    args = (alpha, A, B, algorithm, tol, max_iter, epsilon, kappa, polish, gains)
    if session.customize is not None:
        return _solve(inst, session, *args)
    require_per_server(inst, "apf-vds", allow_limits=algorithm in ROUTES_WITH_LIMITS,
                       limits_hint=LIMITS_HINT, budget_hint=BUDGET_HINT,
                       allow_external=algorithm in ROUTES_WITH_LIMITS, external_hint=EXTERNAL_HINT)
    norm, k, rho = normalized(inst)
    sol = _solve(norm, session, *args)
    sol.allocation = sol.allocation * k[:, None]
    names = ("time",) if inst.time_shared else inst.resources + inst.external
    unit = dict(zip(names, rho.tolist()))
    if "multipliers" in sol.details:  # λ' of a row in units of ρ_r is ρ_r·λ
        sol.details["multipliers"] = {key: v / unit[key.split(",", 1)[1]]
                                      for key, v in sol.details["multipliers"].items()}
    if "external_multipliers" in sol.details:
        sol.details["external_multipliers"] = {e: v / unit[e]
                                               for e, v in sol.details["external_multipliers"].items()}
    if "limit_multipliers" in sol.details:  # utility per task: a task of the normalised instance is k_n
        kn = dict(zip(inst.users, k.tolist()))
        sol.details["limit_multipliers"] = {u: v / kn[u] for u, v in sol.details["limit_multipliers"].items()}
    sol.details["units"] = {"task": dict(zip(inst.users, k.tolist())), "resource": unit}
    return sol


def _as_psdsf(inst: Instance, session: Session, algorithm: str, pool: bool) -> Solution:
    """Every ``α_i = inf``: PS-DSF itself — mechanism ``ps-dsf``, algorithm ``fast`` (one mechanism, one
    place), its allocation, status and Thm 1 certificate (``details.certificate``), with a note."""
    from fairalloc.models import psdsf

    sol = psdsf.solve(inst, session, algorithm="fast", pool=pool)
    sol.details = {**sol.details, "algorithm": "ps-dsf:fast", "alpha": [math.inf] * inst.n_servers,
                   "psdsf_algorithm": sol.details.get("algorithm"),
                   "note": f"alpha = inf at every server: αPF-VDS is PS-DSF ([APF] Thm 2); solved by "
                           f"mechanism ps-dsf, algorithm=fast (asked: {algorithm}), certified by PS-DSF's "
                           "Thm 1 certificate (details.certificate)"}
    return sol


def leximin_newton(inst: Instance, session: Session) -> Solution:
    """``α = inf`` at every server — PS-DSF ([APF] Thm 2) — solved by the semismooth Newton method
    (:func:`_solve_newton`: every pair a leximin pair), without :func:`solve`'s routing of that game to
    ``ps-dsf``: what mechanism ``ps-dsf`` hands a ``fast`` run to when its sweeps have not converged
    after ``NEWTON_AFTER`` of them (:func:`fairalloc.models.psdsf.fast_then_newton`). ``inst`` as
    that caller has it (in name order, pooled, normalised); no best-response gains (PS-DSF's Thm 1
    certificate is the caller's)."""
    return _solve(inst, session, alpha=math.inf, A=1.0, B=0.0, algorithm="newton", tol=0.0, max_iter=0,
                  epsilon=0.1, kappa=1.0, polish=True, gains=False)


def _solve(inst: Instance, session: Session, alpha: Any, A: Any, B: Any, algorithm: str, tol: float,
           max_iter: int, epsilon: float, kappa: float, polish: bool, gains: bool) -> Solution:
    coupled = _coupled(inst)
    require_per_server(inst, "apf-vds", allow_limits=algorithm in ROUTES_WITH_LIMITS,
                       limits_hint=LIMITS_HINT, budget_hint=BUDGET_HINT,
                       allow_external=algorithm in ROUTES_WITH_LIMITS and session.customize is None,
                       external_hint=EXTERNAL_HINT)
    a, A_, B_ = utility_parameters(inst, alpha, A, B)
    details: dict[str, Any] = {"algorithm": algorithm, "alpha": a.tolist(), "A": A_.tolist(),
                               "B": B_.tolist()}
    if algorithm == "newton" and session.customize is not None:
        # the arrays of the Newton method do not see an edited model: the Pyomo NCP does
        algorithm = details["algorithm"] = "ncp"
        details["note"] = "a customize hook edits the Pyomo NCP: solved by algorithm=ncp"
    if coupled and algorithm == "ncp":  # the Pyomo NCP (28)-(31) has no rows coupling the servers
        algorithm = details["algorithm"] = "best-response"
        details["note"] = ("task limits / budgets couple the servers: solved by best responses, each "
                           "server bounded by what the others leave")
    if not np.isfinite(a).all():
        if algorithm == "newton":
            pass  # the α = inf servers' pairs are PS-DSF's leximin conditions (_apf_newton, leximin pairs)
        elif algorithm == "ncp":  # PS-DSF servers have no NCP; their best response is an LP
            algorithm = details["algorithm"] = "best-response"
            details["note"] = "alpha has inf entries: solved by best responses (PS-DSF leximin there)"
        elif algorithm != "best-response":
            raise ParameterError(f"apf-vds: alpha with inf entries works only with algorithm=newton or "
                                 f"best-response (or ncp, which hands a mix to best-response; every entry "
                                 f"inf is ps-dsf fast), not {algorithm}")
    scale = utility_scale(inst, a, A_, B_)
    As, Bs = _scaled(a, A_, B_, scale)  # the same game, numerically tame (see utility_scale)
    details["utility_scale"] = dict(zip(inst.servers, scale.tolist()))
    game = _game(inst, a, As, Bs, scale)
    cap = max_iter or DEFAULT_ITER.get(algorithm, 0)
    # where newton falls back to best responses, they stop by their own defaults unless these were given
    # (newton's 150 iterations as their sweep cap ended a 400 s run after 150 sweeps, iteration_limit)
    fallback = (tol or DEFAULT_TOL["best-response"], max_iter or DEFAULT_ITER["best-response"])
    tol = tol or DEFAULT_TOL.get(algorithm, 0.0)
    if algorithm in DEFAULT_TOL:  # the stopping tolerance used (newton: the bound on ncp_residual_scaled)
        details["tol"] = tol
    try:
        return _run(inst, session, game, a, A_, B_, As, Bs, scale, algorithm, tol, cap, epsilon, kappa,
                    polish, gains, details, fallback)
    except (np.linalg.LinAlgError, FloatingPointError, ValueError) as exc:
        # numerical breakdown inside an algorithm (e.g. a user's total driven to 0 makes g' infinite):
        # a status, never a traceback or a number dressed as an equilibrium
        log.warning("apf-vds (%s) broke down numerically on %s: %r", algorithm, inst.name, exc)
        return Solution(np.zeros((inst.n_users, inst.n_servers)), Status.ERROR,
                        f"{algorithm}: numerical breakdown ({type(exc).__name__}: {exc}); try "
                        "-p algorithm=best-response", details=details)


def _run(inst: Instance, session: Session, game: ApfGame, a: np.ndarray, A_: np.ndarray, B_: np.ndarray,
         As: np.ndarray, Bs: np.ndarray, scale: np.ndarray, algorithm: str, tol: float, cap: int,
         epsilon: float, kappa: float, polish: bool, gains: bool, details: dict[str, Any],
         fallback: tuple[float, int]) -> Solution:
    """``fallback``: ``(tol, max_iter)`` of the best-response fallback where newton does not certify."""
    tight, bounds = None, None
    # an edited model, task limits or budgets: the arrays of ApfGame (the Newton polish) do not know them
    coupled = _coupled(inst)
    exotic = session.customize is not None or coupled
    mu = None
    mixed = not np.isfinite(a).all()  # some α_i = inf: newton's leximin pairs there
    newton_point = None  # (x, λ, μ, message) where Newton did not certify and a fallback runs
    returned_newton = False  # ... and the best-response fallback returned that point (_closer)

    def newton_multipliers(x: np.ndarray, lam: list[np.ndarray], mu: np.ndarray | None) -> list[np.ndarray]:
        """A Newton point's multipliers for the checks below; with α = inf servers its scaled residual is
        that of the whole system (the leximin pairs too), so it is taken here."""
        full = _game(inst, a, As, Bs, scale, leximin=True) if mixed else game
        if mixed:  # the finite servers' λ go on to the checks below
            details["ncp_residual_scaled"] = scaled_residual(full, x, lam, mu)
            lam = [li for li, r in zip(lam, full.rows) if np.isfinite(a[r.server])]
        if coupled:  # (the coupling rows of the game Newton solved)
            _coupling_details(full, mu, details)
        return lam

    if algorithm == "newton":
        run = _solve_newton(inst, session, a, A_, B_, scale, tol, cap, details)
        if run is None:  # not certified: the Pyomo NCP (best responses if coupled or mixed); why: details
            newton_point = details.pop("_newton_point", None)
            algorithm = details["algorithm"] = "best-response" if coupled or mixed else "ncp"
            if coupled or mixed:
                details["newton"]["fallback"] = details["newton"]["fallback"].replace(
                    "algorithm=ncp", "algorithm=best-response")
                tol, cap = fallback  # the sweeps' own stopping rule, not newton's
                details["newton"]["fallback_stops"] = {"tol": tol, "max_iter": cap}
        else:
            x, lam, mu, status, message = run
            lam = newton_multipliers(x, lam, mu)
    if algorithm == "ncp":
        rem = session.remaining()
        setup = _ncp_setup_seconds(inst)
        if newton_point is None and rem is not None and rem < setup:
            # asked for directly: the model, NL file and CasADi function are built before any limit can
            # stop them (400 x 64 with a 60 s limit was killed 30 s past it while building)
            return Solution(np.zeros((inst.n_users, inst.n_servers)), Status.TIME_LIMIT,
                            f"ncp: building the NCP takes about {setup:.0f} s here, {rem:.0f} s of the time "
                            "limit left; not started", details=details)
        run = _solve_ncp(inst, session, game, a, As, Bs, polish, details)
        if newton_point is not None and (isinstance(run, Solution) or not run[2].ok):
            # the fallback failed or ran out of time: keep whichever point is closer to an equilibrium
            nx, nlam, nmu, nmsg = newton_point
            theirs = math.inf if isinstance(run, Solution) else scaled_residual(game, run[0], run[1])
            if scaled_residual(game, nx, nlam, nmu) <= theirs:
                status = run.status if isinstance(run, Solution) else run[2]
                run = (nx, nlam, status, _newton_returned(details, "ncp", status, nmsg))
        if isinstance(run, Solution):
            return run
        x, lam, status, message = run
    if algorithm in ("newton", "ncp"):
        pass
    elif algorithm == "best-response":
        x, status, info, responders = best_response(inst, session, a, As, Bs, tol, cap)
        message = info.pop("message", "")
        if session.customize is not None:
            bounds = np.full(x.shape, np.inf)
            for i, resp in responders.items():
                if resp.hook_ub is not None:
                    bounds[resp.users, i] = resp.hook_ub
        details.update(info)
        duals = [responders[r.server].multipliers() if r.server in responders else np.zeros(0)
                 for r in game.rows] if np.isfinite(a).all() else []
        lam = duals if duals and all(d is not None and len(d) == len(r.capacity)
                                     for d, r in zip(duals, game.rows)) else None
        if newton_point is not None and not status.ok and _closer(inst, a, A_, B_, newton_point[0], x):
            # the fallback ran out of time or sweeps: Newton's point is nearer an equilibrium (_closer)
            nx, nlam, nmu, nmsg = newton_point
            message = _newton_returned(details, "best-response", status, nmsg)
            returned_newton = True
            x, mu = nx, nmu
            lam = newton_multipliers(nx, nlam, nmu)
            if not mixed:  # (mixed: taken above, with the leximin pairs)
                details["ncp_residual_scaled"] = scaled_residual(game, nx, nlam, nmu)
    elif algorithm == "ps-mfa":
        x, lam, status, traj = ps_mfa(game, uniform_split(inst), tol=tol, max_iter=cap,
                                      expired=session.expired)
        details.update(trajectory=traj, iterations=len(traj))
        message = "" if status.ok else f"PS-MFA stopped ({status.value}) at merit {traj[-1]['merit']:.2e}"
    else:
        x, lam, status, traj = distributed_heuristic(game, uniform_split(inst), epsilon, kappa,
                                                     psi_tol=tol, max_iter=cap, expired=session.expired)
        tight = [li > 0 for li in lam]  # the penalty multipliers (57) say which rows bind
        details.update(trajectory=traj, iterations=traj[-1]["iteration"] if traj else 0)
        message = "" if status.ok else f"distributed heuristic stopped ({status.value}) at Ψ " \
                                       f"{traj[-1]['psi']:.2e}"
    if lam is None:
        lam = game.multipliers(x)
    if algorithm == "ncp" and session.customize is not None:
        bounds = details.pop("_bounds")
    if polish and np.isfinite(a).all() and "polish" not in details and not exotic and algorithm != "newton":
        if session.expired():  # (the polish stops at the deadline too; this skips it outright)
            details["polish"] = {"polished": False, "reason": "time limit reached before the polish"}
        else:
            x, lam, details["polish"] = newton_polish(game, x, lam, tight=tight, expired=session.expired)
    if np.isfinite(a).all() and (not exotic or algorithm == "newton"):  # dimensionless (docs/…/apf-vds.md)
        details["ncp_residual_scaled"] = scaled_residual(game, x, lam, mu)
    lam = [li / scale[r.server] for li, r in zip(lam, game.rows)]  # back to the user's g
    if inst.external and "external_multipliers" in details:  # the shared prices as each server's own
        ext = details["external_multipliers"]
        lam = [np.concatenate([li, [ext.get(e, 0.0) for e in rr.names[len(r.capacity):]]])
               for li, r, rr in zip(lam, game.rows, rows_at(inst, x, game.rows))]
    # an NCP-specific hook (one that edits lam, f, ...) cannot run on the per-server models of the gains
    gains = gains and not (algorithm == "ncp" and session.customize is not None)
    nash = nash_conditions(inst, x, a.tolist(), A_.tolist(), B_.tolist(), lam=lam, session=session,
                           gains=gains, bounds=bounds)
    if algorithm == "ncp" and session.customize is not None:
        # the edited model's own conditions: its complementarity pairs (box form at the hook's column
        # bounds) and any rows the hook added, evaluated on the model
        nash["ncp_residual"] = details["edited_ncp_residual"] = edited_ncp_residual(details.pop("_model"))
    details.update({k: nash[k] for k in ("ncp_residual", "psi", "best_response_gain", "per_server_gain",
                                         "multipliers")})
    details["deviation_from_psdsf"] = dict(zip(inst.users, deviation_from_psdsf(inst, x).tolist()))
    exact = _is_equilibrium(x, nash)
    if not np.isfinite(a).all():  # the PS-DSF servers' part of the certificate: [PSDSF] Thm 1 there
        inf_servers = {inst.servers[i] for i in np.flatnonzero(np.isinf(a))}
        cert = psdsf_certificate(inst, x, tol=1e-8, bounds=bounds)
        fails = [f for f in cert["failures"] if f["server"] in inf_servers]
        details["certificate"] = {"holds": not fails, "servers": sorted(inf_servers), "failures": fails}
        exact = exact and not fails
        if fails and status.ok:  # the sweeps stopped moving short of Thm 1: not an equilibrium
            status = Status.ERROR
            message = (f"{message}; " if message else "") + (
                f"[PSDSF] Thm 1 fails at 1e-8 for {len(fails)} pairs at the alpha = inf servers "
                f"(details.certificate)")
    if algorithm == "newton":
        pass  # certified by the scaled residual (_solve_newton)
    elif algorithm == "ncp":
        if not exact and status is Status.OPTIMAL:
            status = Status.CONVERGED if nash["ncp_residual"] <= 1e-5 * max(1.0, x.max()) else Status.ERROR
            message = f"NCP residual {nash['ncp_residual']:.2e} at the end of the relaxation loop"
        elif not status.ok:
            message = f"{message}; NCP residual {nash['ncp_residual']:.2e} at the returned point"
    elif status is Status.ITERATION_LIMIT and exact and details.get("polish", {}).get("polished"):
        status = Status.CONVERGED
        message = (f"{algorithm} reached its iteration cap; Newton's method on the active set of its last "
                   f"iterate solved the NCP (residual {nash['ncp_residual']:.1e})")
    elif status is Status.ITERATION_LIMIT and exact and algorithm == "best-response" and (
            exotic or not np.isfinite(a).all()) and not returned_newton:
        status = Status.CONVERGED
        gain = nash["best_response_gain"]
        message = (f"best responses reached their iteration cap at an equilibrium: NCP residual (box form) "
                   f"{nash['ncp_residual']:.1e}, largest best-response gain "
                   f"{'-' if gain is None else f'{gain:.1e}'}"
                   + ("; [PSDSF] Thm 1 holds at the alpha = inf servers" if "certificate" in details else ""))
    return Solution(x, status, message, details=details, zero_tol=1e-12)


def _newton_returned(details: dict[str, Any], fallback: str, status: Status, newton_message: str) -> str:
    """Where a fallback ended short of an equilibrium and Newton's nearer point is returned instead:
    ``details.newton.returned`` says so, and the result's message (the fallback's status, Newton's own
    message) is returned."""
    details["newton"]["returned"] = f"newton's point (closer than the {fallback} fallback's)"
    return f"{fallback} fallback ended {status.value}; returned newton's point ({newton_message})"


def _closer(inst: Instance, a: np.ndarray, A: np.ndarray, B: np.ndarray, ours: np.ndarray,
            theirs: np.ndarray) -> bool:
    """Whether the allocation ``ours`` is at least as near an equilibrium as ``theirs``, judged as the
    verification layer judges any allocation: :func:`nash_conditions`' scaled NCP residual with the
    multipliers that best certify each point (task limits and budgets in box form; servers with
    ``α_i = inf`` are not in it — their [PSDSF] Thm 1 is checked on the returned point). Measured on
    200 × 32 `limits` seed 128 (α = 16): Newton stalled at t = 0.987 of its path with time left, and the
    best-response fallback it handed over to ended `time_limit` in the middle of a sweep, at 1.0 by this
    measure; the path's last point has 0.051."""
    def residual(x: np.ndarray) -> float:
        return float(nash_conditions(inst, x, a.tolist(), A.tolist(), B.tolist(), gains=False)
                     ["ncp_residual_scaled"])

    return residual(ours) <= residual(theirs)


def _is_equilibrium(x: np.ndarray, nash: dict[str, Any], tol: float = 1e-8) -> bool:
    gain = nash.get("best_response_gain")
    return bool(nash["ncp_residual"] <= tol * max(1.0, float(x.max(initial=0.0)))
                and (gain is None or gain <= tol))


def _box_complementarity(m: pyo.ConcreteModel, inst: Instance) -> np.ndarray:
    """Re-pose ``x[n,i] ⊥ f[n,i]`` in box form ``lb ≤ x ≤ ub ⊥ f`` for the columns a ``customize`` hook
    bounded (at ``ub`` the server would give more: ``f ≤ 0``), and return the bounds (users × servers)."""
    chi = m.chi
    bounds = np.full((inst.n_users, inst.n_servers), np.inf)
    for (n, i), v in zip(chi.pairs, chi.x.values()):
        if v.ub is not None:
            bounds[n, i] = float(v.ub)

    def pair(m: pyo.ConcreteModel, u: str, s: str) -> Any:
        v = chi.x[u, s]
        lb = 0.0 if v.lb is None else float(v.lb)
        if v.ub is None:
            return complements(v >= lb, m.f[u, s] >= 0)
        return complements(pyo.inequality(lb, v, float(v.ub)), m.f[u, s])

    doc = m.x_perp_f.doc
    m.del_component(m.x_perp_f)
    m.x_perp_f = Complementarity(chi.P, rule=pair, doc=doc)
    return bounds


def edited_ncp_residual(m: pyo.ConcreteModel) -> float:
    """The complementarity residual of an edited NCP model, read off the model: ``|x − clip(x − f, lb,
    ub)|`` for every pair (the box form at the variable's bounds), ``|min(λ, slack)|`` for every row, and
    the violation of every other active row (a row the hook added), relative to ``max(1, |bound|)``."""
    res = 0.0
    for (u, s), v in m.chi.x.items():
        x, f = float(v.value or 0.0), float(pyo.value(m.f[u, s]))
        lb = 0.0 if v.lb is None else float(v.lb)
        ub = math.inf if v.ub is None else float(v.ub)
        res = max(res, abs(x - min(max(x - f, lb), ub)))
    for k, lam in m.lam.items():
        res = max(res, abs(min(float(lam.value or 0.0), float(pyo.value(m.slack[k])))))
    for c in m.component_data_objects(pyo.Constraint, active=True, descend_into=(pyo.Block,)):
        if c.parent_component() is m.define_u:
            continue
        body = float(pyo.value(c.body))
        lo = -math.inf if c.lower is None else float(pyo.value(c.lower))
        hi = math.inf if c.upper is None else float(pyo.value(c.upper))
        res = max(res, (lo - body) / max(1.0, abs(lo)), (body - hi) / max(1.0, abs(hi)))
    return res


RESCUE_SWEEPS = 10  # continuation: best-response sweeps from the end point of a step Newton did not certify


def _sweep_rescue(game: ApfGame, x: np.ndarray, lam: list[np.ndarray], sweeps: int | None = None,
                  expired: Callable[[], bool] | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """``sweeps`` Gauss–Seidel sweeps of ``game``'s exact per-server best responses (numpy only,
    :meth:`NumpyBestResponse.numpy_response`, each server's dual started at its ``λ``) from ``(x, λ)``:
    a new start for Newton where a continuation step failed. A server whose response does not converge
    keeps its column and multipliers. Best responses alone converge slowly here (they hit their caps at
    50 × 8, α = 3), but a few sweeps move the point off the degenerate splits where Newton's system is
    nearly singular (measured at 200 × 32, α = 16: docs/mechanisms/apf-vds.md). A leximin server
    (``game.leximin``, α = inf) gives PS-DSF's leximin response (:class:`NumpyLeximin`) and the inverse
    levels of its rows as multipliers. No sweep starts once ``expired()``."""
    x, lam = x.copy(), [np.maximum(li, 0.0) for li in lam]
    lex = np.zeros(game.inst.n_servers, bool) if game.leximin is None else game.leximin
    responders = _make_responders(game.inst, np.where(lex, np.inf, game.alpha), game.A, game.B, lp=False,
                                  rows=game.rows)
    for _ in range(RESCUE_SWEEPS if sweeps is None else sweeps):
        if expired is not None and expired():
            break
        for k, r in enumerate(game.rows):
            if r.server not in responders:
                continue
            if lex[r.server]:
                x[:, r.server] = responders[r.server].column(x)
            elif (out := responders[r.server].numpy_response(x, lam[k] if len(lam[k]) else None)) is not None:
                x[:, r.server], lam[k] = out[0], out[3]
    for k, r in enumerate(game.rows):
        if lex[r.server]:
            lam[k] = game.inverse_levels(x, r)
    return x, lam


def _rescaled(lam: list[np.ndarray], rows: list[ServerRows], c_from: np.ndarray, c_to: np.ndarray
              ) -> list[np.ndarray]:
    """Server rows' multipliers moved from the utility scales ``c_from`` to ``c_to`` (per server)."""
    return [li * c_to[r.server] / c_from[r.server] for li, r in zip(lam, rows)]


def _solve_newton(inst: Instance, session: Session, a: np.ndarray, A: np.ndarray, B: np.ndarray,
                  scale: np.ndarray, tol: float, cap: int, details: dict[str, Any]
                  ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, Status, str] | None:
    """The NCP by the semismooth Newton method of :mod:`~fairalloc.models._apf_newton`: first at the
    target itself from the sharing-incentive point ((41); ``DIRECT_FIRST``); where that does not
    certify, weighted proportional fairness (``α = 1``, ``A = 1``, ``B = 0``) from the same point,
    then continuation to the target — ``α_i(t) = α_i^t``, ``A_i(t) = 1 + t(A_i − 1)``,
    ``B_i(t) = t B_i``, the first step changing no ``α_i`` by more than a factor 4, and half-way
    where that would be the target itself and the direct attempt failed (the target from the α = 1
    point then failed as well on 400 × 64 at α = 0.5 and 1000 × 250 at α = 2 and 3, after 160–380
    iterations; on 200 × 32 limits seed 30 at α = 3 it certified, and the two steps cost 75 iterations
    more) — each game in its own utility scale (:func:`utility_scale`). The direct attempt is first
    because the α = 1 point is a poor start on large instances: its split is one of many (only ``X``
    is unique at α = 1), and at 600 × 120, α = 2 no continuation step from it certified in 200 s,
    where Newton from the sharing-incentive point certified in 181 iterations; at 200 × 32 the two
    took about as many iterations for α ≤ 3, and at α = 8 the direct attempt stalls (85–167
    iterations) and the continuation certifies. Returns ``(x, λ, μ, status, message)`` with
    ``λ`` in the target game's scale and ``μ`` the coupling multipliers (task limits, budgets; the
    servers' own units, :func:`~fairalloc.models._apf_newton.coupling_rows`), or ``None`` (reason in
    ``details["newton"]``) when it is not certified and the session still has time (the caller then runs
    ``ncp``, or ``best-response`` with limits or budgets)."""
    from tqdm.auto import tqdm

    games: dict[float, tuple[ApfGame, np.ndarray]] = {}

    finite = np.isfinite(a)
    exact = inst
    # the path runs on the instance rounded to GRID_BITS significant bits (on_grid; ``inst`` is normalised
    # by the caller), so that two statements of one input in other units take the same path to the same
    # equilibrium where there are several; the canonical split and the certificate are the input's own
    inst = on_grid(inst, GRID_BITS)

    def params(t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.where(finite, a**t, np.inf), 1.0 + t * (A - 1.0), t * B

    def make(t: float) -> ApfGame:
        if t not in games:
            at, At, Bt = params(t)
            c = utility_scale(inst, at, At, Bt)
            games[t] = (_game(inst, at, *_scaled(at, At, Bt, c), c, leximin=True), c)
        return games[t][0]

    def to_exact(lam: list[np.ndarray]) -> list[np.ndarray]:
        """Multipliers of the path's target game in the input's utility scale (``scale``)."""
        return _rescaled(lam, make(1.0).rows, games[1.0][1], scale)

    def rescale(t0: float, t1: float, lam: list[np.ndarray]) -> list[np.ndarray]:
        return _rescaled(lam, make(t1).rows, games[t0][1], games[t1][1])

    start = time.perf_counter()
    x0 = uniform_split(inst)
    g0 = make(0.0)
    # the first step moves α by a factor of at most 4 (each later one doubles or halves)
    spread = float(np.abs(np.log(a[finite])).max(initial=0.0))
    first = 1.0 if spread <= np.log(4.0) else float(np.log(4.0) / spread)
    target_is_start = bool(np.allclose(a[finite], 1.0) and np.allclose(A[finite], 1.0)
                           and np.allclose(B[finite], 0.0))
    direct, tried = None, []
    start_info: dict[str, Any] = {}
    if DIRECT_FIRST and not target_is_start:
        g1 = make(1.0)
        # where a smoothed attempt never nears its central path, the continuation follows at once
        # (_apf_newton's module docstring: measured on the scoped and placement families at 1000 x 250)
        direct = newton(g1, x0, g1.multipliers(x0), tol, max_iter=4 * cap, expired=session.expired,
                        cold=True, plain_off_path=False)
        tried = [{"t": 1.0, "iterations": direct.iterations, "residual": direct.residual, "ok": direct.ok,
                  "direct": True}]
        log.info("apf-vds newton at the target from the sharing-incentive point: %s in %d iterations "
                 "(residual %.1e, %.1f s)", "certified" if direct.ok else "not certified", direct.iterations,
                 direct.residual, time.perf_counter() - start)
    if direct is not None and (direct.ok or session.expired()):
        # certified, or the time is up: its point is the target game's own (residual in the details)
        res, path = direct, tried
    else:
        if direct is not None and first >= 1.0:  # the target failed from one start: not again, half-way
            first = 0.5
        with tqdm(total=1.0, desc="apf-vds newton (α-continuation)", disable=None, leave=False,
                  bar_format="{l_bar}{bar}| t={n:.3f} [{elapsed}]") as bar:
            first_game = g0 if not target_is_start else make(1.0)

            def si() -> tuple[np.ndarray, list[np.ndarray], None]:
                return x0, first_game.multipliers(x0), None

            starts: list[tuple[str, Callable[[], Any]]] = [("sharing-incentive point", si)]
            if not finite.all():  # the path's first game is not convex: two starts (_proportional_start)
                pf = _proportional_start(inst, g0, x0, tol, cap, session, start_info)
                if pf is not None:
                    starts.insert(0, ("alpha = 1 at every server", lambda: pf))
            else:  # the first game is MNW's: its convex program's point where Newton fails (_mnw_start)
                starts.append(("maximum Nash welfare point",
                               lambda: _mnw_start(first_game, session, start_info)))
            path = []
            for k, (label, start_at) in enumerate(starts):
                if (begin := start_at()) is None:
                    continue
                xs, lam0, mu0 = begin
                res, more = continuation(make if not target_is_start else (lambda t: make(1.0)), xs, lam0,
                                         rescale, tol=tol, expired=session.expired, progress=bar,
                                         max_iter=cap, first_step=first, mu0=mu0, cold=start_at is si,
                                         rescue=partial(_sweep_rescue, expired=session.expired)
                                         if RESCUE_SWEEPS else None)
                if k:
                    more[0]["start"] = label
                path += more
                if more[0]["ok"] or session.expired():
                    break
        path = tried + path
    reached = max((h["t"] for h in path if h["ok"]), default=None)
    info = {"iterations": int(sum(h["iterations"] for h in path)) + start_info.get("iterations", 0),
            **({"start": start_info} if start_info else {}), "continuation": path,
            "residual": res.residual, "t_reached": reached, "seconds": time.perf_counter() - start}
    details["newton"] = info
    details["iterations"] = info["iterations"]
    target = _game(exact, a, *_scaled(a, A, B, scale), scale, leximin=True)
    if res.ok:
        arrays = _Arrays(target)  # (built once: 0.8 s at 1000 × 250; the steps, the split and the checks)
        res = replace(res, lam=to_exact(res.lam))
        # the input's own equilibrium next to the path's (its numbers are 1.5e-11 away): a few Newton steps
        # on the input's game towards 1e-13, kept where they bring the residual down (none off the grid)
        if GRID_BITS < 53:
            before = scaled_residual(target, res.x, res.lam, res.mu, arrays)
            near = newton(target, res.x, res.lam, min(tol, 1e-13), max_iter=8, mu=res.mu,
                          expired=session.expired, arrays=arrays)
            X0 = res.x.sum(axis=1)
            moved = float(np.max(np.abs(near.x.sum(axis=1) - X0) / np.maximum(X0, np.finfo(float).tiny),
                                 initial=0.0))
            # ... but not where the path's point certifies on the input already and the steps move some
            # user's total by far more than its residual: the input's game is ill-conditioned there, and
            # where the steps end depends on the statement's last bits (ON_INPUT_GAIN)
            kept = near.residual < before and (before > tol or moved <= ON_INPUT_GAIN * before)
            details["newton"]["on_input"] = {"residual_before": before, "residual": near.residual,
                                             "iterations": near.iterations, "totals_moved": moved,
                                             "kept": kept}
            if kept:
                res = replace(near, ok=near.residual <= tol)
        res, details["canonical"] = _canonical_split(target, res, tol, session, arrays)
        at_input = scaled_residual(target, res.x, res.lam, res.mu, arrays)
        if not at_input <= tol:  # the split kept the path's point: Newton on the input's game from it
            details["canonical"]["input_residual"] = at_input
            res = newton(target, res.x, res.lam, tol, mu=res.mu, expired=session.expired, arrays=arrays)
        if res.ok:
            return res.x, res.lam, res.mu, Status.OPTIMAL, ""
        lam = res.lam  # (the input's game)
    else:
        t_at = 1.0 if res is direct else reached or 0.0  # the direct attempt's point is the target game's
        lam = to_exact(res.lam if target_is_start or t_at == 1.0 else rescale(t_at, 1.0, res.lam))
    if session.expired():
        # the last certified point of the path (t = t_reached; its residual for the target game is
        # details.ncp_residual_scaled), never called converged
        where = "no game of the path certified" if reached is None else f"last certified at t = {reached:.4f}"
        return res.x, lam, res.mu, Status.TIME_LIMIT, f"newton: {res.message} ({where} of 1)"
    details["_newton_point"] = (res.x, lam, res.mu, res.message)
    rem = session.remaining()
    setup = _ncp_setup_seconds(inst)
    ncp_next = finite.all() and not _coupled(inst)  # else best-response
    if rem is not None and rem < 4 * setup and ncp_next:
        # the Pyomo NCP's model, NL file and CasADi function are built before any limit can stop them
        details.pop("_newton_point")
        info["fallback"] = (f"newton not certified ({res.message}); the ncp fallback skipped: building it "
                            f"takes about {setup:.0f} s here, {rem:.0f} s of the time limit left")
        return res.x, lam, res.mu, Status.TIME_LIMIT, (f"newton: {res.message}; no time for the ncp "
                                                       "fallback (details.newton.fallback)")
    info["fallback"] = f"newton not certified ({res.message}); solved by algorithm=ncp"
    return None


def _canonical_split(game: ApfGame, res: Any, tol: float, session: Session, arrays: Any = None
                     ) -> tuple[Any, dict[str, Any]]:
    """One split per equilibrium. ``f`` depends on ``x`` only through the totals ``X``, so with ``X`` and
    the multipliers kept, every split that gives each user its total, uses only pairs with ``f ≤ 0``
    (to ``tol``, relative to the marginal), keeps every row with a multiplier above ``tol`` (relative
    to its scale) at least as full and no row over its capacity (coupling rows alike) is the same
    equilibrium — and Newton's split is the one its regularised steps reached, which can change with
    the order of users and servers (docs/mechanisms/apf-vds.md: 17 of 40 mixed cases). The
    canonical vertex of these splits (:func:`_split_vertex`) is taken instead: as it is where it
    certifies and no server is leximin (Newton's steps from a certified vertex had moved the split by
    2.8e-5, and two statements of one instance ended 8e-5 of a user's total apart), else Newton runs
    from it with the same multipliers (the LP's rows hold to HiGHS's tolerance, the certificate asks for
    ``tol``). Kept only where that certifies; ``(result, info)``.

    The multipliers are first taken with those of rows that are not priced (within ``tol`` of 0 on the
    certificate's scale) and that the point leaves slack (by more than ``tol`` of the capacity) set to
    0, with every α finite; where that vertex does not certify, as they are. Such a multiplier was
    2.8e-12 on a task-limit row 32 % slack (60 × 12 limits, α = 3, decades apart): it priced one pair
    2.5e-8 above its marginal in one statement of the instance, whose split LP then left out a pair the
    other statement's used, and it put that vertex's certificate just past ``tol`` (μ over a scale that
    reads the split), so Newton moved it; the two splits ended 6.4e-4 of a user's total apart. Zeroed,
    they agree to 4e-10. Not zeroed only: on 30 × 8 external, α = 8 (decades apart), one such
    multiplier was what kept a user with a marginal per unit at most 10⁻⁸ of the others' off a slack
    row (that vertex gave the user 4e-11 of its total there, residual 1.0), and the vertex with the
    multipliers as they are certified. ``arrays``: the game's :class:`~fairalloc.models._apf_newton._Arrays`,
    if already built."""
    arr = _Arrays(game) if arrays is None else arrays
    xp, lv = arr.pack(res.x, res.lam, res.mu)
    _, sl, m, _ = arr.f(xp, lv)
    # rows priced (a multiplier within tol of 0 on the certificate's scale may go slack)
    active = lv / arr.certificate_scale(xp, m) > tol
    info: dict[str, Any] = {"rule": "canonical vertex of the splits with these totals and multipliers"}
    noise = ~active & (lv > 0) & (sl / arr.cap_scale > tol) & (game.leximin is None)
    tries = [lv]
    if noise.any():
        tries.insert(0, np.where(noise, 0.0, lv))
        info["slack_multipliers_zeroed"] = int(noise.sum())
    for k, lt in enumerate(tries):
        y, status = _split_vertex(game, arr, xp, lt, active, tol, session)
        info["status"] = status
        if y is None:
            if k + 1 < len(tries):
                continue
            return res, info
        _, lam, mu = arr.unpack(xp, lt)
        at_vertex = scaled_residual(game, y, lam, mu, arrays=arr)
        info["vertex_residual"] = at_vertex
        if at_vertex <= tol and game.leximin is None:  # it certifies: Newton's steps would move it off
            info["newton_iterations"] = 0
            if k + 1 < len(tries):
                info["multipliers"] = "slack rows' zeroed"
            return replace(res, x=y, lam=lam, mu=mu, residual=at_vertex), info
        if k + 1 < len(tries):
            info["zeroed_vertex_residual"] = at_vertex
    again = newton(game, y, lam, tol, mu=mu, arrays=arr, expired=session.expired)
    info["newton_iterations"] = again.iterations
    if not again.ok:
        info["status"] = f"rejected (newton from it: {again.message})"
        return res, info
    return again, info


def _split_vertex(game: ApfGame, arr: Any, xp: np.ndarray, lv: np.ndarray, active: np.ndarray, tol: float,
                  session: Session) -> tuple[np.ndarray | None, str]:
    """The canonical vertex (:func:`~fairalloc.solvers.canonical.canonical_point`:
    ``max Σ h[n,i]·x[n,i]/X_n``, ``h`` a hash of the names) of the splits of the packed point ``xp``'s
    totals that use only pairs with ``f/m ≤ tol`` under the packed multipliers ``lv``, keep the
    ``active`` rows at least as full and no row over its capacity: ``(x, status)``, ``x`` ``None``
    where the LP ends otherwise than optimal. One HiGHS LP through Pyomo, built in bulk
    (:mod:`fairalloc.solvers.linear`: rows as arrays; at 1000 × 250, α = 1, every one of the 250 000
    pairs is allowed). Each user's split in ``x`` is then scaled to its total exactly: the LP holds the
    totals to HiGHS's tolerance only."""
    import pyomo.environ as pyo

    from fairalloc.models.feasible import name_hashes
    from fairalloc.solvers.canonical import ColumnScale, canonical_point
    from fairalloc.solvers.linear import VarFamily, array_sum

    inst = game.inst
    f, sl, m, _ = arr.f(xp, lv)
    X = arr.totals(xp)
    allowed = np.flatnonzero(f / m <= tol)
    usage = arr.cap - sl
    mod = pyo.ConcreteModel(name=f"apf-vds-split[{inst.name}]")
    mod.x = pyo.Var(range(len(allowed)), bounds=(0, None))
    fam = VarFamily(list(mod.x.values()))
    owner = arr.pn[allowed]
    order = np.argsort(owner, kind="stable")
    users, start = np.unique(owner[order], return_index=True)
    ends = np.r_[start[1:], len(order)]
    mod.total = pyo.Constraint(range(len(users)), rule=lambda mo, u: array_sum(
        np.ones(ends[u] - start[u]), order[start[u]:ends[u]], fam) == float(X[users[u]]))
    DT = arr.DT[:, allowed].tocsr()
    rows = [k for k in range(arr.nr) if DT.indptr[k + 1] > DT.indptr[k]]

    def row(mo: Any, k: int) -> Any:
        span = slice(DT.indptr[k], DT.indptr[k + 1])
        body = array_sum(DT.data[span], DT.indices[span], fam)
        if active[k]:
            return pyo.inequality(min(float(usage[k]), float(arr.cap[k])) * (1 - 1e-12), body,
                                  float(arr.cap[k]))
        return body <= float(arr.cap[k])

    mod.rows = pyo.Constraint(rows, rule=row)
    mod.objective = pyo.Objective(expr=0.0)
    h = name_hashes(inst.users, inst.servers, np.c_[owner, arr.pi[allowed]])
    out = canonical_point(mod, ColumnScale(fam.variables, X[owner], h), time_limit=session.remaining())
    if not out.ok:
        return None, out.status.value
    yp = np.zeros_like(xp)
    yp[allowed] = np.maximum(0.0, [v.value or 0.0 for v in fam.variables])
    # each user's split scaled to its total: the LP holds the totals to HiGHS's tolerance only, and f
    # reads them (200 x 32 external, α = 1: totals 8.4e-9 off, the certificate's residual; scaled,
    # 1.6e-10, a row over its capacity by that much)
    Y = arr.totals(yp)
    yp *= np.where(Y > 0, X / np.where(Y > 0, Y, 1.0), 1.0)[arr.pn]
    return arr.unpack(yp, lv)[0], out.status.value


def _mnw_start(g1: ApfGame, session: Session, info: dict[str, Any], arrays: _Arrays | None = None
               ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray] | None:
    """A start for the game ``g1`` of weighted proportional fairness at every server (α = 1, A = 1,
    B = 0) where Newton does not certify it from the sharing-incentive point: the maximum Nash welfare
    point of its instance (:mod:`~fairalloc.models.mnw`, the convex program, by the session's NLP
    solver), with the multipliers that fit it (:meth:`ApfGame.multipliers`). The two are one problem:
    at α = 1 a pair's marginal is ``φ_n/X_n`` at every server, and the game's conditions are MNW's
    Karush–Kuhn–Tucker conditions (the prices of each server in its utility scale; the coupling rows'
    ``μ`` in the servers' own units, MNW's prices of task limits, budgets and external resources as they
    are). Measured on ``random_instance(96, 200, 32, 6)`` (placement): Newton stalled at a scaled
    residual of 1.4·10⁻⁴ from the sharing-incentive point and certified in 14 iterations from MNW's
    point (3.1 s by Ipopt). ``info["mnw"]``: what ran; ``None`` where MNW is not certified or the time
    is up. ``arrays``: ``g1``'s :class:`~fairalloc.models._apf_newton._Arrays`, if already built (the
    coupling rows' order)."""
    from fairalloc.models import mnw

    if session.expired():
        return None
    start = time.perf_counter()
    sol = mnw.solve(g1.inst, session, canonical=False)
    info["mnw"] = {"status": sol.status.value, "seconds": time.perf_counter() - start}
    if sol.status is not Status.OPTIMAL:
        return None
    x = np.asarray(sol.allocation, float)
    price = {"tasks": "limit", "budget": "budget", "external": "external"}
    rows = (_Arrays(g1) if arrays is None else arrays).coupling
    mu = np.array([sol.details["prices"][price[kind]][k] for kind, k in rows], float)
    return x, g1.multipliers(x), mu


def _proportional_start(inst: Instance, g0: ApfGame, x0: np.ndarray, tol: float, cap: int, session: Session,
                        info: dict[str, Any]) -> tuple[np.ndarray, list[np.ndarray], np.ndarray] | None:
    """The continuation's first start where some ``α_i = inf``: weighted proportional fairness at *every*
    server (α = 1, A = 1, B = 0: a convex problem, the path's first game without its leximin servers) by
    Newton from ``x0`` (``None`` where that does not certify; ``info["ok"]`` says so too). The path's first
    game ``g0`` itself (α = 1 at the finite servers, leximin at the others) is not convex: on 200 × 32
    placement seed 9 (α = 3 at the finite servers) Newton on it stalled from the sharing-incentive point
    even after the rescue sweeps, and certified from this point; on two of six unseen-style 200 × 32
    instances with an external resource (α = 3 at the finite servers) it was the other way round, so the
    caller runs the continuation again from the sharing-incentive point where the first game does not
    certify from this one (``details.newton.continuation``: that entry says ``"start"``). ``info``: what
    ran (``details.newton.start``).

    Returns the point with ``g0``'s starting multipliers: at the finite servers and on the shared coupling
    rows (task limits, budgets, external resources) those of the α = 1 point, which ``g0`` has there in
    the same utility scale; at the leximin servers the inverse levels, their external rows' ``M_{i,e}``
    too (the pool's row with the room the others leave, :func:`with_room`). Recomputed from the point
    alone (:meth:`ApfGame.multipliers`), the coupling prices would start at 0 and the finite servers'
    equations have no exact fit: on a third of those six instances Newton on ``g0`` then stalled at
    3·10⁻⁷ and certified from this start."""
    one = np.ones(inst.n_servers)
    c = utility_scale(inst, one, one, 0 * one)
    g = _game(inst, one, *_scaled(one, one, 0 * one, c), c)
    ag = _Arrays(g)  # (built once: Newton's arrays and the coupling rows' order)
    pf = newton(g, x0, g.multipliers(x0), tol, max_iter=4 * cap, expired=session.expired, cold=True,
                arrays=ag)
    info.update(point="alpha = 1 at every server", iterations=pf.iterations, ok=pf.ok)
    if not pf.ok and (at := _mnw_start(g, session, info, ag)) is not None:
        pf = newton(g, at[0], at[1], tol, max_iter=4 * cap, expired=session.expired, mu=at[2], arrays=ag)
        info.update(iterations=info["iterations"] + pf.iterations, ok=pf.ok)
    if not pf.ok:
        return None
    lex = np.zeros(inst.n_servers, bool) if g0.leximin is None else g0.leximin
    # a leximin server's inverse levels on its own rows, then on its external rows (with_room appends them)
    levels = {r.server: (room := with_room(inst, pf.x, r), g0.inverse_levels(pf.x, room))
              for r in g0.rows if lex[r.server]}
    lam = [levels[r.server][1][:len(r.capacity)] if lex[r.server] else own for r, own in zip(g0.rows, pf.lam)]
    shared = dict(zip(ag.coupling, pf.mu))
    arr = _Arrays(g0)
    mu = []
    for j, (kind, e) in enumerate(arr.coupling):
        if kind == "external-leximin":  # M_{i,e}: the inverse level of the pool's row at server i
            room, inv = levels[int(arr.row_server[arr.ns + j])]
            mu.append(float(inv[room.names.index(inst.external[e])]))
        else:
            mu.append(shared.get((kind, e), 0.0))
    return pf.x, lam, np.array(mu)


def _coupling_details(game: ApfGame, mu: np.ndarray, details: dict[str, Any]) -> None:
    """``details["limit_multipliers"]`` (``μ_n``, utility per task) and ``details["budget_multipliers"]``
    (``ν_n``, utility per unit of budget) and ``details["external_multipliers"]`` (utility per unit of an
    external resource): the shared prices of the coupling rows, 0 where slack, for the users that have a
    limit (budget) and the external resources some pair uses."""
    inst = game.inst
    out: dict[str, dict[str, float]] = {"limit_multipliers": {}, "budget_multipliers": {},
                                        "external_multipliers": {}}
    key = {"tasks": "limit_multipliers", "budget": "budget_multipliers", "external": "external_multipliers"}
    for (kind, n), v in zip(coupling_rows(game), mu):
        if kind in key:  # (an external resource's rows at α = inf servers carry levels, not prices)
            out[key[kind]][inst.external[n] if kind == "external" else inst.users[n]] = float(v)
    details.update({k: v for k, v in out.items() if v})


def _solve_ncp(inst: Instance, session: Session, game: ApfGame, a: np.ndarray, A: np.ndarray,
               B: np.ndarray, polish: bool, details: dict[str, Any]
               ) -> Solution | tuple[np.ndarray, list[np.ndarray], Status, str]:
    """The Pyomo NCP through the Scholtes loop; once a relaxed solution reveals the active set, a Newton
    polish (if it solves the NCP to 1e-10) ends the loop early."""
    m = build(inst, a.tolist(), A.tolist(), B.tolist())
    edited = session.customize is not None
    if edited:  # the hook edits the NCP as built, before the relaxation rewrites it
        session.apply_customize(m)
        details["_bounds"] = _box_complementarity(m, inst)
        details["_model"] = m
    relax = ScholtesRelaxation(m)
    relax.apply()
    polished: dict[str, Any] = {}

    def exact_from_here(tau: float) -> bool:
        if not polish or tau > POLISH_FROM_TAU or edited or session.expired():
            return False
        xp, lp, info = newton_polish(game, *_ncp_point(m, inst, game), expired=session.expired)
        if info["polished"] and (info.get("certified") or info["residual_after"] <= 1e-10):
            polished.update(x=xp, lam=lp, info=info)
            return True
        return False

    out = relax.solve(session, TIGHT if edited else None, done=exact_from_here)
    details["scholtes"] = relax.history
    status, message = out.status, out.message
    if status is Status.INFEASIBLE:
        # the game is concave, so an equilibrium always exists ([APF] §3.1): "infeasible" is Ipopt's failure
        # (seen at α = 32 on 20 x 4), not a property of the instance
        status, message = Status.ERROR, f"{message} (the game has an equilibrium, [APF] §3.1: solver failure)"
    if not out.has_point and not out.ok:
        details.pop("_bounds", None), details.pop("_model", None)
        return Solution(np.zeros((inst.n_users, inst.n_servers)), status, f"Ipopt: {message}",
                        details=details)
    if polished:
        details["polish"] = polished["info"]
        x, lam = polished["x"], polished["lam"]
    else:
        x, lam = _ncp_point(m, inst, game)
    return x, lam, Status.OPTIMAL if out.ok else status, message if status is not Status.OPTIMAL else ""
