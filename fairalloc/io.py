"""Reading and writing instances (docs/instance-format.md#file-format): YAML/JSON documents and CSV
directories.

Every reader validates before it returns: a half-valid file raises :class:`InstanceError` whose message
names the field (``users[u2].demand.cpu``) and the offending value. Nothing is solved from it.

Document form::

    name: psdsf-fig1
    resources: [cpu, mem, bw]
    external: {link: 1.0}            # or {ap1: {capacity: 1.0, servers: [s1]}}
    servers:
      - {name: s1, capacity: {cpu: 9, mem: 12, bw: 100}}
    users:
      - {name: u1, demand: {cpu: 1, mem: 2, bw: 10}, weight: 2, tasks: 40, eligible: [s1]}

Time-shared form: no ``resources``/``capacity``/``demand``; ``rates: {u1: {s1: 80, s2: 340}}``.

CSV directory form: ``servers.csv`` (``server,<resource>…``), ``users.csv``
(``user[,weight][,tasks],<resource>…``; empty cells take the defaults), optional ``eligible.csv``
(``user,server``: a user listed there may run only on the listed servers), optional ``external.csv``
(``resource,capacity[,servers]``; ``servers`` space-separated, empty = all) and, for the time-shared
form, ``rates.csv`` (``user,<server>…``) instead of resource columns. Optional ``budgets.csv``
(``user,limit,<server>…``: the user's budget limit and its cost per task on each server; empty = 0).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from fairalloc.errors import InstanceError
from fairalloc.instance import Instance

__all__ = ["instance_to_dict", "load_instance", "parse_instance", "save_instance"]

_TOP_KEYS = {"name", "resources", "external", "servers", "users", "rates"}
_SERVER_KEYS = {"name", "capacity"}
_USER_KEYS = {"name", "demand", "weight", "tasks", "eligible", "budget"}
_BUDGET_KEYS = {"limit", "cost"}


def _budget(value: Any, where: str, s_idx: Mapping[str, int], K: int) -> tuple[float, np.ndarray]:
    """``budget: {limit: B, cost: {server: c}}`` → ``(B, cost[K])``; unlisted servers cost 0."""
    b = _mapping(value, where)
    _unknown_keys(b, _BUDGET_KEYS, where)
    if "limit" not in b:
        raise InstanceError(f"{where}.limit: missing")
    limit = _number(b["limit"], f"{where}.limit", allow_inf=True)
    if not limit >= 0:
        raise InstanceError(f"{where}.limit = {b['limit']!r}: must be a number >= 0")
    cost = np.zeros(K)
    for sname, v in _mapping(b.get("cost", {}), f"{where}.cost").items():
        if sname not in s_idx:
            raise InstanceError(f"{where}.cost.{sname}: unknown server {sname!r}")
        c = _number(v, f"{where}.cost.{sname}")
        if not c >= 0:
            raise InstanceError(f"{where}.cost.{sname} = {v!r}: must be a finite number >= 0")
        cost[s_idx[sname]] = c
    return limit, cost


def _number(value: Any, where: str, allow_inf: bool = False) -> float:
    """A number from a document: int/float, or a string such as ``"1/3"`` or ``"inf"``."""
    if isinstance(value, bool) or value is None:
        raise InstanceError(f"{where} = {value!r}: expected a number")
    if isinstance(value, (int, float)):
        v = float(value)
    elif isinstance(value, str):
        s = value.strip().lower()
        try:
            if s in {"inf", ".inf", "infinity", "+inf"}:
                v = math.inf
            elif "/" in s:
                a, b = s.split("/", 1)
                v = float(a) / float(b)
            else:
                v = float(s)
        except (ValueError, ZeroDivisionError):
            raise InstanceError(f"{where} = {_short(value)}: expected a number") from None
    else:
        raise InstanceError(f"{where} = {_short(value)}: expected a number")
    if math.isinf(v) and not allow_inf:
        raise InstanceError(f"{where} = {_short(value)}: must be finite")
    return v


def _name(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise InstanceError(f"{where} = {_short(value)}: expected a non-empty name")
    s = str(value)
    if not s.isprintable():
        raise InstanceError(f"{where} = {_short(value)}: a name may not contain line breaks or control "
                            "characters")
    if s != s.strip():
        raise InstanceError(f"{where} = {_short(value)}: a name may not start or end with spaces")
    return s


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InstanceError(f"{where}: expected a mapping, got {type(value).__name__} {_short(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InstanceError(f"{where}: expected a list, got {type(value).__name__} {_short(value)}")
    return value


def _unknown_keys(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for k in obj:
        if k not in allowed:
            raise InstanceError(f"{where}: unknown field {k!r} (expected one of "
                                f"{', '.join(sorted(allowed))})")


def _index(names: Iterable[str], where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, nm in enumerate(names):
        if nm in out:
            raise InstanceError(f"{where}: duplicate name {nm!r}")
        out[nm] = k
    return out


def parse_instance(doc: Any, default_name: str = "instance") -> Instance:
    """Validate a parsed YAML/JSON document and build the :class:`Instance`."""
    doc = _mapping(doc, "instance")
    _unknown_keys(doc, _TOP_KEYS, "instance")
    name = _name(doc.get("name", default_name), "name")
    time_shared = "rates" in doc
    if time_shared and "resources" in doc:
        raise InstanceError("rates: give either 'rates' (time-shared form) or 'resources' with "
                            "capacities and demands, not both")
    resources = [] if time_shared else [_name(r, f"resources[{k}]") for k, r in
                                        enumerate(_list(doc.get("resources"), "resources"))]
    if not time_shared and not resources:
        raise InstanceError("resources: empty list (or give 'rates' for the time-shared form)")
    r_idx = _index(resources, "resources")

    # external resources
    ext_doc = _mapping(doc.get("external") or {}, "external")
    if time_shared and ext_doc:
        raise InstanceError("external: external resources need demands; not allowed with 'rates'")
    external = [_name(e, "external") for e in ext_doc]
    for e in external:
        if e in r_idx:
            raise InstanceError(f"external.{e}: duplicate name {e!r} (also a server resource)")

    servers_doc = _list(doc.get("servers"), "servers")
    servers = []
    for k, s in enumerate(servers_doc):
        s = _mapping(s, f"servers[{k}]")
        _unknown_keys(s, _SERVER_KEYS, f"servers[{k}]")
        servers.append(_name(s.get("name", f"s{k + 1}"), f"servers[{k}].name"))
    s_idx = _index(servers, "servers")
    K, R = len(servers), len(resources)
    capacity = np.zeros((K, R))
    for i, s in enumerate(servers_doc):
        cap = s.get("capacity")
        if time_shared:
            if cap is not None:
                raise InstanceError(f"servers[{servers[i]}].capacity: not allowed with 'rates'")
            continue
        for r, v in _mapping(cap if cap is not None else {}, f"servers[{servers[i]}].capacity").items():
            where = f"servers[{servers[i]}].capacity.{r}"
            if r not in r_idx:
                hint = " (external resources take their capacity under 'external')" \
                    if r in external else ""
                raise InstanceError(f"{where}: unknown resource {r!r}{hint}")
            capacity[i, r_idx[r]] = _number(v, where)

    ext_cap = np.zeros(len(external))
    scope = np.ones((len(external), K), bool)
    for e, (ename, spec) in enumerate(ext_doc.items()):
        if isinstance(spec, Mapping):
            _unknown_keys(spec, {"capacity", "servers"}, f"external.{ename}")
            if "capacity" not in spec:
                raise InstanceError(f"external.{ename}.capacity: missing")
            ext_cap[e] = _number(spec["capacity"], f"external.{ename}.capacity")
            if spec.get("servers") is not None:
                scope[e] = False
                for sname in _list(spec["servers"], f"external.{ename}.servers"):
                    sname = _name(sname, f"external.{ename}.servers")
                    if sname not in s_idx:
                        raise InstanceError(f"external.{ename}.servers: unknown server {sname!r}")
                    scope[e, s_idx[sname]] = True
        else:
            ext_cap[e] = _number(spec, f"external.{ename}")

    users_doc = _list(doc.get("users"), "users")
    users = []
    for k, u in enumerate(users_doc):
        u = _mapping(u, f"users[{k}]")
        _unknown_keys(u, _USER_KEYS, f"users[{k}]")
        users.append(_name(u.get("name", f"u{k + 1}"), f"users[{k}].name"))
    u_idx = _index(users, "users")
    N, E = len(users), len(external)
    e_idx = {e: k for k, e in enumerate(external)}
    demand, ext_demand = np.zeros((N, R)), np.zeros((N, E))
    weight, tasks = np.ones(N), np.full(N, math.inf)
    eligible = np.ones((N, K), bool)
    budget_limit, budget_cost = np.full(N, math.inf), np.zeros((N, K))
    for n, u in enumerate(users_doc):
        un = f"users[{users[n]}]"
        dem = u.get("demand")
        if time_shared and dem is not None:
            raise InstanceError(f"{un}.demand: not allowed with 'rates' (time-shared form)")
        if not time_shared:
            if dem is None:
                raise InstanceError(f"{un}.demand: missing")
            for r, v in _mapping(dem, f"{un}.demand").items():
                if r in r_idx:
                    demand[n, r_idx[r]] = _number(v, f"{un}.demand.{r}")
                elif r in e_idx:
                    ext_demand[n, e_idx[r]] = _number(v, f"{un}.demand.{r}")
                else:
                    raise InstanceError(f"{un}.demand.{r}: unknown resource {r!r}")
        if u.get("weight") is not None:
            weight[n] = _number(u["weight"], f"{un}.weight")
        if u.get("tasks") is not None:
            tasks[n] = _number(u["tasks"], f"{un}.tasks", allow_inf=True)
        if u.get("eligible") is not None:
            eligible[n] = False
            for sname in _list(u["eligible"], f"{un}.eligible"):
                sname = _name(sname, f"{un}.eligible")
                if sname not in s_idx:
                    raise InstanceError(f"{un}.eligible: unknown server {sname!r}")
                eligible[n, s_idx[sname]] = True
        if u.get("budget") is not None:
            budget_limit[n], budget_cost[n] = _budget(u["budget"], f"{un}.budget", s_idx, K)

    rates = None
    if time_shared:
        rates = np.zeros((N, K))
        for uname, row in _mapping(doc["rates"], "rates").items():
            uname = _name(uname, "rates")
            if uname not in u_idx:
                raise InstanceError(f"rates.{uname}: unknown user {uname!r}")
            for sname, v in _mapping(row, f"rates.{uname}").items():
                if sname not in s_idx:
                    raise InstanceError(f"rates.{uname}.{sname}: unknown server {sname!r}")
                rates[u_idx[uname], s_idx[sname]] = _number(v, f"rates.{uname}.{sname}")

    return Instance(users=tuple(users), servers=tuple(servers), resources=tuple(resources),
                    capacity=capacity, demand=demand, weight=weight, tasks=tasks,
                    eligible=eligible, external=tuple(external), external_capacity=ext_cap,
                    external_demand=ext_demand, external_scope=scope, rates=rates, name=name,
                    budget_limit=budget_limit, budget_cost=budget_cost)


# ---------------------------------------------------------------------- CSV directory form
def _read_csv(path: Path) -> pd.DataFrame:
    import csv

    try:
        with open(path, newline="") as fh:
            rows = [r for r in csv.reader(fh, skipinitialspace=True) if r]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InstanceError(f"{path.name}: cannot parse CSV ({str(exc).splitlines()[0]})") from None
    if rows:
        header = [c.strip() for c in rows[0]]
        dup = sorted({c for c in header if header.count(c) > 1})
        if dup:
            raise InstanceError(f"{path.name}: column {_short(dup[0])} named twice in the header")
        for k, r in enumerate(rows[1:], start=2):
            if len(r) != len(header):
                raise InstanceError(f"{path.name}: row {k} has {len(r)} fields, the header has "
                                    f"{len(header)}")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InstanceError(f"{path.name}: cannot parse CSV ({str(exc).splitlines()[0]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _csv_doc(folder: Path) -> dict[str, Any]:
    """Turn a CSV directory into the document form, so one validator checks both."""
    if not (folder / "servers.csv").exists() or not (folder / "users.csv").exists():
        raise InstanceError(f"{folder}: a CSV instance needs servers.csv and users.csv")
    sdf, udf = _read_csv(folder / "servers.csv"), _read_csv(folder / "users.csv")
    if "server" not in sdf.columns:
        raise InstanceError("servers.csv: missing column 'server'")
    if "user" not in udf.columns:
        raise InstanceError("users.csv: missing column 'user'")
    resources = [c for c in sdf.columns if c != "server"]
    doc: dict[str, Any] = {"name": folder.name}
    rates_path = folder / "rates.csv"
    if rates_path.exists():
        rdf = _read_csv(rates_path)
        if "user" not in rdf.columns:
            raise InstanceError("rates.csv: missing column 'user'")
        doc["rates"] = {r["user"]: {s: r[s] for s in rdf.columns if s != "user" and r[s] != ""}
                        for _, r in rdf.iterrows()}
        if resources:
            doc["resources"] = resources  # the validator reports the conflict
    else:
        doc["resources"] = resources
    doc["servers"] = [{"name": r["server"], **({"capacity": {c: r[c] for c in resources
                                                              if r[c] != ""}} if resources else {})}
                      for _, r in sdf.iterrows()]
    ext_path = folder / "external.csv"
    if ext_path.exists():
        edf = _read_csv(ext_path)
        for col in ("resource", "capacity"):
            if col not in edf.columns:
                raise InstanceError(f"external.csv: missing column {col!r}")
        doc["external"] = {
            r["resource"]: {"capacity": r["capacity"],
                            **({"servers": r["servers"].split()} if r.get("servers") else {})}
            for _, r in edf.iterrows()}
    eligible: dict[str, list[str]] = {}
    el_path = folder / "eligible.csv"
    if el_path.exists():
        ldf = _read_csv(el_path)
        for col in ("user", "server"):
            if col not in ldf.columns:
                raise InstanceError(f"eligible.csv: missing column {col!r}")
        known = set(udf["user"])
        for _, r in ldf.iterrows():
            if r["user"] not in known:
                raise InstanceError(f"eligible.csv: unknown user {r['user']!r}")
            eligible.setdefault(r["user"], []).append(r["server"])
    budgets: dict[str, dict[str, Any]] = {}
    bpath = folder / "budgets.csv"
    if bpath.exists():
        bdf = _read_csv(bpath)
        for col in ("user", "limit"):
            if col not in bdf.columns:
                raise InstanceError(f"budgets.csv: missing column {col!r}")
        known = set(udf["user"])
        for _, r in bdf.iterrows():
            if r["user"] not in known:
                raise InstanceError(f"budgets.csv: unknown user {r['user']!r}")
            budgets[r["user"]] = {"limit": r["limit"], "cost": {
                c: r[c] for c in bdf.columns if c not in {"user", "limit"} and r[c] != ""}}
    demand_cols = [c for c in udf.columns if c not in {"user", "weight", "tasks"}]
    users = []
    for _, r in udf.iterrows():
        u: dict[str, Any] = {"name": r["user"]}
        if "rates" not in doc:
            u["demand"] = {c: r[c] for c in demand_cols if r[c] != ""}
        elif demand_cols:
            raise InstanceError(f"users.csv: resource columns {demand_cols} not allowed with "
                                "rates.csv (time-shared form)")
        for c in ("weight", "tasks"):
            if c in udf.columns and r[c] != "":
                u[c] = r[c]
        if r["user"] in eligible:
            u["eligible"] = eligible[r["user"]]
        if r["user"] in budgets:
            u["budget"] = budgets[r["user"]]
        users.append(u)
    doc["users"] = users
    return doc


# ---------------------------------------------------------------------- safe parsing
MAX_DEPTH = 64  # an instance is at most ~5 levels deep; deeper is a mistake or an attack
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for JSON: a key given twice is an error (the last one would win)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InstanceError(f"duplicate key {_short(k)} in one object (the JSON gives it twice)")
        out[k] = v
    return out


def _short(value: Any, limit: int = 60) -> str:
    """``repr`` cut to ``limit`` characters: error messages never echo a huge value whole."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 1] + "…"


