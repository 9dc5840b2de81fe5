r"""The indivisible task model ([TSFER] §5, §6.1): whole tasks, reallocation slots, suspend/resume.

An event-driven simulation. Job ``n`` arrives with ``tasks_n`` tasks of ``duration_n`` seconds each; a
task runs on one server holding its whole demand until it completes. Events are job arrivals, task
completions and the slot boundaries ``k · slot`` (``k ≥ 1``). Events at the same instant are one batch
(completions released, departed jobs removed, arrivals queued, then one scheduling pass). At a
boundary ``b`` a *Reallocation* runs only if some task arrived or departed in the slot ``(b − slot, b]``
([TSFER] §5), after the events at ``b`` itself. A task suspended by
a Reallocation resumes later with ``overhead`` seconds added to its remaining time (250 ms after
[TSFER] §6.1 and its refs. [52], [53]; a task started and suspended at the same instant loses nothing).

Policies (``mechanism``):

- ``"tsf-er-online"`` — Algorithm 2 (:class:`fairalloc.models.tsf_er_online.OnlineTSFER`):
  ``AllocateFromQueues`` after every arrival and departure, ``Reallocation`` at slot starts.
- any other registered mechanism, e.g. ``"mnw"``, ``"cru"`` — the baselines of [TSFER] §6.1
  (:class:`RoundedPolicy`): at every Reallocation, suspend everything, compute the mechanism's
  fractional allocation "for the fluid task model" (unlimited tasks, among the jobs present; one solve
  per distinct set of jobs, cached) and place ``⌊x[n,i]⌋`` tasks of job ``n`` on server ``i`` (no more
  than it has waiting); between Reallocations, "upon arrival or departure of some users", tasks are
  allocated at random until nothing more fits (``fill_on="users"``; ``"tasks"`` also fills after every
  task departure). A random fill draws a waiting task uniformly (``fill="task"``: a job with a long
  queue is drawn more often) or a job uniformly (``fill="user"``), and puts it on a uniformly drawn
  server where it fits. One addition for liveness: when the rounding runs no task at all while tasks
  wait (every ``x[n,i] < 1``, as happens with many jobs whose shares are spread over servers), the
  Reallocation fills at random too — otherwise no event would ever come again
  (``stats["liveness_fills"]`` counts these).

After every event batch the scheduler's incremental free-resource counters are checked against a
recount from the running tasks (``stats["max_overuse"]``: the largest relative over-allocation of any
server or external resource seen during the run; ``check=True`` raises at the first one).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fairalloc.api import solve
from fairalloc.models.tsf_er_online import ClusterState, OnlineTSFER, allocate_from_queues
from fairalloc.registry import get_mechanism
from fairalloc.simulate.measure import fairness, utilization_row
from fairalloc.simulate.result import SimulationResult
from fairalloc.simulate.workload import Workload, WorkloadError
from fairalloc.status import Status

__all__ = ["RoundedPolicy", "simulate_online", "standalone_concurrency"]

log = logging.getLogger(__name__)

FILL = ("task", "user")
FILL_ON = ("users", "tasks")


class RoundedPolicy(ClusterState):
    """[TSFER] §6.1's MNW/CRU under indivisible tasks: the fluid allocation rounded down at every
    Reallocation, random filling in between (module docstring)."""

    def __init__(self, workload: Workload, mechanism: str, rng: np.random.Generator,
                 fill: str = "task", fill_on: str = "users", solve_kw: dict[str, Any] | None = None
                 ) -> None:
        inst = workload.instance
        super().__init__(inst.capacity, inst.external_capacity, inst.external_scope)
        self.workload, self.mechanism, self.rng = workload, mechanism, rng
        self.fill_mode, self.fill_on = fill, fill_on
        self.solve_kw = dict(solve_kw or {})
        self.cache: dict[tuple[Hashable, ...], np.ndarray] = {}
        self.solves = 0
        self.liveness_fills = 0
        self.status, self.message = Status.OPTIMAL, ""

    def fractional(self) -> np.ndarray | None:
        """The mechanism's allocation among the jobs present (unlimited tasks), or None if it failed."""
        if not self.keys:
            return np.zeros((0, self.capacity.shape[0]))
        key = tuple(sorted(self.keys))  # type: ignore[type-var]
        if key not in self.cache:
            inst = self.workload.subset(list(key), tasks=np.inf)
            res = solve(inst, self.mechanism, **self.solve_kw)
            self.solves += 1
            if not res.ok:
                self.status, self.message = res.status, f"{len(key)} jobs: {res.message}"
                return None
            if res.servers != inst.servers:
                raise WorkloadError(f"-m {self.mechanism}: allocates on {', '.join(res.servers)}, not on "
                                    "the servers; its allocation cannot be rounded onto them")
            self.cache[key] = res.x
        x = self.cache[key]
        pos = {k: n for n, k in enumerate(key)}
        return x[[pos[k] for k in self.keys]]

    def reallocation(self) -> list[int]:
        suspended = self.suspend_all()
        x = self.fractional()
        if x is None:
            return suspended
        target = np.floor(x + 1e-6).astype(int)  # LP/NLP tolerances: 2.9999999 is 3 tasks
        for k in range(len(self.keys)):
            for i in np.flatnonzero(target[k]):
                count = min(int(target[k, i]), len(self.queue[self.keys[k]]), self.fit_count(k, int(i)))
                if count > 0:
                    self.place_many(k, int(i), count)
        if not self.where and any(self.queue.values()):
            # every x[n,i] < 1 (many jobs, shares spread over servers): the rounding runs nothing and,
            # with no task left to finish, no event would ever come; fill so the run can end
            self.liveness_fills += 1
            self.random_fill()
        return suspended

    def on_events(self, user_event: bool) -> int:
        if user_event or self.fill_on == "tasks":
            return self.random_fill()
        return 0

    def random_fill(self) -> int:
        """Allocate random waiting tasks to random feasible servers until nothing fits."""
        if not self.keys:
            return 0
        fits = self.fit_matrix()
        waiting = self.waiting.astype(float)
        placed = 0
        while True:
            feas = (waiting > 0) & fits.any(axis=1)
            if not feas.any():
                return placed
            cand = np.flatnonzero(feas)
            p = waiting[cand] / waiting[cand].sum() if self.fill_mode == "task" else None
            k = int(self.rng.choice(cand, p=p))
            i = int(self.rng.choice(np.flatnonzero(fits[k])))
            self.place(k, i)
            placed += 1
            waiting[k] -= 1
            fits[:, i] = self._server_fit(i)
            if self.ext_capacity.size:
                fits &= ~self._ext_blocked()


