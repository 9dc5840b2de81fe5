r"""Online TSF-ER with indivisible tasks ([TSFER] §5, Algorithm 2).

Tasks are whole: a task of user ``n`` placed on server ``i`` holds ``d[n,r]`` of every resource ``r`` of
``i`` and ``d[n,e]`` of every external resource ``e`` that serves ``i`` (``i ∈ S[e]``) until it completes
or is suspended. Every user has a FIFO *waiting task queue* and an *active task share*

.. math::

    s_n = \frac{\text{running tasks of } n}{\phi_n\,\eta_n}

(``η_n`` of [TSFER] (6), :attr:`Instance.eta`; the weight ``φ_n`` as in [TSFER] §8). The routines of
Algorithm 2:

- ``TaskArrival`` — append the arrived tasks to their users' queues, then ``AllocateFromQueues``;
- ``TaskDeparture`` — release the completed tasks' resources, ``s_n ← s_n − 1/(φ_n η_n)`` per task,
  then ``AllocateFromQueues``;
- ``Reallocation`` — at the start of a reallocation slot in which some task arrived or departed:
  suspend every running task and put it back at the front of its queue, set every ``s_n = 0``, release
  everything, then ``AllocateFromQueues``;
- ``AllocateFromQueues`` — while some user has a waiting task that fits somewhere (``J^feas``,
  lines 1, 10): take the users of least ``s_n`` (line 3), among them the one of least one-task share
  ``1/(φ_n η_n)`` (line 4; remaining ties: the earlier user), and place its first waiting task on the
  feasible server that fits its demand best (line 6),

  .. math::

      m = \arg\min_{i \in S_{n}} \sum_{r \in R} \Big(\frac{a_{i,r} - d_{n,r}}{c_r}\Big)^2,

  where ``a[i,r]`` is what is still free on server ``i`` and ``c_r = Σ_i c[i,r]`` (the paper assumes
  capacities normalised so that ``c_r = 1``, §2; dividing by ``c_r`` keeps cores, GB and GPUs
  comparable; remaining ties: the lower server index); then ``s_n ← s_n + 1/(φ_n η_n)`` (line 9).

The time-keeping (task durations, the slot clock, the 250 ms suspend/resume overhead) belongs to the
simulator, :mod:`fairalloc.simulate.online`; this module is the scheduler's state and decisions.
Resources only shrink during ``AllocateFromQueues``, so a user found infeasible stays infeasible until
the call ends — which is what makes the loop finite and lets it test all users at once.

**As a static mechanism** (``fairalloc solve INSTANCE -m tsf-er-online``): one ``Reallocation`` on an
empty cluster in which every user has queued ``⌊T[n]⌋`` whole tasks (with ``T[n] = ∞``, more than
could ever fit: ``⌊η_n⌋ + 1``), counted rather than listed (:func:`allocate_batched`: a user keeps its
turn and its server for as many tasks as the rules allow, in one step). The result is the integral
allocation TSF-ER's online scheduler makes at a
reallocation instant, with status ``converged`` (the loop ran until ``J^feas = ∅``). It never exceeds
a capacity; it is not Pareto optimal in general (tasks are whole) and its task shares are equal only up
to one task each.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from fairalloc.errors import InstanceError
from fairalloc.instance import Instance
from fairalloc.registry import Solution, mechanism
from fairalloc.solvers import Session
from fairalloc.status import Status

__all__ = ["ClusterState", "CountingTSFER", "OnlineTSFER", "allocate_batched", "allocate_from_queues",
           "one_reallocation"]

log = logging.getLogger(__name__)

FIT_TOL = 1e-9  # relative to each server's own capacity of the resource: float noise, not capacity
TASK_TOL = 1e-6  # ... and never more than this fraction of the task's own demand (1e-9 of 1e9 is a task)


class ClusterState:
    """Servers, external resources, the users present, their waiting queues and running tasks.

    Users are keyed by any hashable (the simulator uses job indices); tasks are integer ids the caller
    chooses. Arrays are kept compact over the users present (row ``k`` = ``self.keys[k]``), so the
    feasibility of every user on every server is one vectorised comparison.
    """

    def __init__(self, capacity: np.ndarray, external_capacity: np.ndarray | None = None,
                 external_scope: np.ndarray | None = None) -> None:
        self.capacity = np.asarray(capacity, float)  # (K, R)
        K, R = self.capacity.shape
        self.ext_capacity = np.zeros(0) if external_capacity is None else np.asarray(
            external_capacity, float)
        E = self.ext_capacity.size
        self.scope = np.ones((E, K), bool) if external_scope is None else np.asarray(
            external_scope, bool).reshape(E, K)
        self._scope_f = self.scope.astype(float)
        total = self.capacity.sum(axis=0)
        self.norm = np.where(total > 0, total, 1.0)  # c_r of the best-fit distance
        self.eps = FIT_TOL * self.capacity  # (K, R): a tiny server next to a huge one keeps its own scale
        self.ext_eps = FIT_TOL * np.where(self.ext_capacity > 0, self.ext_capacity, 1.0)
        self.avail = self.capacity.copy()  # a[i, r]
        self.ext_avail = self.ext_capacity.copy()
        self.keys: list[Hashable] = []
        self.row: dict[Hashable, int] = {}
        self.demand = np.zeros((0, R))
        self.ext_demand = np.zeros((0, E))
        self.eligible = np.zeros((0, K), bool)
        self.inc = np.zeros(0)  # one-task share 1/(φ η)
        self.running = np.zeros((0, K), int)  # running tasks per (user, server)
        self.cost = np.zeros((0, K))  # budget cost of one task per (user, server)
        self.budget = np.zeros(0)  # per-user budget B_n (inf: none)
        self.budget_left = np.zeros(0)
        self.queue: dict[Hashable, deque[int]] = {}
        self.where: dict[int, tuple[Hashable, int]] = {}  # running task -> (user, server)
        self.started: list[tuple[int, Hashable, int]] = []  # placements since the last drain

    @classmethod
    def from_instance(cls, inst: Instance) -> ClusterState:
        inst.require_demands("indivisible tasks")
        return cls(inst.capacity, inst.external_capacity, inst.external_scope)

    # ------------------------------------------------------------------ users
    def add_user(self, key: Hashable, demand: np.ndarray, ext_demand: np.ndarray | None = None,
                 eligible: np.ndarray | None = None, eta: float = 1.0, weight: float = 1.0,
                 cost: np.ndarray | None = None, budget: float = np.inf) -> None:
        """A user arrives (with an empty queue). ``eligible`` defaults to every server; servers that
        lack a resource it demands are never feasible anyway. ``budget``/``cost``: a task on server
        ``i`` costs ``cost[i]`` of the user's budget; a task it cannot afford does not fit."""
        if key in self.row:
            raise ValueError(f"user {key!r} is already present")
        K, E = self.capacity.shape[0], self.ext_capacity.size
        self.row[key] = len(self.keys)
        self.keys.append(key)
        self.demand = np.vstack([self.demand, np.asarray(demand, float)[None, :]])
        ed = np.zeros(E) if ext_demand is None else np.asarray(ext_demand, float)
        self.ext_demand = np.vstack([self.ext_demand, ed[None, :]])
        el = np.ones(K, bool) if eligible is None else np.asarray(eligible, bool)
        self.eligible = np.vstack([self.eligible, el[None, :]])
        self.inc = np.append(self.inc, 1.0 / (weight * eta))
        self.running = np.vstack([self.running, np.zeros((1, K), int)])
        row = np.zeros(K) if cost is None else np.asarray(cost, float)
        self.cost = np.vstack([self.cost, row[None, :]])
        self.budget = np.append(self.budget, float(budget))
        self.budget_left = np.append(self.budget_left, float(budget))
        self.queue[key] = deque()

    def remove_user(self, key: Hashable) -> None:
        """A user leaves; it must have nothing running or waiting."""
        k = self.row.pop(key)
        if self.running[k].any() or self.queue[key]:
            raise ValueError(f"user {key!r} still has tasks")
        del self.queue[key]
        self.keys.pop(k)
        for a in ("demand", "ext_demand", "eligible", "inc", "running", "cost", "budget", "budget_left"):
            setattr(self, a, np.delete(getattr(self, a), k, axis=0))
        for j, key2 in enumerate(self.keys[k:], k):
            self.row[key2] = j

    # ------------------------------------------------------------------ state
    @property
    def shares(self) -> np.ndarray:
        """Active task shares ``s_n`` (running tasks × one-task share), one per present user."""
        return self.running.sum(axis=1) * self.inc

    @property
    def waiting(self) -> np.ndarray:
        return np.array([len(self.queue[k]) for k in self.keys], int)

    def used(self) -> tuple[np.ndarray, np.ndarray]:
        """Server usage (K × R) and external usage (E), recomputed from the running tasks — not from
        the incremental ``avail``, so it can check it."""
        server = self.running.T @ self.demand
        ext = np.array([(self.running[:, self.scope[e]].sum(axis=1) * self.ext_demand[:, e]).sum()
                        for e in range(self.ext_capacity.size)])
        return server, ext

    def overuse(self) -> float:
        """Largest relative over-allocation of any server or external resource (≤ 0: none)."""
        server, ext = self.used()
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(self.capacity > 0, (server - self.capacity) / self.capacity,
                           np.where(server > 0, np.inf, 0.0))
            erel = (ext - self.ext_capacity) / self.ext_capacity if ext.size else np.zeros(0)
        return float(max(rel.max(initial=-np.inf), erel.max(initial=-np.inf), -1.0))

    # ------------------------------------------------------------------ feasibility and placement
    def fit_matrix(self) -> np.ndarray:
        """``F[k, i]``: one more task of user ``k`` fits on server ``i`` (server resources and every
        external resource serving ``i``; placement constraints)."""
        d = self.demand[:, None, :]
        srv = (self.avail[None, :, :] >= d - np.minimum(self.eps[None, :, :], TASK_TOL * d)).all(axis=2)
        return srv & self.eligible & ~self._ext_blocked() & self._affordable()

    def _affordable(self) -> np.ndarray:
        """``A[k, i]``: user ``k``'s budget covers one more task on server ``i`` (relative tolerance)."""
        return self.cost <= self.budget_left[:, None] + FIT_TOL * np.where(
            np.isfinite(self.budget), self.budget, 0.0)[:, None]

    def _ext_blocked(self) -> np.ndarray:
        if not self.ext_capacity.size:
            return np.zeros((len(self.keys), self.capacity.shape[0]), bool)
        slack = np.minimum(self.ext_eps, TASK_TOL * self.ext_demand)
        short = self.ext_demand > self.ext_avail[None, :] + slack
        return (short @ self._scope_f) > 0

    def _server_fit(self, i: int) -> np.ndarray:
        slack = np.minimum(self.eps[i][None, :], TASK_TOL * self.demand)
        return ((self.avail[i][None, :] >= self.demand - slack).all(axis=1) & self.eligible[:, i]
                & self._affordable()[:, i])

    def best_fit(self, k: int, servers: np.ndarray) -> int:
        """Line 6 of AllocateFromQueues: the feasible server whose free resources are closest (squared,
        normalised) to user ``k``'s demand."""
        cand = np.flatnonzero(servers)
        dist = (((self.avail[cand] - self.demand[k]) / self.norm) ** 2).sum(axis=1)
        return int(cand[int(np.argmin(dist))])

    def place(self, k: int, i: int) -> int:
        """Start user ``k``'s first waiting task on server ``i``; return the task id."""
        key = self.keys[k]
        task = self.queue[key].popleft()
        self.avail[i] -= self.demand[k]
        self.ext_avail -= self.ext_demand[k] * self.scope[:, i]
        self.running[k, i] += 1
        self.budget_left[k] -= self.cost[k, i]
        self.where[task] = (key, i)
        self.started.append((task, key, i))
        return task

    def fit_count(self, k: int, i: int) -> int:
        """How many more tasks of user ``k`` fit on server ``i`` (``n`` fit iff every free amount
        covers ``n`` demands, as ``n`` one-by-one placements would find)."""
        if not self.eligible[k, i]:
            return 0
        d = self.demand[k]
        pos = d > 0
        slack = np.minimum(self.eps[i, pos], TASK_TOL * d[pos])
        n = float(np.floor((self.avail[i, pos] + slack) / d[pos]).min()) if pos.any() else np.inf
        ed = self.ext_demand[k] * self.scope[:, i]
        epos = ed > 0
        if epos.any():
            slack = np.minimum(self.ext_eps[epos], TASK_TOL * ed[epos])
            n = min(n, float(np.floor((self.ext_avail[epos] + slack) / ed[epos]).min()))
        if self.cost[k, i] > 0 and np.isfinite(self.budget[k]):
            n = min(n, float(np.floor((self.budget_left[k] + FIT_TOL * self.budget[k]) / self.cost[k, i])))
        return int(max(n, 0.0))

    def place_many(self, k: int, i: int, count: int) -> None:
        """Start ``count`` waiting tasks of user ``k`` on server ``i`` (the caller checked they fit)."""
        key = self.keys[k]
        q = self.queue[key]
        self.avail[i] -= count * self.demand[k]
        self.ext_avail -= count * self.ext_demand[k] * self.scope[:, i]
        self.running[k, i] += count
        self.budget_left[k] -= count * self.cost[k, i]
        for _ in range(count):
            task = q.popleft()
            self.where[task] = (key, i)
            self.started.append((task, key, i))

    def release(self, task: int) -> Hashable:
        """A running task stops (completed or suspended); return its user."""
        key, i = self.where.pop(task)
        k = self.row[key]
        self.avail[i] += self.demand[k]
        self.ext_avail += self.ext_demand[k] * self.scope[:, i]
        self.running[k, i] -= 1
        self.budget_left[k] += self.cost[k, i]
        return key

    def enqueue(self, key: Hashable, tasks: Iterable[int], front: bool = False) -> None:
        q = self.queue[key]
        if front:
            q.extendleft(reversed(list(tasks)))
        else:
            q.extend(tasks)

    def suspend_all(self) -> list[int]:
        """Suspend every running task, put it back at the front of its queue (in id order) and release
        everything; return the suspended task ids."""
        tasks = sorted(self.where)
        back: dict[Hashable, list[int]] = {}
        for t in tasks:
            back.setdefault(self.where[t][0], []).append(t)
        self.where.clear()
        self.running[:] = 0
        self.budget_left = self.budget.copy()
        self.avail = self.capacity.copy()  # exact: no drift from many += / -=
        self.ext_avail = self.ext_capacity.copy()
        for key, ts in back.items():
            self.enqueue(key, ts, front=True)
        return tasks

    def drain_started(self) -> list[tuple[int, Hashable, int]]:
        """Placements (task, user, server) made since the last call."""
        out, self.started = self.started, []
        return out


