"""Solvers reached through Pyomo's own (new, ``pyomo.contrib.solver``) interfaces.

``pyomo-highs`` is Pyomo's persistent HiGHS interface: the benchmark compares it with
:class:`~fairalloc.solvers.highs.HighsBridge` on the same models. ``scip`` is SCIP through
``scip_direct`` (pyscipopt): LPs, MILPs and NLPs to global optimality, useful as an independent oracle;
it returns no multipliers, so its outcomes carry no KKT residuals.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pyomo.environ as pyo  # (importing it also registers Pyomo's solver plugins)
from pyomo.common.errors import PyomoException

from fairalloc.errors import SolverUnavailableError
from fairalloc.solvers.compile import bound_sources, eval_bounds
from fairalloc.solvers.linear import register_with
from fairalloc.solvers.outcome import SolveOutcome
from fairalloc.solvers.quiet import c_output_off_stdout
from fairalloc.status import Status

__all__ = ["PyomoSolver"]

log = logging.getLogger(__name__)

_TC = {
    "convergenceCriteriaSatisfied": Status.OPTIMAL,
    "emptyModel": Status.OPTIMAL,
    "maxTimeLimit": Status.TIME_LIMIT,
    "iterationLimit": Status.ITERATION_LIMIT,
    "provenInfeasible": Status.INFEASIBLE,
    "locallyInfeasible": Status.INFEASIBLE,
}


class PyomoSolver:
    """A model held by one of Pyomo's new-interface solvers (persistent where the solver is)."""

    def __init__(self, model: Any, factory_name: str, name: str,
                 options: dict[str, Any] | None = None) -> None:
        from pyomo.contrib.solver.common.factory import SolverFactory

        self.model = model
        self.name = name
        self.opt = SolverFactory(factory_name)
        if self.opt is None or not self.opt.available():
            raise SolverUnavailableError(f"solver {name!r} is not available (Pyomo '{factory_name}')")
        if factory_name.startswith("scip"):
            from pyomo.contrib.solver.solvers.scip import base

            register_with(base._operator_map)  # its walker dispatches on type(node)
        self.options = dict(options or {})
        self.build_seconds = 0.0
        self._duals: dict[Any, float] | None = None
        self._persistent = hasattr(self.opt, "remove_constraints")
        self._sources: dict[Any, Any] = {}  # row -> its bound expressions (None: plain numbers)
        self._pushed: dict[Any, tuple[float, float]] = {}  # row -> bound values the solver holds

    def update(self, variables: bool = True) -> None:
        """Pyomo's persistent interfaces detect most model changes themselves, but not a mutable
        ``Param`` in a constraint bound whose value was ``±inf`` when the row was added (Pyomo's
        ``highs`` then records the row as unbounded there for good: progressive filling's floors
        were silently ignored). Rows whose bound values changed since the last solve are removed and
        added again."""
        if not self._persistent or not self._pushed:
            return
        changed = []
        for con in self.model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
            src = self._sources.get(con)
            if src is None:
                continue
            vals = eval_bounds(src, 0.0)
            if self._pushed.get(con) != vals:
                changed.append(con)
        if changed:
            self.opt.remove_constraints(changed)
            self.opt.add_constraints(changed)
            for con in changed:
                self._pushed[con] = eval_bounds(self._sources[con], 0.0)

    def update_rows(self, constraints: list[Any]) -> None:
        """Parameter changes in bodies are detected by Pyomo; bounds as in :meth:`update`."""
        self.update()

    def _record_bounds(self) -> None:
        """Remember the bound values of rows with mutable bounds, as the solver holds them now."""
        if not self._persistent:
            return
        for con in self.model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
            if con not in self._sources:
                self._sources[con] = bound_sources(con)
            if self._sources[con] is not None:
                self._pushed[con] = eval_bounds(self._sources[con], 0.0)

    def solve(self, time_limit: float | None = None, options: dict[str, Any] | None = None,
              kkt: bool = True, warm_start: bool = True) -> SolveOutcome:
        kwargs: dict[str, Any] = {"load_solutions": False, "raise_exception_on_nonoptimal_result": False}
        if time_limit is not None:
            kwargs["time_limit"] = float(time_limit)
        opts = {**self.options, **(options or {})}
        if opts:
            kwargs["solver_options"] = opts
        t0 = time.perf_counter()
        with c_output_off_stdout():  # HiGHS's banner, SCIP's log: never on stdout
            res = self.opt.solve(self.model, **kwargs)
        wall = time.perf_counter() - t0
        if not self._pushed:
            self._record_bounds()
        tc = str(res.termination_condition).split(".")[-1]
        status = _TC.get(tc, Status.ERROR)
        sol = str(res.solution_status).split(".")[-1]
        has_point = sol in ("feasible", "optimal") and status is not Status.INFEASIBLE
        if status is Status.OPTIMAL and sol != "optimal":
            status = Status.ERROR
        timing = getattr(res, "timing_info", None)
        solve_s = getattr(timing, "solver_wall_time", None) or wall
        out = SolveOutcome(status=status, solver=self.name, message=f"{tc} ({sol})",
                           iterations=int(getattr(res, "iteration_count", 0) or 0),
                           build_seconds=max(0.0, wall - solve_s), solve_seconds=solve_s,
                           extra={"has_point": has_point})
        self._duals = None
        if has_point:
            t1 = time.perf_counter()
            res.solution_loader.load_vars()
            out.objective = res.incumbent_objective
            try:
                self._duals = res.solution_loader.get_duals()
                rcs = res.solution_loader.get_reduced_costs()
            except (NotImplementedError, AttributeError, RuntimeError, PyomoException):
                # (a MILP has none: Pyomo >= 6.9 raises NoDualsError, a PyomoException)
                self._duals = None
            if kkt and self._duals is not None:
                from fairalloc.solvers.kkt import model_kkt

                out.kkt = model_kkt(self.model, self._duals, rcs)
            out.load_seconds = time.perf_counter() - t1
        return out

    def duals(self, cons: list[Any]) -> np.ndarray | None:
        """Constraint multipliers of the last solve, or ``None`` if the solver gives none."""
        if self._duals is None:
            return None
        return np.array([self._duals.get(c, 0.0) for c in cons], float)
