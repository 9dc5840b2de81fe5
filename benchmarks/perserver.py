r"""Per-server mechanisms at scale: PS-DSF (every algorithm) and αPF-VDS (α ∈ {0.5, 1, 2, 3, ∞}, every
algorithm) from 25 × 4 to 1000 × 250.

Instances: :func:`fairalloc.generate.random_instance` with ``R = 4`` server resources, no missing
resources (``missing=0``), seed 1, family ``plain`` at every size; at 200 × 32 (50 × 8 with ``--quick``)
every family of :data:`fairalloc.generate.FAMILIES` the mechanism accepts. Each case runs in a fresh
process with the mechanism's ``--time-limit`` (``LIMIT`` seconds for the default algorithms,
``OTHER_LIMIT`` for the others; the case is killed ``GRACE`` seconds later), and records wall time
(imports excluded), status, the algorithm's iteration count, the certificate (PS-DSF: [PSDSF] Thm 1
bottlenecks; αPF-VDS: the scaled NCP residual of (28)–(31), ``details.ncp_residual_scaled``) and,
for α = 1 up to ``MNW_MAX`` pairs, the largest relative difference of the user totals from ``mnw``
([APF] Thm 2). An algorithm that fails or passes its limit at one size is not run at the larger sizes of
the same series (row status ``skipped``). An explicit ``algorithm`` equal to the default is not run twice
(its series is ``default``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "perserver"
DESCRIPTION = "ps-dsf and apf-vds (alpha 0.5, 1, 2, 3, inf), every algorithm, 25x4 to 1000x250"

log = logging.getLogger("benchmarks.perserver")

ROOT = Path(__file__).resolve().parent.parent
R = 4
SEED = 1
LIMIT = 120.0  # seconds per case of a default algorithm
OTHER_LIMIT = 60.0  # ... and of the others (cross-checks; their series stop at the first size over it)
GRACE = 30.0
MNW_MAX = 200 * 32  # users x servers up to which alpha = 1 is compared with mnw
SIZES = [(25, 4), (50, 8), (100, 16), (200, 32), (400, 64), (1000, 250)]
QUICK_SIZES = [(25, 4), (50, 8)]
FAMILY_SIZE = (200, 32)
QUICK_FAMILY_SIZE = (50, 8)
ALPHAS = ("0.5", "1", "2", "3", "inf")
# (mechanism, algorithm) series; "default" = no algorithm parameter (the mechanism's default)
ALGORITHMS = {"ps-dsf": ("default", "fast", "paper", "best-response"),
              "apf-vds": ("default", "newton", "ncp", "best-response", "ps-mfa")}
PER_SERVER_ALPHAS = ("0.5", "1", "2", "3")
MIXED_ALPHAS = ("inf", "2", "2", "2")  # PS-DSF at every fourth server, α = 2 elsewhere
CYCLED = {"per-server": PER_SERVER_ALPHAS, "inf-mix": MIXED_ALPHAS}  # α_i cycling over the servers
# extra αPF-VDS series (plain instances): per-server α_i and the (22) class at the family size, the mix
# with α = inf servers at every size
EXTRA = ({"alpha": "per-server"}, {"alpha": "inf-mix"}, {"alpha": "2", "A": "2", "B": "0.5"})
ITERATION_KEYS = ("iterations", "newton_iterations", "sweeps", "rounds", "periods")


# ---------------------------------------------------------------------- one case (child process)
def _case(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from fairalloc import solve
    from fairalloc.generate import FAMILIES, random_instance

    N, K = spec["users"], spec["servers"]
    inst = random_instance(SEED, N, K, R, missing=0.0, **FAMILIES[spec["family"]])
    params: dict[str, Any] = dict(spec["params"])
    if params.get("alpha") in CYCLED:  # §3.4: heterogeneous objectives, α_i cycling over servers
        cycle = CYCLED[params["alpha"]]
        params["alpha"] = ",".join(cycle[i % len(cycle)] for i in range(K))
    t0 = time.perf_counter()
    res = solve(inst, spec["mechanism"], time_limit=spec["limit"], **params)
    wall = time.perf_counter() - t0
    d = res.details
    it = next((d[k] for k in ITERATION_KEYS if isinstance(d.get(k), (int, float))), None)
    row: dict[str, Any] = {"status": res.status.value, "wall_s": wall, "algorithm_used": d.get("algorithm"),
                           "iterations": it, "lps": d.get("lps"), "message": (res.message or "")[:160]}
    cert = d.get("certificate")
    if isinstance(cert, dict):
        row["certified"] = bool(cert.get("holds"))
        row["residual"] = float(len(cert.get("failures", [])))  # failing (user, server) pairs
    if "ncp_residual" in d and params.get("alpha") != "inf":  # scale-free residual (finite α)
        resid = d.get("ncp_residual_scaled", d["ncp_residual"])
        row["residual"] = float(resid)
        row["certified"] = bool(resid <= 1e-8) and row.get("certified", True)  # (inf-mix: and Thm 1)
    if spec.get("vs_mnw") and res.ok:
        ref = solve(inst, "mnw")
        X, Y = np.asarray(res.tasks, float), np.asarray(ref.tasks, float)
        row["vs_mnw"] = float(np.max(np.abs(X - Y) / np.maximum(np.abs(Y), 1e-12)))
    return row


def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        path = f.name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", f"{__package__}.{NAME}", path], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=spec["limit"] + GRACE)
    except subprocess.TimeoutExpired:
        return {"status": "killed", "wall_s": time.perf_counter() - t0,
                "message": f"no answer {GRACE:.0f} s after the time limit"}
    finally:
        os.unlink(path)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "crash", "wall_s": time.perf_counter() - t0, "message": tail[:160]}
    return json.loads(lines[-1])


# ---------------------------------------------------------------------- the study
def _accepts(mechanism: str, params: dict[str, Any], family: str) -> bool:
    """Whether the mechanism takes these parameters and this family (a small instance of it; a refusal
    comes before any solving, so one second is enough: ps-mfa runs 5 s to its iteration cap there)."""
    from fairalloc.errors import FairallocError
    from fairalloc.generate import FAMILIES, random_instance
    from fairalloc.registry import get_mechanism

    try:
        get_mechanism(mechanism).parse_params(params)
    except FairallocError:
        return False
    from fairalloc.api import solve

    try:
        res = solve(random_instance(0, 3, 2, 2, missing=0.0, **FAMILIES[family]), mechanism, time_limit=1.0,
                    **params)
    except FairallocError:
        return False
    return res.status.value not in ("invalid", "unsupported")


def _default_algorithm(mechanism: str) -> str:
    from fairalloc.registry import get_mechanism

    return next(str(p.default) for p in get_mechanism(mechanism).params if p.name == "algorithm")


def cases(quick: bool) -> list[dict[str, Any]]:
    """Series of cases (one series = one mechanism/algorithm/α/family over growing sizes)."""
    from fairalloc.generate import FAMILIES

    sizes = QUICK_SIZES if quick else SIZES
    fam_size = QUICK_FAMILY_SIZE if quick else FAMILY_SIZE
    series: list[dict[str, Any]] = []
    for mech, algos in ALGORITHMS.items():
        for alpha in (ALPHAS if mech == "apf-vds" else (None,)):
            for algo in algos:
                if algo == _default_algorithm(mech):
                    continue  # the "default" series
                params: dict[str, Any] = {} if algo == "default" else {"algorithm": algo}
                if alpha is not None:
                    params["alpha"] = alpha
                if not _accepts(mech, params, "plain"):
                    continue
                series.append({"mechanism": mech, "algorithm": algo, "alpha": alpha, "family": "plain",
                               "params": params, "sizes": sizes})
            # every family at one size, default algorithm only (α = ∞ is PS-DSF's series)
            params = {} if alpha is None else {"alpha": alpha}
            for fam in (FAMILIES if alpha != "inf" else ()):
                if fam != "plain" and _accepts(mech, params, fam):
                    series.append({"mechanism": mech, "algorithm": "default", "alpha": alpha,
                                   "family": fam, "params": params, "sizes": [fam_size]})
    for extra in EXTRA:
        cycled = extra["alpha"] in CYCLED
        if _accepts("apf-vds", {**extra, "alpha": "1"} if cycled else extra, "plain"):
            label = extra["alpha"] if cycled else "(22) " + ",".join(f"{k}={v}" for k, v in extra.items())
            series.append({"mechanism": "apf-vds", "algorithm": "default", "alpha": label,
                           "family": "plain", "params": dict(extra),
                           "sizes": sizes if extra["alpha"] == "inf-mix" else [fam_size]})
    return series


KEY = ("mechanism", "algorithm", "alpha", "family", "users", "servers")


def _key(case: dict[str, Any]) -> tuple[str, ...]:
    """A case's identity (``KEY``'s fields as text; no α is ``""``): a plan's, a row's or a CSV record's."""
    return tuple("" if case[k] is None else str(case[k]) for k in KEY)


