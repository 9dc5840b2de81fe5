r"""Solving a Pyomo MPEC (``pyomo.mpec`` ``Complementarity``) with an NLP solver: Scholtes' relaxation.

The NL → CasADi route cannot import complementarity rows, and ``mpec.standard_form`` alone drops the
complementarity silently (docs/solvers.md). ``mpec.simple_nonlinear`` rewrites every ``0 ≤ a ⊥ b ≥ 0`` as

.. math::

    a \ge 0, \qquad b \ge 0, \qquad a\,b \le \tau \qquad (\tau = \texttt{mpec\_bound}),

an ordinary NLP for ``τ > 0``; solving it for ``τ = 10⁻², 10⁻³, …, 10⁻⁹`` (and finally 0), each solve warm
started from the last, follows the relaxed solutions to a solution of the complementarity system
(Scholtes 2001). ``τ`` is a mutable parameter in the rows' upper bounds, so one persistent solver handle
re-solves after :meth:`~fairalloc.solvers.ipopt.CasadiIpopt.update`.

:class:`ScholtesRelaxation` is the forward transformation plus the loop; the solution lives in the
original variables (the transformation only adds auxiliary ones), so nothing needs mapping back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyomo.environ as pyo
from pyomo.mpec import Complementarity

from fairalloc.solvers import Session, SolveOutcome
from fairalloc.status import Status

__all__ = ["ScholtesRelaxation"]

log = logging.getLogger(__name__)

DEFAULT_BOUNDS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 0.0)


@dataclass
class ScholtesRelaxation:
    """Relax the complementarity of ``model`` in place and solve it for shrinking bounds."""

    model: Any
    bounds: Sequence[float] = DEFAULT_BOUNDS
    history: list[dict[str, Any]] = field(default_factory=list)

    def apply(self) -> Any:
        """``mpec.simple_nonlinear`` with the first bound; auxiliary variables start at the values of
        the expressions they stand for (the transformation leaves them uninitialised)."""
        m = self.model
        if not list(m.component_data_objects(Complementarity, active=True, descend_into=True)):
            raise ValueError(f"model {m.name}: no active Complementarity to relax")
        pyo.TransformationFactory("mpec.simple_nonlinear").apply_to(m, mpec_bound=self.bounds[0])
        for blk in m.component_data_objects(pyo.Block, descend_into=True):
            ve, v = blk.component("ve"), blk.component("v")
            if ve is not None and v is not None:
                v.set_value(max(0.0, pyo.value(ve.expr.args[1])), skip_validation=True)
        if not list(m.component_data_objects(pyo.Objective, active=True)):
            m.feasibility = pyo.Objective(expr=0.0, doc="complementarity systems have no objective")
        return m

    def solve(self, session: Session, options: dict[str, Any] | None = None,
              done: Callable[[float], bool] | None = None) -> SolveOutcome:
        """Solve for every bound in turn; ``done(τ)``, called after each successful solve, may end the loop
        early (e.g. once an active-set Newton step from the current point solves the system exactly).
        If a solve after the first fails, the point of the previous bound is restored and the outcome
        says so (status ``converged``: the caller judges that point by its complementarity residual); a
        failure of the first solve is returned as it is."""
        handle = session.open(self.model, "nlp", options)
        # KKT residuals of the relaxed NLPs mean little (an MPCC has no bounded multipliers as τ → 0)
        # and cost more than the solves; the caller measures the complementarity residual instead
        kkt, session.kkt = session.kkt, False
        try:
            return self._loop(session, handle, done)
        finally:
            session.kkt = kkt

    def _loop(self, session: Session, handle: Any, done: Callable[[float], bool] | None) -> SolveOutcome:
        m = self.model
        out: SolveOutcome | None = None
        saved: list[tuple[Any, Any]] = []
        for k, tau in enumerate(self.bounds):
            m.mpec_bound = tau
            if k:
                handle.update()
            out = session.run(handle)
            self.history.append({"mpec_bound": tau, "status": out.status.value,
                                 "iterations": out.iterations})
            log.info("Scholtes relaxation: bound %.0e, %s in %d iterations", tau, out.status.value,
                     out.iterations)
            if not out.ok:
                if k == 0:
                    break
                for v, val in saved:
                    v.set_value(val, skip_validation=True)
                self.history[-1]["status"] += " (kept the previous bound's point)"
                # a limit stays a limit (the caller reports the point it has, with that status);
                # any other failure leaves a point the caller judges by its residual
                limit = out.status in (Status.TIME_LIMIT, Status.ITERATION_LIMIT)
                out = SolveOutcome(status=out.status if limit else Status.CONVERGED,
                                   solver=out.solver, extra={"has_point": True},
                                   message=f"bound {tau:.0e} failed ({out.message}); point of bound "
                                           f"{self.bounds[k - 1]:.0e}")
                break
            saved = [(v, v.value) for v in m.component_data_objects(pyo.Var, descend_into=True)]
            if done is not None and done(tau):
                self.history[-1]["stopped"] = "done"
                break
        assert out is not None
        return out
