"""[APF] Lemma 2, Cor. 4 and Thm 7: with B_i > 0 the αPF-VDS totals X_n are unique — on random instances.

Lemma 2: the solution set of the NCP (28)–(29) is connected, so (Cor. 4) it is unique if it is locally
unique; Thm 7: with g' of (22), α_i ≥ 1, A_i ≥ 0, B_i > 0 and one binding resource per server, the solution
is locally unique in the totals {X_n}. A check that can fail: solve each random instance by independent
routes and compare the totals —

- ``ncp``: the NCP (28)–(31) as one Pyomo MPEC model, by Ipopt;
- ``best-response``: Gauss–Seidel sweeps of exact per-server best responses (12)–(15);
- the same sweeps on the instance with users and servers in reverse order (another path, another start
  of the sweep);
- ``ps-mfa`` ([APF] Alg. I) in the full run, compared when it converges.

Per instance it also records whether Thm 7's premise holds at the NCP solution (at most one saturated
resource per server: a proxy for "λ_{i,r} > 0 for one resource") — the theorem claims uniqueness only
then. Writes ``apf_uniqueness.csv``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

NAME = "apf_uniqueness"
DESCRIPTION = "[APF] Lemma 2 / Thm 7: αPF-VDS totals agree across algorithms and orders when B > 0"
ALPHAS = (1.0, 2.0, 3.0)
B = 0.5
SEEDS_FULL, SEEDS_QUICK = 10, 2
AGREE = 1e-6  # relative, on the totals
BR_ITER = 5000  # best-response sweeps (the default 500 stops short on some instances)


def reversed_instance(inst: Any) -> Any:
    """The same instance with users and servers listed in reverse order."""
    from fairalloc.instance import Instance

    u, s = slice(None, None, -1), slice(None, None, -1)
    return Instance.from_arrays(capacity=inst.capacity[s], demand=inst.demand[u], weight=inst.weight[u],
                                eligible=inst.eligible[u][:, s], users=list(inst.users)[u],
                                servers=list(inst.servers)[s], resources=inst.resources,
                                name=f"{inst.name}-reversed")


def saturated_per_server(inst: Any, x: np.ndarray, tol: float = 1e-6) -> np.ndarray:
    """Number of resources at capacity on each server under ``x``."""
    used = np.einsum("ni,nr->ir", x, inst.demand)
    cap = inst.capacity
    return ((cap > 0) & (used >= cap * (1 - tol))).sum(axis=1)


def check(seed: int, alpha: float, with_psmfa: bool) -> dict[str, Any]:
    from fairalloc import solve
    from fairalloc.generate import random_instance

    inst = random_instance(seed, n_users=4, n_servers=3, n_resources=2, placement=seed % 2 == 1)
    kw = {"alpha": alpha, "B": B, "gains": False}
    ref = solve(inst, "apf-vds", algorithm="ncp", **kw)
    runs = {"best-response": (solve(inst, "apf-vds", algorithm="best-response", max_iter=BR_ITER, **kw), 1),
            "best-response, reversed": (solve(reversed_instance(inst), "apf-vds", algorithm="best-response",
                                              max_iter=BR_ITER, **kw), -1)}
    if with_psmfa:
        runs["ps-mfa"] = (solve(inst, "apf-vds", algorithm="ps-mfa", **kw), 1)
    # only routes that converged are compared: an iteration cap says nothing about uniqueness
    routes = {k: r.tasks[::d] for k, (r, d) in runs.items() if r.status.value in ("optimal", "converged")}
    psmfa_status = runs["ps-mfa"][0].status.value if with_psmfa else ""
    scale = np.maximum(np.abs(ref.tasks), 1e-12)
    diff = max(float(np.max(np.abs(X - ref.tasks) / scale)) for X in routes.values())
    sat = saturated_per_server(inst, ref.x)
    return {"seed": seed, "alpha": alpha, "B": B, "users": inst.n_users, "servers": inst.n_servers,
            "placement": seed % 2 == 1, "ncp_status": ref.status.value, "routes": len(routes) + 1,
            "routes_capped": len(runs) - len(routes),
            "psmfa_status": psmfa_status, "max_rel_diff": diff, "agree": diff <= AGREE,
            "thm7_premise": bool(np.all(sat <= 1)), "saturated": ",".join(map(str, sat))}


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = range(SEEDS_QUICK if quick else SEEDS_FULL)
    todo = [(s, a) for a in ALPHAS for s in seeds]
    df = pd.DataFrame([check(s, a, not quick) for s, a in tqdm(todo, desc="uniqueness", unit="instance")])
    df.to_csv(out / f"{NAME}.csv", index=False)
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.md", f"{NAME}.png"], **report(df, out, quick)}


def report(df: pd.DataFrame, out: pathlib.Path, quick: bool) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = df[df.ncp_status == "optimal"]
    lines = [f"# [APF] Lemma 2 / Thm 7: uniqueness of the αPF-VDS totals for B > 0 "
             f"({'quick' if quick else 'full'} run)", "",
             f"`fairalloc.generate.random_instance(seed, n_users=4, n_servers=3, n_resources=2)` (placement "
             f"constraints for odd seeds), g' of (22) with A = 1, B = {B:g}, α ∈ "
             f"{{{', '.join(f'{a:g}' for a in ALPHAS)}}}. Routes: NCP, best-response sweeps, the sweeps on "
             "the reversed instance" + ("" if quick else ", PS-MFA") + "; only routes that converge are "
             "compared (a route stopped by its iteration cap is counted in `routes_capped`).", "",
             "| α | instances | NCP optimal | all routes agree (rel. 1e-6) | largest relative difference "
             "| Thm 7 premise holds | PS-MFA converged |", "|---|---|---|---|---|---|---|"]
    for a, g in df.groupby("alpha"):
        go = g[g.ncp_status == "optimal"]
        lines.append(f"| {a:g} | {len(g)} | {len(go)} | {int(go.agree.sum())} | "
                     f"{go.max_rel_diff.max():.1e} | {int(go.thm7_premise.sum())} | "
                     f"{int((g.psmfa_status == 'converged').sum()) if not quick else '—'} |")
    verdict = ("**Agrees with the paper**: on every instance the independent routes give the same totals, on "
               "the instances where Thm 7's premise holds and on the others."
               if len(ok) and ok.agree.all() else
               "**Does not agree**: some instances have different totals by different routes (rows with "
               "`agree = False` in the CSV).")
    lines += ["", verdict, "", f"![uniqueness]({NAME}.png)", ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for a, g in ok.groupby("alpha"):
        ax.semilogy(g.seed, np.maximum(g.max_rel_diff, 1e-16), "o", label=f"α = {a:g}")
    ax.axhline(AGREE, ls="--", c="k", lw=0.8)
    ax.set_xlabel("instance seed")
    ax.set_ylabel("largest relative difference of X")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{NAME}.png", dpi=110)
    plt.close(fig)
    return {"agree": int(ok.agree.sum()), "instances": len(df)}
