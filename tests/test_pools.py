"""Exact aggregation of identical servers (models/_pools.py): the even split of a pooled solution is a
solution of the full instance — PS-DSF by the Thm 1 certificate, αPF-VDS by the NCP residual — and the
totals agree with solving the full instance directly."""

from __future__ import annotations

import numpy as np
import pytest

from fairalloc import solve
from fairalloc.generate import apf_bitbrain, apf_cluster, random_instance
from fairalloc.models._pools import expand, pool, pooled_utility, server_pools
from fairalloc.models.apf_vds import nash_conditions
from fairalloc.verify.psdsf import psdsf_certificate

REPS = [0, 0, 1, 2, 2, 2]  # six servers: pools of 2, 1 and 3


def _duplicated(seed: int, time_shared: bool):
    base = random_instance(seed, 6, 3, 3, missing=0.0, time_shared=time_shared, weights=True,
                           placement=True)
    changes = {"servers": tuple(f"s{k}" for k in range(len(REPS))), "eligible": base.eligible[:, REPS],
               "budget_cost": base.budget_cost[:, REPS]}
    if time_shared:
        changes["rates"] = base.rates[:, REPS]
    else:
        changes["capacity"] = base.capacity[REPS]
    return base.replace(**changes)


def test_pools_found_and_pooled_capacities():
    full = _duplicated(3, False)
    groups = server_pools(full)
    assert groups == [[0, 1], [2], [3, 4, 5]]
    P = pool(full, groups)
    assert P.servers == ("s0", "s2", "s3")
    np.testing.assert_allclose(P.capacity, full.capacity[[0, 2, 3]] * np.array([[2], [1], [3]]))
    x = expand(np.arange(P.n_users * 3, dtype=float).reshape(-1, 3), groups, 6)
    np.testing.assert_allclose(x[:, 3] * 3, np.arange(P.n_users) * 3 + 2)
    # per-server keys split a pool
    assert server_pools(full, keys=[1, 2, 3, 3, 3, 3]) == [[0], [1], [2], [3, 4, 5]]


