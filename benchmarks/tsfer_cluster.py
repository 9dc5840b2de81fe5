"""[TSFER] §6.3, Figs. 5–10: the 20-server cluster of Table 5 under indivisible tasks.

One synthetic Alibaba-like workload (``alibaba_workload(seed=0, days=14)``: two weeks of diurnal
arrivals, GPU/CPU/memory tasks, bandwidth from CPU; then no new jobs) runs under online TSF-ER
(Algorithm 2) and under MNW and CRU rounded down plus random filling, for reallocation slots from one
hour to two weeks (suspend/resume overhead 250 ms). Outputs, as in the paper:

- Fig. 5: tasks arrived per hour;
- Figs. 6–7: hourly utilization and waiting tasks over time with a 1-hour slot;
- Figs. 8–10: mean JCT factor, time-averaged MIN-EF-SAT and MIN-SI-SAT against the slot length.

Writes ``tsfer_cluster.csv`` (one row per mechanism × slot), ``tsfer_cluster_timeline.csv`` (the
1-hour-slot timelines), ``tsfer_cluster.md`` and ``tsfer_cluster.png``.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

NAME = "tsfer_cluster"
DESCRIPTION = ("[TSFER] §6.3 Figs. 5-10: 20-server cluster (Table 5), online TSF-ER vs rounded MNW/CRU: "
               "utilization, queue, JCT factor, MIN-EF-SAT, MIN-SI-SAT vs reallocation slot")
MECHANISMS = ["tsf-er-online", "mnw", "cru"]
LABELS = {"tsf-er-online": "TSF-ER", "mnw": "MNW", "cru": "CRU"}
HOUR, DAY = 3600.0, 86400.0
SLOTS_FULL = [HOUR, 4 * HOUR, 12 * HOUR, DAY, 7 * DAY, 14 * DAY]
SLOTS_QUICK = [HOUR, 6 * HOUR]


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    from fairalloc.simulate import alibaba_workload, simulate_online

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    days = 0.25 if quick else 14.0
    wl = alibaba_workload(seed=0, days=days)
    slots = SLOTS_QUICK if quick else SLOTS_FULL
    rows, timelines = [], []
    for slot, mech in tqdm([(s, m) for s in slots for m in MECHANISMS], desc="§6.3", unit="run"):
        r = simulate_online(wl, mech, slot=slot, overhead=0.25, sample=HOUR, seed=0)
        s = r.summary()
        tl = r.timeline
        window = tl[tl.end <= days * DAY + 1e-9]  # while jobs still arrive
        rows.append({"mechanism": mech, "slot": slot, **{k: s[k] for k in (
            "status", "finished", "mean_jct_factor", "median_jct_factor", "mean_jct", "makespan",
            "utilization", "queue", "min_ef_sat", "min_si_sat", "reallocations", "solves", "seconds")},
            "utilization_arrivals": float(np.average(window.utilization, weights=window.end - window.start)),
            "queue_end_of_arrivals": float(window["queue"].iloc[-1]) if len(window) else float("nan"),
            "max_overuse": r.stats["max_overuse"], "liveness_fills": r.stats.get("liveness_fills", 0)})
        if slot == HOUR:
            timelines.append(tl.assign(mechanism=mech))
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{NAME}.csv", index=False)
    timeline = pd.concat(timelines, ignore_index=True)
    timeline.to_csv(out / f"{NAME}_timeline.csv", index=False)
    arrivals = wl.frame()[["arrival", "tasks"]]
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}_timeline.csv", f"{NAME}.md", f"{NAME}.png"],
            **report(df, timeline, arrivals, wl, out, quick)}


def report(df: pd.DataFrame, timeline: pd.DataFrame, arrivals: pd.DataFrame, wl: Any,
           out: pathlib.Path, quick: bool) -> dict[str, Any]:
    days = float(wl.info["days"])
    hourly = df[df.slot == HOUR].set_index("mechanism")
    base = hourly.loc["tsf-er-online", "utilization_arrivals"]
    worse = {m: 100 * (1 - hourly.loc[m, "utilization_arrivals"] / base) for m in ("mnw", "cru")}
    lines = [
        f"# [TSFER] §6.3 — 20 servers, indivisible tasks ({'quick' if quick else 'full'} run)", "",
        f"Workload `alibaba_workload(seed=0, days={days:g})`: {wl.n_jobs} jobs, {int(wl.tasks.sum())} "
        f"tasks arriving over {days:g} days (diurnal), on the 20 servers of Table 5 (1632 cores, 9728 GB, "
        "82 GPUs) and a 1.5 GHz link; overhead 250 ms per suspended task. TSF-ER = Algorithm 2; MNW, "
        "CRU = fluid allocation rounded down plus random filling upon job arrivals and departures.", "",
        "| mechanism | slot | mean JCT factor | MIN-EF-SAT | MIN-SI-SAT | utilization (arrival window) | "
        "mean waiting tasks | waiting tasks when arrivals stop | makespan (days) | solves |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append(f"| {LABELS[r.mechanism]} | {_slot(r.slot)} | {r.mean_jct_factor:.3f} | "
                     f"{r.min_ef_sat:.3f} | {r.min_si_sat:.3f} | {r.utilization_arrivals:.3f} | "
                     f"{r.queue:.0f} | {r.queue_end_of_arrivals:.0f} | {r.makespan / DAY:.1f} | "
                     f"{int(r.solves)} |")
    lines += ["", f"With a 1-hour slot, utilization while jobs arrive is {worse['mnw']:.0f} % (MNW) and "
              f"{worse['cru']:.0f} % (CRU) below TSF-ER's (the paper: throughput 35 % and 11 % worse). "
              "No run over-allocated a server or the link (the largest of (used − capacity)/capacity "
              f"seen at any event: {df.max_overuse.max():.1e}). MIN-EF-SAT and MIN-SI-SAT are the state "
              "at the end of each hour; with whole tasks they are mostly 0 (some job present runs no "
              "task: a new arrival still waiting) or close to 1, so their averages measure how often a "
              "job is left with nothing.", "",
              f"![Figs. 5-10]({NAME}.png)", "", *EXPLANATION, ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))
    _plot(df, timeline, arrivals, days, out / f"{NAME}.png")
    return {"utilization_below_tsfer": worse}


def _slot(s: float) -> str:
    for unit, v in (("w", 7 * DAY), ("d", DAY), ("h", HOUR)):
        if s >= v and s % v == 0:
            return f"{s / v:g} {unit}"
    return f"{s:g} s"


def _plot(df: pd.DataFrame, timeline: pd.DataFrame, arrivals: pd.DataFrame, days: float,
          path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    ax = axes[0, 0]
    h = np.floor(arrivals.arrival / HOUR).astype(int)
    per_hour = np.bincount(h, weights=arrivals.tasks, minlength=int(np.ceil(days * 24)))
    ax.bar(np.arange(per_hour.size) / 24, per_hour, width=1 / 24, align="edge", color="grey")
    ax.set(title="Fig. 5: tasks arrived per hour", xlabel="time (days)")
    for ax, col, title in ((axes[0, 1], "utilization", "Fig. 6: utilization (hourly mean), slot 1 h"),
                           (axes[0, 2], "queue", "Fig. 7: waiting tasks, slot 1 h")):
        for m in MECHANISMS:
            t = timeline[timeline.mechanism == m]
            ax.plot(t.start / DAY, t[col], lw=0.8, label=LABELS[m])
        ax.axvline(days, color="k", lw=0.6, ls=":")
        ax.set(title=title, xlabel="time (days)")
    for ax, col, title in ((axes[1, 0], "mean_jct_factor", "Fig. 8: mean JCT factor"),
                           (axes[1, 1], "min_ef_sat", "Fig. 9: average MIN-EF-SAT"),
                           (axes[1, 2], "min_si_sat", "Fig. 10: average MIN-SI-SAT")):
        for m in MECHANISMS:
            d = df[df.mechanism == m].sort_values("slot")
            ax.semilogx(d.slot / HOUR, d[col], "o-", label=LABELS[m])
        slots = sorted(df.slot.unique())
        ax.set_xticks([s / HOUR for s in slots], [_slot(s) for s in slots])
        ax.minorticks_off()
        ax.set(title=title, xlabel="reallocation slot", ylim=(0, 1.02))
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 1].legend()
    axes[1, 0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


EXPLANATION = [
    "## Reading it against the paper",
    "",
    "- The workload is synthetic (module `fairalloc.simulate.generators`: diurnal Poisson arrivals, "
    "tasks per job, log-normal durations, PAI-like CPU/GPU/memory requests; offered load ≈ 0.77 of the "
    "GPUs and 0.7 of the link on average). The paper's 4 % sample of the Alibaba trace is not "
    "available, so absolute levels are not comparable; the comparison between policies on the same "
    "jobs is.",
    "- MIN-EF-SAT and MIN-SI-SAT are computed at the end of every hour among the jobs present, "
    "with each job's utility capped at its unfinished tasks ([TSFER] §6.3), and averaged over the "
    "time some job is present.",
    "- The baselines solve their fluid allocation once per Reallocation (cached per set of jobs); "
    "with long slots they spend most of the time random-filling, the regime the paper describes for "
    "a 2-week slot.",
]
