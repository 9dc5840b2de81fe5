r"""Seeded synthetic workloads for the experiments of [TSFER] §6 (the traces cannot be downloaded here).

**Bandwidth from CPU** ([TSFER] §6.2, after its refs. [54]–[57]). A task's CPU demand ``d_cpu`` is
turned into a bit rate through the computation intensity ``X`` (CPU cycles per bit):
``d_cpu · f_cpu = X · d_bps`` with ``f_cpu = 2.6 GHz``, then into spectrum with the spectral efficiency
3.5 bit/s/Hz: ``d_link = d_bps / 3.5`` (reported in MHz). ``X ~ Gamma(shape 4, scale 200)``: mean 800
cycles/bit. The paper writes "shape and rate parameter 4 and 200"; with *rate* 200 (mean 0.02
cycles/bit) every task would need more than 1 GHz of spectrum, a thousand times the 1–3 MHz links
of §6.2, while with *scale* 200 the 3-server cluster's full CPU needs ≈ 2.8 MHz — exactly the paper's
remark that links above 3 MHz make the bandwidth irrelevant. A normalised CPU unit of the Google trace
counts as one 2.6 GHz core, as the paper's formula does. Draws of ``X`` that would make one task need
more than ``max_link`` MHz are redrawn (a truncated Gamma), so that every task fits the smallest link of
an experiment on its own (without it, ~1 % of the Google-like tasks could never run on a 1 MHz link).

**Google-like jobs** (:func:`google_jobs`, [TSFER] §6.2). The paper samples users from the first 1000
job submissions of the Google cluster trace, which span the first 48 hours and have 1 to 2854 tasks per
job and 15 s to 28 days per task; demands are normalised to the largest machine (= 1). Synthesised:

- arrivals: a Poisson process conditioned on ``n_jobs`` arrivals in ``hours`` (uniform order statistics);
- tasks per job: 1 with probability 0.5, otherwise ``⌈U⌉`` with ``U`` log-uniform on [1, 2854];
- per-task duration: log-uniform on [15 s, 28 days];
- per-task CPU: log-uniform on [0.005, 0.25]; memory: CPU × a log-normal factor (σ = 0.7), clipped to
  [0.001, 0.5] (memory requests in the trace track CPU requests loosely);
- link: from the CPU demand as above.

**The three-server cluster** of §6.2 (:func:`three_servers`): ``(1, 1)``, ``(1 + ρ, 1 − ρ)``,
``(1 − ρ, 1 + ρ)`` in (CPU, memory), so each resource totals 3, and a link of ``bw`` MHz.
:func:`google_workload` samples ``users`` jobs uniformly from one fixed pool of 1000 Google-like jobs
(``pool_seed``) — as the paper samples from one trace — and shifts time so the first arrives at 0.

**The 20-server cluster** of §6.3, Table 5 (:func:`alibaba_cluster`): 9 × (64 cores, 512 GB, 2 GPUs),
4 × (96, 512, 2), 3 × (96, 512, 8), 4 × (96, 384, 8), and a 1.5 GHz link.

**Alibaba-like jobs** (:func:`alibaba_jobs`, [TSFER] §6.3: a 4 % sample of the first two weeks of the
Alibaba PAI GPU trace; Fig. 5 shows the arrived tasks per hour). Synthesised:

- arrivals: a Poisson process over ``days`` with a diurnal rate ``λ(t) = λ̄ (1 + 0.5 sin(2π t / 1 day))``,
  ``λ̄ = jobs_per_hour``;
- tasks per job: 1 with probability 0.6, otherwise ``⌈U⌉``, ``U`` log-uniform on [1, 64] (distributed
  training jobs have several workers);
- per-task duration: log-normal with median 15 min and σ = 1.5, clipped to [10 s, 3 days];
- per-task CPU cores from {1, 2, 4, 6, 8, 12, 16} (probabilities .1, .15, .2, .15, .2, .1, .1); memory
  ``cores × U(2, 8)`` GB; GPUs: none with probability 0.3, else from {0.25, 0.5, 1, 2} (probabilities
  .35, .3, .25, .1) — PAI tasks often share a GPU;
- link: from the cores as above (``max_link`` 100 MHz).

With the default ``jobs_per_hour = 25`` the offered load (task-seconds × demand over capacity × time)
is about 0.8 of the cluster's 82 GPUs, 0.7 of the 1.5 GHz link and 0.5 of its 1632 cores on average
(seed 0, 14 days: 0.83, 0.70, 0.51), and half as much again at the diurnal peak; heavy-tailed job
sizes make single days vary much more. 35 jobs/h brings the GPUs and the link to ≈ 0.95: there the
scheduler's packing decides whether the queue stays stable (the effect of [TSFER] Fig. 7).

Every generator takes a ``seed`` (an int or a ``numpy.random.Generator``) and returns the same workload
for the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairalloc.instance import Instance
from fairalloc.registry import Param, as_float, as_int
from fairalloc.simulate.workload import Workload, WorkloadError

__all__ = ["GENERATORS", "alibaba_cluster", "alibaba_jobs", "alibaba_workload", "generate",
           "google_jobs", "google_workload", "link_demand", "three_servers"]

CPU_HZ = 2.6e9  # f_cpu
BITS_PER_HZ = 3.5  # bit/s/Hz
GAMMA_SHAPE, GAMMA_SCALE = 4.0, 200.0  # computation intensity X, cycles per bit
DAY = 86400.0

ALIBABA_SERVERS = [  # Table 5: (cores, GB, GPUs, count)
    (64, 512, 2, 9), (96, 512, 2, 4), (96, 512, 8, 3), (96, 384, 8, 4)]


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, size: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size))


def link_demand(cpu: np.ndarray, seed: int | np.random.Generator, max_link: float | None = None
                ) -> np.ndarray:
    """Spectrum (MHz) per task from its CPU demand: ``cpu · 2.6 GHz / X / 3.5`` with ``X ~ Gamma(4,
    scale 200)`` cycles/bit, redrawn where the result would exceed ``max_link`` MHz."""
    rng = _rng(seed)
    cpu = np.asarray(cpu, float)
    x = rng.gamma(GAMMA_SHAPE, GAMMA_SCALE, cpu.shape)
    mhz = lambda x: cpu * CPU_HZ / x / BITS_PER_HZ / 1e6  # noqa: E731
    if max_link is not None:
        for _ in range(1000):
            bad = mhz(x) > max_link
            if not bad.any():
                break
            x[bad] = rng.gamma(GAMMA_SHAPE, GAMMA_SCALE, int(bad.sum()))
        else:  # pragma: no cover - needs cpu so large that X must be far in the tail
            raise WorkloadError(f"max_link = {max_link}: too small for a CPU demand of {cpu.max()}")
    return mhz(x)


def three_servers(rho: float = 0.7, bw: float = 2.0) -> dict[str, Any]:
    """[TSFER] §6.2's servers ``(1,1), (1+ρ,1−ρ), (1−ρ,1+ρ)`` (CPU, memory) and a ``bw`` MHz link."""
    if not 0 <= rho < 1:
        raise WorkloadError(f"rho = {rho!r}: must be in [0, 1)")
    if not bw > 0:
        raise WorkloadError(f"bw = {bw!r}: must be > 0 (MHz)")
    return {"servers": ("s1", "s2", "s3"), "resources": ("cpu", "mem"),
            "capacity": np.array([[1.0, 1.0], [1 + rho, 1 - rho], [1 - rho, 1 + rho]]),
            "external": ("link",), "external_capacity": np.array([float(bw)])}


