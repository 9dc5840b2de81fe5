"""The customize hook: fairalloc.solve(..., customize=fn) edits every mechanism's model before its
algorithm runs (issue 15). Golden: DRFH on [PSDSF] Fig. 1 with x[u2,s1] ≤ 0.2 is X = (5.8, 6.2)
(by hand: u1 runs only on s1, whose memory then leaves u1 6 − 0.2 = 5.8 tasks' worth; u2 holds s2's 6 plus
0.2 on s1; no user can rise without the other falling)."""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest

import fairalloc
from fairalloc.errors import ParameterError
from fairalloc.solvers import Session

FIG1 = "examples/psdsf-fig1.yaml"


@pytest.fixture(autouse=True)
def _root(monkeypatch):
    from conftest import ROOT

    monkeypatch.chdir(ROOT)


def cap_u2(model, instance):
    model.chi.x["u2", "s1"].setub(0.2)


def cap_u1(model, instance):  # binding for every mechanism on Fig. 1 (they all give u1 ≥ 5.4 on s1)
    if ("u1", "s1") in model.chi.x:  # per-server models hold one server's pairs only
        model.chi.x["u1", "s1"].setub(3.0)


def test_drfh_golden_with_a_capped_pair():
    plain = fairalloc.solve(FIG1, "drfh")
    np.testing.assert_allclose(plain.tasks, [60 / 11, 72 / 11], rtol=1e-7)
    r = fairalloc.solve(FIG1, "drfh", customize=cap_u2)
    assert r.ok
    np.testing.assert_allclose(r.tasks, [5.8, 6.2], rtol=1e-7)
    assert r.x[1, 0] <= 0.2 * (1 + 1e-7)
    assert r.details["customize"] == {"hook": "cap_u2", "models": 1}


@pytest.mark.parametrize("mech,params", [("tsf", {}), ("tsf-er", {}), ("tsf-er", {"variant": "paper"}),
                                         ("drf-er", {}), ("utilitarian", {"canonical": False}), ("cru", {}),
                                         ("mnw", {})])
def test_every_model_mechanism_honours_the_edit(mech, params):
    r = fairalloc.solve(FIG1, mech, customize=cap_u1, **params)
    assert r.ok, r.message
    assert r.x[0, 0] <= 3.0 + 1e-6 * 3
    plain = fairalloc.solve(FIG1, mech, **params)
    assert plain.x[0, 0] > 3.5  # the edit binds: the result moved because of it


def test_tsf_er_same_edit_as_drfh():
    np.testing.assert_allclose(fairalloc.solve(FIG1, "tsf-er", customize=cap_u2).tasks, [5.8, 6.2],
                               rtol=1e-7)


def test_new_constraint_is_seen_by_every_round():
    def at_most_5(model, instance):
        model.u1_cap = pyo.Constraint(expr=model.chi.X["u1"] <= 5)

    np.testing.assert_allclose(fairalloc.solve(FIG1, "drfh", customize=at_most_5).tasks, [5, 7],
                               rtol=1e-7)


def test_objective_edit_is_seen():
    def prefer_u2(model, instance):  # utilitarian with u2 counted twice
        model.objective.set_value(model.chi.X["u1"] + 2 * model.chi.X["u2"])

    r = fairalloc.solve(FIG1, "utilitarian", customize=prefer_u2)
    assert r.ok and r.x[1, 0] > 0  # u2 now takes s1's capacity too


def test_hook_runs_once_per_model():
    calls = []
    r = fairalloc.solve("examples/tsfer-idle.yaml", "drfh", customize=lambda m, i: calls.append(m.name))
    assert r.ok and r.details["lps"] > 1 and len(calls) == 1
    s = Session(customize=lambda m, i: calls.append(i), instance="inst")
    m = pyo.ConcreteModel()
    s.apply_customize(m)
    s.apply_customize(m)
    assert calls[-1] == "inst" and len(calls) == 2 and s.customized == 1


def test_drf_hook_sees_the_pooled_model():
    seen = []
    fairalloc.solve(FIG1, "drf", customize=lambda m, i: seen.append((list(m.chi.K), i.name)))
    assert seen == [(["pool"], "psdsf-fig1")]


