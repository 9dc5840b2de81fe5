"""Shared pieces of the [TSFER] §6.2 benchmarks (``tsfer_fluid``, ``tsfer_indivisible``): the
configurations and published numbers of Tables 3 and 4, the grid runner, and the paper-format tables.

Not a benchmark itself (no ``NAME``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

# the columns of Tables 3 and 4: (users n, heterogeneity ρ, link MHz, reallocation slot s)
TABLE3_COLUMNS = [(10, .7, 2, None), (15, .7, 2, None), (20, .7, 2, None), (15, .5, 2, None),
                  (15, .7, 2, None), (15, .9, 2, None), (15, .7, 1, None), (15, .7, 2, None),
                  (15, .7, 3, None)]
TABLE3_PAPER = {
    "tsf-er": [0.608, 0.491, 0.410, 0.477, 0.491, 0.500, 0.442, 0.491, 0.516],
    "mnw": [0.621, 0.510, 0.432, 0.492, 0.510, 0.519, 0.448, 0.510, 0.536],
    "cru": [0.623, 0.514, 0.437, 0.495, 0.514, 0.524, 0.448, 0.514, 0.540],
}
# Table 4's header lists the slot 256 s for the first nine columns and "64 s, 256 s" then a stray
# "1024 s" for the last two: the sweep 64/256/1024 s at n = 15, ρ = 0.7, 2 MHz. Its last column
# repeats the 256 s numbers exactly.
TABLE4_COLUMNS = [(n, r, b, 256) for (n, r, b, _) in TABLE3_COLUMNS] + [(15, .7, 2, 64),
                                                                      (15, .7, 2, 1024)]
TABLE4_PAPER = {
    "tsf-er-online": [0.904, 0.849, 0.797, 0.837, 0.849, 0.853, 0.766, 0.849, 0.877, 0.872, 0.849],
    "mnw": [0.262, 0.174, 0.128, 0.172, 0.174, 0.183, 0.158, 0.174, 0.182, 0.178, 0.174],
    "cru": [0.305, 0.200, 0.143, 0.219, 0.200, 0.187, 0.186, 0.200, 0.205, 0.212, 0.200],
}
LABELS = {"tsf-er": "TSF-ER", "tsf-er-online": "TSF-ER", "mnw": "MNW", "cru": "CRU"}


def run_grid(columns: list[tuple[int, float, float, float | None]], mechanisms: list[str],
             seeds: list[int], simulate: Callable[..., Any], desc: str) -> pd.DataFrame:
    """Every distinct column × seed × mechanism: one simulation of ``google_workload(seed, n, ρ, bw)``
    (the same jobs for every mechanism: paired comparisons). ``simulate(workload, mechanism, slot)``
    returns a :class:`SimulationResult`."""
    from fairalloc.simulate import google_workload

    distinct = list(dict.fromkeys(columns))
    rows = []
    todo = [(c, s, m) for c in distinct for s in seeds for m in mechanisms]
    for (n, rho, bw, slot), seed, mech in tqdm(todo, desc=desc, unit="run"):
        wl = google_workload(seed=seed, users=n, rho=rho, bw=bw)
        r = simulate(wl, mech, slot)
        s = r.summary()
        single = r.jobs["tasks"] == 1
        rows.append({"n": n, "rho": rho, "bw": bw, "slot": slot, "seed": seed, "mechanism": mech,
                     "status": s["status"], "mean_jct_factor": s["mean_jct_factor"],
                     "jct_factor_one_task": float(r.jobs.jct_factor[single].mean()),
                     "jct_factor_many_tasks": float(r.jobs.jct_factor[~single].mean()),
                     "utilization": s["utilization"], "min_ef_sat": s["min_ef_sat"],
                     "min_si_sat": s["min_si_sat"], "seconds": r.stats.get("seconds", np.nan)})
    return pd.DataFrame(rows)


def column_means(df: pd.DataFrame, columns: list[tuple], mechanisms: list[str]
                 ) -> dict[str, list[tuple[float, float]]]:
    """Per mechanism and table column: (mean JCT factor over the seeds, its standard error)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for m in mechanisms:
        cells = []
        for (n, rho, bw, slot) in columns:
            sel = df[(df.mechanism == m) & (df.n == n) & np.isclose(df.rho, rho) & np.isclose(df.bw, bw)]
            if slot is not None:
                sel = sel[np.isclose(sel.slot.astype(float), slot)]
            v = sel["mean_jct_factor"].to_numpy(float)
            cells.append((float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else
                          float("nan")))
        out[m] = cells
    return out


def paired_drop(df: pd.DataFrame, column: tuple, a: str, b: str) -> tuple[float, float]:
    """Mean over seeds of ``(b − a)/b`` in % (how far ``a`` is below ``b``) and its standard error."""
    n, rho, bw, slot = column
    sel = df[(df.n == n) & np.isclose(df.rho, rho) & np.isclose(df.bw, bw)]
    if slot is not None:
        sel = sel[np.isclose(sel.slot.astype(float), slot)]
    p = sel.pivot_table(index="seed", columns="mechanism", values="mean_jct_factor")
    d = 100 * (p[b] - p[a]) / p[b]
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")


def header_rows(columns: list[tuple], with_slot: bool) -> list[str]:
    n = " | ".join(str(c[0]) for c in columns)
    rho = " | ".join(f"{c[1]:g}" for c in columns)
    bw = " | ".join(f"{c[2]:g} MHz" for c in columns)
    lines = [f"| | n | {n} |", "|---|---|" + "---|" * len(columns),
             f"| | ρ | {rho} |", f"| | BW | {bw} |"]
    if with_slot:
        lines.append(f"| | slot | {' | '.join(f'{c[3]:g} s' for c in columns)} |")
    return lines


def paper_table(means: dict[str, list[tuple[float, float]]], paper: dict[str, list[float]],
                columns: list[tuple], with_slot: bool) -> list[str]:
    """Markdown in the layout of Tables 3/4: our mean (± s.e.) and the paper's number below it."""
    lines = header_rows(columns, with_slot)
    for m, cells in means.items():
        ours = " | ".join(f"**{v:.3f}** ±{e:.3f}" for v, e in cells)
        lines.append(f"| {LABELS[m]} | ours | {ours} |")
        lines.append(f"| | paper | {' | '.join(f'{v:.3f}' for v in paper[m])} |")
    return lines


def plot_columns(means: dict[str, list[tuple[float, float]]], paper: dict[str, list[float]],
                 columns: list[tuple], path: Any, title: str) -> None:
    """Our means (solid, with s.e.) and the paper's (dashed) per table column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 1.0 * len(columns) + 2), 4.2))
    xs = np.arange(len(columns))
    colors = {"tsf-er": "C0", "tsf-er-online": "C0", "mnw": "C1", "cru": "C2"}
    for m, cells in means.items():
        v = np.array([c[0] for c in cells])
        e = np.array([c[1] for c in cells])
        ax.errorbar(xs - 0.1 + 0.1 * list(means).index(m), v, yerr=e, fmt="o-", color=colors[m],
                    label=f"{LABELS[m]} (ours)", capsize=3)
        ax.plot(xs, paper[m], "x--", color=colors[m], alpha=0.6, label=f"{LABELS[m]} (paper)")
    labels = [f"n={c[0]}\nρ={c[1]:g}\n{c[2]:g} MHz" + (f"\n{c[3]:g} s" if c[3] else "") for c in columns]
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_ylabel("mean JCT factor")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
