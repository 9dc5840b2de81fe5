"""Algorithm 2 ([TSFER] §5) and the indivisible-task simulator: hand-traced numbers and the
no-over-allocation invariant at every event."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairalloc import Instance, solve
from fairalloc.generate import FAMILIES, random_instance
from fairalloc.models.tsf_er_online import ClusterState, OnlineTSFER, one_reallocation
from fairalloc.simulate import Workload, WorkloadError, simulate_online, standalone_concurrency
from fairalloc.verify.feasibility import feasibility


def workload(capacity, demands, tasks, duration, arrival, **kw) -> Workload:
    inst = Instance.from_arrays(capacity=capacity, demand=demands, tasks=tasks, **kw)
    return Workload(inst, arrival, duration)


# ---------------------------------------------------------------------- AllocateFromQueues
def test_static_fig2_traced_by_hand(examples):
    """[TSFER] Fig. 2 in units of 1/15: s1 = (5, 10), s2 = (10, 5), link 15; u1 = (2, 1; 2.5),
    u2 = (1, 2; 0.5); one-task shares 1/6 and 2/15. Traced: u2→s1, u1→s1, u2→s1, u1→s2, u2→s1,
    u1→s2, u2→s2, u1→s2; then s1 = (0, 3) and s2 = (3, 0) take no task of either."""
    r = solve(examples / "tsfer-fig2.yaml", "tsf-er-online")
    assert r.status.value == "converged"
    np.testing.assert_array_equal(r.x, [[1, 3], [3, 1]])
    assert r.details["task_share"] == pytest.approx({"u1": 4 / 6, "u2": 4 / 7.5})


def test_ties_go_to_the_smaller_one_task_share():
    """Equal shares → least 1/(φη): the weight-2 user moves first and ends one task ahead."""
    inst = Instance.from_arrays(capacity=[[3]], demand=[[1], [1]], weight=[1, 2])
    np.testing.assert_array_equal(one_reallocation(inst), [[1], [2]])
    # unweighted: the earlier user wins the tie, then they alternate
    inst = Instance.from_arrays(capacity=[[3]], demand=[[1], [1]])
    np.testing.assert_array_equal(one_reallocation(inst), [[2], [1]])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 100_000), family=st.sampled_from(["plain", "placement", "external", "limits"]))
def test_counted_reallocation_equals_one_task_at_a_time(seed, family):
    """The static mechanism counts tasks (a user keeps its turn and its best-fit server for as many
    tasks as the rules allow, in one step); Algorithm 2's loop places them one by one with task ids.
    Same allocation, task for task."""
    rng = np.random.default_rng(seed)
    kw = {"placement": family == "placement", "external": int(family == "external"),
          "limits": family == "limits", "weights": bool(seed % 2)}
    N, K, R = (int(v) for v in rng.integers([2, 1, 1], [6, 4, 4]))
    inst = random_instance(seed, N, K, R, **kw)
    if (np.floor(inst.eta) + 1).sum() > 5000:  # the reference loop is one step per task
        inst = inst.replace(tasks=np.minimum(inst.tasks, 1000.0))
    np.testing.assert_array_equal(one_reallocation(inst), one_reallocation(inst, batched=False))


def test_a_billion_tasks_are_counted_not_listed():
    """One server {cpu: 1e9}, one user of 1 CPU: ⌊η⌋ + 1 queued tasks once took 52 s for 1e6 and ran
    out of memory for 1e9; counted, it is one step."""
    r = solve(Instance.from_arrays(capacity=[[1e9]], demand=[[1.0]]), "tsf-er-online")
    assert r.status.value == "converged" and r.x[0, 0] == 1e9
    inst = Instance.from_arrays(capacity=[[1e6], [3e5]], demand=[[1.0], [2.0]])
    r = solve(inst, "tsf-er-online")
    assert r.status.value == "converged" and feasibility(inst, r.x)["holds"]
    np.testing.assert_array_equal(r.x.T @ [1.0, 2.0], [1e6, 3e5])  # both servers full


def test_alike_users_taking_turns_are_counted_too():
    """Two alike users alternate task by task; a stretch of turns whose order cannot matter (each keeps
    its server, everything fits) is placed at once: 10⁷ tasks in a few steps, the same split as the
    one-by-one loop would make."""
    r = solve(Instance.from_arrays(capacity=[[1e7]], demand=[[1.0], [1.0]]), "tsf-er-online")
    assert r.status.value == "converged"
    np.testing.assert_array_equal(r.x, [[5e6], [5e6]])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 100_000))
def test_counted_turns_equal_one_task_at_a_time(seed):
    """Alike users (equal demands, sometimes weights, placement, an external resource) on small integer
    capacities: the counted loop, turns batched, equals the one-by-one loop task for task."""
    rng = np.random.default_rng(seed)
    N, K, R = int(rng.integers(2, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
    demand = rng.integers(1, 4, (N, R)).astype(float)
    demand[1] = demand[0]
    elig = rng.random((N, K)) > 0.3
    elig[:, 0] |= ~elig.any(axis=1)
    kw = {"external_capacity": [float(rng.integers(100, 500))],
          "external_demand": rng.integers(0, 3, (N, 1)).astype(float)} if seed % 3 == 0 else {}
    inst = Instance.from_arrays(capacity=rng.integers(50, 400, (K, R)).astype(float), demand=demand,
                                weight=rng.choice([1.0, 2.0], N) if seed % 2 else None, eligible=elig, **kw)
    np.testing.assert_array_equal(one_reallocation(inst), one_reallocation(inst, batched=False))


def test_best_fit_by_normalised_squared_distance():
    """A task (1, 1) fits s1 = (1, 4) and s2 = (2, 2); totals (3, 6): distances (0² + (3/6)²) = .25
    and ((1/3)² + (1/6)²) ≈ .139 → s2, although s1 has the most free memory."""
    st = OnlineTSFER(np.array([[1.0, 4.0], [2.0, 2.0]]))
    st.add_user("a", [1.0, 1.0])
    st.task_arrival({"a": [7]})
    assert st.drain_started() == [(7, "a", 1)]


def test_task_limits_and_placement_in_the_static_mechanism():
    """Two servers with 4 CPUs, tasks of 1 CPU. With T = (2, ∞): u1, u2, u1 go to s1 (best fit: the
    fuller server), u1 has no task left, u2 fills s1 and then s2: x = [[2, 0], [2, 4]]."""
    inst = Instance.from_arrays(capacity=[[4], [4]], demand=[[1], [1]], tasks=[2, np.inf])
    np.testing.assert_array_equal(one_reallocation(inst), [[2, 0], [2, 4]])
    # u1 may only use s1 (η = 4, one-task share 1/4; u2: η = 8, 1/8). u2, u1, u2, u2 (tie at 1/4 →
    # smaller one-task share) fill s1 by best fit; u1 then fits nowhere: greedy packing is not
    # Pareto optimal — u1 could have had s1 to itself
    inst = Instance.from_arrays(capacity=[[4], [4]], demand=[[1], [1]],
                                eligible=[[True, False], [True, True]])
    np.testing.assert_array_equal(one_reallocation(inst), [[1, 0], [3, 4]])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), family=st.sampled_from(["plain", "mixed", "scoped", "limits"]))
def test_one_reallocation_is_feasible_and_maximal(seed, family):
    """On random instances (placement, weights, limits, scoped external resources): whole tasks,
    within χ, and maximal — no user with tasks left has one that still fits anywhere."""
    inst = random_instance(seed, **FAMILIES[family])
    x = one_reallocation(inst)
    assert (x == np.round(x)).all()
    assert feasibility(inst, x, tol=1e-9)["holds"]
    left = np.isinf(inst.tasks) | (x.sum(axis=1) < np.floor(inst.tasks))  # ⌊T⌋ whole tasks queued
    free = inst.capacity - x.T @ inst.demand
    ext_free = inst.external_capacity - np.array(
        [(x[:, inst.external_scope[e]].sum(axis=1) * inst.external_demand[:, e]).sum()
         for e in range(len(inst.external))])
    tol = 1e-9 * inst.capacity.sum(axis=0)
    for n in np.flatnonzero(left):
        for i in np.flatnonzero(inst.runnable[n]):
            fits_server = (free[i] >= inst.demand[n] - tol).all()
            fits_ext = all(ext_free[e] >= inst.external_demand[n, e] - 1e-9
                           for e in range(len(inst.external)) if inst.external_scope[e, i])
            assert not (fits_server and fits_ext), (inst.users[n], inst.servers[i])


def test_time_shared_instances_are_rejected(examples):
    from fairalloc.errors import InstanceError

    with pytest.raises(InstanceError, match="time-shared"):
        solve(examples / "psdsf-table3.yaml", "tsf-er-online")


# ---------------------------------------------------------------------- hand-computed JCTs
def test_two_jobs_without_reallocation():
    """One server, 2 CPUs. A: 2 tasks × 10 s at t=0; B: 1 task × 10 s at t=5. A holds both CPUs
    until 10, B runs 10–20: JCT 10 and 15; standalone 10 and 10."""
    wl = workload([[2]], [[1], [1]], [2, 1], [10, 10], [0, 5])
    r = simulate_online(wl, slot=np.inf, check=True)
    assert r.jobs["jct"].tolist() == pytest.approx([10, 15])
    assert r.jobs["jct_factor"].tolist() == pytest.approx([1, 10 / 15])
    assert r.stats["reallocations"] == 0


def test_two_jobs_with_reallocation_slots_and_overhead():
    """Same jobs, slot 4 s, overhead 0.25 s. t=4 (A arrived in (0, 4]): A's tasks suspended with 6 s
    left, resumed (6.25 s, end 10.25). t=8 (B arrived): 2.25 s left each; shares reset; tie (η = 2 each)
    → A, then B: A#0 ends 8 + 2.5, B ends 18; A#1 waits. t=10.5: A#1 starts (2.5 s). t=12: both
    suspended (1 s and 6 s left): A#1 ends 13.25, B 18.25. t=16: B suspended (2.25 s left), ends 18.5.
    JCTs 13.25 and 13.5; 2 + 2 + 2 + 1 suspensions."""
    wl = workload([[2]], [[1], [1]], [2, 1], [10, 10], [0, 5])
    r = simulate_online(wl, slot=4.0, overhead=0.25, check=True)
    assert r.jobs["finish"].tolist() == pytest.approx([13.25, 18.5])
    assert r.jobs["jct"].tolist() == pytest.approx([13.25, 13.5])
    assert r.stats["reallocations"] == 4  # at 4, 8, 12 and 16; none at 20 (nobody left)
    assert r.stats["suspended"] == 7


def test_rounded_baseline_by_hand():
    """[TSFER] §6.1 baseline, MNW rounded. One server, 4 CPUs; A, B: 4 tasks × 10 s, 1 CPU each; A at 0,
    B at 1; slot 5 s. t=0: random fill gives A all 4 CPUs; t=1: nothing fits. t=5: A suspended (5 s
    left each); MNW = (2, 2) → A#0,#1 resume (end 10.25), B#0,#1 start (end 15). t=10.25: only tasks
    departed → no fill, 2 CPUs stay idle. t=15: B#0,#1 end; Reallocation: A#2,#3 (5.25 s, end 20.25),
    B#2,#3 (end 25). JCTs 20.25 and 24."""
    wl = workload([[4]], [[1], [1]], [4, 4], [10, 10], [0, 1])
    r = simulate_online(wl, "mnw", slot=5.0, overhead=0.25, fill_on="users", check=True)
    assert r.ok and r.stats["solves"] == 1  # one set of jobs: the fluid allocation is cached
    assert r.jobs["finish"].tolist() == pytest.approx([20.25, 25])
    assert r.jobs["jct_factor"].tolist() == pytest.approx([10 / 20.25, 10 / 24])
    # with fill on every task departure the idle CPUs at 10.25 are used
    r2 = simulate_online(wl, "mnw", slot=5.0, overhead=0.25, fill_on="tasks", check=True)
    assert r2.jobs["finish"].max() < 25