def allocate_from_queues(state: ClusterState) -> int:
    """Procedure ``AllocateFromQueues`` of Algorithm 2 (see the module docstring); returns the number
    of tasks placed."""
    if not state.keys:
        return 0
    fits = state.fit_matrix()
    waiting = state.waiting
    count = state.running.sum(axis=1)
    inc = state.inc
    # rounded: equal shares reached by different sums must tie
    share = np.array([round(float(c * g), 12) for c, g in zip(count, inc)])
    uses_ext = (state.ext_demand > 0).any(axis=1)
    blocked = state._ext_blocked()
    feas = (waiting > 0) & fits.any(axis=1)  # J^feas (lines 1, 10)
    placed = 0
    while feas.any():
        masked = np.where(feas, share, np.inf)
        cand = np.flatnonzero(masked == masked.min())  # line 3: least active share
        # line 4: least one-task share; then the earlier user (argmin takes the first)
        k = int(cand[np.argmin(inc[cand])]) if cand.size > 1 else int(cand[0])
        i = state.best_fit(k, fits[k])  # line 6
        state.place(k, i)  # lines 7-8
        placed += 1
        waiting[k] -= 1
        count[k] += 1
        share[k] = round(float(count[k] * inc[k]), 12)  # line 9
        if uses_ext[k]:  # less of an external resource left: may block users on many servers
            blocked = state._ext_blocked()
            fits &= ~blocked
        fits[:, i] = state._server_fit(i) & ~blocked[:, i]
        if np.isfinite(state.budget[k]):  # less budget left: may no longer afford other servers
            fits[k] &= state._affordable()[k]
        feas = (waiting > 0) & fits.any(axis=1)
    return placed


