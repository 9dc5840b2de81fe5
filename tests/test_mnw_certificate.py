"""MNW's Eisenberg–Gale certificate and polish: the degenerate example comes out exact, the gap is in the
result, weak duality holds for any prices, and an uncertified point is not called optimal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairalloc
from fairalloc.generate import random_instance
from fairalloc.instance import Instance
from fairalloc.models import mnw
from fairalloc.models.feasible import uniform_split

DEGENERATE = Instance.from_arrays(rates=[[3, 0, 0], [0, 4, 0], [5, 5, 5]], name="degenerate")


def test_degenerate_time_shared_example_is_exact():
    r = fairalloc.solve(DEGENERATE, "mnw")
    assert r.status.value == "optimal"
    np.testing.assert_allclose(r.tasks, [3, 4, 5], rtol=1e-8)
    assert abs(r.details["duality_gap"]) <= 1e-9 and r.details["point"].startswith("polished")


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), flags=st.fixed_dictionaries({
    "placement": st.booleans(), "external": st.integers(0, 2), "scoped": st.booleans(),
    "limits": st.booleans(), "weights": st.booleans(), "time_shared": st.booleans()}))
def test_weak_duality_for_any_prices(seed, flags):
    inst = random_instance(seed, 4, 3, 2, **flags)
    rng = np.random.default_rng(seed)
    x = uniform_split(inst)  # feasible, positive
    price = {"capacity": rng.uniform(0, 2, (inst.n_servers, len(inst.resources))),
             "time": rng.uniform(0, 2, inst.n_servers), "external": rng.uniform(0, 2, len(inst.external)),
             "limit": rng.uniform(0, 2, inst.n_users), "budget": rng.uniform(0, 2, inst.n_users)}
    assert mnw.duality_gap(inst, x, price) >= -1e-9
    r = fairalloc.solve(inst, "mnw")  # and the solver's answer is certified
    assert r.status.value == "optimal" and r.details["relative_gap"] <= mnw.GAP_TOL


def test_uncertified_point_is_not_optimal(monkeypatch):
    monkeypatch.setattr(mnw, "GAP_TOL", -1.0)  # nothing can meet it
    r = fairalloc.solve(DEGENERATE, "mnw")
    assert r.status.value == "converged" and "duality gap" in r.message


@pytest.mark.parametrize("path", ["tsfer-fig2.yaml", "psdsf-fig1.yaml", "psdsf-table3.yaml"])
def test_examples_are_certified(examples, path):
    r = fairalloc.solve(examples / path, "mnw")
    assert r.status.value == "optimal" and abs(r.details["relative_gap"]) <= 1e-10
