"""TSF-ER (both variants) and DRF-ER: docs/examples.md#tsfer-fig2 golden numbers, the idle-capacity
instance with a
Pareto-dominating allocation computed independently, saturation order under task limits, and agreement
with independent scipy computations (leximin, Algorithm 1) on random instances."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairalloc import Instance, solve
from fairalloc.errors import InstanceError
from fairalloc.generate import random_instance
from fairalloc.io import load_instance
from fairalloc.registry import get_mechanism
from fairalloc.verify import feasibility

from independent import algorithm1, eta, leximin, pareto_improvement

FLAGS = st.fixed_dictionaries({"placement": st.booleans(), "limits": st.booleans(),
                               "weights": st.booleans(), "external": st.integers(1, 2),
                               "scoped": st.booleans()})


def dominant_coeff(inst):
    """κ_n = max_r d[n,r]/c[r] over server (pooled) and external resources, computed here."""
    d = np.hstack([inst.demand, inst.external_demand])
    c = np.concatenate([inst.capacity.sum(axis=0), inst.external_capacity])
    return np.array([max(d[n, r] / c[r] for r in range(len(c)) if d[n, r] > 0)
                     for n in range(inst.n_users)])


# ---------------------------------------------------------------------- golden numbers
@pytest.mark.parametrize("variant", ["leximin", "paper"])
def test_golden_tsfer_fig2(examples, variant):
    r = solve(examples / "tsfer-fig2.yaml", "tsf-er", variant=variant)
    assert r.status.value == "optimal"
    np.testing.assert_allclose(r.tasks, [30 / 7, 75 / 14], rtol=1e-8)
    d = r.details
    assert d["variant"] == variant
    np.testing.assert_allclose(list(d["eta"].values()), [6, 7.5], rtol=1e-12)
    np.testing.assert_allclose(list(d["task_share"].values()), [5 / 7, 5 / 7], rtol=1e-8)
    assert d["lps"] == 1 and d["iterations"][0]["level"] == pytest.approx(5 / 7, rel=1e-9)
    assert d["saturated"] == []


# ---------------------------------------------------------------------- idle capacity
def test_paper_variant_leaves_capacity_idle_that_the_default_uses(examples):
    inst = load_instance(examples / "tsfer-idle.yaml")
    np.testing.assert_allclose(eta(inst), [2, 2, 6], rtol=1e-9)  # independent η
    paper = solve(inst, "tsf-er", variant="paper")
    lex = solve(inst, "tsf-er")
    assert paper.status.value == lex.status.value == "optimal"
    # hand computation (examples/tsfer-idle.yaml): s1's GPU stops u1, u2 at share 1/2; (8f) holds u3
    np.testing.assert_allclose(paper.tasks, [1, 1, 3], atol=1e-8)
    np.testing.assert_allclose(lex.tasks, [1, 1, 4], atol=1e-7)
    assert paper.details["active"] == ["u1", "u2", "u3"]  # nobody saturated: Alg. 1 stops at once
    assert [it["blocked"] for it in lex.details["iterations"]] == [["u1", "u2"], ["u3"]]
    # idle capacity: half of s2's CPU under the paper's variant, none under the default
    cpu = inst.resources.index("cpu")
    assert inst.capacity[1, cpu] - paper.x[:, 1] @ inst.demand[:, cpu] == pytest.approx(0.5)
    assert inst.capacity[1, cpu] - lex.x[:, 1] @ inst.demand[:, cpu] == pytest.approx(0, abs=1e-7)
    # an independently computed allocation that Pareto-dominates the paper's (scipy LP over χ)
    Y, y, factor = pareto_improvement(inst, paper.tasks)
    np.testing.assert_allclose(Y, [1, 1, 4], atol=1e-7)
    assert factor == pytest.approx(1.2, rel=1e-7)
    assert feasibility(inst, y)["holds"]
    # ... and the default's allocation admits none
    assert pareto_improvement(inst, lex.tasks)[2] == pytest.approx(1.0, abs=1e-7)


def test_zero_external_demand_also_idles_the_paper_variant():
    # the paper's own setting (one server, every resource present, no placement) but u2 does not use
    # the link: the link stops u1, u3 at share 1/2 and (8f) holds u2 there with 4 CPUs idle
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1], [1]], resources=["cpu"],
                                external_capacity=[1], external_demand=[[1], [0], [1]],
                                external=["bw"])
    paper = solve(inst, "tsf-er", variant="paper")
    lex = solve(inst, "tsf-er")
    np.testing.assert_allclose(paper.tasks, [0.5, 5, 0.5], atol=1e-8)
    np.testing.assert_allclose(lex.tasks, [0.5, 9, 0.5], atol=1e-7)
    assert pareto_improvement(inst, paper.tasks)[2] == pytest.approx(10 / 6, rel=1e-7)


# ---------------------------------------------------------------------- task limits
def test_users_saturate_in_order_of_their_limits():
    # one server, cpu 10, unit demands, η = 10 each, T = (1, 4, ∞)
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1], [1]], tasks=[1, 4, np.inf])
    paper = solve(inst, "tsf-er", variant="paper")
    # LP 1: g = 1/3, X = 10/3 each: u1 passes T = 1; LP 2: X1 = 1, X2 = X3 = 4.5: u2 passes 4;
    # LP 3: X = (1, 4, 5), nobody new
    its = paper.details["iterations"]
    assert [it["newly_saturated"] for it in its] == [["u1"], ["u2"], []]
    assert [it["saturated"] for it in its] == [[], ["u1"], ["u1", "u2"]]
    assert [it["active"] for it in its] == [["u1", "u2", "u3"], ["u2", "u3"], ["u3"]]
    np.testing.assert_allclose([it["level"] for it in its], [1 / 3, 0.45, 0.5], rtol=1e-9)
    np.testing.assert_allclose(paper.tasks, [1, 4, 5], atol=1e-9)
    assert paper.details["lps"] == 3 and paper.details["active"] == ["u3"]
    lex = solve(inst, "tsf-er")
    its = lex.details["iterations"]
    assert [it["newly_saturated"] for it in its] == [["u1"], ["u2"], []]
    assert [it["blocked"] for it in its] == [[], [], ["u3"]]
    np.testing.assert_allclose(lex.tasks, [1, 4, 5], atol=1e-7)


def test_weighted_limits_saturate_by_limit_over_weighted_eta():
    # weights (1, 3, 1), T = (2, 3, ∞): T/(φη) = (0.2, 0.1, ∞), so u2 saturates before u1
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1], [1]], weight=[1, 3, 1],
                                tasks=[2, 3, np.inf])
    lex = solve(inst, "tsf-er")
    assert [it["newly_saturated"] for it in lex.details["iterations"]] == [["u2"], ["u1"], []]
    np.testing.assert_allclose([it["level"] for it in lex.details["iterations"]], [0.1, 0.2, 0.5],
                               rtol=1e-7)
    paper = solve(inst, "tsf-er", variant="paper")
    # LP 1: X = 10g(1, 3, 1), g = 0.2: X = (2, 6, 2) passes both limits at once
    assert [it["newly_saturated"] for it in paper.details["iterations"]] == [["u1", "u2"], []]
    np.testing.assert_allclose(paper.tasks, lex.tasks, atol=1e-7)
    np.testing.assert_allclose(paper.tasks, [2, 3, 5], atol=1e-8)


def test_every_user_saturated_ends_with_the_feasibility_lp():
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1]], tasks=[1, 2])
    r = solve(inst, "tsf-er", variant="paper")
    assert r.status.value == "optimal"
    np.testing.assert_allclose(r.tasks, [1, 2], atol=1e-9)
    its = r.details["iterations"]
    assert its[-1]["active"] == [] and its[-1]["level"] is None and r.details["lps"] == 2


def test_iterations_are_logged(caplog, examples):
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1], [1]], tasks=[1, 4, np.inf])
    with caplog.at_level(logging.INFO, logger="fairalloc.models.tsf_er"):
        solve(inst, "tsf-er", variant="paper")
    lines = [r.getMessage() for r in caplog.records if r.name == "fairalloc.models.tsf_er"]
    assert len(lines) == 3 and "reached their limit now: u1" in lines[0]


def test_persistent_model_is_not_rebuilt(monkeypatch):
    from fairalloc.models import tsf_er

    builds = []
    real = tsf_er.build_lp_taskshare
    monkeypatch.setattr(tsf_er, "build_lp_taskshare", lambda *a, **k: builds.append(1) or real(*a, **k))
    inst = Instance.from_arrays(capacity=[[10]], demand=[[1], [1], [1]], tasks=[1, 4, np.inf])
    r = solve(inst, "tsf-er", variant="paper")
    assert r.details["lps"] == 3 and len(builds) == 1 and r.solver["solves"] == 4  # + the canonical split
    r = solve(inst, "tsf-er", variant="paper", canonical=False)
    assert r.details["lps"] == 3 and len(builds) == 2 and r.solver["solves"] == 3


# ---------------------------------------------------------------------- random instances
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), flags=FLAGS)
def test_tsfer_is_leximin_of_weighted_task_shares(seed, flags):
    inst = random_instance(seed, **flags)
    r = solve(inst, "tsf-er")
    assert r.status.value == "optimal"
    assert feasibility(inst, r.x)["holds"]
    et = eta(inst)
    np.testing.assert_allclose(list(r.details["eta"].values()), et, rtol=1e-7)
    ref = leximin(inst, 1.0 / (inst.weight * et))
    np.testing.assert_allclose(r.tasks, ref, rtol=1e-6, atol=1e-7)
    # sharing incentive ([TSFER] Thm 9, weighted): X ≥ min(φ/Σφ · η, T)
    psi = np.minimum(inst.weight / inst.weight.sum() * et, inst.tasks)
    assert (r.tasks >= psi * (1 - 1e-6) - 1e-9).all()
    # Pareto optimal: no allocation over χ dominates it
    assert pareto_improvement(inst, r.tasks)[2] <= 1 + 1e-6


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), flags=FLAGS)
def test_paper_variant_is_algorithm1(seed, flags):
    inst = random_instance(seed, **flags)
    r = solve(inst, "tsf-er", variant="paper")
    assert r.status.value == "optimal"
    assert feasibility(inst, r.x)["holds"]
    ref = algorithm1(inst, 1.0 / (inst.weight * eta(inst)))
    np.testing.assert_allclose(r.tasks, ref, rtol=1e-6, atol=1e-7)
    # never better for the worst-off user than the default, which is leximin
    lex = solve(inst, "tsf-er")
    share = lambda res: res.tasks / (inst.weight * inst.eta)  # noqa: E731
    assert share(r).min() <= share(lex).min() * (1 + 1e-7) + 1e-9


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), flags=FLAGS)
def test_drf_er(seed, flags):
    inst = random_instance(seed, **flags)
    kappa = dominant_coeff(inst) / inst.weight
    r = solve(inst, "drf-er")
    np.testing.assert_allclose(r.tasks, leximin(inst, kappa), rtol=1e-6, atol=1e-7)
    assert pareto_improvement(inst, r.tasks)[2] <= 1 + 1e-6
    np.testing.assert_allclose(r.tasks, solve(inst, "drfh").tasks, rtol=1e-6, atol=1e-7)
    p = solve(inst, "drf-er", variant="paper")
    assert p.status.value == "optimal"
    np.testing.assert_allclose(p.tasks, algorithm1(inst, kappa), rtol=1e-6, atol=1e-7)


def test_drf_er_paper_differs_from_drfh_when_a_user_is_blocked(examples):
    inst = load_instance(examples / "tsfer-idle.yaml")
    # κ = (1/2, 1/2, 1/6) (gpu, gpu, cpu: 0.5/3): one level holds u3 at dominant share 1/2, X3 = 3
    np.testing.assert_allclose(solve(inst, "drf-er", variant="paper").tasks, [1, 1, 3], atol=1e-8)
    np.testing.assert_allclose(solve(inst, "drf-er").tasks, solve(inst, "drfh").tasks, atol=1e-8)
    np.testing.assert_allclose(solve(inst, "drfh").tasks, [1, 1, 4], atol=1e-7)


# ---------------------------------------------------------------------- forms and interfaces
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_time_shared_tsfer_normalises_by_eligible_rates(seed):
    inst = random_instance(seed, time_shared=True, weights=True, placement=True)
    r = solve(inst, "tsf-er")
    ref = leximin(inst, 1.0 / (inst.weight * np.where(inst.eligible, inst.rates, 0).sum(axis=1)))
    np.testing.assert_allclose(r.tasks, ref, rtol=1e-6, atol=1e-7)


def test_drf_er_rejects_time_shared(examples):
    with pytest.raises(InstanceError, match="needs demand vectors"):
        solve(examples / "psdsf-table3.yaml", "drf-er")


@pytest.mark.parametrize("variant", ["leximin", "paper"])
def test_build_shows_the_model(examples, variant):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    m = get_mechanism("tsf-er").build(inst, variant=variant)
    names = {c.local_name for c in m.component_objects()}
    if variant == "paper":
        assert {"g", "active_share", "saturated", "objective"} <= names
    else:
        assert "maxmin" in names


def test_cli_tsfer_paper(cli, examples):
    p = cli("-v", "solve", str(examples / "tsfer-fig2.yaml"), "-m", "tsf-er", "-p", "variant=paper")
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads(p.stdout)
    assert out["tasks"]["u1"] == pytest.approx(30 / 7) and out["details"]["lps"] == 1
    assert "Algorithm 1, LP 1" in p.stderr


@pytest.mark.parametrize("mech,params", [("tsf-er", {"variant": "paper"}), ("tsf-er", {}),
                                         ("cru", {}), ("tsf-alpha", {"alpha": "cpu"})])
def test_a_stopped_solver_is_a_status_not_a_number(examples, mech, params):
    r = solve(examples / "tsfer-fig2.yaml", mech, time_limit=1e-9, **params)
    assert r.status.value == "time_limit" and not r.ok
