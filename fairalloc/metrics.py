r"""Metrics of an allocation (docs/verification.md, "Metrics"): utilization, Jain's index, deviation from
PS-DSF.

>>> import numpy as np
>>> from fairalloc import Instance
>>> inst = Instance.from_arrays(capacity=[[9, 18]], demand=[[1, 4], [3, 1]], resources=["cpu", "mem"])
>>> x = np.array([[3.0], [2.0]])
>>> utilization(inst, x).round(4).tolist()
[[1.0, 0.7778]]
>>> round(overall_utilization(inst, x), 4)
0.8889
>>> round(jain([1.0, 1.0, 0.5]), 4)
0.9259
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairalloc.instance import Instance
from fairalloc.models._perserver import deviation_from_psdsf
from fairalloc.verify.feasibility import usage

__all__ = ["deviation_from_psdsf", "jain", "overall_utilization", "utilization", "utilization_frame"]


def utilization(inst: Instance, x: np.ndarray) -> np.ndarray:
    """``Σ_n x[n,i] d[n,r] / c[i,r]`` per (server, resource) (K × R; the time-shared form has one
    column, the busy fraction of each server); ``nan`` where the capacity is 0."""
    u = usage(inst, x)
    cap = u["server_capacity"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(cap > 0, u["server_used"] / np.where(cap > 0, cap, 1.0), np.nan)


def overall_utilization(inst: Instance, x: np.ndarray) -> float:
    """Mean utilization over the (server, resource) pairs that exist (capacity > 0) — the papers'
    "resource utilization" averaged over resources and servers ([PSDSF] §V, [APF] §6)."""
    return float(np.nanmean(utilization(inst, x)))


def utilization_frame(inst: Instance, x: np.ndarray) -> pd.DataFrame:
    """Tidy utilization: one row per (server, resource) with ``used``, ``capacity``, ``utilization``;
    external resources follow with server ``"-"``."""
    u = usage(inst, x)
    names = inst.resources if not inst.time_shared else ("time",)
    util = utilization(inst, x)
    rows = [{"server": s, "resource": r, "used": float(u["server_used"][i, k]),
             "capacity": float(u["server_capacity"][i, k]), "utilization": float(util[i, k])}
            for i, s in enumerate(inst.servers) for k, r in enumerate(names)]
    for e, name in enumerate(inst.external):
        rows.append({"server": "-", "resource": name, "used": float(u["external_used"][e]),
                     "capacity": float(inst.external_capacity[e]),
                     "utilization": float(u["external_used"][e] / inst.external_capacity[e])})
    return pd.DataFrame(rows)


def jain(values: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index ``(Σv)² / (n Σv²)`` of (normalised) shares: 1 when all are equal."""
    v = np.asarray(values, float)
    sq = float((v * v).sum())
    return float(v.sum() ** 2 / (v.size * sq)) if sq > 0 else 1.0
