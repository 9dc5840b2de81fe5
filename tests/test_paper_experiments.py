"""Smoke tests of the paper-experiment benchmarks: their quick runs must show what the papers report where
it truly holds ([PSDSF] §V Fig. 6 on its own four-user instance)."""

from __future__ import annotations

import importlib
import sys

import pandas as pd
import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def churn(tmp_path_factory):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    mod = importlib.import_module("benchmarks.psdsf_churn")
    out = tmp_path_factory.mktemp("psdsf_churn")
    info = mod.run(out, quick=True)
    return mod, out, info


def test_psdsf_churn_writes_its_files(churn):
    _, out, info = churn
    assert sorted(info["files"]) == ["psdsf_churn.csv", "psdsf_churn.md", "psdsf_churn.png"]
    for f in info["files"]:
        assert (out / f).stat().st_size > 0
    frame = pd.read_csv(out / "psdsf_churn.csv")
    assert len(frame) == 4 * 300 and set(frame.mechanism) == {"ps-dsf (distributed)", "ps-dsf", "tsf", "drfh"}


def test_psdsf_uses_class_c_cpu_better_than_tsf_and_drfh(churn):
    # [PSDSF] Fig. 6: PS-DSF gives class C's CPU to the user that uses it best (u3 alone)
    _, _, info = churn
    s = {(r["phase"], r["mechanism"]): r for r in info["summary"]}
    for phase in ("all active", "user 4 away"):
        assert s[phase, "ps-dsf"]["cpu_C"] == pytest.approx(1.0, abs=1e-9)
        for other in ("tsf", "drfh"):
            assert s[phase, "ps-dsf"]["cpu_C"] >= s[phase, other]["cpu_C"] + 0.05
    assert s["all active", "tsf"]["cpu_C"] == pytest.approx(0.805, abs=1e-3)


def test_distributed_psdsf_settles_promptly_after_each_change(churn):
    _, _, info = churn
    settle = info["settling"]
    assert all(v is not None and v <= 5 for v in settle.values()), settle
    tasks = info["table_iv"]["ps-dsf"]
    assert tasks["u3"][2] == pytest.approx(82.5) and tasks["u4"][3] == pytest.approx(27.5)


def _bitbrain():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("benchmarks.apf_bitbrain")


def test_psdsf_lead_depends_on_demand_diversity():
    # docs/benchmarks/papers.md: with similar demand shapes PS-DSF is the most efficient of the three
    # ([APF] Fig. 12); with diverse ones it falls behind and is far from Pareto optimal
    from fairalloc.generate import apf_bitbrain

    bench = _bitbrain()
    similar = apf_bitbrain(1001, 24, 0.25)
    m = {k: bench.measures(similar, bench.allocate(similar, k)[0]) for k in ("ps-dsf", "drfh", "tsf")}
    # about as efficient (the utilization of DRFH and TSF depends on how their tasks are split
    # across servers; with the canonical split PS-DSF is 0.3 % behind on this seed)
    assert m["ps-dsf"]["util_overall"] > 0.99 * max(m["drfh"]["util_overall"], m["tsf"]["util_overall"])
    diverse = apf_bitbrain(0, 24, 1.0)
    m = {k: bench.measures(diverse, bench.allocate(diverse, k)[0]) for k in ("ps-dsf", "drfh", "tsf")}
    assert m["ps-dsf"]["util_overall"] < min(m["drfh"]["util_overall"], m["tsf"]["util_overall"]) - 0.1
    assert m["ps-dsf"]["domination"] > 1.4  # every user could keep its tasks while the total grows 40 %
    for k in ("drfh", "tsf"):  # lexicographic max-min over χ is Pareto optimal
        assert m[k]["domination"] == pytest.approx(1.0, abs=1e-6)
