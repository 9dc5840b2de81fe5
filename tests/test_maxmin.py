"""Progressive filling (DRFH, TSF, DRF) against an independent leximin computation on random
instances with placement constraints, weights, task limits and external resources."""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairalloc import Instance, solve
from fairalloc.generate import random_instance
from fairalloc.models.maxmin import add_maxmin, progressive_filling
from fairalloc.solvers import Session
from fairalloc.verify import feasibility

from conftest import require_scip
from independent import leximin

FLAGS = st.fixed_dictionaries({"placement": st.booleans(), "limits": st.booleans(),
                               "weights": st.booleans(), "external": st.integers(0, 2),
                               "scoped": st.booleans()})


def dominant_coeff(inst):
    """κ_n = max_r d[n,r] / Σ_i c[i,r] over server and external resources, computed here."""
    out = []
    for n in range(inst.n_users):
        ratios = [inst.demand[n, r] / inst.capacity[:, r].sum()
                  for r in range(len(inst.resources)) if inst.demand[n, r] > 0]
        ratios += [inst.external_demand[n, e] / inst.external_capacity[e]
                   for e in range(len(inst.external)) if inst.external_demand[n, e] > 0]
        out.append(max(ratios))
    return np.array(out)


def tsf_gamma(inst):
    g = np.zeros(inst.n_users)
    for n in range(inst.n_users):
        for i in range(inst.n_servers):
            used = inst.demand[n] > 0
            g[n] += min(inst.capacity[i, used] / inst.demand[n, used])
    return g


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), flags=FLAGS)
def test_drfh_is_leximin_of_weighted_dominant_shares(seed, flags):
    inst = random_instance(seed, **flags)
    r = solve(inst, "drfh")
    assert r.status.value == "optimal"
    assert feasibility(inst, r.x)["holds"]
    ref = leximin(inst, dominant_coeff(inst) / inst.weight)
    np.testing.assert_allclose(r.tasks, ref, rtol=1e-6, atol=1e-7)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), flags=FLAGS)
def test_tsf_is_leximin_of_task_shares(seed, flags):
    inst = random_instance(seed, **flags)
    r = solve(inst, "tsf")
    assert r.status.value == "optimal"
    ref = leximin(inst, 1.0 / (inst.weight * tsf_gamma(inst)))
    np.testing.assert_allclose(r.tasks, ref, rtol=1e-6, atol=1e-7)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_tsf_time_shared(seed):
    inst = random_instance(seed, time_shared=True, weights=True, placement=True)
    r = solve(inst, "tsf")
    ref = leximin(inst, 1.0 / (inst.weight * inst.rates.sum(axis=1)))
    np.testing.assert_allclose(r.tasks, ref, rtol=1e-6, atol=1e-7)


def test_blocked_user_does_not_hold_others_back():
    # u1 reaches its task limit early; u2 and u3 keep rising to the next level
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1], [2]], tasks=[1, np.inf, np.inf])
    r = solve(inst, "drfh")
    # κ = (0.1, 0.1, 0.2); one level would give X = (10t, 10t, 5t), t = 1/3, but X1 <= 1 freezes u1 at
    # t = 0.1; then 1 + 10t + 10t = 10 (cpu): t = 0.45, X2 = 4.5, X3 = 2.25
    np.testing.assert_allclose(r.tasks, [1.0, 4.5, 2.25], atol=1e-9)
    assert [rd["frozen"] for rd in r.details["rounds"]] == [["u1"], ["u2", "u3"]]


def test_drf_golden_and_weights(examples):
    r = solve(examples / "drf-ghodsi.yaml", "drf")
    np.testing.assert_allclose(r.tasks, [3.0, 2.0], atol=1e-9)
    assert r.servers == ("s1",)
    weighted = Instance.from_arrays(capacity=[[9, 18]], demand=[[1, 4], [3, 1]], weight=[2, 1])
    rw = solve(weighted, "drf")
    # s1/2 = s2: (2/9)X1/2 = X2/3 -> X1 = 3X2; mem binds first: 4X1 + X2 = 13X2 = 18
    np.testing.assert_allclose(rw.tasks, [54 / 13, 18 / 13], atol=1e-9)


def test_drf_pools_several_servers(examples):
    r = solve(examples / "psdsf-fig1.yaml", "drf")
    assert r.servers == ("pool",) and r.details["pooled"] is True
    # pooled c = (21, 24, 100): κ = (0.1, 1/12); max-min: 0.1 X1 = X2/12, 2X1 + 2X2 <= 24
    np.testing.assert_allclose(r.tasks, [60 / 11, 72 / 11], atol=1e-9)


@pytest.mark.parametrize("solver", ["scip", "pyomo-highs", "highs-ipm"])
def test_other_solvers_reach_the_same_leximin(examples, solver):
    if solver == "scip":
        require_scip()
    r = solve(examples / "psdsf-fig2.yaml", "drfh", solver=solver)
    base = solve(examples / "psdsf-fig2.yaml", "drfh")
    np.testing.assert_allclose(r.tasks, base.tasks, rtol=1e-6)


