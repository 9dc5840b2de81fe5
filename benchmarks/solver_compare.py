r"""Solver comparison (issue 6, item 2): the same mechanisms through every solver installed here.

**LPs** — tsf-er (progressive filling, ``mixed`` scaling workload: several LPs whose duals decide who
is frozen) and utilitarian (one LP, ``link`` workload) through HiGHS (its own choice, dual simplex,
IPM with crossover, PDLP), Pyomo's persistent HiGHS interface and SCIP. SCIP returns no multipliers,
so progressive filling tests every candidate with one LP (``probe LPs``) and runs at the small sizes
only.

**NLPs** — MNW (Eisenberg–Gale, [TSFER] §3.2) and αPF-VDS (α = 1 and 3, ``algorithm=ncp``: the NCP
(28)–(31) of [APF] on a Scholtes relaxation; SCIP there with a 120 s limit) through the two Ipopt
routes — CasADi's bundled Ipopt 3.14 + MUMPS, and an ASL ``ipopt`` executable (not installable here:
the registries have no genuine build, docs/solvers.md; the row says so) — and SCIP (global; MNW in its
epigraph form).

Every run reports status, LPs, solver iterations (SCIP and Pyomo's interface give none), time, the
worst KKT residual (HiGHS and Ipopt multipliers; none from SCIP), and the difference from the
reference run (first row of the group): user totals ``X`` for the unique-X mechanisms (tsf-er, MNW),
the objective for utilitarian (vertices differ), the NCP residual for αPF-VDS. Licensed solvers are
probed through Pyomo (``gurobi``, ``cplex``, ``xpress``, ``mosek``, ``copt``, ``knitro``) and cvxpy.
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
from fairalloc.generate import apf_cluster, random_instance
from fairalloc.instance import Instance
from fairalloc.solvers import solver_table

from ._runner import environment
from ._workload import scaling_instance

NAME = "solvers"
DESCRIPTION = ("HiGHS simplex/IPM/PDLP, Pyomo's HiGHS, SCIP on LP mechanisms; Ipopt routes and SCIP "
               "on MNW and αPF-VDS")

log = logging.getLogger("benchmarks.solvers")

LP_SOLVERS = ["highs", "highs-simplex", "highs-ipm", "highs-pdlp", "pyomo-highs", "scip"]
NLP_SOLVERS = ["ipopt-casadi", "ipopt-exe", "scip"]
LICENSED = ["gurobi", "gurobi_direct", "cplex", "cplex_direct", "xpress", "xpress_direct", "mosek",
            "mosek_direct", "copt", "copt_direct", "knitro", "knitroampl", "baron"]
TIME_LIMIT = 600.0
# SCIP on αPF-VDS's relaxed NCP: no run certified within 600 s before; its rows say where it stopped
SCIP_NCP_LIMIT = 120.0


def licensed_solvers() -> pd.DataFrame:
    """Which commercial solvers Pyomo (legacy and new factories) and cvxpy can reach here. Pyomo's
    factory logs a warning and a traceback for each one it cannot create; they are silenced here
    (the table says what is missing)."""
    import pyomo.environ as pyo
    from pyomo.contrib.solver.common.factory import SolverFactory as NewFactory

    rows = []
    pyomo_log = logging.getLogger("pyomo")
    level = pyomo_log.level
    pyomo_log.setLevel(logging.CRITICAL)
    try:
        _probe(pyo, NewFactory, rows)
    finally:
        pyomo_log.setLevel(level)
    try:
        import cvxpy as cp

        commercial = {"GUROBI", "CPLEX", "XPRESS", "MOSEK", "COPT", "KNITRO"}
        for s in sorted(commercial):
            rows.append({"solver": f"cvxpy {s}", "available": s in cp.installed_solvers(),
                         "via": "cvxpy"})
    except ImportError:
        pass
    return pd.DataFrame(rows)


def _probe(pyo: Any, new_factory: Any, rows: list[dict[str, Any]]) -> None:
    """One row per name of :data:`LICENSED`: whether Pyomo's legacy or new factory reaches it."""
    for name in LICENSED:
        ok, how = False, ""
        try:
            s = pyo.SolverFactory(name)
            ok = bool(s.available(exception_flag=False))
            how = "pyomo"
        except Exception:  # unknown to this Pyomo: not available
            pass
        if not ok:
            try:
                s2 = new_factory(name.split("_")[0])
                ok = bool(s2 is not None and s2.available())
                how = "pyomo contrib" if ok else how
            except Exception:
                pass
        rows.append({"solver": name, "available": ok, "via": how or "–"})


