"""Mechanisms in user code (issue 15): the public decorator, --import on the commands, entry points,
a strategy-proofness search that survives a mechanism rejecting a lie, batch and atlas on user code."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import fairalloc
from fairalloc import registry
from fairalloc.errors import ParameterError
from fairalloc.modelling import allocation, leximin_model, progressive_filling

from conftest import ROOT

USER = str(ROOT / "examples" / "user_mechanism.py")
FIG1, FIG2 = str(ROOT / "examples" / "psdsf-fig1.yaml"), str(ROOT / "examples" / "psdsf-fig2.yaml")


@pytest.fixture
def scratch_registry():
    """Mechanisms registered inside a test are forgotten after it — except shipped ones whose module the
    test imported for the first time: that module stays imported, so forgetting them would lose them for
    the rest of the process (seen as "unknown mechanism 'drf'" in later tests of the same worker)."""
    before = dict(registry._REGISTRY)
    yield
    shipped = {k: m for k, m in registry._REGISTRY.items()
               if k not in before and m.module.startswith("fairalloc.")}
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)
    registry._REGISTRY.update(shipped)


def _fragile(inst, session):
    """leximin of X/φ that assumes every user may run on s1 (a KeyError otherwise)"""
    m = leximin_model(inst, 1.0 / inst.weight, "fragile")
    for u in inst.users:
        m.chi.x[u, "s1"]  # a KeyError when a lie drops s1
    mm = progressive_filling(m, session, m.share)
    return fairalloc.Solution(allocation(m.chi, inst), mm.status, mm.message)


def test_decorator_needs_no_reference_and_takes_the_docstring(scratch_registry):
    fairalloc.mechanism("test-fragile")(_fragile)
    mech = registry.get_mechanism("test-fragile")
    assert mech.reference == "" and mech.problem == "lp"
    assert mech.summary == "leximin of X/φ that assumes every user may run on s1 (a KeyError otherwise)"
    r = fairalloc.solve(FIG1, "test-fragile")
    assert r.ok and r.mechanism == "test-fragile"
    with pytest.raises(RuntimeError, match="registered twice"):
        def other(inst, session):
            """x"""
        fairalloc.mechanism("drfh")(other)


def test_sp_search_counts_rejected_lies_as_failed(scratch_registry, capsys):
    from fairalloc.verify.strategy import strategy_proof

    fairalloc.mechanism("test-fragile")(_fragile)
    r = fairalloc.solve(FIG1, "test-fragile")
    item = strategy_proof(fairalloc.load_instance(FIG1), r, budget=100, progress=True)
    assert item["lies_failed"] >= 1 and item["lies_evaluated"] >= 20
    assert item["lies_tried"] == item["lies_evaluated"] + item["lies_failed"]
    assert item["holds"] is not None
    assert any("KeyError" in f["reason"] and "cannot run on s1" in f["lie"] for f in item["failures"])
    assert f"{item['lies_tried']} lie(s) tried" in item["summary"]
    assert f"{item['lies_failed']} failed" in item["summary"]
    assert "SP search (test-fragile)" in capsys.readouterr().err  # the progress bar, on stderr
    rep = fairalloc.verify(FIG1, r, sp_budget=100)  # the whole report too: no crash
    assert rep["strategy_proof"]["lies_failed"] == item["lies_failed"]


def test_sp_search_with_only_failing_lies_is_inconclusive(scratch_registry):
    from fairalloc.verify.strategy import strategy_proof

    calls = []

    @fairalloc.mechanism("test-refuses-lies")
    def refuse(inst, session):
        """accepts only the first instance it sees"""
        calls.append(inst)
        if len(calls) > 1:
            raise ValueError("not this one")
        return fairalloc.Solution(np.zeros((inst.n_users, inst.n_servers)), fairalloc.Status.OPTIMAL)

    r = fairalloc.solve(FIG1, "test-refuses-lies")
    item = strategy_proof(fairalloc.load_instance(FIG1), r, budget=5)
    assert item["holds"] is None and item["lies_failed"] == 5 and item["lies_evaluated"] == 0
    assert "5 lie(s) tried: 0 evaluated, 5 failed" in item["summary"]


def test_unknown_mechanism_points_at_import():
    with pytest.raises(ParameterError, match=r"--import FILE\.py"):
        registry.get_mechanism("no-such-mechanism")


def test_cli_import_on_every_command(cli, tmp_path):
    out = tmp_path / "r.json"
    p = cli("solve", FIG2, "-m", "best-server-share", "--import", USER, "-o", str(out))
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(list(json.loads(out.read_text())["tasks"].values()), [3.6, 3.6, 8, 8],
                               rtol=1e-7)
    p = cli("verify", FIG2, str(out), "--import", USER, "--sp-budget", "6", "-o", str(tmp_path / "v.json"))
    assert p.returncode == 0, p.stderr
    assert "strategy-proofness search: 6 lie(s) tried: 6 evaluated, 0 failed" in p.stderr
    p = cli("show", FIG2, "-m", "best-server-share", "--import", USER)
    assert p.returncode == 0 and "X_n / (phi_n max_i gamma[n,i])" in p.stdout
    p = cli("mechanisms", "--import", USER)
    line = next(x for x in p.stdout.splitlines() if x.startswith("best-server-share"))
    assert "weighted lexicographic max-min of X_n" in line and "[]" not in line
    for cmd in ("simulate", "batch"):
        assert "--import" in cli(cmd, "--help").stdout
    p = cli("solve", FIG2, "-m", "best-server-share")
    assert p.returncode == 2 and "--import FILE.py" in p.stderr
    p = cli("solve", FIG2, "-m", "drfh", "--import", str(tmp_path / "missing.py"))
    assert p.returncode == 2 and "no such Python file" in p.stderr


def test_cli_customize(cli, tmp_path):
    hooks = tmp_path / "edits.py"
    hooks.write_text('def cap(model, instance):\n    model.chi.x["u2", "s1"].setub(0.2)\n')
    out = tmp_path / "r.json"
    p = cli("solve", FIG1, "-m", "drfh", "--customize", f"{hooks}:cap", "-o", str(out))
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(list(json.loads(out.read_text())["tasks"].values()), [5.8, 6.2], rtol=1e-7)
    p = cli("verify", FIG1, str(out), "--customize", f"{hooks}:cap", "--sp-budget", "40",
            "-o", str(tmp_path / "v.json"))
    assert p.returncode == 0, p.stderr
    sp = json.loads((tmp_path / "v.json").read_text())["strategy_proof"]
    assert sp["lies_failed"] >= 1  # the lie "u2 cannot run on s1" leaves the hook nothing to cap
    p = cli("solve", FIG1, "-m", "drfh", "--customize", f"{hooks}:nope")
    assert p.returncode == 2 and "has no function 'nope'" in p.stderr
    p = cli("solve", FIG1, "-m", "drfh", "--customize", "nocolon")
    assert p.returncode == 2 and "FILE.py:FUNCTION" in p.stderr


class _EntryPoint:
    def __init__(self, name, value, load):
        self.name, self.value, self.load = name, value, load


def test_entry_points_register_lazily(scratch_registry, monkeypatch, caplog):
    loaded = []

    def load_good():
        loaded.append("good")
        fairalloc.mechanism("test-from-plugin")(_fragile)

    def load_bad():
        raise ImportError("broken plugin")

    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", set())
    monkeypatch.setattr(registry, "_entry_points", lambda: [
        _EntryPoint("test-from-plugin", "pkg.good", load_good), _EntryPoint("test-bad", "pkg.bad", load_bad)])
    assert registry.get_mechanism("drfh").name == "drfh" and not loaded  # known names load nothing
    assert registry.get_mechanism("test-from-plugin").module == __name__ and loaded == ["good"]
    with pytest.raises(ParameterError, match=r"plugin 'pkg\.bad'.*broken plugin"):
        registry.get_mechanism("test-bad")
    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", set())
    names = [m.name for m in registry.all_mechanisms()]  # a broken plugin is logged, not fatal
    assert "test-from-plugin" in names and "broken plugin" in caplog.text


def test_hook_references(tmp_path):
    from fairalloc.registry import hook_reference, load_hook

    f = tmp_path / "hooks.py"
    f.write_text("def cap(model, instance):\n    pass\n")
    hook = load_hook(f"{f}:cap")
    assert hook_reference(hook) == f"{f.resolve()}:cap"
    assert hook_reference("fairalloc.registry:as_float") == "fairalloc.registry:as_float"
    with pytest.raises(ParameterError, match="module-level function"):
        hook_reference(lambda m, i: None)


def test_batch_runs_user_mechanisms_with_customize(tmp_path):
    from fairalloc.batch import BatchError, run

    hooks = tmp_path / "edits.py"
    hooks.write_text(textwrap.dedent('''
        def cap(model, instance):
            if ("u2", "s1") in model.chi.x:
                model.chi.x["u2", "s1"].setub(0.2)
    '''))
    df = run([FIG1], ["drfh", "best-server-share"], imports=[USER], customize=f"{hooks}:cap", workers=1,
             progress=False)
    assert df.ok.all(), df.message.tolist()
    tasks = {m: json.loads(t) if isinstance(t, str) else t for m, t in zip(df.mechanism, df.tasks)}
    np.testing.assert_allclose(list(tasks["drfh"].values()), [5.8, 6.2], rtol=1e-7)
    plain = run([FIG1], ["drfh"], workers=1, progress=False)
    assert plain.key[0] not in set(df.key)  # a customized task has its own key
    with pytest.raises(BatchError, match="module-level function"):
        run([FIG1], ["drfh"], customize=lambda m, i: None, workers=1, progress=False)


def test_atlas_takes_user_mechanisms_and_survives_their_errors(scratch_registry):
    from fairalloc.verify.atlas import AtlasConfig, run_atlas

    fairalloc.mechanism("test-fragile")(_fragile)
    cfg = AtlasConfig(instances=2, sp_instances=1, sp_budget=4, families=("placement",),
                      subjects=("test-fragile", "best-server-share"), imports=(USER,),
                      properties=("envy_free", "strategy_proof"))
    res = run_atlas(cfg, progress=False)
    assert set(res.checks.subject) <= {"test-fragile", "best-server-share"}
    assert (res.checks.subject == "best-server-share").sum() == 3  # EF on 2, SP on the first
    assert any(k[0] == "test-fragile" and "KeyError" in v for k, v in res.unsupported.items())
    with pytest.raises(KeyError, match="no atlas subject"):
        run_atlas(AtlasConfig(subjects=("no-such-thing",)), progress=False)


def test_catalogue_is_fresh_and_matches_the_models():
    """``fairalloc mechanisms`` lists the shipped mechanisms from fairalloc/_catalogue.py; regenerate it
    with ``python -m fairalloc.registry`` after changing a mechanism's name, summary or parameters."""
    shipped = registry._catalogue()
    assert shipped is not None, "fairalloc/_catalogue.py is stale: run python -m fairalloc.registry"
    live = [registry.describe(m) for m in registry.all_mechanisms() if m.module.startswith("fairalloc.")]
    assert shipped == live


