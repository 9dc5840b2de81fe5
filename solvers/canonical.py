r"""One answer per input: the canonical point of a face of optimal solutions.

An LP's optimum is often a whole face (utilitarian and CRU allocations; the split of each user's tasks
across servers once progressive filling has fixed every user's total). Which vertex a solver returns
depends on its algorithm, version and the order of the rows — so results would too. The canonical
rule picks one point of the face, independently of all three:

.. math::

    x^{\mathrm{can}} = \arg\max_{x \in F} \ \sum_{n,i} h_{n,i}\,\frac{x_{n,i}}{s_n},
    \qquad h_{n,i} = 1 + \mathrm{hash}(\text{user name}, \text{server name}) \in [1, 2),

the vertex of the face ``F`` that maximises a fixed, generic weighting of the allocation measured in
each user's own scale ``s_n`` (the mechanisms use ``η_n``, the most tasks ``n`` could run alone, so
the rule does not depend on units). ``h`` comes from a cryptographic hash (BLAKE2b) of the two
*names*, so it does not depend on where a user or server sits in the file; with weights in general
position the maximiser is a single vertex. ``F`` is given by the model as it stands — for a
single-objective LP (the welfare LPs) pinned by complementary slackness (:func:`exact_face`: the LP
solved once more for its multipliers, every column whose reduced cost is not a tie fixed at its bound,
every row whose multiplier is not a tie held at its active bound; exactly the optimal face, whichever
optimal multipliers the solver gives), plus the row ``objective ≥ z* − ε|z*|`` (``≤ z* + ε|z*|``
when minimising; ``ε = 10⁻¹²``). Where that LP gives no multipliers, the point misses the face, or the
tie-break LP is sifted (:data:`EXACT_SIFTED`), the objective row alone is the face, widened to
``10⁻⁹`` and ``10⁻⁷`` if the solver's ``z*`` makes it infeasible (:data:`FACE_SLACKS`). The row alone
was the rule before: HiGHS holds it only to its tolerance on the scaled row, so near-ties (a reduced
cost of 10⁻⁸ of its column's prices) were decided by the hash instead of the objective (measured in
``docs/canonical.md``). For progressive filling every user held at its level by its floor row. The
tie-break LP is scaled (columns by ``s_n``, rows by their largest coefficient) and solved by HiGHS in
a fresh ``Highs`` (dual simplex; interior point with crossover from 20 000 columns; sifted from
50 000, its pool from the tie-break LP's own interior optimum by :mod:`fairalloc.solvers.schur_ipm`
when the model's point is an interior one), whatever route solved the mechanism, so every route ends
at the same vertex. Integer variables (CRU's exact MILP)
are fixed at their values first.

A least-squares point (``argmin Σ (x/s)²``, one convex QP) was the first choice; HiGHS's active-set
QP solver took 85 s and then failed at 1024 users × 128 servers, and cycled on a 6-column CRU face,
so the rule is one more LP instead (measured in ``docs/canonical.md``).

:func:`canonical_point` leaves the point in the model's variables and returns a
:class:`~fairalloc.solvers.outcome.SolveOutcome`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp

from fairalloc.solvers.compile import compile_linear
from fairalloc.solvers.highs import (
    _STATUS,
    IPM_ABOVE,
    SIFT_ABOVE,
    TOLERANCES,
    Sifter,
    _cost_scale,
    _inf,
    _sifting_mode,
    highs_lp,
    new_highs,
    set_option,
)
from fairalloc.solvers.linear import load_values
from fairalloc.solvers.outcome import SolveOutcome
from fairalloc.solvers.quiet import c_output_off_stdout
from fairalloc.solvers.schur_ipm import SchurIPM
from fairalloc.status import Status

__all__ = ["FACE_REL", "FACE_SLACKS", "RULE", "ColumnScale", "canonical_point", "exact_face", "report"]

RULE = "vertex of the optimal face maximising Σ h·x/η (h: hash of the user and server names)"

log = logging.getLogger(__name__)

# the optimal face: the objective within this fraction of |z*| of the optimum, widened in turn when
# the LP's optimum (known to the solver's tolerance) makes the face row infeasible
FACE_SLACKS = (1e-12, 1e-9, 1e-7)
FACE_REL = FACE_SLACKS[0]
# exact_face: a reduced cost or multiplier within this fraction of its column's prices is a tie
TIE_REL = 1e-9
AT_BOUND = 1e-7  # ... fixed only where the solver's point is this close to the bound (scaled units)
EXACT_FACE = True  # the welfare LPs' face by complementary slackness first (module docstring) ...
EXACT_SIFTED = False  # ... also where the tie-break LP is sifted
# a tie-break point overrunning a row by more than this fraction of its bound is not taken (the
# verification layer's tolerance: fairalloc.solve would end such a point `error`)
FEAS_REL = 1e-6
# a start point with more than DENSE_START of the columns non-zero (an interior point) is replaced by
# the largest SUPPORT_PER_ROW·rows columns of the tie-break LP's own interior optimum
# (solvers/schur_ipm.py); SCHUR_START = False keeps the start as it is
SCHUR_START = True
DENSE_START = 0.5
SUPPORT_PER_ROW = 8
# the IPM's tolerances for that point (feasibility, gap): the pool needs only which columns are large.
# At 2 048 × 256 mixed (tsf-er) the pool from a 10⁻⁴ point held the vertex's support (one restricted
# solve, the same vertex) after 18 iterations, against 27 at 10⁻⁶/10⁻⁸; from a 10⁻³ point the
# restricted LP once ended "Unknown" and the full LP was solved (45 s against 7 s)
POOL_TOL = (1e-4, 1e-4)


class ColumnScale(Mapping[Any, tuple[float, float]]):
    """``{variable: (s, h)}`` held as arrays aligned with a list of variables: the mapping
    :func:`canonical_point` takes, without a Python object per entry (10⁵ allocation variables at
    1024 users × 128 servers). Only entries with ``s > 0`` are kept. ``group`` (optional) numbers
    each entry's user, for :meth:`per_group_totals`. Looking a variable up builds an index once."""

    def __init__(self, variables: Sequence[Any], s: np.ndarray, h: np.ndarray,
                 group: np.ndarray | None = None) -> None:
        s, h = np.asarray(s, float), np.asarray(h, float)
        keep = s > 0
        if keep.all():
            self.variables = list(variables)
        else:
            self.variables = [v for v, k in zip(variables, keep.tolist()) if k]
        self.s, self.h = s[keep], h[keep]
        self.group = None if group is None else np.asarray(group)[keep]
        self._pos: dict[int, int] | None = None

    def __len__(self) -> int:
        return len(self.variables)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.variables)

    def __getitem__(self, v: Any) -> tuple[float, float]:
        if self._pos is None:
            self._pos = {id(u): k for k, u in enumerate(self.variables)}
        k = self._pos.get(id(v))
        if k is None or self.variables[k] is not v:
            raise KeyError(v)
        return float(self.s[k]), float(self.h[k])

    def values_now(self) -> np.ndarray:
        """The variables' current values (0 for a variable without one)."""
        return np.fromiter((v.value or 0.0 for v in self.variables), float, len(self.variables))

    def with_scale(self, s: np.ndarray) -> ColumnScale:
        """The same variables and weights ``h`` with scales ``s``."""
        out = ColumnScale.__new__(ColumnScale)
        out.variables, out.h, out.group, out._pos = self.variables, self.h, self.group, self._pos
        out.s = np.asarray(s, float)
        return out

    def columns(self, form: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(weights 1/s, h)`` per column of the compiled ``form`` (0 for columns not in the map)."""
        n_col = form.A.shape[1]
        weights, hashed = np.zeros(n_col), np.zeros(n_col)
        get = form.columns.index.get
        cols = np.fromiter((get(id(v), -1) for v in self.variables), np.int64, len(self.variables))
        ok = cols >= 0
        weights[cols[ok]] = 1.0 / self.s[ok]
        hashed[cols[ok]] = self.h[ok]
        return weights, hashed


def report(out: SolveOutcome) -> dict[str, Any]:
    """A welfare LP's ``details.canonical``: the rule, the tie-break's status and seconds, and how its face
    was pinned (``face``)."""
    return {"rule": RULE, "status": out.status.value, "seconds": out.solve_seconds,
            **({"face": out.extra["face"]} if "face" in out.extra else {})}


def canonical_point(model: Any, scale: Mapping[Any, tuple[float, float]],
                    objective_value: float | None = None, time_limit: float | None = None,
                    sifting: Any = "auto", options: dict[str, Any] | None = None) -> SolveOutcome:
    """The canonical vertex of the face of ``model`` (see the module docstring).

    ``scale`` maps the variables that enter the tie-break (the allocation ``x[n,i]``) to
    ``(s_n, h_{n,i})`` (:func:`~fairalloc.models.feasible.allocation_scale`); other variables are free
    to move within the face. ``objective_value`` (the LP's optimum ``z*``)
    adds the face row on the model's active objective; ``None`` when the model's rows already pin
    the face (progressive filling's floors). ``options`` are HiGHS options for the tie-break LP (e.g. a
    tighter ``primal_feasibility_tolerance`` where the caller's certificate asks for more than 10⁻⁷).
    """
    t0 = time.perf_counter()
    form = compile_linear(model)
    n_col = form.A.shape[1]
    col_lb, col_ub = form.col_lb.copy(), form.col_ub.copy()
    if form.integer.any():  # an exact MILP: keep its integer decisions, tie-break the rest
        vals = np.array([v.value if v.value is not None else 0.0 for v in form.variables])
        fixed = np.round(vals[form.integer])
        col_lb[form.integer] = col_ub[form.integer] = fixed
    if isinstance(scale, ColumnScale):
        weights, hashed = scale.columns(form)  # 1/s_n on the allocation's columns, 0 elsewhere
    else:
        weights, hashed = np.zeros(n_col), np.zeros(n_col)
        for j, v in enumerate(form.variables):
            sh = scale.get(v)
            if sh is not None and sh[0] > 0:
                weights[j], hashed[j] = 1.0 / sh[0], sh[1]
    # the exact face first, then the face row alone, widened in turn (module docstring); a first try
    # that could not pin the exact face was the face row alone at the first slack
    rels: list[float | None] = list(FACE_SLACKS) if objective_value is not None else [None]
    exact, out = objective_value is not None, None
    while rels:
        out = _solve_tiebreak(form, weights, hashed, col_lb, col_ub, objective_value, rels[0], time_limit,
                              t0, _sifting_mode(sifting), options or {}, exact=exact)
        pinned = out.extra.get("face") == "complementary slackness"
        if out.status is not Status.INFEASIBLE and not (pinned and out.status is Status.ERROR):
            break
        log.info("canonical point: face %s infeasible or missed (the LP's optimum is known to the "
                 "solver's tolerance)%s", "by complementary slackness" if pinned else f"with slack {rels[0]}",
                 "; widening" if rels[0] is not None else "")
        exact = False
        if not pinned:
            rels.pop(0)
    assert out is not None
    return out


def _solve_tiebreak(form: Any, weights: np.ndarray, hashed: np.ndarray, col_lb: np.ndarray,
                    col_ub: np.ndarray, objective_value: float | None, rel: float | None,
                    time_limit: float | None, t0: float, sifting: str = "auto",
                    options: dict[str, Any] | None = None, exact: bool = False) -> SolveOutcome:
    n_col = form.A.shape[1]
    options = options or {}
    A, row_lb, row_ub = form.A, form.row_lb, form.row_ub
    A, row_lb, row_ub = merge_parallel_rows(sp.csr_array(A), row_lb, row_ub)
    # in y = x·w (x/η for the allocation), every row divided by its largest coefficient: the LP HiGHS
    # sees does not depend on the units of any resource
    col_s = np.where(weights > 0, 1.0 / np.where(weights > 0, weights, 1.0), 1.0)
    A = (A @ sp.diags(col_s)).tocsr()
    row_max = np.abs(A).max(axis=1).toarray().ravel() if A.shape[0] else np.zeros(0)
    row_s = 1.0 / np.where(row_max > 0, row_max, 1.0)
    A = (sp.diags(row_s) @ A).tocsr()
    clo, cup = _inf(col_lb / col_s), _inf(col_ub / col_s)
    rlo, rup = _inf(row_lb * row_s), _inf(row_ub * row_s)
    sift = sifting == "on" or (sifting == "auto" and n_col >= SIFT_ABOVE)
    extra: dict[str, Any] = {}
    if objective_value is not None and rel is not None:
        extra["face"] = f"objective within {rel:g} of the optimum"
        if exact and EXACT_FACE and (EXACT_SIFTED or not sift):  # the face by complementary slackness
            left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 1e-3)
            face = exact_face(A, form.c * col_s, clo, cup, rlo, rup, form.sense == -1, left)
            if face is not None:
                clo, cup, rlo, rup, pinned = face
                extra = {"face": "complementary slackness", "pinned": pinned}
        # the face row, in the same scaled columns and divided by its largest coefficient
        z = float(objective_value) - form.c0
        slack = rel * max(abs(float(objective_value)), 1e-300)
        lo, up = (z - slack, np.inf) if form.sense == -1 else (-np.inf, z + slack)
        crow = form.c * col_s
        cmax = float(np.abs(crow).max(initial=0.0)) or 1.0
        A = sp.vstack([A, sp.csr_array((crow / cmax).reshape(1, -1))], format="csr")
        rlo, rup = np.append(rlo, _inf(np.array([lo / cmax]))), np.append(rup, _inf(np.array([up / cmax])))
    if not _finite_lp(A, hashed, clo, cup, rlo, rup):  # (HiGHS would reject it and "solve" an empty LP)
        return SolveOutcome(status=Status.ERROR, solver="highs-tiebreak", extra=extra,
                            message="the tie-break LP has numbers that are not finite (scaling overflowed)")
    lp = highs_lp(A, hashed, clo, cup, rlo, rup, highspy.ObjSense.kMaximize)
    h = new_highs()
    for key, value in options.items():
        set_option(h, key, value)
    if time_limit is not None:
        h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
    # as the bridge does: dual simplex for small LPs, interior point + crossover (a vertex) above
    h.setOptionValue("solver", "ipm" if n_col >= IPM_ABOVE else "simplex")
    if not sift:
        h.passModel(lp)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    sifted = None
    if sift:
        # the model's current point (the last LP's vertex) is on the face: its support starts the pool;
        # the sifter reads the LP from these arrays (HiGHS gets the full LP only if it falls back)
        Ac = sp.csc_array(A)
        Ac.sort_indices()
        L = {"A": Ac, "c": np.asarray(hashed, float), "lb": clo, "ub": cup, "rl": rlo, "ru": rup,
             "sense": highspy.ObjSense.kMaximize, "offset": 0.0}
        sifter = Sifter(h, options, algorithm="choose", lp=L)
        sifter.start = np.fromiter((v.value or 0.0 for v in form.variables), float, n_col) / col_s
        restricted: dict[str, Any] = {}
        if SCHUR_START and np.count_nonzero(sifter.start) > DENSE_START * n_col:
            # an interior point (progressive filling's interior rounds) holds nearly every column:
            # as a start it would make the restricted LP the full one. The tie-break LP's optimum is
            # one vertex (generic weights); the Schur-complement IPM converges to it, and its largest
            # SUPPORT_PER_ROW·rows columns hold that vertex's support (a vertex has at most one basic
            # column a row; a point short of the tolerances only makes a worse pool: every column is
            # priced). The restricted LP over them and the initial pool is solved by HiGHS's IPM with
            # crossover: over the vertex's support alone, or with simplex, it ended "Unknown" at
            # 10⁻⁹ tolerances (2 048 × 256)
            left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 1e-3)
            point = SchurIPM(L, tol_feas=POOL_TOL[0], tol_gap=POOL_TOL[1]).solve(left)
            if point is not None and point["status"] in ("optimal", "iteration_limit", "stalled"):
                x0 = np.maximum(point["x"], 0.0)
                k = min(n_col, SUPPORT_PER_ROW * A.shape[0])
                top = np.argpartition(-x0, k - 1)[:k] if k < n_col else np.arange(n_col)
                sifter.start = np.zeros(n_col)
                sifter.start[top] = x0[top]
                restricted = {"solver": "ipm"}
                log.debug("canonical point: Schur-complement interior point (%s, %d iterations); its %d "
                          "largest columns start the pool", point["status"], point["iterations"],
                          np.count_nonzero(sifter.start))
        left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 1e-3)
        sifted = sifter.solve(left, restricted)
        if sifted is None:
            h.passModel(lp)
    if sifted is not None:
        ms, iters = sifted["status"], int(sifted["iterations"])
        objective = sifted.get("objective")
    else:
        with c_output_off_stdout():
            h.run()
        ms = h.getModelStatus()
        info = h.getInfo()
        iters = max(0, info.simplex_iteration_count) + max(0, info.ipm_iteration_count) + max(
            0, info.crossover_iteration_count)
        objective = float(info.objective_function_value)
    solve_s = time.perf_counter() - t1
    status = _STATUS.get(ms, Status.ERROR)
    message = h.modelStatusToString(ms) + (" (sifting)" if sifted is not None else "")
    if status is Status.OPTIMAL:
        x = (sifted["x"] if sifted is not None else np.asarray(h.getSolution().col_value)) * col_s
        miss = _missed_face(form, x, objective_value, rel, col_s)
        if miss is None:
            load_values(form.variables, x)
        else:  # the scaled LP held its rows only to its tolerances: keep the solver's vertex
            status, message = Status.ERROR, miss
    log.info("canonical point: %s in %.3f s (%d columns, %d simplex iterations)", h.modelStatusToString(ms),
             solve_s, n_col, iters)
    return SolveOutcome(status=status, solver="highs-tiebreak", iterations=iters,
                        objective=objective if status is Status.OPTIMAL else None,
                        build_seconds=build_s, solve_seconds=solve_s, message=message, extra=extra)


def _finite_lp(A: sp.csr_array, c: np.ndarray, *bounds: np.ndarray) -> bool:
    """Finite coefficients and costs, and no NaN bound (an infinite bound is no bound)."""
    return bool(np.isfinite(A.data).all() and np.isfinite(c).all()
                and not any(np.isnan(b).any() for b in bounds))


def exact_face(A: sp.csr_array, c: np.ndarray, clo: np.ndarray, cup: np.ndarray, rlo: np.ndarray,
               rup: np.ndarray, maximize: bool, time_limit: float | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int] | None:
    """The LP ``opt c·x over {clo ≤ x ≤ cup, rlo ≤ Ax ≤ rup}``'s face of optima pinned by complementary
    slackness: ``(clo, cup, rlo, rup, k)`` with every column whose reduced cost is not a tie fixed at the
    bound it sits at and every row whose multiplier is not a tie held at its active bound (``k`` of
    them in all), or ``None`` where HiGHS gives no optimal point with multipliers.

    For *any* optimal multipliers ``y`` the optimal set is exactly ``{x feasible: x_j at its bound where
    the reduced cost r_j ≠ 0, row i active where y_i ≠ 0}``: such an ``x`` meets complementary slackness
    with ``y``, so it is optimal, and every optimal ``x`` meets it with every optimal ``y``. So the face
    needs no slack on the objective, and which optimal ``y`` the solver returns does not matter. A reduced
    cost is a tie when ``|r_j| ≤ TIE_REL · max(|c_j|, Σ_i |a_ij y_i|)`` (its column's own prices), a
    multiplier when ``|a_ij y_i| ≤ TIE_REL`` of that for every column ``j`` of its row: both measures
    are unchanged by the units of a column or a row. Solved by HiGHS at :data:`TOLERANCES`, dual simplex
    (interior point with crossover from ``IPM_ABOVE`` columns), on the arrays as given."""
    if not _finite_lp(A, c, clo, cup, rlo, rup):
        return None
    h = new_highs()
    for key, value in TOLERANCES.items():
        h.setOptionValue(key, value)
    if time_limit is not None:
        h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
    h.setOptionValue("solver", "ipm" if A.shape[1] >= IPM_ABOVE else "simplex")
    cost = np.asarray(c, float) * _cost_scale(np.asarray(c, float))
    h.passModel(highs_lp(A, cost, clo, cup, rlo, rup,
                         highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize))
    with c_output_off_stdout():
        h.run()
    sol = h.getSolution()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal or not sol.dual_valid:
        return None
    x, act = np.asarray(sol.col_value, float), np.asarray(sol.row_value, float)
    y, r = np.asarray(sol.row_dual, float), np.asarray(sol.col_dual, float)
    absA = abs(A)
    prices = np.maximum(np.abs(cost), absA.T @ np.abs(y))  # each column's own scale of prices
    big = prices > 0
    fix = big & (np.abs(r) > TIE_REL * np.where(big, prices, 1.0))
    at_lo = np.abs(x - clo) <= np.abs(x - cup)
    bound = np.where(at_lo, clo, cup)
    # (only where the solver's point sits at that bound, as complementary slackness says it does)
    fix &= np.isfinite(bound) & (np.abs(x - bound) <= AT_BOUND * np.maximum(1.0, np.abs(bound)))
    # a row's multiplier against the prices of its columns: the largest |a_ij y_i| / prices_j
    inv = np.where(big, 1.0 / np.where(big, prices, 1.0), 0.0)
    share = (absA @ sp.diags(inv)).max(axis=1).toarray().ravel() * np.abs(y) if A.shape[0] else np.zeros(0)
    held = share > TIE_REL
    rbound = np.where(np.abs(act - rlo) <= np.abs(act - rup), rlo, rup)
    held &= np.isfinite(rbound) & (rlo != rup)
    held &= np.abs(act - rbound) <= AT_BOUND * np.maximum(1.0, np.abs(rbound))
    clo, cup, rlo, rup = clo.copy(), cup.copy(), rlo.copy(), rup.copy()
    clo[fix] = cup[fix] = bound[fix]
    rlo[held] = rup[held] = rbound[held]
    return clo, cup, rlo, rup, int(fix.sum() + held.sum())


def merge_parallel_rows(A: sp.csr_array, row_lb: np.ndarray, row_ub: np.ndarray
                        ) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
    """Rows with identical coefficients as one row with the tightest of their bounds (exact).

    Progressive filling pins each user between a ``floor`` row (≥ its level) and a ``ceiling`` row
    (≤ the same level) on the same share: two parallel rows of zero width, which HiGHS's interior
    point solved to status ``Unknown`` at 2 048 users × 256 servers; one equality row is the same set.
    Rows without a finite bound are dropped."""
    A = sp.csr_array(A)
    A.sort_indices()
    keep = np.isfinite(row_lb) | np.isfinite(row_ub)
    first: dict[bytes, int] = {}
    lo, up = np.array(row_lb, float, copy=True), np.array(row_ub, float, copy=True)
    rows = []
    for r in np.flatnonzero(keep):
        s, e = A.indptr[r], A.indptr[r + 1]
        key = A.indices[s:e].tobytes() + A.data[s:e].tobytes()
        k = first.get(key)
        if k is None:
            first[key] = int(r)
            rows.append(int(r))
        else:
            lo[k], up[k] = max(lo[k], lo[r]), min(up[k], up[r])
    idx = np.asarray(rows, np.int64)
    if idx.size == A.shape[0]:
        return A, lo, up
    return sp.csr_array(A[idx]), lo[idx], up[idx]


def _relative_violations(form: Any, x: np.ndarray, col_s: np.ndarray) -> tuple[float, float]:
    """Largest violation of the model's rows and column bounds at ``x``, each relative to the row's own
    magnitude ``max(|bound|, Σ_j |a_j x_j|, Σ_j |a_j| s_j)`` (``s_j``: the column's scale; a row whose
    bound is 0 is measured by what its columns could hold); and the same with a row that has a bound
    measured by ``max(|bound|, Σ_j |a_j x_j|)`` only, as the verification layer measures χ's rows (what
    its columns could hold can be far larger: a small server's capacity row of users who could run
    thousands of tasks elsewhere)."""
    act = form.A @ x
    held = np.abs(form.A) @ np.abs(x)
    mag = np.maximum(held, np.abs(form.A) @ col_s)
    with np.errstate(invalid="ignore"):
        over = np.maximum(np.nan_to_num(act - form.row_ub, nan=0.0, neginf=0.0),
                          np.nan_to_num(form.row_lb - act, nan=0.0, neginf=0.0))
        bound = np.maximum(np.where(np.isfinite(form.row_ub), np.abs(form.row_ub), 0.0),
                           np.where(np.isfinite(form.row_lb), np.abs(form.row_lb), 0.0))
        rel = over / np.maximum(np.maximum(bound, mag), 1e-300)
        rel_bound = over / np.maximum(np.maximum(bound, np.where(bound > 0, held, mag)), 1e-300)
        col = np.maximum(np.nan_to_num(x - form.col_ub, nan=0.0, neginf=0.0),
                         np.nan_to_num(form.col_lb - x, nan=0.0, neginf=0.0)) / np.maximum(
                             np.maximum(np.abs(x), col_s), 1e-300)
    worst_col = col.max(initial=0.0)
    return (float(max(rel.max(initial=0.0), worst_col)), float(max(rel_bound.max(initial=0.0), worst_col)))


def _missed_face(form: Any, x: np.ndarray, objective_value: float | None, rel: float | None,
                 col_s: np.ndarray) -> str | None:
    """Why the tie-break's point ``x`` is not on the face (``None`` when it is): a row of the model
    violated by more than 1e-7 of its magnitude (the solver holds its scaled rows to ~1e-9 of theirs;
    the verification layer allows 1e-6) and more than ten times the solver's own point violates it, or
    by more than :data:`FEAS_REL` of its bound (the verification's measure; a point past it would end
    ``error``: seen at 1.3e-6 on a row mixing demands six decades apart) and more than ten times the
    solver's point, or the objective more than the face's slack below the optimum."""
    old = np.array([v.value if v.value is not None else 0.0 for v in form.variables], float)
    (worse, worse_bound), (before, before_bound) = (_relative_violations(form, v, col_s) for v in (x, old))
    if worse > max(1e-7, 10 * before):
        return (f"the tie-break point violates a row by {worse:.2g} of its magnitude (the solver's: "
                f"{before:.2g})")
    if worse_bound > max(FEAS_REL, 10 * before_bound):
        return f"the tie-break point violates a row by {worse_bound:.2g} of its bound"
    if objective_value is not None:
        z = float(objective_value)
        got = float(form.c @ x) + form.c0
        lost = (z - got) if form.sense == -1 else (got - z)
        if lost > max(rel or 0.0, 1e-9) * max(abs(z), 1e-300):
            return f"the tie-break point is {lost:.2g} below the optimum {z:.6g}"
    return None
