"""Online and fluid simulation of multi-resource allocation over time ([TSFER] §5–§6).

>>> from fairalloc.simulate import google_workload, simulate_fluid, simulate_online
>>> wl = google_workload(seed=1, users=10, rho=0.7, bw=2.0)      # doctest: +SKIP
>>> simulate_fluid(wl, "tsf-er").summary()["mean_jct_factor"]     # doctest: +SKIP
>>> simulate_online(wl, "tsf-er-online", slot=256).jobs          # doctest: +SKIP

- :mod:`~fairalloc.simulate.workload`: :class:`Workload` (a cluster and arriving jobs), its file format;
- :mod:`~fairalloc.simulate.generators`: seeded Google-like and Alibaba-like workloads, the clusters of
  [TSFER] §6.2 and Table 5;
- :mod:`~fairalloc.simulate.fluid`: the fluid model for any divisible mechanism;
- :mod:`~fairalloc.simulate.online`: whole tasks — Algorithm 2 (``tsf-er-online``) and the rounded
  baselines of [TSFER] §6.1;
- :mod:`~fairalloc.simulate.result`: :class:`SimulationResult` (jobs and timeline DataFrames, summary,
  figures).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below are imported on first use: `fairalloc --help` must not load them
    from fairalloc.simulate.result import SimulationResult
    from fairalloc.simulate.workload import Workload

_LAZY = {
    "simulate_fluid": "fluid",
    **dict.fromkeys(["GENERATORS", "alibaba_cluster", "alibaba_workload", "generate", "google_workload",
                     "link_demand", "three_servers"], "generators"),
    "simulate_online": "online", "standalone_concurrency": "online",
    **dict.fromkeys(["SimulationResult", "compare", "plot_comparison"], "result"),
    **dict.fromkeys(["Workload", "WorkloadError", "load_workload", "parse_workload"], "workload"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GENERATORS",
    "SimulationResult",
    "Workload",
    "WorkloadError",
    "alibaba_cluster",
    "alibaba_workload",
    "compare",
    "generate",
    "google_workload",
    "link_demand",
    "load_workload",
    "parse_workload",
    "plot_comparison",
    "simulate",
    "simulate_fluid",
    "simulate_online",
    "standalone_concurrency",
    "three_servers",
]


def simulate(workload: Workload, mechanism: str, model: str = "fluid", **kw) -> SimulationResult:  # type: ignore[no-untyped-def]
    """:func:`simulate_fluid` (``model="fluid"``) or :func:`simulate_online` (``"indivisible"``)."""
    from fairalloc.simulate.fluid import simulate_fluid
    from fairalloc.simulate.online import simulate_online
    from fairalloc.simulate.workload import WorkloadError

    if model == "fluid":
        return simulate_fluid(workload, mechanism, **kw)
    if model == "indivisible":
        return simulate_online(workload, mechanism, **kw)
    raise WorkloadError(f"model = {model!r}: expected fluid or indivisible")
