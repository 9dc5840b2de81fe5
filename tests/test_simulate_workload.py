"""Workload files and the seeded generators of [TSFER] §6.2–§6.3; the `fairalloc simulate` command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from fairalloc.simulate import (
    WorkloadError,
    alibaba_workload,
    generate,
    google_workload,
    link_demand,
    load_workload,
    parse_workload,
)

TINY = {"name": "tiny", "resources": ["cpu", "mem"], "external": {"link": 2.0},
        "servers": [{"name": "s1", "capacity": {"cpu": 1, "mem": 1}},
                    {"name": "s2", "capacity": {"cpu": 2, "mem": 1}}],
        "users": [{"name": "a", "arrival": 0, "duration": 60, "tasks": 4,
                   "demand": {"cpu": 0.5, "mem": 0.25, "link": 0.5}},
                  {"name": "b", "arrival": 30, "duration": 20, "tasks": 6,
                   "demand": {"cpu": 0.25, "mem": 0.25, "link": 0.25}, "eligible": ["s2"]}]}


def test_file_round_trip(tmp_path):
    wl = parse_workload(TINY)
    assert wl.arrival.tolist() == [0, 30] and wl.duration.tolist() == [60, 20]
    assert wl.work.tolist() == [240, 120] and wl.instance.eligible[1].tolist() == [False, True]
    for suffix in (".yaml", ".json"):
        back = load_workload(wl.save(tmp_path / f"w{suffix}"))
        assert back.instance == wl.instance
        assert back.arrival.tolist() == wl.arrival.tolist()
        assert back.duration.tolist() == wl.duration.tolist()
    g = google_workload(seed=2, users=4)
    back = load_workload(g.save(tmp_path / "g.yaml"))
    assert back.instance == g.instance and back.info["generator"] == "google"


@pytest.mark.parametrize("change, words", [
    (lambda d: d["users"][0].pop("duration"), "users[a].duration: missing"),
    (lambda d: d["users"][0].update(duration=0), "users[a].duration = 0"),
    (lambda d: d["users"][1].update(arrival=-3), "users[b].arrival = -3"),
    (lambda d: d["users"][1].pop("tasks"), "users[b].tasks: missing"),
    (lambda d: d["users"][1].update(tasks="inf"), "finite number of tasks"),
    (lambda d: d["users"][0]["demand"].update(cpu=-1), "users[a].demand.cpu"),
    (lambda d: d.update(users=[]), "non-empty list"),
])
def test_bad_workloads_name_the_field(change, words):
    doc = json.loads(json.dumps(TINY))
    change(doc)
    with pytest.raises(WorkloadError) as exc:
        parse_workload(doc)
    assert words in str(exc.value)


def test_link_demand_formula():
    """cpu · 2.6 GHz / X / 3.5 bit/s/Hz with X ~ Gamma(4, scale 200): mean X = 800 cycles/bit."""
    cpu = np.full(20000, 0.1)
    mhz = link_demand(cpu, 0)
    X = cpu * 2.6e9 / (mhz * 1e6 * 3.5)
    assert X.mean() == pytest.approx(800, rel=0.02) and X.var() == pytest.approx(4 * 200**2, rel=0.05)
    assert link_demand(cpu, 0, max_link=0.1).max() <= 0.1  # truncated: redrawn above the cap


def test_google_workload():
    wl = google_workload(seed=3, users=15, rho=0.9, bw=1.0)
    inst = wl.instance
    np.testing.assert_allclose(inst.capacity, [[1, 1], [1.9, 0.1], [0.1, 1.9]])
    assert inst.capacity.sum(axis=0).tolist() == pytest.approx([3, 3])
    assert inst.external_capacity.tolist() == [1.0] and wl.n_jobs == 15 and wl.arrival[0] == 0
    assert (inst.external_demand <= 0.5).all()  # every task fits the smallest link on its own
    assert ((wl.tasks >= 1) & (wl.tasks <= 2854) & (wl.tasks == np.round(wl.tasks))).all()
    assert ((wl.duration >= 15) & (wl.duration <= 28 * 86400)).all()
    assert (wl.arrival <= 48 * 3600).all() and (np.diff(wl.arrival) >= 0).all()
    # seeded; the pool is shared: the same job looks the same in two samples
    assert google_workload(seed=3, users=15, rho=0.9, bw=1.0).instance == inst
    other = google_workload(seed=4, users=15, rho=0.9, bw=1.0)
    assert other.instance != inst
    common = set(wl.info["jobs"]) & set(other.info["jobs"])
    if common:
        j = min(common)
        a, b = wl.info["jobs"].index(j), other.info["jobs"].index(j)
        assert wl.instance.all_demand[a].tolist() == other.instance.all_demand[b].tolist()


def test_alibaba_workload():
    wl = alibaba_workload(seed=1, days=1.0)
    inst = wl.instance
    assert inst.n_servers == 20 and inst.resources == ("cpu", "mem", "gpu")
    assert inst.capacity.sum(axis=0).tolist() == [1632, 9728, 82]  # Table 5
    assert inst.external_capacity.tolist() == [1500.0]
    assert 450 < wl.n_jobs < 750 and (wl.arrival < 86400).all()  # ≈ 25 jobs per hour
    assert set(np.unique(inst.demand[:, 0])) <= {1, 2, 4, 6, 8, 12, 16}
    assert (inst.demand[:, 2] == 0).mean() == pytest.approx(0.3, abs=0.08)


def test_generator_parameters():
    assert generate("google", users="10", seed="2").n_jobs == 10
    for kw, words in [({"users": "0"}, "must be > 0"), ({"nope": 1}, "unknown generator parameter"),
                      ({"rho": "x"}, "rho"), ({"rho": "1.5"}, "rho")]:
        with pytest.raises(Exception, match=words) as exc:
            generate("google", **kw)
        assert isinstance(exc.value, WorkloadError | ValueError)
    with pytest.raises(WorkloadError, match="no such file or generator"):
        generate("borg")


# ---------------------------------------------------------------------- the command line
def run_main(capsys, *args):
    """``fairalloc ARGS`` in-process (the subprocess route is covered once below): (code, out, err)."""
    from fairalloc.cli import main

    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_cli_simulate(cli, capsys, tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    p = cli("simulate", str(f), "-m", "tsf-er", "-m", "mnw", "-o", str(out), "--no-progress", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["mechanism"] for r in rows] == ["tsf-er", "mnw"] and rows[0]["model"] == "fluid"
    assert all(r["finished"] == 2 and 0 < r["mean_jct_factor"] <= 1 for r in rows)
    for name in ("summary.csv", "comparison.png", "tsf-er-jobs.csv", "mnw-timeline.csv",
                 "tsf-er-summary.json"):
        assert (out / name).exists()
    code, stdout, _ = run_main(capsys, "simulate", str(f), "-m", "tsf-er-online", "-m", "cru", "--slot",
                               "16", "--no-progress")
    assert code == 0
    assert "indivisible" in stdout and "tsf-er-online" in stdout and "cru" in stdout
    code, _, err = run_main(capsys, "simulate", "google", "-g", "users=3", "-g", "seed=5", "-m", "tsf-er",
                            "--no-progress", "--save-workload", str(tmp_path / "g.json"))
    assert code == 0, err
    assert load_workload(tmp_path / "g.json").n_jobs == 3


def test_cli_bad_input_is_one_line(cli, capsys, tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(yaml.safe_dump(TINY))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**TINY, "users": [{**TINY["users"][0], "duration": -1}]}))
    cases = [(("google", "-m", "nope"), "unknown mechanism"),
             (("borg", "-m", "tsf-er"), "no such file or generator"),
             (("missing.yaml", "-m", "tsf-er"), "no such file or generator"),
             ((str(bad), "-m", "tsf-er"), "users[a].duration = -1"),
             (("google", "-g", "users=x", "-m", "tsf-er"), "users"),
             (("google", "-g", "bogus=1", "-m", "tsf-er"), "unknown generator parameter"),
             ((str(f), "-g", "users=3", "-m", "tsf-er"), "generator parameters need a generator"),
             ((str(f), "-m", "tsf-er-online", "--model", "fluid"), "--model indivisible"),
             ((str(f), "-m", "tsf-er-online", "--slot", "0.1", "--overhead", "1"), "never finish"),
             ((str(f), "-m", "mnw", "-p", "alpha=2"), "no mechanism"),
             ((str(f), "-m", "tsf-er", "-p", "variant=bogus"), "variant")]
    for args, words in cases:
        code, _, err = run_main(capsys, "simulate", *args, "--no-progress")
        assert code == 2, (args, err)
        assert words in err and len(err.strip().splitlines()) == 1, (args, err)
    p = cli("simulate", str(bad), "-m", "tsf-er")  # as a user runs it: one line, exit 2
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "error: users[a].duration = -1: must be a finite number > 0"]


def test_mechanism_listing_and_static_solve(capsys, examples):
    code, out, _ = run_main(capsys, "mechanisms")
    assert code == 0
    assert any(line.split()[0] == "tsf-er-online" for line in out.splitlines() if line.strip())
    code, out, _ = run_main(capsys, "solve", str(examples / "tsfer-fig2.yaml"), "-m", "tsf-er-online")
    assert code == 0
    d = json.loads(out)
    assert d["status"] == "converged" and d["tasks"] == {"u1": 4.0, "u2": 4.0}
