"""The verification layer (SPEC §3): checks any allocation — from fairalloc, another tool, or typed
by hand — against χ and the fairness properties, reporting residuals and counterexamples.

:func:`verify` returns a :class:`Report` whose items are keyed as in SPEC §1.3; every item carries
``holds`` (``true``/``false``/``null`` when its premise is absent or it cannot be checked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fairalloc.instance import Instance
from fairalloc.result import Result, ResultError
from fairalloc.verify.feasibility import feasibility, usage
from fairalloc.verify.psdsf import psdsf_certificate

__all__ = ["Report", "allocation_for", "feasibility", "psdsf_certificate", "usage", "verify"]


@dataclass
class Report:
    instance: str
    mechanism: str
    items: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from fairalloc.result import _jsonable

        return _jsonable(self.items)

    def to_frame(self) -> pd.DataFrame:
        rows = []
        for name, item in self.items.items():
            measure = {k: v for k, v in item.items() if k != "holds" and not isinstance(v, (dict, list))}
            rows.append({"property": name, "holds": item.get("holds"),
                         "measure": ", ".join(f"{k}={v}" for k, v in measure.items())})
        return pd.DataFrame(rows)


def allocation_for(inst: Instance, result: Result) -> tuple[Instance, np.ndarray]:
    """The instance the allocation lives on (the pooled one for DRF) and ``x`` aligned with it."""
    if result.servers == ("pool",) and inst.servers != ("pool",):
        inst = inst.pooled()
    unknown_s = [s for s in result.servers if s not in inst.servers]
    unknown_u = [u for u in result.users if u not in inst.users]
    if unknown_s or unknown_u:
        raise ResultError(f"result names {'servers ' + str(unknown_s) if unknown_s else ''}"
                          f"{'users ' + str(unknown_u) if unknown_u else ''} not in instance "
                          f"{inst.name!r}")
    x = np.zeros((inst.n_users, inst.n_servers))
    ui = [inst.users.index(u) for u in result.users]
    si = [inst.servers.index(s) for s in result.servers]
    x[np.ix_(ui, si)] = result.allocation
    return inst, x


def verify(inst: Instance, result: Result) -> Report:
    """Check ``result``'s allocation on ``inst``."""
    pinst, x = allocation_for(inst, result)
    rep = Report(instance=inst.name, mechanism=result.mechanism)
    rep.items["feasible"] = feasibility(pinst, x)
    kkt = result.solver.get("max_kkt_residual") if result.solver else None
    rep.items["kkt"] = {"holds": None if kkt is None else bool(kkt <= 1e-6), "max_residual": kkt}
    return rep
