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

__all__ = ["FAMILIES", "apf_cluster", "random_instance"]

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


# ---------------------------------------------------------------------- [APF] Fig. 5 kind of cluster
APF_SERVER_TYPES = {"t1": (4.0, 12.0), "t2": (8.0, 8.0), "t3": (16.0, 4.0)}  # (GHz, GB) per server
APF_LOCATIONS = {  # servers of each type, storage MB/s, link Mb/s (up, down)
    "L1": ({"t1": 25, "t2": 25, "t3": 25}, 32.0, (100.0, 1000.0)),
    "L2": ({"t1": 25, "t2": 50, "t3": 25}, 100.0, (1000.0, 2000.0)),
    "L3": ({"t1": 25, "t2": 25, "t3": 25}, 32.0, (100.0, 1000.0)),
}
APF_NEIGHBOURS = {"L1": ("L1", "L2"), "L2": ("L1", "L2", "L3"), "L3": ("L2", "L3")}


def apf_cluster(seed: int | np.random.Generator, users_per_location: int = 10, *,
                weights: bool = False, jitter: float = 0.1, name: str | None = None) -> Instance:
    """A cluster of the kind of [APF] Fig. 5 (§6.1), synthesised (the Bitbrain trace is not available).

    Three locations; at each, one resource pool per server type (75/100/75 servers of (4 GHz, 12 GB),
    (8 GHz, 8 GB), (16 GHz, 4 GB), split 25/25/25, 25/50/25, 25/25/25), each pool with its own storage
    device (32 MB/s at L1 and L3, 100 MB/s at L2) and link (100 Mb/s up and 1 Gb/s down at L1 and L3,
    1 Gb/s up and 2 Gb/s down at L2): 9 servers with resources ``cpu, mem, storage, up, down``. Users
    are spread evenly over the locations and may run at their own location or a neighbouring one
    (L1–L2–L3 in a line). Per-task demands are log-uniform — cpu 0.25–4 GHz, mem 0.25–8 GB, storage
    0.1–4 MB/s, up 0.5–20 Mb/s, down 1–50 Mb/s — so dominant resources vary across users and servers,
    as in the VM traces the paper samples. Weights from {1, 2, 3} when ``weights``. Every pool capacity is
    multiplied by ``U(1 − jitter, 1 + jitter)``: with identical storage and links at a location, users
    bound by them would otherwise see exactly proportional pools, a continuum of equilibria in ``x``
    (``jitter=0`` gives the paper's nominal numbers).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    resources = ("cpu", "mem", "storage", "up", "down")
    servers, caps, where = [], [], []
    for loc, (counts, storage, (up, down)) in APF_LOCATIONS.items():
        for typ, count in counts.items():
            ghz, gb = APF_SERVER_TYPES[typ]
            servers.append(f"{loc}-{typ}")
            caps.append([count * ghz, count * gb, storage, up, down])
            where.append(loc)
    caps = [np.asarray(c) * rng.uniform(1 - jitter, 1 + jitter, len(c)) for c in caps]
    lo = np.array([0.25, 0.25, 0.1, 0.5, 1.0])
    hi = np.array([4.0, 8.0, 4.0, 20.0, 50.0])
    users, dem, elig = [], [], []
    for loc in APF_LOCATIONS:
        for k in range(users_per_location):
            users.append(f"{loc}-u{k + 1}")
            dem.append(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            elig.append([w in APF_NEIGHBOURS[loc] for w in where])
    N = len(users)
    w = rng.choice([1.0, 2.0, 3.0], N) if weights else np.ones(N)
    return Instance.from_arrays(capacity=np.array(caps), demand=np.array(dem), weight=w,
                                eligible=np.array(elig), users=users, servers=servers,
                                resources=resources, name=name or f"apf-cluster-{N}")