def alibaba_cluster(bw: float = 1500.0) -> dict[str, Any]:
    """[TSFER] Table 5: 20 servers (cores, GB, GPUs) and a ``bw`` MHz link (1.5 GHz)."""
    caps, names = [], []
    for k, (cores, gb, gpus, count) in enumerate(ALIBABA_SERVERS):
        for c in range(count):
            caps.append([cores, gb, gpus])
            names.append(f"t{k + 1}-{c + 1}")
    return {"servers": tuple(names), "resources": ("cpu", "mem", "gpu"), "capacity": np.array(
        caps, float), "external": ("link",), "external_capacity": np.array([float(bw)])}


@dataclass(frozen=True)
class Jobs:
    """Jobs without a cluster: arrival, tasks, duration, per-task demands (``columns`` order)."""

    arrival: np.ndarray
    tasks: np.ndarray
    duration: np.ndarray
    demand: np.ndarray  # (N, len(columns))
    columns: tuple[str, ...]

    def take(self, idx: np.ndarray) -> Jobs:
        return Jobs(self.arrival[idx], self.tasks[idx], self.duration[idx], self.demand[idx],
                    self.columns)


def google_jobs(seed: int | np.random.Generator, n_jobs: int = 1000, hours: float = 48.0,
                max_link: float | None = 0.5) -> Jobs:
    """``n_jobs`` Google-like jobs (module docstring); demand columns ``cpu, mem, link``."""
    rng = _rng(seed)
    arrival = np.sort(rng.uniform(0, hours * 3600.0, n_jobs))
    many = rng.random(n_jobs) >= 0.5
    tasks = np.where(many, np.ceil(_log_uniform(rng, 1, 2854, n_jobs)), 1.0)
    duration = _log_uniform(rng, 15.0, 28 * DAY, n_jobs)
    cpu = _log_uniform(rng, 0.005, 0.25, n_jobs)
    mem = np.clip(cpu * np.exp(rng.normal(0.0, 0.7, n_jobs)), 0.001, 0.5)
    link = link_demand(cpu, rng, max_link)
    return Jobs(arrival, tasks, duration, np.column_stack([cpu, mem, link]), ("cpu", "mem", "link"))


