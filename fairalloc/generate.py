"""Random instances for property tests, the property atlas and benchmarks (seeded, documented).

:func:`random_instance` draws capacities ``U(0.5, 2)`` per server resource (a resource is missing,
capacity 0, with probability ``missing``), demands ``U(0.05, 1)`` (a user does not use a resource with
probability 0.3, but always uses at least one server resource), weights from ``{1, 2, 3}``, finite task
limits ``U(0.2, 1.2)·η`` for roughly half of the users, placement constraints that drop each server
with probability 0.4 (keeping at least one server the user can run on), and external resources with
capacity ``U(0.5, 2)`` and demands ``U(0.02, 0.5)``, optionally scoped to a random non-empty server subset.
With ``time_shared=True`` it draws rates ``U(1, 10)`` per (user, server) instead (each zero with probability
0.2, one positive rate per user kept), with the same weights, placement and task limits; the number of
resources, ``missing`` and the external resources (``external``, ``scoped``) do not apply there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairalloc.instance import Instance

__all__ = ["FAMILIES", "apf_bitbrain", "apf_cluster", "four_class_cluster", "from_gavel", "google_jobs",
           "google_jobs_instance", "psdsf_section5", "random_instance"]

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
        inst = Instance.from_arrays(rates=rates, weight=w, eligible=elig, name=name or f"random-ts-{N}x{K}")
        return _task_limits(rng, inst) if limits else inst
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
    return _task_limits(rng, inst) if limits else inst


def _task_limits(rng: np.random.Generator, inst: Instance) -> Instance:
    """Finite task limits ``U(0.2, 1.2)·η`` for roughly half of the users."""
    N = inst.n_users
    return inst.replace(tasks=np.where(rng.random(N) < 0.5, rng.uniform(0.2, 1.2, N) * inst.eta, np.inf))


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
APF_RESOURCES = ("cpu", "mem", "storage", "up", "down")


def _apf_pools(rng: np.random.Generator, jitter: float) -> tuple[list[str], np.ndarray, list[str]]:
    """The nine pools of [APF] Fig. 5 (one per server type and location, named ``L1-t1``…): names, the
    capacity matrix over :data:`APF_RESOURCES` with every entry times ``U(1 − jitter, 1 + jitter)``, and
    each pool's location."""
    servers, caps, where = [], [], []
    for loc, (counts, storage, (up, down)) in APF_LOCATIONS.items():
        for typ, count in counts.items():
            ghz, gb = APF_SERVER_TYPES[typ]
            servers.append(f"{loc}-{typ}")
            caps.append([count * ghz, count * gb, storage, up, down])
            where.append(loc)
    noise = rng.uniform(1 - jitter, 1 + jitter, (len(caps), len(APF_RESOURCES)))
    return servers, np.array(caps) * noise, where


def _apf_expand(servers: list[str], caps: np.ndarray, where: list[str]
                ) -> tuple[list[str], np.ndarray, list[str]]:
    """The 250 servers of the nine pools: each pool of ``m`` servers becomes ``m`` identical servers with
    ``1/m`` of every pool capacity (its cpu and memory are the server type's; the pool's storage device and
    link are shared evenly), named ``L1-t1-01`` …. Pooling them again gives the pools back exactly."""
    names, rows, locs = [], [], []
    for name, cap, loc in zip(servers, caps, where):
        m = APF_LOCATIONS[loc][0][name.split("-")[1]]
        names += [f"{name}-{k + 1:02d}" for k in range(m)]
        rows += [cap / m] * m
        locs += [loc] * m
    return names, np.array(rows), locs