def test_standalone_concurrency_uses_the_link():
    """Alone: 4 CPUs give 4 tasks at once, but the link (capacity 1, 0.3 per task) only 3."""
    wl = workload([[4]], [[1]], [7], [10], [0], external_capacity=[1.0], external_demand=[[0.3]])
    assert standalone_concurrency(wl).tolist() == [3]
    r = simulate_online(wl, slot=np.inf)
    assert r.jobs["standalone_jct"].iloc[0] == pytest.approx(30)  # ⌈7/3⌉ waves of 10 s
    assert r.jobs["jct_factor"].iloc[0] == pytest.approx(1)


def test_a_task_that_fits_nowhere_is_an_error():
    wl = workload([[4]], [[1]], [1], [10], [0], external_capacity=[1.0], external_demand=[[2.0]])
    with pytest.raises(WorkloadError, match="does not fit"):
        simulate_online(wl)


# ---------------------------------------------------------------------- the invariant
def _random_workload(seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    inst = random_instance(seed, n_users=6, n_servers=3, n_resources=2, external=1,
                           placement=True, weights=True, missing=0.0)
    # demands small enough that several tasks fit; whole task counts; staggered arrivals
    inst = inst.replace(demand=inst.demand / 2, external_demand=inst.external_demand / 2,
                        tasks=rng.integers(1, 20, inst.n_users).astype(float))
    return Workload(inst, np.sort(rng.uniform(0, 30, inst.n_users)), rng.uniform(1, 10, inst.n_users))


def _invariant_observer(wl: Workload, log: list[str]):
    inst = wl.instance

    def check(t: float, event: str, st: ClusterState) -> None:
        keys = np.array(st.keys, int)
        x = st.running.astype(float)
        used = x.T @ inst.demand[keys] if keys.size else np.zeros_like(inst.capacity)
        assert (used <= inst.capacity * (1 + 1e-9) + 1e-12).all(), (t, event, used)
        for e in range(len(inst.external)):
            ext = (x[:, inst.external_scope[e]].sum(axis=1) * inst.external_demand[keys, e]).sum()
            assert ext <= inst.external_capacity[e] * (1 + 1e-9), (t, event, ext)
        assert not (x[~inst.runnable[keys]] > 0).any()  # placement constraints
        assert (x.sum(axis=1) <= inst.tasks[keys]).all()
        np.testing.assert_allclose(st.avail, inst.capacity - used, atol=1e-9)
        log.append(event)

    return check


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mechanism", ["tsf-er-online", "cru"])
def test_never_over_allocates_at_any_event(seed, mechanism):
    """Recount server and link usage from the running tasks after every event batch and every
    Reallocation; also placement constraints and task counts."""
    wl = _random_workload(seed)
    log: list[str] = []
    r = simulate_online(wl, mechanism, slot=3.0, overhead=0.25, sample=5.0, check=True,
                        observer=_invariant_observer(wl, log), fill_on="tasks", seed=seed)
    assert r.ok and r.jobs["finish"].notna().all()
    assert "reallocation" in log and log.count("event") == r.stats["events"]
    assert r.stats["max_overuse"] <= 1e-9
    f = r.jobs["jct_factor"]
    assert ((f > 0) & (f <= 1 + 1e-9)).all()
    # the timeline covers the run and its ratios are ratios
    tl = r.timeline
    assert tl["end"].iloc[-1] == pytest.approx(r.jobs["finish"].max())
    assert ((tl["utilization"] >= 0) & (tl["utilization"] <= 1 + 1e-9)).all()
    sat = tl[["min_ef_sat", "min_si_sat"]].dropna()
    assert ((sat >= 0) & (sat <= 1)).all().all()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), family=st.sampled_from(["scoped", "mixed", "weights"]),
       mechanism=st.sampled_from(["tsf-er-online", "tsf-er"]), slot=st.sampled_from([2.0, 7.0, np.inf]))