class OnlineTSFER(ClusterState):
    """Algorithm 2: the routines ``TaskArrival``, ``TaskDeparture`` and ``Reallocation``, each ending
    in :func:`allocate_from_queues`. Placements are read with :meth:`drain_started`."""

    def task_arrival(self, arrived: dict[Hashable, Iterable[int]]) -> int:
        for key, tasks in arrived.items():
            self.enqueue(key, tasks)
        return allocate_from_queues(self)

    def task_departure(self, tasks: Iterable[int]) -> int:
        for t in tasks:
            self.release(t)  # s_n falls by 1/(φη): shares are running tasks × one-task share
        return allocate_from_queues(self)

    def reallocation(self) -> list[int]:
        """Suspend everything, reset the shares, allocate from the queues; return the suspended
        tasks (the simulator charges their resume overhead)."""
        suspended = self.suspend_all()
        allocate_from_queues(self)
        return suspended


class CountingTSFER(OnlineTSFER):
    """The scheduler with task *counts* in the queues instead of task ids: one Reallocation of the
    static mechanism queues ``⌊η_n⌋ + 1`` tasks per user, 10⁹ of them for a user with a small demand on a
    large server, which no deque of ids holds. Only what :func:`allocate_batched` uses is kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count: dict[Hashable, int] = {}

    def add_user(self, key: Hashable, *args: Any, **kwargs: Any) -> None:
        super().add_user(key, *args, **kwargs)
        self.count[key] = 0

    def enqueue(self, key: Hashable, tasks: Any, front: bool = False) -> None:
        self.count[key] = self.count.get(key, 0) + (tasks if isinstance(tasks, int) else len(tasks))

    @property
    def waiting(self) -> np.ndarray:
        return np.array([self.count[k] for k in self.keys], np.int64)

    def place_many(self, k: int, i: int, count: int) -> None:
        self.avail[i] -= count * self.demand[k]
        self.ext_avail -= count * self.ext_demand[k] * self.scope[:, i]
        self.running[k, i] += count
        self.budget_left[k] -= count * self.cost[k, i]
        self.count[self.keys[k]] -= count


def _run_length(k: int, share: np.ndarray, count: np.ndarray, inc: np.ndarray, feas: np.ndarray,
                cap: int) -> int:
    """How many tasks in a row (at most ``cap``) user ``k`` places before another feasible user's
    (share, one-task share, index) comes first — the tie rule of lines 3–4, with shares rounded as
    :func:`allocate_from_queues` rounds them."""
    others = feas.copy()
    others[k] = False
    if not others.any():
        return cap
    masked = np.where(others, share, np.inf)
    cand = np.flatnonzero(masked == masked.min())
    o = int(cand[np.argmin(inc[cand])])
    rival = (share[o], inc[o], o)

    def wins(j: int) -> bool:  # k is chosen again after j more of its tasks
        return (round(float((count[k] + j) * inc[k]), 12), inc[k], k) < rival

    lo, hi = 0, cap - 1  # wins(0) holds: k was just chosen
    if hi == 0 or not wins(1):  # users taking turns: the common case, answered at once
        return 1
    if wins(hi):
        return cap
    while hi - lo > 1:  # wins is monotone: shares only grow
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if wins(mid) else (lo, mid)
    return lo + 1


class TooManySteps(Exception):
    """:func:`allocate_batched` would take more than ``max_steps`` steps (users taking turns)."""

    def __init__(self, users: list[Any]) -> None:
        super().__init__(users)
        self.users = users


def _turns(state: ClusterState, k: int, share: np.ndarray, count: np.ndarray, inc: np.ndarray,
           feas: np.ndarray, fits: np.ndarray, waiting: np.ndarray, cap: int
           ) -> dict[int, tuple[int, int]] | None:
    """Users that take turns, placed many turns at once: every placement whose key (share after it,
    one-task share, index) is below ``k``'s key after ``m`` of its own tasks, for the largest safe ``m``.
    The one-by-one loop makes exactly these placements, in some order, when the order cannot matter:
    every user keeps its best-fit server (no other user's placements land on a server it could use; its
    own server only gets closer to its demand), and everything placed fits together (each server's and
    each external resource's total use at most what is free, no slack; budgets and waiting tasks per
    user). ``None`` when not even two turns of ``k`` are safe."""
    users = np.flatnonzero(feas)
    server = {int(n): state.best_fit(int(n), fits[n]) for n in users}
    limit = {int(n): int(min(waiting[n], state.fit_count(int(n), server[int(n)]))) for n in users}

    def key(n: int, j: int) -> tuple[float, float, int]:
        return (round(float((count[n] + j) * inc[n]), 12), inc[n], n)

    def plan(m: int) -> dict[int, int] | None:
        top = key(k, m)
        out = {}
        for n in users.tolist():
            lo, hi = 0, limit[n] + 1  # placements j = 0..J-1 with key(n, j) < top: find J
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (mid + 1, hi) if key(n, mid) < top else (lo, mid)
            if lo > limit[n]:  # it would run out of room (or tasks) before the level: not safe
                return None
            if lo:
                out[n] = lo
        used = np.zeros_like(state.avail)
        ext = np.zeros_like(state.ext_avail)
        for n, j in out.items():
            used[server[n]] += j * state.demand[n]
            ext += j * state.ext_demand[n] * state.scope[:, server[n]]
            if j * state.cost[n, server[n]] > state.budget_left[n]:
                return None
        if (used > state.avail).any() or (ext > state.ext_avail).any():
            return None
        busy = {server[n] for n in out}
        for n in out:
            if any(fits[n, srv] for srv in busy - {server[n]}):
                return None
        return out

    best, lo, hi = None, 2, cap
    while lo <= hi:  # the safe plans form a prefix in m
        mid = (lo + hi) // 2
        got = plan(mid)
        if got is None:
            hi = mid - 1
        else:
            best, lo = got, mid + 1
    return None if best is None else {n: (server[n], j) for n, j in best.items()}


def allocate_batched(state: ClusterState, expired: Any = None, max_steps: int | None = None) -> int:
    """:func:`allocate_from_queues` with the tasks counted, not placed one by one: the user chosen by
    lines 3–4 keeps being chosen, and keeps its best-fit server (placing a task there brings the server's
    free resources closer to the demand, while no other server changes), until its waiting tasks run out,
    its next task no longer fits there, or another user comes first. One step places all of those at
    once, so the loop runs per change of user or server instead of per task: ``⌊η⌋ + 1`` queued tasks
    of one user on a ``{cpu: 10⁹}`` server are one step. Users whose shares interleave (two alike users
    take turns) are placed a stretch of turns at a time where the order of those turns cannot matter
    (:func:`_turns`); elsewhere a step per task. Tested equal to the one-by-one loop. ``expired()`` (checked
    every 256 steps) stops the loop early; the return value is then negative (−placed). More than
    ``max_steps`` steps raise :class:`TooManySteps` naming the users that took the most."""
    if not state.keys:
        return 0
    fits = state.fit_matrix()
    waiting = state.waiting.astype(np.int64)
    count = state.running.sum(axis=1).astype(np.int64)
    inc = state.inc
    share = np.array([round(float(c * g), 12) for c, g in zip(count, inc)])
    uses_ext = (state.ext_demand > 0).any(axis=1)
    blocked = state._ext_blocked()
    feas = (waiting > 0) & fits.any(axis=1)
    placed = steps = 0
    turns = np.zeros(len(state.keys), np.int64)
    while feas.any():
        steps += 1
        if max_steps is not None and steps > max_steps:
            raise TooManySteps([state.keys[k] for k in np.argsort(-turns, kind="stable")[:3]])
        if expired is not None and steps % 256 == 0 and expired():
            return -placed
        masked = np.where(feas, share, np.inf)
        cand = np.flatnonzero(masked == masked.min())
        k = int(cand[np.argmin(inc[cand])]) if cand.size > 1 else int(cand[0])
        i = state.best_fit(k, fits[k])
        cap = int(min(waiting[k], max(1, state.fit_count(k, i))))
        m = _run_length(k, share, count, inc, feas, cap)
        turns[k] += 1
        if m == 1 and cap > 1:  # users take turns: place a whole stretch of turns at once if safe
            many = _turns(state, k, share, count, inc, feas, fits, waiting, cap)
            if many is not None:
                for n, (srv, j) in many.items():
                    state.place_many(n, srv, j)
                    placed += j
                    waiting[n] -= j
                    count[n] += j
                    share[n] = round(float(count[n] * inc[n]), 12)
                fits = state.fit_matrix()
                blocked = state._ext_blocked()
                feas = (waiting > 0) & fits.any(axis=1)
                continue
        state.place_many(k, i, m)
        placed += m
        waiting[k] -= m
        count[k] += m
        share[k] = round(float(count[k] * inc[k]), 12)
        if uses_ext[k]:
            blocked = state._ext_blocked()
            fits &= ~blocked
        fits[:, i] = state._server_fit(i) & ~blocked[:, i]
        if np.isfinite(state.budget[k]):
            fits[k] &= state._affordable()[k]
        feas = (waiting > 0) & fits.any(axis=1)
    return placed


MAX_STEPS = 20_000  # steps of the counted loop (~4 s): users that take turns cost one step per task
MAX_COUNT = 2**53  # queued tasks per user: exact in a float (an "unlimited" user on a 1e30 server)


def queued_counts(inst: Instance) -> list[int]:
    """``⌊T[n]⌋`` whole tasks per user, or ``⌊η_n⌋ + 1`` (more than could ever fit) if unlimited."""
    return [int(min(np.floor(inst.eta[n] * (1 + 1e-9)) + 1, MAX_COUNT)) if not np.isfinite(inst.tasks[n])
            else int(min(np.floor(inst.tasks[n] + 1e-9), MAX_COUNT)) for n in range(inst.n_users)]


def one_reallocation(inst: Instance, batched: bool = True, expired: Any = None
                     ) -> tuple[np.ndarray, bool] | np.ndarray:
    """One ``Reallocation`` on an empty cluster with ``⌊T[n]⌋`` tasks queued per user (``⌊η_n⌋ + 1`` if
    unlimited); returns the integral allocation ``x[n, i]``. ``batched=False`` runs Algorithm 2's loop
    one task at a time with task ids (the reference the batched loop is tested against). With
    ``expired`` given, returns ``(x, finished)``: the loop stops when ``expired()`` says so."""
    counts = queued_counts(inst)
    sched = (CountingTSFER if batched else OnlineTSFER).from_instance(inst)
    next_id = 0
    for n, u in enumerate(inst.users):
        sched.add_user(u, inst.demand[n], inst.external_demand[n], inst.runnable[n],
                       eta=float(inst.eta[n]), weight=float(inst.weight[n]), cost=inst.budget_cost[n],
                       budget=float(inst.budget_limit[n]))
        if batched:
            sched.enqueue(u, counts[n])
        else:
            sched.enqueue(u, range(next_id, next_id + counts[n]))
            next_id += counts[n]
    finished = True
    if batched:
        try:
            finished = allocate_batched(sched, expired, MAX_STEPS) >= 0
        except TooManySteps as exc:
            raise InstanceError(f"users[{exc.users[0]}]: tsf-er-online places whole tasks, and users "
                                f"{', '.join(map(str, exc.users))} take turns one task at a time for more "
                                f"than {MAX_STEPS:,} steps; give task limits, or use tsf-er for the "
                                "fractional allocation") from None
    else:
        sched.reallocation()
    x = np.zeros((inst.n_users, inst.n_servers))
    x[[sched.row[u] for u in inst.users]] = sched.running
    return (x, finished) if expired is not None else x


@mechanism("tsf-er-online", problem="none", needs_demands=True,
           reference="[TSFER] §5, Alg. 2",
           summary="indivisible TSF-ER: one Reallocation of Algorithm 2 (⌊T[n]⌋ whole tasks queued "
           "per user; least task share first, best-fit server); online: fairalloc simulate")
def solve(inst: Instance, session: Session) -> Solution:
    x, finished = one_reallocation(inst, expired=session.expired)
    share = x.sum(axis=1) / (inst.weight * inst.eta)
    log.info("tsf-er-online: %d tasks placed; task shares from %.4g to %.4g", int(x.sum()),
             share.min(), share.max())
    details: dict[str, Any] = {"eta": dict(zip(inst.users, inst.eta)),
                               "task_share": dict(zip(inst.users, share)),
                               "one_task_share": dict(zip(inst.users, 1.0 / (inst.weight * inst.eta)))}
    if not finished:  # the tasks placed so far are feasible, but the loop did not end
        return Solution(x, Status.TIME_LIMIT, "time limit: the Reallocation loop stopped before "
                        "J^feas was empty (users of equal share take one step per task)", details=details)
    return Solution(x, Status.CONVERGED, details=details)
