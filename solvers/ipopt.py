"""Ipopt for the NLPs (MNW's log objective, αPF-VDS's per-server problems and MPEC relaxations).

Two routes to the same solver, chosen by :func:`ipopt_route`:

``ipopt`` executable (the route the design card names)
    ``pip install idaes-pse && idaes get-extensions`` puts an ASL ``ipopt`` on PATH; Pyomo's ``ipopt``
    interface writes an NL file, runs it, and imports the ``dual``, ``ipopt_zL_out`` and
    ``ipopt_zU_out`` suffixes. ASL reports multipliers as ``d(objective*)/d(bound)`` for both senses,
    the convention of :mod:`fairalloc.solvers.kkt`.

CasADi's Ipopt 3.14 + MUMPS (used when no executable is on PATH)
    :class:`CasadiIpopt` writes the model with Pyomo's NL writer (no symbolic labels, no linear presolve,
    so every constraint keeps its multiplier), loads it with ``casadi.NlpBuilder().import_nl``, solves
    with ``casadi.nlpsol(..., "ipopt")`` and maps values and multipliers back through the writer's
    column/row order, its scaling factors (a model's export ``scaling_factor`` suffix; the executable
    route passes the same suffix to Ipopt with ``nlp_scaling_method=user-scaling``) and the objective
    sense::

        x      = x̃ / s_x
        dual   = −σ · λ_g · s_g / s_f          (σ = +1 minimise, −1 maximise; CasADi minimises σ·f)
        rc     = −σ · λ_x · s_x / s_f

    Re-solves after bound changes reuse the built ``nlpsol`` (:meth:`CasadiIpopt.update`).

Both routes leave the point in the Pyomo variables and the multipliers in ``model.dual``/``model.rc``,
and return a :class:`~fairalloc.solvers.outcome.SolveOutcome` with KKT residuals computed from the
Pyomo model (:func:`fairalloc.solvers.kkt.model_kkt`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np
import pyomo.environ as pyo

from fairalloc.errors import SolverUnavailableError
from fairalloc.solvers.compile import row_bounds
from fairalloc.solvers.kkt import model_kkt
from fairalloc.solvers.outcome import SolveOutcome
from fairalloc.solvers.quiet import c_output_off_stdout
from fairalloc.status import Status

__all__ = ["CasadiIpopt", "ExecutableIpopt", "casadi_version", "ipopt_executable", "ipopt_route"]

log = logging.getLogger(__name__)

DEFAULT_OPTIONS: dict[str, Any] = {"tol": 1e-8}

_CASADI_STATUS = {
    "Solve_Succeeded": Status.OPTIMAL,
    "Solved_To_Acceptable_Level": Status.CONVERGED,
    "Maximum_Iterations_Exceeded": Status.ITERATION_LIMIT,
    "Maximum_WallTime_Exceeded": Status.TIME_LIMIT,
    "Maximum_CpuTime_Exceeded": Status.TIME_LIMIT,
    "Infeasible_Problem_Detected": Status.INFEASIBLE,
}


_EXE_STATUS = {  # Pyomo's legacy TerminationCondition names
    "optimal": Status.OPTIMAL, "locallyOptimal": Status.OPTIMAL,
    "maxIterations": Status.ITERATION_LIMIT, "maxTimeLimit": Status.TIME_LIMIT,
    "maxEvaluations": Status.ITERATION_LIMIT, "infeasible": Status.INFEASIBLE,
    "locallyInfeasible": Status.INFEASIBLE,
}


def ipopt_executable() -> str | None:
    """Path of an ``ipopt`` executable on PATH (or in IDAES's bin folder), else ``None``."""
    path = shutil.which("ipopt")
    if path:
        return path
    try:
        from pyomo.common import Executable

        exe = Executable("ipopt")
        return str(exe.path()) if exe.available() else None
    except Exception:  # pragma: no cover - pyomo internals vary
        return None


def casadi_version() -> str | None:
    try:
        import casadi
    except ImportError:
        return None
    return str(casadi.__version__)


def ipopt_route() -> str:
    """``"ipopt-exe"`` when an executable is available, else ``"ipopt-casadi"``."""
    if ipopt_executable():
        return "ipopt-exe"
    if casadi_version():
        return "ipopt-casadi"
    raise SolverUnavailableError("no Ipopt available: install idaes-pse and run 'idaes get-extensions' "
                                 "(executable), or 'pip install casadi' (bundled Ipopt)")


def _ensure_suffix(model: Any, name: str) -> Any:
    suf = getattr(model, name, None)
    if suf is None:
        suf = pyo.Suffix(direction=pyo.Suffix.IMPORT)
        model.add_component(name, suf)
    return suf


class CasadiIpopt:
    """A Pyomo NLP solved by CasADi's Ipopt; build once, re-solve after bound changes."""

    name = "ipopt-casadi"

    def __init__(self, model: Any, options: dict[str, Any] | None = None) -> None:
        try:
            import casadi
        except ImportError:  # pragma: no cover
            raise SolverUnavailableError("ipopt-casadi needs the 'casadi' package") from None
        from pyomo.repn.plugins.nl_writer import NLWriter

        self.model = model
        self.options = {**DEFAULT_OPTIONS, **(options or {})}
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.nl")
            with open(path, "w") as stream:
                info = NLWriter().write(model, stream, symbolic_solver_labels=False,
                                        linear_presolve=False, scale_model=True)
            nlp = casadi.NlpBuilder()
            nlp.import_nl(path, {})
        if any(nlp.discrete):
            raise SolverUnavailableError(f"model {model.name} has integer variables; Ipopt would relax "
                                         "them silently (use a MILP solver)")
        self.info = info
        self.variables = list(info.variables)
        self.constraints = list(info.constraints)
        obj = [o for o in info.objectives]
        if len(obj) != 1:
            raise SolverUnavailableError(f"model {model.name}: expected one active objective")
        self.sense = 1 if obj[0].sense == pyo.minimize else -1
        sc = info.scaling
        self.var_scale = np.asarray(sc.variables, float) if sc else np.ones(len(self.variables))
        self.con_scale = np.asarray(sc.constraints, float) if sc else np.ones(len(self.constraints))
        self.obj_scale = float(sc.objectives[0]) if sc else 1.0
        self.x_init = np.asarray(nlp.x_init, float)
        self.lbx, self.ubx = np.asarray(nlp.x_lb, float), np.asarray(nlp.x_ub, float)
        self.lbg, self.ubg = np.asarray(nlp.g_lb, float), np.asarray(nlp.g_ub, float)
        # Pyomo-side bounds at write time, so later changes can be applied as differences
        self._row_bounds0 = np.array([row_bounds(c, 0.0) for c in self.constraints],
                                     float).reshape(-1, 2)
        self._nlp = {"x": casadi.vertcat(*nlp.x), "f": nlp.f, "g": casadi.vertcat(*nlp.g)}
        self._solver: Any = None
        self._stop: _Deadline | None = None
        self._built_for: dict[str, Any] | None = None
        self.build_seconds = time.perf_counter() - t0
        self.lam_g = np.zeros(len(self.constraints))
        self.lam_x = np.zeros(len(self.variables))

    def _nlpsol(self, opts: dict[str, Any]) -> Any:
        import casadi

        if self._solver is None or self._built_for != opts:
            ipopt_opts = {"sb": "yes", "print_level": 0, **opts}
            if self._stop is None:
                self._stop = _Deadline(len(self.lbx), len(self.lbg))
            with c_output_off_stdout():
                self._solver = casadi.nlpsol("fairalloc", "ipopt", self._nlp, {
                    "expand": True, "print_time": False, "error_on_fail": False, "ipopt": ipopt_opts,
                    "iteration_callback": self._stop})
            self._built_for = dict(opts)
        return self._solver

    def update(self, variables: bool = True) -> None:
        """Re-read variable bounds, fixed values, constraint bounds and the starting point from the
        Pyomo model (structure and expressions must be unchanged)."""
        for j, v in enumerate(self.variables):
            s = self.var_scale[j]
            if v.fixed:
                lo = up = v.value
            else:
                lo, up = v.lb, v.ub
            self.lbx[j] = -np.inf if lo is None else lo * s
            self.ubx[j] = np.inf if up is None else up * s
            if v.value is not None:
                self.x_init[j] = v.value * s
        for k, c in enumerate(self.constraints):
            lo, up = row_bounds(c, 0.0)
            lo0, up0 = self._row_bounds0[k]
            s = self.con_scale[k]
            dlo = 0.0 if lo == lo0 else lo - lo0
            dup = 0.0 if up == up0 else up - up0
            new_lo = -np.inf if np.isinf(lo) else (self.lbg[k] + dlo * s if np.isfinite(lo0)
                                                   else None)
            new_up = np.inf if np.isinf(up) else (self.ubg[k] + dup * s if np.isfinite(up0)
                                                  else None)
            if new_lo is None or new_up is None:
                raise SolverUnavailableError(f"constraint {c.name}: a bound appeared that was "
                                             "infinite when the model was written; rebuild")
            self.lbg[k], self.ubg[k] = new_lo, new_up
            self._row_bounds0[k] = (lo, up)

    def solve(self, time_limit: float | None = None, options: dict[str, Any] | None = None,
              kkt: bool = True, warm_start: bool = True) -> SolveOutcome:
        opts = {**self.options, **(options or {})}
        # the time limit is a deadline read by the iteration callback, not an Ipopt option: an option
        # that changes with every solve would rebuild (re-expand) the nlpsol every time, which on large
        # models costs more than the solves and is itself bounded by no limit
        limit = None if time_limit is None else max(float(time_limit), 1e-3)
        deadline = None if limit is None else time.perf_counter() + limit  # building counts too
        solver = self._nlpsol(opts)
        self._stop.deadline = deadline
        args: dict[str, Any] = {"x0": self.x_init, "lbx": self.lbx, "ubx": self.ubx,
                                "lbg": self.lbg, "ubg": self.ubg}
        if warm_start and np.any(self.lam_g):
            args["lam_g0"], args["lam_x0"] = self.lam_g, self.lam_x
        t0 = time.perf_counter()
        with c_output_off_stdout():
            res = solver(**args)
        solve_s = time.perf_counter() - t0
        stats = solver.stats()
        rs = str(stats.get("return_status", "unknown"))
        status = _CASADI_STATUS.get(rs, Status.ERROR)
        if rs == "User_Requested_Stop" and self._stop.stopped:
            status, rs = Status.TIME_LIMIT, "Maximum_WallTime_Exceeded (deadline)"
        has_point = status in (Status.OPTIMAL, Status.CONVERGED, Status.ITERATION_LIMIT,
                               Status.TIME_LIMIT)
        out = SolveOutcome(status=status, solver=self.name, message=rs,
                           iterations=int(stats.get("iter_count", 0)),
                           build_seconds=self.build_seconds, solve_seconds=solve_s,
                           extra={"has_point": has_point})
        self.build_seconds = 0.0  # charged once
        if has_point:
            t1 = time.perf_counter()
            self._load(res)
            out.objective = float(pyo.value(self.info.objectives[0]))
            if kkt:
                out.kkt = model_kkt(self.model)
            out.load_seconds = time.perf_counter() - t1
        if status is not Status.OPTIMAL:
            log.info("Ipopt (CasADi) stopped: %s", rs)
        return out

    def _load(self, res: Any) -> None:
        xs = np.asarray(res["x"], float).ravel()
        self.lam_g = np.asarray(res["lam_g"], float).ravel()
        self.lam_x = np.asarray(res["lam_x"], float).ravel()
        self.x_init = xs.copy()
        x = xs / self.var_scale
        for v, val in zip(self.variables, x):
            if not v.fixed:
                v.set_value(float(val), skip_validation=True)
        for v, expr in self.info.eliminated_vars:
            v.set_value(pyo.value(expr), skip_validation=True)
        sgn = self.sense
        dual = -sgn * self.lam_g * self.con_scale / self.obj_scale
        rc = -sgn * self.lam_x * self.var_scale / self.obj_scale
        dsuf, rsuf = _ensure_suffix(self.model, "dual"), _ensure_suffix(self.model, "rc")
        dsuf.clear()
        rsuf.clear()
        for c, val in zip(self.constraints, dual):
            dsuf[c] = float(val)
        for v, val in zip(self.variables, rc):
            rsuf[v] = float(val)


def _deadline_class() -> type:
    import casadi

    class Deadline(casadi.Callback):
        """CasADi iteration callback: stops Ipopt (``User_Requested_Stop``) once ``deadline``
        (``time.perf_counter()`` seconds) has passed; ``stopped`` says it did."""

        def __init__(self, nx: int, ng: int) -> None:
            casadi.Callback.__init__(self)
            self.nx, self.ng = nx, ng
            self._deadline: float | None = None
            self.stopped = False
            self.construct("fairalloc_deadline", {})

        @property
        def deadline(self) -> float | None:
            return self._deadline

        @deadline.setter
        def deadline(self, value: float | None) -> None:
            self._deadline, self.stopped = value, False

        def get_n_in(self) -> int:
            return casadi.nlpsol_n_out()

        def get_n_out(self) -> int:
            return 1

        def get_name_in(self, i: int) -> str:
            return casadi.nlpsol_out(i)

        def get_name_out(self, i: int) -> str:
            return "ret"

        def get_sparsity_in(self, i: int) -> Any:
            name = casadi.nlpsol_out(i)
            if name == "f":
                return casadi.Sparsity.scalar()
            if name in ("x", "lam_x"):
                return casadi.Sparsity.dense(self.nx)
            if name in ("g", "lam_g"):
                return casadi.Sparsity.dense(self.ng)
            return casadi.Sparsity(0, 0)

        def eval(self, arg: Any) -> list[int]:
            if self._deadline is not None and time.perf_counter() > self._deadline:
                self.stopped = True
                return [1]
            return [0]

    return Deadline


def _Deadline(nx: int, ng: int) -> Any:  # the class is made on first use (casadi is optional)
    global _DEADLINE
    if _DEADLINE is None:
        _DEADLINE = _deadline_class()
    return _DEADLINE(nx, ng)


_DEADLINE: type | None = None


class ExecutableIpopt:
    """Pyomo's ``ipopt`` interface to an ASL executable (the idaes-pse route)."""

    name = "ipopt-exe"


    def __init__(self, model: Any, options: dict[str, Any] | None = None) -> None:
        exe = ipopt_executable()
        if exe is None:
            raise SolverUnavailableError("no 'ipopt' executable on PATH (pip install idaes-pse && "
                                         "idaes get-extensions)")
        self.model = model
        self.options = {**DEFAULT_OPTIONS, **(options or {})}
        self.opt = pyo.SolverFactory("ipopt", executable=exe)
        self.build_seconds = 0.0

    def update(self, variables: bool = True) -> None:
        """Nothing to do: every solve writes the model afresh."""

    def solve(self, time_limit: float | None = None, options: dict[str, Any] | None = None,
              kkt: bool = True, warm_start: bool = True) -> SolveOutcome:
        m = self.model
        for name in ("dual", "ipopt_zL_out", "ipopt_zU_out"):
            _ensure_suffix(m, name)
        opts = {**self.options, **(options or {})}
        if isinstance(getattr(m, "scaling_factor", None), pyo.Suffix):
            # Pyomo's legacy NL interface writes the model unscaled and the factors as a suffix,
            # which the ASL Ipopt applies itself under user-scaling (not run on our CI: no executable)
            opts.setdefault("nlp_scaling_method", "user-scaling")
        if time_limit is not None:
            opts["max_wall_time"] = max(float(time_limit), 1e-3)
        t0 = time.perf_counter()
        with c_output_off_stdout():
            res = self.opt.solve(m, options=opts, load_solutions=False, tee=False)
        solve_s = time.perf_counter() - t0
        tc = str(res.solver.termination_condition).split(".")[-1]
        status = _EXE_STATUS.get(tc, Status.ERROR)
        has_point = status in (Status.OPTIMAL, Status.ITERATION_LIMIT, Status.TIME_LIMIT) and len(
            res.solution) > 0
        out = SolveOutcome(status=status, solver=self.name, message=tc, solve_seconds=solve_s,
                           extra={"has_point": has_point})
        if has_point:
            m.solutions.load_from(res)
            rc = _ensure_suffix(m, "rc")
            rc.clear()
            for v in set(m.ipopt_zL_out) | set(m.ipopt_zU_out):
                rc[v] = (m.ipopt_zL_out.get(v, 0.0) or 0.0) + (m.ipopt_zU_out.get(v, 0.0) or 0.0)
            out.objective = float(pyo.value(next(m.component_data_objects(pyo.Objective,
                                                                            active=True))))
            if kkt:
                out.kkt = model_kkt(m)
        return out
