"""The verification layer (docs/verification.md, §1.3): every item on known allocations, with the numbers a
reader
can check by hand, and the issue's "must show" cases."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fairalloc import Instance, load_instance, solve
from fairalloc.cli import main
from fairalloc.errors import FairallocError
from fairalloc.generate import FAMILIES, random_instance
from fairalloc.verify import ITEMS, verify
from fairalloc.verify.bottleneck import bottleneck_fair
from fairalloc.verify.feasibility import feasibility
from fairalloc.verify.pareto import pareto
from fairalloc.verify.strategy import Lie, liar_utility, strategy_proof


# ---------------------------------------------------------------------- strategy-proofness (must show)
@pytest.mark.parametrize("mech", ["mnw", "cru"])
def test_sp_search_finds_the_lie_against_mnw_and_cru(examples, mech):
    """[TSFER] Thms 1–2: CRU and MNW are not SP. On the paper's own Fig. 2, u2 doubling its reported
    bandwidth moves it onto both servers: it truly runs 5.625 tasks instead of 5 (gain 1/8)."""
    inst = load_instance(examples / "tsfer-fig2.yaml")
    rep = strategy_proof(inst, solve(inst, mech), seed=0, budget=100)
    assert rep["holds"] is False and rep["stopped"] == "exhausted"
    assert rep["best_gain"] == pytest.approx(0.125, rel=1e-5)
    assert rep["user"] == "u2" and rep["truthful_utility"] == pytest.approx(5.0, rel=1e-6)
    assert rep["lie"]["kind"] == "scale" and rep["lie"]["target"] == "bw" and rep["lie"]["factor"] == 2.0
    # the lie replayed by hand: the liar's bundle is worth 5.625 tasks of its true demand
    lie = Lie.from_dict(rep["lie"])
    lying = lie.apply(inst)
    assert liar_utility(inst, lying, solve(lying, mech), "u2") == pytest.approx(5.625, rel=1e-5)


@pytest.mark.parametrize("mech", ["tsf-er", "drf"])
def test_sp_search_finds_no_lie_against_tsfer_and_drf(examples, mech):
    """[TSFER] Table 2 / Ghodsi et al.: TSF-ER and DRF are SP; the same search (every lie, and 40 per
    random instance of TSF-ER's setting) finds nothing profitable."""
    inst = load_instance(examples / "tsfer-fig2.yaml")
    rep = strategy_proof(inst, solve(inst, mech), budget=100)
    assert rep["holds"] is True and rep["stopped"] == "exhausted" and rep["lies_tried"] >= 30
    assert rep["best_gain"] <= 1e-7
    for seed in range(3):
        rnd = random_instance(seed, n_users=3, n_servers=2, n_resources=2, external=1, missing=0.0)
        rep = strategy_proof(rnd, solve(rnd, mech), seed=seed, budget=40)
        assert rep["holds"] is True and rep["lies_tried"] == 40, rep
        assert rep["best_gain"] <= 1e-7


def test_sp_budget_and_hand_made_results(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    rep = strategy_proof(inst, solve(inst, "tsf-er"), budget=5)
    assert rep["lies_tried"] == 5 and rep["stopped"] == "budget"
    hand = verify(inst, {"allocation": {"u1": {"s2": 5}, "u2": {"s1": 5}}})
    assert hand["strategy_proof"]["holds"] is None and "typed by hand" in hand["strategy_proof"]["reason"]
    assert hand["kkt"]["holds"] is None


def test_time_shared_rate_lie_against_psdsf(examples):
    """On time-shared servers a user reports one rate per server, and PS-DSF is not SP there (the papers
    claim SP for demand vectors only). [PSDSF] Table III: u4 (rates C 27.5, D 27.5) truthfully gets D
    alone, 27.5 tasks, and ties with u3 on C (both VDS 1). Reporting 34.375 on C lowers its VDS there to
    27.5/34.375 = 0.8, so C is shared until (27.5 + 34.375 f)/34.375 = 1 − f: f = 0.1 of C's time, worth
    2.75 true tasks (gain 1/10)."""
    inst = load_instance(examples / "psdsf-table3.yaml")
    lies = [Lie("u4", "rate", "C", 1.25), Lie("u3", "drop", "D"), Lie("u1", "rate", "A", 0.5)]
    rep = strategy_proof(inst, solve(inst, "ps-dsf"), lies=lies)
    assert rep["holds"] is False and rep["lies_tried"] == 3
    assert rep["user"] == "u4" and rep["lie"]["kind"] == "rate" and rep["lie"]["target"] == "C"
    assert rep["best_gain"] == pytest.approx(0.1, rel=1e-6)
    assert rep["lie_utility"] == pytest.approx(30.25, rel=1e-6)
    assert rep["per_user"]["u3"] == pytest.approx(0.0, abs=1e-7)


# ---------------------------------------------------------------------- Pareto (must show)
def test_pareto_tsfer_paper_with_placement(examples):
    """Algorithm 1 as printed leaves one CPU of s2 idle under placement constraints: the PO LP finds
    X = (1, 1, 4) dominating (1, 1, 3), factor 6/5; the default variant is Pareto optimal."""
    inst = load_instance(examples / "tsfer-placement.yaml")
    assert inst.has_placement
    paper = solve(inst, "tsf-er", variant="paper")
    assert paper.tasks == pytest.approx([1, 1, 3], abs=1e-7)
    po = verify(inst, paper, sp=False)["pareto"]
    assert po["holds"] is False and po["domination_factor"] == pytest.approx(6 / 5, rel=1e-7)
    assert list(po["dominating_tasks"].values()) == pytest.approx([1, 1, 4], abs=1e-7)
    assert po["improved_users"] == ["u3"]
    y = np.array([[po["dominating_allocation"].get(u, {}).get(s, 0.0) for s in inst.servers]
                  for u in inst.users])
    assert feasibility(inst, y)["holds"] and (y.sum(1) >= paper.tasks - 1e-9).all()
    lexi = verify(inst, solve(inst, "tsf-er"), sp=False)["pareto"]
    assert lexi["holds"] is True and lexi["domination_factor"] == pytest.approx(1.0, abs=1e-9)
    assert lexi["dominating_tasks"] is None


def test_pareto_measures_idle_capacity():
    inst = Instance.from_arrays(capacity=[[4, 4]], demand=[[1, 1], [1, 2]])
    po = pareto(inst, np.array([[1.0], [1.0]]))
    # u1 can take the rest of the cpu (2 more), or u2 the memory: max ΣY = 2 + 1 = 3 with Y ≥ (1, 1)
    assert po["domination_factor"] == pytest.approx(3 / 2) and po["max_total_tasks"] == pytest.approx(3)
    infeasible = pareto(inst, np.array([[5.0], [0.0]]))
    assert infeasible["holds"] is None and "not feasible" in infeasible["reason"]


# ---------------------------------------------------------------------- PS-DSF certificate (must show)
def test_psdsf_certificate_on_results_and_perturbed(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    rep = verify(inst, solve(inst, "ps-dsf"), sp=False)
    assert rep["psdsf_certificate"]["holds"] is True and rep["psdsf_certificate"]["failures"] == []
    # move one task of u3 from s2 to s1: s2 (cpu 11.5/12, mem 11/12) is no longer saturated, so u3 and
    # u4 have no bottleneck resource there
    doc = {"allocation": {"u1": {"s1": 3.6}, "u2": {"s1": 3.6}, "u3": {"s1": 1.0, "s2": 7.0},
                          "u4": {"s2": 8.0}}}
    bad = verify(inst, doc)["psdsf_certificate"]
    assert bad["holds"] is False
    named = {(f["user"], f["server"]) for f in bad["failures"]}
    assert ("u3", "s2") in named and ("u4", "s2") in named


def test_psdsf_certificate_with_external(examples):
    """[TSFER] Fig. 2 (a link shared by both servers): PS-DSF's point carries the certificate (cpu is
    every user's bottleneck), TSF-ER's does not (u1 at s2: mem is held by u2, of larger VDS there)."""
    inst = load_instance(examples / "tsfer-fig2.yaml")
    good = verify(inst, solve(inst, "ps-dsf"), sp=False)["psdsf_certificate"]
    assert good["holds"] and good["bottleneck"]["u1"] == {"s1": "cpu", "s2": "cpu"}
    bad = verify(inst, solve(inst, "tsf-er"), sp=False)["psdsf_certificate"]
    assert bad["holds"] is False and [(f["user"], f["server"]) for f in bad["failures"]] == [("u1", "s2")]


# ---------------------------------------------------------------------- bottleneck fairness
def test_bottleneck_fairness_on_psdsf_fig1(examples):
    """[PSDSF] §II-B: memory is every user's dominant resource at every server; PS-DSF gives each user
    12 GB (6 tasks), C-DRFH gives u1 only 60/11 tasks (gap 1/11), TSF 4 tasks (gap 1/3)."""
    inst = load_instance(examples / "psdsf-fig1.yaml")
    got = {m: verify(inst, solve(inst, m), sp=False, items=("bottleneck_fair",))["bottleneck_fair"]
           for m in ("ps-dsf", "drfh", "tsf")}
    assert all(g["premise"] and g["resource"] == "mem" for g in got.values())
    assert got["ps-dsf"]["holds"] is True and got["ps-dsf"]["gap"] < 1e-7
    assert got["drfh"]["holds"] is False and got["drfh"]["gap"] == pytest.approx(1 / 11, rel=1e-6)
    assert got["tsf"]["holds"] is False and got["tsf"]["gap"] == pytest.approx(1 / 3, rel=1e-6)
    assert got["tsf"]["user"] == "u1" and got["tsf"]["fair_share"] == pytest.approx(12.0)


def test_bottleneck_premise_absent(examples):
    fig2 = load_instance(examples / "psdsf-fig2.yaml")
    item = bottleneck_fair(fig2, np.zeros((4, 2)))
    assert item["holds"] is None and item["premise"] is False and "dominant" in item["reason"]
    t3 = load_instance(examples / "psdsf-table3.yaml")
    assert "time-shared" in bottleneck_fair(t3, np.zeros((4, 4)))["reason"]


# ---------------------------------------------------------------------- Nash, KKT, SI definitions
def test_nash_conditions_of_apf_vds(examples):
    inst = load_instance(examples / "psdsf-fig2.yaml")
    r = solve(inst, "apf-vds", alpha=3, gains=False)
    nash = verify(inst, r, sp=False)["nash"]
    assert nash["holds"] is True and nash["ncp_residual"] < 1e-8
    assert nash["alpha"] == [3.0, 3.0] and set(nash["per_server_gain"]) == {"s1", "s2"}
    # the same result with u3 moved off s2: server s2 gains by its best response
    doc = r.to_dict()
    doc["allocation"]["u3"] = {"s2": 0.5 * doc["allocation"]["u3"]["s2"]}
    off = verify(inst, doc, sp=False)["nash"]
    assert off["holds"] is False and off["per_server_gain"]["s2"] > 1e-3
    assert verify(inst, solve(inst, "tsf"), sp=False)["nash"]["holds"] is None


@pytest.mark.parametrize("alpha,kw", [(8.0, {"weights": True}), (3.0, {"external": 1, "scoped": True})])
def test_nash_item_is_unit_free(alpha, kw):
    # at α = 8 the marginals z^-α span many orders of magnitude: a certified result's absolute NCP
    # residual is ~3e-4 (the item read false on it); the scaled residual and the relative gain do not
    # depend on units, so the verdict does not either
    inst = random_instance(0, 50, 8, 4, **kw)
    r = solve(inst, "apf-vds", alpha=alpha)
    assert r.status.value == "optimal"
    nash = verify(inst, r, items=("nash",))["nash"]
    assert nash["holds"] is True and nash["ncp_residual_scaled"] < 1e-8 and nash["relative_gain"] < 1e-8
    cap, dem = inst.capacity.copy(), inst.demand.copy()
    cap[:, 0] *= 1e6
    dem[:, 0] *= 1e6
    units = {"capacity": cap, "demand": dem * 1e-3}  # and tasks 1e3 times smaller (x 1e3 larger)
    if inst.external:
        units |= {"external_capacity": inst.external_capacity * 1e-4,
                  "external_demand": inst.external_demand * 1e-7}
    other = inst.replace(**units)
    doc = r.to_dict()
    doc["allocation"] = {u: {s: v * 1e3 for s, v in row.items()} for u, row in doc["allocation"].items()}
    again = verify(other, doc, items=("nash",))["nash"]
    assert again["holds"] is True
    assert again["ncp_residual_scaled"] < 1e-8 and again["relative_gain"] < 1e-8  # round-off both ways
    # a server's users moved off it: its relative gain is large, whatever the units
    x = r.x * 1e3
    x[:, 0] *= 0.5
    doc["allocation"] = {u: {s: float(x[n, i]) for i, s in enumerate(inst.servers) if x[n, i] > 0}
                         for n, u in enumerate(inst.users)}
    off = verify(other, doc, items=("nash",))["nash"]
    assert off["holds"] is False and off["relative_gain"] > 1e-3


def test_nash_item_recomputes_prices_that_certify():
    """The multipliers the check recomputes from the allocation alone certify the mechanism's own
    results: on these a user with a tiny total (a huge marginal at α = 8) once let Newton stop with a
    price on a row with slack, pairs at a task limit (f < 0 allowed) were fitted as equations, and a
    server left empty by a full external pool had no prices at all."""
    for seed, fam, alpha in [(1, "external", 8.0), (0, "mixed", 2.0), (1, "mixed", 2.0)]:
        inst = random_instance(seed, 30, 6, 4, **FAMILIES[fam])
        r = solve(inst, "apf-vds", alpha=alpha)
        assert r.status.value == "optimal"
        nash = verify(inst, r, items=("nash",))["nash"]
        assert nash["holds"] is True and nash["ncp_residual_scaled"] < 1e-8, (seed, fam, nash)


def test_kkt_and_si_definitions(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    rep = verify(inst, solve(inst, "mnw"), sp=False)
    assert rep["kkt"]["holds"] is True and 0 < rep["kkt"]["max_residual"] < 1e-6
    assert set(rep["kkt"]["last_solve"]) >= {"primal_infeasibility", "stationarity"}
    si = rep["sharing_incentive"]
    assert si["definition"] == "tsfer" and si["tsfer"]["holds"] and si["min_si_sat"] == 1.0
    assert verify(inst, solve(inst, "drfh"), sp=False)["sharing_incentive"]["definition"] == "apf"
    assert verify(inst, solve(inst, "drfh"), sp=False, si="tsfer")["sharing_incentive"]["definition"] \
        == "tsfer"


# ---------------------------------------------------------------------- the report and its inputs
def test_report_keys_inputs_and_frame(examples):
    inst = load_instance(examples / "drf-ghodsi.yaml")
    r = solve(inst, "drf")
    rep = verify(inst, r, sp_budget=10)
    assert tuple(rep.to_dict()) == ITEMS
    assert all("holds" in item for item in rep.to_dict().values())
    assert rep["strategy_proof"]["holds"] is True and rep["strategy_proof"]["lies_tried"] == 10
    assert rep.failed() == []
    frame = rep.to_frame()
    assert list(frame["property"]) == list(ITEMS) and frame.loc[0, "holds"] == True  # noqa: E712
    # the same allocation as an array and as a document typed by hand
    as_array = verify(inst, r.x, sp=False)
    as_doc = verify(inst, {"allocation": {"u1": {"s1": 3.0}, "u2": {"s1": 2.0}}}, sp=False)
    for other in (as_array, as_doc):
        assert other["envy_free"] == rep["envy_free"] and other["pareto"]["holds"] is True
    json.loads(rep.to_json())
    import fairalloc

    assert fairalloc.verify(inst, r.x, sp=False).to_dict()["pareto"] == as_array.to_dict()["pareto"]
    with pytest.raises(FairallocError, match="users"):
        verify(inst, {"allocation": {"u9": {"s1": 1.0}}})
    with pytest.raises(FairallocError, match="shape"):
        verify(inst, np.ones((3, 1)))
    with pytest.raises(FairallocError, match="si"):
        verify(inst, r, si="nope")


def test_drf_is_judged_on_its_pool():
    """DRF pools every server and external resource; on one server with a link the pool keeps the
    server's name, and the report still judges the allocation on the pool (where DRF is SI)."""
    inst = Instance.from_arrays(capacity=[[1.0]], demand=[[0.2], [0.5]], external_capacity=[1.0],
                                external_demand=[[0.3], [0.1]])
    r = solve(inst, "drf")
    assert r.servers == ("s1",)
    rep = verify(inst, r, sp=False)
    assert rep["sharing_incentive"]["holds"] and rep["envy_free"]["holds"] and rep["pareto"]["holds"]
    # the same tasks typed by hand, naming no mechanism, are judged on the instance itself, where the
    # [APF] threshold splits the server but not the link: u1's 2 tasks fall short of 5/2
    hand = verify(inst, {"allocation": {u: {"s1": float(t)} for u, t in zip(r.users, r.tasks)}})
    assert hand["feasible"]["holds"] and hand["sharing_incentive"]["holds"] is False
    assert hand["sharing_incentive"]["apf"]["threshold"] == pytest.approx(2.5)


def test_cli_verify_in_process(examples, tmp_path, capsys):
    res = tmp_path / "r.json"
    assert main(["solve", str(examples / "tsfer-placement.yaml"), "-m", "tsf-er", "-p", "variant=paper",
                 "-o", str(res)]) == 0
    capsys.readouterr()
    assert main(["verify", str(examples / "tsfer-placement.yaml"), str(res), "--sp-budget", "6"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert tuple(rep) == ITEMS and rep["pareto"]["domination_factor"] == pytest.approx(1.2)
    assert rep["strategy_proof"]["lies_tried"] == 6
    out = tmp_path / "rep.json"
    assert main(["verify", str(examples / "tsfer-placement.yaml"), str(res), "--no-sp", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "pareto" in err and json.loads(out.read_text())["strategy_proof"]["holds"] is None
    bad = [({"allocation": {"u9": {"s1": 1}}}, "users ['u9']"),
           ({"allocation": {"u1": {"s9": 1}}}, "servers ['s9']"),
           ({"allocation": {"u1": {"s1": "x"}}}, "result.allocation.u1.s1"),
           ({"allocation": {"u1": {"s1": 1}}, "parameters": [1]}, "result.parameters"),
           ({"tasks": {"u1": 1}}, "result.allocation: missing")]
    for k, (doc, words) in enumerate(bad):
        f = tmp_path / f"bad{k}.json"
        f.write_text(json.dumps(doc))
        assert main(["verify", str(examples / "tsfer-placement.yaml"), str(f)]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err


def test_cli_verify_subprocess(cli, examples, tmp_path):
    """As acceptance checks call it: `fairalloc verify INSTANCE RESULT.json` prints the report, exit 0
    whatever the verdicts; a hand-typed result has SP and KKT null."""
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps({"allocation": {"u1": {"s1": 4}, "u2": {"s2": 6}}}))
    p = cli("verify", str(examples / "psdsf-fig1.yaml"), str(hand))
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["strategy_proof"]["holds"] is None and rep["kkt"]["holds"] is None
    assert rep["pareto"]["holds"] is False and rep["envy_free"]["holds"] is True
    assert rep["bottleneck_fair"]["holds"] is False and rep["psdsf_certificate"]["holds"] is False


def test_into_rows_scales_only_the_entries_of_rows_over_by_a_hair():
    from fairalloc.verify.feasibility import into_rows

    inst = Instance.from_arrays(capacity=[[10.0, 10.0], [10.0, 10.0]], demand=[[1.0, 0.0], [0.0, 1.0]],
                                tasks=[np.inf, 4.0])
    x = np.array([[10.0 * (1 + 3e-8), 2.0], [0.0, 4.0 * (1 + 5e-9)]])  # cpu at s1 and u2's limit over
    y, over = into_rows(inst, x)
    assert over == pytest.approx(3e-8, rel=1e-6)
    assert feasibility(inst, y)["max_relative_violation"] == 0.0
    assert y[0, 1] == x[0, 1]  # s2's cpu row is not over: u1's entry there stays
    np.testing.assert_allclose(y, x, rtol=1e-7)
    far = np.array([[10.01, 0.0], [0.0, 1.0]])  # 1e-3 over: left for the status guard to report
    assert into_rows(inst, far)[1] == 0.0 and (into_rows(inst, far)[0] == far).all()
    y, over = into_rows(inst, far, within=np.inf)  # mnw's uncertified point: made feasible at any cost
    assert over == pytest.approx(1e-3) and feasibility(inst, y)["max_relative_violation"] == 0.0
    assert y[1, 1] == far[1, 1]