def test_floors_stay_consistent_over_many_rounds():
    """A PS-DSF server that needs ~30 progressive-filling rounds: floors set from where the solver left
    each user (not from t) keep every round feasible (this instance once hit `infeasible` at round 26)."""
    from fairalloc.models.psdsf import ServerLeximin
    from fairalloc.solvers import Session

    inst = random_instance(7, 60, 12, 3, placement=True, weights=True)
    i = inst.servers.index("s6")
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 0.05, (inst.n_users, inst.n_servers)) * inst.runnable
    server = ServerLeximin(inst, i)
    for _ in range(3):  # re-solved with new offsets on the same HiGHS model
        col, out = server.respond(x, Session())
        assert out.status.value == "optimal", out.message
        x[:, i] = col


def test_probe_fallback_holds_frozen_users_at_their_level():
    """When the blocked users are found by probe LPs (duals inconclusive: forced here with a huge
    dual_tol), their floors come from the round's point, not from the last probe LP's row
    activities (which read share − t_probe + t: floors of −3 and the answer [0, 2, 6])."""
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(3), domain=pyo.NonNegativeReals)
    m.c1 = pyo.Constraint(expr=m.x[0] + m.x[1] <= 2)
    m.c2 = pyo.Constraint(expr=m.x[2] <= 10)
    m.c3 = pyo.Constraint(expr=m.x[0] + m.x[2] <= 6)
    m.share = pyo.Expression(range(3), rule=lambda m, n: m.x[n])
    add_maxmin(m, m.share)
    out = progressive_filling(m, Session(solver="highs"), m.share, dual_tol=5.0)
    assert out.status.ok and {r["by"] for r in out.rounds} == {"probe LPs"}
    assert [pyo.value(m.x[i]) for i in range(3)] == pytest.approx([1, 1, 5], abs=1e-6)


@pytest.mark.parametrize("mech", ["tsf", "tsf-alpha", "drfh", "tsf-er"])
def test_a_level_far_above_the_last_is_reached(mech):
    """A user held at 1.6e-8 tasks by an external resource (demand 7e5 of a capacity 0.011) freezes at
    a level of ~1e-13; the other's next level is ~1e13 times higher. In the last level's units its
    coefficient fell below the matrix values HiGHS keeps, so round 2 looked unbounded and tsf ended
    `error` on the HiGHS routes (found by a restatement sweep of the fuzz instances). The level's unit
    now grows until the LP is bounded. Each user's total is its best alone here: user 0 fills the r2
    of the one server it may use, user 1 the external resource."""
    inst = Instance.from_arrays(
        capacity=[[6.399e5, 0.0], [6.868e-3, 0.0], [3.063e4, 984.9]],
        demand=[[0.3714, 4786.0], [0.6133, 0.0]],
        weight=[2.0, 3.0], eligible=[[False, False, True], [False, True, True]],
        external_capacity=[0.011], external_demand=[[0.0], [724335.981]],
        external_scope=[[False, True, True]], name="far-levels")
    expected = [984.9 / 4786.0, 0.011 / 724335.981]
    for route in ["highs", "highs-simplex", "highs-ipm", "pyomo-highs"]:
        r = solve(inst, mech, solver=route)
        assert r.status.value == "optimal", (route, r.message)
        np.testing.assert_allclose(r.tasks, expected, rtol=1e-7)


def test_a_multiplier_at_the_solver_s_tolerance_does_not_freeze_a_user():
    """Found by the restatement sweep (`wide_instance(143)`, restated): in round 2 of tsf, u1's level row
    had the multiplier 1.25e-9 (the active rows' sum to one), noise at the bridge's dual tolerance,
    and at the old threshold of 1e-9 u1 was frozen at 6.8e-10 with 2.9e-8 tasks, `optimal`, while the
    original statement gave it its task limit, 3.2e-4 (level 7.7e-6)."""
    from restate import back, restated
    from test_fuzz import wide_instance

    inst = wide_instance(143)
    pu, ps = np.array([0, 2, 1, 3]), np.array([1, 0])
    other = restated(inst, pu, ps, [0.00797850562119112, 0.0018728650304424715, 0.0029489628017714195,
                                    9.830271369354154, 334.7542663611918])
    a = solve(inst, "tsf")
    for solver in ("highs", "highs-ipm"):
        b = solve(other, "tsf", solver=solver)
        assert a.status.value == b.status.value == "optimal"
        assert b.details["levels"]["u1"] == pytest.approx(a.details["levels"]["u1"], rel=1e-9)
        X = a.x.sum(axis=1)
        assert np.max(np.abs(back(b.x, pu, ps) - a.x).sum(axis=1) / X) <= 1e-6
