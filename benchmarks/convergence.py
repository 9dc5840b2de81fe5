"""Convergence of the iterative per-server algorithms on an [APF] Fig. 5-kind cluster.

[APF] Fig. 6 plots Ψ per iteration of its distributed heuristic (α = 3) and calls the convergence linear.
This benchmark runs, on :func:`fairalloc.generate.apf_cluster` instances,

- αPF-VDS by PS-MFA ([APF] Alg. I, (44)–(54)): merit Ψ and NCP residual per iteration;
- αPF-VDS by the distributed heuristic ((55)–(57)): Ψ(x, λ(x)) and NCP residual every 10 iterations;
- PS-DSF by its distributed algorithm ([PSDSF] §III-D): distance of the totals to the final ones and the
  number of (user, server) pairs without a bottleneck, per period;

and writes ``convergence.csv``, ``convergence.png`` and ``convergence.md`` into ``out/``. The exact
equilibrium from the NCP route is the reference for each instance (``X*``); the table reports whether
each algorithm met its own stopping rule, after how many iterations, and how far its (unpolished) end
point is from ``X*``.
"""

from __future__ import annotations

import csv
import pathlib
import time
from typing import Any

import numpy as np

NAME = "convergence"
DESCRIPTION = ("PS-MFA, the distributed heuristic (αPF-VDS) and distributed PS-DSF on [APF] Fig. 5-kind "
               "clusters: merit Ψ / NCP residual per iteration")

FIELDS = ["instance", "users", "alpha", "algorithm", "iteration", "psi", "merit", "ncp_residual",
          "distance", "certificate_failures"]