def lp_cases(quick: bool) -> list[tuple[str, str, dict[str, Any], Instance, list[str]]]:
    sizes = [(32, 4), (64, 8)] if quick else [(64, 8), (256, 32), (1024, 128)]
    scip_max = 64 if quick else 256
    out = []
    for N, K in sizes:
        solvers = [s for s in LP_SOLVERS if s != "scip" or N <= scip_max]
        out.append((f"tsf-er {N}×{K} mixed", "tsf-er", {}, scaling_instance(N, K, link_users=0.8),
                    solvers))
        out.append((f"utilitarian {N}×{K}", "utilitarian", {}, scaling_instance(N, K), solvers))
    return out


def nlp_cases(quick: bool) -> list[tuple[str, str, dict[str, Any], Instance, list[str]]]:
    mnw = [(20, 4)] if quick else [(30, 6), (200, 20)]
    out = []
    for N, K in mnw:
        inst = random_instance(5, N, K, 3, external=1, weights=True)
        out.append((f"mnw {N}×{K}", "mnw", {}, inst, NLP_SOLVERS if N <= 30 else NLP_SOLVERS[:2]))
    cluster = apf_cluster(0, 2 if quick else 5)
    for alpha in (1, 3):  # SCIP: 79 s at α = 3, over 120 s at α = 1 on the 6-user cluster: full runs only
        # `ncp`: the Pyomo MPEC the NLP solvers get (the default `newton` uses none of them)
        out.append((f"apf-vds α={alpha} {cluster.n_users}×{cluster.n_servers}", "apf-vds",
                    {"alpha": alpha, "algorithm": "ncp"}, cluster, NLP_SOLVERS[:2] if quick else NLP_SOLVERS))
    return out


def run_one(inst: Instance, mech: str, params: dict[str, Any], solver: str) -> dict[str, Any]:
    avail = {r["name"]: r["available"] for r in solver_table()}
    if not avail.get(solver, False):
        return {"status": "not installed", "X": None}
    t0 = time.perf_counter()
    try:
        limit = SCIP_NCP_LIMIT if (solver, mech) == ("scip", "apf-vds") else TIME_LIMIT
        r = solve(inst, mech, solver=solver, time_limit=limit, **params)
    except Exception as exc:  # a solver that cannot take the model: report it, go on
        return {"status": f"error: {type(exc).__name__}: {str(exc)[:120]}", "X": None,
                "wall": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    d = r.details
    out = {"status": r.status.value, "message": r.message[:120], "wall": wall,
           "solve": r.timings.get("solve", np.nan),
           "lps": r.solver.get("solves"), "iterations": r.solver.get("iterations"),
           "max_kkt": r.solver.get("max_kkt_residual"), "solver_used": r.solver.get("name"),
           "X": r.tasks, "objective": d.get("objective"),
           "ncp_residual": d.get("ncp_residual"), "by": _how(d)}
    if mech == "mnw" and r.ok:
        out["objective"] = float(inst.weight @ np.log(np.maximum(r.tasks, 1e-300)))
    return out


def _how(details: dict[str, Any]) -> str:
    rounds = details.get("rounds") or []
    kinds = sorted({str(rd.get("by")) for rd in rounds if "by" in rd})
    return ",".join(kinds)


def run(out: Path, quick: bool = False) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    solve(scaling_instance(8, 2), "tsf-er")  # imports and first-call costs out of the timings
    rows = []
    todo = [("LP", *c) for c in lp_cases(quick)] + [("NLP", *c) for c in nlp_cases(quick)]
    for kind, label, mech, params, inst, solvers in tqdm(todo, desc=NAME, unit="case"):
        ref = None
        for s in solvers:
            res = run_one(inst, mech, params, s)
            X = res.pop("X")
            if ref is None and X is not None:
                ref = res | {"X": X}
            diff = np.nan
            if X is not None and ref is not None:
                if mech in ("tsf-er", "mnw"):
                    diff = float(np.max(np.abs(X - ref["X"])) / max(1e-12, np.max(np.abs(ref["X"]))))
                elif mech == "utilitarian" and res.get("objective") is not None:
                    diff = abs(res["objective"] - ref["objective"]) / max(1e-12, abs(ref["objective"]))
            rows.append({"class": kind, "case": label, "mechanism": mech, "solver": s,
                         "users": inst.n_users, "servers": inst.n_servers, **res, "diff": diff})
            log.info("%s %s: %s in %.2f s", label, s, res.get("status"), res.get("wall", np.nan))
        pd.DataFrame(rows).to_csv(out / f"{NAME}.csv", index=False)
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{NAME}.csv", index=False)
    lic = licensed_solvers()
    _figure(df, out / f"{NAME}.png")
    (out / f"{NAME}.md").write_text(summary(df, lic, quick))
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "rows": len(df)}


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return "–"
        return f"{v:.2e}" if (abs(v) < 1e-2 and v != 0) or abs(v) >= 1e5 else f"{v:.3g}"
    return str(v)


