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

from benchmarks.tsfer_common import (
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
    if not bad.empty:
        lines += [f"{len(bad)} runs did not complete: {bad.status.value_counts().to_dict()}.", ""]
    lines += [f"![Table 4]({NAME}.png)", "", *EXPLANATION, ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))
    plot_columns(means, paper, columns, out / f"{NAME}.png",
                 "[TSFER] Table 4 (indivisible tasks): ours (solid, ± s.e.) vs paper (dashed)")
    return {"means": {LABELS[m]: [v for v, _ in cells] for m, cells in means.items()}}


EXPLANATION = [
    "## Why our numbers differ from the paper's",
    "",
    "- **Same direction, smaller gap.** Online TSF-ER keeps the highest JCT factor in every column, "
    "as in the paper, but the rounded baselines lose far less than the paper's (MNW 0.13–0.26, CRU "
    "0.14–0.31 there).",
    "- **Half of our synthetic jobs have one task.** A one-task job is served as soon as one task "
    "fits under every policy and keeps a JCT factor near 1; the paper's sample of the Google trace "
    "evidently has few such jobs, or its baselines also delay them. Jobs with many tasks are where "
    "the policies differ (their per-job factors spread much more under MNW/CRU).",
    "- **The baselines are under-specified.** \"Rounded down plus random filling upon arrival or "
    "departure of some users\" leaves open what is drawn at random, whether a Reallocation itself "
    "fills, and whether task departures count; the variants above show the spread. We also fill at a "
    "Reallocation whose rounding would run nothing at all (otherwise the run could never end).",
    "- **Standalone JCT** is ours: waves of as many tasks as Algorithm 2 fits on the empty cluster.",
]
