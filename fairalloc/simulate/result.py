r"""What a simulation returns: per-job completion times and metrics over time, as DataFrames.

**JCT factor** ([TSFER] §6.2): a job's standalone JCT (its JCT with every server and the whole link to
itself) divided by its JCT; at most 1, larger is better. Standalone JCTs:

- fluid model: ``tasks · duration / η`` (the job runs at rate ``η``, [TSFER] (6); with
  ``task_limits=True`` at rate ``min(η, tasks)``);
- indivisible model: ``⌈tasks / k⌉ · duration`` where ``k`` is how many of its tasks Algorithm 2's
  best-fit placement fits on the empty cluster at once (waves of ``k`` tasks).

**Timeline** (one row per interval ``[start, end)``; fluid: between two events, where everything is
constant; indivisible: sampling bins of ``sample`` seconds): ``users`` present, ``queue`` (waiting
tasks, indivisible only), ``running`` tasks, ``utilization`` (mean over the (server, resource) pairs
with capacity, as :func:`fairalloc.metrics.overall_utilization`), ``util_<resource>`` (aggregate over
servers, and each external resource), ``min_ef_sat`` and ``min_si_sat`` (:mod:`fairalloc.verify.fairness`,
[TSFER] §6.3, SI by [TSFER] Def. 6 among the users present, capped at their unfinished tasks), and
``jct_factor`` (mean over the jobs finished by ``end``). In the indivisible timeline ``users``,
``queue``, ``running`` and the utilizations are time averages over the bin; EF and SI are the state at
the bin's end.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairalloc.status import Status

__all__ = ["SimulationResult", "compare", "plot_comparison"]


def _time_average(df: pd.DataFrame, col: str, mask: pd.Series | None = None) -> float:
    if df.empty or col not in df:
        return float("nan")
    w = (df["end"] - df["start"]).to_numpy(float)
    v = df[col].to_numpy(float)
    ok = np.isfinite(v) & (w > 0)
    if mask is not None:
        ok &= mask.to_numpy(bool)
    return float((v[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else float("nan")


@dataclass
class SimulationResult:
    """One simulation run: ``jobs`` (one row per job), ``timeline`` (metrics over time), ``status``
    (``optimal`` when the run completed; otherwise the status of the solve that stopped it and a
    ``message``), the ``parameters`` it ran with and ``stats`` (events, solves, seconds, the largest
    over-allocation seen, ...)."""

    workload: str
    mechanism: str
    model: str
    status: Status
    jobs: pd.DataFrame
    timeline: pd.DataFrame
    parameters: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status.ok

    @property
    def label(self) -> str:
        return self.mechanism if self.model == "fluid" or self.mechanism == "tsf-er-online" else \
            f"{self.mechanism} (rounded)"

    def summary(self) -> dict[str, Any]:
        """Means of the run: JCT factor over finished jobs; utilization, queue and the time averages
        of MIN-EF-SAT and MIN-SI-SAT over the time some job is present."""
        j, tl = self.jobs, self.timeline
        present = tl["users"] > 0 if "users" in tl else None
        return {
            "workload": self.workload, "mechanism": self.mechanism, "model": self.model,
            "status": self.status.value, "jobs": len(j), "finished": int(j["finish"].notna().sum()),
            "mean_jct_factor": float(j["jct_factor"].mean()),
            "median_jct_factor": float(j["jct_factor"].median()),
            "mean_jct": float(j["jct"].mean()),
            "makespan": float(j["finish"].max()) if j["finish"].notna().any() else float("nan"),
            "utilization": _time_average(tl, "utilization"),
            "queue": _time_average(tl, "queue"),
            "min_ef_sat": _time_average(tl, "min_ef_sat", present),
            "min_si_sat": _time_average(tl, "min_si_sat", present),
            **{k: self.stats[k] for k in ("events", "solves", "reallocations", "seconds")
               if k in self.stats}}

    # ------------------------------------------------------------------ output
    def save(self, folder: str | os.PathLike[str], prefix: str | None = None) -> list[Path]:
        """Write ``<prefix>jobs.csv``, ``<prefix>timeline.csv``, ``<prefix>summary.json`` and a figure."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        pre = f"{prefix}-" if prefix else ""
        paths = [out / f"{pre}jobs.csv", out / f"{pre}timeline.csv", out / f"{pre}summary.json",
                 out / f"{pre}simulation.png"]
        self.jobs.to_csv(paths[0], index=False)
        self.timeline.to_csv(paths[1], index=False)
        doc = {**self.summary(), "message": self.message, "parameters": self.parameters,
               "stats": self.stats}
        paths[2].write_text(json.dumps(doc, indent=2, default=str) + "\n")
        plot_comparison([self], paths[3])
        return paths

    def __repr__(self) -> str:
        s = self.summary()
        return (f"SimulationResult({self.label} on {self.workload!r}, {self.model}: {s['status']}; "
                f"{s['finished']}/{s['jobs']} jobs, mean JCT factor {s['mean_jct_factor']:.4f})")


def compare(results: list[SimulationResult]) -> pd.DataFrame:
    """One row of :meth:`SimulationResult.summary` per run."""
    return pd.DataFrame([r.summary() for r in results])


def plot_comparison(results: list[SimulationResult], path: str | os.PathLike[str] | None = None,
                    hours: bool = True) -> Any:
    """A 2 × 3 figure over time for several runs: utilization, queue (or users present), MIN-EF-SAT,
    MIN-SI-SAT, mean JCT factor of the finished jobs, and the CDF of the JCT factors. Returns the
    matplotlib figure (saved to ``path`` if given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale, unit = (3600.0, "h") if hours else (1.0, "s")
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    queue_col = "queue" if any(r.model == "indivisible" for r in results) else "users"
    panels = [("utilization", "utilization"), (queue_col, "waiting tasks" if queue_col == "queue"
                                               else "users present"),
              ("min_ef_sat", "MIN-EF-SAT"), ("min_si_sat", "MIN-SI-SAT"),
              ("jct_factor", "mean JCT factor (finished jobs)")]
    for ax, (col, title) in zip(axes.flat, panels):
        for r in results:
            tl = r.timeline
            if tl.empty or col not in tl:
                continue
            ax.step(tl["start"] / scale, tl[col], where="post", label=r.label, lw=1)
        ax.set_title(title)
        ax.set_xlabel(f"time ({unit})")
        ax.grid(alpha=0.3)
        if col != queue_col:
            ax.set_ylim(-0.02, 1.02)  # ratios in [0, 1]; no offset notation for 0.99999999
    ax = axes.flat[5]
    for r in results:
        f = np.sort(r.jobs["jct_factor"].dropna().to_numpy())
        if f.size:
            ax.step(f, np.arange(1, f.size + 1) / f.size, where="post", label=r.label)
    ax.set_title("CDF of JCT factor")
    ax.set_xlabel("JCT factor")
    ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    w = results[0].workload if results else ""
    fig.suptitle(f"{w} ({results[0].model if results else ''} model)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return fig
