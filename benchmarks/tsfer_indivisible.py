"""[TSFER] Table 4: mean JCT factor under the indivisible task model — TSF-ER's online Algorithm 2
against MNW and CRU rounded down plus random filling ([TSFER] §6.1).

The workloads are those of ``tsfer_fluid`` (same seeds, same jobs); each column also fixes the
reallocation slot (256 s, and 64/256/1024 s at n = 15, ρ = 0.7, 2 MHz); suspend/resume overhead 250 ms.
:func:`fairalloc.simulate.simulate_online` runs ``tsf-er-online`` (Algorithm 2) and the rounded
baselines (``mnw``, ``cru``: the fluid allocation among the jobs present at each Reallocation, rounded
down, and random filling upon job arrivals and departures). Standalone JCTs are indivisible too (waves of
as many tasks as fit on the empty cluster). The baselines' random filling has two readings the paper
leaves open; column 2 is also run with the alternatives (fill after every task departure; draw a job
rather than a task). Writes ``tsfer_indivisible.csv``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .tsfer_common import (
    LABELS,
    TABLE4_COLUMNS,
    TABLE4_PAPER,
    column_means,
    paired_drop,
    paper_table,
    plot_columns,
    run_grid,
)

NAME = "tsfer_indivisible"
DESCRIPTION = ("[TSFER] Table 4: JCT factor of online TSF-ER (Algorithm 2) vs rounded MNW/CRU, whole "
               "tasks, reallocation slots")
MECHANISMS = ["tsf-er-online", "mnw", "cru"]
SEEDS_FULL, SEEDS_QUICK = 40, 2
VARIANTS = {"fill on task departures": {"fill_on": "tasks"},
            "fill draws a job": {"fill": "user"}}


def _simulate(**extra: Any):
    from fairalloc.simulate import simulate_online

    def sim(wl, mech, slot):
        return simulate_online(wl, mech, slot=float(slot), overhead=0.25, sample=7 * 86400.0,
                               fairness_metrics=False, seed=int(wl.info["seed"]), **extra)

    return sim


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    columns = TABLE4_COLUMNS[:1] if quick else TABLE4_COLUMNS
    seeds = list(range(SEEDS_QUICK if quick else SEEDS_FULL))
    df = run_grid(columns, MECHANISMS, seeds, _simulate(), "Table 4")
    df["variant"] = "paper"
    parts = [df]
    for name, kw in tqdm(VARIANTS.items(), desc="variants", disable=quick):
        if quick:
            break
        v = run_grid([TABLE4_COLUMNS[1]], ["mnw", "cru"], seeds, _simulate(**kw), name)
        v["variant"] = name
        parts.append(v)
    df = pd.concat(parts, ignore_index=True)
    df.to_csv(out / f"{NAME}.csv", index=False)
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.md", f"{NAME}.png"],
            **report(df, out, quick)}


def report(df: pd.DataFrame, out: pathlib.Path, quick: bool) -> dict[str, Any]:
    """Write the table and the figure from the per-run rows (also used to re-render a saved CSV)."""
    main = df[df.variant == "paper"]
    columns = [c for c in TABLE4_COLUMNS if ((main.n == c[0]) & np.isclose(main.rho, c[1])
                                               & np.isclose(main.bw, c[2])
                                               & np.isclose(main.slot.astype(float), c[3])).any()]
    idx = [TABLE4_COLUMNS.index(c) for c in columns]
    paper = {m: [TABLE4_PAPER[m][k] for k in idx] for m in MECHANISMS}
    means = column_means(main, columns, MECHANISMS)
    gain = [paired_drop(main, c, "mnw", "tsf-er-online") for c in columns]
    gain_cru = [paired_drop(main, c, "cru", "tsf-er-online") for c in columns]
    bad = df[df.status != "optimal"]
    lines = [
        f"# [TSFER] Table 4 — indivisible tasks ({'quick' if quick else 'full'} run)", "",
        f"Mean JCT factor over {main.seed.nunique()} workloads per column (± standard error): the "
        "workloads of Table 3 (`google_workload`), whole tasks, suspend/resume overhead 250 ms. TSF-ER = "
        "Algorithm 2 (`tsf-er-online`); MNW, CRU = their fluid allocation rounded down at each "
        "Reallocation plus random filling upon job arrivals and departures (`simulate_online`). "
        f"{len(df)} simulations, {int(df.seconds.sum())} s.", "",
        *paper_table(means, paper, columns, with_slot=True),
        "| MNW below TSF-ER | ours | " + " | ".join(f"{d:.1f} %" for d, _ in gain) + " |",
        "| | paper | " + " | ".join(f"{100 * (t - m) / t:.0f} %" for t, m in
                                    zip(paper["tsf-er-online"], paper["mnw"])) + " |",
        "| CRU below TSF-ER | ours | " + " | ".join(f"{d:.1f} %" for d, _ in gain_cru) + " |",
        "| | paper | " + " | ".join(f"{100 * (t - m) / t:.0f} %" for t, m in
                                    zip(paper["tsf-er-online"], paper["cru"])) + " |", ""]
    variants = df[df.variant != "paper"]
    if not variants.empty:
        col = TABLE4_COLUMNS[1]
        base = column_means(main, [col], ["mnw", "cru"])
        lines += ["How the baselines' random filling is read changes them (column 2: n = 15, ρ = 0.7, "
                  "2 MHz, 256 s; TSF-ER there: "
                  f"{means['tsf-er-online'][columns.index(col)][0]:.3f}):", "",
                  "| baseline | MNW | CRU |", "|---|---|---|",
                  f"| fill upon job arrivals/departures (the paper's words; the table above) | "
                  f"{base['mnw'][0][0]:.3f} | {base['cru'][0][0]:.3f} |"]
        for name in VARIANTS:
            vm = column_means(variants[variants.variant == name], [col], ["mnw", "cru"])
            lines.append(f"| {name} | {vm['mnw'][0][0]:.3f} | {vm['cru'][0][0]:.3f} |")
        lines.append("")
    c2 = main[(main.n == 15) & np.isclose(main.rho, .7) & np.isclose(main.bw, 2)
              & np.isclose(main.slot.astype(float), 256)]
    if "jct_factor_many_tasks" in main and not c2.empty:
        by = c2.groupby("mechanism")[["jct_factor_many_tasks", "jct_factor_one_task"]].mean()
        lines += ["Column 2 split by job size (mean over workloads of the per-workload means):", "",
                  "| | TSF-ER | MNW | CRU |", "|---|---|---|---|"]
        for col, name in (("jct_factor_many_tasks", "jobs with several tasks"),
                          ("jct_factor_one_task", "one-task jobs")):
            lines.append(f"| {name} | " + " | ".join(f"{by.loc[m, col]:.3f}" for m in MECHANISMS) + " |")
        lines.append("")
    if not bad.empty:
        lines += [f"{len(bad)} runs did not complete: {bad.status.value_counts().to_dict()}.", ""]
    lines += [f"![Table 4]({NAME}.png)", "", *EXPLANATION, ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))
    plot_columns(means, paper, columns, out / f"{NAME}.png",
                 "[TSFER] Table 4 (indivisible tasks): ours (solid, ± s.e.) vs paper (dashed)")
    return {"means": {LABELS[m]: [v for v, _ in cells] for m, cells in means.items()}}


EXPLANATION = [
    "## What agrees, what does not, and why",
    "",
    "- **Online TSF-ER reproduces the paper's levels closely**: 0.899 / 0.851 / 0.811 for n = 10 / 15 "
    "/ 20 (paper 0.904 / 0.849 / 0.797), 0.872 with a 64 s slot (paper 0.872), and the same trends — "
    "lower with more users, with a narrower link and with a longer slot (later rebalancing). The "
    "paper's 1024 s column repeats its 256 s numbers exactly; ours is lower (0.831).",
    "- **TSF-ER beats both rounded baselines in every column, as in the paper, but by 7–30 % instead "
    "of 66–84 %.** We could not reproduce the size of the gap. Split by job size (table above), jobs "
    "with several tasks lose much more under the baselines than one-task jobs, which start as soon "
    "as one task fits under every policy — so the synthetic job mix (half the jobs have one task) "
    "explains part of the difference, not all of it. The "
    "baselines are under-specified (what is drawn at random, whether task departures trigger filling, "
    "whether a Reallocation fills); the readings above move MNW from 0.749 to 0.784, all far above the "
    "paper's 0.174. Rounding down loses most when a job's fluid share is a fraction of a task per "
    "server; with our task sizes (median CPU request ≈ 3.6 % of the (1, 1) server) most shares are several "
    "tasks. The baselines lose most at 1 MHz (MNW −30 %, CRU −20 %), where the scarce link makes every "
    "share small.",
    "- **Baseline details we chose.** At a Reallocation whose rounding would run no task at all, we "
    "fill at random (otherwise the run could stall forever); the fluid allocation is solved with "
    "unlimited tasks (\"for the fluid task model\") and capped at the tasks a job has waiting.",
    "- **Standalone JCT** (the JCT factor's numerator) is ours: waves of as many tasks as Algorithm 2 "
    "fits on the empty cluster, so a lone job's factor is 1.",
]
