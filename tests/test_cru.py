"""CRU: docs/examples.md#tsfer-fig2 golden numbers, the LP that task limits make infeasible and the exact
MILP that
replaces it, and agreement with an independent enumeration (one scipy LP per set of users at their
limit) on random instances with placement constraints, weights, task limits and an external resource."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairalloc import Instance, ParameterError, solve
from fairalloc.generate import random_instance
from fairalloc.io import load_instance
from fairalloc.registry import get_mechanism
from fairalloc.verify import feasibility

from conftest import require_scip
from independent import cru_bruteforce, envy_mu, eta, pareto_improvement


def test_golden_tsfer_fig2(examples):
    r = solve(examples / "tsfer-fig2.yaml", "cru")
    assert r.status.value == "optimal" and r.details["form"] == "lp"
    assert r.x[0, 1] == pytest.approx(5.0, abs=1e-8) and r.x[1, 0] == pytest.approx(5.0, abs=1e-8)
    assert r.x[0, 0] == 0.0 and r.x[1, 1] == 0.0
    assert r.details["objective"] == pytest.approx(5 / 6 + 5 / 7.5)
    assert r.details["kkt"]["max"] <= 1e-9


def test_limits_make_the_paper_lp_infeasible_and_the_milp_solves_it():
    # two identical users on one server (η = 10), T1 = 1: SI needs X2 ≥ 5, u1's EF row X2 ≤ X1 ≤ 1
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1]], tasks=[1, np.inf])
    lp = solve(inst, "cru", form="lp")
    assert lp.status.value == "infeasible" and "form=milp" in lp.message
    r = solve(inst, "cru")
    assert r.status.value == "optimal" and r.details["form"] == "milp"
    np.testing.assert_allclose(r.tasks, [1, 9], atol=1e-8)
    assert r.details["reached_limit"] == ["u1"]
    assert cru_bruteforce(inst)[0] == pytest.approx(r.details["objective"], rel=1e-9)


def test_milp_without_limits_is_the_lp(examples):
    r = solve(examples / "tsfer-fig2.yaml", "cru", form="milp")
    assert r.details["form"] == "lp"


def test_model_has_binaries_only_for_finite_limits():
    inst = Instance.from_arrays(capacity=[[10, 4]], demand=[[1, 1], [1, 2], [2, 1]],
                                tasks=[1, np.inf, 3])
    m = get_mechanism("cru").build(inst)
    assert sorted(m.z) == ["u1", "u3"]
    assert len(m.envy_free) == 6 and len(m.sharing_incentive) == 3
    assert get_mechanism("cru").build(inst, form="lp").find_component("z") is None


def _check_ef_si(inst, X, x, tol=1e-6):
    """EF rows of docs/mechanisms/index.md#decisions with the task-limit cap, SI thresholds, computed here."""
    mu = envy_mu(inst)
    psi = np.minimum(inst.weight / inst.weight.sum() * eta(inst), inst.tasks)
    assert (X >= psi - tol * np.maximum(1, psi)).all()
    for n in range(inst.n_users):
        for m in range(inst.n_users):
            if m != n:
                val = mu[n, m] * inst.weight[n] / inst.weight[m] * x[m, inst.eligible[n]].sum()
                assert X[n] >= min(inst.tasks[n], val) - tol * max(1, val), (n, m)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), n_users=st.integers(2, 4), placement=st.booleans(),
       limits=st.booleans(), weights=st.booleans(), scoped=st.booleans())
def test_agrees_with_enumeration(seed, n_users, placement, limits, weights, scoped):
    inst = random_instance(seed, n_users, placement=placement, limits=limits, weights=weights,
                           external=1, scoped=scoped)
    r = solve(inst, "cru")
    assert r.status.value == "optimal"  # always feasible: the LP without limits, the MILP with them
    assert r.details["form"] == ("milp" if inst.has_task_limits else "lp")
    assert feasibility(inst, r.x)["holds"]
    best, _ = cru_bruteforce(inst)
    assert r.details["objective"] == pytest.approx(best, rel=1e-7, abs=1e-9)
    assert (r.tasks / eta(inst)).sum() == pytest.approx(best, rel=1e-6)
    _check_ef_si(inst, r.tasks, r.x)
    if not limits:  # [TSFER] Thm 1: CRU is PO with unlimited tasks
        assert pareto_improvement(inst, r.tasks)[2] <= 1 + 1e-6


