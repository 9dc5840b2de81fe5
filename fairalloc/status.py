"""Outcome of a solve: data, never a printed warning.

``optimal`` and ``converged`` are the only successful outcomes; everything else is also a non-zero exit
code from the CLI (docs/cli.md#result). A solver that stopped at a limit reports the limit, even if it has a
feasible point in hand.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    OPTIMAL = "optimal"
    """The solver proved optimality (LP/MILP), or Ipopt met its tolerances (NLP)."""
    CONVERGED = "converged"
    """An iterative mechanism reached its fixed-point tolerance."""
    ITERATION_LIMIT = "iteration_limit"
    """Stopped at an iteration cap before meeting the tolerance."""
    TIME_LIMIT = "time_limit"
    """Stopped at the time limit before meeting the tolerance."""
    INFEASIBLE = "infeasible"
    """The model has no feasible point (proven or detected locally)."""
    ERROR = "error"
    """Anything else: the solver failed, the problem was unbounded, a numerical breakdown."""

    @property
    def ok(self) -> bool:
        return self in (Status.OPTIMAL, Status.CONVERGED)

    def __str__(self) -> str:  # so f"{status}" prints "optimal"
        return self.value


def worst(*statuses: Status) -> Status:
    """The least successful of several statuses (used by iterative mechanisms)."""
    order = [Status.ERROR, Status.INFEASIBLE, Status.TIME_LIMIT, Status.ITERATION_LIMIT,
             Status.CONVERGED, Status.OPTIMAL]
    return min(statuses, key=order.index) if statuses else Status.OPTIMAL
