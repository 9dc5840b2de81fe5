"""Per-user budgets ``Σ_i cost[n,i]·x[n,i] ≤ B[n]``: format, χ rows, mechanisms, verification, errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import fairalloc
from fairalloc.errors import InstanceError
from fairalloc.instance import Instance
from fairalloc.io import load_instance, parse_instance, save_instance
from fairalloc.verify.feasibility import feasibility

ROOT = Path(__file__).resolve().parents[1]
GAVEL = ROOT / "examples" / "gavel-budget.yaml"


def _demand_doc() -> dict:
    return {"resources": ["cpu", "mem"],
            "servers": [{"name": "s1", "capacity": {"cpu": 9, "mem": 12}},
                        {"name": "s2", "capacity": {"cpu": 12, "mem": 12}}],
            "users": [{"name": "u1", "demand": {"cpu": 1, "mem": 2},
                       "budget": {"limit": 2, "cost": {"s1": 0.5, "s2": 1}}},
                      {"name": "u2", "demand": {"cpu": 1, "mem": 1}}]}


def _spent(inst: Instance, x: np.ndarray) -> np.ndarray:
    return (inst.budget_cost * x).sum(axis=1)


def test_parse_arrays_and_roundtrip(tmp_path: Path) -> None:
    inst = parse_instance(_demand_doc())
    assert inst.has_budgets and inst.budgeted.tolist() == [0]
    assert inst.budget_limit[0] == 2 and np.isinf(inst.budget_limit[1])
    assert inst.budget_cost.tolist() == [[0.5, 1.0], [0.0, 0.0]]
    for suffix in (".yaml", ".json", ""):
        p = save_instance(inst, tmp_path / f"b{suffix}")
        assert load_instance(p) == inst, suffix
    assert (tmp_path / "b" / "budgets.csv").exists()
    g = load_instance(GAVEL)
    assert g.time_shared and g.has_budgets and load_instance(save_instance(g, tmp_path / "g")) == g


@pytest.mark.parametrize("mech", ["drfh", "tsf", "tsf-er", "mnw", "cru", "drf-er", "drf-alpha", "tsf-alpha",
                                  "ps-dsf", "apf-vds", "tsf-er-online"])
def test_mechanisms_respect_budgets(mech: str) -> None:
    inst = parse_instance(_demand_doc())
    free = fairalloc.solve(inst.replace(budget_limit=np.full(2, np.inf)), mech)
    res = fairalloc.solve(inst, mech)
    x = res.allocation
    assert _spent(inst, free.allocation)[0] > 2 * (1 + 1e-3)  # the budget binds in this instance
    assert _spent(inst, x)[0] <= 2 * (1 + 1e-6)
    assert feasibility(inst, x)["holds"]


@pytest.mark.parametrize("mech", ["tsf", "tsf-er", "mnw", "ps-dsf", "apf-vds"])
def test_time_shared_budgets(mech: str) -> None:
    inst = load_instance(GAVEL)
    x = fairalloc.solve(inst, mech).allocation
    assert (_spent(inst, x) <= 1 + 1e-6).all()
    assert feasibility(inst, x)["holds"]


def test_verification_reports_budget_violation() -> None:
    inst = parse_instance(_demand_doc())
    x = np.array([[4.0, 0.0], [0.0, 0.0]])  # spends 2.0: on the limit
    assert feasibility(inst, x)["holds"]
    x[0, 1] = 1.0  # spends 3.0 > 2
    rep = feasibility(inst, x)
    assert not rep["holds"] and rep["worst_row"] == "budget[u1]" and rep["max_violation"] == pytest.approx(1)


@pytest.mark.parametrize("mech", ["drf"])
def test_unsupported_mechanisms_refuse(mech: str) -> None:
    inst = parse_instance(_demand_doc())
    with pytest.raises(InstanceError, match=f"'{mech}' does not support budgets"):
        fairalloc.solve(inst, mech)


@pytest.mark.parametrize("mech, params", [("ps-dsf", {"algorithm": "paper"}),
                                          ("ps-dsf", {"algorithm": "distributed"}),
                                          ("apf-vds", {"algorithm": "ps-mfa"}),
                                          ("apf-vds", {"algorithm": "distributed"})])
def test_per_server_array_algorithms_refuse(mech: str, params: dict) -> None:
    with pytest.raises(InstanceError, match=r"budgets \(users u1\) couple the servers.*best-response"):
        fairalloc.solve(parse_instance(_demand_doc()), mech, **params)


def test_tsf_er_online_places_only_affordable_tasks() -> None:
    """u1's budget 2 buys 4 tasks on s1 (0.5 each) or 2 on s2 (1 each): one Reallocation places whole
    tasks and never spends more than 2; a budget below the cheapest task places nothing."""
    inst = parse_instance(_demand_doc())
    x = fairalloc.solve(inst, "tsf-er-online").allocation
    assert _spent(inst, x)[0] <= 2 and (x == np.round(x)).all()
    broke = inst.replace(budget_limit=np.array([0.4, np.inf]))  # cannot afford a single task
    assert fairalloc.solve(broke, "tsf-er-online").allocation[0].sum() == 0


def test_psdsf_budget_is_a_bottleneck() -> None:
    """Best responses from x = 0, s1 first: s1 gives u1 its leximin share up to what the budget allows,
    s2 the rest of the budget. At the fixed point u1 has spent its budget; the budget is its bottleneck
    at both servers (both price its tasks), u2's is memory; the certificate says so."""
    inst = parse_instance(_demand_doc())
    r = fairalloc.solve(inst, "ps-dsf")
    assert r.status.value == "converged", r.message
    assert _spent(inst, r.allocation)[0] == pytest.approx(2, rel=1e-7)
    cert = r.details["certificate"]
    assert cert["holds"] and cert["bottleneck"]["u1"] == {"s1": "budget", "s2": "budget"}
    free = inst.replace(budget_cost=np.array([[0.5, 0.0], [0.0, 0.0]]))  # s2 free for u1
    cert = fairalloc.solve(free, "ps-dsf").details["certificate"]
    assert cert["holds"] and cert["bottleneck"]["u1"]["s2"] != "budget"