@pytest.mark.parametrize("time_shared", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_psdsf_pooled_is_psdsf_of_the_full_instance(seed, time_shared):
    full = _duplicated(seed, time_shared)
    groups = server_pools(full)
    r = solve(pool(full, groups), "ps-dsf", algorithm="paper")
    assert r.ok
    x = expand(r.x, groups, full.n_servers)
    assert psdsf_certificate(full, x)["holds"]
    direct = solve(full, "ps-dsf", algorithm="paper")
    np.testing.assert_allclose(x.sum(axis=1), direct.tasks, rtol=1e-6)


@pytest.mark.parametrize("time_shared", [False, True])
@pytest.mark.parametrize("alpha,B", [(2.0, 0.0), (3.0, 0.5), (0.5, 0.2)])
def test_apf_pooled_with_adjusted_A_is_an_equilibrium(alpha, B, time_shared):
    full = _duplicated(4, time_shared)
    groups = server_pools(full)
    K = full.n_servers
    a, A_p, B_p = pooled_utility(groups, np.full(K, alpha), np.ones(K), np.full(K, B))
    r = solve(pool(full, groups), "apf-vds", alpha=list(a), A=list(A_p), B=list(B_p))
    assert r.ok
    x = expand(r.x, groups, K)
    assert nash_conditions(full, x, alpha=alpha, A=1.0, B=B)["ncp_residual"] < 1e-8
    direct = solve(full, "apf-vds", alpha=alpha, B=B)
    np.testing.assert_allclose(x.sum(axis=1), direct.tasks, rtol=1e-6)


def test_pooling_without_the_A_adjustment_is_not_exact():
    """The adjustment A_p = A·m^((1−α)/α) matters where B > 0 and α ≠ 1 (with B = 0 a per-server factor
    on A only scales that server's multipliers)."""
    full = _duplicated(4, False)
    groups = server_pools(full)
    r = solve(pool(full, groups), "apf-vds", alpha=3.0, B=0.5)
    x = expand(r.x, groups, full.n_servers)
    assert nash_conditions(full, x, alpha=3.0, B=0.5)["ncp_residual"] > 1e-6


@pytest.mark.parametrize("make", [lambda e: apf_bitbrain(2, 60, expand=e),
                                  lambda e: apf_cluster(2, 5, expand=e)])
def test_apf_cluster_expanded_pools_back_to_the_nine_pools(make):
    pooled, full = make(False), make(True)
    assert full.n_servers == 250 and pooled.n_servers == 9
    groups = server_pools(full)
    P = pool(full, groups)
    assert len(groups) == 9 and sorted(map(len, groups)) == [25] * 8 + [50]
    np.testing.assert_allclose(P.capacity, pooled.capacity, rtol=1e-12)
    assert (P.eligible == pooled.eligible).all()
    np.testing.assert_array_equal(P.demand, pooled.demand)


@pytest.mark.parametrize("time_shared", [False, True])
def test_mechanisms_pool_identical_servers_themselves(time_shared):
    """ps-dsf and apf-vds find identical servers, solve the pooled game, and certify the even split on
    every server; `pool=false` solves the full game, with the same totals."""
    full = _duplicated(5, time_shared)
    for mech, params in (("ps-dsf", {}), ("apf-vds", {"alpha": 2.0, "B": 0.3}), ("apf-vds", {"alpha": 1.0})):
        pooled = solve(full, mech, **params)
        assert pooled.ok, (mech, params, pooled.message)
        assert pooled.details["pools"] == {"s0": ["s0", "s1"], "s3": ["s3", "s4", "s5"]}
        np.testing.assert_allclose(pooled.x[:, 0], pooled.x[:, 1])
        np.testing.assert_allclose(pooled.x[:, 3], pooled.x[:, 5])
        if mech == "ps-dsf":
            assert pooled.details["certificate"]["holds"]
            assert psdsf_certificate(full, pooled.x)["holds"]
        else:
            assert nash_conditions(full, pooled.x, alpha=params["alpha"], B=params.get("B", 0.0),
                                   gains=False)["ncp_residual"] < 1e-8
        direct = solve(full, mech, pool=False, **params)
        assert "pools" not in direct.details
        np.testing.assert_allclose(pooled.tasks, direct.tasks, rtol=1e-6)


def test_a_hook_turns_pooling_off():
    full = _duplicated(5, False)
    r = solve(full, "ps-dsf", customize=lambda m, inst: None)
    assert "pools" not in r.details


def test_task_limits_pooled_by_psdsf_not_by_apf():
    full = _duplicated(5, False)
    base = solve(full, "apf-vds", alpha=2.0, pool=False, gains=False)
    lim = full.replace(tasks=np.where(np.arange(full.n_users) % 2 == 0, 0.6 * base.tasks, np.inf))
    ps, ps_full = solve(lim, "ps-dsf"), solve(lim, "ps-dsf", pool=False)
    assert ps.ok and "pools" in ps.details and ps.details["certificate"]["holds"]
    # with task limits PS-DSF has several fixed points (docs/mechanisms/psdsf.md): both are certified on
    # the full instance, and need not be the same one
    assert ps_full.ok and psdsf_certificate(lim, ps_full.x)["holds"] and psdsf_certificate(lim, ps.x)["holds"]
    apf = solve(lim, "apf-vds", alpha=2.0, gains=False)
    assert apf.ok and "pools" not in apf.details


def test_a_pool_is_named_after_its_least_name_whatever_the_order():
    """The pooled server takes the least name among its members, not the first in the file (the
    canonical rules hash the names): the servers listed in reverse give the same pools and, for a mix
    of α = inf and finite α, the same allocation."""
    full = _duplicated(5, False)
    order = list(range(full.n_servers))[::-1]
    rev = full.replace(servers=tuple(full.servers[i] for i in order), eligible=full.eligible[:, order],
                       capacity=full.capacity[order], budget_cost=full.budget_cost[:, order])
    assert pool(rev, server_pools(rev)).servers == ("s3", "s2", "s0")
    alpha = {"s0": "inf", "s1": "inf", "s2": "2", "s3": "2", "s4": "2", "s5": "2"}
    a = solve(full, "apf-vds", alpha=",".join(alpha[s] for s in full.servers), gains=False)
    b = solve(rev, "apf-vds", alpha=",".join(alpha[s] for s in rev.servers), gains=False)
    assert a.details["pools"] == {"s0": ["s0", "s1"], "s3": ["s3", "s4", "s5"]}
    # (apf-vds solves in name order, so the reversed file's pools are listed as the first's)
    assert b.details["pools"] == a.details["pools"]
    assert a.status.value == b.status.value == "optimal"
    np.testing.assert_allclose(b.x[:, order], a.x, rtol=1e-6, atol=1e-9 * a.x.max())