def test_mechanisms_without_a_model_say_so():
    with pytest.raises(ParameterError, match="builds no Pyomo model"):
        fairalloc.solve(FIG1, "tsf-er-online", customize=cap_u2)
    with pytest.raises(ParameterError, match="works on arrays"):
        fairalloc.solve(FIG1, "ps-dsf", algorithm="paper", customize=cap_u2)


def test_a_failing_hook_names_the_model():
    with pytest.raises(ParameterError, match=r"customize hook failed on model 'drfh\[psdsf-fig1\]'.*"
                                             "KeyError"):
        fairalloc.solve(FIG1, "drfh", customize=lambda m, i: m.chi.x["u1", "s2"])
    with pytest.raises(ParameterError, match="expected a function"):
        fairalloc.solve(FIG1, "drfh", customize="not callable")


def test_psdsf_honours_the_edit():
    """Fig. 1 with x[u1,s1] ≤ 3: s1's leximin gives u1 its bound and u2 the rest of s1's memory (3), s2
    stays u2's (6). The certificate names the bound as u1's bottleneck at s1."""
    r = fairalloc.solve(FIG1, "ps-dsf", customize=cap_u1)
    assert r.ok, r.message
    np.testing.assert_allclose(r.x, [[3, 0], [3, 6]], rtol=1e-7)
    assert r.details["certificate"]["holds"] and r.details["certificate"]["bottleneck"]["u1"] == {
        "s1": "bound"}
    r = fairalloc.solve(FIG1, "ps-dsf", customize=cap_u2)
    assert r.ok and r.x[1, 0] <= 0.2 + 1e-7


def test_psdsf_row_edit_is_a_fixed_point_not_a_certificate():
    def row(model, instance):  # a new row, not a column bound: the certificate cannot read it
        if ("u1", "s1") in model.chi.x:
            model.u1_row = pyo.Constraint(expr=model.chi.x["u1", "s1"] <= 2.5)

    r = fairalloc.solve(FIG1, "ps-dsf", customize=row)
    assert r.status.value == "converged" and "fixed point of the edited" in r.message
    np.testing.assert_allclose(r.x, [[2.5, 0], [3.5, 6]], rtol=1e-7)
    assert not r.details["certificate"]["holds"]


@pytest.mark.parametrize("algorithm", ["ncp", "best-response", "ps-mfa", "distributed"])
def test_apf_vds_honours_or_refuses_the_edit(algorithm):
    """ncp: the hook edits the NCP, whose x ⊥ f pairs then take the box form at the bound; best-response:
    every server's NLP. The array algorithms (ps-mfa, distributed) refuse the hook."""
    try:
        r = fairalloc.solve(FIG1, "apf-vds", algorithm=algorithm, customize=cap_u1, gains=False)
    except ParameterError as exc:
        assert "customize" in str(exc) and algorithm in ("ps-mfa", "distributed")
        return
    assert r.ok, r.message
    np.testing.assert_allclose(r.x, [[3, 0], [3, 6]], rtol=1e-6, atol=1e-6)
    assert r.details["ncp_residual"] <= 1e-6


@pytest.mark.parametrize("mech", ["drfh", "tsf-er", "mnw", "ps-dsf", "apf-vds"])
def test_the_issue_lambda_runs_on_every_mechanism(mech):
    """The one-line hook of the docs, written for the whole allocation, also on the per-server
    mechanisms (each server's model holds every pair; only its own enter rows)."""
    r = fairalloc.solve(FIG1, mech, customize=lambda m, inst: m.chi.x["u2", "s1"].setub(0.2))
    assert r.ok, r.message
    assert r.x[1, 0] <= 0.2 * (1 + 1e-6)
    if mech in ("drfh", "tsf-er"):
        np.testing.assert_allclose(r.tasks, [5.8, 6.2], rtol=1e-7)
    if mech == "ps-dsf":  # the bound is slack at PS-DSF's point: unchanged, x[u1,s1] = x[u2,s2] = 6
        np.testing.assert_allclose(r.x, [[6, 0], [0, 6]], rtol=1e-7)
