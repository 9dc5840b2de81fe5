"""Smoke tests of the solver/formulation benchmarks: small runs whose outputs must agree across
approaches (the numpy→highspy floor, cvxpy and fairalloc reach the same optimum). No timings are
asserted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks import _cvxpy, _floor, iterative, scaling
from benchmarks._workload import scaling_instance
from fairalloc import solve


def test_scaling_quick_run_agrees_across_approaches(tmp_path, monkeypatch):
    monkeypatch.setattr(scaling, "QUICK_SIZES", [(16, 4)])
    info = scaling.run(tmp_path, quick=True)
    assert {(tmp_path / f).exists() for f in info["files"]} == {True}
    df = pd.read_csv(tmp_path / "scaling.csv")
    assert set(df.approach) == {"fairalloc", "floor", "cvxpy", "cvxpy-highs"}
    assert (df.status == "optimal").all(), df[df.status != "optimal"]
    assert set(df.mechanism) == {*scaling.MAXMIN, *scaling.ONE_LP, "cru"}
    # the user totals (max-min: unique) or the objective (one-LP forms) match the floor's
    assert df.diff_vs_floor.max() < 1e-6
    fa = df[df.approach == "fairalloc"]
    assert (fa.lps[fa.workload == "mixed"] > 1).all()  # the mixed workload needs several LPs
    assert "## Agreement" in (tmp_path / "scaling.md").read_text()


@pytest.mark.parametrize("mechanism", ["drfh", "tsf", "tsf-er"])
def test_floor_cvxpy_and_fairalloc_reach_the_same_levels(mechanism):
    inst = scaling_instance(24, 4, seed=5, link_users=0.8)
    coeff = _floor.share_coeff(inst, mechanism)
    floor = _floor.progressive_filling(inst, coeff)
    cvx = _cvxpy.progressive_filling(inst, coeff)
    ours = solve(inst, mechanism)
    levels = [r["level"] for r in (ours.details.get("rounds") or ours.details["iterations"])]
    assert [r["level"] for r in floor.rounds] == pytest.approx(levels, rel=1e-9)
    assert [r["level"] for r in cvx.rounds] == pytest.approx(levels, rel=1e-6)  # Clarabel: IPM
    np.testing.assert_allclose(floor.x.sum(axis=1), ours.tasks, rtol=1e-6)
    np.testing.assert_allclose(cvx.x.sum(axis=1), ours.tasks, rtol=1e-5)


def test_one_lp_forms_agree():
    inst = scaling_instance(24, 4, seed=6)
    g = _floor.equal_shares(inst, _floor.share_coeff(inst, "tsf-er"))
    paper = solve(inst, "tsf-er", variant="paper")
    assert paper.details["iterations"][0]["level"] == pytest.approx(g.objective, rel=1e-9)
    w = _floor.share_coeff(inst, "relative-utilitarian")
    fl, cv = _floor.weighted_sum(inst, w), _cvxpy.weighted_sum(inst, w, solver="HIGHS")
    ours = solve(inst, "relative-utilitarian")
    assert ours.details["objective"] == pytest.approx(fl.objective, rel=1e-9)
    assert cv.objective == pytest.approx(fl.objective, rel=1e-7)


def test_rebuild_and_pyomo_handles_give_the_persistent_allocation():
    iterative._register()
    inst = scaling_instance(16, 4, seed=2, link_users=0.8)
    runs = {mode: iterative.run_one(inst, "tsf-er", {}, solver)
            for mode, solver in iterative.MODES.items()}
    assert {r["lps"] for r in runs.values()} == {runs["persistent"]["lps"]}
    for r in runs.values():
        np.testing.assert_allclose(r["X"], runs["persistent"]["X"], rtol=1e-7)
    assert len(runs["persistent"]["lp_seconds"]) == runs["persistent"]["lps"] > 1


def test_benchmarks_run_from_any_directory(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "fairalloc.benchmarks"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "scaling" in p.stdout and "partition" in p.stdout


def test_perserver_case_reports_status_time_and_certificate():
    """One case of the per-server study (in-process): status, iterations, certificate, α = 1 vs mnw."""
    from benchmarks.perserver import _case

    base = {"users": 8, "servers": 3, "family": "plain", "limit": 60.0}
    ps = _case({**base, "mechanism": "ps-dsf", "params": {}, "vs_mnw": False})
    assert ps["status"] == "converged" and ps["certified"] and ps["residual"] == 0.0
    apf = _case({**base, "mechanism": "apf-vds", "params": {"alpha": "1"}, "vs_mnw": True})
    assert apf["status"] == "optimal" and apf["certified"] and apf["vs_mnw"] < 1e-8
    per = _case({**base, "mechanism": "apf-vds", "params": {"alpha": "per-server"}, "vs_mnw": False})
    assert per["status"] == "optimal" and per["certified"]
    # α = inf at every fourth server: certified needs the scaled residual and Thm 1 there
    mix = _case({**base, "servers": 4, "mechanism": "apf-vds", "params": {"alpha": "inf-mix"},
                 "vs_mnw": False})
    assert mix["status"] == "optimal" and mix["certified"] and mix["residual"] <= 1e-8


def test_perserver_resumed_rows_are_numbers(tmp_path):
    """Rows kept by ``--resume`` come back from the CSV as text; merged with new rows they must be
    numbers again, or the figure plots the wall times as categories (1, 2, 3, …)."""
    import pandas as pd

    from benchmarks.perserver import numeric

    pd.DataFrame([{"users": 25, "servers": 4, "alpha": "inf", "wall_s": 12.5, "residual": 1e-12},
                  {"users": 50, "servers": 8, "alpha": "inf", "wall_s": None, "residual": None}]
                 ).to_csv(tmp_path / "p.csv", index=False)
    kept = pd.read_csv(tmp_path / "p.csv", dtype={"alpha": str}, keep_default_na=False)
    assert not pd.api.types.is_numeric_dtype(kept["wall_s"])  # what resume reads: text
    df = numeric(pd.concat([kept, pd.DataFrame([{"users": 100, "servers": 16, "alpha": "2",
                                                 "wall_s": 3.0, "residual": 2e-10}])]))
    assert df["wall_s"].tolist()[0] == 12.5 and df["wall_s"].isna().tolist() == [False, True, False]
    assert df["residual"].dtype == float and df["users"].tolist() == [25, 50, 100]
    assert df["alpha"].tolist() == ["inf", "inf", "2"]


def test_perserver_resume_keeps_the_plans_order(tmp_path, monkeypatch):
    """``--resume`` keeps the rows it has and runs only the series it lacks; the page still lists every
    case in the plan's order (here the first series is missing: it runs, and comes first)."""
    import pandas as pd

    import benchmarks.perserver
    from benchmarks.perserver import KEY, NAME, _key, cases, run

    monkeypatch.setattr(benchmarks.perserver, "_accepts", lambda *a: True)  # (the plan without its probes)
    monkeypatch.setattr(benchmarks.perserver, "_run_child", lambda spec: {"status": "optimal", "wall_s": 0.5})
    series = cases(quick=True)
    plan = [{**s, "users": N, "servers": K, "alpha": s["alpha"] or ""} for s in series for N, K in s["sizes"]]
    first = len(series[0]["sizes"])
    rows = [{**{k: c[k] for k in KEY}, "status": "optimal", "wall_s": 1.0 + j, "algorithm_used": "x",
             "iterations": 1, "lps": None, "message": "", "certified": True, "residual": 0.0, "vs_mnw": None}
            for j, c in enumerate(plan)]
    pd.DataFrame(rows[first:]).to_csv(tmp_path / f"{NAME}.csv", index=False)
    run(tmp_path, quick=True, resume=True)
    out = pd.read_csv(tmp_path / f"{NAME}.csv", dtype={"alpha": str}, keep_default_na=False)
    assert [_key(r) for r in out.to_dict("records")] == [_key(c) for c in plan]
    assert out["wall_s"].tolist() == [0.5] * first + [1.0 + j for j in range(first, len(plan))]
