"""Metrics of one instant of a simulation: the allocation among the jobs present, through the
project's own measures (:mod:`fairalloc.metrics`, :mod:`fairalloc.verify.fairness`)."""

from __future__ import annotations

import numpy as np

from fairalloc.instance import Instance
from fairalloc.metrics import utilization
from fairalloc.verify.fairness import envy_free, sharing_incentive

__all__ = ["fairness", "instance_utilization", "resource_columns", "utilization_row"]


def resource_columns(inst: Instance) -> list[str]:
    return [f"util_{r}" for r in inst.all_resources]


def utilization_row(capacity: np.ndarray, used: np.ndarray, ext_capacity: np.ndarray,
                    ext_used: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    """``utilization``: mean over (server, resource) pairs with capacity (as
    :func:`fairalloc.metrics.overall_utilization`); ``util_<r>``: aggregate per resource."""
    with np.errstate(divide="ignore", invalid="ignore"):
        pair = np.where(capacity > 0, used / np.where(capacity > 0, capacity, 1.0), np.nan)
        agg = used.sum(axis=0) / np.where(capacity.sum(axis=0) > 0, capacity.sum(axis=0), np.nan)
    row = {"utilization": float(np.nanmean(pair))}
    row.update({f"util_{r}": float(v) for r, v in zip(names, np.concatenate(
        [agg, ext_used / ext_capacity if ext_capacity.size else np.zeros(0)]))})
    return row


def instance_utilization(inst: Instance, x: np.ndarray) -> dict[str, float]:
    """:func:`utilization_row` of allocation ``x`` on ``inst``."""
    util = utilization(inst, x)  # K × R, nan where no capacity
    used = np.nan_to_num(util) * inst.capacity
    ext = np.array([(x[:, inst.external_scope[e]].sum(axis=1) * inst.external_demand[:, e]).sum()
                    for e in range(len(inst.external))])
    return utilization_row(inst.capacity, used, inst.external_capacity, ext, inst.all_resources)


def fairness(inst: Instance, x: np.ndarray) -> dict[str, float]:
    """MIN-EF-SAT and MIN-SI-SAT ([TSFER] §6.3; SI by [TSFER] Def. 6) of ``x`` on ``inst``."""
    return {"min_ef_sat": float(envy_free(inst, x)["min_ef_sat"]),
            "min_si_sat": float(sharing_incentive(inst, x, "tsfer")["min_si_sat"])}
