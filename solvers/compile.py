"""Pyomo model → sparse arrays, fast.

The mechanisms are Pyomo models; the LP/MILP solver wants ``min/max cᵀx`` s.t. ``l ≤ Ax ≤ u``,
``lb ≤ x ≤ ub``. Pyomo's own translators (``appsi``, the standard-form compiler) walk every expression
generically and dominate the run time at 10⁵ variables (see ``docs/performance.md``). This walker has a
fast path for the shapes our models build (``LinearExpression`` of monomials, sums, named expressions,
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

__all__ = ["Columns", "LinearForm", "NotLinearError", "compile_linear", "linear_terms"]

INF = float("inf")


class NotLinearError(ValueError):
    """A constraint or objective that an LP/MILP solver cannot take."""


class Columns:
    """Column numbering by first appearance (shared by a compiled form and its later updates)."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.variables: list[Any] = []

    def __call__(self, v: Any) -> int:
        j = self.index.get(id(v))
        if j is None:
            j = self.index[id(v)] = len(self.variables)
            self.variables.append(v)
        return j


def _constant(e: Any) -> bool:
    return type(e) in native_numeric_types or not hasattr(e, "is_potentially_variable") or \
        not e.is_potentially_variable()


def linear_terms(expr: Any, col: Any, cols: list[int], vals: list[float], where: str) -> float:
    """Append the linear terms of ``expr`` as (column, coefficient) pairs; return its constant.

    Raises :class:`NotLinearError` naming ``where`` if ``expr`` is not linear.
    """
    const = 0.0
    stack: list[tuple[Any, float]] = [(expr, 1.0)]
    while stack:
        e, s = stack.pop()
        t = type(e)
        if t in native_numeric_types or not hasattr(e, "is_potentially_variable"):
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
                raise NotLinearError(f"{where} is not linear: {e}")
            for v, c in zip(repn.linear_vars, repn.linear_coefs):
                cols.append(col(v))
                vals.append(s * c)
            const += s * value(repn.constant)
    return const


def _bound(b: Any) -> float | None:
    if b is None:
        return None
    b = value(b)
    return None if b is None or b in (INF, -INF) else float(b)


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

    @property
    def shape(self) -> tuple[int, int]:
        return self.A.shape


def row_bounds(con: Any, const: float) -> tuple[float, float]:
    lo, up = _bound(con.lower), _bound(con.upper)
    return (-INF if lo is None else lo - const, INF if up is None else up - const)


def col_bounds(v: Any) -> tuple[float, float]:
    if v.fixed:
        return float(v.value), float(v.value)
    lo, up = v.lb, v.ub
    return (-INF if lo is None else float(lo), INF if up is None else float(up))


def active_objective(model: Any) -> Any:
    objs = list(model.component_data_objects(pyo.Objective, active=True, descend_into=True))
    if len(objs) != 1:
        raise NotLinearError(f"model {model.name}: expected exactly one active objective, "
                             f"found {len(objs)}")
    return objs[0]


def compile_linear(model: Any) -> LinearForm:
    """Compile every active constraint and the active objective of ``model`` into a
    :class:`LinearForm`. Columns are the variables the model uses, in order of first appearance."""
    with PauseGC():  # the walk allocates many small objects; GC passes would dominate
        return _compile_linear(model)


def _compile_linear(model: Any) -> LinearForm:
    col = Columns()
    cons: list[Any] = []
    indptr = [0]
    cols: list[int] = []
    vals: list[float] = []
    lbs: list[float] = []
    ubs: list[float] = []
    consts: list[float] = []
    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        const = linear_terms(con.body, col, cols, vals, f"constraint {con.name}")
        lo, up = row_bounds(con, const)
        consts.append(const)
        cons.append(con)
        lbs.append(lo)
        ubs.append(up)
        indptr.append(len(cols))
    obj = active_objective(model)
    ocols: list[int] = []
    ovals: list[float] = []
    c0 = linear_terms(obj.expr, col, ocols, ovals, f"objective {obj.name}")
    n = len(col.variables)
    A = sp.csr_array((np.asarray(vals, dtype=float), np.asarray(cols, dtype=np.int64),
                      np.asarray(indptr, dtype=np.int64)), shape=(len(cons), n))
    A.sum_duplicates()
    c = np.zeros(n)
    np.add.at(c, np.asarray(ocols, dtype=np.int64), np.asarray(ovals, dtype=float))
    bounds = np.array([col_bounds(v) for v in col.variables], dtype=float).reshape(n, 2)
    integer = np.fromiter((v.is_integer() or v.is_binary() for v in col.variables), bool, n)
    return LinearForm(
        variables=col.variables, constraints=cons, A=A,
        row_lb=np.asarray(lbs, float), row_ub=np.asarray(ubs, float),
        row_const=np.asarray(consts, float),
        col_lb=bounds[:, 0].copy(), col_ub=bounds[:, 1].copy(), integer=integer, c=c, c0=c0,
        sense=1 if obj.sense == pyo.minimize else -1, objective=obj,
        row_index={id(k): r for r, k in enumerate(cons)}, columns=col)
