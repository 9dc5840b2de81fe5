"""The instance model (docs/instance-format.md#the-model): servers, resources, external resources, users.

An :class:`Instance` is immutable and validated on construction; every array is read-only. Derived
quantities (γ, η, γTSF, dominant shares, virtual dominant shares, sharing-incentive thresholds) are
computed once, vectorised, and exposed both as numpy arrays and, through :meth:`Instance.frame`, as
labelled pandas objects.

Notation (docs/instance-format.md#the-model): users ``n ∈ N``, servers ``i ∈ K``, server resources ``r ∈
R``, external resources
``e ∈ E``.

>>> inst = Instance.from_arrays(capacity=[[9, 12, 100], [12, 12, 0]],
...                             demand=[[1, 2, 10], [1, 2, 0]],
...                             resources=["cpu", "mem", "bw"])
>>> inst.gamma.tolist()
[[6.0, 0.0], [6.0, 6.0]]
>>> inst.gamma_tsf.tolist()
[6.0, 12.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from fairalloc.errors import InstanceError

__all__ = ["Instance"]


# the range of numbers an instance may hold (any unit; see docs/instance-format.md, "Magnitudes")
MIN_VALUE = 1e-30
MAX_VALUE = 1e30
MAX_WEIGHT_RATIO = 1e12


def _frozen(a: Any, dtype: Any = float, ndim: int | None = None, what: str = "array") -> np.ndarray:
    arr = np.array(a, dtype=dtype, copy=True)
    if ndim is not None and arr.ndim != ndim:
        raise InstanceError(f"{what}: expected a {ndim}-dimensional array, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


def _fmt(v: float) -> str:
    return repr(float(v)) if not math.isnan(v) else "NaN"


@dataclass(frozen=True, eq=False)
class Instance:
    """A validated multi-resource allocation instance.

    Capacity form: ``capacity[i, r]`` and ``demand[n, r]`` (plus optional external resources).
    Time-shared form ([APF] §3.4, [PSDSF] §IV): ``rates[n, i]`` = tasks per unit time user ``n`` gets with
    server ``i`` alone; then ``resources`` is empty and feasibility is ``Σ_n x[n,i]/γ[n,i] ≤ 1``.

    Use :meth:`from_arrays` to build one from arrays with default names, or
    :func:`fairalloc.io.load_instance` to read a file.
    """

    users: tuple[str, ...]
    servers: tuple[str, ...]
    resources: tuple[str, ...]
    capacity: np.ndarray  # (K, R)
    demand: np.ndarray  # (N, R)
    weight: np.ndarray  # (N,)
    tasks: np.ndarray  # (N,), inf = unlimited
    eligible: np.ndarray  # (N, K) bool: explicit placement constraints δ
    external: tuple[str, ...] = ()
    external_capacity: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (E,)
    external_demand: np.ndarray | None = None  # (N, E)
    external_scope: np.ndarray | None = None  # (E, K) bool: servers whose tasks use e
    rates: np.ndarray | None = None  # (N, K) time-shared form
    name: str = "instance"
    budget_limit: np.ndarray | None = None  # (N,) per-user budget B[n]; inf = no budget
    budget_cost: np.ndarray | None = None  # (N, K) cost per task c[n,i] >= 0 (0 = free)

    # ------------------------------------------------------------------ construction and validation
    def __post_init__(self) -> None:
        N, K = len(self.users), len(self.servers)
        set_ = object.__setattr__
        set_(self, "users", tuple(self.users))
        set_(self, "servers", tuple(self.servers))
        set_(self, "resources", tuple(self.resources))
        set_(self, "external", tuple(self.external))
        R, E = len(self.resources), len(self.external)
        if N == 0:
            raise InstanceError("users: the instance has no users")
        if K == 0:
            raise InstanceError("servers: the instance has no servers")
        self._check_names()
        set_(self, "capacity", _frozen(self.capacity, what="capacity").reshape(K, R))
        set_(self, "demand", _frozen(self.demand, what="demand").reshape(N, R))
        set_(self, "weight", _frozen(self.weight, what="weight").reshape(N))
        set_(self, "tasks", _frozen(self.tasks, what="tasks").reshape(N))
        set_(self, "eligible", _frozen(self.eligible, dtype=bool, what="eligible").reshape(N, K))
        set_(self, "external_capacity", _frozen(self.external_capacity).reshape(E))
        ext_d = np.zeros((N, E)) if self.external_demand is None else self.external_demand
        set_(self, "external_demand", _frozen(ext_d).reshape(N, E))
        scope = np.ones((E, K), bool) if self.external_scope is None else self.external_scope
        set_(self, "external_scope", _frozen(scope, dtype=bool).reshape(E, K))
        if self.rates is not None:
            set_(self, "rates", _frozen(self.rates).reshape(N, K))
        blim = np.full(N, np.inf) if self.budget_limit is None else self.budget_limit
        set_(self, "budget_limit", _frozen(blim, what="budget_limit").reshape(N))
        bcost = np.zeros((N, K)) if self.budget_cost is None else self.budget_cost
        set_(self, "budget_cost", _frozen(bcost, what="budget_cost").reshape(N, K))
        self._check_values()
        self._check_budgets()

    def _check_budgets(self) -> None:
        for n in np.flatnonzero(np.isnan(self.budget_limit) | (self.budget_limit < 0)):
            raise InstanceError(f"users[{self.users[n]}].budget.limit = {_fmt(self.budget_limit[n])}: "
                                "must be a number >= 0")
        c = self.budget_cost
        for (n, i) in np.argwhere(np.isnan(c) | (c < 0) | np.isinf(c)):
            raise InstanceError(f"users[{self.users[n]}].budget.cost.{self.servers[i]} = "
                                f"{_fmt(c[n, i])}: must be a finite number >= 0")

    def _check_names(self) -> None:
        groups = [("users", self.users), ("servers", self.servers),
                  ("resources", self.resources + self.external)]
        for what, names in groups:
            seen: set[str] = set()
            for nm in names:
                if not isinstance(nm, str) or not nm:
                    raise InstanceError(f"{what}: name {nm!r} must be a non-empty string")
                if nm in seen:
                    raise InstanceError(f"{what}: duplicate name {nm!r}")
                seen.add(nm)

    def _check_values(self) -> None:
        if self.rates is not None and (self.resources or self.external):
            raise InstanceError("rates: give either 'rates' (time-shared form) or resources/capacity/"
                                "demand, not both")
        if self.rates is None and not self.resources:
            raise InstanceError("resources: no server resources given (and no 'rates' table)")

        def bad(arr: np.ndarray, allow_inf: bool = False) -> np.ndarray:
            b = np.isnan(arr) | (arr < 0)
            return b if allow_inf else b | np.isinf(arr)

        for (i, r) in np.argwhere(bad(self.capacity)):
            raise InstanceError(f"servers[{self.servers[i]}].capacity.{self.resources[r]} = "
                                f"{_fmt(self.capacity[i, r])}: must be a finite number >= 0")
        for (n, r) in np.argwhere(bad(self.demand)):
            raise InstanceError(f"users[{self.users[n]}].demand.{self.resources[r]} = "
                                f"{_fmt(self.demand[n, r])}: must be a finite number >= 0")
        for (n, e) in np.argwhere(bad(self.external_demand)):
            raise InstanceError(f"users[{self.users[n]}].demand.{self.external[e]} = "
                                f"{_fmt(self.external_demand[n, e])}: must be a finite number >= 0")
        for e in np.flatnonzero(~(self.external_capacity > 0) | np.isinf(self.external_capacity)):
            raise InstanceError(f"external.{self.external[e]}.capacity = "
                                f"{_fmt(self.external_capacity[e])}: must be a finite number > 0")
        for e in np.flatnonzero(~self.external_scope.any(axis=1)):
            raise InstanceError(f"external.{self.external[e]}.servers: serves no server")
        for n in np.flatnonzero(~(self.weight > 0) | np.isinf(self.weight)):
            raise InstanceError(f"users[{self.users[n]}].weight = {_fmt(self.weight[n])}: "
                                "must be a finite number > 0")
        for n in np.flatnonzero(~(self.tasks > 0)):
            raise InstanceError(f"users[{self.users[n]}].tasks = {_fmt(self.tasks[n])}: "
                                "must be > 0 (omit it for unlimited tasks)")
        if self.rates is not None:
            for (n, i) in np.argwhere(bad(self.rates)):
                raise InstanceError(f"rates.{self.users[n]}.{self.servers[i]} = "
                                    f"{_fmt(self.rates[n, i])}: must be a finite number >= 0")
        else:
            zero = ~(self.demand > 0).any(axis=1) & ~(self.external_demand > 0).any(axis=1)
            for n in np.flatnonzero(zero):
                raise InstanceError(f"users[{self.users[n]}].demand: all zero (a task must demand "
                                    "something)")
            for n in np.flatnonzero(~(self.demand > 0).any(axis=1)):
                raise InstanceError(f"users[{self.users[n]}].demand: demands no server resource "
                                    f"(only {', '.join(self.external)}); every task must use a "
                                    "server resource")
        self._check_magnitudes()
        for n in np.flatnonzero(~self.runnable.any(axis=1)):
            elig = [s for s, ok in zip(self.servers, self.eligible[n]) if ok]
            raise InstanceError(f"users[{self.users[n]}]: eligible for no server it can run on "
                                f"(eligible: {elig or 'none'}; each lacks a resource it demands"
                                f"{'' if self.rates is None else ' or has rate 0'})")

    def _check_magnitudes(self) -> None:
        """Every positive number within ``[MIN_VALUE, MAX_VALUE]``, weights within ``MAX_WEIGHT_RATIO`` of
        each other, and ``γ[n,i]`` (tasks of ``n`` on a whole server) finite: beyond that double
        precision cannot hold the answer (a capacity of 1e308 over a demand of 1e-4 overflows)."""
        def check(arr: np.ndarray, where: Any) -> None:
            a = np.asarray(arr, float)
            out = (a > 0) & ((a < MIN_VALUE) | (a > MAX_VALUE))
            for idx in np.argwhere(out):
                raise InstanceError(f"{where(*idx)} = {_fmt(a[tuple(idx)])}: outside the supported range "
                                    f"[{MIN_VALUE:g}, {MAX_VALUE:g}] (rescale the unit)")

        check(self.capacity, lambda i, r: f"servers[{self.servers[i]}].capacity.{self.resources[r]}")
        check(self.demand, lambda n, r: f"users[{self.users[n]}].demand.{self.resources[r]}")
        check(self.external_demand, lambda n, e: f"users[{self.users[n]}].demand.{self.external[e]}")
        check(self.external_capacity, lambda e: f"external.{self.external[e]}.capacity")
        check(self.weight, lambda n: f"users[{self.users[n]}].weight")
        if self.rates is not None:
            check(self.rates, lambda n, i: f"rates.{self.users[n]}.{self.servers[i]}")
        if self.budget_cost is not None:
            check(self.budget_cost, lambda n, i: f"users[{self.users[n]}].budget.cost.{self.servers[i]}")
        # (a task limit or budget of inf is none)
        for arr, what in ((self.tasks, "tasks"), (self.budget_limit, "budget.limit")):
            if arr is not None:
                a = np.asarray(arr, float)
                check(np.where(np.isfinite(a), a, 0.0), lambda n, w=what: f"users[{self.users[n]}].{w}")
        if self.weight.size and self.weight.max() > MAX_WEIGHT_RATIO * self.weight.min():
            n = int(np.argmin(self.weight))
            raise InstanceError(f"users[{self.users[n]}].weight = {_fmt(self.weight[n])}: weights span more "
                                f"than a factor {MAX_WEIGHT_RATIO:g}")
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            g = self._gamma(self.eligible)
        for (n, i) in np.argwhere(~np.isfinite(g) | (g > MAX_VALUE)):
            raise InstanceError(f"users[{self.users[n]}] on servers[{self.servers[i]}]: {_fmt(g[n, i])} "
                                f"tasks fit on the server, beyond {MAX_VALUE:g} (rescale capacities or "
                                "demands)")

    @classmethod
    def from_arrays(cls, *, capacity: Any = None, demand: Any = None,
                    weight: Any = None, tasks: Any = None, eligible: Any = None,
                    external_capacity: Any = None, external_demand: Any = None,
                    external_scope: Any = None, rates: Any = None,
                    budget_limit: Any = None, budget_cost: Any = None,
                    users: Sequence[str] | None = None, servers: Sequence[str] | None = None,
                    resources: Sequence[str] | None = None, external: Sequence[str] | None = None,
                    name: str = "instance") -> Instance:
        """Build an instance from arrays; names default to ``u1.., s1.., r1.., e1..``.

        Give ``capacity`` (K×R) and ``demand`` (N×R), or ``rates`` (N×K) for the time-shared form.
        Optional per-user budgets: ``budget_limit`` (N, ``inf`` = none) and ``budget_cost`` (N×K).
        """
        if rates is not None:
            rates = np.asarray(rates, float)
            N, K = rates.shape
            R = 0
            capacity, demand = np.zeros((K, 0)), np.zeros((N, 0))
        else:
            capacity, demand = np.atleast_2d(np.asarray(capacity, float)), np.atleast_2d(
                np.asarray(demand, float))
            (K, R), N = capacity.shape, demand.shape[0]
        ext_cap = np.zeros(0) if external_capacity is None else np.atleast_1d(
            np.asarray(external_capacity, float))
        E = ext_cap.size
        return cls(
            users=tuple(users or (f"u{n + 1}" for n in range(N))),
            servers=tuple(servers or (f"s{i + 1}" for i in range(K))),
            resources=tuple(resources or (f"r{r + 1}" for r in range(R))),
            capacity=capacity, demand=demand,
            weight=np.ones(N) if weight is None else weight,
            tasks=np.full(N, np.inf) if tasks is None else tasks,
            eligible=np.ones((N, K), bool) if eligible is None else eligible,
            external=tuple(external or (f"e{e + 1}" for e in range(E))),
            external_capacity=ext_cap,
            external_demand=None if external_demand is None else np.asarray(
                external_demand, float).reshape(N, E),
            external_scope=external_scope, rates=rates, name=name,
            budget_limit=budget_limit, budget_cost=budget_cost)

    def replace(self, **changes: Any) -> Instance:
        """A copy with some fields changed (validated again), e.g. a misreported demand."""
        return replace(self, **changes)

    def take(self, users: Sequence[int] | None = None, servers: Sequence[int] | None = None,
             resources: Sequence[int] | None = None, external: Sequence[int] | None = None) -> Instance:
        """The instance on the given users, servers, resources and external resources (indices, in the
        order given; ``None`` keeps all, in place): a sub-instance, or the same instance reordered.
        Raises :class:`~fairalloc.errors.InstanceError` if what is left is not a valid instance."""
        def idx(sel: Sequence[int] | None, n: int) -> np.ndarray:
            return np.arange(n) if sel is None else np.asarray(sel, dtype=int).reshape(-1)

        U, S = idx(users, self.n_users), idx(servers, self.n_servers)
        R, E = idx(resources, len(self.resources)), idx(external, len(self.external))
        return replace(
            self, users=[self.users[n] for n in U], servers=[self.servers[i] for i in S],
            resources=[self.resources[r] for r in R], external=[self.external[e] for e in E],
            capacity=self.capacity[np.ix_(S, R)], demand=self.demand[np.ix_(U, R)],
            weight=self.weight[U], tasks=self.tasks[U], eligible=self.eligible[np.ix_(U, S)],
            external_capacity=self.external_capacity[E], external_demand=self.external_demand[np.ix_(U, E)],
            external_scope=self.external_scope[np.ix_(E, S)],
            rates=None if self.rates is None else self.rates[np.ix_(U, S)],
            budget_limit=self.budget_limit[U], budget_cost=self.budget_cost[np.ix_(U, S)])

    def name_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The orders (index arrays) that sort the users, servers, resources and external resources by
        name, for :meth:`take`; ``None`` when every one of them is sorted already."""
        orders = tuple(np.array(sorted(range(len(names)), key=names.__getitem__), dtype=int)
                       for names in (self.users, self.servers, self.resources, self.external))
        if all((o == np.arange(o.size)).all() for o in orders):
            return None
        return orders  # type: ignore[return-value]

    # ------------------------------------------------------------------ sizes
    @property
    def n_users(self) -> int:
        return len(self.users)

    @property
    def n_servers(self) -> int:
        return len(self.servers)

    @property
    def time_shared(self) -> bool:
        """True for the time-shared (rate table) form."""
        return self.rates is not None

    @property
    def has_placement(self) -> bool:
        """True when some user has an explicit placement constraint (δ = 0 somewhere)."""
        return not bool(self.eligible.all())

    @property
    def has_task_limits(self) -> bool:
        return bool(np.isfinite(self.tasks).any())

    @property
    def has_budgets(self) -> bool:
        """True when some user has a budget ``Σ_i c[n,i]·x[n,i] ≤ B[n]`` (``B[n] < inf``)."""
        return bool(np.isfinite(self.budget_limit).any())

    @property
    def budgeted(self) -> np.ndarray:
        """Indices of the users with a budget."""
        return np.flatnonzero(np.isfinite(self.budget_limit))

    def require_no_budgets(self, mechanism: str) -> None:
        """Raise a clear error if a mechanism that cannot honour budgets gets budgeted users."""
        if self.has_budgets:
            who = ", ".join(self.users[n] for n in self.budgeted)
            raise InstanceError(f"{self.name}: mechanism '{mechanism}' does not support budgets "
                                f"(budgeted users: {who})")

    def require_demands(self, mechanism: str) -> None:
        """Raise a clear error if a demand-based mechanism gets a time-shared instance."""
        if self.time_shared:
            raise InstanceError(f"{self.name}: mechanism '{mechanism}' needs demand vectors and "
                                "capacities; this instance is in time-shared form (rates)")

    # ------------------------------------------------------------------ derived quantities
    def _gamma(self, delta: np.ndarray) -> np.ndarray:
        if self.rates is not None:
            return np.where(delta, self.rates, 0.0)
        d = self.demand[:, None, :]  # (N,1,R)
        c = self.capacity[None, :, :]  # (1,K,R)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(d > 0, c / np.where(d > 0, d, 1.0), np.inf)
        g = ratio.min(axis=2)  # (N,K); users validated to demand some server resource
        return np.where(delta, g, 0.0)

    @cached_property
    def gamma(self) -> np.ndarray:
        """``γ[n,i] = δ[n,i] · min_{r: d[n,r]>0} c[i,r]/d[n,r]``: tasks when ``n`` monopolises ``i``
        ([PSDSF] (8)); the rate table in the time-shared form."""
        return _frozen(self._gamma(self.eligible))

    @cached_property
    def runnable(self) -> np.ndarray:
        """``δ[n,i] = 1`` and ``γ[n,i] > 0``: the pairs that carry an allocation variable."""
        return _frozen(self.eligible & (self._gamma(self.eligible) > 0), dtype=bool)

    @cached_property
    def gamma_tsf(self) -> np.ndarray:
        """``γTSF[n] = Σ_i γ̂[n,i]`` with ``γ̂`` computed as if every ``δ = 1`` ([PSDSF] §II-B)."""
        return _frozen(self._gamma(np.ones_like(self.eligible)).sum(axis=1))

    @cached_property
    def total_capacity(self) -> np.ndarray:
        """``c[r] = Σ_i c[i,r]`` for server resources, then ``c[e]`` for external ones (length R+E)."""
        return _frozen(np.concatenate([self.capacity.sum(axis=0), self.external_capacity]))

    @cached_property
    def all_demand(self) -> np.ndarray:
        """Demands over ``R ∪ E`` (N × (R+E)), server resources first."""
        return _frozen(np.hstack([self.demand, self.external_demand]))

    @property
    def all_resources(self) -> tuple[str, ...]:
        return self.resources + self.external

    @cached_property
    def dominant_coeff(self) -> np.ndarray:
        """``κ[n] = max_{r∈R∪E} d[n,r]/c[r]`` so that the global dominant share is ``s[n] = κ[n]·X[n]``
        ([PSDSF] (6)). A demanded resource with zero total capacity gives ``κ = inf``."""
        self.require_demands("dominant shares")
        d, c = self.all_demand, self.total_capacity
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(d > 0, d / c, 0.0)
        return _frozen(ratio.max(axis=1))

    @cached_property
    def dominant_resource(self) -> tuple[str, ...]:
        """Name of each user's global dominant resource ([PSDSF] (2))."""
        self.require_demands("dominant resources")
        d, c = self.all_demand, self.total_capacity
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(d > 0, d / c, 0.0)
        return tuple(self.all_resources[r] for r in ratio.argmax(axis=1))

    @cached_property
    def eta(self) -> np.ndarray:
        """``η[n]``: most tasks ``n`` can run with every other user absent, task limit ignored
        ([TSFER] (6) and Table 1: "η is not bounded by n_j"), over eligible servers and every external
        resource (one LP per user when some external resource is scoped to a subset of servers)."""
        g = self.gamma.sum(axis=1)
        if not self.external:
            return _frozen(g)
        if self.external_scope.all():
            with np.errstate(divide="ignore"):
                lim = np.where(self.external_demand > 0,
                               self.external_capacity / np.where(self.external_demand > 0,
                                                                 self.external_demand, 1), np.inf)
            return _frozen(np.minimum(g, lim.min(axis=1)))
        return _frozen(np.array([self._monopoly_lp(n, 1.0) for n in range(self.n_users)]))

    def _monopoly_lp(self, n: int, share: float) -> float:
        """``max Σ_i x_i`` s.t. ``x_i ≤ share·γ[n,i]``, ``Σ_{i∈S[e]} x_i d[n,e] ≤ share·c[e]``."""
        from scipy.optimize import linprog

        rows = [self.external_scope[e].astype(float) * self.external_demand[n, e]
                for e in range(len(self.external)) if self.external_demand[n, e] > 0]
        if not rows:
            return share * float(self.gamma[n].sum())
        res = linprog(-np.ones(self.n_servers), A_ub=np.array(rows),
                      b_ub=share * self.external_capacity[self.external_demand[n] > 0],
                      bounds=[(0, share * g) for g in self.gamma[n]], method="highs")
        if res.status != 0:  # pragma: no cover - a bounded, feasible LP
            raise RuntimeError(f"monopoly LP for user {self.users[n]} failed: {res.message}")
        return float(-res.fun)

    def si_threshold(self, definition: str = "apf") -> np.ndarray:
        """Sharing-incentive thresholds (docs/verification.md), weighted by ``w[n] = φ[n]/Σφ``.

        ``"apf"`` ([APF]/[PSDSF]): ``w[n] · Σ_i γ[n,i]`` (every server split in proportion to weights).
        ``"tsfer"`` ([TSFER] Def. 6): ``ψ[n] = min(w[n]·η[n], T[n])``: the equal split of every
        server and every external resource, which is exactly η computed on capacities scaled by ``w``.
        """
        w = self.weight / self.weight.sum()
        if definition == "apf":
            return _frozen(w * self.gamma.sum(axis=1))
        if definition == "tsfer":
            return _frozen(np.minimum(w * self.eta, self.tasks))
        raise ValueError(f"si definition {definition!r}: expected 'apf' or 'tsfer'")

    # ------------------------------------------------------------------ shares of an allocation
    def totals(self, x: np.ndarray) -> np.ndarray:
        """``X[n] = Σ_i x[n,i]``."""
        return np.asarray(x, float).sum(axis=1)

    def dominant_share(self, x: np.ndarray) -> np.ndarray:
        """Global dominant share ``s[n] = X[n] · κ[n]`` ([PSDSF] (6))."""
        return self.totals(x) * self.dominant_coeff

    def vds(self, x: np.ndarray, weighted: bool = False) -> np.ndarray:
        """Virtual dominant share ``s[n,i] = X[n]/γ[n,i]`` ([PSDSF] (12)); ``inf`` where ``γ = 0``.
        ``weighted=True`` divides by ``φ[n]``."""
        X = self.totals(x)[:, None]
        with np.errstate(divide="ignore"):
            s = np.where(self.gamma > 0, X / np.where(self.gamma > 0, self.gamma, 1.0), np.inf)
        return s / self.weight[:, None] if weighted else s

    # ------------------------------------------------------------------ pandas views
    def frame(self, what: str) -> pd.DataFrame | pd.Series:
        """A labelled view: ``capacity``, ``demand``, ``gamma``, ``eligible``, ``rates`` (DataFrames) or
        ``weight``, ``tasks``, ``eta``, ``gamma_tsf``, ``dominant_coeff`` (Series by user)."""
        per_user = {"weight", "tasks", "eta", "gamma_tsf", "dominant_coeff"}
        if what in per_user:
            return pd.Series(np.asarray(getattr(self, what)), index=pd.Index(self.users, name="user"),
                             name=what)
        tables = {
            "capacity": (self.capacity, self.servers, self.resources, "server", "resource"),
            "demand": (self.all_demand, self.users, self.all_resources, "user", "resource"),
            "gamma": (self.gamma, self.users, self.servers, "user", "server"),
            "eligible": (self.eligible, self.users, self.servers, "user", "server"),
            "rates": (self.rates, self.users, self.servers, "user", "server"),
        }
        if what not in tables:
            raise KeyError(f"frame({what!r}): expected one of {sorted(per_user | tables.keys())}")
        arr, rows, cols, rn, cn = tables[what]
        if arr is None:
            raise InstanceError(f"{self.name}: has no {what} (not in time-shared form)")
        return pd.DataFrame(np.asarray(arr), index=pd.Index(rows, name=rn),
                            columns=pd.Index(cols, name=cn))

    # ------------------------------------------------------------------ transformations
    def pooled(self) -> Instance:
        """All servers pooled into one server ``pool`` (a lone server keeps its name) holding every
        server and external resource (the single resource pool of DRF, [PSDSF] §II-A; placement
        constraints are dropped)."""
        self.require_demands("pooling")
        name = self.servers[0] if self.n_servers == 1 else "pool"
        return Instance(users=self.users, servers=(name,), resources=self.all_resources,
                        capacity=self.total_capacity[None, :], demand=self.all_demand,
                        weight=self.weight, tasks=self.tasks,
                        eligible=np.ones((self.n_users, 1), bool), name=self.name)

    def __repr__(self) -> str:
        form = "time-shared" if self.time_shared else f"resources={list(self.resources)}"
        ext = f", external={list(self.external)}" if self.external else ""
        return (f"Instance({self.name!r}, users={self.n_users}, servers={self.n_servers}, "
                f"{form}{ext})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Instance):
            return NotImplemented
        arrays = ("capacity", "demand", "weight", "tasks", "eligible", "external_capacity",
                  "external_demand", "external_scope", "budget_limit", "budget_cost")
        same_rates = (self.rates is None) == (other.rates is None) and (
            self.rates is None or np.array_equal(self.rates, other.rates))
        return (self.users == other.users and self.servers == other.servers
                and self.resources == other.resources and self.external == other.external
                and same_rates
                and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays))

    __hash__ = None  # type: ignore[assignment]
