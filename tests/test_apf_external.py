"""PS-DSF and αPF-VDS with external resources: the generalised game where a server may use what the
other servers leave of a resource they share. αPF-VDS's variational equilibrium (one price per external
resource) is checked against MNW at α = 1, by the servers' KKT conditions recomputed here, and under
changes of units and order; PS-DSF's fixed points by [PSDSF] Thm 1 written out here and a worked
example; the algorithms without such rows still reject these instances."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fairalloc
from fairalloc.errors import InstanceError
from fairalloc.generate import FAMILIES, random_instance

ROOT = Path(__file__).resolve().parents[1]
FAMS = ("external", "scoped", "mixed")


def _usage_ok(inst, x, rtol=1e-9):
    """χ with every external resource, computed here: per-server rows, pools over their scope, limits."""
    assert (x >= -rtol).all()
    assert (x[~inst.runnable] == 0).all()
    use = np.einsum("nr,nk->kr", inst.demand, x)
    assert (use <= inst.capacity * (1 + rtol) + rtol).all()
    for e in range(len(inst.external)):
        pool = float((inst.external_demand[:, e][:, None] * inst.external_scope[e][None, :] * x).sum())
        assert pool <= inst.external_capacity[e] * (1 + rtol)
    assert (x.sum(axis=1) <= inst.tasks * (1 + rtol)).all()


@pytest.mark.parametrize("fam", FAMS)
@pytest.mark.parametrize("seed", range(3))
def test_alpha_one_is_mnw(fam, seed):
    """At α = 1 every server's marginal utility of ``x[n,i]`` is ``φ_n/X_n``, the gradient of MNW's
    ``Σ φ_n log X_n``: with one shared price per coupling row the equilibrium is MNW's point."""
    inst = random_instance(seed, 30, 6, 3, **FAMILIES[fam])
    a = fairalloc.solve(inst, "apf-vds", alpha=1)
    m = fairalloc.solve(inst, "mnw")
    assert a.status.value == "optimal" and m.status.ok
    assert a.details["algorithm"] == "newton" and a.details["ncp_residual_scaled"] <= 1e-8
    X, Y = a.allocation.sum(axis=1), m.allocation.sum(axis=1)
    assert np.abs(X - Y).max() <= 1e-8 * Y.max()


@pytest.mark.parametrize("fam", FAMS)
@pytest.mark.parametrize("alpha", [0.5, 2.0, 3.0])
def test_servers_kkt_with_shared_prices(fam, alpha):
    """The returned multipliers (per server row, and one per external resource) satisfy every finite
    server's KKT conditions, recomputed here from the instance: ``x ⊥ f ≥ 0`` with
    ``f = Σ_r λ_{i,r} d_{n,r} + Σ_e μ_e d_{n,e} − g'(s̃)/γ`` (relative to ``g'/γ``), ``λ, μ ⊥ slack``."""
    inst = random_instance(7, 40, 8, 3, **FAMILIES[fam])
    r = fairalloc.solve(inst, "apf-vds", alpha=alpha)
    assert r.status.value == "optimal", r.message
    x = r.allocation
    _usage_ok(inst, x)
    mu = r.details.get("external_multipliers", {})
    lam = r.details["multipliers"]
    X = x.sum(axis=1)
    s = X[:, None] / (inst.weight[:, None] * np.where(inst.runnable, inst.gamma, 1.0))
    marg = s ** (-alpha) / np.where(inst.runnable, inst.gamma, 1.0)
    limits = r.details.get("limit_multipliers", {})
    worst = 0.0
    for n, i in np.argwhere(inst.runnable):
        srv = inst.servers[i]
        f = sum(lam.get(f"{srv},{res}", 0.0) * inst.demand[n, k] for k, res in enumerate(inst.resources))
        f += sum(mu.get(e, 0.0) * inst.external_demand[n, k] for k, e in enumerate(inst.external)
                 if inst.external_scope[k, i])
        f += limits.get(inst.users[n], 0.0)
        rel = (f - marg[n, i]) / marg[n, i]
        worst = max(worst, abs(min(x[n, i] / X[n], rel)))
    assert worst <= 1e-6
    for k, e in enumerate(inst.external):
        pool = float((inst.external_demand[:, k][:, None] * inst.external_scope[k][None, :] * x).sum())
        if mu.get(e, 0.0) > 1e-9 * max(mu.values()):
            assert pool >= inst.external_capacity[k] * (1 - 1e-7)  # priced only where full
    assert r.details["best_response_gain"] <= 1e-8 * max(1.0, abs(max(r.details["per_server_gain"].values())))


