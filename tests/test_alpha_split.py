"""DRF-α and TSF-α ([TSFER] §3.3): the paper's Fig. 2 claims (both users lose against CRU / TSF-ER,
so neither is PO), presets and explicit splits, and agreement with an independent leximin on a split
built here, on random instances with placement constraints, weights, task limits and external
resources."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairalloc import Instance, solve
from fairalloc.errors import InstanceError, ParameterError
from fairalloc.generate import random_instance
from fairalloc.io import load_instance
from fairalloc.verify import feasibility

from independent import leximin, pareto_improvement


def split(inst, per_server):
    """External resource e -> server resource with capacity α[e,s]·c_e, α ∝ per_server on S_e; off
    S_e a capacity that never binds (1e6: random instances run at most ~40 tasks per server)."""
    prof = inst.external_scope * np.asarray(per_server, float)[None, :]
    prof = prof / prof.sum(axis=1, keepdims=True)
    ext = np.where(inst.external_scope, prof * inst.external_capacity[:, None], 1e6)
    cap = np.hstack([inst.capacity, ext.T])
    return Instance.from_arrays(capacity=cap, demand=np.hstack([inst.demand, inst.external_demand]),
                                weight=inst.weight, tasks=inst.tasks, eligible=inst.eligible)


def kappa_unsplit(inst):
    d = np.hstack([inst.demand, inst.external_demand])
    c = np.concatenate([inst.capacity.sum(axis=0), inst.external_capacity])
    return np.array([max(d[n, r] / c[r] for r in range(len(c)) if d[n, r] > 0)
                     for n in range(inst.n_users)])


def gamma_tsf(inst):
    out = np.zeros(inst.n_users)
    for n in range(inst.n_users):
        used = inst.demand[n] > 0
        out[n] = sum(min(inst.capacity[i, used] / inst.demand[n, used]) for i in range(inst.n_servers))
    return out


def test_fig2_drf_eq_loses_against_cru(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    r = solve(inst, "drf-alpha", alpha="eq")
    # hand: X2 = 1.25 X1 (κ = (1/6, 2/15)); s2 full in mem and bw: x12 = 25/9, x22 = 10/9;
    # s1's cpu: 2x11 + x21 = 5 -> 3.25 t = 105/9
    np.testing.assert_allclose(r.tasks, [140 / 39, 175 / 39], rtol=1e-8)
    assert r.details["alpha"] == {"bw": {"s1": 0.5, "s2": 0.5}}
    assert (r.tasks < 5).all()  # CRU gives both users 5 ([TSFER] §3.3, Fig. 2(a)-(b))
    assert pareto_improvement(inst, r.tasks)[2] > 1.1  # not PO ([TSFER] Thm 3)


def test_fig2_tsf_cpu_loses_against_tsfer(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    r = solve(inst, "tsf-alpha", alpha="cpu")
    # α = (1/3, 2/3): (7c)'s denominators are (2 + 4, 5 + 2.5) = (6, 7.5); g = 160/234
    np.testing.assert_allclose(list(r.details["gamma_tsf"].values()), [6, 7.5], rtol=1e-12)
    np.testing.assert_allclose(r.tasks, [160 / 39, 200 / 39], rtol=1e-8)
    assert (r.tasks < np.array([30 / 7, 75 / 14])).all()  # [TSFER] §3.3 on Fig. 2(c)
    assert pareto_improvement(inst, r.tasks)[2] > 1 + 1e-3  # not PO ([TSFER] Thm 4)


def test_presets_and_explicit_values(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    mem = solve(inst, "tsf-alpha", alpha="mem").details["alpha"]["bw"]
    assert mem == pytest.approx({"s1": 2 / 3, "s2": 1 / 3})
    a = solve(inst, "drf-alpha", alpha="1,3")
    assert a.details["alpha"]["bw"] == pytest.approx({"s1": 0.25, "s2": 0.75})
    b = solve(inst, "drf-alpha", alpha=[2, 6])
    np.testing.assert_allclose(a.tasks, b.tasks, rtol=1e-12)
    with pytest.raises(ParameterError, match="alpha='gpu'"):
        solve(inst, "drf-alpha", alpha="gpu")
    with pytest.raises(ParameterError, match="2 finite numbers"):
        solve(inst, "tsf-alpha", alpha="1,2,3")
    with pytest.raises(ParameterError, match="leaves a user no server"):
        # all of the link on s2, but u1 may only run on s1
        solve(inst.replace(eligible=np.array([[True, False], [True, True]])), "drf-alpha",
              alpha="0,1")


def test_no_external_resource_is_plain_drfh_and_tsf(examples):
    for mech, base in (("drf-alpha", "drfh"), ("tsf-alpha", "tsf")):
        np.testing.assert_allclose(solve(examples / "psdsf-fig2.yaml", mech).tasks,
                                   solve(examples / "psdsf-fig2.yaml", base).tasks, rtol=1e-9)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), placement=st.booleans(), limits=st.booleans())
def test_unscoped_split_is_drfh_and_tsf_on_the_split_instance(seed, placement, limits):
    from fairalloc.models.alpha_split import split_instance

    inst = random_instance(seed, placement=placement, limits=limits, weights=True, external=2)
    s = split_instance(inst, "eq")
    np.testing.assert_allclose(solve(inst, "drf-alpha").tasks, solve(s, "drfh").tasks, rtol=1e-7,
                               atol=1e-9)
    np.testing.assert_allclose(solve(inst, "tsf-alpha").tasks, solve(s, "tsf").tasks, rtol=1e-7,
                               atol=1e-9)


def test_rejects_time_shared(examples):
    with pytest.raises(InstanceError, match="needs demand vectors"):
        solve(examples / "psdsf-table3.yaml", "tsf-alpha")


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), placement=st.booleans(), limits=st.booleans(),
       weights=st.booleans(), external=st.integers(1, 2), scoped=st.booleans(),
       explicit=st.booleans())
def test_agree_with_leximin_on_the_split(seed, placement, limits, weights, external, scoped,
                                         explicit):
    inst = random_instance(seed, placement=placement, limits=limits, weights=weights,
                           external=external, scoped=scoped)
    per_server = (np.random.default_rng(seed).uniform(0.2, 1.0, inst.n_servers) if explicit
                  else np.ones(inst.n_servers))
    alpha = per_server.tolist() if explicit else "eq"
    ref_inst = split(inst, per_server)
    d = solve(inst, "drf-alpha", alpha=alpha)
    t = solve(inst, "tsf-alpha", alpha=alpha)
    assert d.status.value == t.status.value == "optimal"
    assert feasibility(inst, d.x)["holds"] and feasibility(ref_inst, d.x)["holds"]
    np.testing.assert_allclose(d.tasks, leximin(ref_inst, kappa_unsplit(inst) / inst.weight),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(t.tasks, leximin(ref_inst, 1 / (inst.weight * gamma_tsf(ref_inst))),
                               rtol=1e-6, atol=1e-7)