def _series_label(s: dict[str, Any]) -> str:
    return " ".join(str(v) for v in (s["mechanism"], s["alpha"] or "", s["algorithm"], s["family"]) if v)


def run(out: Path, quick: bool = False, resume: bool = False, only: str | None = None) -> dict[str, Any]:
    """``resume``: keep the rows of ``out/perserver.csv`` (a series whose rows are all there is not run
    again); ``only``: run just the series whose label (``mechanism α algorithm family``) contains it."""
    import pandas as pd
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    limits = (30.0, 30.0) if quick else (LIMIT, OTHER_LIMIT)
    plan = cases(quick)
    keys_of = [[_key({**s, "users": N, "servers": K}) for N, K in s["sizes"]] for s in plan]
    # the page lists the cases in the plan's order, whichever of them a resumed run kept
    position = {k: j for j, k in enumerate(k for keys in keys_of for k in keys)}
    rows: list[dict[str, Any]] = []
    done: dict[tuple[str, ...], dict[str, Any]] = {}
    if resume and (out / f"{NAME}.csv").exists():
        old = pd.read_csv(out / f"{NAME}.csv", dtype={"alpha": str}, keep_default_na=False)
        for r in old.to_dict("records"):
            done[_key(r)] = {k: (None if v == "" else v) for k, v in r.items()}
    kept = []
    for s, keys in zip(plan, keys_of):
        if all(k in done for k in keys) or (only and only not in _series_label(s)):
            rows += [done[k] for k in keys if k in done]
        else:
            kept.append(s)
    plan = kept
    total = sum(len(s["sizes"]) for s in plan)
    with tqdm(total=total, desc=NAME, unit="case") as bar:
        for s in plan:
            stop = False
            limit = limits[0] if s["algorithm"] == "default" else limits[1]
            for N, K in s["sizes"]:
                base = {"mechanism": s["mechanism"], "algorithm": s["algorithm"], "alpha": s["alpha"],
                        "family": s["family"], "users": N, "servers": K}
                if stop:
                    rows.append({**base, "status": "skipped",
                                 "message": "failed or passed the limit at a smaller size"})
                else:
                    spec = {**base, "params": s["params"], "limit": limit,
                            "vs_mnw": s["alpha"] == "1" and N * K <= MNW_MAX}
                    row = {**base, **_run_child(spec)}
                    rows.append(row)
                    log.info("%s", row)
                    stop = row["status"] not in ("optimal", "converged") or row["wall_s"] > limit
                bar.update()
                pd.DataFrame(rows).to_csv(out / f"{NAME}.csv", index=False)
    rows.sort(key=lambda r: position.get(_key(r), len(position)))
    df = numeric(pd.DataFrame(rows))
    df.to_csv(out / f"{NAME}.csv", index=False)
    _figure(df, out / f"{NAME}.png")
    (out / f"{NAME}.md").write_text(summary(df, quick, limits))
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "rows": len(df)}


