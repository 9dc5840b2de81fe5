r"""Linear expressions held as numpy arrays: Pyomo models built in bulk, compiled in bulk.

A row of χ such as :math:`\sum_n d_{n,r} x_{n,i} \le c_{i,r}` has up to ``|N|`` terms. Built as an
ordinary :class:`~pyomo.core.expr.numeric_expr.LinearExpression`, every term is a Python object
(a ``MonomialTermExpression``) created at build time and walked again by the solver translation: at
2048 users × 256 servers that is 3·10⁶ objects, several seconds each way.

:class:`ArrayLinearExpression` is a ``LinearExpression`` that stores its coefficients and the
positions of its variables in a :class:`VarFamily` (an ordered list of variables, e.g. every
``chi.x[n, i]``) as arrays, and creates the monomial terms only when something asks for them
(``pprint``, the LP/NL writers, Pyomo's own solvers, cloning). To Pyomo it is the same expression
it always was — printing, writing, evaluating and editing it give exactly what the equivalent
``LinearExpression`` gives — while :func:`fairalloc.solvers.compile.compile_linear` reads the arrays
directly and never touches the terms.

:func:`column_bounds` reads the bounds, fixed flags and integrality of many variables at once (the
per-variable ``lb``/``ub`` properties cost ~2 µs each).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
from pyomo.core.base.var import VarData
from pyomo.core.expr.numeric_expr import LinearExpression, MonomialTermExpression, NumericExpression

__all__ = ["ArrayLinearExpression", "VarFamily", "array_sum", "column_bounds", "load_values",
           "register_with"]

_ARGS = NumericExpression.__dict__["_args_"]  # the slot that holds a node's children
INF = float("inf")


class VarFamily:
    """An ordered, fixed list of variables that array expressions index by position (typically all
    data of one indexed ``Var``, in index order)."""

    __slots__ = ("__weakref__", "variables")

    def __init__(self, variables: Sequence[Any]) -> None:
        self.variables = list(variables)

    def __len__(self) -> int:
        return len(self.variables)


class ArrayLinearExpression(LinearExpression):
    """``Σ_k coefs[k] · family.variables[positions[k]]`` (no constant), terms created on demand.

    Build with :func:`array_sum`. Constructed with ``args`` (as Pyomo does when it rebuilds or
    extends a node) it is an ordinary ``LinearExpression``.
    """

    __slots__ = ("coefs", "family", "positions")

    def __init__(self, args: Any = None, constant: Any = None, linear_coefs: Any = None,
                 linear_vars: Any = None) -> None:
        self.coefs = self.positions = self.family = None
        super().__init__(args, constant, linear_coefs, linear_vars)

    @classmethod
    def from_arrays(cls, coefs: np.ndarray, positions: np.ndarray, family: VarFamily
                    ) -> ArrayLinearExpression:
        e = cls.__new__(cls)
        e.coefs = np.asarray(coefs, dtype=float)
        e.positions = np.asarray(positions, dtype=np.int64)
        e.family = family
        _ARGS.__set__(e, None)
        e._nargs = len(e.coefs)
        return e

    @property
    def _args_(self) -> list[Any]:  # type: ignore[override]
        args = _ARGS.__get__(self)
        if args is None:  # first use: create the terms a LinearExpression would hold
            variables = self.family.variables
            args = list(map(MonomialTermExpression,
                            zip(self.coefs.tolist(), [variables[p] for p in self.positions.tolist()])))
            _ARGS.__set__(self, args)
        return args

    @_args_.setter
    def _args_(self, value: list[Any]) -> None:
        _ARGS.__set__(self, value)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        # Pyomo's walkers (writers, repn visitors, differentiation) dispatch on ``node.__class__``
        # through tables of exact classes: to them this node is the LinearExpression it stands for
        return LinearExpression if self.coefs is not None else ArrayLinearExpression

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # pickled (and deep-copied) as the LinearExpression it stands for
        return (LinearExpression, (list(self.args),))

    @property
    def is_array(self) -> bool:
        """True when the arrays describe this expression (always, unless built from ``args``)."""
        return self.coefs is not None

    def create_node_with_local_data(self, args: Any, classtype: Any = None) -> Any:
        # a rebuilt node (clone, transformation) is an ordinary LinearExpression
        return super().create_node_with_local_data(args, classtype or LinearExpression)


def array_sum(coefs: np.ndarray, positions: np.ndarray, family: VarFamily) -> ArrayLinearExpression:
    """``Σ_k coefs[k] · family.variables[positions[k]]`` as an :class:`ArrayLinearExpression`."""
    return ArrayLinearExpression.from_arrays(coefs, positions, family)


def column_bounds(variables: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lb, ub, integer)`` of ``variables`` as arrays; a fixed variable has ``lb = ub = value``,
    a missing bound is ``∓inf``.

    Variables with no explicit bounds that are not fixed (almost all, in our models) are read in bulk:
    their bounds and integrality come from their domain, evaluated once per domain. The others are
    read one by one through Pyomo's public properties.
    """
    n = len(variables)
    lb, ub = np.full(n, -INF), np.full(n, INF)
    integer = np.zeros(n, bool)
    if not n:
        return lb, ub, integer
    try:
        no_lb = np.equal(np.array(list(map(_LB, variables)), dtype=object), None)
        no_ub = np.equal(np.array(list(map(_UB, variables)), dtype=object), None)
        fixed = np.fromiter(map(_FIXED, variables), bool, n)
        domain = np.fromiter(map(id, map(_DOMAIN, variables)), np.int64, n)
    except AttributeError:  # not VarData (another layout): every variable the public way
        slow = range(n)
    else:
        plain = no_lb & no_ub & ~fixed
        slow = np.flatnonzero(~plain).tolist()
        idx = np.flatnonzero(plain)
        if idx.size:
            _, first, inverse = np.unique(domain[idx], return_index=True, return_inverse=True)
            table = np.array([_domain_bounds(variables[int(idx[f])]) for f in first], float)
            lb[idx], ub[idx] = table[inverse, 0], table[inverse, 1]
            integer[idx] = table[inverse, 2] > 0
    for j in slow:
        v = variables[j]
        if v.fixed:
            lb[j] = ub[j] = float(v.value)
        else:
            lb[j], ub[j], _ = _domain_bounds(v)
        integer[j] = bool(v.is_integer() or v.is_binary())
    return lb, ub, integer


