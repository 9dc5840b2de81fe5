r"""MNW — maximum Nash welfare (Eisenberg–Gale; proportional fairness) ([TSFER] §3.2).

.. math::

    \max_{x \in \chi,\ u} \ \sum_n \phi_n \log u_n \qquad \text{s.t.}\quad u_n = X_n = \sum_i x_{n,i}

over the feasible set χ (task limits included). The auxiliary ``u[n]`` keeps the Hessian diagonal
(``log(Σ_i x[n,i])`` would give dense blocks; ~3× faster at 50k variables, measured with Ipopt). The log is
unbounded at ``X = 0``, so the solve starts from the weighted equal split
(:func:`~fairalloc.models.feasible.uniform_split`, strictly positive) and ``u[n] ≥ 0`` is only a bound
Ipopt's interior point never touches.

With unlimited tasks MNW is EF, PO and SI but not SP ([TSFER] Thm 2). It is the α = 1 case of αPF-VDS
when demands are server-independent ([APF] Thm 2) — the two are computed independently and compared in
the tests. ``form="epigraph"`` writes ``max Σ φ_n t_n`` s.t. ``exp(t_n) ≤ u_n`` instead, the form in
which SCIP closes the gap (``--solver scip``; used automatically then, with SCIP's feasibility tolerance
at 1e-10 unless the user sets ``numerics/feastol``: at SCIP's default 1e-6 its point stopped 2.2e-4 of
the largest entry from Ipopt's). SCIP's point is certified by the same duality gap as Ipopt's.

**Certificate.** Ipopt's point is checked with the Eisenberg–Gale dual. For prices ``p ≥ 0`` on the
rows of χ (capacities ``p[i,r]``, time ``p[i]`` in the time-shared form, external resources ``p[e]``,
task limits ``τ[n]``, budgets ``β[n]``), one task of ``n`` on ``i`` costs
``κ[n,i] = Σ_r d[n,r] p[i,r] + Σ_{e: i∈S_e} d[n,e] p[e] + τ[n] + β[n] cost[n,i]`` (``p[i]/γ[n,i]`` in the
time-shared form) and

.. math::

    D(p) = \sum_{\text{rows}} p\,b + \sum_n \Big(\phi_n \log\frac{\phi_n}{\kappa_n(p)} - \phi_n\Big),
    \qquad \kappa_n(p) = \min_{i} \kappa_{n,i}(p),

bounds the Nash welfare of every allocation in χ from above (each user buys ``φ_n/κ_n`` tasks at its
cheapest server). ``gap = D(p) − Σ φ_n log X_n ≥ 0`` with the solver's multipliers as prices is
reported in ``details.duality_gap`` (absolute, in log-welfare units, which do not depend on units) and
``details.relative_gap`` (over ``Σ φ``); the status is ``optimal`` exactly when the relative gap is at
most :data:`GAP_TOL` in absolute value and every row of χ holds to :data:`FEAS_TOL` of its bound
(a slightly infeasible point can show a negative gap), whether or not Ipopt stopped at its own
"acceptable" level, else ``converged`` with both in the message.

**Polish.** At a degenerate optimum (a user indifferent between a server it uses and one it does not)
an interior point stops a little inside the face: on valuations ``[[3,0,0],[0,4,0],[5,5,5]]`` Ipopt
returns ``X ≈ (2.99990, 3.99987, 5.00032)`` for ``(3, 4, 5)``. So the support is identified (pairs with
``x[n,i] ≥ θ·min(X_n, L[n,i])``, ``θ ∈ {10⁻³, 10⁻⁶}``, :func:`in_support`: a pair holding ``θ`` of
its user's tasks or of what it can hold alone, so that a user whose tasks are mostly elsewhere keeps
the one server it fills),
every other pair is fixed at zero, the restricted problem —
no longer degenerate — is re-solved from the same point with tolerance ``10⁻¹²`` and no bound
relaxation (Ipopt's default relaxes every bound by ``10⁻⁸`` of itself), and the first certified
candidate (else the one with the smallest duality gap) is kept (the dual bound uses every pair, so
a wrong support shows as a large gap).

**Scaling.** Ipopt's tolerances are absolute in the units it is given, so the model carries an export
``scaling_factor`` suffix (:func:`~fairalloc.models.feasible.scale_chi`, applied by the NL writer):
``x[n,i]`` in units of ``L[n,i]``, the most tasks the pair can hold alone
(:func:`~fairalloc.models.feasible.pair_limit`), ``u[n]`` and its row in units of ``Σ_i L[n,i]``, every
row of χ over its bound. On the wide fuzz instances (numbers spanning 10⁻⁴…10⁶) 123 of 200 were
certified before and 200 after (docs/mechanisms/mnw.md#scaling).

Golden numbers (docs/examples.md#tsfer-fig2, [TSFER] Fig. 2): ``x[u1,s2] = x[u2,s1] = 5``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyomo.environ as pyo
import scipy.sparse as sp

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, feasible_set, pair_limit, scale_chi, uniform_split
from fairalloc.models.maxmin import canonical_split
from fairalloc.registry import Param, Solution, as_bool, choice, mechanism
from fairalloc.solvers import Session
from fairalloc.status import Status
from fairalloc.verify.feasibility import feasibility, into_rows

GAP_TOL = 1e-10  # relative duality gap (over Σφ) below which the result is `optimal`
FEAS_TOL = 1e-9  # ... with every row of χ met to this fraction of its bound
SUPPORT_THRESHOLDS = (1e-3, 1e-6)  # x[n,i] ≥ θ·min(X_n, L[n,i]): the pairs kept when polishing
#: SCIP's defaults for the epigraph form, unless the user sets them: at SCIP's own feasibility
#: tolerance (1e-6) ``exp(t) <= u`` lets its point stop ~2e-4 of the largest entry from Ipopt's
SCIP_OPTIONS = {"numerics/feastol": 1e-10}
POLISH_OPTIONS = {"tol": 1e-12, "acceptable_tol": 1e-10, "acceptable_iter": 5, "bound_relax_factor": 0.0}


def prices(m: pyo.ConcreteModel, inst: Instance) -> dict[str, np.ndarray]:
    """The multipliers of χ's rows left in ``m.dual`` by the solver, as non-negative price arrays."""
    dual = getattr(m, "dual", {})
    chi = m.chi

    def p(con: object) -> float:
        return max(0.0, float(dual.get(con, 0.0) or 0.0))

    S, R, U = list(inst.servers), list(inst.resources), list(inst.users)
    out = {"capacity": np.zeros((inst.n_servers, len(R))), "time": np.zeros(inst.n_servers),
           "external": np.zeros(len(inst.external)), "limit": np.zeros(inst.n_users),
           "budget": np.zeros(inst.n_users)}
    if hasattr(chi, "capacity"):
        for (s, r), con in chi.capacity.items():
            out["capacity"][S.index(s), R.index(r)] = p(con)
    if hasattr(chi, "time"):
        for s, con in chi.time.items():
            out["time"][S.index(s)] = p(con)
    for e, con in chi.external.items():
        out["external"][list(inst.external).index(e)] = p(con)
    if hasattr(chi, "limit"):
        for u, con in chi.limit.items():
            out["limit"][U.index(u)] = p(con)
    for u, con in chi.budget.items():
        out["budget"][U.index(u)] = p(con)
    return out