def test_invariant_on_random_clusters(seed, family, mechanism, slot):
    """Hypothesis: several (scoped) external resources, placement constraints, weights; Algorithm 2
    and a rounded baseline; the recount at every event never exceeds a capacity."""
    rng = np.random.default_rng(seed)
    inst = random_instance(seed, **{**FAMILIES[family], "limits": False}, missing=0.0)
    inst = inst.replace(demand=inst.demand / 3, external_demand=inst.external_demand / 3,
                        tasks=rng.integers(1, 15, inst.n_users).astype(float))
    wl = Workload(inst, np.sort(rng.uniform(0, 20, inst.n_users)), rng.uniform(1, 10, inst.n_users))
    try:
        standalone_concurrency(wl)
    except WorkloadError:
        return  # a task that fits nowhere: rejected up front (tested above)
    log: list[str] = []
    r = simulate_online(wl, mechanism, slot=slot, check=True, fill_on="tasks", seed=seed,
                        observer=_invariant_observer(wl, log))
    assert r.ok and r.jobs["finish"].notna().all() and len(log) >= r.stats["events"]


def test_bad_settings_are_one_error():
    wl = workload([[2]], [[1]], [1], [10], [0])
    for kw, words in [({"slot": 0}, "slot"), ({"slot": 1, "overhead": 2}, "never finish"),
                      ({"fill": "x"}, "fill"), ({"sample": -1}, "sample")]:
        with pytest.raises(WorkloadError, match=words):
            simulate_online(wl, **kw)
    frac = workload([[2]], [[1]], [1.5], [10], [0])
    with pytest.raises(WorkloadError, match="whole number"):
        simulate_online(frac)
    with pytest.raises(WorkloadError, match="cannot be rounded"):  # DRF allocates on a pooled server
        simulate_online(workload([[2], [2]], [[1]], [3], [10], [0]), "drf", slot=5)
