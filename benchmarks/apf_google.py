"""[APF] §6.2–6.3 with a Google-trace-like workload on the four-class cluster (Fig. 4): PS-DSF vs DRFH vs
TSF over a day (Figs. 13–14) and αPF-VDS with α ∈ {1, 3, ∞} over an hour (Figs. 9–10, with D_n of (58)).

Workload: :func:`fairalloc.generate.google_jobs` (seeded; duration, quanta and CPU/memory-ratio
distributions calibrated to what [APF] §6 and Fig. 8 report) on the four classes pooled
(:func:`fairalloc.generate.google_jobs_instance`; pooling identical servers changes no fluid allocation) for
the day study, and on the 120 servers themselves (``expand=True``) for the hour study of αPF-VDS and PS-DSF:
jobs of U1 only on classes A–B, latency-sensitive jobs (U2) everywhere, equal weights.

Dynamics, as [APF] §6.2 describes them: every 5-minute slot each active job needs ``q_n = 300·m_n``
execution quanta (``m_n`` its dominant usage), the mechanism allocates ``x_n`` tasks of the normalised
demand ``d̃_n`` (one quantum per task-second), a job that has its quanta leaves for the rest of the slot and
the released resources are reallocated among the others. Reallocations happen at completions, but at
most one per ``min_step`` seconds (jobs finishing inside that window stop at their own completion time,
their share idles until the window ends): this bounds the number of solves per slot (``300/min_step``).

Every mechanism runs through ``fairalloc.solve`` (PS-DSF by its default ``fast`` algorithm; αPF-VDS by
its default semismooth Newton route, retried by the NCP route and best responses when that does not
certify an equilibrium). Utilization is
averaged over the 120 servers (each class weighted by its server count) and over time.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import numpy as np
import pandas as pd

from .apf_bitbrain import allocate

NAME = "apf_google"
DESCRIPTION = ("[APF] Figs. 9-10, 13-14: Google-like jobs on the four-class cluster — PS-DSF vs DRFH vs TSF "
               "over a day, αPF-VDS α = 1, 3, ∞ over an hour (utilization, D_n)")

log = logging.getLogger(__name__)

SLOT = 300.0
FULL_HOURS = 24.0  # [APF] Figs. 13-14 span 24 h
WEIGHTS = {"A": 8, "B": 68, "C": 33, "D": 11}  # servers per class: averages are over servers


def active_jobs(jobs: pd.DataFrame, slot: int) -> pd.DataFrame:
    return jobs[(jobs.arrival <= slot) & (jobs.arrival + jobs.duration > slot)]


def simulate(jobs: pd.DataFrame, mechanism: str, slots: int, min_step: float = 30.0,
             progress: Any = None, expand: bool = False) -> pd.DataFrame:
    """One row per slot: time-averaged utilization per (class, resource), the cluster and classes C–D
    averages over servers, the D_n of (58) (weighted mean, max; time-averaged), solves and failures.
    ``expand``: solve on the 120 servers instead of the four pooled classes."""
    from fairalloc.generate import four_class_cluster, google_jobs_instance
    from fairalloc.metrics import deviation_from_psdsf

    member = np.array([[c == cls for c in four_class_cluster(expand)[2]] for cls in WEIGHTS], float)
    out = []
    for slot in range(slots):
        act = active_jobs(jobs, slot)
        rem = dict(zip(act.job, SLOT * act.usage))
        t, solves, failures = 0.0, 0, 0
        used = np.zeros((4, 2))  # ∫ load dt per class and resource
        dev_mean = dev_max = 0.0
        while t < SLOT - 1e-9:
            live = act[np.array([rem[j] > 1e-12 for j in act.job], bool)]
            if live.empty:
                break
            inst = google_jobs_instance(live, expand=expand)
            x, status = allocate(inst, mechanism)
            solves += 1
            if status not in ("optimal", "converged"):
                failures += 1
                if np.isnan(x).any():  # no allocation at all: nothing runs in this step (counted)
                    x = np.zeros_like(x)
            X = x.sum(axis=1)
            r = live.job.map(rem).to_numpy(float)
            with np.errstate(divide="ignore"):
                tau = np.where(X > 0, r / np.where(X > 0, X, 1.0), np.inf)
            step = min(SLOT - t, max(min_step, float(tau.min())))
            run_time = np.minimum(tau, step)  # a job with its quanta stops at its completion time
            used += member @ np.einsum("n,ni,nr->ir", run_time, x, inst.demand)
            D = deviation_from_psdsf(inst, x)
            dev_mean += step * float(D.mean())
            dev_max += step * float(D.max(initial=0.0))
            for j, done in zip(live.job, X * run_time):
                rem[j] = max(0.0, rem[j] - done)
            t += step
        cap = google_jobs_instance(act.head(1)).capacity if len(act) else np.ones((4, 2))
        util = used / (SLOT * cap)
        row: dict[str, Any] = {"slot": slot, "hour": slot * SLOT / 3600, "mechanism": mechanism,
                               "jobs": len(act), "solves": solves, "failures": failures,
                               "deviation_mean": dev_mean / SLOT, "deviation_max": dev_max / SLOT}
        w = np.array(list(WEIGHTS.values()), float)
        for k, res in enumerate(("cpu", "mem")):
            for c, cls in enumerate(WEIGHTS):
                row[f"{res}_{cls}"] = float(util[c, k])
            row[f"{res}_cluster"] = float(w @ util[:, k] / w.sum())
            row[f"{res}_CD"] = float(w[2:] @ util[2:, k] / w[2:].sum())
        out.append(row)
        if progress is not None:
            progress.update(1)
    return pd.DataFrame(out)


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tqdm import tqdm

    from fairalloc.generate import google_jobs

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if quick:
        jobs = google_jobs(0, hours=0.5, arrivals_per_slot=0.3, warmup_hours=6.0)
        day_slots, hour_slots, min_step = 2, 1, 150.0
    else:
        jobs = google_jobs(0, hours=FULL_HOURS)
        day_slots, hour_slots, min_step = round(FULL_HOURS * 12), 12, 60.0
    frames = []
    # the hour study at the paper's size (120 servers); the day study on the four pooled classes (the same
    # fluid allocations: identical servers pool exactly; 288 slots of LPs on 120 servers cost ~2 s each)
    plan = [(m, day_slots, "day", False) for m in ("ps-dsf", "drfh", "tsf")]
    plan += [(m, hour_slots, "hour", not quick) for m in ("apf-vds α=1", "apf-vds α=3", "ps-dsf")]
    with tqdm(total=sum(p[1] for p in plan), desc="apf_google slots", disable=quick) as bar:
        for mech, slots, study, expand in plan:
            f = simulate(jobs, mech, slots, min_step, bar, expand=expand)
            f["study"] = study
            f["servers"] = 120 if expand else 4
            frames.append(f)
    frame = pd.concat(frames, ignore_index=True)
    frame.to_csv(out / f"{NAME}.csv", index=False)
    day = frame[frame.study == "day"]
    hour_mechs = ["apf-vds α=1", "apf-vds α=3", "ps-dsf"]
    hour = frame[(frame.study == "hour") & frame.mechanism.isin(hour_mechs)]
    cols = ["cpu_cluster", "mem_cluster", "cpu_CD", "mem_CD", "deviation_mean", "deviation_max"]
    day_table = day.groupby("mechanism", sort=False)[cols].mean()
    hour_table = hour.groupby("mechanism", sort=False)[cols].mean().reindex(hour_mechs)
    failures = frame.groupby("mechanism")[["solves", "failures"]].sum()
    _plot(day, hour_table, out / f"{NAME}.png", plt, window=1 if quick else 12)
    _markdown(out / f"{NAME}.md", jobs, day, day_table, hour_table, failures, day_slots, hour_slots,
              min_step, quick)
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "day": day_table,
            "hour": hour_table, "failures": failures}


def _plot(day: pd.DataFrame, hour: pd.DataFrame, path: pathlib.Path, plt: Any, window: int) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    for k, res in enumerate(("cpu", "mem")):
        ax = axes[k]
        for mech, f in day.groupby("mechanism", sort=False):
            ax.plot(f.hour, f[f"{res}_cluster"].rolling(window, min_periods=1).mean(), label=mech)
        ax.set_title(f"{res.upper()} utilization over servers (1 h moving average) — Fig. 13")
        ax.set_xlabel("hour")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    xs = np.arange(4)
    labels = ["CPU", "RAM", "CPU C–D", "RAM C–D"]
    for k, (mech, row) in enumerate(hour.iterrows()):
        vals = row[["cpu_cluster", "mem_cluster", "cpu_CD", "mem_CD"]].to_numpy(float)
        name = "α=∞ (ps-dsf)" if mech == "ps-dsf" else mech.replace("apf-vds ", "")
        ax.bar(xs + (k - 1) * 0.27, vals, 0.27, label=name)
    ax.set_xticks(xs, labels)
    ax.set_ylim(0, 1.05)
    ax.set_title("αPF-VDS over the first hour — Fig. 9")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _markdown(path: pathlib.Path, jobs: pd.DataFrame, day: pd.DataFrame, day_table: pd.DataFrame,
              hour_table: pd.DataFrame, failures: pd.DataFrame, day_slots: int, hour_slots: int,
              min_step: float, quick: bool) -> None:
    jobs_per_slot = day.groupby("slot").jobs.first()
    kind, sizes = ("quick", ", quick sizes") if quick else ("full", "")
    header = ["| mechanism | CPU | RAM | CPU C–D | RAM C–D | mean D_n | max D_n |",
              "|---|---|---|---|---|---|---|"]
    lines = [f"# [APF] Figs. 9–10 and 13–14: Google-like jobs on the four-class cluster ({kind} run)", "",
             f"Workload `fairalloc.generate.google_jobs(0{sizes})`: {len(jobs)} jobs, "
             f"{jobs_per_slot.mean():.0f} active per slot on average (min {jobs_per_slot.min()}, max "
             f"{jobs_per_slot.max()}); reallocation at completions, at most one per {min_step:g} s.", "",
             f"PS-DSF vs DRFH vs TSF over {day_slots * SLOT / 3600:g} h (Figs. 13–14): mean utilization over "
             "the 120 servers and over time, and over classes C–D only; D_n of (58), weighted mean and max "
             "over users, time-averaged (solved on the four classes pooled: identical servers pool exactly "
             "for these fluid allocations):", "", *header]
    for mech, r in day_table.iterrows():
        lines.append(_row(mech, r))
    where = "the four pooled classes" if quick else "the 120 servers (not pooled)"
    lines += ["", f"αPF-VDS over the first {hour_slots * SLOT / 60:g} minutes (Figs. 9–10), solved on "
              f"{where}; the per-server mechanisms group identical servers themselves and check their "
              "certificate on every server:", "",
              header[0].replace("mechanism", "α"), header[1]]
    for mech, r in hour_table.iterrows():
        name = "∞ (ps-dsf)" if mech == "ps-dsf" else mech.split("=")[1]
        lines.append(_row(name, r))
    lines += ["", "Solves per mechanism (and solves whose status was not optimal/converged): " +
              ", ".join(f"{m}: {int(r.solves)} ({int(r.failures)})" for m, r in failures.iterrows()) + ".",
              "", f"![{NAME}]({NAME}.png)", ""]
    path.write_text("\n".join(lines))


def _row(name: str, r: pd.Series) -> str:
    return (f"| {name} | {r.cpu_cluster:.3f} | {r.mem_cluster:.3f} | {r.cpu_CD:.3f} | {r.mem_CD:.3f} | "
            f"{r.deviation_mean:.3f} | {r.deviation_max:.3f} |")