def _price_columns(inst: Instance) -> tuple[sp.csr_array, np.ndarray, list[tuple[str, int]]]:
    """``κ[n,i] = (M p)[pair]`` over the runnable pairs (``inst.runnable`` row-major), the right-hand
    sides ``b`` of the price columns, and their names ``(kind, index)``."""
    pairs = np.argwhere(inst.runnable)
    cols: list[np.ndarray] = []
    b: list[np.ndarray] = []
    names: list[tuple[str, int]] = []
    n_, i_ = pairs[:, 0], pairs[:, 1]
    if inst.time_shared:
        for k in range(inst.n_servers):
            cols.append(np.where(i_ == k, 1.0 / np.where(i_ == k, inst.gamma[n_, i_], 1.0), 0.0))
            b.append(np.array([1.0]))
            names.append(("time", k))
    else:
        for k in range(inst.n_servers):
            for r in range(len(inst.resources)):
                col = np.where(i_ == k, inst.demand[n_, r], 0.0)
                if col.any():
                    cols.append(col)
                    b.append(np.array([inst.capacity[k, r]]))
                    names.append(("capacity", k * len(inst.resources) + r))
    for e in range(len(inst.external)):
        col = inst.external_demand[n_, e] * inst.external_scope[e, i_]
        if col.any():
            cols.append(col)
            b.append(np.array([inst.external_capacity[e]]))
            names.append(("external", e))
    for n in np.flatnonzero(np.isfinite(inst.tasks)):
        cols.append((n_ == n).astype(float))
        b.append(np.array([inst.tasks[n]]))
        names.append(("limit", int(n)))
    if inst.budget_cost is not None and inst.has_budgets:
        for n in inst.budgeted:
            cols.append(np.where(n_ == n, inst.budget_cost[n, i_], 0.0))
            b.append(np.array([inst.budget_limit[n]]))
            names.append(("budget", int(n)))
    M = sp.csr_array(np.column_stack(cols)) if cols else sp.csr_array((len(pairs), 0))
    return M, np.concatenate(b) if b else np.zeros(0), names