def _cases(quick: bool) -> list[tuple[int, int, float]]:
    """(seed, users per location, α)."""
    if quick:
        return [(0, 1, 1.0)]
    return [(0, 1, 1.0), (1, 1, 1.0), (0, 1, 3.0), (0, 2, 1.0), (0, 2, 3.0)]


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fairalloc import solve
    from fairalloc.generate import apf_cluster

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    its = {"ps-mfa": 300 if quick else 3000, "distributed": 20_000 if quick else 100_000}
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    done_psdsf: set[str] = set()
    for seed, upl, alpha in _cases(quick):
        inst = apf_cluster(seed, users_per_location=upl)
        label = f"{inst.name}-s{seed}"
        ref = solve(inst, "apf-vds", alpha=alpha, gains=False)
        for algorithm in ("ps-mfa", "distributed"):
            t0 = time.perf_counter()
            r = solve(inst, "apf-vds", alpha=alpha, algorithm=algorithm, max_iter=its[algorithm],
                      polish=False, gains=False)
            secs = time.perf_counter() - t0
            traj = r.details["trajectory"]
            for t in traj:
                rows.append({"instance": label, "users": inst.n_users, "alpha": alpha, "algorithm": algorithm,
                             "iteration": t["iteration"], "psi": t["psi"], "merit": t.get("merit", ""),
                             "ncp_residual": t["ncp_residual"], "distance": "", "certificate_failures": ""})
            summary.append({"instance": label, "alpha": alpha, "algorithm": algorithm,
                            "status": r.status.value, "iterations": traj[-1]["iteration"],
                            **linear_rate([t["iteration"] for t in traj], [t["psi"] for t in traj]),
                            "seconds": secs, "final_psi": traj[-1]["psi"],
                            "final_residual": traj[-1]["ncp_residual"],
                            "rel_error_X": float(np.max(np.abs(r.tasks - ref.tasks) / ref.tasks))})
        if label in done_psdsf:  # PS-DSF does not depend on α: once per instance
            continue
        done_psdsf.add(label)
        t0 = time.perf_counter()
        p = solve(inst, "ps-dsf", algorithm="distributed", seed=seed)
        secs = time.perf_counter() - t0
        for t in p.details["trajectory"]:
            rows.append({"instance": label, "users": inst.n_users, "alpha": "inf",
                         "algorithm": "ps-dsf-distributed", "iteration": t["period"], "psi": "",
                         "merit": "", "ncp_residual": "",
                         "distance": t["distance"], "certificate_failures": t["certificate_failures"]})
        summary.append({"instance": label, "alpha": float("inf"), "algorithm": "ps-dsf-distributed",
                        "status": p.status.value, "iterations": p.details["periods"], "seconds": secs,
                        "final_psi": float("nan"), "final_residual": float("nan"),
                        "rel_error_X": float("nan"), "rate": float("nan"), "r2": float("nan")})
    with open(out / "convergence.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    _plot(rows, out / "convergence.png", plt)
    _markdown(summary, out / "convergence.md", quick)
    return {"name": NAME, "files": ["convergence.csv", "convergence.png", "convergence.md"],
            "summary": summary}


def linear_rate(iterations: list[int], psi: list[float]) -> dict[str, float]:
    """Fit ``log Ψ_k ≈ a + k log ρ`` over the points with ``Ψ > 0`` ([APF] Fig. 6: "linear convergence"
    means a straight line on a log scale). Returns the contraction factor per iteration ``ρ`` and the fit's
    R² (close to 1: linear convergence)."""
    k = np.asarray(iterations, float)
    v = np.asarray(psi, float)
    keep = np.isfinite(v) & (v > 0)
    if keep.sum() < 3:
        return {"rate": float("nan"), "r2": float("nan")}
    k, y = k[keep], np.log(v[keep])
    slope, icpt = np.polyfit(k, y, 1)
    resid = y - (icpt + slope * k)
    ss = float(((y - y.mean()) ** 2).sum())
    return {"rate": float(np.exp(slope)), "r2": 1.0 - float((resid**2).sum()) / ss if ss > 0 else 1.0}


def _plot(rows: list[dict[str, Any]], path: pathlib.Path, plt: Any) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = [("ps-mfa", "merit", "PS-MFA: merit Ψ (scaled)"),
              ("distributed", "psi", "distributed heuristic: Ψ(x, λ(x))"),
              ("ps-dsf-distributed", "distance", "PS-DSF distributed: ‖X − X_final‖∞ / max X")]
    for ax, (alg, key, title) in zip(axes, panels):
        series: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            if r["algorithm"] == alg and r[key] != "":
                lab = f"{r['instance']} α={r['alpha']}"
                series.setdefault(lab, []).append((r["iteration"], float(r[key])))
        for lab, pts in series.items():
            it, v = zip(*pts)
            ax.semilogy(it, np.maximum(v, 1e-17), label=lab)  # exact zeros drawn at the floor
        ax.set_title(title)
        ax.set_xlabel("iteration" if alg != "ps-dsf-distributed" else "period")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _markdown(summary: list[dict[str, Any]], path: pathlib.Path, quick: bool) -> None:
    lines = [f"# Convergence ({'quick' if quick else 'full'} run)", "",
             "Instances: `fairalloc.generate.apf_cluster(seed, users_per_location)` ([APF] Fig. 5 kind: "
             "9 pools, 5 resources). Reference X*: the NCP route. End points are unpolished.", "",
             "ρ: contraction of Ψ per iteration from a straight-line fit of log Ψ against the iteration, "
             "with its R² ([APF] Fig. 6 reports linear convergence: a straight line, R² near 1).", "",
             "| instance | α | algorithm | status | iterations | seconds | final Ψ | final NCP residual | "
             "max rel. error of X | ρ | R² |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['instance']} | {s['alpha']} | {s['algorithm']} | {s['status']} | "
                     f"{s['iterations']} | {s['seconds']:.1f} | {s['final_psi']:.1e} | "
                     f"{s['final_residual']:.1e} | {s['rel_error_X']:.1e} | {s['rate']:.6f} | "
                     f"{s['r2']:.3f} |")
    lines += ["", "![convergence](convergence.png)", ""]
    path.write_text("\n".join(lines))
