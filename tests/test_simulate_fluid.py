"""The fluid model ([TSFER] §6.1): hand-computed JCTs, the allocation inside χ at every event."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairalloc import Instance, load_instance
from fairalloc.generate import FAMILIES, random_instance
from fairalloc.simulate import Workload, WorkloadError, simulate_fluid
from fairalloc.verify.feasibility import feasibility


def two_jobs() -> Workload:
    """One server with 1 CPU. A: 2 tasks × 10 s of 0.5 CPU (η = 2, work 20) at t = 0;
    B: 4 tasks × 5 s of 0.25 CPU (η = 4, work 20) at t = 5."""
    inst = Instance.from_arrays(capacity=[[1.0]], demand=[[0.5], [0.25]], tasks=[2, 4],
                                users=["A", "B"])
    return Workload(inst, [0.0, 5.0], [10.0, 5.0])


@pytest.mark.parametrize("mechanism", ["tsf-er", "mnw", "cru"])
def test_two_jobs_by_hand(mechanism):
    """A alone runs at 2 until t = 5 (10 of 20 done). Then TSF-ER, MNW and CRU all give A one half
    and B the other half of the CPU: X = (1, 2) (task shares 1/2; Nash: each spends half; CRU: EF
    forces X_B = 2 X_A). Both finish at t = 15: JCTs (15, 10), standalone (10, 5)."""
    r = simulate_fluid(two_jobs(), mechanism)
    assert r.ok
    assert r.jobs["finish"].tolist() == pytest.approx([15, 15], rel=1e-6)
    assert r.jobs["jct_factor"].tolist() == pytest.approx([10 / 15, 5 / 10], rel=1e-6)
    assert r.stats["solves"] == 2  # at 0 and 5; both leave together at 15
    tl = r.timeline
    assert tl["users"].tolist() == [1, 2] and tl["running"].tolist() == pytest.approx([2, 3], rel=1e-6)
    assert tl["utilization"].tolist() == pytest.approx([1, 1], rel=1e-6)


def test_utilitarian_starves_the_expensive_job():
    """max X_A + X_B gives B the whole CPU (X_B = 4): B done at 10 (factor 1); A stalls in [5, 10] and
    finishes at 15."""
    r = simulate_fluid(two_jobs(), "utilitarian")
    assert r.jobs["finish"].tolist() == pytest.approx([15, 10])
    assert r.jobs["jct_factor"].tolist() == pytest.approx([10 / 15, 1])
    assert r.summary()["mean_jct_factor"] == pytest.approx((2 / 3 + 1) / 2)


def test_fig2_with_the_link(examples):
    """[TSFER] Fig. 2 (link as external resource), both jobs at 0: TSF-ER runs X = (30/7, 75/14), so u1
    (work 30) leaves at 7; u2 (work 52.5) then runs alone at η = 7.5 and leaves at 9. MNW runs (5, 5):
    u1 leaves at 6, u2 at 6 + 22.5/7.5 = 9."""
    inst = load_instance(examples / "tsfer-fig2.yaml").replace(tasks=np.array([3.0, 5.0]))
    wl = Workload(inst, [0.0, 0.0], [10.0, 10.5])
    rates = []
    r = simulate_fluid(wl, "tsf-er", observer=lambda t, i, x: rates.append(x.sum(axis=1)))
    assert rates[0] == pytest.approx([30 / 7, 75 / 14]) and rates[1] == pytest.approx([7.5])
    assert r.jobs["finish"].tolist() == pytest.approx([7, 9])
    assert r.jobs["jct_factor"].tolist() == pytest.approx([5 / 7, 7 / 9])
    m = simulate_fluid(wl, "mnw")
    assert m.jobs["finish"].tolist() == pytest.approx([6, 9], rel=1e-6)


def test_task_limits_cap_the_rate():
    """A lone job with 1 task of 10 s and η = 2: the paper's fluid model runs it at rate 2 (JCT 5);
    with task limits at rate 1 (JCT 10); either way its JCT factor is 1."""
    inst = Instance.from_arrays(capacity=[[1.0]], demand=[[0.5]], tasks=[1])
    wl = Workload(inst, [0.0], [10.0])
    assert simulate_fluid(wl, "tsf-er").jobs["jct"].iloc[0] == pytest.approx(5)
    r = simulate_fluid(wl, "tsf-er", task_limits=True)
    assert r.jobs["jct"].iloc[0] == pytest.approx(10) and r.jobs["jct_factor"].iloc[0] == pytest.approx(1)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mechanism", ["tsf-er", "cru", "drfh"])
def test_allocation_stays_in_chi_and_work_is_conserved(seed, mechanism):
    """Random clusters (placement constraints, an external resource), staggered arrivals: every
    allocation the simulator runs is inside χ, every job finishes after its standalone JCT, and the
    task-seconds executed equal the work submitted."""
    rng = np.random.default_rng(seed)
    inst = random_instance(seed, n_users=5, n_servers=3, n_resources=2, external=1, placement=True,
                           missing=0.0)
    inst = inst.replace(tasks=rng.integers(1, 30, inst.n_users).astype(float))
    wl = Workload(inst, np.sort(rng.uniform(0, 20, inst.n_users)), rng.uniform(1, 10, inst.n_users))
    seen = []

    def check(t, sub, x):
        rep = feasibility(sub, x, tol=1e-7)
        assert rep["holds"], (t, rep)
        seen.append(t)

    r = simulate_fluid(wl, mechanism, observer=check)
    assert r.ok and len(seen) == r.stats["solves"] >= inst.n_users
    assert r.stats["max_violation"] <= 1e-7
    f = r.jobs["jct_factor"]
    assert ((f > 0) & (f <= 1 + 1e-7)).all()
    tl = r.timeline
    assert ((tl["end"] - tl["start"]) * tl["running"]).sum() == pytest.approx(wl.work.sum(), rel=1e-7)
    if mechanism in {"tsf-er", "cru"}:  # EF and SI hold for these with unlimited tasks
        assert tl["min_ef_sat"].min() > 1 - 1e-6 and tl["min_si_sat"].min() > 1 - 1e-6


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), family=st.sampled_from(["scoped", "mixed"]),
       mechanism=st.sampled_from(["tsf-er", "cru", "relative-utilitarian"]))
def test_scoped_external_resources_stay_in_chi(seed, family, mechanism):
    """Hypothesis: several external resources scoped to server subsets, placement constraints and
    weights — every allocation of the run lies in χ."""
    rng = np.random.default_rng(seed)
    inst = random_instance(seed, **{**FAMILIES[family], "limits": False})
    inst = inst.replace(tasks=rng.integers(1, 20, inst.n_users).astype(float))
    wl = Workload(inst, np.sort(rng.uniform(0, 10, inst.n_users)), rng.uniform(1, 5, inst.n_users))

    def check(t, sub, x):
        assert feasibility(sub, x, tol=1e-7)["holds"], t

    r = simulate_fluid(wl, mechanism, observer=check)
    assert r.ok and r.jobs["finish"].notna().all()


def test_a_stopped_solve_is_a_status_not_a_number():
    r = simulate_fluid(two_jobs(), "tsf-er", time_limit=1e-9)
    assert r.status.value == "time_limit" and not r.ok and "t = 0" in r.message
    assert r.jobs["finish"].isna().all() and np.isnan(r.summary()["mean_jct_factor"])


def test_online_mechanism_is_not_fluid():
    with pytest.raises(WorkloadError, match="indivisible"):
        simulate_fluid(two_jobs(), "tsf-er-online")
