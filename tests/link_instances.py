"""Small seeded instances of the scaling benchmark's kind (3 server resources and one link shared by
every server), for tests that compare two solve routes on the same LPs (sifting, interior points)."""

from __future__ import annotations

import numpy as np

from fairalloc.instance import Instance


def link_instance(seed: int, N: int, K: int, limits: bool = False, eligible: bool = False,
                  prefix: str = "link") -> Instance:
    """``N`` users, ``K`` servers; each user demands each resource with probability 0.7 and the link
    with probability 0.8; ``limits``: task limits on about 30 % of the users; ``eligible``: placement
    constraints (each user on about 60 % of the servers, at least one)."""
    rng = np.random.default_rng(seed)
    R = 3
    cap = rng.uniform(0.5, 2.0, (K, R))
    dem = rng.uniform(0.05, 1.0, (N, R)) * (rng.random((N, R)) < 0.7)
    none = ~(dem > 0).any(axis=1)
    dem[none, rng.integers(0, R, none.sum())] = 0.5
    link = rng.uniform(0.02, 0.5, (N, 1)) * (rng.random((N, 1)) < 0.8)
    kw = {}
    if limits:
        kw["tasks"] = np.where(rng.random(N) < 0.3, rng.uniform(0.1, 2.0, N), np.inf)
    if eligible:
        el = rng.random((N, K)) < 0.6
        el[np.arange(N), rng.integers(0, K, N)] = True
        kw["eligible"] = el
    return Instance.from_arrays(capacity=cap, demand=dem, external_capacity=[0.2 * K],
                                external_demand=link, name=f"{prefix}-{seed}", **kw)