def test_units_and_order_do_not_change_the_answer():
    inst = random_instance(3, 30, 6, 3, **FAMILIES["scoped"])
    base = fairalloc.solve(inst, "apf-vds", alpha=2).allocation
    scaled = inst.replace(external_capacity=inst.external_capacity * 1e5,
                          external_demand=inst.external_demand * 1e5)
    np.testing.assert_allclose(fairalloc.solve(scaled, "apf-vds", alpha=2).allocation, base,
                               atol=1e-7 * base.max())
    perm = np.arange(inst.n_users)[::-1]
    rev = inst.replace(users=tuple(inst.users[n] for n in perm), demand=inst.demand[perm],
                       external_demand=inst.external_demand[perm], weight=inst.weight[perm],
                       eligible=inst.eligible[perm], tasks=inst.tasks[perm])
    got = fairalloc.solve(rev, "apf-vds", alpha=2).allocation
    np.testing.assert_allclose(got[perm], base, atol=1e-7 * base.max())


@pytest.mark.parametrize("fam", FAMS)
@pytest.mark.parametrize("algorithm", ["newton", "best-response"])
def test_inf_servers_with_external(fam, algorithm):
    """α = inf at some servers: [PSDSF] Thm 1 there (written out here), with each external resource a row
    of every server in its scope — by Newton (each such server's own row for it inside its leximin max,
    the finite servers sharing one price) and by the sweeps' leximin responses within the room."""
    for seed in range(3):
        inst = random_instance(seed, 20, 4, 4, **FAMILIES[fam])
        r = fairalloc.solve(inst, "apf-vds", alpha="inf,2,2,inf", algorithm=algorithm)
        assert r.status.ok and r.details["algorithm"] == algorithm, r.message
        assert r.details["certificate"]["holds"] and r.details["best_response_gain"] <= 1e-8
        _usage_ok(inst, r.allocation)
        assert _thm1_holds(inst, r.allocation, servers=[0, 3])


def test_first_game_starts_with_the_shared_prices():
    """With α = inf at some servers the path's first game (α = 1 at the others, leximin there) starts at
    the α = 1 point of every server with its multipliers: the finite servers' λ and the external
    resource's shared price carry over, so their pairs start certified. Recomputed from the point alone,
    the price started at 0 and those pairs were off by the link's part of the marginal."""
    from fairalloc.models import apf_vds as M
    from fairalloc.models._apf_newton import _Arrays
    from fairalloc.models.feasible import uniform_split
    from fairalloc.solvers import Session

    inst = random_instance(0, 30, 6, 4, **FAMILIES["external"])
    finite = np.array([False, True, True, False, True, True])
    at, one = np.where(finite, 1.0, np.inf), np.ones(6)
    c = M.utility_scale(inst, at, one, 0 * one)
    g0 = M._game(inst, at, *M._scaled(at, one, 0 * one, c), c, leximin=True)
    info: dict = {}
    x, lam, mu = M._proportional_start(inst, g0, uniform_split(inst), 1e-10, 60, Session(), info)
    assert info["ok"]
    arr = _Arrays(g0)
    assert mu[arr.coupling.index(("external", 0))] > 0
    xp, lv = arr.pack(x, lam, mu)
    f, _, m, _ = arr.f(xp, lv)
    own = finite[arr.pi]
    assert np.abs(np.minimum(xp / arr.totals(xp)[arr.pn], f / m))[own].max() <= 1e-8
    lv0 = arr.pack(x, g0.multipliers(x), None)[1]
    f0, _, m0, _ = arr.f(xp, lv0)
    assert np.abs(np.minimum(xp / arr.totals(xp)[arr.pn], f0 / m0))[own].max() > 1e-2


