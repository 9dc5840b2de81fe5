"""One measured case of a benchmark, run in its own process: ``python -m benchmarks._case CASE.json``.

A fresh process per case gives every approach the same start (imports done before the clock starts,
no memory left over from earlier cases) and a peak resident set that belongs to that case alone.
The spec names the approach, the mechanism and the instance folder (CSV form); the last line of
stdout is a JSON object with the phases (wall seconds), the CPU seconds of the whole case, the peak
resident memory, the LP count and sizes, the objective and the user totals ``X`` for cross-checks.

Approaches:

- ``fairalloc``: :func:`fairalloc.solve` (phases from ``Result.timings``), then the verification
  (:func:`fairalloc.verify.verify`, both sharing-incentive measures and, up to ``ef_max_users``
  users, envy-freeness);
- ``floor``: the same LPs built from numpy into highspy (:mod:`benchmarks._floor`);
- ``cvxpy``: the same LPs written in cvxpy (:mod:`benchmarks._cvxpy`) with ``solver`` (``null``:
  cvxpy's default).

Options for the solver go in ``solver`` / ``solver_options`` (fairalloc) or ``options`` (floor).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# mechanism -> (kind, floor/cvxpy coefficient name, fairalloc mechanism, fairalloc parameters)
FORMS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "drfh": ("maxmin", "drfh", "drfh", {}),
    "tsf": ("maxmin", "tsf", "tsf", {}),
    "tsf-er": ("maxmin", "tsf-er", "tsf-er", {}),
    "tsf-er-paper": ("equal", "tsf-er", "tsf-er", {"variant": "paper"}),
    "utilitarian": ("sum", "utilitarian", "utilitarian", {}),
    "relative-utilitarian": ("sum", "relative-utilitarian", "relative-utilitarian", {}),
    "cru": ("none", "", "cru", {}),
}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux


def _fairalloc(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    from fairalloc import solve
    from fairalloc.io import load_instance
    from fairalloc.verify import verify
    from fairalloc.verify.fairness import envy_free, sharing_incentive

    _, _, mech, params = FORMS[spec["mechanism"]]
    res = solve(folder, mech, solver=spec.get("solver"), solver_options=spec.get("solver_options"),
                **params)
    out: dict[str, Any] = {k: float(v) for k, v in res.timings.items()}
    out["end_to_end"] = out.pop("total")
    t0 = time.perf_counter()
    inst = load_instance(folder)
    if spec.get("verify", True):
        rep = verify(inst, res)
        for d in ("apf", "tsfer"):
            sharing_incentive(inst, res.allocation, d)
        if inst.n_users <= spec.get("ef_max_users", 512):
            envy_free(inst, res.allocation)
        out["verify"] = time.perf_counter() - t0
        out["feasible"] = bool(rep.items["feasible"]["holds"])
    out.update(status=res.status.value, lps=int(res.solver.get("solves", 0)),
               iterations=int(res.solver.get("iterations", 0)),
               max_kkt=res.solver.get("max_kkt_residual"), solver=res.solver.get("name"),
               objective=_objective(spec["mechanism"], inst, res.details, res.tasks),
               X=res.tasks.tolist())
    return out


def _objective(mechanism: str, inst: Any, details: dict[str, Any], X: np.ndarray) -> float:
    """The first LP's optimum, read from what the mechanism reports."""
    kind = FORMS[mechanism][0]
    if kind == "sum":
        return float(details.get("objective", float("nan")))
    if kind == "equal":
        its = details.get("iterations") or [{}]
        return float(its[0].get("level") or float("nan"))
    if kind == "maxmin":
        rounds = details.get("rounds") or details.get("iterations") or [{}]
        return float(rounds[0].get("level", float("nan")))
    return float(details.get("objective", float("nan")))


def _prepare(spec: dict[str, Any], folder: Path, module: Any) -> tuple[Any, Any, np.ndarray, float, float]:
    """Start the clock, load the instance, and pick ``module``'s routine for the mechanism's form:
    ``(routine, instance, share coefficients, t0, load seconds)``."""
    from fairalloc.io import load_instance

    from . import _floor as fl

    kind, coeff_name, _, _ = FORMS[spec["mechanism"]]
    t0 = time.perf_counter()
    inst = load_instance(folder)
    load = time.perf_counter() - t0
    run = {"maxmin": module.progressive_filling, "equal": module.equal_shares,
           "sum": module.weighted_sum}[kind]
    return run, inst, fl.share_coeff(inst, coeff_name), t0, load


def _floor(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    from . import _floor as fl

    run, inst, coeff, t0, load = _prepare(spec, folder, fl)
    o = run(inst, coeff, spec.get("options"))
    out = {"load": load, **o.timings}
    out["end_to_end"] = time.perf_counter() - t0
    rows, cols, nnz = o.shape
    out.update(status=o.status, lps=o.lps, iterations=o.iterations, objective=o.objective,
               X=o.x.sum(axis=1).tolist(), rows=rows, cols=cols, nnz=nnz)
    return out


def _cvxpy(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    from . import _cvxpy as cv

    run, inst, coeff, t0, load = _prepare(spec, folder, cv)
    o = run(inst, coeff, solver=spec.get("solver"))
    out: dict[str, Any] = {"load": load, "build": o.timings.get("build", 0.0),
                           "translate": o.timings.get("compile", 0.0),
                           "solve": o.timings.get("solve", 0.0)}
    out["end_to_end"] = time.perf_counter() - t0
    out.update(status=o.status, lps=o.lps, objective=o.objective, solver=o.solver,
               X=o.x.sum(axis=1).tolist())
    return out


def run_case(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one case in this process (imports first, then the clock)."""
    import cvxpy  # noqa: F401  (imported before the clock starts, like everything else)
    import highspy  # noqa: F401

    import fairalloc.verify  # noqa: F401
    from fairalloc.registry import all_mechanisms

    all_mechanisms()  # every mechanism module imported before the clock starts

    logging.getLogger("pyomo").setLevel(logging.ERROR)
    base = _rss_mb()
    folder = Path(spec["instance"])
    c0, w0 = time.process_time(), time.perf_counter()
    fn = {"fairalloc": _fairalloc, "floor": _floor, "cvxpy": _cvxpy}[spec["approach"]]
    out = fn(spec, folder)
    out.update(cpu=time.process_time() - c0, wall=time.perf_counter() - w0, peak_mb=_rss_mb(),
               base_mb=base, loadavg=os.getloadavg()[0])
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    out = run_case(spec)
    sys.stdout.write(json.dumps(out, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