class _TSFERPolicy(OnlineTSFER):
    """Algorithm 2 with the simulator's interface (one scheduling pass per event batch)."""

    status, message, solves = Status.OPTIMAL, "", 0

    def on_events(self, user_event: bool) -> int:
        return allocate_from_queues(self)


def standalone_concurrency(workload: Workload) -> np.ndarray:
    """``k_n``: tasks of job ``n`` that Algorithm 2 places at once on the empty cluster (capped at its
    number of tasks). Raises :class:`WorkloadError` if a job's task fits nowhere."""
    inst = workload.instance
    out = np.zeros(workload.n_jobs, int)
    seen: dict[bytes, int] = {}
    for n in range(workload.n_jobs):
        key = np.concatenate([inst.all_demand[n], inst.runnable[n], inst.tasks[n:n + 1]]).tobytes()
        if key not in seen:
            st = ClusterState(inst.capacity, inst.external_capacity, inst.external_scope)
            st.add_user(n, inst.demand[n], inst.external_demand[n], inst.runnable[n])
            st.enqueue(n, range(int(inst.tasks[n])))
            seen[key] = allocate_from_queues(st)
        out[n] = seen[key]
        if out[n] == 0:
            raise WorkloadError(f"users[{inst.users[n]}].demand: one task does not fit on any server "
                                "it may use (with the external resources), so it could never run")
    return out


