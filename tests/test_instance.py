"""The instance model: derived quantities against hand-computed values (docs/instance-format.md#the-model)."""

from __future__ import annotations

import numpy as np
import pytest

from fairalloc import Instance, InstanceError, load_instance


def test_psdsf_fig1_gamma(examples):
    inst = load_instance(examples / "psdsf-fig1.yaml")
    assert inst.gamma.tolist() == [[6.0, 0.0], [6.0, 6.0]]  # [PSDSF] (8): bw 0 on s2
    assert inst.gamma_tsf.tolist() == [6.0, 12.0]  # docs/examples.md#psdsf-fig1
    # c = (21, 24, 100): u1 dominant in bw (10/100), u2 in mem (2/24)
    assert inst.dominant_resource == ("bw", "mem")
    np.testing.assert_allclose(inst.dominant_coeff, [0.1, 1 / 12])
    assert inst.eta.tolist() == [6.0, 12.0]


def test_tsfer_fig2_eta(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    np.testing.assert_allclose(inst.eta, [6.0, 7.5])  # docs/examples.md#tsfer-fig2
    # equal split: ψ = min(η/2, T); APF: Σγ/2 ignores the link
    np.testing.assert_allclose(inst.si_threshold("tsfer"), [3.0, 3.75])
    np.testing.assert_allclose(inst.si_threshold("apf"), inst.gamma.sum(1) / 2)


def test_scoped_external_eta_is_an_lp():
    # two servers each able to host 10 tasks of u1; the link serves only s1 and carries 4 tasks
    inst = Instance.from_arrays(capacity=[[10], [10]], demand=[[1]], external_capacity=[4],
                                external_demand=[[1]], external_scope=[[True, False]])
    assert inst.eta[0] == pytest.approx(14.0)  # 4 on s1 (link-bound) + 10 on s2
    unscoped = inst.replace(external_scope=None)
    assert unscoped.eta[0] == pytest.approx(4.0)
    # weighted SI threshold = η on capacities scaled by the weight share
    two = Instance.from_arrays(capacity=[[10], [10]], demand=[[1], [1]], weight=[1, 3],
                               external_capacity=[4], external_demand=[[1], [1]],
                               external_scope=[[True, False]])
    np.testing.assert_allclose(two.si_threshold("tsfer"), [0.25 * 14, 0.75 * 14])


def test_placement_and_task_limits_in_derived():
    inst = Instance.from_arrays(capacity=[[4, 4], [8, 2]], demand=[[1, 1], [2, 1]],
                                eligible=[[True, False], [True, True]], tasks=[1.5, np.inf])
    assert inst.gamma.tolist() == [[4.0, 0.0], [2.0, 2.0]]
    assert inst.gamma_tsf.tolist() == [6.0, 4.0]  # TSF ignores explicit placement constraints
    assert inst.eta.tolist() == [4.0, 4.0]  # η ignores the task limit ([TSFER] Table 1)
    np.testing.assert_allclose(inst.si_threshold("tsfer"), [1.5, 2.0])
    assert inst.has_placement and inst.has_task_limits


def test_time_shared_form(examples):
    inst = load_instance(examples / "psdsf-table3.yaml")
    assert inst.time_shared and inst.resources == ()
    assert inst.gamma[2].tolist() == [0.0, 0.0, 82.5, 27.5]
    with pytest.raises(InstanceError, match="time-shared"):
        inst.require_demands("drfh")
    with pytest.raises(InstanceError, match="time-shared"):
        _ = inst.dominant_coeff


def test_vds_and_frames(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    x = np.array([[3.6, 0], [3.6, 0], [0, 8], [0, 8]])
    vds = inst.vds(x)
    assert vds[0, 0] == pytest.approx(0.6) and np.isinf(vds[0, 1])
    assert vds[3, 0] == pytest.approx(8 / 9)  # docs/examples.md#psdsf-fig2: the paper's s_{4,1} = 1 is a slip
    df = inst.frame("gamma")
    assert list(df.index) == ["u1", "u2", "u3", "u4"] and list(df.columns) == ["s1", "s2"]
    assert inst.frame("eta").name == "eta"


def test_immutable():
    inst = Instance.from_arrays(capacity=[[1, 1]], demand=[[1, 1]])
    with pytest.raises(ValueError):
        inst.capacity[0, 0] = 5
    with pytest.raises(AttributeError):
        inst.name = "x"  # type: ignore[misc]


def test_pooled():
    inst = Instance.from_arrays(capacity=[[1, 2], [3, 4]], demand=[[1, 1]], external_capacity=[5],
                                external_demand=[[0.5]])
    p = inst.pooled()
    assert p.servers == ("pool",) and p.resources == ("r1", "r2", "e1")
    assert p.capacity.tolist() == [[4.0, 6.0, 5.0]]


def test_take_reorders_and_restricts_every_field():
    """take keeps every field with its user/server/resource (budgets, limits, scope, placement) and
    name_order sorts by name; a sub-instance drops the rest."""
    from fairalloc.generate import FAMILIES, random_instance

    inst = random_instance(3, 5, 4, 3, **FAMILIES["mixed"]).replace(
        budget_limit=np.array([1.0, np.inf, 2.0, np.inf, 3.0]),
        budget_cost=np.arange(20, dtype=float).reshape(5, 4) / 10)
    pu, ps, pr = np.array([4, 0, 3, 1, 2]), np.array([2, 3, 0, 1]), np.array([1, 2, 0])
    t = inst.take(pu, ps, pr)
    assert t.users == tuple(inst.users[n] for n in pu) and t.resources == tuple(inst.resources[r] for r in pr)
    for n, u in enumerate(t.users):
        m = inst.users.index(u)
        assert t.tasks[n] == inst.tasks[m] and t.weight[n] == inst.weight[m]
        assert t.budget_limit[n] == inst.budget_limit[m]
        for i, s in enumerate(t.servers):
            j = inst.servers.index(s)
            assert t.eligible[n, i] == inst.eligible[m, j] and t.budget_cost[n, i] == inst.budget_cost[m, j]
            assert t.gamma[n, i] == inst.gamma[m, j]
        assert t.demand[n].tolist() == inst.demand[m, pr].tolist()
        assert t.external_demand[n].tolist() == inst.external_demand[m].tolist()
    assert t.external_scope.tolist() == inst.external_scope[:, ps].tolist()
    orders = t.name_order()
    back = t.take(*orders)
    assert back.users == inst.users and back.servers == inst.servers and back.resources == inst.resources
    assert np.array_equal(back.demand, inst.demand) and np.array_equal(back.budget_cost, inst.budget_cost)
    assert back.name_order() is None
    sub = inst.take(users=[1, 3], servers=[0])
    assert sub.users == (inst.users[1], inst.users[3]) and sub.capacity.shape == (1, 3)


def test_name_order_sorts_names_not_numbers():
    inst = Instance.from_arrays(capacity=[[1.0]] * 3, demand=[[1.0]] * 11)  # u1, u2, …, u11
    users, servers, _, _ = inst.name_order()
    assert [inst.users[n] for n in users][:4] == ["u1", "u10", "u11", "u2"]
    assert servers.tolist() == [0, 1, 2]
