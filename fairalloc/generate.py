"""Random instances for property tests, the property atlas and benchmarks (seeded, documented).

:func:`random_instance` draws capacities ``U(0.5, 2)`` per server resource (a resource is missing,
capacity 0, with probability ``missing``), demands ``U(0.05, 1)`` (a user does not use a resource with
probability 0.3, but always uses at least one server resource), weights from ``{1, 2, 3}``, finite task
limits ``U(0.2, 1.2)·η`` for roughly half of the users, placement constraints that drop each server
with probability 0.4 (keeping at least one server the user can run on), and external resources with
capacity ``U(0.5, 2)`` and demands ``U(0.02, 0.5)``, optionally scoped to a random non-empty server subset.
"""

from __future__ import annotations

import numpy as np

from fairalloc.instance import Instance

__all__ = ["FAMILIES", "random_instance"]

FAMILIES = {
    "plain": {},
    "placement": {"placement": True},
    "external": {"external": 1},
    "limits": {"limits": True},
    "weights": {"weights": True},
    "mixed": {"placement": True, "external": 1, "limits": True, "weights": True},
    "scoped": {"external": 2, "scoped": True, "placement": True},
    "time-shared": {"time_shared": True, "weights": True, "placement": True},
}


def random_instance(seed: int | np.random.Generator, n_users: int | None = None,
                    n_servers: int | None = None, n_resources: int | None = None, *,
                    placement: bool = False, external: int = 0, scoped: bool = False,
                    limits: bool = False, weights: bool = False, time_shared: bool = False,
                    missing: float = 0.15, name: str | None = None) -> Instance:
    """A valid random instance (see the module docstring for the distributions)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    N = n_users or int(rng.integers(2, 6))
    K = n_servers or int(rng.integers(1, 4))
    R = n_resources or int(rng.integers(1, 4))
    w = rng.choice([1.0, 2.0, 3.0], N) if weights else np.ones(N)
    if time_shared:
        rates = rng.uniform(1, 10, (N, K)) * (rng.random((N, K)) > 0.2)
        rates[np.arange(N), rng.integers(0, K, N)] = rng.uniform(1, 10, N)
        elig = _placement(rng, rates > 0, placement)
        return Instance.from_arrays(rates=rates, weight=w, eligible=elig,
                                    name=name or f"random-ts-{N}x{K}")
    cap = rng.uniform(0.5, 2.0, (K, R)) * (rng.random((K, R)) > missing)
    cap[cap.sum(axis=1) == 0, 0] = 1.0
    dem = rng.uniform(0.05, 1.0, (N, R)) * (rng.random((N, R)) > 0.3)
    for n in range(N):
        if not (dem[n] > 0).any():
            dem[n, rng.integers(R)] = rng.uniform(0.05, 1.0)
        # make sure some server offers everything the user demands
        if not any(((cap[i] > 0) | (dem[n] == 0)).all() for i in range(K)):
            i = int(rng.integers(K))
            cap[i, (dem[n] > 0) & (cap[i] == 0)] = rng.uniform(0.5, 2.0)
    can = np.array([[((cap[i] > 0) | (dem[n] == 0)).all() for i in range(K)] for n in range(N)])
    elig = _placement(rng, can, placement)
    E = external
    ext_cap = rng.uniform(0.5, 2.0, E)
    ext_dem = rng.uniform(0.02, 0.5, (N, E)) * (rng.random((N, E)) > 0.2)
    scope = None
    if E and scoped:
        scope = rng.random((E, K)) > 0.5
        scope[np.arange(E), rng.integers(0, K, E)] = True
    inst = Instance.from_arrays(capacity=cap, demand=dem, weight=w, eligible=elig,
                                external_capacity=ext_cap if E else None,
                                external_demand=ext_dem if E else None, external_scope=scope,
                                name=name or f"random-{N}x{K}x{R}")
    if limits:
        T = np.where(rng.random(N) < 0.5, rng.uniform(0.2, 1.2, N) * inst.eta, np.inf)
        inst = inst.replace(tasks=T)
    return inst


def _placement(rng: np.random.Generator, can: np.ndarray, placement: bool) -> np.ndarray:
    """Eligibility: everywhere, or a random subset that keeps one server each user can run on."""
    N, K = can.shape
    if not placement:
        return np.ones((N, K), bool)
    elig = rng.random((N, K)) > 0.4
    for n in range(N):
        if not (elig[n] & can[n]).any():
            elig[n, rng.choice(np.flatnonzero(can[n]))] = True
    return elig
