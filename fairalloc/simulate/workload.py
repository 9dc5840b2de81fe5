"""Workloads: a cluster and the jobs that arrive at it ([TSFER] §6.1).

Every job is one *user* in the papers' sense ([TSFER] §6.2: "we consider each job in the trace as a
distinct user"): it arrives at ``arrival`` (seconds), submits ``tasks`` identical tasks with the
per-task demand ``d[n, ·]`` and a per-task execution time ``duration`` (seconds, when the task runs
alone at full speed), and leaves when all its tasks are done.

A :class:`Workload` is therefore an :class:`~fairalloc.instance.Instance` (servers, resources, external
resources, and every job as a user, ``tasks`` = its number of tasks) plus two arrays. The file format is
the instance format (docs/instance-format.md#file-format) with two more fields per user::

    name: tiny
    resources: [cpu, mem]
    external: {link: 2.0}
    servers:
      - {name: s1, capacity: {cpu: 1, mem: 1}}
    users:
      - {name: j1, arrival: 0, duration: 60, tasks: 4, demand: {cpu: 0.25, mem: 0.1, link: 0.2}}

``arrival`` defaults to 0; ``duration`` and a finite ``tasks`` are required. Bad values raise
:class:`WorkloadError` naming the field (``users[j1].duration = -1: ...``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from fairalloc.errors import FairallocError, InstanceError
from fairalloc.instance import Instance
from fairalloc.io import instance_to_dict, parse_instance

__all__ = ["Workload", "WorkloadError", "load_workload", "parse_workload"]


class WorkloadError(FairallocError, ValueError):
    """A workload (file, generator parameter or simulation setting) is malformed."""


def _seconds(value: Any, where: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise WorkloadError(f"{where} = {value!r}: expected a number of seconds")
    try:
        v = float(value)
    except ValueError:
        raise WorkloadError(f"{where} = {value!r}: expected a number of seconds") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise WorkloadError(f"{where} = {value!r}: must be a finite number {'>' if positive else '>='} 0")
    return v


@dataclass(frozen=True, eq=False)
class Workload:
    """A cluster and its jobs: ``instance`` (jobs as users, ``tasks`` finite), ``arrival`` and
    ``duration`` (seconds, one per job), and ``info`` (how it was made: generator and parameters)."""

    instance: Instance
    arrival: np.ndarray
    duration: np.ndarray
    info: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        inst = self.instance
        inst.require_demands("simulation")
        arr = np.array(self.arrival, float).reshape(inst.n_users)
        dur = np.array(self.duration, float).reshape(inst.n_users)
        for n, u in enumerate(inst.users):
            _seconds(arr[n], f"users[{u}].arrival", positive=False)
            _seconds(dur[n], f"users[{u}].duration", positive=True)
            if not math.isfinite(inst.tasks[n]):
                raise WorkloadError(f"users[{u}].tasks: a job needs a finite number of tasks")
        arr.setflags(write=False)
        dur.setflags(write=False)
        object.__setattr__(self, "arrival", arr)
        object.__setattr__(self, "duration", dur)
        object.__setattr__(self, "info", dict(self.info or {}))

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def n_jobs(self) -> int:
        return self.instance.n_users

    @property
    def tasks(self) -> np.ndarray:
        return self.instance.tasks

    @property
    def work(self) -> np.ndarray:
        """Task-seconds of every job: ``tasks × duration``."""
        return self.instance.tasks * self.duration

    def require_whole_tasks(self) -> None:
        """The indivisible model runs whole tasks only."""
        for n in np.flatnonzero(self.tasks != np.floor(self.tasks)):
            raise WorkloadError(f"users[{self.instance.users[n]}].tasks = {self.tasks[n]!r}: the "
                                "indivisible model needs a whole number of tasks")

    def subset(self, idx: Sequence[int] | np.ndarray, tasks: np.ndarray | None = None,
               name: str | None = None) -> Instance:
        """The instance of the jobs ``idx`` (in that order) with task limits ``tasks`` (default: each
        job's number of tasks; ``np.inf`` for unlimited)."""
        inst = self.instance
        idx = np.asarray(idx, int)
        T = inst.tasks[idx] if tasks is None else np.broadcast_to(np.asarray(tasks, float), idx.shape)
        return Instance(users=tuple(inst.users[k] for k in idx), servers=inst.servers,
                        resources=inst.resources, capacity=inst.capacity, demand=inst.demand[idx],
                        weight=inst.weight[idx], tasks=T, eligible=inst.eligible[idx],
                        external=inst.external, external_capacity=inst.external_capacity,
                        external_demand=inst.external_demand[idx],
                        external_scope=inst.external_scope, name=name or inst.name)

    def head(self, n: int) -> Workload:
        """The first ``n`` jobs by arrival (for quick looks)."""
        idx = np.argsort(self.arrival, kind="stable")[:n]
        return Workload(self.subset(idx), self.arrival[idx], self.duration[idx], self.info)

    def frame(self) -> pd.DataFrame:
        """One row per job: arrival, tasks, duration, work, weight and per-task demands."""
        inst = self.instance
        df = pd.DataFrame({"job": inst.users, "arrival": self.arrival, "tasks": inst.tasks,
                           "duration": self.duration, "work": self.work, "weight": inst.weight,
                           "eta": inst.eta})
        for k, r in enumerate(inst.all_resources):
            df[r] = inst.all_demand[:, k]
        return df

    def to_dict(self) -> dict[str, Any]:
        doc = instance_to_dict(self.instance)
        for entry, a, d in zip(doc["users"], self.arrival, self.duration):
            entry["arrival"] = float(a)
            entry["duration"] = float(d)
        if self.info:
            doc = {"name": doc.pop("name"), "generator": self.info, **doc}
        return doc

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``.yaml``/``.yml``/``.json``."""
        p = Path(path)
        doc = self.to_dict()
        if p.suffix.lower() in {".yaml", ".yml"}:
            p.write_text(yaml.safe_dump(doc, sort_keys=False))
        elif p.suffix.lower() == ".json":
            p.write_text(json.dumps(doc, indent=1))
        else:
            raise WorkloadError(f"{path}: unknown workload format {p.suffix!r} (expected .yaml, .yml "
                                "or .json)")
        return p

    def __repr__(self) -> str:
        return (f"Workload({self.name!r}, jobs={self.n_jobs}, tasks={int(self.tasks.sum())}, "
                f"servers={self.instance.n_servers}, arrivals {self.arrival.min():.0f}-"
                f"{self.arrival.max():.0f} s)")


def parse_workload(doc: Any, default_name: str = "workload") -> Workload:
    """Validate a parsed workload document (the instance format plus ``arrival``/``duration``)."""
    if not isinstance(doc, dict):
        raise WorkloadError(f"workload: expected a mapping, got {type(doc).__name__}")
    doc = dict(doc)
    info = doc.pop("generator", None)
    users = doc.get("users")
    if not isinstance(users, list) or not users:
        raise WorkloadError("users: a workload needs a non-empty list of jobs")
    arrival, duration, plain = [], [], []
    for k, u in enumerate(users):
        if not isinstance(u, dict):
            raise WorkloadError(f"users[{k}]: expected a mapping, got {u!r}")
        u = dict(u)
        name = u.get("name", f"u{k + 1}")
        arrival.append(_seconds(u.pop("arrival", 0.0), f"users[{name}].arrival", positive=False))
        if "duration" not in u:
            raise WorkloadError(f"users[{name}].duration: missing (seconds per task)")
        duration.append(_seconds(u.pop("duration"), f"users[{name}].duration", positive=True))
        if u.get("tasks") is None:
            raise WorkloadError(f"users[{name}].tasks: missing (a job's number of tasks)")
        plain.append(u)
    try:
        inst = parse_instance({**doc, "users": plain}, default_name=default_name)
    except InstanceError as exc:
        raise WorkloadError(str(exc)) from None
    return Workload(inst, np.array(arrival), np.array(duration),
                    info if isinstance(info, dict) else None)


def load_workload(path: str | os.PathLike[str]) -> Workload:
    """Read and validate a ``.yaml``/``.yml``/``.json`` workload file."""
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"{path}: no such workload file")
    suffix = p.suffix.lower()
    if suffix not in {".yaml", ".yml", ".json"}:
        raise WorkloadError(f"{path}: unknown workload format {suffix!r} (expected .yaml, .yml or .json)")
    try:
        text = p.read_text()
        doc = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).replace("\n", " ")
        raise WorkloadError(f"{path}: cannot read workload: {first}") from None
    if doc is None:
        raise WorkloadError(f"{path}: empty document")
    return parse_workload(doc, default_name=p.stem)
