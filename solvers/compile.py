"""Pyomo model → sparse arrays, fast.

The mechanisms are Pyomo models; the LP/MILP solver wants ``min/max cᵀx`` s.t. ``l ≤ Ax ≤ u``,
``lb ≤ x ≤ ub``. Pyomo's own translators (``appsi``, the standard-form compiler) walk every expression
generically and dominate the run time at 10⁵ variables (see ``docs/performance.md``). This walker has a
fast path for the shapes our models build (:class:`~fairalloc.solvers.linear.ArrayLinearExpression`
rows read straight from their arrays, ``LinearExpression`` of monomials, sums, named expressions,
negations, constant factors) and falls back to :func:`pyomo.repn.generate_standard_repn` for anything
else, so a researcher may write a constraint any way Pyomo allows.

Fixed variables stay columns with ``lb = ub = value`` so a persistent solver can fix/unfix them by
changing bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyomo.environ as pyo
import scipy.sparse as sp
from pyomo.common.gc_manager import PauseGC
from pyomo.core.expr.numeric_expr import (
    LinearExpression,
    MonomialTermExpression,
    NegationExpression,
    ProductExpression,
    SumExpression,
)
from pyomo.core.expr.numvalue import native_numeric_types, value
from pyomo.repn import generate_standard_repn

from fairalloc.solvers.linear import ArrayLinearExpression, VarFamily, column_bounds

__all__ = ["Columns", "LinearForm", "NotLinearError", "bound_sources", "compile_linear",
           "eval_bounds", "linear_terms", "row_bounds"]

INF = float("inf")


class NotLinearError(ValueError):
    """A constraint or objective that an LP/MILP solver cannot take."""


class Columns:
    """Column numbering by first appearance (shared by a compiled form and its later updates).

    A :class:`~fairalloc.solvers.linear.VarFamily` met for the first time gets its columns in one
    block (:meth:`family`), so array expressions map positions to columns with numpy indexing.
    """

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.variables: list[Any] = []
        self._families: dict[int, tuple[VarFamily, np.ndarray]] = {}

    def __call__(self, v: Any) -> int:
        j = self.index.get(id(v))
        if j is None:
            j = self.index[id(v)] = len(self.variables)
            self.variables.append(v)
        return j

    def family(self, fam: VarFamily) -> np.ndarray:
        """Column of each variable of ``fam`` (numbering the new ones in a block)."""
        hit = self._families.get(id(fam))
        if hit is not None:
            return hit[1]
        ids = list(map(id, fam.variables))
        found = list(map(self.index.get, ids))
        start, n = len(self.variables), len(ids)
        if found.count(None) == n and len(set(ids)) == n:
            self.index.update(zip(ids, range(start, start + n)))
            self.variables.extend(fam.variables)
            cols = np.arange(start, start + n, dtype=np.int64)
        else:
            cols = np.fromiter((j if j is not None else self(v) for j, v in zip(found, fam.variables)),
                               np.int64, n)
        self._families[id(fam)] = (fam, cols)  # the reference keeps id(fam) unique
        return cols


def _constant(e: Any) -> bool:
    return type(e) in native_numeric_types or not hasattr(e, "is_potentially_variable") or \
        not e.is_potentially_variable()


def linear_terms(expr: Any, col: Any, cols: list[int], vals: list[float], where: Any,
                 chunks: list[tuple[np.ndarray, np.ndarray]] | None = None) -> float:
    """Append the linear terms of ``expr`` as (column, coefficient) pairs; return its constant.

    Terms of array expressions go to ``chunks`` as ``(columns, coefficients)`` arrays when it is given,
    else to ``cols``/``vals``. Raises :class:`NotLinearError` naming ``where`` (a string, or a
    component whose name is used) if ``expr`` is not linear.
    """
    const = 0.0
    stack: list[tuple[Any, float]] = [(expr, 1.0)]
    while stack:
        e, s = stack.pop()
        t = type(e)
        if t is ArrayLinearExpression and e.is_array:
            c = col.family(e.family)[e.positions]
            v = e.coefs * s
            if chunks is not None:
                chunks.append((c, v))
            else:
                cols.extend(c.tolist())
                vals.extend(v.tolist())
        elif t in native_numeric_types or not hasattr(e, "is_potentially_variable"):
            const += s * float(e)
        elif t is LinearExpression or t is SumExpression:
            for a in e.args:
                ta = type(a)
                if ta is MonomialTermExpression:
                    c, v = a.args
                    if type(c) not in native_numeric_types:
                        c = value(c)
                    cols.append(col(v))
                    vals.append(s * c)
                else:
                    stack.append((a, s))
        elif t is MonomialTermExpression:
            c, v = e.args
            cols.append(col(v))
            vals.append(s * value(c))
        elif getattr(e, "is_variable_type", lambda: False)():
            cols.append(col(e))
            vals.append(s)
        elif not e.is_potentially_variable():
            const += s * value(e)
        elif e.is_named_expression_type():
            stack.append((e.expr, s))
        elif t is NegationExpression:
            stack.append((e.args[0], -s))
        elif t is ProductExpression and _constant(e.args[0]):
            stack.append((e.args[1], s * value(e.args[0])))
        elif t is ProductExpression and _constant(e.args[1]):
            stack.append((e.args[0], s * value(e.args[1])))
        else:
            repn = generate_standard_repn(e, compute_values=True, quadratic=False)
            if repn.nonlinear_expr is not None or repn.quadratic_vars:
                raise NotLinearError(f"{_describe(where)} is not linear: {e}")
            for v, c in zip(repn.linear_vars, repn.linear_coefs):
                cols.append(col(v))
                vals.append(s * c)
            const += s * value(repn.constant)
    return const


@dataclass
class LinearForm:
    """``sense · min cᵀx + c0`` s.t. ``row_lb ≤ A x ≤ row_ub``, ``col_lb ≤ x ≤ col_ub``."""

    variables: list[Any]
    constraints: list[Any]
    A: sp.csr_array
    row_lb: np.ndarray
    row_ub: np.ndarray
    row_const: np.ndarray  # constant of each row body, moved into its bounds
    col_lb: np.ndarray
    col_ub: np.ndarray
    integer: np.ndarray
    c: np.ndarray
    c0: float
    sense: int  # +1 minimise, -1 maximise
    objective: Any
    row_index: dict[int, int] = field(default_factory=dict)
    columns: Columns = field(default_factory=Columns)
    # per row: the relational expression compiled; its bound expressions when they can change while
    # the expression stays the same (mutable Params), None when they are plain numbers; its bounds
    # while active
    row_expr: list[Any] = field(default_factory=list)
    row_bound_src: list[Any] = field(default_factory=list)
    nat_lb: np.ndarray = field(default_factory=lambda: np.zeros(0))
    nat_ub: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def shape(self) -> tuple[int, int]:
        return self.A.shape


def row_bounds(con: Any, const: float) -> tuple[float, float]:
    """``(lower, upper)`` of ``con`` with the body's constant moved into them (``∓inf``: none)."""
    lo, _, up = con.to_bounded_expression(evaluate_bounds=True)
    return (-INF if lo is None else float(lo) - const, INF if up is None else float(up) - const)


