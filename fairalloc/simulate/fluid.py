r"""The fluid task model ([TSFER] §6.1) for any divisible mechanism in the registry.

Tasks are infinitely divisible and can be stopped and resumed without overhead. At every arrival and
every departure the allocation among the jobs present is recomputed by the mechanism
(:func:`fairalloc.solve` — the TSF-ER LPs, MNW, CRU, …, nothing re-implemented), and between two events
job ``n`` progresses at the rate ``X_n = Σ_i x[n,i]`` (tasks running at once): its remaining work
``W_n`` (task-seconds, initially ``tasks_n · duration_n``) falls as ``dW_n/dt = −X_n``. A job leaves
when ``W_n = 0``; its JCT is the time since its arrival, its JCT factor the standalone JCT
``W_n / η_n`` over its JCT.

"In the fluid model, we do not bound the processing rate and allow the scheduler to allocate even more
than the number of submitted tasks" ([TSFER] §6.1): the instance solved at each event has unlimited
tasks (``T = ∞``) unless ``task_limits=True`` (then ``X_n ≤ tasks_n``, standalone rate
``min(η_n, tasks_n)``). The simulation is exact: events are processed in time order and nothing is
discretised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fairalloc.api import solve
from fairalloc.instance import Instance
from fairalloc.registry import get_mechanism
from fairalloc.simulate.measure import fairness, instance_utilization
from fairalloc.simulate.result import SimulationResult
from fairalloc.simulate.workload import Workload, WorkloadError
from fairalloc.status import Status
from fairalloc.verify import allocation_for
from fairalloc.verify.feasibility import feasibility

__all__ = ["simulate_fluid"]

log = logging.getLogger(__name__)

DONE_TOL = 1e-6  # relative remaining work counted as finished (solver tolerances: Ipopt ~1e-8)


def simulate_fluid(workload: Workload, mechanism: str, *, params: dict[str, Any] | None = None,
                   solver: str | None = None, time_limit: float | None = None,
                   task_limits: bool = False, progress: bool = False,
                   observer: Callable[[float, Instance, np.ndarray], None] | None = None
                   ) -> SimulationResult:
    """Simulate ``workload`` under the fluid model with ``mechanism`` recomputed at every event.

    ``params`` go to the mechanism (``{"variant": "paper"}``); ``solver``/``time_limit`` to every solve.
    ``observer(t, instance, x)`` is called with each new allocation (the tests check it against χ).
    A solve that does not end ``optimal``/``converged`` stops the run: the result carries its status
    and the jobs not finished have no JCT.
    """
    mech = get_mechanism(mechanism)
    if mech.name == "tsf-er-online":
        raise WorkloadError("-m tsf-er-online: runs whole tasks; use the indivisible model")
    params = dict(params or {})
    mech.parse_params(params)  # bad parameters fail before the first event
    inst0 = workload.instance
    N = workload.n_jobs
    work = workload.work.astype(float)
    rate_alone = np.minimum(inst0.eta, inst0.tasks) if task_limits else inst0.eta.copy()
    order = np.argsort(workload.arrival, kind="stable")
    arrival = workload.arrival
    remaining = work.copy()
    finish = np.full(N, np.nan)
    present: list[int] = []
    rows: list[dict[str, Any]] = []
    status, message = Status.OPTIMAL, ""
    nxt, t = 0, 0.0
    solves, max_violation, t0 = 0, 0.0, time.perf_counter()
    bar = tqdm(total=N, unit="job", desc=f"fluid {mech.name}", disable=not progress, leave=False)
    while True:
        while nxt < N and arrival[order[nxt]] <= t:
            present.append(int(order[nxt]))
            nxt += 1
        if not present:
            if nxt == N:
                break
            t = float(arrival[order[nxt]])
            continue
        idx = np.array(present)
        inst = workload.subset(idx, tasks=None if task_limits else np.inf,
                               name=f"{workload.name}@{t:.6g}")
        res = solve(inst, mech.name, solver=solver, time_limit=time_limit, **params)
        solves += 1
        if not res.ok:
            status, message = res.status, f"t = {t:.6g} s, {len(idx)} jobs: {res.message}"
            log.warning("fluid %s stopped: %s", mech.name, message)
            break
        inst, x = allocation_for(inst, res)  # drf allocates on the pooled server
        max_violation = max(max_violation, feasibility(inst, x)["max_violation"])
        if observer is not None:
            observer(t, inst, x)
        X = x.sum(axis=1)
        with np.errstate(divide="ignore"):
            dt_done = np.where(X > 0, remaining[idx] / np.where(X > 0, X, 1.0), np.inf)
        k = int(np.argmin(dt_done))
        t_arr = float(arrival[order[nxt]]) if nxt < N else np.inf
        t_next = min(t + float(dt_done[k]), t_arr)
        if not np.isfinite(t_next):
            status, message = Status.ERROR, f"t = {t:.6g} s: no job progresses and none arrives"
            break
        rows.append({"start": t, "end": t_next, "users": len(idx), "running": float(X.sum()),
                     **instance_utilization(inst, x), **fairness(inst, x)})
        remaining[idx] -= X * (t_next - t)
        if t + float(dt_done[k]) <= t_arr:
            remaining[idx[k]] = 0.0  # the job that set t_next is done, whatever the rounding
        t = t_next
        done = idx[remaining[idx] <= DONE_TOL * work[idx]]
        finish[done] = t
        gone = set(done.tolist())
        present = [j for j in present if j not in gone]
        bar.update(len(done))
        rows[-1]["jct_factor"] = _mean_factor(finish, arrival, work, rate_alone)
    bar.close()
    jobs = _jobs_frame(workload, finish, work / rate_alone)
    timeline = pd.DataFrame(rows)
    return SimulationResult(
        workload=workload.name, mechanism=mech.name, model="fluid", status=status, jobs=jobs,
        timeline=timeline, message=message,
        parameters={"mechanism_params": params, "task_limits": task_limits, "solver": solver},
        stats={"events": len(rows), "solves": solves, "seconds": time.perf_counter() - t0,
               "max_violation": max_violation})


def _mean_factor(finish: np.ndarray, arrival: np.ndarray, work: np.ndarray,
                 rate_alone: np.ndarray) -> float:
    done = np.isfinite(finish)
    if not done.any():
        return float("nan")
    return float(np.mean(work[done] / rate_alone[done] / (finish[done] - arrival[done])))


def _jobs_frame(workload: Workload, finish: np.ndarray, standalone: np.ndarray) -> pd.DataFrame:
    jct = finish - workload.arrival
    return pd.DataFrame({"job": workload.instance.users, "arrival": workload.arrival,
                         "tasks": workload.tasks, "duration": workload.duration, "finish": finish,
                         "jct": jct, "standalone_jct": standalone, "jct_factor": standalone / jct})