NUMERIC = ("users", "servers", "wall_s", "iterations", "lps", "residual", "vs_mnw")


def numeric(df: Any) -> Any:
    """``df`` with its number columns as numbers: rows kept by ``--resume`` come back from the CSV as
    text (``keep_default_na=False`` keeps α = "inf" and empty cells as written), and a column mixing
    text and floats plots as categories (the wall times of the kept rows became 1, 2, 3, …)."""
    import pandas as pd

    for c in NUMERIC:
        if c in df:
            df[c] = pd.to_numeric(df[c].replace("", None), errors="coerce")
    return df


def _label(r: Any) -> str:
    a = "" if r["alpha"] is None or r["alpha"] != r["alpha"] or r["alpha"] == "" else f" α={r['alpha']}"
    return f"{r['mechanism']}{a} {r['algorithm']}"


def _figure(df: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plain = df[(df["family"] == "plain") & df["status"].isin(["optimal", "converged"])].copy()
    plain["pairs"] = plain["users"] * plain["servers"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, mech in zip(axes, ("ps-dsf", "apf-vds")):
        sub = plain[plain["mechanism"] == mech]
        groups = list(sub.groupby(sub.apply(_label, axis=1)))
        for j, (label, g) in enumerate(groups):  # 20 colours, then another marker: no two lines alike
            g = g.sort_values("pairs")
            ax.plot(g["pairs"], g["wall_s"], "os^"[j // 20 % 3] + "-", color=plt.cm.tab20(j % 20),
                    label=label.replace(f"{mech} ", "").replace(mech, ""), ms=3)
        ax.set(xscale="log", yscale="log", xlabel="users × servers", title=mech)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2, loc="upper left")
    axes[0].set_ylabel("wall time (s), certified runs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, str):  # rows kept by --resume come back from the CSV as text
        try:
            v = float(v)
        except ValueError:
            return v or "–"
    if isinstance(v, float):
        return "–" if v != v else f"{v:.3g}"
    return str(v)


def summary(df: Any, quick: bool, limits: tuple[float, float]) -> str:
    from ._runner import environment

    env = environment()
    head = (f"# Per-server mechanisms at scale\n\n"
            f"Python {env['python']}, Pyomo {env['pyomo']}, highspy {env['highspy']}, {env['cores']} cores; "
            f"generated by `python -m benchmarks {NAME}{' --quick' if quick else ''}`; every row in "
            f"`{NAME}.csv`. `random_instance(1, users, servers, 4, missing=0)` of the family named; each "
            f"case in a fresh process with `--time-limit {limits[0]:.0f}` (default algorithms; others "
            f"{limits[1]:.0f}). `residual`: αPF-VDS's scaled NCP residual "
            "(`details.ncp_residual_scaled`); PS-DSF's (and αPF-VDS's at α = inf) number of (user, "
            "server) pairs failing the Thm 1 certificate. α `per-server`: α_i cycling 0.5, 1, 2, 3 over "
            "the servers; `inf-mix`: α = inf at every fourth server (PS-DSF there) and 2 elsewhere, its "
            "residual that of the whole system (the inf servers' pairs in leximin form) and Thm 1 "
            "checked at the inf servers as well. `vs mnw`: largest relative difference of the "
            "totals from `mnw` (α = 1). "
            "`skipped`: the same series failed or passed the limit at a smaller size.\n\n")
    cols = ["mechanism", "alpha", "algorithm", "family", "users", "servers", "status", "wall_s",
            "iterations", "residual", "vs_mnw", "algorithm_used"]
    for c in cols:
        if c not in df:
            df[c] = None
    lines = ["| mechanism | α | algorithm | family | users | servers | status | wall (s) | iterations | "
             "residual | vs mnw | ran |", "|" + "---|" * len(cols)]
    for _, r in df[cols].iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    return head + "\n".join(lines) + f"\n\n![{NAME}]({NAME}.png)\n"


if __name__ == "__main__":  # one case: python -m benchmarks.perserver CASE.json
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pyomo").setLevel(logging.ERROR)
    from fairalloc.solvers.quiet import document_stdout

    spec_ = json.loads(Path(sys.argv[1]).read_text())
    with document_stdout() as doc:
        print(json.dumps(_case(spec_), default=float), file=doc)
