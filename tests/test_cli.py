"""The command line (docs/cli.md), run as a user runs it."""

from __future__ import annotations

import json

import pytest


def tasks_of(proc):
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_golden_through_the_cli(cli, examples):
    """docs/examples.md (psdsf-fig1 and drf-ghodsi) through `fairalloc solve`."""
    d = tasks_of(cli("solve", str(examples / "psdsf-fig1.yaml"), "-m", "drfh"))
    assert d["status"] == "optimal" and d["mechanism"] == "drfh" and d["instance"] == "psdsf-fig1"
    assert d["tasks"]["u1"] == pytest.approx(60 / 11, abs=1e-6)
    assert d["tasks"]["u2"] == pytest.approx(72 / 11, abs=1e-6)
    t = tasks_of(cli("solve", str(examples / "psdsf-fig1.yaml"), "-m", "tsf"))
    assert [t["tasks"]["u1"], t["tasks"]["u2"]] == pytest.approx([4, 8], abs=1e-6)
    assert t["allocation"]["u2"] == pytest.approx({"s1": 2.0, "s2": 6.0}, abs=1e-6)
    assert "s2" not in t["allocation"]["u1"]  # zero entries omitted
    r = tasks_of(cli("solve", str(examples / "drf-ghodsi.yaml"), "-m", "drf"))
    assert [r["tasks"]["u1"], r["tasks"]["u2"]] == pytest.approx([3, 2], abs=1e-6)
    assert set(d["solver"]) >= {"name", "iterations", "seconds"}


def test_output_file_and_verify(cli, examples, tmp_path):
    out = tmp_path / "r.json"
    p = cli("solve", str(examples / "psdsf-fig2.yaml"), "-m", "tsf", "-o", str(out), "--verify")
    assert p.returncode == 0 and p.stdout == "" and out.exists()
    doc = json.loads(out.read_text())
    assert doc["verification"]["feasible"]["holds"] is True
    rep = cli("verify", str(examples / "psdsf-fig2.yaml"), str(out))
    assert rep.returncode == 0 and json.loads(rep.stdout)["feasible"]["max_violation"] < 1e-9
    # an allocation typed by hand that over-uses s2's memory
    (tmp_path / "hand.json").write_text(json.dumps({"allocation": {"u3": {"s2": 20}}}))
    bad = json.loads(cli("verify", str(examples / "psdsf-fig2.yaml"), str(tmp_path / "hand.json")).stdout)
    assert bad["feasible"]["holds"] is False and bad["feasible"]["worst_row"] == "capacity[s2,mem]"


def test_bad_parameters_and_mechanisms(cli, examples):
    f = str(examples / "psdsf-fig1.yaml")
    for args, words in [(("-m", "nope"), "unknown mechanism"), (("-m", "drfh", "-p", "alpha=2"),
                                                                 "unknown parameter 'alpha'"),
                        (("-m", "drfh", "-p", "alpha"), "expected key=value"),
                        (("-m", "drfh", "--solver", "cplex"), "unknown solver"),
                        (("-m", "drfh", "--solver-option", "bogus_option=1"), "bogus_option")]:
        p = cli("solve", f, *args)
        assert p.returncode == 2, p.stderr
        assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = cli("solve", str(examples / "psdsf-table3.yaml"), "-m", "drfh")
    assert p.returncode == 2 and "time-shared" in p.stderr
    # a solver applies to the problem classes it takes; the others keep their defaults
    p = cli("solve", f, "-m", "drfh", "--solver", "ipopt")
    assert p.returncode == 0 and json.loads(p.stdout)["solver"]["name"] == "highs", p.stderr


def test_verbose_and_debug_after_the_command(cli, examples):
    f = str(examples / "psdsf-fig1.yaml")
    p = cli("solve", f, "-m", "drfh", "-v", "--debug")
    assert p.returncode == 0 and "INFO fairalloc" in p.stderr and json.loads(p.stdout)["status"] == "optimal"
    q = cli("-v", "solve", f, "-m", "drfh")
    assert q.returncode == 0 and "INFO fairalloc" in q.stderr
    r = cli("solve", f, "-m", "drfh")
    assert "INFO" not in r.stderr and "HiGHS" not in r.stderr  # solver banners only with -v


def test_status_exit_code(cli, examples):
    p = cli("solve", str(examples / "psdsf-fig2.yaml"), "-m", "drfh", "--solver", "highs-simplex",
            "--solver-option", "simplex_iteration_limit=0")
    assert p.returncode == 1
    d = json.loads(p.stdout)
    assert d["status"] == "iteration_limit"


def test_listings_and_show(cli, examples, tmp_path):
    m = cli("mechanisms")
    assert m.returncode == 0
    for name in ("drf", "drfh", "tsf", "utilitarian", "relative-utilitarian"):
        assert any(line.split()[0] == name for line in m.stdout.splitlines() if line.strip())
    s = cli("solvers")
    assert s.returncode == 0 and "Ipopt route in use: ipopt-" in s.stdout and "highs" in s.stdout
    show = cli("show", str(examples / "psdsf-fig1.yaml"), "-m", "drfh")
    assert show.returncode == 0 and "capacity" in show.stdout and "level" in show.stdout
    lp = tmp_path / "m.lp"
    w = cli("show", str(examples / "psdsf-fig1.yaml"), "-m", "tsf", "--write", str(lp))
    assert w.returncode == 0 and "max" in lp.read_text() and "maxmin_t" in lp.read_text()


def test_every_model_shows_with_its_default_parameters(cli, examples, tmp_path):
    """`show` passes every parameter of the mechanism to its `build`; mnw's took only `form` and
    `show -m mnw` ended in an internal error (exit 3). Each build takes its defaults, and mnw's NLP
    is written as an NL file."""
    import fairalloc
    from fairalloc.errors import FairallocError
    from fairalloc.io import load_instance
    from fairalloc.registry import get_mechanism

    inst = load_instance(examples / "tsfer-fig2.yaml")
    shown = 0
    for name in fairalloc.mechanisms():
        mech = get_mechanism(name)
        if mech.build is None:
            continue
        try:
            model = mech.build(inst, **mech.parse_params({}))
        except FairallocError:  # a mechanism that does not take this instance says so (exit 2)
            continue
        assert model.nobjectives() >= 1, name
        shown += 1
    assert shown >= 10
    nl = tmp_path / "mnw.nl"
    w = cli("show", str(examples / "tsfer-fig2.yaml"), "-m", "mnw", "--write", str(nl))
    assert w.returncode == 0, w.stderr
    assert nl.read_text().startswith("g")


def test_help_shows_the_real_signature():
    import inspect

    import fairalloc

    params = inspect.signature(fairalloc.solve).parameters
    assert list(params)[:2] == ["instance", "mechanism"] and "time_limit" in params
