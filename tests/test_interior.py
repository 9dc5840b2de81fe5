"""Interior points in progressive filling (the HiGHS bridge's ``interior`` option: IPM without
crossover; blocked users by ``models.maxmin.interior_blocked``): the same levels, user totals and
canonical allocations as the vertex route (``interior=off``)."""

from __future__ import annotations

import numpy as np
import pytest
from link_instances import link_instance

from fairalloc import solve
from fairalloc.errors import ParameterError
from fairalloc.instance import Instance
from fairalloc.models import maxmin


def _instance(seed: int, N: int = 30, K: int = 6, limits: bool = False,
              eligible: bool = False) -> Instance:
    return link_instance(seed, N, K, limits, eligible, prefix="interior")


def _levels(res) -> list[float]:
    return [it["level"] for it in res.details.get("iterations", res.details.get("rounds", []))]


def _agree(a, b) -> None:
    assert a.status.value == b.status.value == "optimal"
    A, B = np.asarray(a.allocation), np.asarray(b.allocation)
    scale = max(1.0, float(np.abs(B).max()))
    assert np.abs(A.sum(axis=1) - B.sum(axis=1)).max() <= 1e-7 * scale
    assert np.allclose(_levels(a), _levels(b), rtol=1e-7, atol=0)
    # the canonical tie-break: the same split, to 1e-6 as every route against the full LP's answer.
    # The routes' levels differ by ~1e-10 (each solver's tolerance); where one route's tie-break needs
    # a shrink the point moves with it (drfh seed 2: 2.3e-7 of the largest entry, maxmin.SHRINKS)
    assert np.abs(A - B).max() <= 1e-6 * scale


CASES = [(seed, mech) for seed in range(4) for mech in ("drfh", "tsf", "tsf-er")]


@pytest.mark.parametrize("seed,mech", CASES)
def test_interior_rounds_match_vertex_rounds(seed: int, mech: str) -> None:
    inst = _instance(seed, limits=seed % 2 == 1, eligible=seed >= 2)
    a = solve(inst, mech, solver_options={"interior": "on"})
    b = solve(inst, mech, solver_options={"interior": "off"})
    _agree(a, b)
    if mech != "tsf-er":  # tsf-er reports its rounds as "iterations", without the rule
        assert {rd["by"] for rd in a.details["rounds"]} == {"interior duals"}
        assert all(rd["separation"] >= maxmin.SEPARATION for rd in a.details["rounds"])


def test_interior_blocked_separates_or_declines() -> None:
    y = np.array([0.5, 0.5, 1e-14, 2e-13])
    s = np.array([1e-13, 3e-12, 0.2, 0.05])
    mask, sep = maxmin.interior_blocked(y, s, 1.0)
    assert mask.tolist() == [True, True, False, False] and sep > 1e9
    # a user within the solver's precision of the level on both sides: a vertex solve decides
    mask, sep = maxmin.interior_blocked(np.array([0.5, 1e-7]), np.array([0.0, 1e-6]), 1.0)
    assert mask is None and sep < maxmin.SEPARATION
    # multipliers are compared as shares of their sum: the same mask in any units
    mask2, _ = maxmin.interior_blocked(1e6 * y, 1e3 * s, 1e3)
    assert mask2.tolist() == [True, True, False, False]


def test_ambiguous_round_is_decided_by_a_vertex_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _instance(5)
    monkeypatch.setattr(maxmin, "interior_blocked", lambda y, s, t: (None, 1.0))
    a = solve(inst, "tsf-er", solver_options={"interior": "on"})
    b = solve(inst, "tsf-er", solver_options={"interior": "off"})
    _agree(a, b)
    c = solve(inst, "drfh", solver_options={"interior": "on"})
    assert {rd["by"] for rd in c.details["rounds"]} == {"duals"}  # each round decided by a vertex
    assert all(rd["lps"] == 2 for rd in c.details["rounds"])


def test_bad_interior_value_names_the_option() -> None:
    with pytest.raises(ParameterError, match="interior = 'sometimes'"):
        solve(_instance(0), "drfh", solver_options={"interior": "sometimes"})