def bound_sources(con: Any) -> tuple[Any, Any] | None:
    """``None`` when both bounds of ``con`` are plain numbers; else its ``(lower, upper)`` bound
    expressions, which :func:`eval_bounds` re-evaluates (mutable ``Param`` s, expressions)."""
    lo, _, up = con.to_bounded_expression()
    if (lo is None or type(lo) in native_numeric_types) and (
            up is None or type(up) in native_numeric_types):
        return None
    return lo, up


def eval_bounds(src: tuple[Any, Any], const: float) -> tuple[float, float]:
    """:func:`row_bounds` from the bound expressions of :func:`bound_sources`."""
    lo, up = (None if b is None else value(b) for b in src)
    return (-INF if lo is None else float(lo) - const, INF if up is None else float(up) - const)


def col_bounds(v: Any) -> tuple[float, float]:
    if v.fixed:
        return float(v.value), float(v.value)
    lo, up = v.lb, v.ub
    return (-INF if lo is None else float(lo), INF if up is None else float(up))


def active_objective(model: Any) -> Any:
    objs = [o for comp in model.component_objects(pyo.Objective, active=True, descend_into=True)
            for o in comp.values() if o.active]
    if len(objs) != 1:
        raise NotLinearError(f"model {model.name}: expected exactly one active objective, "
                             f"found {len(objs)}")
    return objs[0]