def apf_cluster(seed: int | np.random.Generator, users_per_location: int = 10, *,
                weights: bool = False, jitter: float = 0.1, expand: bool = False,
                name: str | None = None) -> Instance:
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
    (``jitter=0`` gives the paper's nominal numbers). ``expand=True`` lists the 250 servers instead of the
    nine pools (:func:`_apf_expand`; the same draws, so pooling them gives the pooled instance back).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    servers, caps, where = _apf_pools(rng, jitter)
    if expand:
        servers, caps, where = _apf_expand(servers, caps, where)
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
    return Instance.from_arrays(capacity=caps, demand=np.array(dem), weight=w,
                                eligible=np.array(elig), users=users, servers=servers,
                                resources=APF_RESOURCES, name=name or f"apf-cluster-{N}")


# ---------------------------------------------------------------------- [PSDSF] §V / [APF] Fig. 4
FOUR_CLASSES = {  # class: (servers, (cpu, mem) per server, normalised to class A)
    "A": (8, (1.0, 1.0)), "B": (68, (0.5, 0.5)), "C": (33, (0.5, 0.25)), "D": (11, (0.5, 0.75))}
"""The four server classes of [PSDSF] Fig. 5 / [APF] Fig. 4 (120 servers). [APF] Fig. 4 prints the counts of
B, C, D (68, 33, 11), so A has 8; they also follow from [PSDSF] Table III (γ of user 1: 80 on A, 340 on B,
so B has 8.5× as many servers as A) and match the Google cluster's machine mix (Reiss et al. 2011)."""

PSDSF_USERS = {  # [PSDSF] §V: (cpu, mem) per task, weight, eligible classes
    "u1": ((0.1, 0.1), 2.0, "ABCD"),
    "u2": ((2 / 15, 0.2), 2.0, "ABCD"),
    "u3": ((0.2, 0.1), 1.0, "CD"),
    "u4": ((0.2, 0.3), 1.0, "CD"),
}
"""Per-task demands recovered from [PSDSF] Table III (γ per class, pooled over the class's servers): every
entry of the table pins one ratio, which fixes ``u1 = (0.1, 0.1)`` and the memory of ``u2`` (0.2), ``u3``
(0.1, from TSF's C column of Table IV) and ``u4`` (0.3). The rest is bounded only: ``c_u2 ≤ 2/15`` (its γ on
D is 41.25; we take the bound, the closest to the paper's remark that CPU on classes A and B is fully used,
which no ``c_u2`` consistent with Table III allows), ``c_u3 = 0.2`` (C and D), and ``c_u4 ≤ 0.2``;
``c_u4 = 0.2`` is the value for which TSF gives Table IV's C and D columns (58.33, 8.05, 27.5)."""


def four_class_cluster(expand: bool = False) -> tuple[list[str], np.ndarray, list[str]]:
    """Servers, capacities ``(K, 2)`` (cpu, mem) and the class of each server of the four-class cluster.

    ``expand=False`` pools every class into one server (``A``…``D``) holding its total capacity;
    ``expand=True`` lists the 120 servers (``A1``…``D11``). For fluid allocations the two are the same
    instance: identical servers pooled give the same feasible totals, and the per-server mechanisms scale
    every user's γ on a pooled class by the same count, so the VDS order is unchanged.
    """
    names, caps, classes = [], [], []
    for cls, (count, per) in FOUR_CLASSES.items():
        if expand:
            for k in range(count):
                names.append(f"{cls}{k + 1}")
                caps.append(per)
                classes.append(cls)
        else:
            names.append(cls)
            caps.append(tuple(count * c for c in per))
            classes.append(cls)
    return names, np.array(caps, float), classes


def psdsf_section5(users: Sequence[str] | None = None, expand: bool = False) -> Instance:
    """The experiment of [PSDSF] §V (Fig. 5, Tables III–IV): the four-class cluster and four users with
    weights (2, 2, 1, 1), users 3–4 only on classes C–D (see :data:`PSDSF_USERS` for the demands).
    ``users`` keeps a subset (the active users, for churn)."""
    keep = list(users) if users is not None else list(PSDSF_USERS)
    servers, cap, classes = four_class_cluster(expand)
    dem = np.array([PSDSF_USERS[u][0] for u in keep])
    w = np.array([PSDSF_USERS[u][1] for u in keep])
    elig = np.array([[c in PSDSF_USERS[u][2] for c in classes] for u in keep])
    return Instance.from_arrays(capacity=cap, demand=dem, weight=w, eligible=elig, users=keep,
                                servers=servers, resources=("cpu", "mem"),
                                name="psdsf-section5" + ("-120" if expand else ""))


# ---------------------------------------------------------------------- Google-trace-like jobs
GOOGLE_SLOT = 300.0
"""Seconds per reallocation period ([APF] §6.2: the trace reports usage every 5 minutes)."""
GOOGLE_USAGE_LOGNORMAL = (-6.044, 3.705)
"""(μ, σ) of ``ln m``, the dominant usage of a job in class-A machines, fitted so that with the duration
distribution of :func:`google_jobs` 53 % of jobs need fewer than 10 quanta and 5 % more than 10⁴ over a
day ([APF] Fig. 8)."""


def google_jobs(seed: int | np.random.Generator, hours: float = 24.0, arrivals_per_slot: float = 1.6, *,
                latency_share: float = 0.25, ratio_sigma: float = 1.0, max_usage: float = 16.0,
                warmup_hours: float = 24.0) -> pd.DataFrame:
    r"""Jobs of a Google-trace-like workload ([APF] §6.1–6.2), synthesised (the trace cannot be fetched).

    One row per job (one job per user, [APF] footnote 9), with columns

    - ``arrival``: the 5-minute slot it starts in — Poisson(``arrivals_per_slot``) arrivals per slot over
      ``[−warmup, hours)`` so that long jobs are already running at slot 0;
    - ``duration``: active slots — 1 with probability 0.38, more than a day (log-uniform on 289…8640 slots)
      with probability 0.16, otherwise log-uniform on 2…288 ([APF] Fig. 8: 38 % of jobs complete within
      one period, 16 % are active for more than 24 hours);
    - ``usage``: ``m_n = max_r d_{n,r}``, the job's dominant usage in class-A machines (sum over its
      tasks), log-normal with :data:`GOOGLE_USAGE_LOGNORMAL`, capped at ``max_usage``; a job needs
      ``q_n = 300·m_n`` execution quanta per slot ([APF] §6.2);
    - ``cpu``, ``mem``: its demand ``d_n`` (max component ``m_n``), with ``ln(cpu/mem) ~ N(0, ratio_sigma²)``
      (Google's memory-to-CPU ratios span about two orders of magnitude: σ ≈ 1);
    - ``latency_sensitive``: scheduling classes 2–3 (group U2, allowed on classes C–D), probability
      ``latency_share`` (an assumption: the papers do not give the split).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    per_hour = 3600.0 / GOOGLE_SLOT
    first, last = -round(warmup_hours * per_hour), round(hours * per_hour)
    counts = rng.poisson(arrivals_per_slot, last - first)
    arrival = np.repeat(np.arange(first, last), counts)
    J = arrival.size
    u = rng.random(J)
    short = np.floor(np.exp(rng.uniform(np.log(2), np.log(289), J)))
    long = np.floor(np.exp(rng.uniform(np.log(289), np.log(8641), J)))
    duration = np.where(u < 0.38, 1.0, np.where(u >= 0.84, long, short)).astype(int)
    mu, sigma = GOOGLE_USAGE_LOGNORMAL
    usage = np.minimum(np.exp(rng.normal(mu, sigma, J)), max_usage)
    ratio = np.exp(rng.normal(0.0, ratio_sigma, J))  # cpu / mem
    top = np.maximum(ratio, 1.0)
    frame = pd.DataFrame({
        "job": [f"j{k + 1}" for k in range(J)], "arrival": arrival, "duration": duration,
        "usage": usage, "cpu": usage * ratio / top, "mem": usage / top,
        "latency_sensitive": rng.random(J) < latency_share})
    return frame[frame.arrival + frame.duration > 0].reset_index(drop=True)


def google_jobs_instance(jobs: pd.DataFrame, expand: bool = False, name: str | None = None) -> Instance:
    """The [APF] Fig. 4 cluster serving ``jobs`` (rows of :func:`google_jobs`): demands ``d̃_n = d_n/m_n``
    (the normalised demand, one quantum per task-second), equal weights, jobs of U1 only on classes A–B,
    latency-sensitive ones (U2) everywhere."""
    servers, cap, classes = four_class_cluster(expand)
    dem = jobs[["cpu", "mem"]].to_numpy(float)
    dem = dem / dem.max(axis=1, keepdims=True)
    public = np.array([c in "AB" for c in classes])
    elig = public[None, :] | jobs["latency_sensitive"].to_numpy(bool)[:, None]
    return Instance.from_arrays(capacity=cap, demand=dem, eligible=elig, users=list(jobs["job"]),
                                servers=servers, resources=("cpu", "mem"),
                                name=name or f"google-{len(jobs)}")


# ---------------------------------------------------------------------- Bitbrain-like VMs on [APF] Fig. 5
def apf_bitbrain(seed: int | np.random.Generator, n_users: int = 30, heterogeneity: float = 1.0, *,
                 jitter: float = 0.1, expand: bool = False, name: str | None = None) -> Instance:
    r"""The [APF] Fig. 5 data centre serving ``n_users`` VMs whose demands are balanced against it.

    Servers as :func:`apf_cluster` (nine pools: three server types at three locations, each pool with its
    own storage device and link; every capacity times ``U(1 − jitter, 1 + jitter)``). [APF] §6.1 sizes the
    data centre to the Bitbrain workload ("enough capacity of each resource to meet the maximum overall
    usage"), so here the demands are drawn around the capacity mix instead of on a fixed scale:
    ``d_{n,r} = (C_r/N)·exp(σ z_{n,r})``, ``z ~ N(0, 1)``, ``C_r`` the data centre's total of resource
    ``r`` and ``σ = heterogeneity``. Every mechanism compared here is invariant to scaling one user's
    demand vector, so only these log-ratios matter (a common VM-size factor would change nothing).
    Users are spread evenly over the locations (the first ``N mod 3`` locations get one more) and may run
    at their own location or a neighbouring one. ``expand=True``: the 250 servers instead of the nine pools
    (as :func:`apf_cluster`; the same draws).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    servers, cap, where = _apf_pools(rng, jitter)
    total = cap.sum(axis=0)
    if expand:
        servers, cap, where = _apf_expand(servers, cap, where)
    dem = total / n_users * np.exp(heterogeneity * rng.normal(size=(n_users, len(APF_RESOURCES))))
    locs = list(APF_LOCATIONS)
    home = [locs[k % len(locs)] for k in range(n_users)]
    users = [f"{loc}-u{k + 1}" for k, loc in enumerate(home)]
    elig = np.array([[w in APF_NEIGHBOURS[h] for w in where] for h in home])
    return Instance.from_arrays(capacity=cap, demand=dem, eligible=elig, users=users, servers=servers,
                                resources=APF_RESOURCES, name=name or f"apf-bitbrain-{n_users}")


def from_gavel(throughputs: dict[str, dict[str, float]], scale_factors: dict[str, float] | None = None,
               priority_weights: dict[str, float] | None = None,
               cluster_spec: dict[str, float] | None = None, *, time_cap: bool = True,
               name: str = "gavel") -> Instance:
    r"""A time-shared instance from Gavel's heterogeneity-aware policy inputs (docs/gavel.md).

    Gavel's variables are time fractions :math:`y_{j,k}` of job ``j`` on worker type ``k`` with
    :math:`\sum_j s_j y_{j,k} \le W_k` (``scale_factors`` :math:`s_j`, ``cluster_spec`` :math:`W_k`) and
    the per-job cap :math:`\sum_k y_{j,k} \le 1`. fairalloc's :math:`x_{j,k} = T_{j,k} y_{j,k}` is
    throughput, so the worker-type row is :math:`\sum_j x_{j,k}/\gamma_{j,k} \le 1` with rate
    :math:`\gamma_{j,k} = W_k T_{j,k}/s_j`, and the cap is the budget
    :math:`\sum_k x_{j,k}/T_{j,k} \le 1` (cost :math:`1/T_{j,k}`, limit 1; omitted with
    ``time_cap=False``). Weights are Gavel's priority weights.
    """
    jobs = sorted(throughputs, key=str)
    types = sorted(cluster_spec if cluster_spec is not None else throughputs[jobs[0]], key=str)
    W = np.array([float((cluster_spec or {}).get(k, 1.0)) for k in types])
    T = np.array([[float(throughputs[j].get(k, 0.0)) for k in types] for j in jobs])
    s = np.array([float((scale_factors or {}).get(j, 1.0)) for j in jobs])
    w = np.array([float((priority_weights or {}).get(j, 1.0)) for j in jobs])
    rates = W[None, :] * T / s[:, None]
    with np.errstate(divide="ignore"):
        cost = np.where(T > 0, 1.0 / np.where(T > 0, T, 1.0), 0.0)
    limit = np.ones(len(jobs)) if time_cap else np.full(len(jobs), np.inf)
    return Instance.from_arrays(rates=rates, weight=w, users=[str(j) for j in jobs],
                                servers=[str(k) for k in types], name=name,
                                budget_limit=limit, budget_cost=cost)
