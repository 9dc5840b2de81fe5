"""Smoke runs of the [TSFER] §6 benchmarks (``--quick``): they run, and what they write is right."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    return lambda name: importlib.import_module(f"benchmarks.{name}")


def test_table3_quick(bench, tmp_path):
    info = bench("tsfer_fluid").run(tmp_path, quick=True)
    assert sorted(info["files"]) == ["tsfer_fluid.csv", "tsfer_fluid.md", "tsfer_fluid.png"]
    df = pd.read_csv(tmp_path / "tsfer_fluid.csv")
    assert len(df) == 6 and (df.status == "optimal").all()  # 1 column × 2 seeds × 3 mechanisms
    # TSF-ER, MNW and CRU are EF and SI with unlimited tasks: at every event of every run
    assert df.min_ef_sat.min() > 1 - 1e-6 and df.min_si_sat.min() > 1 - 1e-6
    assert ((df.mean_jct_factor > 0) & (df.mean_jct_factor <= 1)).all()
    md = (tmp_path / "tsfer_fluid.md").read_text()
    assert "| | paper | 0.608 |" in md and "TSF-ER below CRU" in md
    # the table's cell is the mean over the seeds
    ours = df[df.mechanism == "tsf-er"].mean_jct_factor.mean()
    assert f"**{ours:.3f}**" in md and np.allclose(info["means"]["tsf-er"], [ours])


def test_table4_quick(bench, tmp_path):
    bench("tsfer_indivisible").run(tmp_path, quick=True)
    df = pd.read_csv(tmp_path / "tsfer_indivisible.csv")
    assert len(df) == 6 and (df.status == "optimal").all() and (df.slot == 256).all()
    assert set(df.mechanism) == {"tsf-er-online", "mnw", "cru"}
    md = (tmp_path / "tsfer_indivisible.md").read_text()
    assert "| | slot | 256 s |" in md and "| | paper | 0.904 |" in md


def test_cluster_quick(bench, tmp_path):
    info = bench("tsfer_cluster").run(tmp_path, quick=True)
    df = pd.read_csv(tmp_path / "tsfer_cluster.csv")
    assert len(df) == 6 and (df.status == "optimal").all()
    assert (df.max_overuse <= 1e-9).all()  # no server or link ever over-allocated
    assert (df.solves[df.mechanism == "tsf-er-online"] == 0).all()
    assert (df.solves[df.mechanism != "tsf-er-online"] >= 1).all()
    tl = pd.read_csv(tmp_path / "tsfer_cluster_timeline.csv")
    assert set(tl.mechanism) == {"tsf-er-online", "mnw", "cru"} and (tl.end - tl.start <= 3600).all()
    assert set(info["utilization_below_tsfer"]["moderate"]) == {"mnw", "cru"}
    assert (tmp_path / "tsfer_cluster.png").stat().st_size > 10_000