def alibaba_jobs(seed: int | np.random.Generator, days: float = 14.0, jobs_per_hour: float = 25.0,
                 max_link: float | None = 100.0) -> Jobs:
    """Alibaba-PAI-like jobs over ``days`` (module docstring); demand columns ``cpu, mem, gpu, link``."""
    rng = _rng(seed)
    horizon = days * DAY
    # thinning of a Poisson process with rate ≤ 1.5 λ̄
    lam_max = 1.5 * jobs_per_hour / 3600.0
    cand = np.cumsum(rng.exponential(1 / lam_max, int(lam_max * horizon * 1.3) + 100))
    cand = cand[cand < horizon]
    keep = rng.random(cand.size) < (1 + 0.5 * np.sin(2 * np.pi * cand / DAY)) / 1.5
    arrival = cand[keep]
    N = arrival.size
    many = rng.random(N) >= 0.6
    tasks = np.where(many, np.ceil(_log_uniform(rng, 1, 64, N)), 1.0)
    duration = np.clip(900.0 * np.exp(rng.normal(0.0, 1.5, N)), 10.0, 3 * DAY)
    cores = rng.choice([1, 2, 4, 6, 8, 12, 16], N, p=[.1, .15, .2, .15, .2, .1, .1]).astype(float)
    mem = cores * rng.uniform(2.0, 8.0, N)
    gpu = np.where(rng.random(N) < 0.3, 0.0, rng.choice([0.25, 0.5, 1, 2], N, p=[.35, .3, .25, .1]))
    link = link_demand(cores, rng, max_link)
    return Jobs(arrival, tasks, duration, np.column_stack([cores, mem, gpu, link]),
                ("cpu", "mem", "gpu", "link"))


def _workload(cluster: dict[str, Any], jobs: Jobs, name: str, info: dict[str, Any],
              prefix: str = "j") -> Workload:
    cols = {c: k for k, c in enumerate(jobs.columns)}
    N = jobs.arrival.size
    if N == 0:
        raise WorkloadError(f"{name}: the generator produced no jobs (increase days or jobs_per_hour)")
    demand = np.column_stack([jobs.demand[:, cols[r]] for r in cluster["resources"]])
    ext = np.column_stack([jobs.demand[:, cols[e]] for e in cluster["external"]])
    inst = Instance.from_arrays(capacity=cluster["capacity"], demand=demand, tasks=jobs.tasks,
                                external_capacity=cluster["external_capacity"], external_demand=ext,
                                users=[f"{prefix}{k + 1}" for k in range(N)], servers=cluster["servers"],
                                resources=cluster["resources"], external=cluster["external"], name=name)
    return Workload(inst, jobs.arrival, jobs.duration, info)