def test_first_game_from_the_second_start(monkeypatch):
    """The path's first game is not convex: where Newton does not certify it from the α = 1 point (here
    forced: the first run of the continuation reports its first game stalled; on two of six unseen-style
    200 × 32 instances it did so before the external rows took the support scales), the continuation runs
    again from the sharing-incentive point, marked in the path; the result carries Thm 1 at the inf
    servers and the Nash check."""
    from fairalloc.models import _apf_newton
    from fairalloc.models import apf_vds as M
    from fairalloc.verify import verify

    calls = []
    real = M.continuation

    def first_fails(make, x, lam, *args, **kw):
        calls.append(x)
        if len(calls) == 1:
            return _apf_newton.NewtonResult(x, lam, False, 1, 1.0, "forced"), [
                {"t": 0.0, "iterations": 1, "residual": 1.0, "ok": False}]
        return real(make, x, lam, *args, **kw)

    monkeypatch.setattr(M, "continuation", first_fails)
    monkeypatch.setattr(M, "DIRECT_FIRST", False)  # (the target from the SI point certifies here)
    inst = random_instance(29, 40, 8, 4, **FAMILIES["mixed"])
    r = fairalloc.solve(inst, "apf-vds", alpha="inf,3,3,3,inf,3,3,3")
    path = r.details["newton"]["continuation"]
    assert r.status.value == "optimal" and r.details["algorithm"] == "newton"
    first = [h for h in path if h["t"] == 0.0]
    assert [h["ok"] for h in first] == [False, True] and first[1]["start"] == "sharing-incentive point"
    assert len(calls) == 2
    assert r.details["certificate"]["holds"] and _thm1_holds(inst, r.allocation, servers=[0, 4])
    assert verify(inst, r, items=("nash",))["nash"]["holds"]


def test_certificate_reads_external_rows():
    """Thm 1 with an external resource: two users on two servers share one link. At the equal split the
    link is each user's bottleneck; taking from one breaks it."""
    from fairalloc.instance import Instance
    from fairalloc.verify.psdsf import psdsf_certificate

    inst = Instance.from_arrays(capacity=[[10.0], [10.0]], demand=[[1.0], [1.0]],
                                external_capacity=[4.0], external_demand=[[1.0], [1.0]])
    good = np.array([[1.0, 1.0], [1.0, 1.0]])
    cert = psdsf_certificate(inst, good)
    assert cert["holds"] and set(cert["bottleneck"]["u1"].values()) == {"e1"}
    bad = np.array([[1.5, 1.5], [0.5, 0.5]])
    assert not psdsf_certificate(inst, bad)["holds"]


