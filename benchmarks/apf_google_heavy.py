"""[APF] Figs. 13–14 in the heavily loaded regime: the ``apf_google`` experiment after a week of arrivals.

``apf_google`` starts its Google-like workload after one day of arrivals, so only part of the long-running
jobs (16 % of jobs run for more than a day, some for weeks) are present and the cluster is saturated only
part of the time: jobs finish their quanta and every mechanism then delivers the same work. [APF] §6.1
samples its jobs "so that the cluster is heavily loaded"; here the same generator runs with a week of
warm-up (about 400 active jobs, total dominant usage above the cluster's CPU at every slot) over four
hours. PS-DSF (its default algorithm, ``fast``), DRFH and TSF only: αPF-VDS at ~400 users per solve is
beyond this benchmark's budget (see ``apf_google`` and ``apf_bitbrain`` for α).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pandas as pd

from .apf_google import SLOT, simulate

NAME = "apf_google_heavy"
DESCRIPTION = ("[APF] Figs. 13-14, heavily loaded: PS-DSF vs DRFH vs TSF on the four-class cluster with a "
               "week of Google-like arrivals (~400 active jobs)")

HOURS, WARMUP = 4.0, 168.0


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tqdm import tqdm

    from fairalloc.generate import google_jobs

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if quick:
        jobs = google_jobs(0, hours=0.25, arrivals_per_slot=0.3, warmup_hours=WARMUP)
        slots, min_step = 1, 150.0
    else:
        jobs = google_jobs(0, hours=HOURS, warmup_hours=WARMUP)
        slots, min_step = round(HOURS * 3600 / SLOT), 60.0
    mechs = ("ps-dsf", "drfh", "tsf")
    with tqdm(total=slots * len(mechs), desc="apf_google_heavy slots", disable=quick) as bar:
        frame = pd.concat([simulate(jobs, m, slots, min_step, bar) for m in mechs], ignore_index=True)
    frame.to_csv(out / f"{NAME}.csv", index=False)
    cols = ["cpu_cluster", "mem_cluster", "cpu_CD", "mem_CD", "deviation_mean", "deviation_max"]
    table = frame.groupby("mechanism", sort=False)[cols].mean()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, res in zip(axes, ("cpu", "mem")):
        for mech, f in frame.groupby("mechanism", sort=False):
            ax.plot(f.hour, f[f"{res}_cluster"], label=mech)
        ax.set_title(f"{res.upper()} utilization over servers, heavy load")
        ax.set_xlabel("hour")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{NAME}.png", dpi=110)
    plt.close(fig)
    jobs_per_slot = frame.groupby("slot").jobs.first()
    lines = [f"# [APF] Figs. 13–14, heavily loaded ({'quick' if quick else 'full'} run)", "",
             f"`fairalloc.generate.google_jobs(0, warmup_hours={WARMUP:g})`: {jobs_per_slot.mean():.0f} "
             f"active jobs per slot on average (min {jobs_per_slot.min()}, max {jobs_per_slot.max()}), over "
             f"{slots * SLOT / 3600:g} h; reallocation at completions, at most one per {min_step:g} s.", "",
             "| mechanism | CPU | RAM | CPU C–D | RAM C–D | mean D_n | max D_n |",
             "|---|---|---|---|---|---|---|"]
    for mech, r in table.iterrows():
        lines.append(f"| {mech} | {r.cpu_cluster:.3f} | {r.mem_cluster:.3f} | {r.cpu_CD:.3f} | "
                     f"{r.mem_CD:.3f} | {r.deviation_mean:.3f} | {r.deviation_max:.3f} |")
    fails = frame.groupby("mechanism")[["solves", "failures"]].sum()
    lines += ["", "Solves (not optimal/converged): " +
              ", ".join(f"{m}: {int(r.solves)} ({int(r.failures)})" for m, r in fails.iterrows()) + ".",
              "", f"![{NAME}]({NAME}.png)", ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "table": table}