def summary(df: pd.DataFrame, lic: pd.DataFrame, quick: bool) -> str:
    env = environment()
    table = {r["name"]: r["detail"] for r in solver_table()}
    cols = ["case", "solver", "status", "lps", "iterations", "wall", "max_kkt", "diff", "by"]
    notes = df[df.get("message", pd.Series(dtype=str)).fillna("").astype(str) != ""]
    lines = [f"# Solver comparison{' (quick run)' if quick else ''}", "",
             f"Pyomo {env['pyomo']}, highspy {env['highspy']}, {env['cores']} cores. Generated by "
             f"`python -m benchmarks {NAME}`; all rows in `{NAME}.csv`. Installed here: " +
             "; ".join(f"`{k}`: {v}" for k, v in table.items()) + ".", "",
             "`wall`: seconds for the whole mechanism; `max_kkt`: worst KKT residual over its solves "
             "(– : the solver gives no multipliers); `diff`: relative difference from the group's first "
             "row (X for tsf-er and MNW, the objective for utilitarian); `by`: how progressive filling "
             "found the blocked users.", ""]
    for kind in ("LP", "NLP"):
        sub = df[df["class"] == kind]
        lines += [f"## {kind}s", "", "| " + " | ".join(cols + (["ncp_residual"] if kind == "NLP" else []))
                  + " |", "|" + "---|" * (len(cols) + (kind == "NLP")) ]
        for _, r in sub.iterrows():
            vals = [_fmt(r.get(c)) for c in cols] + ([_fmt(r.get("ncp_residual"))] if kind == "NLP" else [])
            lines.append("| " + " | ".join(vals) + " |")
        lines.append("")
    if len(notes):
        lines += ["Messages of runs that did not end optimal:", ""]
        lines += [f"- {r.case}, `{r.solver}`: {r.message}" for r in notes.itertuples()]
        lines.append("")
    lines += ["## Licensed solvers", "",
              "None of these is reachable here (probed through Pyomo's solver factories and cvxpy):" if
              not lic.available.any() else "Probed through Pyomo and cvxpy:", "",
              "| solver | available | via |", "|---|---|---|"]
    lines += [f"| {r.solver} | {'yes' if r.available else 'no'} | {r.via} |" for r in lic.itertuples()]
    lines.append("")
    return "\n".join(lines)


def _figure(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8))
    for ax, kind in zip(axes, ("LP", "NLP")):
        sub = df[(df["class"] == kind) & df.wall.notna()]
        cases_ = list(dict.fromkeys(sub.case))
        solvers = list(dict.fromkeys(sub.solver))
        w = 0.8 / max(1, len(solvers))
        for k, s in enumerate(solvers):
            ss = sub[sub.solver == s].set_index("case").reindex(cases_)
            ax.bar(np.arange(len(cases_)) + k * w, ss.wall.to_numpy(dtype=float), w, label=s)
        ax.set_xticks(np.arange(len(cases_)) + 0.4 - w / 2, cases_, rotation=30, ha="right",
                      fontsize=8)
        ax.set(yscale="log", ylabel="seconds (whole mechanism)", title=f"{kind}s")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
