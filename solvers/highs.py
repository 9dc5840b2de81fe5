"""HiGHS (highspy) for the LPs and MILPs of the Pyomo models, persistent across re-solves.

:class:`HighsBridge` compiles a Pyomo model once (:func:`~fairalloc.solvers.compile.compile_linear`),
hands the matrix to ``highspy`` and keeps it. Iterative mechanisms change the *Pyomo model* (fix or
unfix variables, change bounds and mutable parameters in constraint bounds, activate or deactivate
constraints, add constraints, change the objective) and call :meth:`HighsBridge.update`, which pushes
only bounds, costs and new rows to HiGHS: the basis is kept and the next solve is warm. Coefficient
changes inside existing rows are pushed by :meth:`HighsBridge.update_rows`.

Statuses are mapped, never guessed: a time or iteration limit is reported as such even when HiGHS holds
a feasible point, and "infeasible or unbounded" is resolved by one re-solve without presolve.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

import highspy
import numpy as np
import pyomo.environ as pyo
import scipy.sparse as sp
from pyomo.core.expr.visitor import identify_mutable_parameters

from fairalloc.solvers.compile import (
    INF,
    active_objective,
    bound_sources,
    col_bounds,
    compile_linear,
    eval_bounds,
    linear_terms,
    row_bounds,
)
from fairalloc.solvers.kkt import kkt_residuals
from fairalloc.solvers.linear import ArrayLinearExpression, column_bounds, load_values
from fairalloc.solvers.outcome import SolveOutcome
from fairalloc.solvers.quiet import c_output_off_stdout
from fairalloc.status import Status

__all__ = ["HighsBridge", "highs_version"]

log = logging.getLogger(__name__)
IPM_ABOVE = 20_000  # columns: large LPs go to IPM when the user chose no algorithm
SIFT_ABOVE = 50_000  # columns: sifting="auto" sifts LPs at least this wide
SIFTING = ("auto", "on", "off")
INTERIOR_ABOVE = 50_000  # columns: interior="auto" solves LPs at least this wide without crossover
INTERIOR = ("auto", "on", "off")
# columns: schur="auto" takes interior points from the Schur-complement IPM from this size. Below it
# IPX was as fast or faster: 512 x 128 with task limits (65 537 columns, one user frozen a round) took
# 110 s against 59 s (drfh); 768 x 96 mixed 10.4 s against 10.6 s; 1024 x 128 mixed 14.9 s against
# 21.9 s and 2048 x 256 mixed 58.7 s against 145.1 s (tsf-er; docs/performance.md)
SCHUR_ABOVE = 100_000
SCHUR = ("auto", "on", "off")
MS = highspy.HighsModelStatus

_STATUS = {
    MS.kOptimal: Status.OPTIMAL,
    MS.kModelEmpty: Status.OPTIMAL,
    MS.kInfeasible: Status.INFEASIBLE,
    MS.kTimeLimit: Status.TIME_LIMIT,
    MS.kIterationLimit: Status.ITERATION_LIMIT,
    MS.kSolutionLimit: Status.ITERATION_LIMIT,
}


def _has_named_expression(expr: Any) -> bool:
    """Whether a named ``Expression`` occurs in ``expr`` (array-backed rows hold variables only and
    are not expanded)."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ArrayLinearExpression) or not hasattr(e, "args"):
            continue
        if getattr(e, "is_named_expression_type", lambda: False)():
            return True
        if not getattr(e, "is_variable_type", lambda: False)():
            stack.extend(e.args)
    return False


