"""The solve layer: Pyomo models in, statuses and numbers out.

- :class:`Session` chooses a solver by problem class (LP/MILP → HiGHS, NLP → Ipopt), enforces one time
  limit across a mechanism's solves and accumulates statistics.
- :class:`~fairalloc.solvers.highs.HighsBridge`: persistent Pyomo → highspy bridge for LP/MILP.
- :class:`~fairalloc.solvers.ipopt.CasadiIpopt` / :class:`~fairalloc.solvers.ipopt.ExecutableIpopt`:
  the two Ipopt routes.
- :func:`~fairalloc.solvers.kkt.kkt_residuals` / :func:`~fairalloc.solvers.kkt.model_kkt`: KKT residuals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairalloc.solvers.outcome import SolveOutcome, SolverStats
from fairalloc.solvers.session import SOLVERS, Session, SolverSpec, default_solver, solver_table

__all__ = ["SOLVERS", "Session", "SolveOutcome", "SolverSpec", "SolverStats", "default_solver",
           "kkt_residuals", "model_kkt", "solver_table"]

if TYPE_CHECKING:
    from fairalloc.solvers.kkt import kkt_residuals, model_kkt


def __getattr__(name: str) -> Any:
    # the KKT module imports scipy, which (imported after Pyomo) costs ~1 s: only when asked for
    if name in ("kkt_residuals", "model_kkt"):
        from fairalloc.solvers import kkt

        return getattr(kkt, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