# VarData's slots, read in bulk (the public properties re-derive the domain bounds per call)
_LB, _UB, _FIXED, _DOMAIN = (attrgetter(a) for a in ("_lb", "_ub", "_fixed", "_domain"))


def _domain_bounds(v: Any) -> tuple[float, float, float]:
    lo, up = v.bounds
    return (-INF if lo is None else float(lo), INF if up is None else float(up),
            float(v.is_integer() or v.is_binary()))


def load_values(variables: Sequence[Any], values: np.ndarray) -> None:
    """Set ``variables`` (all but the fixed ones) to ``values`` without validation, as a solver
    interface does after a solve."""
    try:
        fixed = np.fromiter(map(_FIXED, variables), bool, len(variables))
    except AttributeError:
        fixed = np.fromiter((v.fixed for v in variables), bool, len(variables))
    set_value = VarData.set_value
    vals = np.asarray(values, float).tolist()
    if not fixed.any() and set(map(type, variables)) == {VarData}:
        for v, val in zip(variables, vals):
            set_value(v, val, True)
        return
    for v, val, fx in zip(variables, vals, fixed.tolist()):
        if not fx:
            v.set_value(val, skip_validation=True)


def register_with(operator_map: dict[Any, Any]) -> None:
    """Teach a walker that dispatches on ``type(node)`` (rather than ``node.__class__``) to treat
    :class:`ArrayLinearExpression` as a ``LinearExpression`` (e.g. Pyomo's SCIP interface)."""
    if LinearExpression in operator_map:
        operator_map.setdefault(ArrayLinearExpression, operator_map[LinearExpression])
