"""Batch solving (issue 7): isolation, error rows, interruption and resume, backends.

The instance set: [PSDSF] Fig. 1 (golden numbers of docs/examples.md#psdsf-fig1), seven random 100×12
instances as YAML,
one as a CSV directory, and one malformed file — 10 instances × drfh, tsf, utilitarian = 30 tasks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairalloc.batch import BatchError, plan, read_results, run, tasks_frame
from fairalloc.batch.journal import Journal, journal_path
from fairalloc.errors import ParameterError

from conftest import EXAMPLES, ROOT

MECHS = ["drfh", "tsf", "utilitarian"]
BAD = "name: bad\nresources: [cpu]\nservers:\n  - {name: s1, capacity: {cpu: -1}}\nusers:\n" \
      "  - {name: u1, demand: {cpu: 1}}\n"


@pytest.fixture(scope="module")
def instances(tmp_path_factory) -> Path:
    from fairalloc.generate import random_instance
    from fairalloc.io import save_instance

    d = tmp_path_factory.mktemp("instances").resolve()
    shutil.copy(EXAMPLES / "psdsf-fig1.yaml", d / "psdsf-fig1.yaml")
    for seed in range(1, 8):
        save_instance(random_instance(seed, 100, 12, 3, placement=seed % 2 == 0, name=f"r{seed}"),
                      d / f"r{seed}.yaml")
    save_instance(random_instance(8, 100, 12, 3, name="r8"), d / "r8-csv")
    (d / "bad.yaml").write_text(BAD)
    (d / "notes.txt").write_text("not an instance: the directory scan ignores it\n")
    return d


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fairalloc", "batch", *args, "--no-progress"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore"}


def _journal_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while len(_journal_lines(path)) < n:
        assert proc.poll() is None, f"batch ended early: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() - t0 < timeout, "batch made no progress"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # zombies are dead
    except (FileNotFoundError, ProcessLookupError):
        return False


def _check_complete(df: pd.DataFrame, instances: Path) -> None:
    """30 distinct rows; the malformed instance as 3 error rows; the rest solved, feasible, right."""
    from fairalloc.api import solve

    assert len(df) == 30 and df["key"].is_unique
    assert len(set(zip(df["instance"], df["mechanism"]))) == 30
    bad = df[df["instance"].str.endswith("bad.yaml")]
    assert sorted(bad["mechanism"]) == sorted(MECHS)
    assert (bad["status"] == "error").all() and not bad["ok"].any()
    assert bad["message"].str.contains(r"servers\[s1\]\.capacity\.cpu = -1").all()
    good = df.drop(bad.index)
    assert (good["status"] == "optimal").all() and good["ok"].all(), good[["instance", "message"]]
    assert good["feasible"].all() and (good["max_violation"] <= 1e-6).all()
    assert (good["n_users"] == np.where(good["instance"].str.contains("fig1"), 2, 100)).all()
    tasks = {(r.instance.split("/")[-1], r.mechanism): json.loads(r.tasks) for r in good.itertuples()}
    # golden numbers, docs/examples.md#psdsf-fig1
    np.testing.assert_allclose(list(tasks["psdsf-fig1.yaml", "drfh"].values()), [60 / 11, 72 / 11],
                               rtol=1e-9)
    np.testing.assert_allclose(list(tasks["psdsf-fig1.yaml", "tsf"].values()), [4, 8], rtol=1e-9)
    # a worker's numbers are the in-process numbers (here on the CSV-directory instance)
    for m in MECHS:
        ref = solve(instances / "r8-csv", m)
        assert list(tasks["r8-csv", m]) == list(ref.users)
        np.testing.assert_allclose(list(tasks["r8-csv", m].values()), ref.tasks, rtol=1e-7, atol=1e-9)
        assert good.set_index(["instance", "mechanism"]).loc[
            (str(instances / "r8-csv"), m), "sum_tasks"] == pytest.approx(ref.tasks.sum(), rel=1e-7)


# ---------------------------------------------------------------------- the must-shows
def test_ten_instances_three_mechanisms(instances, tmp_path):
    out = tmp_path / "res.csv"
    df = run([instances], MECHS, out=out, json_dir=tmp_path / "json", workers=2, progress=False)
    _check_complete(df, instances)
    summary = df.attrs["summary"]
    assert (summary["tasks"], summary["ran"], summary["solved"], summary["failed"]) == (30, 30, 27, 3)
    # the file is the table, and the journal agrees with it
    back = read_results(out)
    assert list(back["key"]) == list(df["key"]) and list(back["status"]) == list(df["status"])
    assert back["n_users"].dtype == "Int64"
    assert len(_journal_lines(journal_path(out))) == 30
    # one JSON per task, each consistent with its row
    files = sorted((tmp_path / "json").glob("*.json"))
    assert len(files) == 30
    row = df[(df["mechanism"] == "tsf") & df["instance"].str.endswith("psdsf-fig1.yaml")].iloc[0]
    doc = json.loads(next(f for f in files if row["key"] in f.name).read_text())
    assert doc["tasks"] == json.loads(row["tasks"]) and doc["batch"]["key"] == row["key"]
    assert doc["allocation"].keys() == {"u1", "u2"}
    assert doc["allocation"]["u1"] == pytest.approx({"s1": 4.0})
    assert doc["allocation"]["u2"] == pytest.approx({"s1": 2.0, "s2": 6.0})
    # every solved row and its document record the versions the numbers came from
    from importlib.metadata import version

    assert json.loads(row["versions"]) == doc["solver"]["versions"]
    assert doc["solver"]["versions"]["highspy"] == version("highspy")
    assert all(json.loads(v)["pyomo"] for v in df.loc[df["ok"], "versions"])
    long = tasks_frame(df)
    assert len(long) == int(df.loc[df["ok"], "n_users"].sum())


def test_interrupt_then_resume(instances, tmp_path):
    """Ctrl-C (SIGINT to the process group), then SIGKILL of the parent, then a torn journal line:
    a final --resume gives exactly the 30 rows, none duplicated, none rerun."""
    out = tmp_path / "res.csv"
    journal = journal_path(out)
    cmd = _cmd(str(instances), *[a for m in MECHS for a in ("-m", m)], "-o", str(out))
    proc = subprocess.Popen([*cmd, "--workers", "2"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for_lines(journal, 3, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "interrupted" in err
    first = [json.loads(s) for s in _journal_lines(journal)]
    assert 3 <= len(first) < 30
    table = pd.read_csv(out)  # written on the way out, complete rows only
    assert len(table) == len(first) and table["key"].is_unique

    proc = subprocess.Popen([*cmd, "--resume", "--workers", "1"], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_lines(journal, len(first) + 3, proc)
    proc.kill()  # SIGKILL of the parent: no cleanup at all
    proc.communicate(timeout=60)
    second = [json.loads(s) for s in _journal_lines(journal)]
    assert len(first) < len(second) < 30
    # the workers die with their parent
    pids = {int(r["worker"].rsplit(":", 1)[1]) for r in second[len(first):]}
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = {p for p in pids if _alive(p)}
        time.sleep(0.05)
    assert not pids, f"orphaned workers {pids}"
    with open(journal, "ab") as fh:  # what a kill in the middle of a write could leave
        fh.write(b'{"key": "0123456789abcdef", "status": "opti')

    # the same resume through the Python API (the CLI's --resume ran above, before the SIGKILL)
    df = run([instances], MECHS, out=out, resume=True, workers=2, progress=False)
    assert df.attrs["summary"]["skipped"] == len(second)
    assert df.attrs["summary"]["ran"] == 30 - len(second)
    final = [json.loads(s) for s in _journal_lines(journal)]  # every line parses: the torn one is gone
    assert len(final) == 30 and len({r["key"] for r in final}) == 30
    assert final[: len(second)] == second  # nothing recorded before was rerun or rewritten
    back = read_results(out)
    assert list(back["key"]) == list(df["key"]) and back["key"].is_unique
    _check_complete(back, instances)


def test_time_limit_and_missing_instance_rows(instances, tmp_path):
    """A tiny per-task time limit gives time_limit rows (the solver's own limit), not numbers; an
    instance a manifest names but that does not exist is an error row."""
    (tmp_path / "m.csv").write_text("instance,mechanism\nmissing.yaml,drfh\n")
    df = run([instances / "r1.yaml", tmp_path / "m.csv"], ["drfh", "tsf"], time_limit=1e-3, workers=1,
             progress=False).set_index(["instance", "mechanism"])
    assert len(df) == 3
    limited = df.loc[str(instances / "r1.yaml")]
    assert (limited["status"] == "time_limit").all() and not limited["ok"].any()
    assert limited["message"].str.contains("time limit").all() and (limited["time_limit"] == 1e-3).all()
    missing = df.loc[(str(tmp_path / "missing.yaml"), "drfh")]
    assert missing["status"] == "error" and "no such file or directory" in missing["message"]


PLUGIN = '''
import os, signal, time
import numpy as np
from fairalloc.registry import Solution, mechanism
from fairalloc.status import Status

@mechanism("sleepy", summary="test: ignores its time limit", problem="lp", reference="test")
def sleepy(inst, session, **_):
    time.sleep(600)
    return Solution(np.zeros((inst.n_users, inst.n_servers)), Status.OPTIMAL)

@mechanism("crashy", summary="test: dies of a segmentation fault", problem="lp", reference="test")
def crashy(inst, session, **_):
    os.kill(os.getpid(), signal.SIGSEGV)
'''


def test_hard_limit_and_crash_are_rows(tmp_path):
    """A task that crashes its worker process is an error row, and a new worker goes on with the
    rest; a task that ignores its time limit is killed at the hard limit."""
    (tmp_path / "plugin.py").write_text(PLUGIN)
    out = tmp_path / "res.csv"
    proc = subprocess.run(_cmd(str(EXAMPLES / "psdsf-fig1.yaml"), "-m", "crashy", "-m", "drfh",
                               "-m", "tsf", "-m", "sleepy", "--import", "plugin.py",
                               "--hard-limit", "1.5", "--workers", "1", "-o", str(out)),
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    df = read_results(out).set_index("mechanism")
    assert df.loc["sleepy", "status"] == "time_limit"
    assert "hard wall-clock limit (1.5 s)" in df.loc["sleepy", "message"]
    assert df.loc["crashy", "status"] == "error"
    assert "died (signal SIGSEGV)" in df.loc["crashy", "message"]
    assert df.loc[["drfh", "tsf"], "ok"].all()
    assert json.loads(df.loc["tsf", "tasks"]) == {"u1": 4.0, "u2": 8.0}
    assert "4 task(s): 4 ran (2 solved, 2 failed: error 1, time_limit 1)" in proc.stderr


def test_dask_local_cluster(tmp_path):
    """The Dask backend runs the same tasks through the same driver (parquet output here)."""
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("pyarrow")
    (tmp_path / "bad.yaml").write_text(BAD)
    paths = [EXAMPLES / "psdsf-fig1.yaml", EXAMPLES / "tsfer-fig2.yaml", tmp_path / "bad.yaml"]
    out = tmp_path / "res.parquet"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        df = run(paths, ["drfh", "tsf"], client=c, out=out, progress=False)
    assert df.attrs["summary"]["backend"].startswith("dask")
    assert len(df) == 6 and sorted(df["status"]) == ["error"] * 2 + ["optimal"] * 4
    got = {(Path(r.instance).stem, r.mechanism): list(json.loads(r.tasks).values())
           for r in df.itertuples() if r.ok}
    np.testing.assert_allclose(got["psdsf-fig1", "drfh"], [60 / 11, 72 / 11], rtol=1e-9)
    np.testing.assert_allclose(got["psdsf-fig1", "tsf"], [4, 8], rtol=1e-9)
    assert list(read_results(out)["key"]) == list(df["key"])


# ---------------------------------------------------------------------- planning and the journal
def test_discovery_manifest_and_sweeps(instances, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tasks = plan([instances], ["drfh"], exclude=[instances / "bad.yaml"])
    names = [Path(t.instance).name for t in tasks]
    assert names == sorted(names) and "r8-csv" in names and len(names) == 9  # bad excluded, txt ignored
    assert len(plan([str(instances / "r*.yaml")], ["drfh"])) == 7
    assert len(plan([instances / "r8-csv"], ["drfh"])) == 1  # a CSV directory is one instance
    # sweeps: each mechanism gets the parameters it declares; mnw form=log is mnw's default
    sets = [{"form": "log"}, {"form": "epigraph"}]
    tasks = plan([EXAMPLES / "psdsf-fig1.yaml"], ["mnw", "drfh"], sets)
    assert sorted((t.mechanism, json.dumps(t.given)) for t in tasks) == [
        ("drfh", "{}"), ("mnw", '{"form": "epigraph"}'), ("mnw", '{"form": "log"}')]
    key_default = plan([EXAMPLES / "psdsf-fig1.yaml"], ["mnw"])[0].key
    assert key_default in {t.key for t in tasks}  # spelling out a default gives the same task
    with pytest.raises(ParameterError, match="none of the mechanisms drfh takes parameter 'form'"):
        plan([EXAMPLES / "psdsf-fig1.yaml"], ["drfh"], [{"form": "log"}])
    with pytest.raises(ParameterError, match="unknown mechanism"):
        plan([EXAMPLES / "psdsf-fig1.yaml"], ["nope"])
    with pytest.raises(BatchError, match="matches nothing"):
        plan([str(tmp_path / "*.yaml")], ["drfh"])
    # a manifest: paths relative to it, empty cells from the command line, both params spellings
    (tmp_path / "m.csv").write_text(
        "instance,mechanism,params\n"
        f"{os.path.relpath(EXAMPLES / 'psdsf-fig1.yaml', tmp_path)},mnw,form=epigraph\n"
        f"{EXAMPLES / 'tsfer-fig2.yaml'},,\n"
        f"{EXAMPLES / 'tsfer-fig2.yaml'},mnw,\"{{\"\"form\"\": \"\"log\"\"}}\"\n"
        "missing.yaml,drfh,\n")
    tasks = plan([tmp_path / "m.csv"], ["tsf"])
    assert [(Path(t.instance).name, t.mechanism, t.given) for t in tasks] == [
        ("psdsf-fig1.yaml", "mnw", {"form": "epigraph"}), ("tsfer-fig2.yaml", "tsf", {}),
        ("tsfer-fig2.yaml", "mnw", {"form": "log"}), ("missing.yaml", "drfh", {})]
    (tmp_path / "m2.csv").write_text("instance,mechanism,params\nx.yaml,mnw,alpha=3\n")
    with pytest.raises(ParameterError, match=r"m2\.csv row 2: mnw: unknown parameter 'alpha'"):
        plan([tmp_path / "m2.csv"], [])


def test_journal_is_append_only_and_torn_tail_safe(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    assert j.open(fresh=False) == {}
    j.append({"key": "a", "status": "optimal", "ok": True})
    with pytest.raises(BatchError, match="another batch is writing"):
        Journal(path).open(fresh=False)
    j.close()
    with open(path, "ab") as fh:
        fh.write(b'{"key": "b", "sta')  # torn by a kill
    j = Journal(path)
    assert list(j.open(fresh=False)) == ["a"]
    j.append({"key": "c", "status": "error", "ok": False})
    j.close()
    assert [json.loads(s)["key"] for s in path.read_bytes().splitlines()] == ["a", "c"]


def test_existing_results_need_resume_or_overwrite(tmp_path):
    out = tmp_path / "res.csv"
    journal_path(out).write_text("")
    with pytest.raises(BatchError, match="already exist; pass --resume"):
        run([EXAMPLES / "psdsf-fig1.yaml"], ["drfh"], out=out, progress=False)
    with pytest.raises(BatchError, match=r"expected a \.csv or \.parquet"):
        run([EXAMPLES / "psdsf-fig1.yaml"], ["drfh"], out=tmp_path / "res.xlsx", progress=False)


def test_cli_bad_input_exit_2(tmp_path, capsys):
    from fairalloc.cli import main

    code = main(["batch", str(EXAMPLES / "psdsf-fig1.yaml"), "-m", "nope", "-o", str(tmp_path / "r.csv")])
    assert code == 2 and "unknown mechanism" in capsys.readouterr().err
    assert not (tmp_path / "r.csv").exists()
