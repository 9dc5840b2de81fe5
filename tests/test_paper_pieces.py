"""The papers' pieces reproduced as benchmarks and shipped examples (docs/benchmarks/papers.md): their
numbers, and the trends the papers state, on small fast cases."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT


def _bench(name: str):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"benchmarks.{name}")


# ---------------------------------------------------------------- [TSFER] Figs. 3-4
# ρ = 0.9, seed 0, 8 jobs of google_workload: time averages of MIN-SI-SAT and of the domination factor.
# Totals of every mechanism here are unique (lexicographic max-min), so these depend on no solver choice.
HET_GOLDEN = {  # subject: (mean MIN-SI-SAT, SI-violated time, mean domination factor)
    "DRF-cpu": (0.5579930794, 1.0, 1.8136532020),
    "TSF-eq": (0.6163781772, 1.0, 1.6697645342),
    "DRF-ER": (0.9727198060, 0.1753393558, 1.0),
    "TSF-ER": (1.0, 0.0, 1.0),
}


@pytest.mark.parametrize("subject", sorted(HET_GOLDEN))
def test_tsfer_heterogeneity_numbers(subject):
    mod = _bench("tsfer_heterogeneity")
    r = mod.simulate_one(0.9, 0, 8, subject)
    assert r["status"] == "optimal"
    si, viol, dom = HET_GOLDEN[subject]
    assert r["min_si_sat"] == pytest.approx(si, rel=1e-6)
    assert r["si_violated_time"] == pytest.approx(viol, rel=1e-6, abs=1e-9)
    assert r["domination_factor"] == pytest.approx(dom, rel=1e-6)


def test_tsfer_heterogeneity_published_trends():
    """The published run shows the paper's Figs. 3-4 trends, and TSF-ER is SI and PO at every event."""
    mod = _bench("tsfer_heterogeneity")
    df = pd.read_csv(ROOT / "docs" / "benchmarks" / "tsfer_heterogeneity.csv")
    assert (df.status == "optimal").all()
    tr = mod.trends(mod.summary(df))
    for lab in mod.SUBJECTS:
        if lab == "TSF-ER":
            continue
        assert tr[lab]["si_falls"] and tr[lab]["violation_rises"], lab
        if lab != "DRF-ER":
            assert tr[lab]["domination_rises"], lab
    ctrl = df[df.subject == "TSF-ER"]
    assert ctrl.min_si_sat.min() >= 1 - 1e-9 and ctrl.max_domination.max() <= 1 + 1e-6


# ---------------------------------------------------------------- [APF] Fig. 1 (both versions), Figs. 2-3
APF_FIG1 = {  # mechanism: X
    "ps-dsf": [2, 6, 8, 8], "drfh": [3, 3, 8, 8], "tsf": [5 / 3, 5, 25 / 3, 25 / 3],
}
C3 = 16 ** (-1 / 3)  # α = 3 on s2: only the CPU row binds; stationarity gives x4/x3 = 16^(-1/3)
APF_FIG1B = {
    "ps-dsf": [2, 6, 32 / 3, 16 / 3], "drfh": [3, 3, 6.4, 6.4],
    "tsf": [64 / 37, 192 / 37, 320 / 37, 256 / 37],
    "apf-vds α=1": [2, 6, 96 / 7, 32 / 7],
    "apf-vds α=3": [2, 6, 8 / (0.25 + C3), 8 * C3 / (0.25 + C3)],
}


def _solve(inst, label):
    from fairalloc import solve

    mech, _, alpha = label.partition(" α=")
    return solve(inst, mech, **({"alpha": float(alpha)} if alpha else {}))


@pytest.mark.parametrize("example, golden", [("apf-fig1", APF_FIG1), ("apf-fig1b", APF_FIG1B)])
def test_apf_fig1_numbers(examples, example, golden):
    """[APF] §2: the allocations the text gives for Fig. 1 and for d4 = [1, 0.5, 0] (Figs. 2-3)."""
    from fairalloc import load_instance

    inst = load_instance(examples / f"{example}.yaml")
    for label, X in golden.items():
        r = _solve(inst, label)
        assert r.ok, (label, r.message)
        assert r.tasks == pytest.approx(X, rel=1e-6), label
        if label != "tsf" or example == "apf-fig1b":  # Fig. 1 TSF: u3/u4 split s1 freely (identical users)
            assert r.x[:2, 1] == pytest.approx([0, 0], abs=1e-7)  # u1, u2 have no bandwidth on s2
        if label.startswith(("ps-dsf", "apf-vds")):
            assert r.x[2:, 0] == pytest.approx([0, 0], abs=1e-6), label  # s1 goes to u1-u2 for every α