def test_start_up_imports_nothing_heavy():
    """--help and the listing of mechanisms import neither Pyomo nor pandas nor scipy (start-up time)."""
    import subprocess
    import sys

    code = ("import sys\nfrom fairalloc.cli import build_parser\nbuild_parser()\n"
            "from fairalloc.registry import describe_mechanisms\nassert len(describe_mechanisms()) > 10\n"
            "import fairalloc\nassert 'drfh' in fairalloc.mechanisms()\n"
            "heavy = [m for m in ('pyomo', 'pandas', 'scipy') if m in sys.modules]\nprint(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_solve_imports_only_its_mechanism():
    """Solving with one shipped mechanism imports its module, no other mechanism's (each costs start-up
    time: apf-vds's with its NCP module 0.15 s, which ps-dsf imported on every run while it needs it only
    when its sweeps hand over to Newton's method)."""
    import json
    import subprocess
    import sys

    code = ("import json, sys\nfrom fairalloc import solve\nfrom fairalloc.generate import random_instance\n"
            "from fairalloc.registry import describe_mechanisms\n"
            "modules = {d['module'] for d in describe_mechanisms()}\n"
            "assert solve(random_instance(1, 12, 3, 3), 'ps-dsf').ok\n"
            "print(json.dumps(sorted(modules & set(sys.modules))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["fairalloc.models.psdsf"]
