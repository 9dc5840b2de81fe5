"""The result of running a mechanism (docs/cli.md#result).

>>> import numpy as np
>>> r = Result(instance="demo", mechanism="drfh", status=Status.OPTIMAL, users=("u1", "u2"),
...            servers=("s1",), allocation=np.array([[2.0], [0.0]]))
>>> r.to_dict()["allocation"], r.to_dict()["tasks"]
({'u1': {'s1': 2.0}}, {'u1': 2.0, 'u2': 0.0})
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairalloc.errors import FairallocError
from fairalloc.status import Status

__all__ = ["Result", "ResultError", "snap_zeros"]


class ResultError(FairallocError, ValueError):
    """A result file is malformed."""


def snap_zeros(x: np.ndarray, rel_tol: float = 1e-9, scale: np.ndarray | None = None,
               pair_scale: np.ndarray | None = None) -> np.ndarray:
    """Set solver noise to exactly zero, relative to each user's own numbers: entries with
    ``|x[n,i]| ≤ rel_tol·max(Σ_i |x[n,i]|, 10⁻³·scale[n])``.

    ``scale`` is each user's own scale (``η_n``, the most tasks it could run alone; without it, the
    largest entry of the user's row). Relative to the user's total, so a split across servers loses only
    its noise and a user whose allocation is tiny — 10⁻¹¹ tasks because another user holds a shared
    resource — keeps it; the ``10⁻³·scale`` floor clears a row that is noise as a whole (≤ 10⁻¹²·η_n at
    the default ``rel_tol``). Per user: one running 5·10⁻⁷ tasks keeps them next to one running 5000.
    ``pair_scale`` (users × servers: ``γ[n,i]``, the most tasks ``n`` fits on ``i``) keeps an entry that is
    more than ``rel_tol`` of what the server holds for that user: 3·10⁻⁸ tasks of a demand of 3·10⁵ on a
    capacity of 0.01 are 10⁻³ of that server's resource, whatever the user's total."""
    x = np.array(x, dtype=float, copy=True)
    if x.size:
        s = np.nanmax(np.abs(x), axis=1) if scale is None else np.asarray(scale, float)
        total = np.abs(x).sum(axis=1)
        thr = np.broadcast_to(rel_tol * np.maximum(total, 1e-3 * s)[:, None], x.shape)
        if pair_scale is not None:
            thr = np.minimum(thr, rel_tol * np.asarray(pair_scale, float))
        x[np.abs(x) <= thr] = 0.0
    return x


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Status):
        return obj.value
    return obj


@dataclass
class Result:
    """Allocation ``x[n,i]`` with the status it was obtained with, solver statistics and timings.

    ``details`` holds what the mechanism reports besides the allocation (levels, η, iterations,
    saturated sets, the form that ran…); ``verification`` the report of :mod:`fairalloc.verify`.
    """

    instance: str
    mechanism: str
    status: Status
    users: tuple[str, ...]
    servers: tuple[str, ...]
    allocation: np.ndarray
    message: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    solver: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    verification: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.users, self.servers = tuple(self.users), tuple(self.servers)
        self.allocation = np.asarray(self.allocation, float).reshape(len(self.users),
                                                                       len(self.servers))

    @property
    def ok(self) -> bool:
        return self.status.ok

    @property
    def tasks(self) -> np.ndarray:
        """``X[n] = Σ_i x[n,i]``."""
        return self.allocation.sum(axis=1)

    @property
    def x(self) -> np.ndarray:
        return self.allocation

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        alloc: dict[str, dict[str, float]] = {}
        for n, u in enumerate(self.users):
            row = {s: float(v) for s, v in zip(self.servers, self.allocation[n]) if v != 0.0}
            if row:
                alloc[u] = row
        out: dict[str, Any] = {
            "instance": self.instance, "mechanism": self.mechanism, "status": self.status.value}
        if self.message:
            out["message"] = self.message
        out["parameters"] = self.parameters
        out["allocation"] = alloc
        out["tasks"] = {u: float(t) for u, t in zip(self.users, self.tasks)}
        out["solver"] = self.solver
        out["timings"] = self.timings
        if self.details:
            out["details"] = self.details
        if self.verification is not None:
            out["verification"] = self.verification
        return _jsonable(out)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        p.write_text(self.to_json() + "\n")
        return p

    @classmethod
    def from_dict(cls, doc: Any, users: tuple[str, ...] | None = None,
                  servers: tuple[str, ...] | None = None) -> Result:
        """Read a result document. ``users``/``servers`` (from the instance) fix the order and let
        ``allocation`` name only a subset; otherwise the names found in the document are used."""
        if not isinstance(doc, dict):
            raise ResultError("result: expected a JSON object")
        alloc = doc.get("allocation")
        if not isinstance(alloc, dict):
            raise ResultError("result.allocation: expected an object {user: {server: tasks}}")
        if users is None:
            users = tuple(doc.get("tasks") or alloc)
        if servers is None:
            servers = tuple(dict.fromkeys(s for row in alloc.values() if isinstance(row, dict)
                                          for s in row))
        u_idx = {u: k for k, u in enumerate(users)}
        s_idx = {s: k for k, s in enumerate(servers)}
        x = np.zeros((len(users), len(servers)))
        for u, row in alloc.items():
            if u not in u_idx:
                raise ResultError(f"result.allocation: unknown user {u!r}")
            if not isinstance(row, dict):
                raise ResultError(f"result.allocation.{u}: expected an object {{server: tasks}}")
            for s, v in row.items():
                if s not in s_idx:
                    raise ResultError(f"result.allocation.{u}: unknown server {s!r}")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                        or v < 0:
                    raise ResultError(f"result.allocation.{u}.{s} = {v!r}: expected a finite "
                                      "number >= 0")
                x[u_idx[u], s_idx[s]] = float(v)
        status = doc.get("status", "optimal")
        try:
            status = Status(status)
        except ValueError:
            raise ResultError(f"result.status = {status!r}: expected one of "
                              f"{[s.value for s in Status]}") from None
        return cls(instance=str(doc.get("instance", "")), mechanism=str(doc.get("mechanism", "")),
                   status=status, users=users, servers=servers, allocation=x,
                   message=str(doc.get("message", "")), parameters=dict(doc.get("parameters", {})),
                   solver=dict(doc.get("solver", {})), timings=dict(doc.get("timings", {})),
                   details=dict(doc.get("details", {})), verification=doc.get("verification"))

    @classmethod
    def from_json(cls, text: str, **kw: Any) -> Result:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ResultError(f"result: not valid JSON ({exc})") from None
        return cls.from_dict(doc, **kw)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **kw: Any) -> Result:
        p = Path(path)
        if not p.is_file():
            raise ResultError(f"{path}: no such result file")
        return cls.from_json(p.read_text(), **kw)

    # ------------------------------------------------------------------ pandas
    def to_frame(self, include_zeros: bool = False) -> pd.DataFrame:
        """Tidy allocation: one row per (user, server) with ``tasks``."""
        n, i = np.nonzero(self.allocation) if not include_zeros else np.indices(
            self.allocation.shape).reshape(2, -1)
        return pd.DataFrame({"user": [self.users[k] for k in n],
                             "server": [self.servers[k] for k in i],
                             "tasks": self.allocation[n, i]})

    def totals_frame(self) -> pd.Series:
        return pd.Series(self.tasks, index=pd.Index(self.users, name="user"), name="tasks")

    def __repr__(self) -> str:
        X = ", ".join(f"{u}={t:.6g}" for u, t in zip(self.users, self.tasks))
        return f"Result({self.mechanism} on {self.instance!r}: {self.status.value}; X: {X})"
