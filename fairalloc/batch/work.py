"""One task, as every backend runs it: load, solve, check feasibility, summarise in one row.

:func:`solve_task` takes and returns plain JSON-able dicts, so the same function runs in a local
worker process (:mod:`fairalloc.batch.worker`) and on a Dask worker. It never raises for the task's own
failures (bad instance, bad parameter, solver error, a bug inside the mechanism): those become a row
with ``status = "error"`` and a one-line ``message``. Crashes and hard time-outs, which kill the
process, are recorded by the driver instead.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from fairalloc.errors import FairallocError

__all__ = ["failure", "one_line", "solve_task"]

log = logging.getLogger(__name__)


def one_line(text: Any, limit: int = 400) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def failure(status: str, message: str) -> dict[str, Any]:
    """The outcome of a task that produced no result (killed, crashed, lost with its worker)."""
    return {"row": {"status": status, "ok": False, "message": one_line(message)}, "doc": None}


def _summary(inst: Any, result: Any) -> dict[str, Any]:
    from fairalloc.result import _jsonable
    from fairalloc.verify import allocation_for
    from fairalloc.verify.feasibility import feasibility

    tasks = result.tasks
    row: dict[str, Any] = {
        "sum_tasks": float(tasks.sum()), "min_tasks": float(tasks.min()) if tasks.size else None,
        "tasks": {u: float(t) for u, t in zip(result.users, tasks)},
        "solver_used": result.solver.get("name"), "solves": result.solver.get("solves"),
        "iterations": result.solver.get("iterations"), "solve_seconds": result.timings.get("solve"),
        "mechanism_seconds": result.timings.get("total"),
        "max_kkt_residual": result.solver.get("max_kkt_residual")}
    on, x = allocation_for(inst, result)
    feas = feasibility(on, x)
    row.update(feasible=feas["holds"], max_violation=feas["max_violation"], worst_row=feas["worst_row"])
    if result.verification is not None:
        row["verification"] = {k: v.get("holds") for k, v in result.verification.items()
                               if isinstance(v, dict)}
    return _jsonable(row)


def solve_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one task. ``spec`` comes from :meth:`Task.spec`; returns ``{"row": …, "doc": …}`` where
    ``doc`` is the full result document when ``spec["want_doc"]``."""
    from fairalloc.api import solve
    from fairalloc.batch.tasks import load_plugins
    from fairalloc.io import load_instance

    t0 = time.perf_counter()
    row: dict[str, Any] = {"status": "error", "ok": False, "message": ""}
    doc: dict[str, Any] | None = None
    try:
        load_plugins(spec.get("imports", ()))
        hook = None
        if spec.get("customize"):
            from fairalloc.registry import load_hook

            hook = load_hook(spec["customize"])
        inst = load_instance(spec["instance"])
        row.update(instance_name=inst.name, n_users=inst.n_users, n_servers=inst.n_servers)
        result = solve(inst, spec["mechanism"], solver=spec.get("solver"),
                       time_limit=spec.get("time_limit"), verify=bool(spec.get("verify")),
                       customize=hook, **spec["params"])
        row.update(status=result.status.value, ok=result.ok, message=one_line(result.message))
        row.update(_summary(inst, result))
        row["versions"] = result.solver.get("versions")
        if spec.get("want_doc"):
            doc = result.to_dict()
    except FairallocError as exc:
        row["message"] = one_line(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a bug or a solver breakdown inside one task must not end the batch
        log.debug("task %s failed", spec.get("key"), exc_info=True)
        row["message"] = one_line(f"internal error: {type(exc).__name__}: {exc}")
    row["wall_seconds"] = time.perf_counter() - t0
    row["worker"] = f"{socket.gethostname()}:{os.getpid()}"
    return {"row": row, "doc": doc}