def in_support(inst: Instance, x: np.ndarray, theta: float) -> np.ndarray:
    """The pairs taken as ``x``'s support: ``x[n,i] ≥ θ·min(X_n, L[n,i])`` with ``L`` the most the pair
    can hold (:func:`~fairalloc.models.feasible.pair_limit`): ``θ`` of the user's tasks, or of what
    the server (and the external resources over it) can run of them alone. The second keeps a
    server a user fills while its other servers give it 4·10⁴ times more tasks, as in the wide fuzz
    instances."""
    X = x.sum(axis=1, keepdims=True)
    return (x > 0) & (x >= theta * np.minimum(X, np.where(inst.runnable, pair_limit(inst), np.inf)))


def recover_prices(inst: Instance, x: np.ndarray, theta: float = 1e-6) -> dict[str, np.ndarray]:
    """Prices that make ``x`` optimal if any do, from the allocation alone (one LP, independent of the
    solver's multipliers, which are not unique at a degenerate optimum): ``p ≥ 0``, zero on rows with
    slack, ``κ[n,i] = φ_n/X_n`` where ``x[n,i] ≥ θ X_n`` and ``κ[n,i] ≥ φ_n/X_n`` elsewhere, each
    equation divided by ``φ_n/X_n``; violations are elastic and their sum minimised."""
    from scipy.optimize import linprog

    M, b, names = _price_columns(inst)
    pairs = np.argwhere(inst.runnable)
    X = x.sum(axis=1)
    out = {"capacity": np.zeros((inst.n_servers, len(inst.resources))), "time": np.zeros(inst.n_servers),
           "external": np.zeros(len(inst.external)), "limit": np.zeros(inst.n_users),
           "budget": np.zeros(inst.n_users)}
    if M.shape[1] == 0 or (X <= 0).any():
        return out
    used = M.T @ x[pairs[:, 0], pairs[:, 1]]
    slack = used < b * (1 - 1e-7)  # rows with room: no price
    scale = X[pairs[:, 0]] / inst.weight[pairs[:, 0]]  # κ·X/φ = 1 at the optimum on the support
    A = sp.diags(scale) @ M
    A = A[:, np.flatnonzero(~slack)]
    support = in_support(inst, x, theta)[pairs[:, 0], pairs[:, 1]]
    n_p, n_r = A.shape[1], A.shape[0]
    # variables: p (n_p), s_plus (n_r), s_minus (n_r); equality on the support, ≥ elsewhere
    eye = sp.identity(n_r, format="csr")
    A_eq = sp.hstack([A[support], eye[support], -eye[support]], format="csr")
    A_ub = sp.hstack([-A[~support], -eye[~support], sp.csr_array((int((~support).sum()), n_r))],
                     format="csr")
    c = np.concatenate([np.zeros(n_p), np.ones(2 * n_r)])
    res = linprog(c, A_ub=A_ub if A_ub.shape[0] else None, b_ub=-np.ones(A_ub.shape[0]) if A_ub.shape[0]
                  else None, A_eq=A_eq if A_eq.shape[0] else None,
                  b_eq=np.ones(A_eq.shape[0]) if A_eq.shape[0] else None,
                  bounds=[(0, None)] * (n_p + 2 * n_r), method="highs")
    if res.status != 0:
        return out
    p = np.zeros(len(names))
    p[np.flatnonzero(~slack)] = res.x[:n_p]
    R = len(inst.resources)
    for (kind, k), v in zip(names, p):
        if kind == "capacity":
            out["capacity"][k // R, k % R] = v
        else:
            out[kind][k] = v
    return out


def duality_gap(inst: Instance, x: np.ndarray, price: dict[str, np.ndarray]) -> float:
    """``D(p) − Σ φ_n log X_n`` (module docstring): ``≥ 0`` for any prices and a feasible ``x``, ``0``
    exactly at the optimum with its prices (a solver's point, feasible to its tolerance, can give
    ``-1e-9``); ``inf`` when some user's cheapest task costs nothing."""
    phi = inst.weight
    run = inst.runnable
    if inst.time_shared:
        with np.errstate(divide="ignore"):
            kappa = np.where(run, price["time"][None, :] / np.where(run, inst.gamma, 1.0), np.inf)
        bound = float(price["time"].sum())
    else:
        kappa = inst.demand @ price["capacity"].T
        bound = float((price["capacity"] * inst.capacity).sum())
    if len(inst.external):
        kappa = kappa + (inst.external_demand * price["external"]) @ inst.external_scope
        bound += float(price["external"] @ inst.external_capacity)
    fin = np.isfinite(inst.tasks)  # only users with a limit have a limit row
    kappa = kappa + np.where(fin, price["limit"], 0.0)[:, None]
    bound += float(price["limit"][fin] @ inst.tasks[fin])
    if inst.budget_cost is not None and inst.has_budgets:
        b = np.isfinite(inst.budget_limit)
        kappa = kappa + price["budget"][:, None] * np.where(b[:, None], inst.budget_cost, 0.0)
        bound += float(price["budget"][b] @ inst.budget_limit[b])
    kappa = np.where(run, kappa, np.inf).min(axis=1)
    X = x.sum(axis=1)
    if (kappa <= 0).any() or (X <= 0).any():
        return float("inf")
    dual = bound + float(np.sum(phi * np.log(phi / kappa) - phi))
    return dual - float(np.sum(phi * np.log(X)))  # may be -1e-9: the point is feasible to tolerance


def build(inst: Instance, form: str = "log", **_: object) -> pyo.ConcreteModel:
    """χ, ``u[n] = X[n]`` and the Nash-welfare objective, initialised at the weighted equal split."""
    m = pyo.ConcreteModel(name=f"mnw[{inst.name}]")
    m.chi = feasible_set(inst)
    start = uniform_split(inst)
    for (n, i), v in zip(m.chi.pairs, m.chi.x.values()):
        v.set_value(float(start[n, i]))
    X0 = dict(zip(inst.users, start.sum(axis=1)))
    phi = dict(zip(inst.users, inst.weight))
    m.u = pyo.Var(m.chi.N, bounds=(0, None), initialize=X0, doc="u[n] = X[n]")
    m.define_u = pyo.Constraint(m.chi.N, rule=lambda m, n: m.u[n] == m.chi.X[n])
    if form == "epigraph":
        m.t = pyo.Var(m.chi.N, initialize={n: math.log(X0[n]) for n in m.chi.N})
        m.epigraph = pyo.Constraint(m.chi.N, rule=lambda m, n: pyo.exp(m.t[n]) <= m.u[n])
        m.objective = pyo.Objective(expr=sum(phi[n] * m.t[n] for n in m.chi.N), sense=pyo.maximize)
    else:
        m.objective = pyo.Objective(expr=sum(phi[n] * pyo.log(m.u[n]) for n in m.chi.N),
                                    sense=pyo.maximize)
    # scaling (module docstring): each pair's tasks in units of what it can hold alone, each row over
    # its bound, each u[n] in units of the sum of its pairs'
    m.scaling_factor = sf = pyo.Suffix(direction=pyo.Suffix.EXPORT)
    unit = scale_chi(m.chi, sf, inst).sum(axis=1)
    for k, n in enumerate(m.chi.N):
        sf[m.u[n]] = sf[m.define_u[n]] = 1.0 / float(unit[k])
        if form == "epigraph":
            sf[m.epigraph[n]] = 1.0 / float(unit[k])
    return m


@mechanism("mnw", problem="nlp", needs_demands=False, build=build, reference="[TSFER] §3.2, Thm 2",
           summary="max Σ φ[n] log X[n] over χ (Eisenberg–Gale), by Ipopt",
           params=[Param("form", choice("log", "epigraph"), "log",
                         "objective form: log, or the epigraph exp(t) <= u (default for SCIP)"),
                   Param("canonical", as_bool, True,
                         "the canonical split of the optimal totals (the vertex of {x in χ: Σ_i x[n,i] = "
                         "X[n]} maximising a name-hashed weighting of x/X, docs/canonical.md), kept where "
                         "it is certified; false: the solver's split")])
def solve(inst: Instance, session: Session, form: str = "log", canonical: bool = True) -> Solution:
    scip = session.solver_for("nlp").name == "scip"
    if scip:
        form = "epigraph"
    m = build(inst, form)
    handle = session.open(m, "nlp", {k: v for k, v in SCIP_OPTIONS.items() if k not in session.options}
                          if scip else None)
    out = session.run(handle)
    details = {"objective": out.objective, "form": form, "kkt": out.kkt,
               "start": dict(zip(inst.users, uniform_split(inst).sum(axis=1)))}
    if not out.has_point:
        return Solution(np.zeros((inst.n_users, inst.n_servers)), out.status, out.message,
                        details=details)
    x = allocation(m.chi, inst)
    scale = float(inst.weight.sum())
    g0, p0 = _gap(inst, x, m)
    best = (g0, x, out, "ipopt", p0)
    if out.ok and form == "log":
        # the first polished point that is certified wins (an interior point's is not exact at a
        # degenerate optimum even when its gap is below the tolerance); else the smallest gap
        for theta in SUPPORT_THRESHOLDS:
            cand = _polished(m, inst, session, handle, x, theta)
            if cand is not None and (cand[0] <= GAP_TOL * scale or cand[0] < best[0]):
                best = cand
                if cand[0] <= GAP_TOL * scale:
                    break
    gap, x, last, how, price = best
    status, message = last.status, "" if last.ok else last.message
    feas = feasibility(inst, x, tol=FEAS_TOL)
    if status.ok and not feas["holds"]:  # an uncertified point is at least feasible: shrink it
        x, _ = into_rows(inst, x, within=math.inf)
        details["shrunk_to_feasible"] = feas["max_relative_violation"]
        gap = duality_gap(inst, x, price)
    if status is Status.CONVERGED and abs(gap) <= GAP_TOL * scale and feas["holds"]:
        # Ipopt stopped at its "acceptable" level, but the dual bound certifies the point all the same
        status, message = Status.OPTIMAL, ""
    if status.ok and not (abs(gap) <= GAP_TOL * scale and feas["holds"]):
        status = Status.CONVERGED
        message = (f"Eisenberg–Gale duality gap {gap:.3g} ({gap / scale:.3g} relative; certified at "
                   f"{GAP_TOL:g}) and largest relative row violation "
                   f"{feas['max_relative_violation']:.3g} (at most {FEAS_TOL:g}): the allocation is not "
                   "certified exact")
    if canonical and status is Status.OPTIMAL and session.customize is None:
        x, details["canonical"], gap = _canonical(inst, session, x, price, scale, gap)
    details.update(objective=float(np.sum(inst.weight * np.log(np.maximum(x.sum(axis=1), 1e-300)))),
                   kkt=last.kkt, duality_gap=gap, relative_gap=gap / scale, point=how,
                   prices={k: np.asarray(v, float).tolist() for k, v in price.items()})
    return Solution(x, status, message, zero_tol=1e-9, details=details)


def _canonical(inst: Instance, session: Session, x: np.ndarray, price: dict[str, np.ndarray], scale: float,
               gap: float) -> tuple[np.ndarray, dict[str, Any], float]:
    """The canonical split of ``x``'s totals (:func:`~fairalloc.models.maxmin.canonical_split`), its
    information and its duality gap (``x``, ``gap`` where it is not kept). The
    Nash welfare and the dual bound read only the totals and the prices, so every split with the same
    totals has the same duality gap; the split is kept where it is certified as ``x`` was (gap at most
    ``GAP_TOL``, every row to ``FEAS_TOL``), which asks for its totals to within about 1e-10 of ``x``'s:
    the tie-break LP runs at a primal feasibility tolerance of 1e-10 (HiGHS's default 1e-7 let a
    capacity row overrun by ~1e-8) and the totals are shrunk by at most 1e-11 of themselves."""
    y, info = canonical_split(inst, session, x, shrinks=(0.0, 1e-11),
                              options={"primal_feasibility_tolerance": 1e-10})
    if y is None:
        return x, info, gap
    gap_y = duality_gap(inst, y, price)
    feas = feasibility(inst, y, tol=FEAS_TOL)
    if not (abs(gap_y) <= GAP_TOL * scale and feas["holds"]):
        info["status"] = (f"rejected (duality gap {gap_y:.3g}, largest relative row violation "
                          f"{feas['max_relative_violation']:.3g}): the solver's split")
        return x, info, gap
    return y, info, gap_y


def _gap(inst: Instance, x: np.ndarray, m: pyo.ConcreteModel) -> tuple[float, dict[str, np.ndarray]]:
    """The smaller duality gap of the solver's multipliers and of the prices recovered from ``x``, and
    those prices (reported in ``details.prices``: the certificate anyone can recompute with
    :func:`duality_gap`)."""
    cands = [prices(m, inst), recover_prices(inst, x)]
    gaps = [duality_gap(inst, x, p) for p in cands]
    k = int(np.argmin(gaps))
    return gaps[k], cands[k]


def _polished(m: pyo.ConcreteModel, inst: Instance, session: Session, handle: object, x: np.ndarray,
              theta: float) -> tuple[float, np.ndarray, object, str, dict[str, np.ndarray]] | None:
    """Re-solve tightly (no bound relaxation) with every pair outside :func:`in_support` fixed at zero;
    ``(gap, x, outcome, label, prices)``, or ``None`` when the re-solve fails. The model is left unfixed."""
    on = in_support(inst, x, theta)
    drop = [v for (n, i), v in zip(m.chi.pairs, m.chi.x.values()) if not on[n, i]]
    keep = [(v, v.value) for v in list(m.chi.x.values()) + list(m.u.values())]
    for v in drop:
        v.fix(0.0)
    try:
        handle.update()
        # from the first solve's point and multipliers (CasADi passes them back): without the warm
        # start a wide fuzz instance's polish stopped 4e-7 from the optimum
        warm = {"warm_start_init_point": "yes"} if getattr(handle, "name", "") == "ipopt-casadi" else {}
        out = session.run(handle, {**POLISH_OPTIONS, **warm})
        if not out.ok:
            return None
        y = allocation(m.chi, inst)
        g, p = _gap(inst, y, m)
        return g, y, out, f"polished (support x >= {theta:g}·min(X, L))", p
    finally:
        for v in drop:
            v.unfix()
        for v, val in keep:
            v.set_value(val, skip_validation=True)  # as Ipopt left it (may be a hair below 0)
        handle.update()
