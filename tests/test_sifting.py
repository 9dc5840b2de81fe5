"""Sifting in the HiGHS bridge (solvers/highs.py ``Sifter``): forced on, every mechanism's LPs give the
full LP's answer (sifting off) — objective, max-min levels, allocations after the canonical
tie-break — and the multipliers certify the full LP (every column priced)."""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest
from link_instances import link_instance

from fairalloc import solve
from fairalloc.errors import ParameterError
from fairalloc.instance import Instance
from fairalloc.solvers.highs import HighsBridge


def _instance(seed: int, N: int = 12, K: int = 5, limits: bool = False,
              eligible: bool = False) -> Instance:
    return link_instance(seed, N, K, limits, eligible, prefix="sift")


CASES = [(seed, mech) for seed in range(4) for mech in ("drfh", "tsf", "tsf-er", "utilitarian")]


@pytest.mark.parametrize("seed,mech", CASES)
def test_sifting_matches_full_lp(seed: int, mech: str) -> None:
    inst = _instance(seed, limits=seed % 2 == 1, eligible=seed >= 2)
    on = solve(inst, mech, solver_options={"sifting": "on"})
    off = solve(inst, mech, solver_options={"sifting": "off"})
    assert on.status.value == off.status.value == "optimal"
    a, b = np.asarray(on.allocation), np.asarray(off.allocation)
    scale = max(1.0, float(np.abs(b).max()))
    assert np.abs(a.sum(axis=1) - b.sum(axis=1)).max() <= 1e-6 * scale
    if mech != "utilitarian":  # max-min: levels unique; canonical tie-break: the allocation too
        la = [it.get("level") for it in on.details.get("iterations", on.details.get("rounds", []))]
        lb = [it.get("level") for it in off.details.get("iterations", off.details.get("rounds", []))]
        assert len(la) == len(lb)
        assert np.allclose(np.asarray(la, float), np.asarray(lb, float), rtol=1e-6, atol=1e-9)
        assert np.abs(a - b).max() <= 1e-6 * scale


def _lp(seed: int, n: int = 60, m: int = 8, maximize: bool = True) -> pyo.ConcreteModel:
    rng = np.random.default_rng(seed)
    A = rng.uniform(0, 1, (m, n)) * (rng.random((m, n)) < 0.5)
    c = rng.uniform(0.1, 1, n) * (rng.random(n) < 0.7)
    mdl = pyo.ConcreteModel()
    mdl.x = pyo.Var(range(n), bounds=(0, None))
    mdl.t = pyo.Var()
    mdl.cap = pyo.Constraint(range(m), rule=lambda b, i: sum(A[i, j] * b.x[j] for j in range(n)) <= 1 + i)
    mdl.lvl = pyo.Constraint(range(4), rule=lambda b, k: sum(b.x[j] for j in range(k, n, 4)) >= b.t)
    mdl.ub = pyo.Constraint(expr=mdl.t <= 0.5)
    obj = sum(c[j] * mdl.x[j] for j in range(n)) + mdl.t
    mdl.obj = pyo.Objective(expr=obj if maximize else -obj, sense=pyo.maximize if maximize else pyo.minimize)
    return mdl


@pytest.mark.parametrize("seed", range(6))
def test_sifting_generic_lp_and_certificate(seed: int) -> None:
    outs = {}
    for mode in ("on", "off"):
        mdl = _lp(seed, maximize=seed % 2 == 0)
        br = HighsBridge(mdl, options={"sifting": mode})
        out = br.solve()
        outs[mode] = (out, br)
    (a, ba), (b, bb) = outs["on"], outs["off"]
    assert a.status.value == b.status.value == "optimal"
    assert "sifting" in a.message and "sifting" in a.extra
    assert abs(a.objective - b.objective) <= 1e-6 * max(1.0, abs(b.objective))
    # the certificate refers to the full LP: every column was priced
    assert a.kkt["max"] <= 1e-6 * a.kkt["scale"]
    assert ba.col_dual.shape == bb.col_dual.shape


def test_sifting_progressive_filling_keeps_pool_and_resolves() -> None:
    inst = _instance(7, N=30, K=8)
    on = solve(inst, "tsf-er", solver_options={"sifting": "on"})
    off = solve(inst, "tsf-er", solver_options={"sifting": "off"})
    assert on.details["lps"] == off.details["lps"] >= 2
    lv_on = [it["level"] for it in on.details["iterations"]]
    lv_off = [it["level"] for it in off.details["iterations"]]
    assert np.allclose(lv_on, lv_off, rtol=1e-6, atol=1e-9)
    assert np.abs(np.asarray(on.allocation) - np.asarray(off.allocation)).max() <= 1e-6


