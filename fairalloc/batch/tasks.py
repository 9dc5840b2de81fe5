"""Planning a batch: which instances, which tasks, and the stable key of each task.

A **task** is one instance × mechanism × parameter set × solver. Its key is the first 16 hex digits of
the SHA-256 of the canonical JSON of

    {"instance": <absolute resolved path>, "mechanism": <name>,
     "params": <every parameter after conversion, defaults included>, "solver": <name or "">}

so ``-p alpha=3`` and ``alpha=3.0`` from the Python API, or leaving a parameter at its default and
spelling the default out, give the same key. The time limit and ``verify`` are not part of the key:
rerunning with a larger time limit and ``--resume`` does not redo finished tasks (``--retry-failed``
does redo the ones that did not end ``optimal``/``converged``).

Paths: an instance file (any suffix; a file that is not a valid instance becomes error rows), a
directory holding ``servers.csv`` and ``users.csv`` (one CSV instance), any other directory (scanned
recursively for ``.yaml``/``.yml``/``.json`` files and CSV-instance directories; hidden entries skipped),
a glob (``runs/**/*.yaml``), or a manifest ``.csv`` with columns ``instance`` and optionally
``mechanism``, ``params``, ``solver`` (instance paths relative to the manifest's folder). Manifest
``params`` is a JSON object (``{"alpha": 3}``) or ``key=value`` pairs separated by ``;``. Empty
manifest cells take the command line's ``-m``/``-p``/``--solver``.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairalloc.errors import FairallocError, ParameterError

__all__ = ["BatchError", "Task", "canonical", "find_instances", "grid", "load_plugins", "plan",
           "read_manifest", "task_key"]

INSTANCE_SUFFIXES = {".yaml", ".yml", ".json"}


class BatchError(FairallocError):
    """The batch itself cannot run (bad path, manifest, output file, backend); exit code 2."""


@dataclass(frozen=True)
class Task:
    key: str
    instance: str  # absolute path the workers load
    label: str  # the path as shown in the results (relative to the working directory below it)
    mechanism: str
    params: dict[str, Any]  # every parameter, converted, defaults included
    given: dict[str, Any] = field(default_factory=dict)  # the ones the user set (the `params` column)
    solver: str | None = None

    def spec(self, **options: Any) -> dict[str, Any]:
        """What a worker needs: plain JSON, so it crosses process and machine boundaries."""
        return {"key": self.key, "instance": self.instance, "mechanism": self.mechanism,
                "params": self.params, "solver": self.solver, **options}


def canonical(obj: Any) -> str:
    from fairalloc.result import _jsonable

    return json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"))


def task_key(instance: str, mechanism: str, params: Mapping[str, Any], solver: str | None) -> str:
    doc = {"instance": instance, "mechanism": mechanism, "params": dict(params), "solver": solver or ""}
    return hashlib.sha256(canonical(doc).encode()).hexdigest()[:16]


def grid(**values: Any) -> list[dict[str, Any]]:
    """Parameter sets for a sweep: ``grid(alpha=[1, 3], variant="paper")`` → two dicts.

    A list value is a sweep dimension; anything else is fixed. (Pass a per-server list as
    ``alpha=[[1, 2, 3]]``.)
    """
    keys = list(values)
    axes = [v if isinstance(v, list) else [v] for v in values.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*axes)]


def load_plugins(imports: Iterable[str]) -> None:
    """Import modules that register extra mechanisms: a dotted name, or a path to a ``.py`` file
    (:func:`fairalloc.registry.load_imports`; a bad one is a :class:`BatchError`)."""
    from fairalloc.registry import load_imports

    try:
        load_imports(imports)
    except ParameterError as exc:
        raise BatchError(str(exc)) from None


# ---------------------------------------------------------------------- instances
def _label(p: Path) -> str:
    try:
        return p.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def _is_csv_instance(p: Path) -> bool:
    return p.is_dir() and (p / "servers.csv").is_file() and (p / "users.csv").is_file()


def _scan(folder: Path, exclude: set[Path]) -> list[Path]:
    found: list[Path] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.resolve() in exclude:
            continue
        if entry.is_dir():
            found.extend([entry] if _is_csv_instance(entry) else _scan(entry, exclude))
        elif entry.suffix.lower() in INSTANCE_SUFFIXES:
            found.append(entry)
    return found


def find_instances(paths: Sequence[str | os.PathLike[str]], exclude: Iterable[str | os.PathLike[str]] = ()
                   ) -> tuple[list[Path], list[Path]]:
    """Expand PATHS into (instances, manifests), each resolved, deduplicated, in a stable order.

    ``exclude`` (the output, journal and JSON folder) is never scanned. A path that does not exist or a
    glob that matches nothing is a :class:`BatchError`: it is a typo, not a bad instance.
    """
    skip = {Path(p).resolve() for p in exclude}
    instances: dict[Path, None] = {}
    manifests: dict[Path, None] = {}
    for raw in paths:
        text = os.fspath(raw)
        if glob.has_magic(text):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                raise BatchError(f"{text}: the pattern matches nothing")
        else:
            if not Path(text).exists():
                raise BatchError(f"{text}: no such file or directory")
            matches = [text]
        for m in matches:
            p = Path(m).resolve()
            if p in skip:
                continue
            if p.is_dir():
                for q in ([p] if _is_csv_instance(p) else _scan(p, skip)):
                    instances.setdefault(q.resolve())
            elif p.suffix.lower() == ".csv":
                manifests.setdefault(p)
            else:
                instances.setdefault(p)
    return list(instances), list(manifests)


# ---------------------------------------------------------------------- manifests
@dataclass(frozen=True)
class ManifestRow:
    instance: Path
    mechanism: str | None
    params: dict[str, Any] | None
    solver: str | None
    where: str


def _parse_params_cell(text: str, where: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BatchError(f"{where}: params {text!r}: not a JSON object ({exc})") from None
        if not isinstance(doc, dict):
            raise BatchError(f"{where}: params {text!r}: expected a JSON object")
        return doc
    out: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise BatchError(f"{where}: params item {item!r}: expected key=value")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def read_manifest(path: Path) -> list[ManifestRow]:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise BatchError(f"{path}: cannot read the manifest ({str(exc).splitlines()[0]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    if "instance" not in df.columns:
        raise BatchError(f"{path}: a manifest needs a column 'instance' (found {list(df.columns)}); "
                         "instances are .yaml/.yml/.json files or CSV directories")
    extra = set(df.columns) - {"instance", "mechanism", "params", "solver"}
    if extra:
        raise BatchError(f"{path}: unknown manifest column(s) {sorted(extra)} "
                         "(expected instance, mechanism, params, solver)")
    rows = []
    for k, r in df.iterrows():
        where = f"{path.name} row {int(k) + 2}"  # the header is line 1
        inst = r["instance"].strip()
        if not inst:
            raise BatchError(f"{where}: empty instance")
        p = Path(inst) if Path(inst).is_absolute() else path.parent / inst
        rows.append(ManifestRow(instance=p.resolve(), mechanism=r.get("mechanism", "").strip() or None,
                                params=_parse_params_cell(r.get("params", ""), where),
                                solver=r.get("solver", "").strip() or None, where=where))
    return rows


# ---------------------------------------------------------------------- tasks
def _resolved(mech: Any, raw: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        full = mech.parse_params(dict(raw))
    except ParameterError as exc:
        raise ParameterError(f"{where}{exc}") from None
    return full, {k: full[k] for k in raw}


def _check_solver(solver: str | None, mech: Any, where: str) -> None:
    from fairalloc.solvers import Session

    try:
        Session(solver=solver).check(mech.problem)
    except ParameterError as exc:
        raise ParameterError(f"{where}{exc}") from None


def plan(paths: Sequence[str | os.PathLike[str]], mechanisms: Sequence[str],
         param_sets: Sequence[Mapping[str, Any]] = ({},), solvers: Sequence[str | None] = (None,),
         exclude: Iterable[str | os.PathLike[str]] = ()) -> list[Task]:
    """Every task of the batch, in a stable order, without duplicates.

    Each parameter set is restricted to the parameters a mechanism declares (so ``-m apf-vds -m drfh
    -p alpha=3`` gives drfh one task, not an error); a parameter no selected mechanism takes is a
    :class:`ParameterError`, as are unknown mechanisms and bad values: nothing runs.
    """
    from fairalloc.registry import get_mechanism

    instances, manifests = find_instances(paths, exclude)
    param_sets = list(param_sets) or [{}]
    solvers = list(solvers) or [None]
    tasks: dict[str, Task] = {}

    def add(inst: Path, mech_name: str, raw: Mapping[str, Any], solver: str | None, where: str) -> None:
        mech = get_mechanism(mech_name)
        _check_solver(solver, mech, where)
        full, given = _resolved(mech, raw, where)
        key = task_key(str(inst), mech.name, full, solver)
        tasks.setdefault(key, Task(key=key, instance=str(inst), label=_label(inst), mechanism=mech.name,
                                   params=full, given=given, solver=solver))

    if instances and not mechanisms:
        raise ParameterError("batch: give at least one mechanism (-m NAME)")
    for name in mechanisms:
        get_mechanism(name)
    for key in {k for ps in param_sets for k in ps}:
        if not any(key in {p.name for p in get_mechanism(m).params} for m in mechanisms):
            raise ParameterError(f"-p {key}=…: none of the mechanisms {', '.join(mechanisms)} takes "
                                 f"parameter {key!r}")
    for inst in instances:
        for name in mechanisms:
            declared = {p.name for p in get_mechanism(name).params}
            for ps in param_sets:
                for solver in solvers:
                    add(inst, name, {k: v for k, v in ps.items() if k in declared}, solver, "")
    for manifest in manifests:
        for row in read_manifest(manifest):
            if row.mechanism is None and not mechanisms:
                raise ParameterError(f"{row.where}: no mechanism (fill the column or give -m)")
            for name in [row.mechanism] if row.mechanism else mechanisms:
                declared = {p.name for p in get_mechanism(name).params}
                sets = [row.params] if row.params is not None else [
                    {k: v for k, v in ps.items() if k in declared} for ps in param_sets]
                for ps in sets:
                    for solver in [row.solver] if row.solver else solvers:
                        add(row.instance, name, ps, solver, f"{row.where}: ")
    return list(tasks.values())