def _load_yaml(text: str) -> Any:
    """YAML with the C parser, checked before anything is built: no anchors or aliases (an alias
    "bomb" expands to gigabytes), no key twice in a mapping, at most ``MAX_DEPTH`` levels, and no
    YAML 1.1 sexagesimal numbers (``1:30`` would be read as 90)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        seen: set[int] = set()
        stack: list[tuple[Any, int]] = [(node, 1)]
        while stack:
            nd, depth = stack.pop()
            if id(nd) in seen:
                raise InstanceError(f"line {nd.start_mark.line + 1}: YAML anchors and aliases (&, *) "
                                    "are not accepted in instance files")
            seen.add(id(nd))
            if depth > MAX_DEPTH:
                raise InstanceError(f"line {nd.start_mark.line + 1}: nested more than {MAX_DEPTH} levels")
            if isinstance(nd, yaml.ScalarNode):
                if nd.tag in _NUMBER_TAGS and ":" in nd.value:
                    raise InstanceError(f"line {nd.start_mark.line + 1}: {_short(nd.value)} is a YAML 1.1 "
                                        "sexagesimal number (read as base 60); quote it or write the value")
            elif isinstance(nd, yaml.MappingNode):
                keys: set[str] = set()
                for k, v in nd.value:
                    if isinstance(k, yaml.ScalarNode):
                        if k.value in keys:
                            raise InstanceError(f"line {k.start_mark.line + 1}: key {_short(k.value)} given "
                                                "twice in one mapping")
                        keys.add(k.value)
                    stack += [(k, depth + 1), (v, depth + 1)]
            elif isinstance(nd, yaml.SequenceNode):
                stack += [(v, depth + 1) for v in nd.value]
        return loader.construct_document(node)
    finally:
        loader.dispose()


# ---------------------------------------------------------------------- public readers/writers
def load_instance(path: str | os.PathLike[str]) -> Instance:
    """Read and validate an instance from a ``.yaml``/``.yml``/``.json`` file or a CSV directory."""
    p = Path(path)
    if p.is_dir():
        return parse_instance(_csv_doc(p), default_name=p.name)
    if not p.exists():
        raise InstanceError(f"{path}: no such file or directory")
    suffix = p.suffix.lower()
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InstanceError(f"{path}: cannot read ({exc})") from None
    try:
        if suffix == ".json":
            doc = json.loads(text, object_pairs_hook=_unique_pairs)
        elif suffix in {".yaml", ".yml"}:
            doc = _load_yaml(text)
        else:
            raise InstanceError(f"{path}: unknown instance format {suffix!r} "
                                "(expected .yaml, .yml, .json or a CSV directory)")
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).replace("\n", " ")
        raise InstanceError(f"{path}: not valid {suffix[1:].upper()}: {first}") from None
    except RecursionError:
        raise InstanceError(f"{path}: nested too deeply to read") from None
    except InstanceError as exc:  # from the checks above: say which file
        raise InstanceError(f"{path}: {exc}") from None
    if doc is None:
        raise InstanceError(f"{path}: empty document")
    return parse_instance(doc, default_name=p.stem)


def _num(v: float) -> float | int | str:
    if math.isinf(v):
        return "inf"
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else float(v)


def instance_to_dict(inst: Instance) -> dict[str, Any]:
    """The document form (docs/instance-format.md#file-format); defaults (weight 1, unlimited tasks,
    eligible everywhere) omitted."""
    doc: dict[str, Any] = {"name": inst.name}
    if not inst.time_shared:
        doc["resources"] = list(inst.resources)
    if inst.external:
        ext: dict[str, Any] = {}
        for e, name in enumerate(inst.external):
            cap = _num(inst.external_capacity[e])
            scope = inst.external_scope[e]
            ext[name] = cap if scope.all() else {
                "capacity": cap, "servers": [s for s, ok in zip(inst.servers, scope) if ok]}
        doc["external"] = ext
    doc["servers"] = []
    for i, s in enumerate(inst.servers):
        entry: dict[str, Any] = {"name": s}
        if not inst.time_shared:
            entry["capacity"] = {r: _num(c) for r, c in zip(inst.resources, inst.capacity[i]) if c}
        doc["servers"].append(entry)
    doc["users"] = []
    for n, u in enumerate(inst.users):
        entry = {"name": u}
        if not inst.time_shared:
            entry["demand"] = {r: _num(d) for r, d in zip(inst.all_resources, inst.all_demand[n]) if d}
        if inst.weight[n] != 1:
            entry["weight"] = _num(inst.weight[n])
        if math.isfinite(inst.tasks[n]):
            entry["tasks"] = _num(inst.tasks[n])
        if not inst.eligible[n].all():
            entry["eligible"] = [s for s, ok in zip(inst.servers, inst.eligible[n]) if ok]
        if math.isfinite(inst.budget_limit[n]):
            entry["budget"] = {"limit": _num(inst.budget_limit[n]), "cost": {
                s: _num(c) for s, c in zip(inst.servers, inst.budget_cost[n]) if c}}
        doc["users"].append(entry)
    if inst.time_shared:
        doc["rates"] = {u: {s: _num(v) for s, v in zip(inst.servers, inst.rates[n]) if v}
                        for n, u in enumerate(inst.users)}
    return doc


def save_instance(inst: Instance, path: str | os.PathLike[str]) -> Path:
    """Write ``.yaml``/``.yml``/``.json``, or a CSV directory when ``path`` has no suffix."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in {".yaml", ".yml"}:
        p.write_text(yaml.safe_dump(instance_to_dict(inst), sort_keys=False))
    elif suffix == ".json":
        p.write_text(json.dumps(instance_to_dict(inst), indent=2))
    elif suffix == "":
        _save_csv(inst, p)
    else:
        raise InstanceError(f"{path}: unknown instance format {suffix!r}")
    return p


