"""PS-DSF: docs/examples.md examples 1–3 by all three algorithms, the [PSDSF] Thm 1 certificate (computed
by the
verification layer, independently of the mechanism) on random instances, and the distributed trajectory."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from restate import back, restated

from fairalloc import Instance, load_instance, solve
from fairalloc.errors import InstanceError
from fairalloc.generate import FAMILIES as GEN_FAMILIES
from fairalloc.generate import random_instance
from fairalloc.verify import feasibility, psdsf_certificate

ALGORITHMS = ("best-response", "paper", "fast", "distributed")

GOLDEN = {
    "psdsf-fig1": [6.0, 6.0],
    "psdsf-fig2": [3.6, 3.6, 8.0, 8.0],
    "psdsf-table3": [210.0, 105.0, 82.5, 27.5],
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("example", sorted(GOLDEN))
def test_golden_examples(examples, example, algorithm):
    inst = load_instance(examples / f"{example}.yaml")
    r = solve(inst, "ps-dsf", algorithm=algorithm)
    assert r.status.value == "converged", r.message
    np.testing.assert_allclose(r.tasks, GOLDEN[example], rtol=1e-7)
    assert r.details["certificate"]["holds"]
    assert psdsf_certificate(inst, r.x)["holds"]  # recomputed on the returned (snapped) allocation
    assert feasibility(inst, r.x)["holds"]
    x = r.x
    if example == "psdsf-fig1":
        np.testing.assert_allclose(x, [[6, 0], [0, 6]], atol=1e-7)
    elif example == "psdsf-fig2":  # users 1-2 on s1 only, users 3-4 on s2 only
        np.testing.assert_allclose(x, [[3.6, 0], [3.6, 0], [0, 8], [0, 8]], atol=1e-7)
    else:  # Table IV: u3 alone on C, u4 alone on D; u1-u2 split A and B (not unique)
        C, D = inst.servers.index("C"), inst.servers.index("D")
        assert x[2, C] == pytest.approx(82.5) and x[:, C].sum() == pytest.approx(82.5)
        assert x[3, D] == pytest.approx(27.5) and x[:, D].sum() == pytest.approx(27.5)
        assert x[:2, :2].sum(axis=1) == pytest.approx([210, 105])


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), family=st.sampled_from(["plain", "placement", "weights", "ts"]))
def test_random_instances_carry_the_certificate(seed, family):
    kw = {"plain": {}, "placement": {"placement": True}, "weights": {"weights": True, "placement": True},
          "ts": {"time_shared": True, "weights": True, "placement": True}}[family]
    inst = random_instance(seed, **kw)
    for algorithm in ("best-response", "paper"):
        r = solve(inst, "ps-dsf", algorithm=algorithm)
        assert r.status.value == "converged", (algorithm, r.message)
        assert feasibility(inst, r.x)["holds"]
        cert = psdsf_certificate(inst, r.x)
        assert cert["holds"], (algorithm, cert["failures"])


def test_best_response_extrapolates_a_steady_drift():
    # two near-proportional servers: Gauss–Seidel walks along a ridge of PS-DSF allocations at constant
    # speed (≈1,800 sweeps); the extrapolation jumps to where the walk stops
    inst = random_instance(48)
    r = solve(inst, "ps-dsf", algorithm="best-response")
    assert r.status.value == "converged" and r.details["extrapolations"] >= 1
    assert r.details["sweeps"] < 20
    p = solve(inst, "ps-dsf", algorithm="paper")  # Algorithm I walks the whole ridge
    assert p.details["rounds"] > 1000
    np.testing.assert_allclose(r.tasks, p.tasks, rtol=1e-7)


def test_best_response_settles_an_lp_noise_fixed_point_by_numpy_sweeps():
    # two users' VDS at a server 1.3e-6 apart: the LP responses alternated between vertices, the sweeps'
    # change dipped below tol by chance and the point missed Thm 1 (status error before)
    inst = random_instance(5, 12, 4, 3, missing=0)
    r = solve(inst, "ps-dsf", algorithm="best-response")
    assert r.status.value == "converged" and r.details["numpy_sweeps"] >= 1
    assert psdsf_certificate(inst, r.x)["holds"]


def test_distributed_trajectory_is_seeded_and_recorded(examples):
    a = solve(examples / "psdsf-table3.yaml", "ps-dsf", algorithm="distributed", seed=3)
    b = solve(examples / "psdsf-table3.yaml", "ps-dsf", algorithm="distributed", seed=3)
    traj = a.details["trajectory"]
    assert [t["order"] for t in traj] == [t["order"] for t in b.details["trajectory"]]
    assert traj[-1]["updates"] == 0 and traj[-1]["certificate_failures"] == 0
    assert traj[0]["certificate_failures"] > 0 and traj[-1]["distance"] == 0.0
    assert all(set(t["order"]) == {"A", "B", "C", "D"} for t in traj)


def test_rejects_what_the_per_server_game_does_not_define(examples):
    with pytest.raises(InstanceError, match=r"external .* only algorithm=fast and best-response"):
        solve(examples / "tsfer-fig2.yaml", "ps-dsf", algorithm="paper")
    inst = load_instance(examples / "psdsf-fig1.yaml").replace(tasks=np.array([3.0, np.inf]))
    for algorithm in ("paper", "distributed"):  # only the best responses take task limits
        with pytest.raises(InstanceError, match=r"task limits .* only algorithm=fast and best-response"):
            solve(inst, "ps-dsf", algorithm=algorithm)


@pytest.mark.parametrize("seed", range(8))
def test_task_limits_on_one_server_are_drf_with_limits(seed):
    """On one server PS-DSF is weighted DRF; with task limits, DRF with the same limits (the drf
    mechanism's progressive filling on the pooled χ, an independent computation)."""
    inst = random_instance(seed, n_servers=1, limits=True, weights=True)
    r = solve(inst, "ps-dsf")
    assert r.status.value == "converged"
    np.testing.assert_allclose(r.tasks, solve(inst, "drf").tasks, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_task_limits_carry_the_certificate(seed):
    inst = random_instance(seed, limits=True, placement=True, weights=True)
    r = solve(inst, "ps-dsf")
    assert r.status.value == "converged" and feasibility(inst, r.x)["holds"]
    assert (r.tasks <= inst.tasks * (1 + 1e-9)).all()
    assert psdsf_certificate(inst, r.x)["holds"]


def test_task_limits_fixed_points_are_not_unique(examples):
    """Fig. 2 with T[u3] = 4: the LP sweeps let s1 serve u3; u3 on s2 instead is a fixed point too, and
    fast (sweeps + exact finish) returns a third, X = (3, 3, 4, 11.5) with u3 on both servers, also
    certified (the vertex HiGHS picks in the finish LP of the structure; before the slack-free LP came
    first it was X = (8/3, 8/3, 4, 12))."""
    inst = load_instance(examples / "psdsf-fig2.yaml").replace(tasks=np.array([np.inf, np.inf, 4, np.inf]))
    f = solve(inst, "ps-dsf")
    assert f.status.value == "converged" and psdsf_certificate(inst, f.x)["holds"]
    assert f.tasks == pytest.approx([3.0, 3.0, 4.0, 11.5], rel=1e-6)
    r = solve(inst, "ps-dsf", algorithm="best-response")
    assert r.tasks == pytest.approx([2.8, 2.8, 4.0, 11.8], rel=1e-6)
    cert = psdsf_certificate(inst, r.x)
    assert cert["holds"] and cert["bottleneck"]["u3"] == {"s1": "tasks", "s2": "tasks"}
    other = np.array([[3.6, 0], [3.6, 0], [0, 4.0], [0, 10.0]])
    assert psdsf_certificate(inst, other)["holds"]
    assert not psdsf_certificate(inst.replace(tasks=np.full(4, np.inf)), other)["holds"]


def test_cli(cli, tmp_path):
    out = tmp_path / "r.json"
    p = cli("solve", "examples/psdsf-fig2.yaml", "-m", "ps-dsf", "-p", "algorithm=paper", "-o", str(out))
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert res["status"] == "converged" and res["details"]["certificate"]["holds"]
    assert res["tasks"] == pytest.approx({"u1": 3.6, "u2": 3.6, "u3": 8, "u4": 8})


def test_build_is_the_first_servers_model(examples):
    import io

    from fairalloc.registry import get_mechanism

    m = get_mechanism("ps-dsf").build(load_instance(examples / "psdsf-fig1.yaml"))
    buf = io.StringIO()
    m.pprint(ostream=buf)
    assert "vds" in buf.getvalue() and "offset" in buf.getvalue() and "@s1" in m.name


@pytest.mark.parametrize("family", ["plain", "placement", "weights", "ts"])
def test_best_response_and_algorithm_i_agree(family):
    """Two independent computations (per-server leximin LPs vs Algorithm I in numpy) give the same
    totals ``X_n`` to 1e-6 relative on seeded random 6 × 3 × 3 instances; both carry the certificate."""
    kw = {"plain": {}, "placement": {"placement": True}, "weights": {"weights": True, "placement": True},
          "ts": {"time_shared": True, "weights": True, "placement": True}}[family]
    for seed in range(4):
        inst = random_instance(seed, 6, 3, 3, **kw)
        a = solve(inst, "ps-dsf", algorithm="best-response")
        b = solve(inst, "ps-dsf", algorithm="paper")
        assert a.status.value == b.status.value == "converged", (seed, a.message, b.message)
        xa, xb = a.x.sum(axis=1), b.x.sum(axis=1)
        np.testing.assert_allclose(xa, xb, rtol=1e-6, atol=1e-6 * max(1.0, float(np.abs(xb).max())))
        for r in (a, b):
            assert psdsf_certificate(inst, r.x)["holds"]


def test_time_shared_split_is_canonical():
    """Users 1–3 have rates proportional across s1 and s2, so they can trade time there without changing
    any total or the certificate: the split is not unique. The canonical split (a name-hashed vertex of
    the splits with these totals) is the same under every algorithm, solver route and order of users
    and servers in the file."""
    from fairalloc import Instance
    from fairalloc.io import instance_to_dict, parse_instance

    rates = [[2.0, 4.0, 1.0], [1.0, 2.0, 0.5], [3.0, 6.0, 1.5], [1.0, 3.0, 2.0]]
    inst = Instance.from_arrays(rates=rates, name="proportional")
    ref = solve(inst, "ps-dsf")
    assert ref.status.value == "converged" and ref.details["canonical"]["status"] == "optimal"
    assert ref.details["certificate"]["holds"]
    np.testing.assert_allclose(ref.tasks, [2, 1, 3, 2], rtol=1e-7)
    d = instance_to_dict(inst)
    pu, ps = [2, 0, 3, 1], [1, 2, 0]
    d["users"] = [d["users"][k] for k in pu]
    d["servers"] = [d["servers"][k] for k in ps]
    perm = parse_instance(d)
    runs = [solve(inst, "ps-dsf", algorithm="paper"), solve(inst, "ps-dsf", solver="highs-ipm"),
            solve(perm, "ps-dsf")]
    for r in runs:
        x = np.zeros_like(ref.x)
        for a, u in enumerate(r.users):
            for b, srv in enumerate(r.servers):
                x[inst.users.index(u), inst.servers.index(srv)] = r.x[a, b]
        np.testing.assert_allclose(x, ref.x, rtol=1e-6, atol=1e-9)


FAMILIES = {"plain": {}, "placement": {"placement": True}, "weights": {"weights": True, "placement": True},
            "ts": {"time_shared": True, "weights": True, "placement": True}}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fast_agrees_with_algorithm_i_and_best_response(family):
    """algorithm=fast (numpy best responses) gives the totals of Algorithm I and of the LP best responses
    (1e-6 relative) on seeded random 6 × 3 × 3 instances, and the certificate holds."""
    for seed in range(4):
        inst = random_instance(seed, 6, 3, 3, **FAMILIES[family])
        f = solve(inst, "ps-dsf", algorithm="fast")
        assert f.status.value == "converged", (seed, f.message)
        assert feasibility(inst, f.x)["holds"] and psdsf_certificate(inst, f.x)["holds"]
        for other in ("paper", "best-response"):
            o = solve(inst, "ps-dsf", algorithm=other)
            assert o.status.value == "converged"
            np.testing.assert_allclose(f.tasks, o.tasks, rtol=1e-6,
                                       atol=1e-6 * max(1.0, float(np.abs(o.tasks).max())))


@pytest.mark.parametrize(("family", "seed"), [("plain", 0), ("plain", 3), ("placement", 0), ("placement", 3),
                                              ("weights", 3), ("weights", 6), ("ts", 0), ("ts", 5)])
def test_fast_carries_the_certificate_at_30_users(family, seed):
    """30 × 6 × 4: the fixed point is certified. PS-DSF totals are not unique at this size (Algorithm I
    and fast may return different certified allocations), except on the time-shared form: with one
    resource per server, Thm 1's conditions are the KKT conditions of max Σ φ_n log X_n (weighted
    proportional fairness), whose totals are unique, so there both agree."""
    inst = random_instance(seed, 30, 6, 4, **FAMILIES[family])
    f = solve(inst, "ps-dsf", algorithm="fast")
    assert f.status.value == "converged", f.message
    assert feasibility(inst, f.x)["holds"]
    # time-shared: mnw's (Ipopt's) point, certified at the mechanism's 1e-6
    assert psdsf_certificate(inst, f.x, tol=1e-6 if family == "ts" else 1e-8)["holds"]
    if family == "ts":
        p = solve(inst, "ps-dsf", algorithm="paper")
        np.testing.assert_allclose(f.tasks, p.tasks, rtol=1e-6)


def test_paper_rejects_task_limits_and_fast_takes_them(examples):
    inst = load_instance(examples / "psdsf-fig1.yaml").replace(tasks=np.array([3.0, np.inf]))
    with pytest.raises(InstanceError, match=r"task limits .* only algorithm=fast and best-response"):
        solve(inst, "ps-dsf", algorithm="paper")
    r = solve(inst, "ps-dsf")
    assert r.status.value == "converged" and r.details["certificate"]["holds"]
    assert r.details["certificate"]["bottleneck"]["u1"]["s1"] == "tasks"


PS_FAMILIES = ("plain", "placement", "limits", "weights", "time-shared")  # the others add external resources


@pytest.mark.parametrize("family", PS_FAMILIES)
def test_default_is_fast_and_certified_on_every_family(family):
    """The default (fast: sweeps + exact finish; time-shared: mnw) ends converged with the Thm 1
    certificate, checked here independently (1e-9; time-shared 1e-6, Ipopt's point), on random
    30 × 6 × 4 instances of every family ps-dsf accepts."""
    for seed in range(3):
        inst = random_instance(seed, 30, 6, 4, missing=0.0, **GEN_FAMILIES[family])
        r = solve(inst, "ps-dsf")
        assert r.details["algorithm"] == "fast"
        assert r.status.value == "converged", (seed, r.message)
        assert feasibility(inst, r.x)["holds"]
        tol = 1e-6 if family == "time-shared" else 1e-9
        assert psdsf_certificate(inst, r.x, tol=tol)["holds"], seed


def test_ps_dsf_paper_and_distributed_refuse_external_resources():
    """(fast and best-response take them: tests/test_apf_external.py)"""
    inst = random_instance(0, 8, 3, 3, **GEN_FAMILIES["external"])
    for algorithm in ("paper", "distributed"):
        with pytest.raises(InstanceError, match="external resources"):
            solve(inst, "ps-dsf", algorithm=algorithm)


def test_fast_with_limits_agrees_with_best_response_where_both_certify():
    """Task limits: both loops end certified; their totals may differ (fixed points need not be unique
    with limits, see the docstring), so only the certificate is compared."""
    for seed in range(3):
        inst = random_instance(seed, 6, 3, 3, limits=True)
        for alg in ("fast", "best-response"):
            r = solve(inst, "ps-dsf", algorithm=alg)
            assert r.status.value == "converged", (alg, seed, r.message)
            assert psdsf_certificate(inst, r.x)["holds"], (alg, seed)


def test_exact_finish_from_a_rough_point():
    """The finish reads the structure of an approximate fixed point (a few sweeps) and returns an
    allocation that carries the certificate at 1e-9 and is close to the point it started from."""
    from fairalloc.models.psdsf import exact_finish, fast

    inst = random_instance(1, 30, 6, 4, missing=0.0)
    x, _, _ = fast(inst, max_iter=60, finish=False)  # 60 sweeps, no finish: approximate
    y = exact_finish(inst, x)
    assert y is not None and psdsf_certificate(inst, y, tol=1e-9)["holds"]
    np.testing.assert_allclose(y.sum(axis=1), x.sum(axis=1), rtol=1e-5)


def test_exact_finish_without_the_holders_that_needed_slack():
    """Where the structure read from a point admits no PS-DSF allocation (the plain LP is infeasible),
    the relaxed LP names the holders that needed slack; the plain LP without them certifies. ``fast``
    takes this step in every attempt (``details.finish.pruned``)."""
    from fairalloc.models.psdsf import exact_finish, fast

    inst = random_instance(7, 30, 6, 4, missing=0.0)
    x, _, _ = fast(inst, max_iter=40, finish=False, progress=False)
    assert exact_finish(inst, x) is None
    out: dict = {}
    assert exact_finish(inst, x, relax=True, out=out) is not None and out["slack"] > 1e-4
    y = exact_finish(inst, x, drop=out["offenders"])
    assert y is not None and psdsf_certificate(inst, y, tol=1e-9)["holds"]
    assert not (y[out["offenders"]] > 0).any()
    x, status, info = fast(inst, progress=False)
    assert status.value == "converged" and info["finish"]["pruned"] == 1
    assert psdsf_certificate(inst, x, tol=1e-9)["holds"]


def test_exact_finish_memo_answers_a_repeated_structure(monkeypatch):
    """With a memo, a structure read again (here from the same point, scaled by 1 + 1e-12) is answered
    without an LP — the same answer, ``out`` included — while another structure (the offenders
    dropped) is solved."""
    import fairalloc.solvers.highs as highs
    from fairalloc.models.psdsf import exact_finish, fast

    inst = random_instance(4, 30, 6, 4, missing=0.0)
    x, _, _ = fast(inst, max_iter=40, finish=False, progress=False)
    calls: list[int] = []
    real = highs.solve_arrays
    monkeypatch.setattr(highs, "solve_arrays", lambda *a, **k: calls.append(1) or real(*a, **k))
    memo: dict = {}
    assert exact_finish(inst, x, memo=memo) is None and calls
    n = len(calls)
    assert exact_finish(inst, x * (1 + 1e-12), memo=memo) is None and len(calls) == n
    out: dict = {}
    y = exact_finish(inst, x, relax=True, out=out, memo=memo)
    n = len(calls)
    again: dict = {}
    assert np.array_equal(exact_finish(inst, x.copy(), relax=True, out=again, memo=memo), y)
    assert len(calls) == n and again["slack"] == out["slack"]
    assert np.array_equal(again["offenders"], out["offenders"])
    z = exact_finish(inst, x, drop=out["offenders"], memo=memo)
    assert len(calls) > n and len(memo) == 3
    assert z is not None and psdsf_certificate(inst, z, tol=1e-9)["holds"]


def test_fast_extrapolates_a_steady_walk(monkeypatch):
    """When two sweeps move the iterate in the same direction by about as much, ``fast`` jumps along it
    to where an entry reaches zero (``details.finish.drifts``): on this instance 78 sweeps instead of
    331, both certified (without the draining pairs' LP, which finishes the run without jumps after 81)."""
    import fairalloc.models.psdsf as psdsf

    monkeypatch.setattr(psdsf, "DRAINING", ())
    inst = random_instance(10, 30, 6, 4, missing=0.0, placement=True)
    x, status, info = psdsf.fast(inst, progress=False)
    assert status.value == "converged" and psdsf_certificate(inst, x, tol=1e-9)["holds"]
    assert info["finish"]["drifts"] >= 1 and info["sweeps"] < 150
    monkeypatch.setattr(psdsf, "DRIFT", (0.0, (np.inf, 0.0)))  # no step is ever steady
    y, status, slow = psdsf.fast(inst, progress=False)
    assert status.value == "converged" and psdsf_certificate(inst, y, tol=1e-9)["holds"]
    assert "drifts" not in slow["finish"] and slow["sweeps"] > 2 * info["sweeps"]


def test_fast_drops_the_pairs_its_sweeps_are_draining(monkeypatch):
    """Once the restarts are over, an attempt whose structure LP fails is retried without the pairs whose
    response fell by 1 % (then 10 %) since the previous attempt (``details.finish.draining``): on this
    instance that certifies after 135 sweeps; without it the run certifies only after 185."""
    import fairalloc.models.psdsf as psdsf

    inst = random_instance(41, 50, 8, 4, missing=0.0)
    x, status, info = psdsf.fast(inst, progress=False)
    assert status.value == "converged" and psdsf_certificate(inst, x, tol=1e-9)["holds"]
    assert info["finish"]["draining"] in psdsf.DRAINING and "resumed" in info["finish"]
    monkeypatch.setattr(psdsf, "DRAINING", ())
    y, status, slow = psdsf.fast(inst, progress=False)
    assert status.value == "converged" and psdsf_certificate(inst, y, tol=1e-9)["holds"]
    assert "draining" not in slow["finish"] and slow["sweeps"] > info["sweeps"] + 25


def test_fast_makes_no_restart_where_the_relaxed_lp_is_too_large(monkeypatch):
    """The restarts from the relaxed LP's point scale down with users x servers and stop altogether
    past ``30 · JUMP_PAIRS`` users x servers (at 1000 x 250 the one relaxed LP took 48-137 s and the
    run without it certified, with it not): here ``JUMP_PAIRS = 1`` gives none on an instance whose
    default run makes restarts and resumes, and the sweeps with the structure LPs and the draining
    pairs still certify."""
    import fairalloc.models.psdsf as psdsf

    inst = random_instance(26, 50, 8, 4, missing=0.0, limits=True)
    _, _, info = psdsf.fast(inst, progress=False)
    assert info["finish"]["jumps"] >= 1
    monkeypatch.setattr(psdsf, "JUMP_PAIRS", 1)
    x, status, none = psdsf.fast(inst, progress=False)
    assert status.value == "converged" and psdsf_certificate(inst, x, tol=1e-9)["holds"]
    assert "jumps" not in none["finish"] and "slacks" not in none["finish"]


def test_exact_finish_row_generation_gives_the_full_lps_answer(monkeypatch):
    """The structure LP leaves out the bottleneck rows of users well above their level and adds them
    back when violated: at points a ``fast`` run tried, leaving out every bottleneck row at first
    (``LAZY_GAP = -1``: 2-4 LP solves per call on average), the rows above the level (0), the default 5 %
    and none (``inf``) give the same verdict — infeasible or not, certified or not — and the relaxed LP
    the same least total slack."""
    import fairalloc.models.psdsf as psdsf
    import fairalloc.solvers.highs as highs

    finish, linprog = psdsf.exact_finish, highs.solve_arrays
    points: list[np.ndarray] = []
    solves, calls = [0], [0]  # with every row left out at first

    def count(*args, **kwargs):
        solves[0] += 1
        return linprog(*args, **kwargs)

    def spy(inst, x, *args, **kwargs):
        points.append(x.copy())
        return finish(inst, x, *args, **kwargs)

    for family, seed in (("plain", 8), ("limits", 3), ("weights", 4)):
        inst = random_instance(seed, 30, 6, 4, missing=0.0, **GEN_FAMILIES[family])
        points.clear()
        monkeypatch.setattr(psdsf, "exact_finish", spy)
        psdsf.fast(inst, progress=False)
        monkeypatch.setattr(psdsf, "exact_finish", finish)
        assert points, (family, seed)
        for x in points[:8]:
            for relax in (False, True):
                seen = []
                for gap in (-1.0, 0.0, 0.05, np.inf):
                    monkeypatch.setattr(psdsf, "LAZY_GAP", gap)
                    if gap < 0:
                        calls[0] += 1
                        monkeypatch.setattr(highs, "solve_arrays", count)
                    out: dict = {}
                    y = finish(inst, x, relax=relax, out=out)
                    monkeypatch.setattr(highs, "solve_arrays", linprog)
                    holds = y is not None and psdsf_certificate(inst, y, tol=1e-9)["holds"]
                    seen.append((y is None, out.get("slack_total"), holds))
                assert len({s[0] for s in seen}) == 1, (family, seed, relax, seen)
                if relax and not seen[0][0]:
                    np.testing.assert_allclose([s[1] for s in seen], seen[0][1], rtol=1e-7, atol=1e-12)
                if not relax:
                    assert len({s[2] for s in seen}) == 1, (family, seed, seen)
    assert solves[0] > calls[0]  # rows were added back and the LP solved again


def test_fast_resumes_its_own_sweeps_when_the_restarts_do_not_finish(monkeypatch):
    """With a single restart allowed, instances the first restart does not finish go on from the
    iterate it replaced (``details.finish.resumed``) and still end converged with the certificate."""
    import fairalloc.models.psdsf as psdsf

    monkeypatch.setattr(psdsf, "MAX_JUMPS", 1)
    for family, seed in (("plain", 5), ("plain", 9), ("placement", 10)):
        inst = random_instance(seed, 30, 6, 4, missing=0.0, **GEN_FAMILIES[family])
        x, status, info = psdsf.fast(inst, progress=False)
        assert info["finish"]["jumps"] == 1 and info["finish"]["resumed"] >= 1, (family, seed)
        assert status.value == "converged" and psdsf_certificate(inst, x, tol=1e-9)["holds"], (family, seed)


def test_fast_time_limit_is_honest():
    inst = random_instance(0, 200, 32, 4, missing=0.0)
    r = solve(inst, "ps-dsf", time_limit=0.5)
    assert r.status.value in ("time_limit", "converged")
    if r.status.value == "time_limit":
        assert r.details["sweeps"] >= 1


def test_fast_with_a_customize_hook_routes_to_best_response(examples):
    def cap(m, inst):
        if ("u1", "s1") in m.chi.x:
            m.chi.x["u1", "s1"].setub(2.0)

    r = solve(load_instance(examples / "psdsf-fig1.yaml"), "ps-dsf", customize=cap)
    assert r.details["algorithm"] == "best-response" and "routed" in r.details
    assert r.status.value == "converged"


def test_leximin_response_is_drf_on_one_server():
    """On one server the response (offsets 0) is weighted DRF: Algorithm I's initialisation."""
    from fairalloc.models._perserver import server_rows
    from fairalloc.models.psdsf import drf_server, leximin_response

    for seed in range(6):
        inst = random_instance(seed, 8, 2, 3, weights=True, placement=True)
        for rows in server_rows(inst):
            U = rows.users
            w = inst.weight[U] * inst.gamma[U, rows.server]
            got = leximin_response(w, rows.demand[U], rows.capacity, np.zeros(len(U)))
            np.testing.assert_allclose(got, drf_server(inst, rows)[U], rtol=1e-9, atol=1e-12)


def test_numpy_fallback_response_equals_the_leximin_lps():
    """best-response's fallback (a server whose LPs lose precision responds in numpy) computes the same
    response as the server's leximin LPs, with offsets from other servers and budgets as column caps."""
    from fairalloc.models._perserver import server_rows
    from fairalloc.models.psdsf import ServerLeximin, _numpy_response
    from fairalloc.solvers import Session

    for seed in range(4):
        inst = random_instance(seed, 10, 3, 3, weights=True, placement=True)
        rng = np.random.default_rng(seed)
        x = rng.uniform(0, 0.3, (inst.n_users, inst.n_servers)) * inst.runnable
        if seed % 2:  # a binding task limit on two users
            tasks = np.full(inst.n_users, np.inf)
            tasks[:2] = x[:2].sum(axis=1) + 0.05
            inst = inst.replace(tasks=tasks)
        for rows in server_rows(inst):
            if not len(rows.users):
                continue
            col, out = ServerLeximin(inst, rows.server).respond(x, Session())
            assert out.status.value == "optimal", out.message
            np.testing.assert_allclose(_numpy_response(inst, x, rows), col, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("example", sorted(GOLDEN))
def test_fast_from_a_warm_start_matches_the_cold_path(examples, example):
    """fast(x0=...) from apf-vds at alpha = 3 (PS-DSF is its alpha -> infinity limit) ends at a certified
    point with the same (unique) totals as the sweeps from 0."""
    from fairalloc.models.psdsf import fast

    inst = load_instance(examples / f"{example}.yaml")
    x0 = solve(inst, "apf-vds", alpha=3, gains=False).x
    cold, s0, _ = fast(inst, progress=False)
    warm, s1, _ = fast(inst, progress=False, x0=x0)
    assert s0.value == s1.value == "converged"
    assert psdsf_certificate(inst, warm, tol=1e-9)["holds"] and feasibility(inst, warm)["holds"]
    np.testing.assert_allclose(warm.sum(axis=1), cold.sum(axis=1), rtol=1e-7)
    np.testing.assert_allclose(warm.sum(axis=1), GOLDEN[example], rtol=1e-7)


def test_certificate_names_each_failing_pair_and_the_first_bottleneck():
    """The vectorised certificate: a bottleneck per pair on a PS-DSF point, and a point moved off it
    fails at the pairs it breaks."""
    inst = random_instance(3, 12, 3, 3, missing=0.0, placement=True)
    r = solve(inst, "ps-dsf")
    cert = psdsf_certificate(inst, r.x)
    assert cert["holds"]
    assert sum(len(v) for v in cert["bottleneck"].values()) == int(inst.runnable.sum())
    bad = r.x * 0.5  # nothing saturated: every pair fails
    cert = psdsf_certificate(inst, bad)
    assert not cert["holds"] and len(cert["failures"]) == int(inst.runnable.sum())
    assert all(f["reason"] == "no saturated resource it demands" for f in cert["failures"])


@pytest.mark.parametrize("algorithm", ["paper", "distributed", "fast"])
def test_time_limit_ends_with_status_time_limit(algorithm):
    """Every algorithm honours the time limit with an honest status (Algorithm I took 70 s here)."""
    inst = random_instance(1, 100, 16, 4, missing=0.0)
    t0 = time.perf_counter()
    r = solve(inst, "ps-dsf", algorithm=algorithm, time_limit=0.5)
    assert r.status.value == "time_limit"
    assert time.perf_counter() - t0 < 30  # a generous bound: the point is that it returns at all


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), family=st.sampled_from(["plain", "placement", "weights", "limits",
                                                            "external", "scoped", "mixed"]),
       data=st.data())
def test_any_order_and_any_units_give_the_same_allocation(seed, family, data):
    """PS-DSF's fixed points are not unique, and which one the sweeps reach moved with the order of the
    file (up to the whole allocation, before the loops ran in name order) and with the units (the
    normalised numbers then differ in their last bits: on the grid they do not) and with the structure
    LP's vertex (the canonical one). Restated in another order and other units, the instance gets the
    same allocation (to round-off)."""
    inst = random_instance(seed, 14, 4, 3, missing=0.0, **GEN_FAMILIES[family])
    pu = np.array(data.draw(st.permutations(range(inst.n_users))))
    ps = np.array(data.draw(st.permutations(range(inst.n_servers))))
    scale = data.draw(st.lists(st.sampled_from([1e-4, 1e-3, 1.0, 7.3, 1024.0, 1e4]),
                               min_size=len(inst.resources) + len(inst.external),
                               max_size=len(inst.resources) + len(inst.external)))
    a = solve(inst, "ps-dsf")
    b = solve(restated(inst, pu, ps, scale, reverse=True), "ps-dsf")
    assert a.status.value == b.status.value == "converged"
    mapped = back(b.x, pu, ps)
    np.testing.assert_allclose(mapped, a.x, rtol=0, atol=1e-9 * a.x.max())


@pytest.mark.parametrize("algorithm", ["best-response", "paper", "distributed"])
def test_every_algorithm_runs_in_name_order(algorithm):
    """The other algorithms also sweep in name order: the file's order does not change their answer."""
    inst = random_instance(6, 12, 4, 3, missing=0.0)
    pu, ps = np.arange(12)[::-1], np.array([2, 0, 3, 1])
    a = solve(inst, "ps-dsf", algorithm=algorithm)
    b = solve(restated(inst, pu, ps, [1.0] * 3, reverse=True), "ps-dsf", algorithm=algorithm)
    assert a.status.value == b.status.value == "converged"
    mapped = back(b.x, pu, ps)
    np.testing.assert_allclose(mapped, a.x, rtol=0, atol=1e-9 * a.x.max())
    if algorithm == "distributed":  # the trajectory names its users
        assert set(b.details["trajectory"][-1]["tasks"]) == set(inst.users)


def test_exact_finish_canonical_vertex_is_the_structures_best_for_the_names():
    """The structure's LP has a whole face of PS-DSF points (the solver's vertex and the canonical one
    differ by a third of the largest entry here); canonical=True returns a certified point of it that
    scores at least as high as the solver's own vertex on Σ h x/k."""
    from fairalloc.models.feasible import name_hashes
    from fairalloc.models.psdsf import exact_finish, fast

    inst = random_instance(2, 30, 6, 4, missing=0.0)
    x, _, _ = fast(inst, finish=False, max_iter=3000)
    y = exact_finish(inst, x)
    z = exact_finish(inst, x, canonical=True)
    assert y is not None and z is not None
    assert psdsf_certificate(inst, z, tol=1e-9)["holds"]
    pairs = np.argwhere(inst.runnable)
    h = name_hashes(inst.users, inst.servers, pairs) / inst.gamma.max(axis=1)[pairs[:, 0]]
    score = lambda v: float(h @ v[pairs[:, 0], pairs[:, 1]])  # noqa: E731
    assert score(z) >= score(y) - 1e-9 * abs(score(y))
    assert np.abs(z - y).max() > 0.1 * y.max()


def test_on_grid_rounds_to_nearest_and_keeps_what_is_on_the_grid():
    """Numbers that differ in their last bits land on the same grid point; numbers on the grid (1, 0.5,
    integers), zeros and inf stay; the change is at most 2^-32 relative."""
    from fairalloc.models._perserver import on_grid

    rng = np.random.default_rng(0)
    d = rng.uniform(1e-3, 10, (40, 3))
    d[0] = [1.0, 0.5, 0.0]
    inst = Instance.from_arrays(capacity=[[4.0, 2.0, 1.0]], demand=d, tasks=[np.inf] + [7.0] * 39)
    g = on_grid(inst)
    assert g.demand[0].tolist() == [1.0, 0.5, 0.0] and np.isinf(g.tasks[0]) and g.tasks[1] == 7.0
    assert np.abs(g.demand / np.where(d > 0, d, 1) - np.where(d > 0, 1, 0)).max() <= 2.0**-32
    nudged = inst.replace(demand=d * (1 + 4 * np.finfo(float).eps * rng.choice([-1, 1], d.shape)))
    assert np.array_equal(on_grid(nudged).demand, g.demand)
    assert not np.array_equal(nudged.demand, inst.demand)


def test_apf_vds_at_alpha_inf_is_ps_dsf_in_name_order():
    """apf-vds at α = ∞ is ps-dsf's fast algorithm, and so does not depend on the file's order either."""
    inst = random_instance(4, 14, 4, 3, missing=0.0)
    pu, ps = np.roll(np.arange(14), 5), np.array([3, 1, 0, 2])
    a = solve(inst, "apf-vds", alpha="inf", gains=False)
    b = solve(restated(inst, pu, ps, [1e3, 1.0, 1e-3], reverse=True), "apf-vds", alpha="inf", gains=False)
    mapped = back(b.x, pu, ps)
    np.testing.assert_allclose(mapped, a.x, rtol=0, atol=1e-9 * a.x.max())
    np.testing.assert_allclose(a.x, solve(inst, "ps-dsf").x, rtol=0, atol=1e-12 * a.x.max())


def test_a_finish_lp_stopped_by_its_work_cap_is_not_solved_again(monkeypatch):
    """An LP stopped by its work cap (``work`` × its rows + columns of HiGHS's simplex interrupt checks:
    the same on any machine) is kept in the memo as no answer; one stopped by the session's time limit
    is not. The cap stops HiGHS at the same point every time. ``fast`` counts the capped LPs
    (``capped``) and still ends certified."""
    import fairalloc.models.psdsf as P
    import fairalloc.solvers.highs as highs
    from fairalloc.status import Status

    inst = random_instance(4, 30, 6, 4, missing=0.0)
    x, _, _ = P.fast(inst, max_iter=40, finish=False, progress=False)
    real = highs.solve_arrays

    def timed_out(*a, **k):  # as HiGHS reports its time limit, with the iterations it made
        return real(*a, **k)._replace(status=Status.TIME_LIMIT, x=None)

    monkeypatch.setattr(highs, "solve_arrays", timed_out)
    memo: dict = {}
    stats: dict = {}
    assert P.exact_finish(inst, x, memo=memo, time_limit=5.0, work=100.0, stats=stats) is None
    assert not memo and not stats["capped"]
    monkeypatch.setattr(highs, "solve_arrays", real)
    for _ in range(2):  # the second time from the memo: no LP, the same answer
        stats = {}
        assert P.exact_finish(inst, x, relax=True, memo=memo, work=0.01, stats=stats) is None
        assert len(memo) == 1
    assert stats == {}
    runs = []
    for _ in range(2):
        runs.append({})
        assert P.exact_finish(inst, x, relax=True, work=0.01, stats=runs[-1]) is None
    assert runs[0]["capped"] and runs[0] == runs[1] and runs[0]["work"] >= 1
    assert P.exact_finish(inst, x, relax=True, work=100.0) is not None

    monkeypatch.setattr(P, "LP_WORK", 1e-9)  # every LP that iterates is stopped at once
    y, status, info = P.fast(inst, progress=False)
    assert status.value == "converged" and info["finish"]["capped"] >= 1
    assert psdsf_certificate(inst, y, tol=1e-9)["holds"]


def test_fast_hands_a_slow_run_to_the_newton_method(monkeypatch):
    """Where the sweeps have not converged after ``NEWTON_AFTER`` of them, the game solved by apf-vds's
    Newton method at α = inf at every server ends the run: certified (Thm 1, checked here again), the
    canonical vertex of its structure; the same in another order and other units. ``newton=false``
    runs the sweeps alone."""
    import fairalloc.models.psdsf as psdsf

    inst = random_instance(1, 20, 4, 3)
    alone = solve(inst, "ps-dsf", newton=False)
    assert alone.status.value == "converged" and "newton" not in alone.details
    assert alone.details["sweeps"] > 10
    monkeypatch.setattr(psdsf, "NEWTON_AFTER", 5)
    r = solve(inst, "ps-dsf")
    nw = r.details["newton"]
    assert r.status.value == "converged" and r.details["sweeps"] == 5
    assert nw["status"] == "optimal" and nw["certified"] and nw["canonical"]
    assert nw["ncp_residual_scaled"] <= 1e-8
    assert psdsf_certificate(inst, r.x, tol=1e-9)["holds"] and feasibility(inst, r.x)["holds"]
    pu, ps = np.arange(20)[::-1], np.array([2, 0, 3, 1])
    b = solve(restated(inst, pu, ps, [1e-3, 7.3, 1024.0], reverse=True), "ps-dsf")
    assert b.details["newton"]["certified"]
    np.testing.assert_allclose(back(b.x, pu, ps), r.x, rtol=0, atol=1e-9 * r.x.max())


def test_fast_goes_on_unchanged_where_the_newton_method_fails(monkeypatch):
    """A Newton run that does not certify is not kept, and the sweeps go on as if it had not run: the
    same sweeps and allocation as ``newton=false``."""
    import fairalloc.models.apf_vds as apf_vds
    import fairalloc.models.psdsf as psdsf
    from fairalloc.registry import Solution
    from fairalloc.status import Status

    calls = []

    def fails(inst, session):
        calls.append(inst.n_users)
        return Solution(np.zeros((inst.n_users, inst.n_servers)), Status.ITERATION_LIMIT, "stub")

    inst = random_instance(1, 20, 4, 3)
    monkeypatch.setattr(psdsf, "NEWTON_AFTER", 5)
    monkeypatch.setattr(apf_vds, "leximin_newton", fails)
    r = solve(inst, "ps-dsf")
    alone = solve(inst, "ps-dsf", newton=False)
    assert calls == [20]
    assert r.status.value == alone.status.value == "converged"
    assert r.details["sweeps"] == alone.details["sweeps"] > 5
    np.testing.assert_array_equal(r.x, alone.x)
    assert r.details["newton"] == {"after_sweeps": 5, "status": "iteration_limit",
                                   "ncp_residual_scaled": None, "certified": False,
                                   "seconds": r.details["newton"]["seconds"]}
    assert "newton" not in alone.details
