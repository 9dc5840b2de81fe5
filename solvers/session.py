"""The solve layer's front door: choose a solver by problem class, keep time, count work.

A mechanism receives a :class:`Session` and never names a solver itself::

    lp = session.open(model, "lp")        # persistent handle (HiGHS unless the user chose another)
    out = session.run(lp)                 # SolveOutcome with a status; values loaded into the model
    ...change the model...; lp.update(); out = session.run(lp)

The session enforces one time limit across every solve a mechanism makes, accumulates iterations and
seconds (:class:`~fairalloc.solvers.outcome.SolverStats`), and keeps the worst KKT residual seen.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fairalloc.errors import ParameterError, SolverUnavailableError
from fairalloc.solvers.outcome import SolveOutcome, SolverStats
from fairalloc.status import Status

__all__ = ["SOLVERS", "Session", "SolverSpec", "default_solver", "solver_table"]

log = logging.getLogger(__name__)

PROBLEM_CLASSES = ("lp", "milp", "nlp")


@dataclass(frozen=True)
class SolverSpec:
    name: str
    classes: tuple[str, ...]
    summary: str
    make: Callable[[Any, dict[str, Any]], Any]
    probe: Callable[[], str | None]  # version/detail string if available, else None


def _highs(algorithm: str) -> Callable[[Any, dict[str, Any]], Any]:
    def make(model: Any, options: dict[str, Any]) -> Any:
        from fairalloc.solvers.highs import HighsBridge

        return HighsBridge(model, algorithm=algorithm, options=options)

    return make


def _probe_highs() -> str | None:
    try:
        from fairalloc.solvers.highs import highs_version

        return f"highspy {highs_version()}"
    except Exception:  # pragma: no cover
        return None


def _probe_pyomo(factory: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        try:
            import pyomo.environ  # noqa: F401  (registers the solver plugins)
            from pyomo.contrib.solver.common.factory import SolverFactory

            s = SolverFactory(factory)
            if s is None or not s.available():
                return None
            ver = s.version()
            return f"pyomo '{factory}' " + (".".join(map(str, ver)) if ver else "")
        except Exception:
            return None

    return probe


def _pyomo(factory: str, name: str) -> Callable[[Any, dict[str, Any]], Any]:
    def make(model: Any, options: dict[str, Any]) -> Any:
        from fairalloc.solvers.pyomo_iface import PyomoSolver

        return PyomoSolver(model, factory, name, options)

    return make


def _ipopt(route: str | None) -> Callable[[Any, dict[str, Any]], Any]:
    def make(model: Any, options: dict[str, Any]) -> Any:
        from fairalloc.solvers.ipopt import CasadiIpopt, ExecutableIpopt, ipopt_route

        chosen = route or ipopt_route()
        return (ExecutableIpopt if chosen == "ipopt-exe" else CasadiIpopt)(model, options)

    return make


def _probe_ipopt(route: str | None) -> Callable[[], str | None]:
    def probe() -> str | None:
        from fairalloc.solvers.ipopt import casadi_version, ipopt_executable, ipopt_route

        exe, cas = ipopt_executable(), casadi_version()
        if route == "ipopt-exe":
            return f"executable {exe}" if exe else None
        if route == "ipopt-casadi":
            return f"Ipopt 3.14 in casadi {cas}" if cas else None
        try:
            active = ipopt_route()
        except SolverUnavailableError:
            return None
        return f"active route: {active}"

    return probe


SOLVERS: dict[str, SolverSpec] = {s.name: s for s in [
    SolverSpec("highs", ("lp", "milp"), "HiGHS via highspy, persistent bridge (default for LP/MILP)",
               _highs("choose"), _probe_highs),
    SolverSpec("highs-simplex", ("lp", "milp"), "HiGHS dual simplex", _highs("simplex"), _probe_highs),
    SolverSpec("highs-ipm", ("lp", "milp"), "HiGHS interior point (with crossover)", _highs("ipm"),
               _probe_highs),
    SolverSpec("highs-pdlp", ("lp",), "HiGHS first-order PDLP (low accuracy)", _highs("pdlp"),
               _probe_highs),
    SolverSpec("pyomo-highs", ("lp", "milp"), "HiGHS through Pyomo's persistent interface "
               "(contrib.solver 'highs'), for comparison", _pyomo("highs", "pyomo-highs"),
               _probe_pyomo("highs")),
    SolverSpec("ipopt", ("nlp",), "Ipopt: the executable if on PATH, else CasADi's (default NLP)",
               _ipopt(None), _probe_ipopt(None)),
    SolverSpec("ipopt-exe", ("nlp",), "Ipopt executable through Pyomo's 'ipopt' interface (idaes)",
               _ipopt("ipopt-exe"), _probe_ipopt("ipopt-exe")),
    SolverSpec("ipopt-casadi", ("nlp",), "Ipopt 3.14 + MUMPS shipped in the casadi wheel (NL bridge)",
               _ipopt("ipopt-casadi"), _probe_ipopt("ipopt-casadi")),
    SolverSpec("scip", ("lp", "milp", "nlp"), "SCIP via pyscipopt (Pyomo 'scip_direct'): global, "
               "no multipliers", _pyomo("scip_direct", "scip"), _probe_pyomo("scip_direct")),
]}

DEFAULTS = {"lp": "highs", "milp": "highs", "nlp": "ipopt"}


def default_solver(problem: str) -> str:
    return DEFAULTS[problem]


def solver_table() -> list[dict[str, Any]]:
    """Every known solver with the classes it takes and whether it is available here."""
    rows = []
    for s in SOLVERS.values():
        detail = s.probe()
        rows.append({"name": s.name, "classes": ",".join(s.classes), "available": detail is not None,
                     "detail": detail or "not installed", "summary": s.summary})
    return rows


class Session:
    """Solver choice, options, one time limit and accumulated statistics for one mechanism run.

    ``solver`` applies to every problem class it supports; other classes use the defaults (HiGHS for
    LP/MILP, Ipopt for NLP). ``options`` go to the chosen solver verbatim.

    ``customize(model, instance)`` is the user's hook (``fairalloc.solve(..., customize=fn)``): the
    session calls it on every Pyomo model a mechanism opens, once per model object, the first time
    :meth:`open` or :meth:`solve` sees it — after the mechanism built the model and before the solver
    handle reads it, so a persistent handle compiles the edited model. ``instance`` is what the hook
    receives as its second argument. ``customized`` counts the models the hook has edited.
    """

    def __init__(self, solver: str | None = None, time_limit: float | None = None,
                 options: dict[str, Any] | None = None, kkt: bool = True,
                 customize: Callable[[Any, Any], Any] | None = None, instance: Any = None) -> None:
        if solver is not None and solver not in SOLVERS:
            raise ParameterError(f"--solver {solver!r}: unknown solver (known: "
                                 f"{', '.join(SOLVERS)})")
        if time_limit is not None and not time_limit > 0:
            raise ParameterError(f"time_limit = {time_limit!r}: must be > 0 seconds")
        self.solver = solver
        self.options = dict(options or {})
        self.time_limit = time_limit
        self.kkt = kkt
        self.start = time.perf_counter()
        self.stats = SolverStats()
        self.outcomes: list[SolveOutcome] = []
        if customize is not None and not callable(customize):
            raise ParameterError(f"customize = {customize!r}: expected a function fn(model, instance)")
        self.customize = customize
        self.instance = instance
        self.customized = 0
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()

    def check(self, problem: str) -> None:
        """Say (INFO log) when the user's solver does not take the mechanism's problem class: the
        solver applies to the classes it supports and the others keep their defaults, so
        ``--solver ipopt`` over a batch of LP and NLP mechanisms changes only the NLPs. The result's
        ``solver.name`` records what ran (``"none"`` for a combinatorial mechanism)."""
        if self.solver is None:
            return
        if problem not in PROBLEM_CLASSES:
            log.info("--solver %s: this mechanism solves no optimisation problem; ignored", self.solver)
        elif problem not in SOLVERS[self.solver].classes:
            log.info("--solver %s does not take %ss; this mechanism uses the default %s", self.solver,
                     problem.upper(), DEFAULTS[problem])

    def solver_for(self, problem: str) -> SolverSpec:
        if problem not in PROBLEM_CLASSES:
            raise ValueError(f"unknown problem class {problem!r}")
        if self.solver is not None and problem in SOLVERS[self.solver].classes:
            return SOLVERS[self.solver]
        return SOLVERS[DEFAULTS[problem]]

    # ------------------------------------------------------------------ time
    def remaining(self) -> float | None:
        if self.time_limit is None:
            return None
        return self.time_limit - (time.perf_counter() - self.start)

    def expired(self) -> bool:
        rem = self.remaining()
        return rem is not None and rem <= 0

    # ------------------------------------------------------------------ solving
    def apply_customize(self, model: Any) -> None:
        """Run the user's ``customize`` hook on ``model`` unless it already ran on this model object.
        :meth:`open` calls it; a mechanism that reads a model without opening a handle on it calls it
        itself. A hook that raises is reported as a :class:`ParameterError` naming the model."""
        if self.customize is None or model in self._seen:
            return
        self._seen.add(model)
        try:
            self.customize(model, self.instance)
        except Exception as exc:
            name = str(getattr(model, "name", model)).strip("'")  # Pyomo quotes names with brackets
            raise ParameterError(f"customize hook failed on model {name!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
        self.customized += 1

    def open(self, model: Any, problem: str = "lp", options: dict[str, Any] | None = None) -> Any:
        """A (persistent where possible) solver handle for ``model`` (after the ``customize`` hook
        has run on it)."""
        self.apply_customize(model)
        spec = self.solver_for(problem)
        # the user's options are meant for the solver the user chose (or for the defaults)
        user_opts = self.options if self.solver in (None, spec.name) else {}
        handle = spec.make(model, {**user_opts, **(options or {})})
        self.stats.build_seconds += handle.build_seconds
        handle.build_seconds = 0.0  # counted once, here
        return handle

    def run(self, handle: Any, options: dict[str, Any] | None = None) -> SolveOutcome:
        """Solve with the remaining time; record the outcome. Never raises on a solver failure."""
        rem = self.remaining()
        if rem is not None and rem <= 0:
            out = SolveOutcome(status=Status.TIME_LIMIT, solver=handle.name,
                               message="time limit reached before this solve")
        else:
            out = handle.solve(time_limit=rem, options=options, kkt=self.kkt)
        self.stats.add(out)
        self.outcomes.append(out)
        return out

    def canonical(self, model: Any, scale: Any, objective_value: float | None = None,
                  options: dict[str, Any] | None = None) -> SolveOutcome:
        """The canonical point of the face of optima (:mod:`fairalloc.solvers.canonical`), within
        the remaining time; counted as one more solve (the solver's name is unchanged). ``options``:
        HiGHS options for the tie-break LP."""
        from fairalloc.solvers.canonical import canonical_point

        rem = self.remaining()
        if rem is not None and rem <= 0:
            return SolveOutcome(status=Status.TIME_LIMIT, solver="highs-tiebreak",
                                message="time limit reached before the canonical tie-break")
        out = canonical_point(model, scale, objective_value, rem,
                              sifting=self.options.get("sifting", "auto"), options=options)
        self.stats.solves += 1
        self.stats.iterations += out.iterations
        self.stats.build_seconds += out.build_seconds
        self.stats.solve_seconds += out.solve_seconds
        self.outcomes.append(out)
        return out

    def solve(self, model: Any, problem: str = "lp", options: dict[str, Any] | None = None
              ) -> SolveOutcome:
        """One-shot: open a handle and run it once."""
        return self.run(self.open(model, problem), options)