def test_still_rejected_where_undefined(tmp_path):
    inst = random_instance(0, 6, 2, 2, **FAMILIES["external"])
    for kw in ({"algorithm": "ps-mfa"}, {"algorithm": "distributed"}):
        with pytest.raises(InstanceError, match="external"):
            fairalloc.solve(inst, "apf-vds", **kw)
    for algorithm in ("paper", "distributed"):
        with pytest.raises(InstanceError, match="external"):
            fairalloc.solve(inst, "ps-dsf", algorithm=algorithm)
    fig2 = str(ROOT / "examples" / "tsfer-fig2.yaml")
    p = subprocess.run([sys.executable, "-m", "fairalloc", "solve", fig2, "-m", "ps-dsf", "-p",
                        "algorithm=paper"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1
    assert "external resources (bw)" in p.stderr


# ---------------------------------------------------------------------- PS-DSF
def _thm1_holds(inst, x, tol=1e-7, servers=None):
    """[PSDSF] Thm 1 in the generalised game, written out pair by pair (independent of
    fairalloc.verify.psdsf): every runnable pair has a demanded resource — a row of its server, or an
    external resource whose scope holds the server — that is saturated (an external one over its whole
    scope) and held at that server by no user of larger weighted VDS; or the user is at its task limit."""
    X = x.sum(axis=1)
    vds = X[:, None] / (inst.weight[:, None] * np.where(inst.runnable, inst.gamma, np.nan))
    holds = x > 1e-6 * X[:, None]  # a holder: more than 1e-6 of its total there (the certificate's rule)
    for n, i in zip(*np.nonzero(inst.runnable)):
        if X[n] >= inst.tasks[n] * (1 - tol) or (servers is not None and i not in servers):
            continue
        ok = False
        for r in range(len(inst.resources)):
            if inst.demand[n, r] > 0 and x[:, i] @ inst.demand[:, r] >= inst.capacity[i, r] * (1 - tol):
                held = [m for m in range(inst.n_users) if holds[m, i] and inst.demand[m, r] > 0]
                ok |= all(vds[n, i] >= vds[m, i] * (1 - tol) for m in held)
        for e in range(len(inst.external)):
            if inst.external_demand[n, e] > 0 and inst.external_scope[e, i]:
                pool = sum(x[m, j] * inst.external_demand[m, e] for m in range(inst.n_users)
                           for j in range(inst.n_servers) if inst.external_scope[e, j])
                if pool >= inst.external_capacity[e] * (1 - tol):
                    held = [m for m in range(inst.n_users) if holds[m, i] and inst.external_demand[m, e] > 0]
                    ok |= all(vds[n, i] >= vds[m, i] * (1 - tol) for m in held)
        if not ok:
            return False
    return True


@pytest.mark.parametrize("fam", FAMS)
@pytest.mark.parametrize("algorithm", ["fast", "best-response"])
def test_psdsf_with_external(fam, algorithm):
    for seed in range(3):
        inst = random_instance(seed, 12, 3, 3, **FAMILIES[fam])
        r = fairalloc.solve(inst, "ps-dsf", algorithm=algorithm)
        assert r.status.value == "converged", r.message
        assert r.details["certificate"]["holds"]
        _usage_ok(inst, r.allocation)
        assert _thm1_holds(inst, r.allocation)


def test_psdsf_link_is_the_bottleneck():
    """Two servers of 10 cpu, a link of 4 that only u1 uses (one per task): u1 runs 4 tasks, its link
    the bottleneck at both servers; u2 takes the remaining 16 cpu. Scoped to s1 only, u1 also runs on
    s2, where the two share the cpu by weighted VDS."""
    from fairalloc.instance import Instance

    inst = Instance.from_arrays(capacity=[[10.0], [10.0]], demand=[[1.0], [1.0]],
                                external_capacity=[4.0], external_demand=[[1.0], [0.0]])
    r = fairalloc.solve(inst, "ps-dsf")
    np.testing.assert_allclose(r.allocation.sum(axis=1), [4.0, 16.0], rtol=1e-9)
    assert set(r.details["certificate"]["bottleneck"]["u1"].values()) == {"e1"}
    a = fairalloc.solve(inst, "apf-vds", alpha="inf")  # every α = inf: PS-DSF itself
    np.testing.assert_allclose(a.allocation.sum(axis=1), [4.0, 16.0], rtol=1e-9)
    scoped = inst.replace(external_scope=np.array([[True, False]]))
    s = fairalloc.solve(scoped, "ps-dsf")
    assert s.status.value == "converged" and _thm1_holds(scoped, s.allocation)
    assert s.allocation[0, 0] <= 4.0 * (1 + 1e-9) and s.allocation.sum() == pytest.approx(20.0)


def test_ipopt_best_response_within_the_room():
    """Server i's best response with an external resource's room as its row's right-hand side: the
    Pyomo/Ipopt model (a mutable room in the row) agrees with numpy's dual Newton (the room as a row)."""
    from fairalloc.models._perserver import external_room
    from fairalloc.models.apf_vds import NumpyBestResponse, ServerBestResponse
    from fairalloc.solvers import Session

    inst = random_instance(1, 12, 3, 3, **FAMILIES["scoped"])
    x = fairalloc.solve(inst, "apf-vds", alpha=2).allocation
    x[:, 0] *= 0.5  # off the equilibrium: the servers' responses move
    for i in range(inst.n_servers):
        col, out = ServerBestResponse(inst, i, 2.0, 1.0, 0.0).respond(x, Session())
        ref, _ = NumpyBestResponse(inst, i, 2.0, 1.0, 0.0).respond(x, Session())
        assert out.status.value == "optimal"
        np.testing.assert_allclose(col, ref, atol=1e-6 * ref.max())
        use, room = external_room(inst, x, i)
        assert (col @ inst.external_demand[:, use] <= room * (1 + 1e-7)).all()


@pytest.mark.parametrize("seed,fam,alpha,server", [(1, "external", 8.0, 0), (4, "external", 8.0, 2),
                                                    (4, "mixed", 8.0, 0), (14, "mixed", 4.0, 1)])
def test_numpy_best_response_with_prices_orders_apart(seed, fam, alpha, server):
    """A server's exact best response where its rows' prices are orders of magnitude apart (the external
    room a few % of a row, α = 4–8): the dual Newton method returns a column with its duality gap, and
    Ipopt on the Pyomo model of (12)–(15) finds no better one. Before the rows were scaled one by one
    (Newton's system to a unit diagonal, the exact coordinate sweep), these four ended without a
    certificate (``None``), and a continuation's best-response rescue left such servers where they
    were."""
    from test_apf_vds import ipopt_response

    from fairalloc.models import apf_vds as M
    from fairalloc.models.feasible import uniform_split

    inst = random_instance(seed, 12, 4, 3, **FAMILIES[fam])
    K = inst.n_servers
    x = uniform_split(inst) * np.random.default_rng(seed).uniform(0.2, 3, (inst.n_users, K))
    responders = M._make_responders(inst, np.full(K, alpha), np.ones(K), np.zeros(K), lp=False)
    out = responders[server].numpy_response(x)
    assert out is not None
    col, value, bound, _ = out
    assert value - 1e-13 * max(1.0, abs(value)) <= bound <= value + M.GAP * max(1.0, abs(value))
    row = M.with_room(inst, x, M.server_rows(inst)[server])
    assert (row.usage(col) <= row.capacity * (1 + 1e-12)).all()
    _, ipopt_value = ipopt_response(inst, x, server, alpha, 1.0, 0.0)
    assert ipopt_value <= bound + 1e-9 * max(1.0, abs(bound))
    assert value >= ipopt_value - 1e-7 * max(1.0, abs(value))


@pytest.mark.parametrize("unit", [1e4, 1e-4])
def test_psdsf_external_units(unit):
    """A 200 × 32 `mixed` instance with its link in other units: certified either way (in the instance's
    own units the 10⁴ case ended `error`; in normalised units without zeroing the noise, the 10⁻⁴ case
    did: a user starved to round-off counted as holding the link)."""
    inst = random_instance(9105, 200, 32, 4, **FAMILIES["mixed"])
    inst = inst.replace(external_capacity=inst.external_capacity * unit,
                        external_demand=inst.external_demand * unit)
    r = fairalloc.solve(inst, "ps-dsf", time_limit=120)
    assert r.status.value == "converged" and r.details["certificate"]["holds"], r.message
    _usage_ok(inst, r.allocation, rtol=1e-8)


def test_a_wild_newton_trial_point_prints_and_warns_nothing(capfd):
    """α = 8 on a restated external instance (users and servers permuted, resources listed backwards and
    in units 10⁻⁴…10⁶): Newton's trial points there hold users at so few tasks that their marginals
    overflow. That gave the servers' numpy best responses infinite prices (no response: the Ipopt
    fallback), numpy warnings on stderr, and NaN in Newton's system, on which SuperLU's BLAS printed "On
    entry to DGEMV parameter number 2 had an illegal value" to file descriptor 1 seven times. Now: an
    equilibrium, nothing printed and no warning."""
    import warnings

    from restate import restated

    inst = random_instance(701, 60, 12, 4, external=1)
    rng = np.random.default_rng(701 * 7 + len("external"))
    pu, ps = rng.permutation(inst.n_users), rng.permutation(inst.n_servers)
    other = restated(inst, pu, ps, 10.0 ** rng.uniform(-4, 6, len(inst.resources) + len(inst.external)),
                     reverse=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        r = fairalloc.solve(other, "apf-vds", alpha=8.0)
    assert r.status.value == "optimal" and r.details["ncp_residual_scaled"] <= 1e-8
    out, _ = capfd.readouterr()
    assert out == ""


def test_verifying_alpha_inf_with_an_external_resource_warns_nothing():
    """``--verify`` on α = ∞ with an external resource evaluated the servers' utilities at users holding
    nothing there: ``log 0`` and ``0 · log 0`` in ``ApfGame.g`` reached stderr as RuntimeWarnings
    (found by a restatement sweep with verification on). The values are unchanged; the warnings gone."""
    import warnings

    inst = random_instance(510, 10, 4, 3, external=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        r = fairalloc.solve(inst, "apf-vds", alpha="inf", verify=True)
    assert r.status.value == "converged" and r.verification is not None
