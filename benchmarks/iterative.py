r"""Iterative mechanisms (issue 6, item 3): how many LPs, time per LP, persistent re-solve vs rebuild.

Every iterative mechanism edits one Pyomo model between LPs (freezes users, changes offsets) and
re-solves it through its solver handle. Three handles are compared on the same runs:

- ``persistent`` — fairalloc's :class:`~fairalloc.solvers.highs.HighsBridge`: the model is translated
  once; after an edit only bounds, new rows and changed coefficients go to HiGHS, which keeps its
  basis and re-solves as each loop asks (``HighsBridge.resolve``: primal simplex from the previous
  basis for progressive filling and Algorithm 1, HiGHS's warm choice for PS-DSF; IPM, which has no
  warm start, on LPs with ≥ 20 000 columns);
- ``rebuild`` — the model translated again into a fresh HiGHS object before every LP (cold start):
  what a loop that calls a one-shot solver does;
- ``pyomo-highs`` — Pyomo's own persistent HiGHS interface (``contrib.solver`` ``highs``), which
  detects the edits itself (given IPM from 20 000 columns on, as the bridge chooses, but with
  crossover: the max-min loops read blocked users from interior multipliers only through the bridge).
  ``persistent`` and ``rebuild`` run the max-min rounds of ≥ 50 000 columns without crossover, the
  bridge's default.

Each run has a time limit of 15 minutes.

Cases: progressive filling (drfh, tsf, tsf-er) on the ``mixed`` scaling workload (4–5 LPs) at
256 × 32 and 1024 × 128; [TSFER] Algorithm 1 (``tsf-er -p variant=paper``) with task limits (users
saturate one after another); PS-DSF's per-server best responses (thousands of small LPs) on a
placement-constrained random instance. For each: LPs, iterations, seconds of Pyomo model building,
translation, HiGHS and solution loading, and time per LP; every mode must give the same ``X``.
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

from fairalloc.generate import random_instance
from fairalloc.instance import Instance
from fairalloc.registry import get_mechanism
from fairalloc.solvers import SOLVERS, Session, SolverSpec
from fairalloc.solvers.highs import IPM_ABOVE, HighsBridge

from ._runner import environment
from ._workload import scaling_instance

NAME = "iterative"
DESCRIPTION = ("iterative mechanisms: LPs, time per LP, persistent re-solve vs rebuild vs Pyomo's "
               "persistent HiGHS")

log = logging.getLogger("benchmarks.iterative")

TIME_LIMIT = 900.0  # seconds per run: a mode that needs longer ends with status time_limit

MODES = {"persistent": "highs", "rebuild": "highs-rebuild", "pyomo-highs": "pyomo-highs"}


class RebuildHighs:
    """A solver handle that translates the model into a new HiGHS object before every LP after an
    edit: the cost of a loop without a persistent interface."""

    name = "highs-rebuild"
    # settings the loops make on their handle (progressive filling: IPM without crossover on wide LPs,
    # the re-solve start): kept for every new HiGHS object, so both modes solve the same way (before, they
    # landed on this wrapper and the rebuilt models ran IPM with crossover)
    SETTINGS = ("interior", "resolve")

    def __init__(self, model: Any, algorithm: str = "choose", options: dict[str, Any] | None = None
                 ) -> None:
        self.model, self.args = model, (algorithm, options)
        self.settings: dict[str, Any] = {}
        self.inner = HighsBridge(model, algorithm, options)
        self.build_seconds = self.inner.build_seconds
        self.stale = False

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.SETTINGS:
            self.settings[name] = value
            setattr(self.inner, name, value)
        else:
            object.__setattr__(self, name, value)

    def update(self, variables: bool = True) -> None:
        self.stale = True

    def update_rows(self, constraints: list[Any]) -> None:
        self.stale = True

    def solve(self, time_limit: float | None = None, options: dict[str, Any] | None = None,
              kkt: bool = True) -> Any:
        extra = 0.0
        if self.stale:
            t0 = time.perf_counter()
            self.inner = HighsBridge(self.model, *self.args)
            for name, value in self.settings.items():
                setattr(self.inner, name, value)
            extra = time.perf_counter() - t0
            self.stale = False
        out = self.inner.solve(time_limit, options, kkt)
        out.build_seconds += extra
        return out

    def __getattr__(self, name: str) -> Any:  # duals, activities, values, ...
        return getattr(self.inner, name)


def _register() -> None:
    if "highs-rebuild" not in SOLVERS:
        SOLVERS["highs-rebuild"] = SolverSpec(
            "highs-rebuild", ("lp", "milp"), "HiGHS, model translated anew before every LP "
            "(benchmark only)", lambda model, options: RebuildHighs(model, options=options),
            lambda: "benchmark")


def _limited(inst: Instance, seed: int) -> Instance:
    """Half of the users get a task limit ``U(0.3, 1.5)·η/N``, around an equal share of their
    monopoly tasks, so that they saturate over several rounds of Algorithm 1."""
    rng = np.random.default_rng(seed)
    N = inst.n_users
    T = np.where(rng.random(N) < 0.5, rng.uniform(0.3, 1.5, N) * inst.eta / N, np.inf)
    return inst.replace(tasks=T, name=inst.name + "-limits")


def cases(quick: bool) -> list[tuple[str, str, dict[str, Any], Instance]]:
    sizes = [(64, 8)] if quick else [(256, 32), (1024, 128)]
    out = []
    for N, K in sizes:
        inst = scaling_instance(N, K, link_users=0.8)
        for mech in ("drfh", "tsf", "tsf-er"):
            out.append((f"{mech} {N}×{K}", mech, {}, inst))
        out.append((f"tsf-er paper {N}×{K} limits", "tsf-er", {"variant": "paper"},
                    _limited(scaling_instance(N, K, link_users=1.0), 1)))
    ps = random_instance(1, 12 if quick else 40, 4 if quick else 6, 3, placement=True)
    # best responses: the algorithm made of LPs (the default, fast, solves none)
    out.append((f"ps-dsf {ps.n_users}×{ps.n_servers}", "ps-dsf", {"algorithm": "best-response"}, ps))
    return out


def run_one(inst: Instance, mech: str, params: dict[str, Any], solver: str) -> dict[str, Any]:
    """Run ``mech`` with ``solver``; per-LP outcomes from the session."""
    m = get_mechanism(mech)
    options = {}
    if solver == "pyomo-highs" and inst.n_users * inst.n_servers >= IPM_ABOVE:
        # the algorithm fairalloc's bridge picks at this size; HiGHS's own choice (dual simplex)
        # stalls on these degenerate LPs (over 30 min for drfh 1024 × 128 before this was set)
        options = {"solver": "ipm"}
    session = Session(solver=solver, time_limit=TIME_LIMIT, options=options)
    t0 = time.perf_counter()
    sol = m.solve(inst, session, **m.parse_params(params))
    wall = time.perf_counter() - t0
    outs = session.outcomes
    st = session.stats
    solve_s, load_s, trans_s = st.solve_seconds, st.load_seconds, st.build_seconds
    return {"status": sol.status.value, "lps": st.solves, "iterations": st.iterations,
            "wall": wall, "translate": trans_s, "solve": solve_s, "solution_load": load_s,
            "other": wall - solve_s - load_s - trans_s,
            "per_lp": wall / max(1, st.solves), "X": sol.allocation.sum(axis=1),
            "lp_seconds": [o.solve_seconds + o.build_seconds + o.load_seconds for o in outs]}


def run(out: Path, quick: bool = False) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _register()
    warm = scaling_instance(8, 2)
    for solver in MODES.values():  # imports and first-call costs out of the measurements
        run_one(warm, "tsf-er", {}, solver)
    rows, per_lp = [], []
    todo = cases(quick)
    for label, mech, params, inst in tqdm(todo, desc=NAME, unit="case"):
        ref = None
        for mode, solver in MODES.items():
            res = run_one(inst, mech, params, solver)
            X = res.pop("X")
            if ref is None:
                ref = X
            res["diff_X"] = float(np.max(np.abs(X - ref)) / max(1e-12, np.max(np.abs(ref))))
            lp_s = res.pop("lp_seconds")
            rows.append({"case": label, "mechanism": mech, "mode": mode, "users": inst.n_users,
                         "servers": inst.n_servers, **res})
            per_lp += [{"case": label, "mode": mode, "lp": k + 1, "seconds": s}
                       for k, s in enumerate(lp_s)]
            log.info("%s %s: %d LPs in %.2f s", label, mode, res["lps"], res["wall"])
        pd.DataFrame(rows).to_csv(out / f"{NAME}.csv", index=False)
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{NAME}.csv", index=False)
    lp = pd.DataFrame(per_lp)
    _figure(df, lp, out / f"{NAME}.png")
    (out / f"{NAME}.md").write_text(summary(df, lp, quick))
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "rows": len(df)}


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return "–" if np.isnan(v) else (f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}")
    return str(v)


def summary(df: pd.DataFrame, lp: pd.DataFrame, quick: bool) -> str:
    env = environment()
    piv = df.pivot_table(index="case", columns="mode", values="wall", aggfunc="first")
    lines = [f"# Iterative mechanisms: persistent re-solve vs rebuild{' (quick run)' if quick else ''}",
             "",
             f"Pyomo {env['pyomo']}, highspy {env['highspy']}, {env['cores']} cores. Generated by "
             f"`python -m benchmarks {NAME}`; all rows in `{NAME}.csv`. Seconds of wall time; "
             "`other` = everything outside the solver handle (Pyomo model building, the mechanism's "
             "own loop, pushing edits to the handle). `diff X` = largest relative difference of the "
             "user totals from the persistent run. `persistent`: fairalloc's bridge (re-solves by "
             "primal simplex from the previous basis in the max-min loops, HiGHS's warm choice in "
             "PS-DSF); `rebuild`: a new HiGHS model for every LP (cold); `pyomo-highs`: Pyomo's "
             "persistent `highs` interface. LPs with ≥ 20 000 columns go to IPM in all three; in the "
             "max-min loops' rounds of ≥ 50 000 columns without crossover in `persistent` and "
             "`rebuild` (fairalloc's default, the blocked users read from the interior multipliers), "
             "with crossover in `pyomo-highs` (no such reading there).",
             "",
             "| case | mode | LPs | iterations | total | per LP | translate | HiGHS | load | other | "
             "diff X |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in (
            "case", "mode", "lps", "iterations", "wall", "per_lp", "translate", "solve",
            "solution_load", "other", "diff_X")) + " |")
    lines += ["", "Speed-up of the persistent bridge (total time):", "",
              "| case | rebuild / persistent | pyomo-highs / persistent |", "|---|---|---|"]
    for case, r in piv.iterrows():
        lines.append(f"| {case} | {_fmt(r.get('rebuild', np.nan) / r['persistent'])} | "
                     f"{_fmt(r.get('pyomo-highs', np.nan) / r['persistent'])} |")
    lines.append("")
    return "\n".join(lines)


def _figure(df: pd.DataFrame, lp: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8))
    ax = axes[0]
    cases_ = list(dict.fromkeys(df.case))
    width = 0.27
    for k, mode in enumerate(MODES):
        sub = df[df["mode"] == mode].set_index("case").reindex(cases_)
        xs = np.arange(len(cases_)) + (k - 1) * width
        bottom = np.zeros(len(cases_))
        for part, color in (("other", "#bbbbbb"), ("translate", "#e4a05a"), ("solve", "#4c72b0"),
                            ("solution_load", "#55a868")):
            vals = sub[part].fillna(0).to_numpy()
            ax.bar(xs, vals, width, bottom=bottom, color=color,
                   label=part if k == 0 else None, edgecolor="black" if mode == "persistent" else
                   None, hatch={"rebuild": "//", "pyomo-highs": ".."}.get(mode))
            bottom += vals
    ax.set_xticks(np.arange(len(cases_)), cases_, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="seconds", yscale="log",
           title="total time: persistent (plain) | rebuild (//) | pyomo-highs (..)")
    ax.legend(fontsize=8)
    ax = axes[1]
    big = [c for c in cases_ if c.startswith("tsf-er ") and "paper" not in c][-1:]
    for case in big + [c for c in cases_ if c.startswith("ps-dsf")]:
        for mode in MODES:
            s = lp[(lp.case == case) & (lp["mode"] == mode)]
            if len(s):
                ax.semilogy(s.lp, s.seconds, ".", ms=3, label=f"{case}, {mode}")
    ax.set(xlabel="LP number", ylabel="seconds (translate + HiGHS + load)", title="time per LP")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