def google_workload(seed: int = 0, users: int = 15, rho: float = 0.7, bw: float = 2.0,
                    pool_seed: int = 0, pool: int = 1000, hours: float = 48.0) -> Workload:
    """[TSFER] §6.2: ``users`` jobs sampled (seed ``seed``) from a fixed pool of ``pool`` Google-like
    jobs (seed ``pool_seed``) on the three-server cluster with heterogeneity ``rho`` and a ``bw`` MHz
    link; time shifted so that the first job arrives at 0."""
    if not 1 <= users <= pool:
        raise WorkloadError(f"users = {users!r}: must be between 1 and pool = {pool}")
    jobs = google_jobs(pool_seed, pool, hours)
    idx = np.sort(_rng(seed).choice(pool, users, replace=False))
    picked = jobs.take(idx)
    picked = Jobs(picked.arrival - picked.arrival[0], picked.tasks, picked.duration, picked.demand,
                  picked.columns)
    info = {"generator": "google", "seed": seed, "users": users, "rho": rho, "bw": bw,
            "pool_seed": pool_seed, "pool": pool, "hours": hours, "jobs": [int(k) for k in idx]}
    return _workload(three_servers(rho, bw), picked, f"google-n{users}-rho{rho:g}-bw{bw:g}-s{seed}", info)


def alibaba_workload(seed: int = 0, days: float = 14.0, jobs_per_hour: float = 25.0,
                     bw: float = 1500.0) -> Workload:
    """[TSFER] §6.3: Alibaba-like jobs over ``days`` on the 20 servers of Table 5 with a ``bw`` MHz link."""
    if not days > 0 or not jobs_per_hour > 0:
        raise WorkloadError(f"days = {days!r}, jobs_per_hour = {jobs_per_hour!r}: must be > 0")
    info = {"generator": "alibaba", "seed": seed, "days": days, "jobs_per_hour": jobs_per_hour,
            "bw": bw}
    return _workload(alibaba_cluster(bw), alibaba_jobs(seed, days, jobs_per_hour),
                     f"alibaba-{days:g}d-s{seed}", info)


def _positive(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


GENERATORS: dict[str, tuple[Callable[..., Workload], tuple[Param, ...], str]] = {
    "google": (google_workload, (
        Param("seed", as_int, 0, "which users are sampled from the pool"),
        Param("users", as_int, 15, "jobs sampled (10, 15, 20 in the paper)", _positive),
        Param("rho", as_float, 0.7, "server heterogeneity ρ (0.5, 0.7, 0.9)"),
        Param("bw", as_float, 2.0, "link bandwidth, MHz (1, 2, 3)", _positive),
        Param("pool_seed", as_int, 0, "seed of the 1000-job pool"),
        Param("pool", as_int, 1000, "jobs in the pool", _positive),
        Param("hours", as_float, 48.0, "time span of the pool's arrivals", _positive)),
        "[TSFER] §6.2: Google-like jobs on three servers (1,1), (1+ρ,1−ρ), (1−ρ,1+ρ) and one link"),
    "alibaba": (alibaba_workload, (
        Param("seed", as_int, 0, "random seed"),
        Param("days", as_float, 14.0, "days of arrivals", _positive),
        Param("jobs_per_hour", as_float, 25.0, "mean arrival rate (diurnal)", _positive),
        Param("bw", as_float, 1500.0, "link bandwidth, MHz", _positive)),
        "[TSFER] §6.3: Alibaba-like jobs on the 20 servers of Table 5 and a 1.5 GHz link"),
}


def generate(name: str, **params: Any) -> Workload:
    """A workload from a named generator; ``params`` as strings (CLI) or values."""
    if name not in GENERATORS:
        raise WorkloadError(f"workload {name!r}: no such file or generator (generators: "
                            f"{', '.join(GENERATORS)})")
    fn, spec, _ = GENERATORS[name]
    known = {p.name: p for p in spec}
    for k in params:
        if k not in known:
            raise WorkloadError(f"{name}: unknown generator parameter {k!r} (known: {', '.join(known)})")
    values = {p.name: (p.parse(name, params[p.name]) if p.name in params else p.default) for p in spec}
    return fn(**values)