def test_apf_vds_budget_equilibrium_is_certified() -> None:
    """αPF-VDS with a budget: newton solves the variational equilibrium (the budget priced the same on
    every server) and the ncp route hands over to best responses; both end points are equilibria of the
    game with the budget (NCP residual in box form, every server's best-response gain ≈ 0)."""
    inst = parse_instance(_demand_doc())
    for alpha, algorithm in ((0.5, "newton"), (1, "newton"), (2, "newton"), (2, "ncp")):
        r = fairalloc.solve(inst, "apf-vds", alpha=alpha, algorithm=algorithm)
        expected = "newton" if algorithm == "newton" else "best-response"
        assert r.ok and r.details["algorithm"] == expected, r.message
        if algorithm == "newton":
            assert r.details["budget_multipliers"]["u1"] > 0
        assert _spent(inst, r.allocation)[0] <= 2 * (1 + 1e-9)
        assert r.details["ncp_residual"] <= 1e-7 and r.details["best_response_gain"] <= 1e-9


@pytest.mark.parametrize("budget, field", [
    ({"limit": -1, "cost": {"s1": 1}}, "users[u1].budget.limit"),
    ({"limit": "nan", "cost": {"s1": 1}}, "users[u1].budget.limit"),
    ({"cost": {"s1": 1}}, "users[u1].budget.limit"),
    ({"limit": 1, "cost": {"s1": -0.5}}, "users[u1].budget.cost.s1"),
    ({"limit": 1, "cost": {"s1": "nan"}}, "users[u1].budget.cost.s1"),
    ({"limit": 1, "cost": {"s1": "inf"}}, "users[u1].budget.cost.s1"),
    ({"limit": 1, "cost": {"s9": 1}}, "users[u1].budget.cost.s9"),
    ({"limit": 1, "cost": {"s1": "x"}}, "users[u1].budget.cost.s1"),
    ({"limit": True}, "users[u1].budget.limit"),
    ({"limit": 1, "cost": [1, 2]}, "users[u1].budget.cost"),
    ({"limit": 1, "price": {}}, "users[u1].budget"),
    (3, "users[u1].budget"),
])
def test_malformed_budget_cli(tmp_path: Path, budget: object, field: str) -> None:
    doc = _demand_doc()
    doc["users"][0]["budget"] = budget
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    r = subprocess.run([sys.executable, "-m", "fairalloc", "solve", str(p), "-m", "drfh"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], r.stderr
    assert r.stdout == ""


def test_array_validation() -> None:
    with pytest.raises(InstanceError, match=r"users\[u1\].budget.cost.s2"):
        Instance.from_arrays(rates=[[1, 2]], budget_limit=[1], budget_cost=[[0, -1]])
    with pytest.raises(InstanceError, match=r"users\[u1\].budget.limit"):
        Instance.from_arrays(rates=[[1, 2]], budget_limit=[np.nan], budget_cost=[[0, 1]])


def test_cli_refuses_unsupported_mechanism(tmp_path: Path) -> None:
    p = tmp_path / "b.yaml"
    p.write_text(yaml.safe_dump(_demand_doc()))
    for cmd in ("solve", "show"):
        r = subprocess.run([sys.executable, "-m", "fairalloc", cmd, str(p), "-m", "drf"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == "", cmd
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "mechanism 'drf' does not support budgets (budgeted users: u1)" in lines[0]
