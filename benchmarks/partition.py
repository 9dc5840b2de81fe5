r"""Partitioned solves (POP, Narayanan et al. SOSP 2021) against the exact answer: ``-p partitions=k``.

TSF-ER on the scaling workload (:func:`benchmarks._workload.scaling_instance`; ``link``: every user
demands the link) for ``k ∈ {1, 2, 4, 8, 16}``, the parts solved in parallel in local worker
processes (``partition_workers=2``, the machine's two cores). ``k = 1`` is the exact solve. For each
run: wall time, the minimum TSF-ER share ``min_n X_n/(φ_n η_n)`` on the whole instance, its ratio to
the exact one, the **leximin gap** (sort both share vectors; at the first position where they differ
by more than 1e-6 relative, the relative difference — negative: the partitioned answer is
lexicographically lower) and the Pareto **domination factor** (one LP over χ, the verification layer's
``pareto``; computed up to 1024 × 128). Where the exact solve is out of reach (16 384 × 2048) only
``k ∈ {8, 16}`` run (parts of 2048 × 256 and 1024 × 128) and no loss can be computed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from fairalloc import solve
from fairalloc.verify.pareto import pareto

from ._runner import environment
from ._workload import scaling_instance

NAME = "partition"
DESCRIPTION = "POP-style partitioned TSF-ER (k = 1…16) against the exact answer, up to 16384 x 2048"

log = logging.getLogger("benchmarks.partition")

KS = (1, 2, 4, 8, 16)
KS_BIG = (16, 8)
EXACT_MAX = 2048 * 256  # users x servers up to which the exact solve runs
PARETO_MAX = 1024 * 128  # ... and the domination factor


def sizes(quick: bool) -> list[tuple[int, int]]:
    return [(128, 16), (256, 32)] if quick else [(1024, 128), (2048, 256), (16384, 2048)]


def _shares(inst: Any, X: np.ndarray) -> np.ndarray:
    return X / (inst.weight * inst.eta)


def leximin_gap(exact: np.ndarray, approx: np.ndarray, rel: float = 1e-6) -> float:
    a, b = np.sort(exact), np.sort(approx)
    d = (b - a) / np.maximum(np.abs(a), 1e-300)
    idx = np.flatnonzero(np.abs(d) > rel)
    return float(d[idx[0]]) if idx.size else 0.0


def run(out: Path, quick: bool = False) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    solve(scaling_instance(8, 2), "tsf-er")  # imports and first-call costs out of the timings
    rows = []
    # beyond the exact solve's reach only the finest splits (parts of at most 2048 x 256) run
    todo = [(n, k_, kk) for n, k_ in sizes(quick) for kk in (KS if n * k_ <= EXACT_MAX else KS_BIG)
            if kk <= min(n, k_)]
    exact: dict[tuple[int, int], np.ndarray] = {}
    for N, K, k in tqdm(todo, desc=NAME, unit="run"):
        inst = scaling_instance(N, K)
        t0 = time.perf_counter()
        params = {} if k == 1 else {"partitions": k, "partition_workers": 2}
        r = solve(inst, "tsf-er", **params)
        wall = time.perf_counter() - t0
        s = _shares(inst, r.tasks)
        if k == 1:
            exact[(N, K)] = s
        ref = exact.get((N, K))
        dom = np.nan
        if N * K <= PARETO_MAX:
            dom = pareto(inst, r.allocation)["domination_factor"]
        rows.append({"users": N, "servers": K, "k": k, "status": r.status.value, "wall_s": wall,
                     "min_share": float(s.min()),
                     "min_share_ratio": float(s.min() / ref.min()) if ref is not None else np.nan,
                     "leximin_gap": leximin_gap(ref, s) if ref is not None else np.nan,
                     "domination_factor": dom, "total_tasks": float(r.tasks.sum())})
        log.info("%dx%d k=%d: %s in %.1f s", N, K, k, r.status.value, wall)
        pd.DataFrame(rows).to_csv(out / f"{NAME}.csv", index=False)
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{NAME}.csv", index=False)
    _figure(df, out / f"{NAME}.png")
    (out / f"{NAME}.md").write_text(summary(df, quick))
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "rows": len(df)}


def _figure(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for (N, K), g in df.groupby(["users", "servers"]):
        axes[0].plot(g["k"], g["wall_s"], "o-", label=f"{N}×{K}")
        if g["min_share_ratio"].notna().any():
            axes[1].plot(g["k"], g["min_share_ratio"], "o-", label=f"{N}×{K}")
    axes[0].set(xscale="log", yscale="log", xlabel="partitions k", ylabel="wall time (s)")
    axes[1].set(xscale="log", xlabel="partitions k", ylabel="min share / exact min share")
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return "–" if np.isnan(v) else f"{v:.4g}"
    return str(v)


def summary(df: pd.DataFrame, quick: bool) -> str:
    env = environment()
    head = (f"# Partitioned solves (POP) against the exact answer\n\n"
            f"Python {env['python']}, Pyomo {env['pyomo']}, highspy {env['highspy']}, {env['cores']} cores; "
            f"generated by `python -m benchmarks partition{' --quick' if quick else ''}`; all rows in "
            f"`partition.csv`. TSF-ER on the scaling workload (`link`); `k = 1` is the exact solve; "
            "`k > 1` splits users and servers into `k` parts solved in two worker processes "
            "(`fairalloc solve -m tsf-er -p partitions=k -p partition_workers=2`). `min share` is "
            "`min X/(φη)` on the whole instance; `ratio` is it over the exact one; `leximin gap` the "
            "relative difference at the first position where the sorted share vectors differ "
            "(negative: lexicographically below the exact answer); `domination` the Pareto "
            "domination factor (1 = Pareto optimal), computed up to 1024 × 128.\n\n")
    cols = ["users", "servers", "k", "status", "wall_s", "min_share", "min_share_ratio", "leximin_gap",
            "domination_factor"]
    lines = ["| users | servers | k | status | wall (s) | min share | ratio | leximin gap | domination |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in df[cols].iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    return head + "\n".join(lines) + "\n\n![partition](partition.png)\n"
