"""The solve layer: Pyomo models in, statuses and numbers out.

- :class:`Session` chooses a solver by problem class (LP/MILP → HiGHS, NLP → Ipopt), enforces one time
  limit across a mechanism's solves and accumulates statistics.
- :class:`~fairalloc.solvers.highs.HighsBridge`: persistent Pyomo → highspy bridge for LP/MILP.
- :class:`~fairalloc.solvers.ipopt.CasadiIpopt` / :class:`~fairalloc.solvers.ipopt.ExecutableIpopt`:
  the two Ipopt routes.
- :func:`~fairalloc.solvers.kkt.kkt_residuals` / :func:`~fairalloc.solvers.kkt.model_kkt`: KKT residuals.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any


def _no_scipy_stats_on_import() -> None:
    """Pyomo registers a hook that imports ``scipy.stats`` (about 1 s) the first time anything imports
    scipy; the solve layer needs only ``scipy.sparse``/``scipy.optimize``. Drop that hook while scipy is not
    imported yet (``scipy.stats`` then loads only if something uses it). Any change in Pyomo's internals
    leaves the hook in place: slower, never wrong."""
    with contextlib.suppress(Exception):
        import sys

        import pyomo.common.dependencies as deps

        if "scipy" in sys.modules:
            return
        flag = getattr(deps.scipy, "_indicator_flag", None)
        if flag is not None and getattr(flag, "_callback", None) is getattr(deps, "_finalize_scipy", 0):
            flag._callback = None


_no_scipy_stats_on_import()

from fairalloc.solvers.outcome import SolveOutcome, SolverStats  # noqa: E402
from fairalloc.solvers.session import SOLVERS, Session, SolverSpec, default_solver, solver_table  # noqa: E402

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