def test_apf_fig3_efficiency_fairness_tradeoff(examples):
    """Fig. 3: on s2, α = 1 uses more of both resources than α = 3, which uses more than PS-DSF; as α
    grows the two users' dominant shares (u3: RAM, u4: CPU) approach each other."""
    from fairalloc import load_instance

    inst = load_instance(examples / "apf-fig1b.yaml")
    d = inst.demand[2:, :2]
    used, gap = [], []
    for label in ("apf-vds α=1", "apf-vds α=3", "ps-dsf"):
        x2 = _solve(inst, label).x[2:, 1]
        used.append((x2 @ d) / np.array([8.0, 16.0]))
        gap.append(abs(x2[0] * 1 / 16 - x2[1] * 1 / 8))
    assert np.all(used[0] >= used[1] - 1e-9) and np.all(used[1] >= used[2] - 1e-9)
    assert used[0] == pytest.approx([1, 1]) and gap[0] > gap[1] > gap[2] and gap[2] < 1e-7


@pytest.mark.parametrize("c1, c2, bw, c4", [(1.6, 1, 6.25, 0.5), (0.1, 0.1, 3.75, 0.01)])
def test_apf_fig1_free_demands_do_not_matter(examples, c1, c2, bw, c4):
    """The demands the text leaves open (CPU and bandwidth of u1-u2, u4's CPU in Fig. 1) do not change
    any of the text's allocations within their bounds."""
    from fairalloc import load_instance

    for example, golden in (("apf-fig1", APF_FIG1), ("apf-fig1b", APF_FIG1B)):
        inst = load_instance(examples / f"{example}.yaml")
        dem = inst.demand.copy()
        dem[0, [0, 2]] = c1, bw
        dem[1, [0, 2]] = c2, bw
        if example == "apf-fig1":
            dem[3, 0] = c4
        inst = type(inst).from_arrays(capacity=inst.capacity, demand=dem, users=inst.users,
                                      servers=inst.servers, resources=inst.resources, name=example)
        for label in ("ps-dsf", "drfh", "tsf"):
            assert _solve(inst, label).tasks == pytest.approx(golden[label], rel=1e-6), (example, label)


# ---------------------------------------------------------------- [PSDSF] §IV Example 1 (Fig. 4)
@pytest.mark.parametrize("label, kw", [("ps-dsf", {}), ("ps-dsf", {"algorithm": "paper"}),
                                       ("ps-dsf", {"algorithm": "distributed"}), ("apf-vds", {"alpha": 1})])
def test_psdsf_fig4_wireless_channels(examples, label, kw):
    """Channel 1 to u1, channel 3 to u2, channel 2 halved: 1.5 and 1 Mb/s, with the PS-DSF certificate;
    αPF-VDS gives the same on this time-shared instance ([APF] Thm 5)."""
    from fairalloc import load_instance, solve
    from fairalloc.verify.psdsf import psdsf_certificate

    inst = load_instance(examples / "psdsf-fig4.yaml")
    r = solve(inst, label, **kw)
    assert r.ok, r.message
    assert r.tasks == pytest.approx([1.5, 1.0], rel=1e-7)
    time_share = r.x / np.where(inst.gamma > 0, inst.gamma, 1.0)
    assert time_share == pytest.approx(np.array([[1, 0.5, 0], [0, 0.5, 1]]), abs=1e-7)
    assert psdsf_certificate(inst, r.x)["holds"]


# ---------------------------------------------------------------- [TSFER] Thms 3-4 for a random split
@pytest.mark.parametrize("mech, si, dom", [("drf-alpha", 0.7872642620, 1.5935593076),
                                           ("tsf-alpha", 0.7463778383, 1.5660655457)])
def test_tsfer_random_split_violates_si_and_po(mech, si, dom):
    """Random split 0 (≈ 0.365, 0.078, 0.557): environment 0 is not SI, environment 1 not PO; EF holds."""
    mod = _bench("tsfer_alpha_splits")
    r = mod.search(mech, mod.random_split(0), 2)
    assert (r["si_violated_at"], r["po_violated_at"]) == (0, 1)
    assert r["min_si_sat"] == pytest.approx(si, rel=1e-6)
    assert r["max_domination"] == pytest.approx(dom, rel=1e-6)
    assert r["min_ef_sat"] >= 1 - 1e-6


# ---------------------------------------------------------------- [APF] Lemma 2 / Thm 7
@pytest.mark.parametrize("seed, alpha, premise", [(1, 2.0, True), (0, 2.0, False)])
def test_apf_totals_unique_for_positive_B(seed, alpha, premise):
    """NCP, best-response sweeps and the sweeps on the reversed instance give the same totals (B = 0.5),
    on an instance where Thm 7's premise holds and on one where it does not."""
    r = _bench("apf_uniqueness").check(seed, alpha, with_psmfa=False)
    assert r["ncp_status"] == "optimal" and r["routes"] == 3
    assert r["max_rel_diff"] <= 1e-6 and r["thm7_premise"] is premise
