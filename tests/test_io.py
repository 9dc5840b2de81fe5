"""Instance files: round trips and the malformed cases of docs/instance-format.md#file-format (one clear
line, exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from fairalloc import Instance, InstanceError, load_instance, save_instance
from fairalloc.io import instance_to_dict, parse_instance

BASE = {
    "name": "base",
    "resources": ["cpu", "mem"],
    "external": {"link": 2.0},
    "servers": [{"name": "s1", "capacity": {"cpu": 4, "mem": 8}},
                {"name": "s2", "capacity": {"cpu": 8}}],
    "users": [{"name": "u1", "demand": {"cpu": 1, "mem": 2, "link": 0.1}, "weight": 2, "tasks": 3,
               "eligible": ["s1"]},
              {"name": "u2", "demand": {"cpu": 1}}],
}


def mutate(path, value):
    doc = json.loads(json.dumps(BASE))
    *head, last = path
    obj = doc
    for k in head:
        obj = obj[k]
    if value is KeyError:
        del obj[last]
    else:
        obj[last] = value
    return doc


@pytest.mark.parametrize("kind", [".yaml", ".json", ""])
def test_round_trip(tmp_path, kind):
    inst = parse_instance(BASE)
    p = save_instance(inst, tmp_path / f"inst{kind}")
    back = load_instance(p)
    assert back == inst
    assert instance_to_dict(back)["users"][0]["eligible"] == ["s1"]


def test_round_trip_time_shared_and_scoped(tmp_path, examples):
    ts = load_instance(examples / "psdsf-table3.yaml")
    for kind in (".yaml", ""):
        assert load_instance(save_instance(ts, tmp_path / f"ts{kind}")) == ts
    doc = mutate(["external"], {"ap1": {"capacity": 1.0, "servers": ["s1"]}, "ap2": 3})
    doc["users"][0]["demand"] = {"cpu": 1, "ap1": 0.5, "ap2": 1}
    scoped = parse_instance(doc)
    assert scoped.external_scope.tolist() == [[True, False], [True, True]]
    for kind in (".json", ""):
        assert load_instance(save_instance(scoped, tmp_path / f"sc{kind}")) == scoped


def test_fractions_and_defaults(examples):
    inst = load_instance(examples / "tsfer-fig2.yaml")
    assert inst.capacity[0, 0] == pytest.approx(1 / 3)
    assert inst.external_demand[0, 0] == pytest.approx(2.5 / 15)
    assert inst.weight.tolist() == [1.0, 1.0] and np.isinf(inst.tasks).all()


MALFORMED = [
    # (mutation, words the one-line message must contain)
    ((["servers", 0, "capacity", "cpu"], -1), ["servers[s1].capacity.cpu", "-1"]),
    ((["servers", 0, "capacity", "cpu"], float("nan")), ["servers[s1].capacity.cpu", "NaN"]),
    ((["servers", 0, "capacity", "cpu"], "lots"), ["servers[s1].capacity.cpu", "lots"]),
    ((["users", 1, "demand", "cpu"], -2), ["users[u2].demand.cpu", "-2"]),
    ((["users", 1, "demand"], {"cpu": 0}), ["users[u2].demand", "all zero"]),
    ((["users", 1, "demand"], {}), ["users[u2].demand", "all zero"]),
    ((["users", 0, "weight"], 0), ["users[u1].weight", "0"]),
    ((["users", 0, "weight"], -1), ["users[u1].weight", "-1"]),
    ((["users", 0, "tasks"], 0), ["users[u1].tasks", "0"]),
    ((["users", 0, "eligible"], ["s9"]), ["users[u1].eligible", "s9"]),
    ((["users", 0, "eligible"], ["s2"]), ["users[u1]", "eligible for no server"]),  # s2 lacks mem
    ((["users", 0, "demand", "gpu"], 1), ["users[u1].demand.gpu", "unknown resource"]),
    ((["servers", 1, "capacity", "gpu"], 1), ["servers[s2].capacity.gpu", "unknown resource"]),
    ((["servers", 1, "name"], "s1"), ["servers", "duplicate", "s1"]),
    ((["users", 1, "name"], "u1"), ["users", "duplicate", "u1"]),
    ((["resources"], ["cpu", "cpu"]), ["resources", "duplicate", "cpu"]),
    ((["external"], {"cpu": 1}), ["external.cpu", "duplicate"]),
    ((["external", "link"], 0), ["external.link.capacity", "0"]),
    ((["users", 0, "colour"], "red"), ["users[0]", "unknown field", "colour"]),
    ((["servers"], KeyError), ["servers", "expected a list"]),
    ((["users", 1, "demand"], {"link": 1}), ["users[u2].demand", "no server resource"]),
]


@pytest.mark.parametrize("mutation,words", MALFORMED, ids=[" ".join(map(str, m[0][0])) + f"={m[0][1]}"
                                                           for m in MALFORMED])
def test_malformed_api(mutation, words):
    with pytest.raises(InstanceError) as exc:
        parse_instance(mutate(*mutation))
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("mutation,words", MALFORMED[:6] + MALFORMED[9:12] + MALFORMED[13:15])
def test_malformed_cli(tmp_path, cli, mutation, words):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(mutate(*mutation)))
    proc = cli("solve", str(f), "-m", "drfh")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0]


def test_unreadable_files(tmp_path, cli):
    (tmp_path / "x.yaml").write_text("users: [ {name: u1\n")
    (tmp_path / "x.txt").write_text("hi")
    for path, words in [(tmp_path / "x.yaml", "not valid YAML"), (tmp_path / "x.txt", "format"),
                        (tmp_path / "none.yaml", "no such file")]:
        proc = cli("solve", str(path), "-m", "tsf")
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def test_time_shared_rejects_mixing():
    doc = {"servers": [{"name": "A"}], "users": [{"name": "u1"}], "rates": {"u1": {"A": 1}},
           "resources": ["cpu"]}
    with pytest.raises(InstanceError, match="either 'rates'"):
        parse_instance(doc)
    with pytest.raises(InstanceError, match=r"rates.u1.B: unknown server"):
        parse_instance({"servers": [{"name": "A"}], "users": [{"name": "u1"}],
                        "rates": {"u1": {"B": 1}}})
    with pytest.raises(InstanceError, match="users\\[u1\\]: eligible for no server"):
        parse_instance({"servers": [{"name": "A"}], "users": [{"name": "u1"}], "rates": {"u1": {}}})


def test_csv_errors(tmp_path):
    d = tmp_path / "inst"
    d.mkdir()
    (d / "servers.csv").write_text("server,cpu\ns1,4\n")
    (d / "users.csv").write_text("user,weight,tasks,cpu,gpu\nu1,1,,1,1\n")
    with pytest.raises(InstanceError, match="gpu"):
        load_instance(d)
    (d / "users.csv").write_text("user,weight,tasks,cpu\nu1,0,,1\n")
    with pytest.raises(InstanceError, match=r"users\[u1\].weight = 0"):
        load_instance(d)
    (d / "users.csv").write_text("user,cpu\nu1,1\nu2,2\n")
    (d / "eligible.csv").write_text("user,server\nu1,s1\n")
    inst = load_instance(d)
    assert inst.n_users == 2 and inst.eligible.all()


def test_from_arrays_validates():
    with pytest.raises(InstanceError, match=r"users\[u1\].demand.r1 = -1.0"):
        Instance.from_arrays(capacity=[[1.0]], demand=[[-1.0]])