def simulate_online(workload: Workload, mechanism: str = "tsf-er-online", *, slot: float = 256.0,
                    overhead: float = 0.25, sample: float = 3600.0,
                    params: dict[str, Any] | None = None, solver: str | None = None,
                    time_limit: float | None = None, fill: str = "task", fill_on: str = "users",
                    seed: int = 0, fairness_metrics: bool = True, check: bool = False,
                    progress: bool = False,
                    observer: Callable[[float, str, ClusterState], None] | None = None
                    ) -> SimulationResult:
    """Simulate ``workload`` with whole tasks under ``mechanism`` (module docstring).

    ``slot``: reallocation slot length in seconds (``inf``: never reallocate); ``overhead``: seconds
    added to a suspended task when it resumes; ``sample``: width of the timeline's bins (seconds);
    ``seed``: the random filling of the baselines. ``fairness_metrics=False`` skips MIN-EF-SAT and
    MIN-SI-SAT (their cost grows with the square of the jobs present). ``observer(t, event, state)``
    is called after every event batch and every Reallocation with the scheduler's state.
    """
    mech = get_mechanism(mechanism)
    params = dict(params or {})
    mech.parse_params(params)
    if not slot > 0:
        raise WorkloadError(f"slot = {slot!r}: must be > 0 seconds (inf: never reallocate)")
    if not (math.isfinite(overhead) and overhead >= 0):
        raise WorkloadError(f"overhead = {overhead!r}: must be a finite number >= 0 seconds")
    if not overhead < slot:
        raise WorkloadError(f"overhead = {overhead!r} s >= slot = {slot!r} s: a task suspended at "
                            "every slot would never finish")
    if not (math.isfinite(sample) and sample > 0):
        raise WorkloadError(f"sample = {sample!r}: must be a finite number > 0 seconds")
    if fill not in FILL:
        raise WorkloadError(f"fill = {fill!r}: expected one of {', '.join(FILL)}")
    if fill_on not in FILL_ON:
        raise WorkloadError(f"fill_on = {fill_on!r}: expected one of {', '.join(FILL_ON)}")
    workload.require_whole_tasks()
    sim = _Simulation(workload, mech.name, slot, overhead, sample, params, solver, time_limit, fill,
                      fill_on, seed, fairness_metrics, check, progress, observer)
    return sim.run()


