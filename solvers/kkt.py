"""KKT residuals of a solved LP/NLP, from the model and the solver's multipliers (docs/verification.md).

One routine, :func:`kkt_residuals`, works on arrays; :func:`model_arrays` extracts those arrays from any
Pyomo model (linear rows by the fast compiler, nonlinear ones by Pyomo's reverse-mode differentiation),
so the residuals of an Ipopt solve are computed from the *Pyomo model*, independently of the solver.

Sign convention (the one HiGHS, Pyomo's ``dual`` suffix and ASL use): a multiplier is the sensitivity
``d(objective*)/d(bound)``. With ``σ = +1`` for minimisation and ``-1`` for maximisation the conditions are

    stationarity      ∇f(x) − Jᵀy − z = 0
    dual feasibility  σ·y ≥ 0 on rows at their lower bound,  σ·y ≤ 0 at their upper bound  (same for z)
    complementarity   (σy)⁺·(g(x) − l) = 0,  (σy)⁻·(u − g(x)) = 0                           (same for z)

Residuals are absolute (max-norms); ``scale`` is ``max(1, ‖∇f‖∞, ‖y‖∞)`` and ``relative`` the largest of
them over ``scale`` (the normalisation of Ipopt's own stopping test: an interior point's
complementarity ends near its barrier parameter times the multipliers' size).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyomo.environ as pyo
import scipy.sparse as sp
from pyomo.core.expr.calculus.derivatives import Modes, differentiate
from pyomo.core.expr.numvalue import value
from pyomo.core.expr.visitor import identify_variables

from fairalloc.solvers.compile import (
    Columns,
    NotLinearError,
    active_objective,
    col_bounds,
    linear_terms,
    row_bounds,
)

__all__ = ["kkt_residuals", "model_arrays", "model_kkt"]


def _violations(mult: np.ndarray, val: np.ndarray, lo: np.ndarray, up: np.ndarray
                ) -> tuple[float, float]:
    """Largest sign violation and complementarity product of (min-convention) multipliers.

    A positive multiplier needs a lower bound and pays ``mult·(val − lo)``; a negative one needs an
    upper bound and pays ``−mult·(up − val)``.
    """
    if not mult.size:
        return 0.0, 0.0
    pos, neg = mult > 0, mult < 0
    lo_inf, up_inf = np.isinf(lo), np.isinf(up)
    sign = np.abs(mult[(pos & lo_inf) | (neg & up_inf)])
    with np.errstate(invalid="ignore"):
        low = mult[pos & ~lo_inf] * (val[pos & ~lo_inf] - lo[pos & ~lo_inf])
        upp = mult[neg & ~up_inf] * (up[neg & ~up_inf] - val[neg & ~up_inf])
    return (float(sign.max(initial=0.0)),
            float(max(np.abs(low).max(initial=0.0), np.abs(upp).max(initial=0.0))))


def kkt_residuals(grad: np.ndarray, J: Any, g: np.ndarray, row_lb: np.ndarray, row_ub: np.ndarray,
                  x: np.ndarray, col_lb: np.ndarray, col_ub: np.ndarray, y: np.ndarray,
                  z: np.ndarray, sense: int, JT: Any = None) -> dict[str, float]:
    """Max-norm KKT residuals (see module docstring for the convention). ``JT`` is ``Jᵀ`` in CSR form
    when the caller keeps one (a persistent solver re-checks the same matrix after every solve)."""
    y, z = np.asarray(y, float), np.asarray(z, float)
    ys, zs = sense * y, sense * z
    if JT is None:
        if not isinstance(J, sp.csr_array):
            J = sp.csr_array(J)
        JT = J.T
    primal = max(float(np.max(row_lb - g, initial=0.0)), float(np.max(g - row_ub, initial=0.0)),
                 float(np.max(col_lb - x, initial=0.0)), float(np.max(x - col_ub, initial=0.0)))
    stationarity = float(np.abs(grad - JT @ y - z).max(initial=0.0))
    dual_r, compl_r = _violations(ys, g, row_lb, row_ub)
    dual_c, compl_c = _violations(zs, x, col_lb, col_ub)
    dual, compl = max(dual_r, dual_c), max(compl_r, compl_c)
    scale = max(1.0, float(np.abs(grad).max(initial=0.0)), float(np.abs(y).max(initial=0.0)))
    worst = max(primal, dual, compl, stationarity)
    return {"primal_infeasibility": primal, "dual_infeasibility": dual,
            "complementarity": compl, "stationarity": stationarity, "scale": scale,
            "max": worst, "relative": worst / scale}


def model_arrays(model: Any) -> dict[str, Any]:
    """Constraint Jacobian, values, bounds and objective gradient of ``model`` at the current point.

    Returns a dict with ``variables``, ``constraints``, ``J``, ``g``, ``row_lb``, ``row_ub``, ``x``,
    ``col_lb``, ``col_ub``, ``grad``, ``sense``.
    """
    col = Columns()
    cons: list[Any] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lbs, ubs, gs = [], [], []

    def grad_of(expr: Any, where: str, out_cols: list[int], out_vals: list[float]) -> float:
        """Append ∇expr entries; return the expression's value at the current point."""
        lin_cols: list[int] = []
        lin_vals: list[float] = []
        try:
            linear_terms(expr, col, lin_cols, lin_vals, where)
            out_cols.extend(lin_cols)
            out_vals.extend(lin_vals)
        except NotLinearError:
            wrt = list(identify_variables(expr, include_fixed=False))
            ders = differentiate(expr, wrt_list=wrt, mode=Modes.reverse_numeric)
            out_cols.extend(col(v) for v in wrt)
            out_vals.extend(float(d) for d in ders)
        return float(value(expr))

    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        c_cols: list[int] = []
        c_vals: list[float] = []
        gval = grad_of(con.body, f"constraint {con.name}", c_cols, c_vals)
        lo, up = row_bounds(con, 0.0)
        rows.extend([len(cons)] * len(c_cols))
        cols.extend(c_cols)
        vals.extend(c_vals)
        cons.append(con)
        lbs.append(lo)
        ubs.append(up)
        gs.append(gval)
    obj = active_objective(model)
    o_cols: list[int] = []
    o_vals: list[float] = []
    grad_of(obj.expr, f"objective {obj.name}", o_cols, o_vals)
    n = len(col.variables)
    J = sp.csr_array((np.asarray(vals, float), (np.asarray(rows, np.int64),
                                                 np.asarray(cols, np.int64))), shape=(len(cons), n))
    grad = np.zeros(n)
    np.add.at(grad, np.asarray(o_cols, np.int64), np.asarray(o_vals, float))
    bounds = np.array([col_bounds(v) for v in col.variables], float).reshape(n, 2)
    x = np.array([v.value if v.value is not None else np.nan for v in col.variables], float)
    # fixed variables are parameters here, not columns with a multiplier
    free = np.array([not v.fixed for v in col.variables], bool)
    return {"variables": [v for v, f in zip(col.variables, free) if f], "constraints": cons,
            "J": J[:, free], "g": np.asarray(gs, float), "row_lb": np.asarray(lbs, float),
            "row_ub": np.asarray(ubs, float), "x": x[free], "col_lb": bounds[free, 0],
            "col_ub": bounds[free, 1], "grad": grad[free],
            "sense": 1 if obj.sense == pyo.minimize else -1}


def model_kkt(model: Any, duals: Any = None, reduced_costs: Any = None) -> dict[str, float]:
    """KKT residuals of ``model`` at its current point, with constraint multipliers from ``duals``
    (a mapping ConstraintData → value; default ``model.dual``) and bound multipliers from
    ``reduced_costs`` (default ``model.rc``; missing entries count as 0)."""
    duals = duals if duals is not None else getattr(model, "dual", {})
    reduced_costs = reduced_costs if reduced_costs is not None else getattr(model, "rc", {})
    a = model_arrays(model)
    y = np.array([duals.get(c, 0.0) or 0.0 for c in a["constraints"]], float)
    z = np.array([reduced_costs.get(v, 0.0) or 0.0 for v in a["variables"]], float)
    return kkt_residuals(a["grad"], a["J"], a["g"], a["row_lb"], a["row_ub"], a["x"], a["col_lb"],
                         a["col_ub"], y, z, a["sense"])