def test_auto_sifts_the_first_solve_of_a_wide_lp_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sifting=auto``: the first solve of an LP of at least ``SIFT_ABOVE`` columns is sifted, the
    re-solves (progressive filling's later rounds) are not (at 2048 x 256 mixed sifting every round ran
    past 2.5x the full LP's time); the answer is the full LP's either way."""
    from fairalloc.solvers import highs

    monkeypatch.setattr(highs, "SIFT_ABOVE", 1)
    mdl = _lp(3)
    br = HighsBridge(mdl, options={"sifting": "auto"})
    first = br.solve()
    assert "sifting" in first.message
    obj = next(mdl.component_data_objects(pyo.Objective, active=True))
    obj.expr = 0.5 * obj.expr
    br.update()
    again = br.solve()
    assert again.status.value == "optimal" and "sifting" not in again.message
    assert abs(again.objective - 0.5 * first.objective) <= 1e-6 * max(1.0, abs(first.objective))
    inst = _instance(7, N=30, K=8)
    auto = solve(inst, "tsf-er")
    off = solve(inst, "tsf-er", solver_options={"sifting": "off"})
    assert auto.details["lps"] == off.details["lps"] >= 2
    assert np.abs(np.asarray(auto.allocation) - np.asarray(off.allocation)).max() <= 1e-6


def test_sifting_option_checked() -> None:
    with pytest.raises(ParameterError):
        HighsBridge(_lp(0), options={"sifting": "sometimes"})


def test_sifting_pool_pruning_still_gives_the_full_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns that sit out leave the pool (forced here from the first round: tiny initial pool, one
    column a row per pricing round, drop after one restricted solve); every column is still priced,
    so the answer and the multipliers are the full LP's."""
    from fairalloc.solvers.highs import Sifter

    monkeypatch.setattr(Sifter, "PER_ROW", 1)
    monkeypatch.setattr(Sifter, "PER_ROW_SHARE", 0.0)
    monkeypatch.setattr(Sifter, "PRICE_PER_ROW", 1)
    monkeypatch.setattr(Sifter, "DROP_AFTER", 1)
    monkeypatch.setattr(Sifter, "DROP_ABOVE", 0)
    dropped = 0
    for seed in range(4):
        inst = _instance(seed, N=25, K=8, limits=seed % 2 == 1)
        on = solve(inst, "tsf-er", solver_options={"sifting": "on"})
        off = solve(inst, "tsf-er", solver_options={"sifting": "off"})
        assert on.status.value == off.status.value == "optimal"
        lv_on = [it["level"] for it in on.details["iterations"]]
        lv_off = [it["level"] for it in off.details["iterations"]]
        assert np.allclose(lv_on, lv_off, rtol=1e-6, atol=1e-9)
        assert np.abs(np.asarray(on.allocation) - np.asarray(off.allocation)).max() <= 1e-6
        mdls = [_lp(seed, n=200, m=12) for _ in range(2)]
        for mdl in mdls:  # columns in no capacity row: bounded anyway
            for v in mdl.x.values():
                v.setub(3.0)
        a = HighsBridge(mdls[0], options={"sifting": "on"}).solve()
        b = HighsBridge(mdls[1], options={"sifting": "off"}).solve()
        assert a.status.value == b.status.value == "optimal"
        assert abs(a.objective - b.objective) <= 1e-6 * max(1.0, abs(b.objective))
        assert a.kkt["max"] <= 1e-6 * a.kkt["scale"]
        dropped += a.extra["sifting"]["dropped"]
    assert dropped > 0


def test_sifting_coefficient_change_keeps_pool() -> None:
    """A re-solve after coefficients changed (same pattern, as progressive filling's rescale) changes
    them in the restricted LP in place and still gives the full LP's optimum and certificate."""
    rng = np.random.default_rng(3)
    n, m = 80, 6
    A = rng.uniform(0.1, 1, (m, n))
    mdl = pyo.ConcreteModel()
    mdl.x = pyo.Var(range(n), bounds=(0, None))
    mdl.k = pyo.Param(range(n), mutable=True, initialize=lambda b, j: float(rng.uniform(0.5, 1.5)))
    mdl.cap = pyo.Constraint(range(m), rule=lambda b, i: sum(A[i, j] * b.k[j] * b.x[j]
                                                             for j in range(n)) <= 1)
    c = rng.uniform(0.1, 1, n)
    mdl.obj = pyo.Objective(expr=sum(c[j] * mdl.x[j] for j in range(n)), sense=pyo.maximize)
    br = HighsBridge(mdl, options={"sifting": "on"})
    br.solve()
    for j in range(n):
        mdl.k[j] = float(rng.uniform(0.5, 1.5))
    br.update_rows(list(mdl.cap.values()))
    a = br.solve()
    assert a.extra["sifting"]["coefficients"] > 0
    ref = HighsBridge(mdl, options={"sifting": "off"}).solve()
    assert abs(a.objective - ref.objective) <= 1e-9 * max(1.0, abs(ref.objective))
    assert a.kkt["max"] <= 1e-6 * a.kkt["scale"]


@pytest.mark.parametrize("seed", range(3))
def test_the_initial_pool_spreads_each_row_over_enough_columns(seed: int) -> None:
    """Every user of a max-min LP ranks the same large servers first; with 8 columns a level row the
    restricted LP overloaded them and the first round of 512 x 128 mixed took 3-4 restricted solves
    (at 2048 x 256: 9 solves, 51 s). With ``PER_ROW_SHARE`` of each row in the initial pool one
    restricted solve certified the full LP on these three (asserted: at most two); the level is the
    full LP's."""
    from benchmarks._workload import scaling_instance
    from fairalloc.models.maxmin import leximin_model
    from fairalloc.models.tsf_er import task_share_coeff

    inst = scaling_instance(512, 128, seed, 0.8)
    outs = {}
    for mode in ("on", "off"):
        mdl = leximin_model(inst, task_share_coeff(inst), "tsf-er")
        outs[mode] = HighsBridge(mdl, options={"sifting": mode}).solve()
    on, off = outs["on"], outs["off"]
    assert on.status.value == off.status.value == "optimal"
    assert on.extra["sifting"]["rounds"] <= 2
    assert abs(on.objective - off.objective) <= 1e-9 * abs(off.objective)
    assert on.kkt["max"] <= 1e-6 * on.kkt["scale"]