class _Simulation:
    def __init__(self, workload: Workload, mechanism: str, slot: float, overhead: float,
                 sample: float, params: dict[str, Any], solver: str | None,
                 time_limit: float | None, fill: str, fill_on: str, seed: int,
                 fairness_metrics: bool, check: bool, progress: bool,
                 observer: Callable[[float, str, ClusterState], None] | None) -> None:
        self.w, self.mechanism = workload, mechanism
        self.slot, self.overhead, self.sample = slot, overhead, sample
        self.fairness_metrics, self.check, self.progress, self.observer = (
            fairness_metrics, check, progress, observer)
        self.parameters = {"slot": slot, "overhead": overhead, "sample": sample,
                           "mechanism_params": params, "solver": solver, "seed": seed}
        inst = workload.instance
        if mechanism == "tsf-er-online":
            self.policy: Any = _TSFERPolicy.from_instance(inst)
        else:
            self.parameters.update(fill=fill, fill_on=fill_on)
            self.policy = RoundedPolicy(workload, mechanism, np.random.default_rng(seed), fill, fill_on,
                                        {"solver": solver, "time_limit": time_limit, **params})
        N = workload.n_jobs
        self.ntasks = workload.tasks.astype(int)
        self.base = np.concatenate([[0], np.cumsum(self.ntasks)[:-1]])
        self.job_of = np.repeat(np.arange(N), self.ntasks)
        self.remaining = np.repeat(workload.duration, self.ntasks).astype(float)
        self.suspended = np.zeros(self.job_of.size, bool)
        self.token = np.zeros(self.job_of.size, int)
        self.start_state: dict[int, tuple[float, float, bool]] = {}  # task -> (t, remaining, flag)
        self.heap: list[tuple[float, int, int]] = []
        self.done = np.zeros(N, int)
        self.finish = np.full(N, np.nan)
        self.eta = inst.eta
        # metrics
        self.rows: list[dict[str, Any]] = []
        self.acc: dict[str, Any] = {}
        self.version, self.fair_cache = 0, (-1, {})
        self.stats = {"events": 0, "reallocations": 0, "suspended": 0, "max_overuse": -1.0}

    # ------------------------------------------------------------------ task bookkeeping
    def start_placed(self, t: float) -> None:
        for task, _key, _i in self.policy.drain_started():
            self.start_state[task] = (t, self.remaining[task], bool(self.suspended[task]))
            run = self.remaining[task] + (self.overhead if self.suspended[task] else 0.0)
            self.remaining[task] = run
            self.suspended[task] = False
            self.token[task] += 1
            heapq.heappush(self.heap, (t + run, int(self.token[task]), int(task)))
        self.version += 1

    def suspend(self, tasks: list[int], t: float) -> None:
        for task in tasks:
            t0, rem0, flag0 = self.start_state.pop(task)
            if t0 == t:  # no progress, no state saved: as if never started
                self.remaining[task], self.suspended[task] = rem0, flag0
            else:
                self.remaining[task] = self.remaining[task] - (t - t0)
                self.suspended[task] = True
                self.stats["suspended"] += 1
            self.token[task] += 1  # its completion event is void

    def next_completion(self) -> float:
        while self.heap:
            end, tok, task = self.heap[0]
            if tok == self.token[task] and task in self.policy.where:
                return end
            heapq.heappop(self.heap)
        return math.inf

    # ------------------------------------------------------------------ metrics
    def advance(self, t: float, t1: float) -> None:
        """The state is constant on [t, t1): integrate it into the sampling bins (a bin inside the
        interval is the state itself, computed once)."""
        if t1 <= t:
            return
        p = self.policy
        used = p.capacity - p.avail
        ext_used = p.ext_capacity - p.ext_avail
        queue = float(sum(len(q) for q in p.queue.values()))
        running = float(len(p.where))
        users = float(len(p.keys))
        whole: dict[str, Any] | None = None
        while t < t1:
            a = self.acc
            b = a["bin_end"]
            seg = min(t1, b)
            if t == a["bin_start"] and seg == b:
                if whole is None:
                    whole = {"users": users, "queue": queue, "running": running,
                             **utilization_row(p.capacity, used, p.ext_capacity, ext_used,
                                               self.w.instance.all_resources),
                             **(self.fair_now() if self.fairness_metrics else {}),
                             "jct_factor": self.mean_factor()}
                self.rows.append({"start": t, "end": b, **whole})
                self.new_bin(b)
                t = b
                continue
            dt = seg - t
            a["used"] += used * dt
            a["ext"] += ext_used * dt
            a["queue"] += queue * dt
            a["running"] += running * dt
            a["users"] += users * dt
            t = seg
            if t >= b:
                self.emit_bin(b)

    def new_bin(self, start: float) -> None:
        p = self.policy
        self.acc = {"bin_start": start, "bin_end": start + self.sample, "used": np.zeros_like(p.capacity),
                    "ext": np.zeros_like(p.ext_capacity), "queue": 0.0, "running": 0.0, "users": 0.0}

    def mean_factor(self) -> float:
        done = np.isfinite(self.finish)
        return float(np.mean(self.standalone[done] / (self.finish[done] - self.w.arrival[done]))) \
            if done.any() else float("nan")

    def emit_bin(self, end: float) -> None:
        a, p = self.acc, self.policy
        width = end - a["bin_start"]
        if width > 0:
            row = {"start": a["bin_start"], "end": end, "users": a["users"] / width,
                   "queue": a["queue"] / width, "running": a["running"] / width,
                   **utilization_row(p.capacity, a["used"] / width, p.ext_capacity, a["ext"] / width,
                                     self.w.instance.all_resources)}
            if self.fairness_metrics:
                row.update(self.fair_now())
            row["jct_factor"] = self.mean_factor()
            self.rows.append(row)
        self.new_bin(end)

    def fair_now(self) -> dict[str, float]:
        if self.fair_cache[0] == self.version:
            return self.fair_cache[1]
        p = self.policy
        if not p.keys:
            val = {"min_ef_sat": float("nan"), "min_si_sat": float("nan")}
        else:
            idx = np.array(p.keys, int)
            unfinished = self.ntasks[idx] - self.done[idx]
            inst = self.w.subset(idx, tasks=unfinished.astype(float))
            val = fairness(inst, p.running.astype(float))
        self.fair_cache = (self.version, val)
        return val

    # ------------------------------------------------------------------ the event loop
    def checkpoint(self, t: float, event: str) -> None:
        ov = self.policy.overuse()
        self.stats["max_overuse"] = max(self.stats["max_overuse"], ov)
        if self.check and ov > 1e-9:
            raise AssertionError(f"t = {t}: {event} over-allocates a resource by {ov:.3g} (relative)")
        if self.observer is not None:
            self.observer(t, event, self.policy)

    def run(self) -> SimulationResult:
        w, p = self.w, self.policy
        t_start = time.perf_counter()
        self.standalone = np.ceil(self.ntasks / standalone_concurrency(w)) * w.duration
        N = w.n_jobs
        order = np.argsort(w.arrival, kind="stable")
        nxt = 0
        t = 0.0
        self.new_bin(0.0)
        dirty, boundary = False, math.inf
        bar = tqdm(total=N, unit="job", desc=f"indivisible {self.mechanism}", disable=not self.progress,
                   leave=False)
        while True:
            t_c = self.next_completion()
            t_a = float(w.arrival[order[nxt]]) if nxt < N else math.inf
            t_e = min(t_c, t_a)
            if dirty and not p.keys:  # everyone left during the slot: nothing to reallocate
                dirty = False
            if dirty and boundary < t_e:
                self.advance(t, boundary)
                t = boundary
                suspended = p.reallocation()
                self.suspend(suspended, t)
                self.start_placed(t)
                self.stats["reallocations"] += 1
                dirty = False
                self.checkpoint(t, "reallocation")
                if p.status is not Status.OPTIMAL:
                    break
                continue
            if t_e == math.inf:
                break
            self.advance(t, t_e)
            t = t_e
            # one batch: every completion and arrival at t
            completed = []
            while self.heap and self.next_completion() <= t:
                _, _, task = heapq.heappop(self.heap)
                completed.append(task)
            leaving = []
            for task in completed:
                p.release(task)
                self.start_state.pop(task, None)
                j = int(self.job_of[task])
                self.done[j] += 1
                if self.done[j] == self.ntasks[j]:
                    leaving.append(j)
            for j in leaving:
                p.remove_user(j)
                self.finish[j] = t
            arrived = []
            while nxt < N and w.arrival[order[nxt]] <= t:
                j = int(order[nxt])
                nxt += 1
                inst = w.instance
                p.add_user(j, inst.demand[j], inst.external_demand[j], inst.runnable[j],
                           eta=float(self.eta[j]), weight=float(inst.weight[j]))
                p.enqueue(j, range(int(self.base[j]), int(self.base[j] + self.ntasks[j])))
                arrived.append(j)
            p.on_events(user_event=bool(leaving or arrived))
            self.start_placed(t)
            self.stats["events"] += 1
            bar.update(len(leaving))
            if not dirty and (completed or arrived):
                dirty = True
                # slots are (b - slot, b]; the first Reallocation is at b = slot
                boundary = max(math.ceil(t / self.slot), 1) * self.slot if math.isfinite(self.slot) \
                    else math.inf
            self.checkpoint(t, "event")
        bar.close()
        self.emit_bin(t)
        status, message = p.status, p.message
        if status is Status.OPTIMAL and np.isnan(self.finish).any():  # pragma: no cover - a bug
            status, message = Status.ERROR, (f"{int(np.isnan(self.finish).sum())} jobs never finished: "
                                             "the scheduler stopped with tasks waiting")
        jct = self.finish - w.arrival
        jobs = pd.DataFrame({"job": w.instance.users, "arrival": w.arrival, "tasks": w.tasks,
                             "duration": w.duration, "finish": self.finish, "jct": jct,
                             "standalone_jct": self.standalone, "jct_factor": self.standalone / jct})
        self.stats.update(solves=p.solves, seconds=time.perf_counter() - t_start)
        if isinstance(p, RoundedPolicy):
            self.stats["liveness_fills"] = p.liveness_fills
        return SimulationResult(workload=w.name, mechanism=self.mechanism, model="indivisible",
                                status=status, jobs=jobs, timeline=pd.DataFrame(self.rows),
                                parameters=self.parameters, stats=self.stats, message=message)
