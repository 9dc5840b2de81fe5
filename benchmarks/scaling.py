r"""Scaling study of the LP mechanisms (issue 6, item 1): fairalloc against the numpy→highspy floor
and against the same LPs written in cvxpy, from 16 × 4 to 2048 × 256.

Instances: :func:`benchmarks._workload.scaling_instance` (4 server resources + 1 external link,
every user eligible everywhere: ``N·K`` allocation variables), saved in the CSV directory form so
that loading is measured too. Two workloads:

- ``link``: every user's tasks use the link ([TSFER]'s mobile-edge setting); the link saturates and
  blocks everyone, so each max-min mechanism is **one LP**;
- ``mixed``: a fifth of the users do not use the link and keep rising after it saturates:
  progressive filling needs **4–5 LPs**.

Every (workload, mechanism, size) runs each approach back to back, each in a fresh process
(:mod:`benchmarks._case`): imports happen before the clock starts and the peak resident memory
belongs to that case (``--quick`` runs them in-process and records no memory). fairalloc's phases
are ``Result.timings`` (instance load, Pyomo build, translation to highspy, HiGHS, solution load)
plus the verification (feasibility, KKT, both sharing-incentive measures, envy-freeness up to 512
users). The floor and cvxpy load the same CSV folder. All three must agree: the user totals ``X``
of the max-min mechanisms (unique) and the objective of the one-LP forms are compared with the
floor's (``diff`` columns).

Ratios are computed within one run; the machine's load average is recorded with every case (the
machine is shared: with other jobs running, wall times stretch, CPU times much less).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from fairalloc.io import save_instance

from ._runner import environment, run_case
from ._workload import scaling_instance

NAME = "scaling"
DESCRIPTION = ("LP mechanisms 16×4 … 2048×256 (4 resources + 1 external): phases and memory of "
               "fairalloc vs the numpy→highspy floor vs cvxpy")

log = logging.getLogger("benchmarks.scaling")

SIZES = [(16, 4), (64, 8), (128, 16), (256, 32), (512, 64), (1024, 128), (2048, 256)]
QUICK_SIZES = [(16, 4), (64, 8)]
MAXMIN = ["drfh", "tsf", "tsf-er"]
ONE_LP = ["tsf-er-paper", "utilitarian", "relative-utilitarian"]
CRU_MAX_USERS = 256  # CRU has |N|² envy-freeness rows
CVXPY_MIXED_MAX_USERS = 1024  # cvxpy rebuilds every round: 2048 × 256 mixed takes too long
APPROACHES = [("fairalloc", {}), ("floor", {}), ("cvxpy", {}), ("cvxpy-highs", {"solver": "HIGHS"})]
PHASES = ["load", "build", "translate", "solve", "solution_load"]


def cases(quick: bool) -> list[tuple[str, str, int, int]]:
    sizes = QUICK_SIZES if quick else SIZES
    out = []
    for N, K in sizes:
        for mech in MAXMIN:
            out.append(("link", mech, N, K))
            out.append(("mixed", mech, N, K))
        for mech in ONE_LP:
            out.append(("link", mech, N, K))
        if N <= CRU_MAX_USERS:
            out.append(("link", "cru", N, K))
    return out


def _instance_folder(out: Path, workload: str, N: int, K: int) -> Path:
    folder = out / "instances" / f"{workload}-{N}x{K}"
    if not (folder / "users.csv").exists():
        inst = scaling_instance(N, K, link_users=1.0 if workload == "link" else 0.8)
        save_instance(inst, folder)
    return folder


def _run(spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    """A case in a fresh process (full runs: clean timings and memory peaks) or, for ``--quick``,
    in this one (no interpreter start-up per case; memory peaks not recorded)."""
    if not quick:
        return run_case(spec, timeout=3600)
    from ._case import run_case as run_here

    res = run_here(spec)
    res["peak_mb"] = res["base_mb"] = float("nan")
    return res


def _diff(row: dict[str, Any], ref: dict[str, Any] | None, maxmin: bool) -> float:
    """Largest relative difference from the floor: of ``X`` (max-min: unique) or of the objective."""
    if ref is None or "X" not in row or "X" not in ref:
        return float("nan")
    if maxmin:
        a, b = np.asarray(row["X"]), np.asarray(ref["X"])
        return float(np.max(np.abs(a - b)) / max(1e-12, float(np.max(np.abs(b)))))
    a, b = row.get("objective", np.nan), ref.get("objective", np.nan)
    return float(abs(a - b) / max(1e-12, abs(b)))


def run(out: Path, quick: bool = False, resume: bool = False) -> dict[str, Any]:
    """Run every case; with ``resume``, keep the rows of ``out/scaling.csv`` and run only the
    (workload, mechanism, size) cases it does not hold (a long run that was stopped goes on)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    todo = cases(quick)
    csv = out / f"{NAME}.csv"
    if resume and csv.exists():
        old = pd.read_csv(csv)
        rows = old.to_dict("records")
        done = set(zip(old.workload, old.mechanism, old.users, old.servers))
        todo = [c for c in todo if c not in done]
        log.info("resume: %d cases recorded, %d to run", len(done), len(todo))
    bar = tqdm(total=len(todo) * len(APPROACHES), desc=NAME, unit="case")
    for workload, mech, N, K in todo:
        folder = _instance_folder(out, workload, N, K)
        results: dict[str, dict[str, Any]] = {}
        for name, extra in APPROACHES:
            bar.update()
            skip = (mech == "cru" and name != "fairalloc") or (
                name.startswith("cvxpy") and workload == "mixed" and N > CVXPY_MIXED_MAX_USERS)
            if skip:
                continue
            approach = "cvxpy" if name.startswith("cvxpy") else name
            spec = {"approach": approach, "mechanism": mech, "instance": str(folder), **extra}
            res = _run(spec, quick)
            results[name] = res
            log.info("%s %s %dx%d %s: %.2f s (%s)", workload, mech, N, K, name,
                     res.get("end_to_end", float("nan")), res.get("status"))
        ref = results.get("floor")
        for name, res in results.items():
            row = {"workload": workload, "mechanism": mech, "users": N, "servers": K,
                   "variables": N * K, "approach": name}
            row.update({k: v for k, v in res.items() if k != "X"})
            row["diff_vs_floor"] = _diff(res, ref, mech in MAXMIN) if name != "floor" else 0.0
            rows.append(row)
        pd.DataFrame(rows).to_csv(out / f"{NAME}.csv", index=False)  # keep partial results
    bar.close()
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{NAME}.csv", index=False)
    _figure(df, out / f"{NAME}.png")
    (out / f"{NAME}.md").write_text(summary(df, quick))
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "rows": len(df)}


