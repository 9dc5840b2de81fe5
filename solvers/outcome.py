"""What one solver call returns: a status first, numbers second."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fairalloc.status import Status

__all__ = ["SolveOutcome", "SolverStats"]


@dataclass
class SolveOutcome:
    """One solve of one model. Values (and multipliers) are loaded into the Pyomo model only when
    the solver returned a point; ``status`` says whether that point is optimal."""

    status: Status
    solver: str
    message: str = ""
    iterations: int = 0
    build_seconds: float = 0.0
    solve_seconds: float = 0.0
    load_seconds: float = 0.0
    objective: float | None = None
    kkt: dict[str, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status.ok

    @property
    def has_point(self) -> bool:
        """Values were loaded (optimal, or a feasible point at a limit)."""
        return bool(self.extra.get("has_point", self.ok))


@dataclass
class SolverStats:
    """Accumulated over every solve a mechanism made (iterative mechanisms solve many models)."""

    solver: str = ""
    solves: int = 0
    iterations: int = 0
    build_seconds: float = 0.0
    solve_seconds: float = 0.0
    load_seconds: float = 0.0
    max_kkt: float | None = None
    max_kkt_relative: float | None = None  # each solve's worst residual over its own scale (solvers.kkt)
    last: SolveOutcome | None = None

    def add(self, out: SolveOutcome) -> None:
        self.solver = self.solver or out.solver
        if out.solver not in self.solver.split("+"):
            self.solver = f"{self.solver}+{out.solver}"
        self.solves += 1
        self.iterations += out.iterations
        self.build_seconds += out.build_seconds
        self.solve_seconds += out.solve_seconds
        self.load_seconds += out.load_seconds
        if out.kkt is not None:
            self.max_kkt = max(self.max_kkt or 0.0, out.kkt["max"])
            if "relative" in out.kkt:
                self.max_kkt_relative = max(self.max_kkt_relative or 0.0, out.kkt["relative"])
        self.last = out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("last")
        return d