# HiGHS's primal and dual feasibility tolerances for the mechanisms' LPs (its defaults are 1e-7, on the
# scaled LP). At 1e-7 a max-min LP's level could sit up to ~5e-7 above what the rows allow (it uses the
# slack the tolerance gives every row), and by a different amount in other units of the same instance:
# drfh on a restated random_instance(4, 16, 5, 3, external=2, scoped, placement) gave levels 5e-7 apart
# and allocations 5.4e-6 apart; at 1e-9 they agree to 3e-13.
TOLERANCES = {"primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9}


def new_highs() -> highspy.Highs:
    """A ``highspy.Highs`` with its logging off, created with file descriptor 1 guarded (highspy ≥ 1.16
    prints a banner from the constructor)."""
    with c_output_off_stdout():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        # HiGHS drops matrix entries below 1e-9 by default; a share coefficient κ = d/c is 1e-10 for a
        # demand of 1e-4 on a capacity of 1e6 (the smallest value HiGHS accepts here is 1e-12)
        h.setOptionValue("small_matrix_value", 1e-12)
    return h


class ArrayLP(NamedTuple):
    """An LP solved by :func:`solve_arrays`: the mapped status, the point (``None`` unless optimal), the
    objective, HiGHS's iterations (simplex, interior point and crossover together) and its simplex
    interrupt checks (``work``; 0 when not counted: the interior point method makes none)."""

    status: Status
    x: np.ndarray | None
    objective: float
    iterations: int
    work: int


def set_option(h: Any, key: str, val: Any) -> None:
    """Set one HiGHS option on the handle ``h``; a rejected one (unknown or of the wrong type) raises
    :class:`~fairalloc.errors.ParameterError` naming it."""
    try:
        ok = h.setOptionValue(key, val) == highspy.HighsStatus.kOk
    except TypeError:
        ok = False
    if not ok:
        from fairalloc.errors import ParameterError

        raise ParameterError(f"HiGHS option {key}={val!r} was rejected (unknown option or wrong type)")


def solve_arrays(c: np.ndarray, A_ub: Any, b_ub: np.ndarray, A_eq: Any, b_eq: np.ndarray,
                 lower: np.ndarray, upper: np.ndarray, options: dict[str, Any] | None = None,
                 work_limit: int | None = None) -> ArrayLP:
    """``min cᵀx`` s.t. ``A_ub x ≤ b_ub``, ``A_eq x = b_eq``, ``lower ≤ x ≤ upper`` in HiGHS (highspy),
    for numpy code that builds its LP from arrays (sparse or dense matrices; PS-DSF's exact finish).
    ``options`` are HiGHS options (e.g. ``time_limit``, tolerances). A status other than optimal,
    infeasible, a time or an iteration limit maps to ``error``.

    ``work_limit`` stops the simplex after that many of its interrupt checks (HiGHS's simplex interrupt
    callback; status ``iteration_limit``): a measure of work that, unlike seconds, does not depend on the
    machine, and that, unlike iterations, also grows where HiGHS spends its time between iterations. On a
    finish LP of PS-DSF that HiGHS's dual simplex did not end (it kept reporting "possibly dual
    unbounded"), 949 iterations took 10 s and 76 339 checks; on an LP it ends, a check costs about one
    iteration (2 323 iterations, 3 017 checks, 0.33 s)."""
    A = sp.vstack([sp.csr_array(A_ub), sp.csr_array(A_eq)]).tocsr()
    lp = highs_lp(A, c, lower, upper, np.r_[np.full(A_ub.shape[0], -np.inf), b_eq], np.r_[b_ub, b_eq])
    h = new_highs()
    for key, val in (options or {}).items():
        set_option(h, key, val)
    h.passModel(lp)
    checks = [0]
    if work_limit is not None:
        def count(event: Any) -> None:
            checks[0] += 1
            if checks[0] >= work_limit:
                event.interrupt()

        h.cbSimplexInterrupt.subscribe(count)
    h.run()
    ms = h.getModelStatus()
    status = _STATUS.get(ms, Status.ERROR)
    if ms == MS.kInterrupt and work_limit is not None and checks[0] >= work_limit:
        status = Status.ITERATION_LIMIT
    info = h.getInfo()
    x = np.asarray(h.getSolution().col_value) if status is Status.OPTIMAL else None
    its = info.simplex_iteration_count + info.ipm_iteration_count + info.crossover_iteration_count
    return ArrayLP(status, x, float(info.objective_function_value), int(its), checks[0])


def highs_version() -> str:
    h = new_highs()
    return f"{h.versionMajor()}.{h.versionMinor()}.{h.versionPatch()}"


def _inf(a: np.ndarray) -> np.ndarray:
    return np.clip(a, -highspy.kHighsInf, highspy.kHighsInf)


def highs_lp(A: Any, c: np.ndarray, col_lb: np.ndarray, col_ub: np.ndarray, row_lb: np.ndarray,
             row_ub: np.ndarray, sense: Any = None, offset: float = 0.0) -> highspy.HighsLp:
    """A ``highspy.HighsLp`` from arrays: ``A`` a scipy CSR (passed row-wise) or CSC (column-wise) matrix,
    the bounds as given (infinite ones clipped to HiGHS's infinity), minimised unless ``sense`` says."""
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = np.asarray(c, float)
    lp.col_lower_, lp.col_upper_ = _inf(np.asarray(col_lb, float)), _inf(np.asarray(col_ub, float))
    lp.row_lower_, lp.row_upper_ = _inf(np.asarray(row_lb, float)), _inf(np.asarray(row_ub, float))
    lp.sense_ = highspy.ObjSense.kMinimize if sense is None else sense
    lp.offset_ = float(offset)
    MF = highspy.MatrixFormat
    lp.a_matrix_.format_ = MF.kColwise if A.format == "csc" else MF.kRowwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data
    return lp


def _row_scale(lo: np.ndarray, up: np.ndarray, rowmax: np.ndarray) -> np.ndarray:
    """``1/|b|`` for a row with a finite non-zero bound ``b`` (the larger one if both), else one over its
    largest coefficient: every capacity, limit and budget row then reads "≤ 1"."""
    b = np.maximum(np.where(np.isfinite(lo), np.abs(lo), 0.0), np.where(np.isfinite(up), np.abs(up), 0.0))
    b = np.where(b > 0, b, rowmax)
    return 1.0 / np.where(b > 0, b, 1.0)


def _cost_scale(cost: np.ndarray) -> float:
    """One factor for the objective: its largest scaled cost becomes 1, so the solver's dual tolerance
    (10⁻⁷) is relative to it (a welfare of 10⁻⁹ tasks otherwise sits below it entirely)."""
    top = float(np.abs(cost).max(initial=0.0))
    return 1.0 / top if top > 0 and np.isfinite(top) else 1.0


def scales(A: Any, row_lb: np.ndarray, row_ub: np.ndarray, integer: np.ndarray,
           row_const: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row and column factors ``R``, ``C`` for the LP HiGHS is given, ``A' = R·A·C``, ``x = C·x'``.

    Rows with a finite non-zero bound (capacities, limits, budgets) by that bound; every continuous
    column by its largest entry in those rows, so its unit becomes "the most of its tightest row it may
    use": a user that can run 1.7·10⁻⁸ tasks and one that can run 10⁹ both live near 1, and the
    solver's absolute tolerances (10⁻⁷ on bounds and rows) act relative to each row's bound and each
    user's reach. (Without it a column of coefficient 8·10⁴ came back at −2·10⁻⁹, within tolerance, and
    its row, once that entry was read as 0, was 14 % over.) Columns in no such row (a max-min level
    ``t``) keep their unit; rows without such a bound (``share ≥ t``), and rows whose bound is a
    constant of their body (a PS-DSF offset), are scaled by their largest entry once the columns are.
    An entry scaled below 10⁻¹² of its row's largest is one HiGHS drops: that
    column cannot move the row by more than that."""
    A = sp.csr_array(A)
    absA = abs(A)
    lo, up = np.asarray(row_lb, float), np.asarray(row_ub, float)
    bound = (np.isfinite(lo) & (lo != 0)) | (np.isfinite(up) & (up != 0))
    if row_const is not None:
        bound &= np.asarray(row_const, float) == 0
    rowmax = absA.max(axis=1).toarray().ravel() if A.shape[0] else np.zeros(0)
    R = np.where(bound, _row_scale(lo, up, rowmax), 0.0)
    colmax = (sp.diags(R) @ absA).max(axis=0).toarray().ravel() if A.shape[0] else np.zeros(A.shape[1])
    C = np.where((colmax > 0) & ~np.asarray(integer, bool), 1.0 / np.where(colmax > 0, colmax, 1.0), 1.0)
    if A.shape[0] and not bound.all():
        scaled_max = (absA @ sp.diags(C)).max(axis=1).toarray().ravel()
        R = np.where(bound, R, 1.0 / np.where(scaled_max > 0, scaled_max, 1.0))
    informative = (colmax > 0) & ~np.asarray(integer, bool)
    if _spread(R[bound]) <= WELL_SCALED and _spread(C[informative]) <= WELL_SCALED:
        # numbers within 10³ of each other: HiGHS's own scaling is enough, and the scaled LP cost 1.1-1.6×
        # the time at 1024 users × 128 servers (IPM); leave the LP as it is
        return np.ones_like(R), np.ones_like(C)
    return R, C


WELL_SCALED = 1e3  # spread of the row and column factors below which the bridge passes the LP unscaled


def _spread(v: np.ndarray) -> float:
    v = v[(v > 0) & np.isfinite(v)]
    return float(v.max() / v.min()) if v.size else 1.0


class HighsBridge:
    """A Pyomo model held in a ``highspy.Highs`` object.

    ``algorithm`` is HiGHS's ``solver`` option (``choose``, ``simplex``, ``ipm``, ``pdlp``); ``options``
    are passed to HiGHS verbatim.
    """

    name = "highs"

    def __init__(self, model: Any, algorithm: str = "choose", options: dict[str, Any] | None = None,
                 loglevel: int = logging.DEBUG) -> None:
        t0 = time.perf_counter()
        self.model = model
        self.form = compile_linear(model)
        self.R, self.C = scales(self.form.A, self.form.row_lb, self.form.row_ub, self.form.integer,
                                self.form.row_const)
        self.scaled = bool((self.C != 1).any() or (self.R != 1).any())
        self.K = _cost_scale(self.form.c * self.C) if self.scaled else 1.0
        self.h = new_highs()
        self.h.setOptionValue("solver", algorithm)
        options = dict(options or {})
        self.sifting = _sifting_mode(options.pop("sifting", "auto"))
        # interior points by the Schur-complement IPM (solvers/schur_ipm.py) where the LP has its
        # shape: "auto" from SCHUR_ABOVE columns, "on" whatever the size; "off": HiGHS's IPX for
        # every interior point
        self.schur = _schur_mode(options.pop("schur", "auto"))
        # interior points instead of vertices (_interior_mode): off unless the user asks, or a caller
        # that reads interior multipliers (progressive filling) sets "auto" where the user did not
        given = _interior_mode(options.pop("interior", None))
        self.interior = given or "off"
        self.interior_default = given is None
        # tolerances tighter than HiGHS's defaults, unless the user sets them (not for PDLP, a
        # first-order method): see TOLERANCES
        tight = {} if algorithm == "pdlp" or options.get("solver") == "pdlp" else {
            k: v for k, v in TOLERANCES.items() if k not in options}
        for k, v in {**tight, **options}.items():
            self._set_option(k, v)
        self.algorithm = algorithm
        self.user_options = dict(options)
        self.sift_options = {**tight, **options}  # the restricted LPs' (Sifter)
        self._sift: Sifter | None = None
        self.sift_stats: dict[str, Any] = {}
        self.solves = 0
        self.warm_retries = 0  # warm re-solves HiGHS failed that were run again (primal simplex)
        # how a re-solve starts: "warm" (HiGHS's choice of simplex from the previous basis),
        # "primal" (primal simplex from the previous basis: the basis stays primal feasible when a
        # loop only relaxes rows, as progressive filling does) or "cold" (from scratch, presolve
        # again, on the model HiGHS already holds). The user's simplex_strategy takes precedence.
        self.resolve = "warm"
        self._pass_model()
        self._inactive: set[int] = set()
        self._obj_expr: Any = None  # the objective expression last pushed, and whether it holds
        self._obj_mutable = True  # mutable parameters (then it is re-read on every update)
        self._AT: tuple[Any, Any] | None = None  # (A, Aᵀ in CSR) for the KKT residuals
        self.build_seconds = time.perf_counter() - t0
        self.x = np.zeros(0)
        self.row_value = np.zeros(0)
        self.row_dual: np.ndarray | None = np.zeros(0)  # None: the last solve gave no multipliers
        self.col_dual: np.ndarray | None = np.zeros(0)
        log.log(loglevel, "HiGHS model %s: %d rows, %d columns, %d nonzeros (compiled in %.3f s)",
                model.name, *self.form.shape, self.form.A.nnz, self.build_seconds)

    # ------------------------------------------------------------------ setup
    def _set_option(self, key: str, val: Any) -> None:
        set_option(self.h, key, val)

    def _get_option(self, key: str) -> Any:
        val = self.h.getOptionValue(key)
        return val[1] if isinstance(val, tuple) else val  # some highspy versions return (status, v)

    def _pass_model(self) -> None:
        f = self.form
        R, C = self.R, self.C
        rows = np.repeat(np.arange(f.A.shape[0]), np.diff(f.A.indptr))
        scaled = sp.csr_array((f.A.data * R[rows] * C[f.A.indices], f.A.indices, f.A.indptr), f.A.shape)
        lp = highs_lp(scaled, f.c * C * self.K, f.col_lb / C, f.col_ub / C, f.row_lb * R, f.row_ub * R,
                      highspy.ObjSense.kMinimize if f.sense == 1 else highspy.ObjSense.kMaximize,
                      f.c0 * self.K)
        # the same arrays for the first sifted solve (read back from HiGHS after any update)
        A = sp.csc_array(scaled)
        A.sort_indices()
        self._passed: dict[str, Any] | None = {
            "A": A, "c": f.c * C * self.K, "lb": _inf(f.col_lb / C), "ub": _inf(f.col_ub / C),
            "rl": _inf(f.row_lb * R), "ru": _inf(f.row_ub * R), "sense": lp.sense_,
            "offset": float(f.c0 * self.K)} if self._sifts_first() else None
        if f.integer.any():
            lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                               for i in f.integer]
        self.h.passModel(lp)

    def _sifts_first(self) -> bool:
        return not self.form.integer.any() and (self.sifting == "on" or (
            self.sifting == "auto" and self.form.shape[1] >= SIFT_ABOVE))

    @property
    def is_mip(self) -> bool:
        return bool(self.form.integer.any())

    # ------------------------------------------------------------------ persistent updates
    def update(self, variables: bool = True) -> None:
        """Push the model's current bounds, active flags, new constraints and objective to HiGHS.

        Mutable parameters inside constraint *bodies* (coefficients, or constants such as an offset)
        are compiled into the matrix and the row's constant; push their changes with
        :meth:`update_rows`.

        ``variables=False`` skips re-reading variable bounds (when the caller knows only constraints
        changed: the scan costs ~1 µs per variable).

        A row whose bounds were plain numbers when compiled keeps them while its expression object
        is the same (Pyomo expressions are immutable; ``set_value`` replaces them), so only rows
        with mutable bounds are evaluated again: iterative mechanisms call this after every LP.
        """
        self._passed = None
        f = self.form
        seen = np.zeros(len(f.constraints), bool)
        new: list[Any] = []
        replaced: list[Any] = []  # set_value gave the row a new expression: body and bounds
        index, sources, exprs = f.row_index, f.row_bound_src, f.row_expr
        for comp in self.model.component_objects(pyo.Constraint, active=True, descend_into=True):
            for con in comp.values():
                if not con.active:
                    continue
                r = index.get(id(con))
                if r is None:
                    new.append(con)
                    continue
                seen[r] = True
                expr = con.expr
                if expr is not exprs[r]:
                    replaced.append(con)
                elif sources[r] is not None:
                    f.nat_lb[r], f.nat_ub[r] = eval_bounds(sources[r], f.row_const[r])
        # deactivated or deleted rows impose nothing
        lbs, ubs = np.where(seen, f.nat_lb, -INF), np.where(seen, f.nat_ub, INF)
        changed = np.flatnonzero((lbs != f.row_lb) | (ubs != f.row_ub))
        if changed.size:
            R = self.R[changed]
            self.h.changeRowsBounds(changed.size, changed.astype(np.int32), _inf(lbs[changed] * R),
                                    _inf(ubs[changed] * R))
            f.row_lb, f.row_ub = lbs, ubs
        if new:
            self._add_rows(new)
        if replaced:
            self.update_rows(replaced)
        if variables:
            lb, ub, _ = column_bounds(f.variables)
            changed = np.flatnonzero((lb != f.col_lb) | (ub != f.col_ub))
            if changed.size:
                C = self.C[changed]
                self.h.changeColsBounds(changed.size, changed.astype(np.int32),
                                        _inf(lb[changed] / C), _inf(ub[changed] / C))
                f.col_lb, f.col_ub = lb, ub
        self._update_objective()

    def _row_terms(self, con: Any) -> tuple[np.ndarray, np.ndarray, float]:
        """Columns (new variables get new columns), summed coefficients and constant of a row."""
        f = self.form
        n_before = len(f.variables)
        cols: list[int] = []
        vals: list[float] = []
        const = linear_terms(con.body, f.columns, cols, vals, con)
        self._add_new_columns(n_before)
        c, inv = np.unique(np.asarray(cols, np.int64), return_inverse=True)
        v = np.zeros(c.size)
        np.add.at(v, inv, np.asarray(vals, float))
        return c, v, const

    def _add_rows(self, cons: list[Any]) -> None:
        f = self.form
        rows = [self._row_terms(con) for con in cons]  # first: new columns before new rows
        lo = np.empty(len(cons))
        up = np.empty(len(cons))
        scale = np.empty(len(cons))
        for k, (con, (c, v, const)) in enumerate(zip(cons, rows)):
            lo[k], up[k] = row_bounds(con, const)
            vc = v * self.C[c]
            rk = scale[k] = _row_scale(lo[k:k + 1], up[k:k + 1],
                                       np.abs(vc).max(initial=0.0, keepdims=True))[0] if self.scaled else 1.0
            self.h.addRow(max(lo[k] * rk, -highspy.kHighsInf), min(up[k] * rk, highspy.kHighsInf), c.size,
                          c.astype(np.int32), vc * rk)
            f.row_index[id(con)] = len(f.constraints)
            f.constraints.append(con)
            f.row_expr.append(con.expr)
        self.R = np.append(self.R, scale)
        f.row_lb, f.row_ub = np.append(f.row_lb, lo), np.append(f.row_ub, up)
        f.nat_lb, f.nat_ub = np.append(f.nat_lb, lo), np.append(f.nat_ub, up)
        f.row_const = np.append(f.row_const, [const for _, _, const in rows])
        f.row_bound_src.extend(bound_sources(con) for con in cons)
        self._grow_matrix([(c, v) for c, v, _ in rows])
        log.debug("added %d rows to the HiGHS model", len(cons))

    def _grow_matrix(self, rows: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Keep the cached matrix in step with HiGHS: new columns, then ``rows`` appended."""
        self._passed = None
        f = self.form
        A = sp.csr_array((f.A.data, f.A.indices, f.A.indptr), shape=(f.A.shape[0], len(f.variables)))
        if rows:
            indptr = np.concatenate([[0], np.cumsum([c.size for c, _ in rows])])
            B = sp.csr_array((np.concatenate([v for _, v in rows]),
                              np.concatenate([c for c, _ in rows]), indptr),
                             shape=(len(rows), len(f.variables)))
            A = sp.csr_array(sp.vstack([A, B], format="csr"))
        f.A = A

    def _add_new_columns(self, n_before: int) -> None:
        f = self.form
        for v in f.variables[n_before:]:
            lo, up = col_bounds(v)
            self.h.addCol(0.0, max(lo, -highspy.kHighsInf), min(up, highspy.kHighsInf), 0, [], [])
            if v.is_integer() or v.is_binary():
                self.h.changeColIntegrality(len(f.col_lb), highspy.HighsVarType.kInteger)
            f.col_lb = np.append(f.col_lb, lo)
            f.col_ub = np.append(f.col_ub, up)
            self.C = np.append(self.C, 1.0)  # a column added later keeps its own unit
            f.integer = np.append(f.integer, v.is_integer() or v.is_binary())
            f.c = np.append(f.c, 0.0)
        if len(f.variables) > f.A.shape[1]:
            self._grow_matrix([])

    def _update_objective(self) -> None:
        f = self.form
        obj = active_objective(self.model)
        if obj is f.objective and obj.expr is self._obj_expr and not self._obj_mutable and \
                (1 if obj.sense == pyo.minimize else -1) == f.sense:
            return  # the same objective object, expression and sense, with no mutable parameter
        self._obj_expr = obj.expr
        # re-read every time if a mutable parameter or a named Expression (whose set_value changes
        # the objective without changing obj.expr) is in it
        self._obj_mutable = _has_named_expression(obj.expr) or any(
            True for _ in identify_mutable_parameters(obj.expr))
        n_before = len(f.variables)
        cols: list[int] = []
        vals: list[float] = []
        c0 = linear_terms(obj.expr, f.columns, cols, vals, obj)
        self._add_new_columns(n_before)
        c = np.zeros(len(f.variables))
        np.add.at(c, np.asarray(cols, np.int64), np.asarray(vals, float))
        sense = 1 if obj.sense == pyo.minimize else -1
        K = _cost_scale(c * self.C) if self.scaled else 1.0
        if np.isclose(K, self.K, rtol=1e-3):
            changed, offset = np.flatnonzero(c != f.c), c0 != f.c0
        else:  # a new objective of another magnitude: every cost in the new scale
            self.K = K
            changed, offset = np.arange(c.size), True
        if changed.size:
            cost = c[changed] * self.C[changed] * self.K
            self.h.changeColsCost(changed.size, changed.astype(np.int32), cost)
        if offset:
            self.h.changeObjectiveOffset(c0 * self.K)
        if sense != f.sense:
            self.h.changeObjectiveSense(highspy.ObjSense.kMinimize if sense == 1
                                        else highspy.ObjSense.kMaximize)
        f.c, f.c0, f.sense, f.objective = c, c0, sense, obj

    def update_rows(self, constraints: list[Any]) -> None:
        """Re-read the coefficients, constants and bounds of existing ``constraints`` (e.g. after a
        mutable ``Param`` used as a coefficient or an offset changed). Only coefficients that
        differ are sent to HiGHS."""
        self._passed = None
        f = self.form
        idx = np.empty(len(constraints), np.int64)
        lo = np.empty(len(constraints))
        up = np.empty(len(constraints))
        edits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for k, con in enumerate(constraints):
            r = idx[k] = f.row_index[id(con)]
            c, v, const = self._row_terms(con)
            s, e = f.A.indptr[r], f.A.indptr[r + 1]
            oc, ov = f.A.indices[s:e], f.A.data[s:e]
            lo[k], up[k] = row_bounds(con, const)
            if not (oc.size == c.size and np.array_equal(np.sort(oc), c)
                    and np.array_equal(ov[np.argsort(oc)], v)):
                old = dict(zip(oc.tolist(), ov.tolist()))
                for j in set(old) - set(c.tolist()):
                    self.h.changeCoeff(int(r), j, 0.0)
                # new coefficients (a re-scaled max-min row: 10⁷ times smaller) get the row a new scale:
                # its largest scaled entry (not its bound, which may be a body constant such as a
                # PS-DSF offset, large next to the level's coefficient)
                top = float(np.abs(v * self.C[c]).max(initial=0.0))
                rs = 1.0 / top if top > 0 and self.scaled else 1.0
                rescaled = not np.isclose(rs, self.R[r], rtol=1e-3)
                self.R[r] = rs
                for j, val in zip(c.tolist(), v.tolist()):
                    if rescaled or old.get(j) != val:
                        self.h.changeCoeff(int(r), j, val * rs * self.C[j])
                edits[int(r)] = (c, v)
            f.row_const[r] = const
            f.row_expr[r], f.row_bound_src[r] = con.expr, bound_sources(con)
        f.nat_lb[idx], f.nat_ub[idx] = lo, up
        active = np.fromiter((con.active for con in constraints), bool, len(constraints))
        lo, up = np.where(active, lo, -INF), np.where(active, up, INF)
        R = self.R[idx]
        self.h.changeRowsBounds(idx.size, idx.astype(np.int32), _inf(lo * R), _inf(up * R))
        f.row_lb[idx], f.row_ub[idx] = lo, up
        if edits:
            self._replace_rows(edits)

    def _replace_rows(self, edits: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """Put new row contents into the cached matrix (it mirrors what HiGHS holds)."""
        A = sp.lil_array(self.form.A)
        for r, (c, v) in edits.items():
            A.rows[r] = c.tolist()
            A.data[r] = v.tolist()
        self.form.A = sp.csr_array(A)

    def _sync_matrix(self) -> None:
        """Read the matrix back from HiGHS (a safety net: the cached one is kept in step)."""
        lp = self.h.getLp()
        m = lp.a_matrix_
        shape = (lp.num_row_, lp.num_col_)
        if m.format_ == highspy.MatrixFormat.kColwise:
            A = sp.csc_array((np.asarray(m.value_), np.asarray(m.index_), np.asarray(m.start_)), shape)
        else:
            A = sp.csr_array((np.asarray(m.value_), np.asarray(m.index_), np.asarray(m.start_)), shape)
        self.form.A = sp.csr_array(sp.diags(1.0 / self.R) @ sp.csr_array(A) @ sp.diags(1.0 / self.C))

    # ------------------------------------------------------------------ solve
    def solve(self, time_limit: float | None = None, options: dict[str, Any] | None = None,
              kkt: bool = True) -> SolveOutcome:
        """Solve, load the point into the Pyomo variables, keep the multipliers, report a status."""
        self._set_option("time_limit", float(time_limit) if time_limit is not None else INF)
        options = dict(options or {})
        interior = self._use_interior(_interior_mode(options.pop("interior", self.interior)), options)
        mode = _sifting_mode(options.pop("sifting", self.sifting))
        if self._use_sifting(mode, options):  # sifting's restricted LPs return vertices
            return self._solve_sifting(time_limit, options, kkt)
        if interior and not options and (self.schur == "on" or (
                self.schur == "auto" and self.form.shape[1] >= SCHUR_ABOVE)):
            out = self._solve_schur(time_limit, kkt)
            if out is not None:
                return out
        if interior:
            # HiGHS's IPM without crossover (crossover was most of each progressive-filling round
            # at 2048 x 256 mixed, docs/performance.md)
            options.update(solver="ipm", run_crossover="off")
        if (self.algorithm == "choose" and "solver" not in options
                and self.form.shape[1] >= IPM_ABOVE and not self.is_mip):
            # max-min LPs are highly degenerate: dual simplex stalls for minutes, cold (31 s vs 4 s
            # IPM, DRFH 1024x128) and even warm after freezing users (TSF-ER 1000x30: 200 s for 5
            # warm simplex rounds vs 11 s for 5 IPM rounds); crossover still returns a basis
            options["solver"] = "ipm"
        pdlp = options.get("solver", self.user_options.get("solver", self.algorithm)) == "pdlp"
        if pdlp and "presolve" not in options and "presolve" not in self.user_options:
            # HiGHS's postsolve of a PDLP point loses the duals (seen: "Optimal" turned "Unknown",
            # 2.4 % dual infeasibility, on every max-min LP); without presolve PDLP converges
            options["presolve"] = "off"
        if (self.resolve == "primal" and self.solves and "simplex_strategy" not in options
                and "simplex_strategy" not in self.user_options):
            options["simplex_strategy"] = 4  # primal simplex from the previous basis
        saved: dict[str, Any] = {}
        t0 = time.perf_counter()
        try:
            for k, v in options.items():  # options given here hold for this solve only
                old = self._get_option(k)
                self._set_option(k, v)  # raises on an option HiGHS rejects
                saved[k] = old
            self.solves += 1
            t0 = time.perf_counter()
            with c_output_off_stdout():  # cuPDLP-C prints a warning per free row with printf
                self._run()
        finally:
            for k, v in saved.items():
                self._set_option(k, v)
        solve_s = time.perf_counter() - t0
        ms = self.h.getModelStatus()
        message = self.h.modelStatusToString(ms)
        status = _STATUS.get(ms, Status.ERROR)
        info = self.h.getInfo()
        iters = max(0, info.simplex_iteration_count) + max(0, info.ipm_iteration_count) + max(
            0, info.crossover_iteration_count) + max(0, info.pdlp_iteration_count)
        if self.is_mip:
            iters = max(0, int(info.mip_node_count))
        t1 = time.perf_counter()
        sol = self.h.getSolution()
        has_point = bool(sol.value_valid) and status in (Status.OPTIMAL, Status.TIME_LIMIT,
                                                         Status.ITERATION_LIMIT)
        out = SolveOutcome(status=status, solver=f"highs-{self.algorithm}" if self.algorithm !=
                           "choose" else "highs", message=message, iterations=int(iters),
                           solve_seconds=solve_s, extra={"has_point": has_point,
                                                         **({"interior": True} if interior else {})})
        if interior and status is Status.OPTIMAL:
            out.message += " (interior point, no crossover)"
        if has_point:  # from HiGHS's units: x = C·x', activity a'/R, row duals R·y', reduced costs z'/C
            self.x = np.asarray(sol.col_value, float) * self.C
            self.row_value = np.asarray(sol.row_value, float) / self.R
            load_values(self.form.variables, self.x)
            out.objective = float(info.objective_function_value) / self.K
            if not sol.dual_valid:  # no multipliers for this point: none of the last solve's either
                self.row_dual = self.col_dual = None
            if sol.dual_valid:
                self.row_dual = np.asarray(sol.row_dual, float) * self.R / self.K
                self.col_dual = np.asarray(sol.col_dual, float) / (self.C * self.K)
                if kkt and not self.is_mip:
                    out.kkt = self.kkt()
        out.load_seconds = time.perf_counter() - t1
        if status is not Status.OPTIMAL:
            log.info("HiGHS stopped: %s", message)
        return out

    def _use_interior(self, mode: str, options: dict[str, Any]) -> bool:
        """Whether this solve runs HiGHS's IPM without crossover (an interior point)."""
        if mode == "off" or self.is_mip:
            return False
        if ("solver" in options or "solver" in self.user_options or self.algorithm != "choose"
                or "run_crossover" in options or "run_crossover" in self.user_options):
            return False  # the user chose a HiGHS algorithm or crossover setting
        return mode == "on" or self.form.shape[1] >= INTERIOR_ABOVE

    def _use_sifting(self, mode: str, options: dict[str, Any]) -> bool:
        if mode == "off" or self.is_mip or (self._sift is not None and self._sift.gave_up):
            return False
        if mode == "auto" and (self.form.shape[1] < SIFT_ABOVE or self.solves > 0):
            # the first solve of a wide LP only: at 1024x128 mixed (TSF-ER) sifting every round took
            # 0.71x the floor (load 1.4-1.9), sifting the first round only 0.70x (load 6.0-6.5); at
            # 2048x256 mixed sifting every round was stopped unfinished after 1 080 s against the
            # floor's 419 s (idle): the later rounds' pools grow to most of the columns
            return False
        return options.get("solver", self.user_options.get("solver", self.algorithm)) != "pdlp"

    def _solve_sifting(self, time_limit: float | None, options: dict[str, Any], kkt: bool) -> SolveOutcome:
        """:class:`Sifter` on the full LP; falls back to the full solve when the restricted LP fails."""
        if self._sift is None:
            self._sift = Sifter(self.h, self.sift_options, self.algorithm)
        self._sift.given, self._passed = self._passed, None  # what HiGHS holds, if nothing changed
        if self.x.size == self.form.shape[1]:
            self._sift.start = self.x / self.C
        t0 = time.perf_counter()
        res = self._sift.solve(time_limit, options)
        self.sift_stats = dict(self._sift.stats)
        if res is None:
            return self.solve(time_limit, {**options, "sifting": "off"}, kkt)
        self.solves += 1
        solve_s = time.perf_counter() - t0
        ms = res["status"]
        status = _STATUS.get(ms, Status.ERROR)
        out = SolveOutcome(status=status, solver=f"highs-{self.algorithm}" if self.algorithm !=
                           "choose" else "highs", message=self.h.modelStatusToString(ms) + " (sifting)",
                           iterations=int(res["iterations"]), solve_seconds=solve_s,
                           extra={"has_point": res["point"], "sifting": dict(self.sift_stats)})
        if res["point"]:
            self._load(res, out, kkt, res["dual_valid"])
        if status is not Status.OPTIMAL:
            log.info("HiGHS (sifting) stopped: %s", out.message)
        return out

    def _load(self, res: dict[str, Any], out: SolveOutcome, kkt: bool, duals: bool = True) -> None:
        """A point found outside ``self.h`` (sifting's restricted LPs, the Schur-complement IPM), in
        HiGHS's units, into the bridge and the Pyomo variables: x = C·x', activity a'/R, row duals
        R·y', reduced costs z'/C (over the cost scale K); the KKT residuals into ``out``."""
        t1 = time.perf_counter()
        self.x = res["x"] * self.C
        self.row_value = res["row_value"] / self.R
        load_values(self.form.variables, self.x)
        out.objective = res["objective"] / self.K
        if duals:
            self.row_dual = res["row_dual"] * self.R / self.K
            self.col_dual = res["col_dual"] / (self.C * self.K)
            if kkt:
                out.kkt = self.kkt()
        else:
            self.row_dual = self.col_dual = None
        out.load_seconds = time.perf_counter() - t1

    def _solve_schur(self, time_limit: float | None, kkt: bool) -> SolveOutcome | None:
        """The interior point by :class:`~fairalloc.solvers.schur_ipm.SchurIPM` on the LP HiGHS
        holds; None when the LP does not have its shape or it did not converge (HiGHS's IPX then)."""
        from fairalloc.solvers.schur_ipm import SchurIPM

        t0 = time.perf_counter()
        L = self._passed if self._passed is not None else read_lp(self.h)
        ipm = SchurIPM(L)
        res = ipm.solve(time_limit)
        if res is None:
            return None
        if res["status"] != "optimal":
            if res["status"] == "time_limit":
                self.solves += 1
                return SolveOutcome(status=Status.TIME_LIMIT, solver="highs", message="time limit (Schur "
                                    "complement interior point)", iterations=int(res["iterations"]),
                                    solve_seconds=time.perf_counter() - t0, extra={"has_point": False})
            log.info("Schur-complement interior point ended %s after %d iterations; HiGHS's IPX instead",
                     res["status"], res["iterations"])
            return None
        self._passed = None  # HiGHS holds the model; later solves read it back
        self.solves += 1
        out = SolveOutcome(status=Status.OPTIMAL, solver="highs", message="Optimal (interior point, Schur "
                           "complement, no crossover)", iterations=int(res["iterations"]),
                           solve_seconds=time.perf_counter() - t0,
                           extra={"has_point": True, "interior": True, "schur": dict(ipm.stats)})
        self._load(res, out, kkt)
        return out

    def _run(self) -> None:
        if self.resolve == "cold" and self.solves > 1:
            self.h.clearSolver()  # the model stays; basis and solution go
        ran = self.h.run()
        if (ran == highspy.HighsStatus.kError and self.h.getModelStatus() == MS.kNotset
                and self.solves > 1 and self.resolve != "cold"):
            # HiGHS 1.15's dual simplex can fail outright when it restarts from the previous basis
            # (seen: TSF-ER 1024x128 with --solver highs-simplex, the second progressive-filling
            # round ends "Not Set" at iteration 0 from a primal feasible, dual infeasible basis).
            # Primal simplex from the same basis solves it; a cold dual simplex stalls for many
            # minutes on these degenerate LPs, so it is only the last resort
            log.warning("HiGHS dual simplex failed from the previous basis (%s); primal simplex "
                        "from the same basis, for this and the later re-solves of this model",
                        self.h.modelStatusToString(self.h.getModelStatus()))
            self.warm_retries += 1
            saved = {"solver": self._get_option("solver")}
            try:
                self._set_option("solver", "simplex")
                if "simplex_strategy" not in self.user_options:
                    # for good: switching back to dual simplex after a primal re-solve stalled for
                    # many minutes in the same case
                    self._set_option("simplex_strategy", 4)
                ran = self.h.run()
            finally:
                for k, v in saved.items():
                    self._set_option(k, v)
            if ran == highspy.HighsStatus.kError and self.h.getModelStatus() == MS.kNotset:
                log.warning("HiGHS failed from the previous basis again; solving from scratch")
                self.h.clearSolver()
                ran = self.h.run()
        if self.h.getModelStatus() == MS.kUnboundedOrInfeasible:  # decide which: no guessed status
            presolve = self._get_option("presolve")
            self.h.setOptionValue("presolve", "off")
            try:
                self.h.run()
            finally:
                self.h.setOptionValue("presolve", presolve)

    def kkt(self) -> dict[str, float]:
        """KKT residuals of the last solution from the compiled arrays and HiGHS's multipliers."""
        f = self.form
        if f.A.shape != (len(self.row_dual), len(self.x)):
            self._sync_matrix()
        if self._AT is None or self._AT[0] is not f.A:
            self._AT = (f.A, sp.csr_array(f.A.T))
        return kkt_residuals(f.c, f.A, self.row_value, f.row_lb, f.row_ub, self.x, f.col_lb,
                             f.col_ub, self.row_dual, self.col_dual, f.sense, JT=self._AT[1])

    # ------------------------------------------------------------------ multipliers
    def dual(self, con: Any) -> float:
        """``d(objective*)/d(bound)`` of a constraint at the last solve."""
        if self.row_dual is None:
            return float("nan")
        return float(self.row_dual[self.form.row_index[id(con)]])

    def duals(self, cons: Any) -> np.ndarray | None:
        """Multipliers of ``cons`` at the last solve; None if it gave none (callers then probe)."""
        if self.row_dual is None:
            return None
        idx = self.form.row_index
        return self.row_dual[[idx[id(c)] for c in cons]]

    def activities(self, cons: Any) -> np.ndarray:
        """Body values of ``cons`` at the last solve (the solver's row activities plus each row's
        constant), without evaluating the Pyomo expressions."""
        f = self.form
        r = np.fromiter((f.row_index[id(c)] for c in cons), np.int64)
        return self.row_value[r] + f.row_const[r]

    def reduced_cost(self, var: Any) -> float:
        if self.col_dual is None:
            return float("nan")
        return float(self.col_dual[self.form.columns.index[id(var)]])

    def values(self, variables: Any) -> np.ndarray:
        """Values of ``variables`` from the last solve (faster than reading ``.value`` one by one)."""
        idx = self.form.columns.index
        return np.array([self.x[idx[id(v)]] if id(v) in idx else (v.value or 0.0)
                         for v in variables], float)

    def load_suffixes(self) -> None:
        """Copy multipliers into ``model.dual`` / ``model.rc`` (created as IMPORT suffixes)."""
        m = self.model
        if self.row_dual is None or self.col_dual is None:
            return
        for name, arr, comps in (("dual", self.row_dual, self.form.constraints),
                                 ("rc", self.col_dual, self.form.variables)):
            suf = getattr(m, name, None)
            if suf is None:
                suf = pyo.Suffix(direction=pyo.Suffix.IMPORT)
                m.add_component(name, suf)
            suf.clear()
            for comp, val in zip(comps, arr):
                suf[comp] = float(val)


def _interior_mode(v: Any) -> str | None:
    """``interior`` option (``None`` when not given; then ``off``): ``auto`` — HiGHS's IPM without
    crossover for LPs of at least ``INTERIOR_ABOVE`` columns; ``on`` — whatever the size; ``off`` —
    HiGHS as configured (vertices). Only callers that read interior multipliers correctly should
    get interior points: progressive filling does (``models/maxmin.py``, ``interior_blocked``)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "on" if v else "off"
    if str(v) not in INTERIOR:
        from fairalloc.errors import ParameterError

        raise ParameterError(f"interior = {v!r}: expected one of {', '.join(INTERIOR)}")
    return str(v)


# ---------------------------------------------------------------------- sifting
def _on_off(v: Any) -> str:
    """An option value with booleans and their spellings read as ``on`` / ``off``."""
    if isinstance(v, bool):
        return "on" if v else "off"
    mode = str(v).strip().lower()
    return {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}.get(mode, mode)


def _mode(name: str, v: Any, allowed: tuple[str, ...]) -> str:
    """An ``auto``/``on``/``off`` solver option, checked against ``allowed``."""
    mode = _on_off(v)
    if mode not in allowed:
        from fairalloc.errors import ParameterError

        raise ParameterError(f"solver option {name}={v!r}: expected one of {', '.join(allowed)}")
    return mode


def _sifting_mode(v: Any) -> str:
    """``sifting`` option: ``auto`` (LPs of at least ``SIFT_ABOVE`` columns), ``on``, ``off``."""
    return _mode("sifting", v, SIFTING)


def _schur_mode(v: Any) -> str:
    """``schur`` option: ``auto`` (interior points of LPs of at least ``SCHUR_ABOVE`` columns), ``on``,
    ``off``."""
    return _mode("schur", v, SCHUR)


def _best_of_each_row(S: sp.csr_array, key: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Positions (into ``S.data``) of the ``k`` entries of each row of ``S`` with the smallest ``key``
    (one value per stored entry; ``k`` one number, or one per row), ties broken by position."""
    r_of = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    order = np.lexsort((key, r_of))
    rank = np.arange(order.size) - S.indptr[r_of[order]]
    return order[rank < (k[r_of[order]] if isinstance(k, np.ndarray) else k)]


def read_lp(h: highspy.Highs) -> dict[str, Any]:
    """The LP ``h`` holds, as arrays (HiGHS's units): ``A`` (CSC, sorted), ``c``, ``lb``, ``ub``, ``rl``,
    ``ru``, ``sense``, ``offset``."""
    lp = h.getLp()
    m, n = lp.num_row_, lp.num_col_
    a = lp.a_matrix_
    parts = (np.asarray(a.value_, float), np.asarray(a.index_), np.asarray(a.start_))
    if a.format_ == highspy.MatrixFormat.kColwise:
        A = sp.csc_array(parts, (m, n))
    else:
        A = sp.csr_array(parts, (m, n)).tocsc()
    A.sort_indices()
    return {"A": A, "c": np.asarray(lp.col_cost_, float), "lb": np.asarray(lp.col_lower_, float),
            "ub": np.asarray(lp.col_upper_, float), "rl": np.asarray(lp.row_lower_, float),
            "ru": np.asarray(lp.row_upper_, float), "sense": lp.sense_, "offset": float(lp.offset_)}


class Sifter:
    """Sifting (column generation over the LP's own columns) for a :class:`HighsBridge`.

    The full LP stays in the bridge's ``Highs`` object (every update goes there); a second ``Highs``
    holds the *restricted* LP: every row, the columns of a pool. Each solve reads the full LP back
    from HiGHS (bounds, costs and matrix as the bridge last pushed them), syncs the restricted LP
    (bounds and costs; rebuilt when rows or coefficients changed), solves it warm, prices every column
    with one sparse product ``d = c − Aᵀy`` and adds the most attractive columns (at most
    ``max(rows, 1000)`` a round) until none prices out by more than HiGHS's dual feasibility
    tolerance. Columns outside the pool are at 0, their reduced cost is ``d``: the assembled point and
    multipliers are those of the full LP. The pool is kept across solves (progressive filling).

    Columns that cannot sit at 0 on their lower bound (a lower bound ≠ 0, or a negative one) are
    always in the pool; so are, initially, for each row without a non-zero bound (a max-min
    ``level`` row), the ``PER_ROW`` columns (or the share ``PER_ROW_SHARE`` of the row's columns, if
    more) using the least of the bounded rows per unit of that row, and the ``rows`` columns with the
    best cost per unit of bounded rows.
    """

    PER_ROW = 8
    # ... or this share of the row's columns, if more. With 8 alone the users of a max-min LP all
    # chose the same large servers, which the restricted LP then overloaded: 9 restricted solves and
    # a pool of 180 257 columns (51 s) for the first round of tsf-er at 2048x256 mixed; with 15 % one
    # restricted solve (5.6-5.9 s), and one instead of 2-5 at 1024x128 and 2048x256 (link and mixed)
    PER_ROW_SHARE = 0.15
    CAP_PER_ROW = 4  # columns added per pricing round: at most this many times the rows in all
    # of the columns that price out, the best PRICE_PER_ROW of each row (None: the CAP_PER_ROW·rows
    # best overall). Off: at 1024x128 mixed (tsf-er) 4 per row with DROP_AFTER = 2 took 96 s in the
    # max-min LPs' restricted solves against 69 s for the 4·rows best overall (under load, once each)
    PRICE_PER_ROW: int | None = None
    DROP_AFTER: int | None = None  # pool columns nonbasic at 0 with a reduced cost past DROP_TOL for
    DROP_TOL = 1e-7  # this many restricted solves in a row leave the pool (None: never; they are
    DROP_ABOVE = 2  # priced again every round) once the pool holds more than DROP_ABOVE·rows columns
    MAX_ROUNDS: int | None = None  # restricted solves in one solve before giving up (None: never)
    RESOLVE_STRATEGY = 4  # simplex_strategy of warm re-solves (4: primal; the basis stays primal feasible)
    RESOLVE_IPM_ABOVE: int | None = None  # pool size from which re-solves use IPM (None: never)

    def __init__(self, full: highspy.Highs, options: dict[str, Any] | None = None,
                 algorithm: str = "choose", lp: dict[str, Any] | None = None) -> None:
        self.full = full
        self.given = lp  # the full LP as arrays (the keys of _read), when ``full`` holds no model yet
        self.options = dict(options or {})
        self.algorithm = algorithm
        self.start: np.ndarray | None = None  # a point (HiGHS's units) whose support joins the pool
        self.hr: highspy.Highs | None = None
        self.pool = np.zeros(0, np.int64)  # full column index of each restricted column
        self.in_pool = np.zeros(0, bool)
        self.age = np.zeros(0, np.int64)  # restricted solves each pool column has sat out (see _drop)
        self.gave_up = False  # MAX_ROUNDS was reached: the bridge solves the full LP from then on
        self._key: tuple[Any, ...] | None = None
        self.stats: dict[str, Any] = {"solves": 0, "rounds": 0, "pool": 0, "fallbacks": 0, "dropped": 0,
                                      "coefficients": 0}

    # -- the full LP as HiGHS holds it (HiGHS's units)
    def _read(self) -> dict[str, Any]:
        if self.given is not None:  # once: later solves read what HiGHS holds then
            L, self.given = self.given, None
            return L
        return read_lp(self.full)

    def _initial_pool(self, L: dict[str, Any]) -> np.ndarray:
        A, c, lb, ub = L["A"], L["c"], L["lb"], L["ub"]
        m, n = A.shape
        sense = 1.0 if L["sense"] == highspy.ObjSense.kMinimize else -1.0
        need = (lb != 0) | (ub < 0)
        rl, ru = L["rl"], L["ru"]
        b = np.maximum(np.where(np.abs(rl) < highspy.kHighsInf, np.abs(rl), 0.0),
                       np.where(np.abs(ru) < highspy.kHighsInf, np.abs(ru), 0.0))
        bounded = b > 0
        absA = abs(A)
        use = (absA.T @ np.where(bounded, 1.0 / np.where(bounded, b, 1.0), 0.0))  # per column
        pick = need.copy()
        tiny = np.finfo(float).tiny
        # rows without a non-zero bound: the PER_ROW (or PER_ROW_SHARE) columns using least per unit
        # of the row
        R = sp.csr_array(A)
        rows = np.flatnonzero(~bounded)
        if rows.size:
            S = R[rows]
            key = use[S.indices] / np.maximum(np.abs(S.data), tiny)
            per_row = np.maximum(self.PER_ROW, np.ceil(self.PER_ROW_SHARE * np.diff(S.indptr)))
            pick[S.indices[_best_of_each_row(S, key, per_row)]] = True
        gain = -sense * c
        cand = np.flatnonzero(gain > 0)
        if cand.size:
            best = cand[np.argsort(-gain[cand] / np.maximum(use[cand], tiny))[:max(m, 1)]]
            pick[best] = True
        if self.start is not None and self.start.size == n:
            pick |= self.start != 0  # a known feasible point stays feasible in the restricted LP
        pick &= ~((lb == 0) & (ub == 0)) | need
        return np.flatnonzero(pick)

    def _build(self, L: dict[str, Any], cols: np.ndarray) -> None:
        A = L["A"]
        h = new_highs()
        for k, v in self.options.items():
            set_option(h, k, v)
        lp = highs_lp(sp.csc_array(A[:, cols]), L["c"][cols], L["lb"][cols], L["ub"][cols], L["rl"], L["ru"],
                      L["sense"], L["offset"])
        h.passModel(lp)
        self.hr, self.pool = h, cols.astype(np.int64)
        self.in_pool = np.zeros(A.shape[1], bool)
        self.in_pool[cols] = True
        self.age = np.zeros(cols.size, np.int64)
        self.solved = False

    def _add(self, L: dict[str, Any], cols: np.ndarray) -> None:
        sub = sp.csc_array(L["A"][:, cols])
        assert self.hr is not None
        self.hr.addCols(cols.size, L["c"][cols], L["lb"][cols], L["ub"][cols], sub.nnz,
                        sub.indptr[:-1].astype(np.int32), sub.indices.astype(np.int32), sub.data)
        self.pool = np.concatenate([self.pool, cols])
        self.age = np.concatenate([self.age, np.zeros(cols.size, np.int64)])
        self.in_pool[cols] = True

    def _drop(self, L: dict[str, Any], sense: float, col_dual: np.ndarray) -> None:
        """Ages the pool after a restricted solve and deletes the columns that have sat out
        ``DROP_AFTER`` solves in a row (nonbasic at 0, reduced cost past ``DROP_TOL`` the wrong way),
        once the pool is past ``DROP_ABOVE`` times the rows. HiGHS keeps the basis (the columns
        are nonbasic). Every round prices every column again, so a dropped column that becomes
        attractive comes back: the answer is the full LP's."""
        h = self.hr
        assert h is not None
        if self.DROP_AFTER is None:
            return
        st = np.asarray(h.getBasis().col_status, dtype=object)
        lower = np.fromiter((s == highspy.HighsBasisStatus.kLower for s in st), bool, st.size)
        out = lower & (L["lb"][self.pool] == 0) & (sense * col_dual > self.DROP_TOL)
        self.age = np.where(out, self.age + 1, 0)
        if self.pool.size <= self.DROP_ABOVE * max(L["A"].shape[0], 1000):
            return
        gone = np.flatnonzero(self.age >= self.DROP_AFTER)
        if not gone.size:
            return
        h.deleteCols(gone.size, gone.astype(np.int32))
        keep = np.ones(self.pool.size, bool)
        keep[gone] = False
        self.in_pool[self.pool[gone]] = False
        self.pool, self.age = self.pool[keep], self.age[keep]
        self.stats["dropped"] += int(gone.size)

    def _pick(self, A: Any, bad: np.ndarray, score: np.ndarray) -> np.ndarray:
        """Of the columns ``bad`` (priced out, ``score`` < 0: the more negative the better), the
        ``PRICE_PER_ROW`` best of each row they touch (columns without a row: all), at most
        ``CAP_PER_ROW`` times the rows."""
        m = A.shape[0]
        cap = max(self.CAP_PER_ROW * m, 1000)
        S = sp.csr_array(A[:, bad]) if self.PRICE_PER_ROW else None
        if S is not None and S.nnz:
            take = np.zeros(bad.size, bool)
            take[S.indices[_best_of_each_row(S, score[bad][S.indices], self.PRICE_PER_ROW)]] = True
            take |= np.diff(sp.csc_array(S).indptr) == 0
            bad = bad[take]
        if bad.size > cap:
            bad = bad[np.argpartition(score[bad], cap)[:cap]]
        return np.sort(bad)

    def _sync(self, L: dict[str, Any]) -> None:
        """Bounds and costs of the pool and rows as the full LP has them now; rebuild on a change of
        shape or coefficients (the basis is lost then)."""
        A = L["A"]
        key = (A.shape, A.nnz)
        pattern = self.hr is not None and self._key is not None and self._key[0] == key and \
            np.array_equal(self._key[1], A.indices) and np.array_equal(self._key[3], A.indptr)
        same = pattern and np.array_equal(self._key[2], A.data)
        if pattern and not same:
            # new coefficients, same pattern (progressive filling's rescale): change the pool's
            # entries in place; HiGHS keeps the basis
            assert self._key is not None and self.hr is not None
            ch = np.flatnonzero(self._key[2] != A.data)
            col = np.repeat(np.arange(A.shape[1]), np.diff(A.indptr))[ch]
            sel = self.in_pool[col]
            pos = np.full(A.shape[1], -1, np.int64)
            pos[self.pool] = np.arange(self.pool.size)
            for r, j, v in zip(A.indices[ch[sel]].tolist(), pos[col[sel]].tolist(), A.data[ch[sel]].tolist()):
                self.hr.changeCoeff(r, j, v)
            self.stats["coefficients"] += int(sel.sum())
            same = True
        if not same:
            keep = self.pool[self.pool < A.shape[1]] if self.hr is not None else np.zeros(0, np.int64)
            cols = np.union1d(self._initial_pool(L), keep)
            self._build(L, cols)
        else:
            h, p = self.hr, self.pool
            assert h is not None
            # columns that cannot rest at 0 any more (changed bounds) join the pool
            need = np.flatnonzero(((L["lb"] != 0) | (L["ub"] < 0)) & ~self.in_pool)
            if need.size:
                self._add(L, need)
                p = self.pool
            idx = np.arange(p.size, dtype=np.int32)
            h.changeColsBounds(p.size, idx, L["lb"][p], L["ub"][p])
            h.changeColsCost(p.size, idx, L["c"][p])
            m = A.shape[0]
            h.changeRowsBounds(m, np.arange(m, dtype=np.int32), L["rl"], L["ru"])
            h.changeObjectiveSense(L["sense"])
            h.changeObjectiveOffset(L["offset"])
        self._key = (key, A.indices.copy(), A.data.copy(), A.indptr.copy())

    def solve(self, time_limit: float | None, options: dict[str, Any]) -> dict[str, Any] | None:
        """Sift; returns the full LP's solution in HiGHS's units, or None when the restricted LP did
        not solve to optimality for a reason other than a limit (the caller solves the full LP)."""
        t0 = time.perf_counter()
        self.stats["solves"] += 1
        L = self._read()
        self._sync(L)
        h = self.hr
        assert h is not None
        A, c = L["A"], L["c"]
        AT = sp.csr_array(A.T)
        sense = 1.0 if L["sense"] == highspy.ObjSense.kMinimize else -1.0
        free0 = (L["lb"] == 0) & (L["ub"] > 0)  # columns that rest at 0 outside the pool
        tol = self.full.getOptionValue("dual_feasibility_tolerance")
        tol = float(tol[1] if isinstance(tol, tuple) else tol)
        iters = rounds = 0
        while True:
            opts = dict(options)
            big = self.RESOLVE_IPM_ABOVE is not None and self.pool.size >= self.RESOLVE_IPM_ABOVE
            if self.solved and not big and "solver" not in self.options and "solver" not in options:
                opts.setdefault("solver", "simplex")
                opts.setdefault("simplex_strategy", self.RESOLVE_STRATEGY)
            elif "solver" not in opts and self.algorithm == "choose" and self.pool.size >= IPM_ABOVE:
                opts["solver"] = "ipm"
            elif "solver" not in opts:
                opts["solver"] = self.algorithm
            rem = None if time_limit is None else time_limit - (time.perf_counter() - t0)
            opts["time_limit"] = INF if rem is None else max(rem, 0.0)
            for k, v in opts.items():
                set_option(h, k, v)
            t1 = time.perf_counter()
            with c_output_off_stdout():
                h.run()
            self.stats.setdefault("lp_seconds", 0.0)
            self.stats["lp_seconds"] += time.perf_counter() - t1
            rounds += 1
            info = h.getInfo()
            it = [max(0, int(v)) for v in (info.simplex_iteration_count, info.ipm_iteration_count,
                                           info.crossover_iteration_count)]
            iters += sum(it)
            log.debug("sifting: restricted LP %d (%d columns, %d dropped so far, %s): %s, %.3f s, %d "
                      "simplex / %d IPM / %d crossover iterations", rounds, self.pool.size,
                      self.stats["dropped"], opts.get("solver"),
                      h.modelStatusToString(h.getModelStatus()), time.perf_counter() - t1, *it)
            ms = h.getModelStatus()
            if ms != MS.kOptimal:
                self.solved = False
                if ms in (MS.kTimeLimit, MS.kIterationLimit):
                    return {"status": ms, "iterations": iters, "point": False}
                self.stats["fallbacks"] += 1
                log.info("sifting: restricted LP ended %s; solving the full LP",
                         h.modelStatusToString(ms))
                return None
            self.solved = True
            sol = h.getSolution()
            y = np.asarray(sol.row_dual, float)
            d = c - AT @ y
            bad = np.flatnonzero(free0 & ~self.in_pool & (sense * d < -tol))
            if not bad.size:
                break
            if self.MAX_ROUNDS is not None and rounds >= self.MAX_ROUNDS:
                # the pool keeps missing columns (a later progressive-filling round that reshuffles
                # frozen users): the full LP instead, for this solve and every later one
                self.gave_up = True
                log.debug("sifting: %d restricted solves and %d columns still price out; the full LP "
                          "from now on", rounds, bad.size)
                return None
            self._drop(L, sense, np.asarray(sol.col_dual, float))
            self._add(L, self._pick(A, bad, sense * d))
        x = np.zeros(A.shape[1])
        x[self.pool] = np.asarray(sol.col_value, float)
        d[self.pool] = np.asarray(sol.col_dual, float)
        self.stats["rounds"] += rounds
        self.stats["pool"] = int(self.pool.size)
        log.debug("sifting: %d restricted solves, pool %d of %d columns, %.3f s (%.3f s in the "
                  "restricted LPs so far)", rounds, self.pool.size, A.shape[1], time.perf_counter() - t0,
                  self.stats.get("lp_seconds", 0.0))
        return {"status": ms, "iterations": iters, "point": True, "x": x,
                "row_value": np.asarray(sol.row_value, float), "row_dual": y, "col_dual": d,
                "objective": float(info.objective_function_value), "dual_valid": bool(sol.dual_valid),
                "message": h.modelStatusToString(ms), "rounds": rounds}
