"""αPF-VDS: the NCP solved by Ipopt equals independently computed points — weighted MNW at α = 1
([APF] Thm 2), PS-DSF with a bottleneck at every server or on time-shared servers (Thms 4–5), PS-DSF in the
limit α → ∞ (Thm 2, deviation (58)) — and every returned point satisfies the Nash conditions (NCP residual,
exact best responses). PS-MFA and the distributed heuristic converge on an [APF] Fig. 5-kind cluster."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.mpec import Complementarity, complements

from fairalloc import Instance, load_instance, solve
from fairalloc.errors import InstanceError, ParameterError
from fairalloc.generate import apf_cluster, random_instance
from fairalloc.models._mpec import ScholtesRelaxation
from fairalloc.models._perserver import deviation_from_psdsf
from fairalloc.models.apf_vds import nash_conditions
from fairalloc.models.feasible import uniform_split
from fairalloc.solvers import Session
from fairalloc.verify import feasibility, psdsf_certificate

NASH_TOL = 1e-8


def _assert_nash(r, inst):
    assert r.status.value in ("optimal", "converged"), r.message
    assert feasibility(inst, r.x)["holds"]
    assert r.details["ncp_residual"] <= NASH_TOL
    assert r.details["best_response_gain"] <= NASH_TOL
    assert all(g <= NASH_TOL for g in r.details["per_server_gain"].values())


def _all_positive(seed, N=4, K=3, R=3):
    rng = np.random.default_rng(seed)
    return Instance.from_arrays(capacity=rng.uniform(0.5, 2, (K, R)), demand=rng.uniform(0.05, 1, (N, R)),
                                weight=rng.choice([1.0, 2.0], N))


def _bottleneck_at_every_server(seed, N=4, K=3, R=3):
    """Server i's capacity of one resource ρ(i) shrunk until ρ(i) is every user's dominant resource there
    ([APF] Def. 2 per server)."""
    rng = np.random.default_rng(seed)
    d, c = rng.uniform(0.05, 1, (N, R)), rng.uniform(0.5, 2, (K, R))
    elig = rng.random((N, K)) > 0.3
    elig[np.arange(N), rng.integers(0, K, N)] = True
    for i in range(K):
        rho = rng.integers(R)
        c[i, rho] = 0.9 * (d[:, rho] / (d / c[i]).max(axis=1)).min()
    return Instance.from_arrays(capacity=c, demand=d, weight=rng.choice([1.0, 2.0, 3.0], N), eligible=elig)


# ---------------------------------------------------------------------- α = 1 is weighted MNW
def test_alpha_one_equals_mnw_on_random_instances():
    # capacity form: d[n,r] is the same on every server, the premise of [APF] Thm 2 (summing (16) over
    # servers gives Σ φ (y−x)/x ≤ 0); external resources and task limits are outside the game
    worst = 0.0
    for k in range(20):
        kw = [{}, {"placement": True}, {"weights": True, "placement": True}, {"weights": True}][k % 4]
        inst = random_instance(1000 + k, **kw)
        a = solve(inst, "apf-vds", alpha=1, gains=False)
        assert a.status.value == "optimal" and a.details["ncp_residual"] <= NASH_TOL
        m = solve(inst, "mnw")
        worst = max(worst, float(np.max(np.abs(a.tasks - m.tasks) / m.tasks)))
    assert worst <= 1e-5


def test_the_canonical_split_keeps_the_totals_exactly():
    """The canonical split's LP holds each user's total to HiGHS's tolerance only; on this instance
    (200 × 32, an external resource, α = 1) its vertex's totals were 8.4e-9 off, which was the
    certificate's residual and the distance from ``mnw``'s totals (the goal asks for 1e-8). Each user's
    split is scaled to its total: both 1.6e-10."""
    inst = random_instance(1, 200, 32, 4, missing=0.0, external=1)
    a = solve(inst, "apf-vds", alpha=1, gains=False)
    assert a.status.value == "optimal" and a.details["ncp_residual_scaled"] <= 1e-9
    m = solve(inst, "mnw")
    assert np.max(np.abs(a.tasks - m.tasks) / m.tasks) <= 1e-9


def test_examples_and_nash_conditions(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    r = solve(inst, "apf-vds", alpha=1)
    _assert_nash(r, inst)
    np.testing.assert_allclose(r.tasks, [3, 4.25, 8.5, 8], rtol=1e-9)  # MNW of Fig. 2, by hand
    for alpha in (0.5, 2.0, 4.0):
        r = solve(inst, "apf-vds", alpha=alpha)
        _assert_nash(r, inst)
        # recomputed from scratch by the public helper (its own multipliers, its own best responses)
        nash = nash_conditions(inst, r.x, alpha=alpha)
        assert nash["ncp_residual"] <= NASH_TOL and nash["best_response_gain"] <= NASH_TOL
        assert set(nash["per_server_gain"]) == {"s1", "s2"}


def test_nash_conditions_see_a_non_equilibrium(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    nash = nash_conditions(inst, uniform_split(inst), alpha=2)
    assert nash["ncp_residual"] > 1e-2 and nash["psi"] > 1e-4 and nash["best_response_gain"] > 1e-2


def test_generalised_utility_per_server(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    r = solve(inst, "apf-vds", alpha="1.5,3", A="0.5,2", B="0.2,0.05")
    _assert_nash(r, inst)
    nash = nash_conditions(inst, r.x, alpha=[1.5, 3], A=[0.5, 2], B=[0.2, 0.05])
    assert nash["ncp_residual"] <= NASH_TOL and nash["best_response_gain"] <= NASH_TOL
    best = solve(inst, "apf-vds", alpha="1.5,3", A="0.5,2", B="0.2,0.05", algorithm="best-response")
    np.testing.assert_allclose(best.tasks, r.tasks, rtol=1e-7)  # unique X when B > 0 ([APF] §4.4)


# ---------------------------------------------------------------------- PS-DSF: limit and theorems
def test_large_alpha_approaches_psdsf():
    for seed in (0, 2):
        inst = _all_positive(seed)  # every user demands every resource, so D_n(PS-DSF) = 0
        psdsf = solve(inst, "ps-dsf")
        assert deviation_from_psdsf(inst, psdsf.x).max() <= 1e-6  # (58) measures what it claims
        target = psdsf.tasks
        dev, dist = [], []
        for alpha in (1, 2, 4, 8, 16):
            r = solve(inst, "apf-vds", alpha=alpha, gains=False)
            assert r.status.value in ("optimal", "converged")
            D = np.array(list(r.details["deviation_from_psdsf"].values()))
            dev.append(float(D @ inst.weight / inst.weight.sum()))
            dist.append(float(np.abs(r.tasks - target).max() / target.max()))
        assert all(b < a for a, b in pairwise(dev)), dev
        assert all(b < a for a, b in pairwise(dist)), dist
        assert dev[-1] < 0.1 * dev[0]


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
def test_bottleneck_at_every_server_gives_psdsf(alpha):
    for seed in range(3):
        inst = _bottleneck_at_every_server(seed)
        r = solve(inst, "apf-vds", alpha=alpha, gains=False)
        assert r.status.value == "optimal" and r.details["ncp_residual"] <= NASH_TOL
        assert psdsf_certificate(inst, r.x)["holds"]
        np.testing.assert_allclose(r.tasks, solve(inst, "ps-dsf").tasks, rtol=1e-6)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
def test_time_shared_servers_give_psdsf(examples, alpha):
    t3 = load_instance(examples / "psdsf-table3.yaml")
    r = solve(t3, "apf-vds", alpha=alpha)
    _assert_nash(r, t3)
    np.testing.assert_allclose(r.tasks, [210, 105, 82.5, 27.5], rtol=1e-9)
    for seed in range(3):
        inst = random_instance(seed, time_shared=True, weights=True, placement=True)
        r = solve(inst, "apf-vds", alpha=alpha, gains=False)
        assert psdsf_certificate(inst, r.x)["holds"]
        np.testing.assert_allclose(r.tasks, solve(inst, "ps-dsf").tasks, rtol=1e-6)


def test_alpha_inf_is_psdsf_and_mixes_per_server(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    r = solve(inst, "apf-vds", alpha="inf")
    assert r.details["algorithm"] == "ps-dsf:fast" and r.status.value == "converged"
    br = solve(inst, "apf-vds", alpha="inf", algorithm="best-response")
    assert br.details["algorithm"] == "best-response" and br.status.value == "converged"
    np.testing.assert_allclose(br.tasks, [3.6, 3.6, 8, 8], rtol=1e-7)
    np.testing.assert_allclose(r.tasks, [3.6, 3.6, 8, 8], rtol=1e-7)
    mixed = solve(inst, "apf-vds", alpha="inf,1")
    assert mixed.status.value == "optimal" and mixed.details["per_server_gain"]["s1"] is None
    assert mixed.details["per_server_gain"]["s2"] <= NASH_TOL and mixed.details["certificate"]["holds"]
    mixed_br = solve(inst, "apf-vds", alpha="inf,1", algorithm="best-response")
    assert mixed_br.status.value == "converged"
    np.testing.assert_allclose(mixed.tasks, mixed_br.tasks, rtol=1e-7)
    with pytest.raises(ParameterError, match="best-response"):
        solve(inst, "apf-vds", alpha="inf", algorithm="ps-mfa")


def test_alpha_inf_best_response_is_judged_by_thm1(examples):
    """At α = inf servers the best responses are PS-DSF's leximin, so their certificate is [PSDSF]
    Thm 1 there (details.certificate): a sweep cap reached at a certified point is converged, one
    reached before is not; checked independently at 1e-8."""
    inst = load_instance(examples / "psdsf-fig2.yaml")
    early = solve(inst, "apf-vds", alpha="inf", algorithm="best-response", max_iter=1)
    assert early.status.value == "iteration_limit" and not early.details["certificate"]["holds"]
    capped = solve(inst, "apf-vds", alpha="inf", algorithm="best-response", max_iter=3)
    assert capped.status.value == "converged" and capped.details["certificate"]["holds"]
    assert psdsf_certificate(inst, capped.x, tol=1e-8)["holds"]
    np.testing.assert_allclose(capped.tasks, [3.6, 3.6, 8, 8], rtol=1e-7)
    rnd = random_instance(2, 12, 3, 3, missing=0.0)
    r = solve(rnd, "apf-vds", alpha="inf", algorithm="best-response")
    assert r.status.value == "converged" and psdsf_certificate(rnd, r.x, tol=1e-8)["holds"]


# ---------------------------------------------------------------------- the four algorithms
@pytest.mark.parametrize("algorithm", ["ncp", "best-response", "ps-mfa", "distributed"])
def test_algorithms_agree_on_the_examples(examples, algorithm):
    t3 = load_instance(examples / "psdsf-table3.yaml")
    r = solve(t3, "apf-vds", alpha=1, algorithm=algorithm)
    _assert_nash(r, t3)
    np.testing.assert_allclose(r.tasks, [210, 105, 82.5, 27.5], rtol=1e-9)
    fig1 = load_instance(examples / "psdsf-fig1.yaml")
    r = solve(fig1, "apf-vds", alpha=3, algorithm=algorithm)
    _assert_nash(r, fig1)
    np.testing.assert_allclose(r.x, [[6, 0], [0, 6]], atol=1e-9)


def test_psmfa_and_distributed_converge_on_an_apf_cluster():
    inst = apf_cluster(0, users_per_location=1)  # 3 users, 9 pools, 5 resources ([APF] Fig. 5 kind)
    ref = solve(inst, "apf-vds", alpha=1, gains=False)
    for algorithm, key, tol in (("ps-mfa", "merit", 1e-16), ("distributed", "psi", 1e-12)):
        r = solve(inst, "apf-vds", alpha=1, algorithm=algorithm, gains=False)
        traj = r.details["trajectory"]
        # the algorithm itself converged (before any polish), with its measure falling by orders
        assert r.status.value == "converged" and traj[-1][key] <= tol, (algorithm, traj[-1])
        assert traj[-1][key] < 1e-8 * traj[0][key]
        if algorithm == "ps-mfa":  # the heuristic's rows stay ≈ ε·c below capacity: residual O(ε)
            assert r.details["polish"]["residual_before"] < 1e-6
        np.testing.assert_allclose(r.tasks, ref.tasks, rtol=1e-6)


def test_rejects_bad_parameters_and_instances(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    with pytest.raises(ParameterError, match="one per server"):
        solve(inst, "apf-vds", alpha="1,2,3")
    with pytest.raises(ParameterError, match="alpha"):
        solve(inst, "apf-vds", alpha=0)
    with pytest.raises(ParameterError, match="A = B = 0"):
        solve(inst, "apf-vds", A=0)
    with pytest.raises(InstanceError, match="external"):
        solve(examples / "tsfer-fig2.yaml", "apf-vds", algorithm="ps-mfa")


def test_cli(cli, tmp_path):
    out = tmp_path / "r.json"
    p = cli("solve", "examples/psdsf-fig1.yaml", "-m", "apf-vds", "-p", "alpha=3", "-o", str(out))
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert res["status"] == "optimal" and res["tasks"] == pytest.approx({"u1": 6.0, "u2": 6.0})
    assert res["details"]["ncp_residual"] <= NASH_TOL and res["details"]["best_response_gain"] <= NASH_TOL


# ---------------------------------------------------------------------- the MPEC reduction alone
def test_scholtes_relaxation_solves_bard1():
    """MacMPEC bard1: min (x−5)² + (2y+1)², KKT of the follower as complementarity; optimum 17 at (1, 0)."""
    m = pyo.ConcreteModel()
    m.x, m.y = pyo.Var(bounds=(0, None), initialize=1), pyo.Var(bounds=(0, None), initialize=1)
    m.l = pyo.Var([1, 2, 3], bounds=(0, None), initialize=0)
    m.obj = pyo.Objective(expr=(m.x - 5) ** 2 + (2 * m.y + 1) ** 2)
    m.stat = pyo.Constraint(expr=2 * (m.y - 1) - 1.5 * m.x + m.l[1] - 0.5 * m.l[2] + m.l[3] == 0)
    m.c1 = Complementarity(expr=complements(m.l[1] >= 0, 3 * m.x - m.y - 3 >= 0))
    m.c2 = Complementarity(expr=complements(m.l[2] >= 0, -m.x + 0.5 * m.y + 4 >= 0))
    m.c3 = Complementarity(expr=complements(m.l[3] >= 0, -m.x - m.y + 7 >= 0))
    relax = ScholtesRelaxation(m)
    relax.apply()
    out = relax.solve(Session())
    assert out.ok
    assert pyo.value(m.obj) == pytest.approx(17.0, abs=1e-6)
    assert (pyo.value(m.x), pyo.value(m.y)) == pytest.approx((1.0, 0.0), abs=1e-5)
    assert [h["mpec_bound"] for h in relax.history][-1] == 0.0


def test_numerical_breakdown_is_a_status(examples, monkeypatch):
    """An algorithm that breaks down numerically gives status 'error' with the reason, not a traceback;
    multipliers and Newton's method at a point where a user's total is ~0 (g' = ∞) do not raise."""
    import fairalloc.models.apf_vds as apf
    from fairalloc.models._apf_ncp import _newton

    def broken(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(apf, "ps_mfa", broken)
    r = solve(examples / "psdsf-fig2.yaml", "apf-vds", algorithm="ps-mfa")
    assert r.status.value == "error" and "LinAlgError" in r.message and not r.x.any()

    inst = load_instance(examples / "psdsf-fig2.yaml")
    a, A, B = apf.utility_parameters(inst, 3.0)
    game = apf._game(inst, a, A, B)
    x = np.array([[3.6, 0], [3.6, 0], [0, 8], [0, 1e-300]])
    with np.errstate(all="ignore"):
        lam = game.multipliers(x)
        xn, _, ok = _newton(game, x, lam, x > 0, [np.ones(len(r.capacity), bool) for r in game.rows],
                            5, 1e-13)
    assert all(np.isfinite(li).all() for li in lam) and not ok and np.array_equal(xn, x)


def test_time_limit_inside_the_relaxation_loop_is_a_limit(monkeypatch):
    """A Scholtes bound cut short by the time limit ends the NCP solve with status ``time_limit`` (the
    last bound's point, its NCP residual in the message), not ``error`` or ``converged``."""
    inst = _all_positive(3)
    real = Session.run
    calls = {"n": 0}

    def run(self, handle, options=None):
        calls["n"] += 1
        if calls["n"] == 3:  # the third bound runs out of time
            from fairalloc.solvers import SolveOutcome
            from fairalloc.status import Status

            out = SolveOutcome(status=Status.TIME_LIMIT, solver=handle.name, message="time limit")
            self.outcomes.append(out)
            return out
        return real(self, handle, options)

    monkeypatch.setattr(Session, "run", run)
    r = solve(inst, "apf-vds", alpha=3.0, algorithm="ncp", polish=False)
    assert r.status.value == "time_limit", r.message
    assert "bound 1e-04 failed" in r.message and "NCP residual" in r.message
    assert feasibility(inst, r.x)["holds"]


def test_ipopt_infeasible_on_the_ncp_is_an_error(monkeypatch):
    """The game is concave, so it has an equilibrium ([APF] §3.1): Ipopt reporting the relaxed NCP
    infeasible (seen at α = 32 and 64 on 20 × 4, the ``ncp`` fallback after Newton) is a solver failure,
    status ``error`` with the reason — never ``infeasible``, which would misdescribe the instance; at a
    later bound the previous bound's point is kept and judged by its NCP residual."""
    inst = _all_positive(3)
    real = Session.run
    for fail_at in (1, 3):
        calls = {"n": 0}

        def run(self, handle, options=None, fail_at=fail_at, calls=calls):
            calls["n"] += 1
            if calls["n"] == fail_at:
                from fairalloc.solvers import SolveOutcome
                from fairalloc.status import Status

                out = SolveOutcome(status=Status.INFEASIBLE, solver=handle.name,
                                   message="Infeasible_Problem_Detected")
                self.outcomes.append(out)
                return out
            return real(self, handle, options)

        monkeypatch.setattr(Session, "run", run)
        r = solve(inst, "apf-vds", alpha=3.0, algorithm="ncp", polish=False)
        assert r.status.value == "error", (fail_at, r.message)
        # at the first bound there is no point (the reason is Ipopt's); later the previous bound's point is
        # judged by its NCP residual, as for any failed bound
        assert ("has an equilibrium" if fail_at == 1 else "NCP residual") in r.message, r.message


def test_best_response_gains_stop_at_the_time_limit():
    """The gains are a diagnostic: once the time limit has passed they are not computed (None)."""
    import time as _time

    from fairalloc.models.apf_vds import best_response_gains
    from fairalloc.solvers import Session

    inst = random_instance(3, 6, 3, 2, missing=0.0)
    x = solve(inst, "apf-vds", alpha=2.0, gains=False).x
    session = Session(time_limit=1e-3)
    _time.sleep(0.01)
    a = np.full(inst.n_servers, 2.0)
    gains = best_response_gains(inst, x, a, np.ones(inst.n_servers), np.zeros(inst.n_servers), session)
    assert set(gains) == set(inst.servers) and all(g is None for g in gains.values())
    full = best_response_gains(inst, x, a, np.ones(inst.n_servers), np.zeros(inst.n_servers))
    assert all(g is not None and g < 1e-6 for g in full.values())


def ipopt_response(inst, x, i, alpha, A, B):
    """Server ``i``'s best response to ``x`` by Ipopt on the Pyomo model of (12)–(15), scaled onto the
    server's rows (with the room its external resources leave) where Ipopt ends a hair outside, and
    ``U_i`` there: ``(column, U_i)``."""
    from fairalloc.models import apf_vds as M

    ref, out = M.ServerBestResponse(inst, i, alpha, A, B).respond(x, Session())
    assert out.has_point
    row = M.with_room(inst, x, M.server_rows(inst)[i])
    use = row.usage(ref)
    ref = ref * min(1.0, float(np.min(row.capacity[use > 0] / use[use > 0], initial=np.inf)))
    y = x.copy()
    y[:, i] = ref
    users = np.flatnonzero(inst.runnable[:, i])
    phig = inst.weight[users] * inst.gamma[users, i]
    u = M._ServerUtility(alpha, A, B)
    return ref, float(np.sum(inst.weight[users] * u.g(y[users].sum(axis=1) / phig)))


def _room(inst, x, i):
    """What task limits and budgets leave each runnable user of server ``i`` at ``x`` (``inf``: no
    limit): the ``ub`` of :func:`~fairalloc.models.apf_vds.numpy_best_response`."""
    from fairalloc.models._perserver import coupled_users, coupling_room

    users = np.flatnonzero(inst.runnable[:, i])
    ub = np.full(len(users), np.inf)
    lim = coupled_users(inst, i, users)
    ub[lim] = coupling_room(inst, x, i, users[lim])
    return ub


@pytest.mark.parametrize("fam", ["plain", "placement", "weights", "time-shared", "limits"])
def test_numpy_best_response_agrees_with_ipopt(fam):
    """Each server's exact best response by Newton's method on its dual (the default route of the gains)
    against Ipopt on the Pyomo model of (12)–(15): same column, same utility, and its dual bound
    ``Φ(λ*)`` above both (the duality gap certifies it) — at perturbed points, where the gains are
    positive, for α ∈ {0.5, 1, 3} and the (22) class with A, B > 0 (g'⁻¹ by Newton's method then)."""
    from fairalloc.generate import FAMILIES
    from fairalloc.models import apf_vds as M

    rng = np.random.default_rng(5)
    checked = 0
    for seed, (alpha, A, B) in enumerate([(0.5, None, None), (1.0, None, None), (3.0, None, None),
                                          (2.0, 2.0, 0.5)]):
        inst = random_instance(40 + seed, 10, 4, 3, missing=0.0, **FAMILIES[fam])
        a, A_, B_ = M.utility_parameters(inst, alpha, A, B)
        extra = {} if A is None else {"A": A, "B": B}
        x = solve(inst, "apf-vds", alpha=alpha, gains=False, **extra).x * rng.uniform(0.6, 1.0, (10, 4))
        c = M.utility_scale(inst, a, A_, B_)
        As, Bs = M._scaled(a, A_, B_, c)
        for i in range(inst.n_servers):
            ub = _room(inst, x, i)
            fast = M.numpy_best_response(inst, i, a[i], As[i], Bs[i], x, ub)
            assert fast is not None, (alpha, A, B, i)
            col, value, bound, _ = fast
            scale = max(1.0, abs(value))
            assert value - 1e-13 * scale <= bound <= value + M.GAP * scale  # weak duality (round-off)
            ref, ipopt_value = ipopt_response(inst, x, i, a[i], As[i], Bs[i])
            # Ipopt (tolerance 1e-8) leaves columns that should be 0 near 1e-6: a loose comparison here,
            # the utilities below are the exact check
            np.testing.assert_allclose(col, ref, rtol=1e-3, atol=2e-5 * max(1.0, ref.max()))
            assert ipopt_value <= bound + 1e-12 * max(1.0, abs(bound))  # weak duality, checked
            assert value >= ipopt_value - 1e-7 * max(1.0, abs(value))
            checked += 1
    assert checked == 16


@pytest.mark.parametrize("fam", ["plain", "placement", "weights", "limits"])
def test_numpy_best_response_log_price_step_at_large_alpha(fam, monkeypatch):
    """Above ``LOG_STEP_ABOVE`` the dual Newton method tries its step in log prices first. At α ∈ {12, 16}
    (points: the α = 3 equilibrium, perturbed) each server's response with it and without it (the plain
    step in λ only) are both certified by their duality gaps, reach the same utility, and Ipopt's is no
    better; the two routes take different iterates (the log step is exercised)."""
    from fairalloc.generate import FAMILIES
    from fairalloc.models import apf_vds as M

    rng = np.random.default_rng(7)
    differ = 0
    for seed, alpha in enumerate([12.0, 16.0]):
        inst = random_instance(60 + seed, 10, 4, 3, missing=0.0, **FAMILIES[fam])
        x = solve(inst, "apf-vds", alpha=3.0, gains=False).x * rng.uniform(0.6, 1.0, (10, 4))
        a, A_, B_ = M.utility_parameters(inst, alpha, None, None)
        As, Bs = M._scaled(a, A_, B_, M.utility_scale(inst, a, A_, B_))
        for i in range(inst.n_servers):
            ub = _room(inst, x, i)
            monkeypatch.setattr(M, "LOG_STEP_ABOVE", 8.0)
            log_step = M.numpy_best_response(inst, i, a[i], As[i], Bs[i], x, ub)
            monkeypatch.setattr(M, "LOG_STEP_ABOVE", np.inf)
            plain = M.numpy_best_response(inst, i, a[i], As[i], Bs[i], x, ub)
            assert log_step is not None and plain is not None, (fam, alpha, i)
            for _, value, bound, _ in (log_step, plain):
                scale = max(1.0, abs(value))
                assert value - 1e-13 * scale <= bound <= value + M.GAP * scale
            assert abs(log_step[1] - plain[1]) <= 2 * M.GAP * max(1.0, abs(plain[1]))
            _, ipopt_value = ipopt_response(inst, x, i, a[i], As[i], Bs[i])
            assert log_step[1] >= ipopt_value - 1e-7 * max(1.0, abs(log_step[1]))
            differ += not np.array_equal(log_step[3], plain[3])
    assert differ > 0


def test_numpy_best_response_from_a_user_holding_almost_nothing():
    """At α = 8 a user holding 10⁻⁴⁵ tasks (a trial point of Newton's) has an infinite marginal in floats.
    The response's start price was then infinite and every later one NaN: no response (the caller fell
    back to Ipopt) and numpy warnings on stderr. It now starts that user from the median user's marginal,
    certifies the response (a feasible column whose utility its dual bound meets, and Ipopt's no better),
    and warns about nothing."""
    import warnings

    from fairalloc.models import apf_vds as M

    inst = Instance.from_arrays(capacity=[[4.0, 8.0], [6.0, 3.0]],
                                demand=[[1.0, 2.0], [2.0, 1.0], [1.0, 1.0]])
    x = np.array([[1e-45, 0.0], [1.0, 1.0], [0.5, 1.0]])
    a, A, B = M.utility_parameters(inst, 8.0, None, None)
    As, Bs = M._scaled(a, A, B, M.utility_scale(inst, a, A, B))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast = M.numpy_best_response(inst, 0, a[0], As[0], Bs[0], x)
    assert fast is not None
    col, value, bound, _ = fast
    assert value - 1e-13 * abs(value) <= bound <= value + M.GAP * max(1.0, abs(value))
    assert (col >= 0).all() and (col @ inst.demand <= inst.capacity[0] * (1 + 1e-12)).all()
    # Ipopt's column is 2 % away here and no better: its utility is below the dual bound (weak duality)
    # and below numpy's, which the bound certifies
    _, ipopt_value = ipopt_response(inst, x, 0, a[0], As[0], Bs[0])
    assert ipopt_value <= bound + 1e-12 * abs(bound)
    assert value >= ipopt_value


def test_gains_by_numpy_and_by_ipopt_agree(monkeypatch):
    """best_response_gains by the numpy route equals the Ipopt route's at a perturbed point (gains > 0),
    and is 0 at an equilibrium (started from its multipliers, the check is immediate)."""
    from fairalloc.models import apf_vds as M

    inst = random_instance(61, 12, 4, 3, missing=0.0)
    a, A, B = M.utility_parameters(inst, 2.0)
    r = solve(inst, "apf-vds", alpha=2.0, gains=False)
    x = r.x * np.random.default_rng(0).uniform(0.6, 1.0, r.x.shape)
    fast = M.best_response_gains(inst, x, a, A, B)
    monkeypatch.setattr(M, "numpy_best_response", lambda *args, **kw: None)
    slow = M.best_response_gains(inst, x, a, A, B)
    monkeypatch.undo()
    assert min(fast.values()) > 1e-3
    for s in inst.servers:
        assert fast[s] == pytest.approx(slow[s], rel=1e-5)
        assert fast[s] >= slow[s] - 1e-9  # the exact response gains at least as much as Ipopt's
    full = solve(inst, "apf-vds", alpha=2.0)
    assert full.details["best_response_gain"] <= NASH_TOL


def test_best_response_sweeps_by_numpy_and_by_ipopt_agree(monkeypatch):
    """The best-response algorithm's sweeps with the numpy responses and with Ipopt's (forced) end at the
    same equilibrium: the totals of both, and of MNW at α = 1, agree; both carry the certificate."""
    from fairalloc.models import apf_vds as M

    inst = random_instance(71, 8, 3, 3, missing=0.0)
    for alpha in (1.0, 2.0):
        fast = solve(inst, "apf-vds", alpha=alpha, algorithm="best-response")
        with monkeypatch.context() as m:
            m.setattr(M, "numpy_best_response", lambda *args, **kw: None)
            slow = solve(inst, "apf-vds", alpha=alpha, algorithm="best-response")
        for r in (fast, slow):
            _assert_nash(r, inst)
        np.testing.assert_allclose(fast.tasks, slow.tasks, rtol=1e-6)
        if alpha == 1.0:
            np.testing.assert_allclose(fast.tasks, solve(inst, "mnw").tasks, rtol=1e-7)


def test_the_coordinate_sweep_stops_doubling_a_price_before_it_overflows():
    """A row over-full at every price (a best response's trial point at α = 8 with demands six decades
    apart): the price is doubled towards a bracket, and past 1e300 it stops there, finite, instead of
    overflowing with a RuntimeWarning on stderr."""
    import warnings

    from fairalloc.models.apf_vds import _coordinate_sweep

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lam = _coordinate_sweep(np.array([1e290, 2.0]), np.array([0]), lambda v: -np.ones(2), np.ones(2))
    assert 1e300 < lam[0] < np.inf and lam[1] == 2.0


def test_nash_conditions_take_the_result_multipliers_only_where_they_certify_better():
    """``witness`` (a result's ``details.multipliers``) replaces the verification's fit only where it gives
    a smaller scaled residual: the result's own certify as well as the fit; multipliers a thousand times
    too large are not taken."""
    inst = random_instance(4, 10, 3, 3)
    r = solve(inst, "apf-vds", alpha=3, gains=False)
    fit = nash_conditions(inst, r.x, 3.0, gains=False)
    own = nash_conditions(inst, r.x, 3.0, gains=False, witness=r.details["multipliers"])
    assert own["ncp_residual_scaled"] <= fit["ncp_residual_scaled"] <= 1e-8
    wrong = {k: 1e3 * v + 1.0 for k, v in r.details["multipliers"].items()}
    bad = nash_conditions(inst, r.x, 3.0, gains=False, witness=wrong)
    assert bad["ncp_residual_scaled"] == fit["ncp_residual_scaled"]
    assert bad["multipliers"] == fit["multipliers"]