def test_rejects_time_shared(cli, examples):
    p = cli("solve", str(examples / "psdsf-table3.yaml"), "-m", "cru")
    assert p.returncode == 2 and "needs demand vectors" in p.stderr


def test_scip_solves_the_milp_too():
    require_scip()
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1]], tasks=[1, np.inf])
    r = solve(inst, "cru", solver="scip")
    assert r.status.value == "optimal"
    np.testing.assert_allclose(r.tasks, [1, 9], atol=1e-6)


@pytest.mark.parametrize("seed", [0, 3])
def test_pyomo_route_solves_the_milp(seed):
    """Through Pyomo's HiGHS interface the MILP has no multipliers (Pyomo raises ``NoDualsError``):
    the route returns the MILP's point, the same allocation as the default route (the canonical
    tie-break), not a traceback."""
    inst = random_instance(seed, 5, 2, 2, limits=True)
    a, b = solve(inst, "cru", solver="pyomo-highs"), solve(inst, "cru")
    assert a.details["form"] == b.details["form"] == "milp"
    assert a.status.value == b.status.value == "optimal"
    np.testing.assert_allclose(a.allocation, b.allocation, rtol=1e-6, atol=1e-9)


def test_build_has_named_rows(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    m = get_mechanism("cru").build(inst)
    assert {"envy_free", "sharing_incentive", "objective"} <= {c.local_name for c in
                                                               m.component_objects()}


def test_si_definition_parameter():
    """-p si=apf ([APF]/[PSDSF] threshold: every server split by weight, external resources ignored) is
    infeasible when the external resource is scarce; the default [TSFER] threshold is not."""
    inst = Instance.from_arrays(capacity=[[10.0]], demand=[[1.0], [1.0]], external_capacity=[1.0],
                                external_demand=[[0.5], [0.5]])
    r = solve(inst, "cru")
    assert r.status.value == "optimal" and r.tasks.tolist() == pytest.approx([1.0, 1.0])
    assert r.details["si"] == "tsfer" and list(r.details["si_threshold"].values()) == [1.0, 1.0]
    bad = solve(inst, "cru", si="apf")
    assert bad.status.value == "infeasible"
    with pytest.raises(ParameterError, match="si='x'"):
        solve(inst, "cru", si="x")


@pytest.mark.parametrize("seed", [67, 158])
def test_canonical_binaries_are_the_same_on_every_route(seed):
    """Found by the route sweep (`wide_instance`): with the solver's binaries, HiGHS through the bridge
    and Pyomo's HiGHS interface returned allocations 0.44 of a user's total apart on seed 67, both
    `optimal` (one user at its limit with z = 0 on one route, z = 1 on the other). `binaries=canonical`
    picks the binaries by the tie-break over every optimum. Seed 158 has optima with different totals
    (the two routes' first MILP points): setting z from the solver's point alone put them 0.52 apart."""
    from test_fuzz import wide_instance

    inst = wide_instance(seed)
    runs = {(r, b): solve(inst, "cru", solver=r, binaries=b)
            for r in ("highs", "pyomo-highs") for b in ("solver", "canonical")}
    for r in runs.values():
        assert r.status.value == "optimal" and r.details["form"] == "milp", r.message
        assert r.details["canonical"]["status"] == "optimal"
    X = runs["highs", "canonical"].x.sum(axis=1)
    floor = np.maximum(X, 1e-6 * X.max())[:, None]

    def apart(a, b):
        return float(np.max(np.abs(runs[a].x - runs[b].x) / floor))

    if seed == 67:
        assert apart(("highs", "solver"), ("pyomo-highs", "solver")) > 0.1  # the solver's choice shows
    assert apart(("highs", "canonical"), ("pyomo-highs", "canonical")) <= 1e-9
    assert runs["highs", "canonical"].details["reached_limit"] == runs["pyomo-highs", "canonical"].details[
        "reached_limit"]