# ---------------------------------------------------------------------- reporting
def _pivot(df: pd.DataFrame, value: str) -> pd.DataFrame:
    return df.pivot_table(index=["workload", "mechanism", "users", "servers"], columns="approach",
                          values=value, aggfunc="first")


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, mechanism, size): end-to-end seconds of each approach and the ratios."""
    wall = _pivot(df, "end_to_end")
    cpu = _pivot(df, "cpu")
    fa = df[df.approach == "fairalloc"].set_index(["workload", "mechanism", "users", "servers"])
    t = pd.DataFrame(index=wall.index)
    for a in ("fairalloc", "floor", "cvxpy", "cvxpy-highs"):
        if a in wall:
            t[a] = wall[a]
    if "floor" in wall:
        t["fairalloc/floor"] = wall["fairalloc"] / wall["floor"]
        t["fairalloc/floor (cpu)"] = cpu["fairalloc"] / cpu["floor"]
    if "cvxpy" in wall:
        t["cvxpy/fairalloc"] = wall["cvxpy"] / wall["fairalloc"]
    if "cvxpy-highs" in wall:
        t["cvxpy-highs/fairalloc"] = wall["cvxpy-highs"] / wall["fairalloc"]
    t["build/solve"] = fa["build"] / fa["solve"]
    t["(build+translate)/solve"] = (fa["build"] + fa["translate"]) / fa["solve"]
    t["LPs"] = fa["lps"]
    return t.reset_index()


def _fmt(v: Any, digits: int = 2) -> str:
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return "–"
        return f"{v:.{digits}f}" if abs(v) >= 0.01 or v == 0 else f"{v:.1e}"
    return str(v)


def _table(frame: pd.DataFrame, cols: list[str]) -> str:
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(_fmt(r[c]) for c in cols) + " |\n"
                          for _, r in frame.iterrows())


def summary(df: pd.DataFrame, quick: bool) -> str:
    env = environment()
    import cvxpy  # noqa: F401

    from ._cvxpy import default_solver

    r = ratios(df)
    big = r[r.users >= (1024 if not quick else r.users.max())]
    fa = df[df.approach == "fairalloc"]
    lines = [f"# Scaling: fairalloc vs the numpy→highspy floor vs cvxpy{' (quick run)' if quick else ''}",
             "",
             f"Python {env['python']}, Pyomo {env['pyomo']}, highspy {env['highspy']}, cvxpy "
             f"{env['cvxpy']} (default LP solver here: **{default_solver()}**; `cvxpy-highs` names "
             f"HiGHS explicitly), {env['cores']} cores; load average during the run "
             f"{df.loadavg.min():.1f}–{df.loadavg.max():.1f}. Generated by `python -m benchmarks "
             f"{NAME}`; all rows in `{NAME}.csv`.",
             "",
             "Instances: `benchmarks/_workload.py` (4 server resources + 1 external link, no placement "
             "constraints, N·K variables). `link`: every user uses the link (one LP per max-min "
             "mechanism); `mixed`: a fifth of the users do not (progressive filling: several LPs). "
             "End-to-end = instance load (CSV folder) → allocation, seconds of wall time; each "
             "approach in a fresh process, imports excluded.",
             "",
             "## End-to-end seconds and ratios at the largest sizes",
             "",
             _table(big, ["workload", "mechanism", "users", "servers", "LPs", "fairalloc", "floor",
                          "cvxpy", "cvxpy-highs", "fairalloc/floor", "fairalloc/floor (cpu)",
                          "cvxpy/fairalloc", "(build+translate)/solve"]),
             "",
             "## fairalloc's phases (seconds) and memory",
             "",
             _table(fa.assign(verify=fa.get("verify", np.nan)),
                    ["workload", "mechanism", "users", "servers", "lps", *PHASES, "verify",
                     "end_to_end", "cpu", "peak_mb"]),
             "",
             "## Agreement",
             "",
             f"Largest relative difference from the floor over all cases: fairalloc "
             f"{df[df.approach == 'fairalloc'].diff_vs_floor.max():.1e}, cvxpy "
             f"{df[df.approach == 'cvxpy'].diff_vs_floor.max():.1e}, cvxpy-highs "
             f"{df[df.approach == 'cvxpy-highs'].diff_vs_floor.max():.1e} (user totals X of the "
             "max-min mechanisms, unique; objective of the one-LP forms).",
             ""]
    bad = df[~df.status.isin(["optimal"])]
    if len(bad):
        lines += ["Cases that did not end `optimal`:", "",
                  _table(bad, ["workload", "mechanism", "users", "servers", "approach", "status"]), ""]
    return "\n".join(lines)


def _figure(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    styles = {"fairalloc": "o-", "floor": "s--", "cvxpy": "^:", "cvxpy-highs": "v:"}
    for ax, workload, mech in ((axes[0], "link", "tsf-er"), (axes[1], "mixed", "tsf-er")):
        sub = df[(df.workload == workload) & (df.mechanism == mech)]
        for a, st in styles.items():
            s = sub[sub.approach == a].sort_values("variables")
            if len(s):
                ax.loglog(s.variables, s.end_to_end, st, label=a)
        ax.set(title=f"{mech}, {workload} workload", xlabel="allocation variables (N·K)",
               ylabel="end-to-end seconds")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax = axes[2]
    fa = df[(df.approach == "fairalloc") & (df.workload == "link") & (df.mechanism == "tsf-er")]
    fa = fa.sort_values("variables")
    bottom = np.zeros(len(fa))
    labels = [f"{u}×{k}" for u, k in zip(fa.users, fa.servers)]
    for ph in [*PHASES, "verify"]:
        if ph in fa:
            vals = fa[ph].fillna(0).to_numpy()
            ax.bar(labels, vals, bottom=bottom, label=ph)
            bottom += vals
    ax.set(title="fairalloc phases, tsf-er (link)", ylabel="seconds", yscale="log")
    ax.tick_params(axis="x", rotation=45)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":  # pragma: no cover
    import sys

    logging.basicConfig(level=logging.INFO)
    print(run(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/out/scaling"),
              quick=os.environ.get("QUICK") == "1"))