def _save_csv(inst: Instance, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    sdf = pd.DataFrame(inst.capacity, columns=list(inst.resources))
    sdf.insert(0, "server", inst.servers)
    sdf.to_csv(folder / "servers.csv", index=False)
    udf = pd.DataFrame({"user": inst.users, "weight": inst.weight,
                        "tasks": ["" if math.isinf(t) else repr(float(t)) for t in inst.tasks]})
    if not inst.time_shared:
        udf = pd.concat([udf, pd.DataFrame(inst.all_demand, columns=list(inst.all_resources))],
                        axis=1)
    udf.to_csv(folder / "users.csv", index=False)
    if inst.external:
        pd.DataFrame({"resource": inst.external, "capacity": inst.external_capacity,
                      "servers": [" ".join(s for s, ok in zip(inst.servers, sc) if ok)
                                  if not sc.all() else "" for sc in inst.external_scope]}
                     ).to_csv(folder / "external.csv", index=False)
    if inst.has_placement:
        rows = [(u, s) for n, u in enumerate(inst.users) if not inst.eligible[n].all()
                for i, s in enumerate(inst.servers) if inst.eligible[n, i]]
        pd.DataFrame(rows, columns=["user", "server"]).to_csv(folder / "eligible.csv", index=False)
    if inst.has_budgets:
        bdf = pd.DataFrame(inst.budget_cost[inst.budgeted], columns=list(inst.servers))
        bdf.insert(0, "limit", [repr(float(v)) for v in inst.budget_limit[inst.budgeted]])
        bdf.insert(0, "user", [inst.users[n] for n in inst.budgeted])
        bdf.to_csv(folder / "budgets.csv", index=False)
    if inst.time_shared:
        rdf = pd.DataFrame(inst.rates, columns=list(inst.servers))
        rdf.insert(0, "user", inst.users)
        rdf.to_csv(folder / "rates.csv", index=False)