def compile_linear(model: Any) -> LinearForm:
    """Compile every active constraint and the active objective of ``model`` into a
    :class:`LinearForm`. Columns are the variables the model uses, in order of first appearance."""
    with PauseGC():  # the walk allocates many small objects; GC passes would dominate
        return _compile_linear(model)


def _describe(where: Any) -> str:
    if isinstance(where, str):
        return where
    kind = "objective" if isinstance(where, pyo.Objective) or getattr(where, "ctype", None) is \
        pyo.Objective else "constraint"
    return f"{kind} {where.name}"


def _terms(expr: Any, col: Columns, where: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """Columns, coefficients and constant of one linear expression, as arrays."""
    cols: list[int] = []
    vals: list[float] = []
    chunks: list[tuple[np.ndarray, np.ndarray]] = []
    const = linear_terms(expr, col, cols, vals, where, chunks)
    if not chunks:
        return np.asarray(cols, dtype=np.int64), np.asarray(vals, dtype=float), const
    if cols:
        chunks.append((np.asarray(cols, dtype=np.int64), np.asarray(vals, dtype=float)))
    if len(chunks) == 1:
        return chunks[0][0], chunks[0][1], const
    return (np.concatenate([c for c, _ in chunks]), np.concatenate([v for _, v in chunks]), const)


def _compile_linear(model: Any) -> LinearForm:
    col = Columns()
    cons: list[Any] = []
    row_cols: list[np.ndarray] = []
    row_vals: list[np.ndarray] = []
    lbs: list[float] = []
    ubs: list[float] = []
    consts: list[float] = []
    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        c, v, const = _terms(con.body, col, con)  # named only on error: names cost ~10 µs
        lo, up = row_bounds(con, const)
        row_cols.append(c)
        row_vals.append(v)
        consts.append(const)
        cons.append(con)
        lbs.append(lo)
        ubs.append(up)
    obj = active_objective(model)
    ocols, ovals, c0 = _terms(obj.expr, col, obj)
    n = len(col.variables)
    indptr = np.zeros(len(cons) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in row_cols], out=indptr[1:])
    A = sp.csr_array((np.concatenate(row_vals) if row_vals else np.zeros(0),
                      np.concatenate(row_cols) if row_cols else np.zeros(0, np.int64), indptr),
                     shape=(len(cons), n))
    A.sum_duplicates()
    c = np.zeros(n)
    np.add.at(c, ocols, ovals)
    col_lb, col_ub, integer = column_bounds(col.variables)
    row_lb, row_ub = np.asarray(lbs, float), np.asarray(ubs, float)
    return LinearForm(
        variables=col.variables, constraints=cons, A=A, row_lb=row_lb, row_ub=row_ub,
        row_const=np.asarray(consts, float),
        col_lb=col_lb, col_ub=col_ub, integer=integer, c=c, c0=c0,
        sense=1 if obj.sense == pyo.minimize else -1, objective=obj,
        row_index={id(k): r for r, k in enumerate(cons)}, columns=col,
        row_expr=[k.expr for k in cons],
        row_bound_src=[bound_sources(k) for k in cons],
        nat_lb=row_lb.copy(), nat_ub=row_ub.copy())
