"""Partitioned solves in the style of POP (Narayanan et al., *Solving Large-Scale Granular Resource
Allocation Problems Efficiently with POP*, SOSP 2021): split the users and the servers into ``k``
sub-problems, solve each independently with the same mechanism, and put the allocations side by side.

The answer is **not** the mechanism's allocation: each user only competes with the users of its part,
for the servers of its part. What it buys is size: ``k`` problems of ``N/k`` users × ``K/k`` servers
instead of one of ``N × K`` (a ``k²``-fold smaller LP each), solvable in parallel. The result has status
``converged`` (never ``optimal``) and ``details.partition`` records the split; the fairness loss against
the exact answer is measured by ``python -m benchmarks partition`` through the verification layer.

The split (deterministic given ``seed``):

- **servers** are sorted by type (capacity vector, the scoped external resources that apply to them,
  ties broken at random) and dealt round-robin from a random offset, so each part gets ``⌊K/k⌋`` or
  ``⌈K/k⌉`` servers and about ``1/k`` of every server type;
- **users** are sorted by weight, then dominant resource (external resources included), then how
  large that dominant share is (ties at random) and dealt round-robin the same way, so every part
  gets a like mix of heavy and light users of every kind; a user with no server it can run on in its
  part moves to the part holding the most servers it can run on (the fewest users on ties); a part
  left without users hands its servers to the part with the most users per server;
- an **external resource** (a link) is split in proportion to the servers of its scope each part
  holds (``1/k`` when it applies to every server); per-user task limits and budgets stay with the user.

**Shares in whole-instance units.** A max-min mechanism equalises ``X_n/(φ_n ν_n)`` with a per-user
normaliser ``ν_n`` computed from the instance it sees — ``η_n`` for tsf-er, ``γ^TSF_n`` for tsf, the
inverse dominant-share coefficient for drfh/drf/drf-er. A part computes them from its own servers, which
hold a random ``≈1/k`` of each user's reach (0.10–0.15 instead of 1/8 on the 1024 × 128 scaling
workload), so the part's equal shares are unequal on the whole instance. For these mechanisms each part's
user weights are therefore ``φ_n ν_n/ν^part_n`` (scaled to a largest weight of 1): the part's leximin is then
on ``X_n/(φ_n ν_n)`` with the whole instance's ``ν`` (``details.partition.reweighted``). On that workload
this took the smallest share from 0.775 to 0.981 of the exact one at ``k = 8`` (0.668 to 0.970 at
``k = 16``).

``workers`` > 1 solves the parts in parallel in local worker processes, ``scheduler`` (an address, or
``"local"``) on Dask; both are the backends of :mod:`fairalloc.batch`.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fairalloc.errors import ParameterError
from fairalloc.instance import Instance
from fairalloc.result import Result
from fairalloc.status import Status

__all__ = ["NORMALISERS", "PARAMS", "Part", "reweight", "solve_partitioned", "split"]

log = logging.getLogger(__name__)

# the generic parameters `fairalloc.solve` takes out of a mechanism's parameters
PARAMS = ("partitions", "partition_seed", "partition_workers", "partition_scheduler")


@dataclass(frozen=True)
class Part:
    users: np.ndarray  # indices into the whole instance's users
    servers: np.ndarray  # indices into its servers
    instance: Instance


def _deal(keys: list[tuple[Any, ...]], k: int, rng: np.random.Generator) -> np.ndarray:
    """Round-robin over ``keys`` sorted (ties at random), from a random offset."""
    tie = rng.permutation(len(keys))
    order = sorted(range(len(keys)), key=lambda j: (keys[j], tie[j]))
    part = np.empty(len(keys), dtype=int)
    part[order] = (int(rng.integers(k)) + np.arange(len(keys))) % k
    return part


def split(inst: Instance, k: int, seed: int = 0) -> list[Part]:
    """The ``k`` sub-instances (see the module docstring)."""
    if not isinstance(k, int | np.integer) or k < 1:
        raise ParameterError(f"partitions = {k!r}: must be an integer >= 1")
    if k > min(inst.n_users, inst.n_servers):
        raise ParameterError(f"partitions = {k}: at most min(users, servers) = "
                             f"{min(inst.n_users, inst.n_servers)} for {inst.name!r}")
    rng = np.random.default_rng(seed)
    K, N = inst.n_servers, inst.n_users
    scope = inst.external_scope if inst.external_scope is not None else np.ones((len(inst.external), K),
                                                                                bool)
    if inst.rates is not None:
        skeys = [tuple(np.round(np.sort(inst.rates[:, i]), 12)) for i in range(K)]
    else:
        skeys = [tuple(np.round(inst.capacity[i], 12)) + tuple(scope[:, i]) for i in range(K)]
    server_part = _deal(skeys, k, rng)
    if inst.rates is not None:
        best = inst.rates.max(axis=1)
        direction = inst.rates / np.where(best > 0, best, 1.0)[:, None]
    else:
        total = inst.capacity.sum(axis=0)
        direction = inst.demand / np.where(total > 0, total, 1.0)
        if len(inst.external) and inst.external_demand is not None:
            direction = np.hstack([direction, inst.external_demand / inst.external_capacity])
    # dominant resource, then how much of it: similar users sit next to each other and are dealt to
    # different parts, so every part gets a like mix of heavy and light users of every kind
    ukeys = [(float(inst.weight[n]), int(np.argmax(direction[n])), -float(direction[n].max()))
             for n in range(N)]
    user_part = _deal(ukeys, k, rng)
    run = inst.runnable
    for n in range(N):
        if run[n, server_part == user_part[n]].any() or not run[n].any():
            continue
        counts = np.bincount(server_part[run[n]], minlength=k)
        load = np.bincount(user_part, minlength=k)
        user_part[n] = int(np.lexsort((load, -counts))[0])
    # a part left without users (they moved to where they can run) hands its servers to the part
    # with the most users per server, so no capacity idles
    for j in range(k):
        if not (user_part == j).any():
            users = np.bincount(user_part, minlength=k)
            servers = np.maximum(np.bincount(server_part, minlength=k), 1)
            server_part[server_part == j] = int(np.argmax(users / servers))
    parts = []
    for j in range(k):
        us, ss = np.flatnonzero(user_part == j), np.flatnonzero(server_part == j)
        if us.size:
            parts.append(Part(us, ss, _sub_instance(inst, us, ss, scope, len(parts), k)))
    return parts


def _sub_instance(inst: Instance, us: np.ndarray, ss: np.ndarray, scope: np.ndarray, j: int,
                  k: int) -> Instance:
    changes: dict[str, Any] = {
        "users": tuple(inst.users[n] for n in us), "servers": tuple(inst.servers[i] for i in ss),
        "capacity": inst.capacity[ss], "demand": inst.demand[us], "weight": inst.weight[us],
        "tasks": inst.tasks[us], "eligible": inst.eligible[np.ix_(us, ss)],
        "name": f"{inst.name}[part {j + 1}/{k}]"}
    if len(inst.external):
        held = scope[:, ss].sum(axis=1) / np.maximum(scope.sum(axis=1), 1)
        keep = np.flatnonzero(held > 0)  # a link none of whose servers is here does not apply here
        changes["external"] = tuple(inst.external[e] for e in keep)
        changes["external_capacity"] = (inst.external_capacity * held)[keep]
        if inst.external_demand is not None:
            changes["external_demand"] = inst.external_demand[np.ix_(us, keep)]
        if inst.external_scope is not None:
            changes["external_scope"] = inst.external_scope[np.ix_(keep, ss)]
    if inst.rates is not None:
        changes["rates"] = inst.rates[np.ix_(us, ss)]
    if inst.budget_limit is not None:
        changes["budget_limit"] = inst.budget_limit[us]
    if inst.budget_cost is not None:
        changes["budget_cost"] = inst.budget_cost[np.ix_(us, ss)]
    return inst.replace(**changes)


# per-user normaliser ν of the max-min mechanisms' shares X/(φν) (see the module docstring)
NORMALISERS: dict[str, Any] = {
    "tsf-er": lambda inst: inst.eta,
    "tsf": lambda inst: inst.gamma_tsf,
    "drfh": lambda inst: 1.0 / inst.dominant_coeff,
    "drf": lambda inst: 1.0 / inst.dominant_coeff,
    "drf-er": lambda inst: 1.0 / inst.dominant_coeff,
}


def reweight(inst: Instance, parts: list[Part], mechanism: str) -> list[Part]:
    """Parts whose weights make the mechanism's shares those of the whole instance (module docstring);
    the parts unchanged for mechanisms without a per-user normaliser."""
    norm = NORMALISERS.get(mechanism)
    if norm is None:
        return parts
    whole = np.asarray(norm(inst), float)
    out = []
    for p in parts:
        own = np.asarray(norm(p.instance), float)
        ok = np.isfinite(own) & (own > 0) & np.isfinite(whole[p.users]) & (whole[p.users] > 0)
        w = p.instance.weight * np.where(ok, whole[p.users] / np.where(ok, own, 1.0), 1.0)
        out.append(Part(p.users, p.servers, p.instance.replace(weight=w / w.max())))
    return out


def _solve_here(parts: list[Part], mechanism: str, kwargs: dict[str, Any]) -> list[Result]:
    from fairalloc.api import solve

    return [solve(p.instance, mechanism, **kwargs) for p in parts]


def _solve_on_backend(parts: list[Part], mechanism: str, kwargs: dict[str, Any], workers: int,
                      scheduler: str | None) -> list[Result]:
    from fairalloc.batch.backends import DaskBackend, LocalPool
    from fairalloc.io import save_instance

    params = {k: v for k, v in kwargs.items() if k not in ("solver", "time_limit", "solver_options")}
    if kwargs.get("solver_options"):
        raise ParameterError("partition_workers: solver options are not passed to worker processes; "
                             "solve the parts here (partition_workers=1) to use them")
    with tempfile.TemporaryDirectory(prefix="fairalloc-partition-") as tmp:
        specs = {}
        for j, p in enumerate(parts):
            path = Path(tmp) / f"part{j}.json"
            save_instance(p.instance, path)
            specs[str(j)] = {"key": str(j), "instance": str(path), "mechanism": mechanism,
                             "params": params, "solver": kwargs.get("solver"),
                             "time_limit": kwargs.get("time_limit"), "verify": False, "want_doc": True}
        backend: Any = (DaskBackend(scheduler=None if scheduler == "local" else scheduler,
                                    local=workers if scheduler == "local" else None)
                        if scheduler else LocalPool(workers))
        docs: dict[str, Any] = {}
        try:
            for spec in specs.values():
                backend.submit(spec)
            while len(docs) < len(specs):
                for key, outcome in backend.events(1.0):
                    docs[key] = outcome
        finally:
            backend.close()
    results = []
    for j, p in enumerate(parts):
        outcome = docs[str(j)]
        if outcome.get("doc") is None:
            row = outcome.get("row", {})
            results.append(Result(instance=p.instance.name, mechanism=mechanism,
                                  status=Status(row.get("status", "error")), users=p.instance.users,
                                  servers=p.instance.servers,
                                  allocation=np.zeros((len(p.users), len(p.servers))),
                                  message=row.get("message", "")))
        else:
            results.append(Result.from_dict(outcome["doc"], users=p.instance.users,
                                            servers=p.instance.servers))
    return results


def solve_partitioned(inst: Instance, mechanism: str, k: int, *, seed: int = 0, workers: int = 1,
                      scheduler: str | None = None, **kwargs: Any) -> Result:
    """Solve ``mechanism`` on the ``k`` parts of ``inst`` and combine (``kwargs``: those of
    :func:`fairalloc.solve` and the mechanism's parameters)."""
    t0 = time.perf_counter()
    parts = reweight(inst, split(inst, k, seed), mechanism)
    if workers > 1 or scheduler:
        results = _solve_on_backend(parts, mechanism, kwargs, workers, scheduler)
    else:
        results = _solve_here(parts, mechanism, kwargs)
    x = np.zeros((inst.n_users, inst.n_servers))
    for p, r in zip(parts, results):
        x[np.ix_(p.users, p.servers)] = r.allocation
    worst = max((r.status for r in results), key=lambda s: (not s.ok, s != Status.OPTIMAL))
    status = Status.CONVERGED if worst.ok else worst
    failed = [f"{r.instance}: {r.status.value} ({r.message})" for r in results if not r.ok]
    message = (f"partitioned solve (POP, k={k}, seed={seed}): each part solved by {mechanism}; the "
               "combination approximates the mechanism's allocation")
    if failed:
        message += "; failed parts: " + "; ".join(failed)
    first = results[0]
    solver = {"name": "+".join(sorted({r.solver.get("name", "none") for r in results})),
              "solves": sum(int(r.solver.get("solves") or 0) for r in results),
              "iterations": sum(int(r.solver.get("iterations") or 0) for r in results),
              "seconds": sum(float(r.solver.get("seconds") or 0.0) for r in results),
              "max_kkt_residual": max((r.solver.get("max_kkt_residual") or 0.0 for r in results),
                                      default=None),
              "max_kkt_relative": max((r.solver.get("max_kkt_relative") or 0.0 for r in results),
                                      default=None),
              "versions": first.solver.get("versions")}
    details = {"partition": {
        "k": k, "seed": seed, "workers": workers, "scheduler": scheduler,
        "reweighted": mechanism in NORMALISERS,
        "parts": [{"users": len(p.users), "servers": len(p.servers), "status": r.status.value,
                   "seconds": r.timings.get("total"), "min_tasks": float(r.tasks.min())}
                  for p, r in zip(parts, results)]}}
    return Result(instance=inst.name, mechanism=mechanism, status=status, users=inst.users,
                  servers=inst.servers, allocation=x, message=message,
                  parameters={**first.parameters, "partitions": k, "partition_seed": seed},
                  solver=solver, timings={"total": time.perf_counter() - t0}, details=details)


def take_params(params: dict[str, Any]) -> dict[str, Any]:
    """Remove the partition parameters from a mechanism's parameters; return them parsed."""
    from fairalloc.registry import as_int

    out: dict[str, Any] = {}
    for name, key in (("partitions", "k"), ("partition_seed", "seed"), ("partition_workers", "workers")):
        if name in params:
            raw = params.pop(name)
            try:
                out[key] = as_int(raw)
            except (TypeError, ValueError):
                raise ParameterError(f"{name} = {str(raw)[:80]!r}: expected an integer") from None
    if "partition_scheduler" in params:
        out["scheduler"] = str(params.pop("partition_scheduler"))
    if out and "k" not in out:
        raise ParameterError(f"{', '.join(sorted(out))}: only with -p partitions=K")
    if out.get("k", 1) < 1:
        raise ParameterError(f"partitions = {out['k']}: must be an integer >= 1")
    if "workers" in out and out["workers"] < 1:
        raise ParameterError(f"partition_workers = {out['workers']}: must be >= 1")
    return out
