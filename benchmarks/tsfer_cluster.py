"""[TSFER] §6.3, Figs. 5–10: the 20-server cluster of Table 5 under indivisible tasks.

Synthetic Alibaba-like workloads (``alibaba_workload(seed=0, days=14, jobs_per_hour=…)``: two weeks of
diurnal arrivals of GPU/CPU/memory tasks, bandwidth from CPU; then no new jobs) run under online TSF-ER
(Algorithm 2) and under MNW and CRU rounded down plus random filling (suspend/resume overhead 250 ms),
at two loads:

- *moderate* (25 jobs/h; offered load ≈ 0.8 of the GPUs, 0.7 of the link), for reallocation slots from
  one hour to two weeks;
- *heavy* (35 jobs/h; ≈ 0.95 of the GPUs and of the link), with a one-hour slot.

Outputs, as in the paper: Fig. 5 (tasks arrived per hour), Figs. 6–7 (hourly utilization and waiting
tasks over time, slot 1 h, both loads), Figs. 8–10 (mean JCT factor, time-averaged MIN-EF-SAT and
MIN-SI-SAT against the slot, moderate load). Writes ``tsfer_cluster.csv`` (one row per load × mechanism ×
slot), ``tsfer_cluster_timeline.csv`` (the 1-hour-slot timelines), ``tsfer_cluster.md`` and
``tsfer_cluster.png``.
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
LOADS = {"moderate": 25.0, "heavy": 35.0}  # jobs per hour
SLOTS_FULL = {"moderate": [HOUR, 4 * HOUR, 12 * HOUR, DAY, 7 * DAY, 14 * DAY], "heavy": [HOUR]}
SLOTS_QUICK = {"moderate": [HOUR, 6 * HOUR]}


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    from fairalloc.simulate import alibaba_workload, simulate_online

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    days = 0.25 if quick else 14.0
    plan = SLOTS_QUICK if quick else SLOTS_FULL
    workloads = {load: alibaba_workload(seed=0, days=days, jobs_per_hour=LOADS[load]) for load in plan}
    rows, timelines = [], []
    todo = [(load, s, m) for load, slots in plan.items() for s in slots for m in MECHANISMS]
    for load, slot, mech in tqdm(todo, desc="§6.3", unit="run"):
        r = simulate_online(workloads[load], mech, slot=slot, overhead=0.25, sample=HOUR, seed=0)
        s = r.summary()
        tl = r.timeline
        window = tl[tl.end <= days * DAY + 1e-9]  # while jobs still arrive
        rows.append({"load": load, "jobs_per_hour": LOADS[load], "mechanism": mech, "slot": slot,
                     **{k: s[k] for k in ("status", "finished", "mean_jct_factor", "median_jct_factor",
                                          "mean_jct", "makespan", "utilization", "queue", "min_ef_sat",
                                          "min_si_sat", "reallocations", "solves", "seconds")},
                     "utilization_arrivals": float(np.average(window.utilization,
                                                              weights=window.end - window.start)),
                     "queue_end_of_arrivals": float(window["queue"].iloc[-1]) if len(window) else
                     float("nan"),
                     "max_overuse": r.stats["max_overuse"],
                     "liveness_fills": r.stats.get("liveness_fills", 0)})
        if slot == HOUR:
            timelines.append(tl.assign(load=load, mechanism=mech))
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{NAME}.csv", index=False)
    timeline = pd.concat(timelines, ignore_index=True)
    timeline.to_csv(out / f"{NAME}_timeline.csv", index=False)
    arrivals = {load: wl.frame()[["arrival", "tasks"]] for load, wl in workloads.items()}
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}_timeline.csv", f"{NAME}.md", f"{NAME}.png"],
            **report(df, timeline, arrivals, workloads, out, quick)}


def offered_load(wl: Any) -> dict[str, float]:
    """Task-seconds × per-task demand over capacity × arrival window, per resource (incl. the link)."""
    f = wl.frame()
    span = float(wl.info["days"]) * DAY
    caps = dict(zip(wl.instance.all_resources, wl.instance.total_capacity))
    return {r: float((f[r] * f["work"]).sum() / span / c) for r, c in caps.items()}


def report(df: pd.DataFrame, timeline: pd.DataFrame, arrivals: dict[str, pd.DataFrame],
           workloads: dict[str, Any], out: pathlib.Path, quick: bool) -> dict[str, Any]:
    worse: dict[str, dict[str, float]] = {}
    lines = [f"# [TSFER] §6.3 — 20 servers, indivisible tasks ({'quick' if quick else 'full'} run)", "",
             "The 20 servers of Table 5 (1632 cores, 9728 GB, 82 GPUs) and a 1.5 GHz link; overhead "
             "250 ms per suspended task. TSF-ER = Algorithm 2 (`tsf-er-online`); MNW, CRU = fluid "
             "allocation rounded down at each Reallocation plus random filling upon job arrivals and "
             "departures. MIN-EF-SAT / MIN-SI-SAT: time averages of the state at the end of each hour.",
             ""]
    for load, wl in workloads.items():
        d = df[df.load == load]
        hourly = d[d.slot == HOUR].set_index("mechanism")
        base = hourly.loc["tsf-er-online", "utilization_arrivals"]
        worse[load] = {m: 100 * (1 - hourly.loc[m, "utilization_arrivals"] / base) for m in ("mnw", "cru")}
        ol = offered_load(wl)
        days = float(wl.info["days"])
        lines += [f"## {load.capitalize()} load: `alibaba_workload(seed=0, days={days:g}, "
                  f"jobs_per_hour={LOADS[load]:g})`", "",
                  f"{wl.n_jobs} jobs, {int(wl.tasks.sum())} tasks over {days:g} days; offered load "
                  + ", ".join(f"{r} {v:.2f}" for r, v in ol.items()) + ".", "",
                  "| mechanism | slot | mean JCT factor | MIN-EF-SAT | MIN-SI-SAT | utilization while jobs "
                  "arrive | mean waiting tasks | waiting when arrivals stop | makespan (days) | solves |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in d.iterrows():
            lines.append(f"| {LABELS[r.mechanism]} | {_slot(r.slot)} | {r.mean_jct_factor:.3f} | "
                         f"{r.min_ef_sat:.3f} | {r.min_si_sat:.3f} | {r.utilization_arrivals:.3f} | "
                         f"{r.queue:.0f} | {r.queue_end_of_arrivals:.0f} | {r.makespan / DAY:.1f} | "
                         f"{int(r.solves)} |")
        lines += ["", f"Slot 1 h: utilization while jobs arrive is {worse[load]['mnw']:.0f} % (MNW) and "
                  f"{worse[load]['cru']:.0f} % (CRU) below TSF-ER's (the paper: throughput 35 % and 11 % "
                  "worse).", ""]
    lines += ["No run over-allocated a server or the link (the largest (used − capacity)/capacity seen "
              f"at any event: {df.max_overuse.max():.1e}).", "", f"![Figs. 5-10]({NAME}.png)", "",
              *EXPLANATION, ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))
    _plot(df, timeline, arrivals, workloads, out / f"{NAME}.png")
    return {"utilization_below_tsfer": worse}


def _slot(s: float) -> str:
    for unit, v in (("w", 7 * DAY), ("d", DAY), ("h", HOUR)):
        if s >= v and s % v == 0:
            return f"{s / v:g} {unit}"
    return f"{s:g} s"


def _plot(df: pd.DataFrame, timeline: pd.DataFrame, arrivals: dict[str, pd.DataFrame],
          workloads: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = list(workloads)
    fig, axes = plt.subplots(len(loads) + 1, 3, figsize=(16, 4 * (len(loads) + 1)), squeeze=False)
    for row, load in enumerate(loads):
        days = float(workloads[load].info["days"])
        a = arrivals[load]
        ax = axes[row, 0]
        h = np.floor(a.arrival / HOUR).astype(int)
        per_hour = np.bincount(h, weights=a.tasks, minlength=int(np.ceil(days * 24)))
        ax.bar(np.arange(per_hour.size) / 24, per_hour, width=1 / 24, align="edge", color="grey")
        ax.set(title=f"Fig. 5 ({load}): tasks arrived per hour", xlabel="time (days)")
        for ax, col, title in ((axes[row, 1], "utilization", "Fig. 6: utilization (hourly mean)"),
                               (axes[row, 2], "queue", "Fig. 7: waiting tasks")):
            for m in MECHANISMS:
                t = timeline[(timeline.mechanism == m) & (timeline.load == load)]
                ax.plot(t.start / DAY, t[col], lw=0.8, label=LABELS[m])
            ax.axvline(days, color="k", lw=0.6, ls=":")
            ax.set(title=f"{title}, {load} load, slot 1 h", xlabel="time (days)")
        axes[row, 1].legend()
    d0 = df[df.load == loads[0]]
    for ax, col, title in ((axes[-1, 0], "mean_jct_factor", "Fig. 8: mean JCT factor"),
                           (axes[-1, 1], "min_ef_sat", "Fig. 9: average MIN-EF-SAT"),
                           (axes[-1, 2], "min_si_sat", "Fig. 10: average MIN-SI-SAT")):
        for m in MECHANISMS:
            d = d0[d0.mechanism == m].sort_values("slot")
            ax.semilogx(d.slot / HOUR, d[col], "o-", label=LABELS[m])
        slots = sorted(d0.slot.unique())
        ax.set_xticks([s / HOUR for s in slots], [_slot(s) for s in slots])
        ax.minorticks_off()
        ax.set(title=f"{title} ({loads[0]} load)", xlabel="reallocation slot", ylim=(0, 1.02))
    axes[-1, 0].legend()
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


EXPLANATION = [
    "## Reading it against the paper",
    "",
    "- **Same ranking in every measure and at every slot length**: online TSF-ER has the highest mean "
    "JCT factor (Fig. 8), MIN-EF-SAT (Fig. 9) and MIN-SI-SAT (Fig. 10) and the shortest queues "
    "(Fig. 7). The paper expects the baselines to do better with shorter slots; rounded CRU does "
    "(mean JCT factor 0.704 with 1-hour slots, 0.65 from 1 day on), rounded MNW does not (0.608 with "
    "1-hour slots, 0.64–0.65 otherwise): each Reallocation suspends everything and MNW's rounding, "
    "spread over servers, runs less than the random filling it replaces. With slots of a week or "
    "more both are almost pure random filling (one or two solves in the whole run) and coincide.",
    "- **Throughput while jobs arrive differs by only 2–3 %, not 35 % and 11 %.** Jobs arrive and "
    "leave often here (25–35 per hour), and each arrival or departure triggers the baselines' random "
    "filling, which keeps the servers busy; the cost shows as waiting instead. At the heavy load the "
    "baselines' queues drain much later (Fig. 7): when the arrivals stop, 928 tasks wait under rounded "
    "MNW and 808 under rounded CRU against 457 under TSF-ER; jobs whose fluid share is below one task on "
    "every server get nothing from the rounding and wait for a random fill. Rounded CRU drains in 17.9 "
    "days, close to TSF-ER's 17.1; rounded MNW needs 26.6 (utilization near 0 for days, Fig. 6). That is "
    "the paper's \"fail to stabilize the waiting queue\" for MNW; for CRU it is only a longer queue, not a "
    "queue that fails to drain. The jitter of the baselines' utilization (Fig. 6) is the paper's "
    "observation too.",
    "- **The workloads are synthetic** (`fairalloc.simulate.generators`): the paper's 4 % sample of "
    "the Alibaba trace is not available, so absolute levels are not comparable, only the policies on "
    "the same jobs. The moderate load is below capacity on average but above it at daily peaks; the "
    "heavy load is ≈ 0.95 of the GPUs and of the link.",
    "- **MIN-EF-SAT and MIN-SI-SAT** are computed among the jobs present, each job's utility capped at "
    "its unfinished tasks ([TSFER] §6.3). With whole tasks they are mostly 0 (some job present runs "
    "no task — a new arrival still waiting) or close to 1, so their averages say how often some job "
    "is left with nothing.",
]
