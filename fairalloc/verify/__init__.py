r"""The verification layer (docs/verification.md): checks any allocation — from fairalloc, from another
tool, or typed
by hand — against χ, the fairness properties and the optimality conditions, reporting measures and
counterexamples, not just verdicts.

:func:`verify` returns a :class:`Report` whose items are keyed as in docs/cli.md:

- ``feasible`` — max violation of every row of χ (:mod:`.feasibility`);
- ``envy_free`` — MIN-EF-SAT and the most envious pair ([TSFER] Lemma 2, [PSDSF] (24); :mod:`.fairness`);
- ``sharing_incentive`` — MIN-SI-SAT under both definitions ([APF]/[PSDSF]; [TSFER] Def. 6);
- ``pareto`` — domination factor and a dominating allocation, one LP over χ (:mod:`.pareto`);
- ``strategy_proof`` — the most profitable misreport found by re-running the mechanism (:mod:`.strategy`);
- ``bottleneck_fair`` — premise of [APF] Def. 2, gap from max-min fairness in ``ρ`` (:mod:`.bottleneck`);
- ``psdsf_certificate`` — [PSDSF] Thm 1: (user, server) pairs without a bottleneck resource;
- ``kkt`` — the worst KKT residual of the mechanism's LP/NLP solves (the result's ``solver`` block);
- ``nash`` — NCP residual, Ψ and best-response gains of an αPF-VDS result
  (:func:`~fairalloc.models.apf_vds.nash_conditions`).

Every item carries ``holds``: ``true``, ``false``, or ``null`` when its premise is absent or it cannot
be checked (then a ``reason`` says why).

>>> import numpy as np
>>> from fairalloc import Instance
>>> inst = Instance.from_arrays(capacity=[[9, 18]], demand=[[1, 4], [3, 1]], resources=["cpu", "mem"])
>>> rep = verify(inst, np.array([[3.0], [2.0]]))
>>> rep["feasible"]["holds"], rep["envy_free"]["holds"], rep["pareto"]["domination_factor"]
(True, True, 1.0)
>>> rep["strategy_proof"]["holds"] is None    # an allocation without a mechanism to re-run
True
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairalloc.errors import FairallocError, ParameterError
from fairalloc.instance import Instance
from fairalloc.result import Result, ResultError
from fairalloc.status import Status
from fairalloc.verify.bottleneck import bottleneck_fair
from fairalloc.verify.fairness import SI_DEFINITIONS, envy_free, sharing_incentive
from fairalloc.verify.feasibility import feasibility, usage
from fairalloc.verify.pareto import pareto
from fairalloc.verify.psdsf import psdsf_certificate
from fairalloc.verify.strategy import strategy_proof

__all__ = ["ITEMS", "SI_OF_MECHANISM", "Report", "allocation_for", "bottleneck_fair", "envy_free",
           "feasibility", "kkt_item", "nash_item", "pareto", "psdsf_certificate", "read_result",
           "result_from_doc", "sharing_incentive", "strategy_proof", "usage", "verify"]

ITEMS = ("feasible", "envy_free", "sharing_incentive", "pareto", "strategy_proof", "bottleneck_fair",
         "psdsf_certificate", "kkt", "nash")

# The sharing-incentive definition of each mechanism's own paper: [TSFER] Def. 6 for the mechanisms
# [TSFER] defines or compares (§3–4), the [APF]/[PSDSF] uniform split for the others and for
# allocations that name no mechanism.
SI_OF_MECHANISM = {m: "tsfer" for m in ("tsf-er", "tsf-er-online", "drf-er", "cru", "mnw", "utilitarian",
                                        "relative-utilitarian", "drf-alpha", "tsf-alpha")}

KKT_TOL = 1e-6  # relative to the data's scale (max(1, largest capacity, largest X))


@dataclass
class Report:
    """The verification report: ``items`` maps each item name of :data:`ITEMS` to its dict."""

    instance: str
    mechanism: str
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __getitem__(self, key: str) -> dict[str, Any]:
        return self.items[key]

    def __contains__(self, key: object) -> bool:
        return key in self.items

    def to_dict(self) -> dict[str, Any]:
        """The report as docs/cli.md prints it: one key per item (JSON-ready: ``inf`` as a string)."""
        from fairalloc.result import _jsonable

        return _jsonable(self.items)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_frame(self) -> pd.DataFrame:
        """One row per item: ``property``, ``holds`` and its scalar measures as text."""
        rows = []
        for name, item in self.items.items():
            measure = {k: (len(v) if isinstance(v, list) else v) for k, v in item.items()
                       if k not in {"holds", "reason", "note"} and not isinstance(v, dict)}
            rows.append({"property": name, "holds": item.get("holds"),
                         "measure": ", ".join(f"{k}={_short(v)}" for k, v in measure.items()),
                         "reason": item.get("reason", "")})
        return pd.DataFrame(rows)

    def failed(self) -> list[str]:
        """The items whose ``holds`` is ``false``."""
        return [k for k, v in self.items.items() if v.get("holds") is False]


def _short(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def allocation_for(inst: Instance, result: Result) -> tuple[Instance, np.ndarray]:
    """The instance the allocation lives on (the pooled one for DRF, whose single server keeps its name
    when the instance has one server: external resources are pooled all the same) and ``x`` aligned
    with it."""
    lone_pool = (result.mechanism == "drf" and inst.n_servers == 1 and bool(inst.external)
                 and result.servers == inst.servers)
    if (result.servers == ("pool",) and inst.servers != ("pool",)) or lone_pool:
        inst = inst.pooled()
    unknown_s = [s for s in result.servers if s not in inst.servers]
    unknown_u = [u for u in result.users if u not in inst.users]
    if unknown_s or unknown_u:
        what = ", ".join(([f"servers {unknown_s}"] if unknown_s else [])
                         + ([f"users {unknown_u}"] if unknown_u else []))
        raise ResultError(f"result names {what} not in instance {inst.name!r} "
                          f"(users: {list(inst.users)}; servers: {list(inst.servers)})")
    x = np.zeros((inst.n_users, inst.n_servers))
    ui = [inst.users.index(u) for u in result.users]
    si = [inst.servers.index(s) for s in result.servers]
    x[np.ix_(ui, si)] = result.allocation
    return inst, x


_DOC_FIELDS = {"instance": str, "mechanism": str, "status": str, "message": str, "parameters": Mapping,
               "tasks": Mapping, "solver": Mapping, "timings": Mapping, "details": Mapping}


def result_from_doc(doc: Any) -> Result:
    """A :class:`Result` from a result document, checking the fields :meth:`Result.from_dict` trusts:
    only ``allocation`` is required (a result typed by hand)."""
    if not isinstance(doc, Mapping):
        raise ResultError(f"result: expected a JSON object, got {type(doc).__name__}")
    for key, typ in _DOC_FIELDS.items():
        if key in doc and doc[key] is not None and not isinstance(doc[key], typ):
            want = "an object" if typ is Mapping else "a string"
            raise ResultError(f"result.{key} = {doc[key]!r}: expected {want}")
    if "allocation" not in doc:
        raise ResultError("result.allocation: missing (expected {user: {server: tasks}})")
    clean = {k: v for k, v in doc.items() if v is not None}
    return Result.from_dict(clean)


def read_result(path: str | os.PathLike[str]) -> Result:
    """Read a result JSON file (from ``fairalloc solve``, another tool, or typed by hand)."""
    p = Path(path)
    if not p.is_file():
        raise ResultError(f"{path}: no such result file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultError(f"{path}: cannot read the result ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: not valid JSON ({exc})") from None
    return result_from_doc(doc)


def _as_result(inst: Instance, allocation: Any) -> Result:
    """A :class:`Result` from a Result, a result document (mapping), a JSON file path or an array."""
    if isinstance(allocation, Result):
        return allocation
    if isinstance(allocation, Mapping):
        return result_from_doc(allocation)
    if isinstance(allocation, (str, os.PathLike)):
        return read_result(allocation)
    x = np.asarray(allocation, float)
    if x.shape != (inst.n_users, inst.n_servers):
        raise ResultError(f"allocation: expected an array of shape (users, servers) = "
                          f"({inst.n_users}, {inst.n_servers}), got {x.shape}")
    if not np.isfinite(x).all() or (x < 0).any():
        raise ResultError("allocation: entries must be finite numbers >= 0")
    return Result(instance=inst.name, mechanism="", status=Status.OPTIMAL, users=inst.users,
                  servers=inst.servers, allocation=x)


def si_item(inst: Instance, x: np.ndarray, mechanism: str, definition: str | None = None
            ) -> dict[str, Any]:
    """``sharing_incentive``: both definitions in full under their own keys; ``holds``/``min_si_sat``
    at the top for ``definition`` (default: the mechanism's own paper, :data:`SI_OF_MECHANISM`)."""
    definition = definition or SI_OF_MECHANISM.get(mechanism, "apf")
    if definition not in SI_DEFINITIONS:
        raise ParameterError(f"--si {definition!r}: expected one of {', '.join(SI_DEFINITIONS)}")
    both = {d: sharing_incentive(inst, x, d) for d in SI_DEFINITIONS}
    top = both[definition]
    return {"holds": top["holds"], "min_si_sat": top["min_si_sat"], "definition": definition, **both}


def kkt_item(inst: Instance, x: np.ndarray, result: Result) -> dict[str, Any]:
    """``kkt``: the worst KKT residual over every LP/NLP solve of the mechanism (computed by the solve
    layer from the model and the solver's multipliers, :mod:`fairalloc.solvers.kkt`). Holds where it is
    within ``KKT_TOL`` of the data's scale, or where every solve's residual is within ``KKT_TOL`` of that
    solve's own scale ``max(1, ‖∇f‖∞, ‖y‖∞)`` (``max_relative``; Ipopt's normalisation: an interior
    point's complementarity ends near the barrier parameter times the multipliers, 2.3e-4 with
    multipliers of 1.6e4 on a Nash-welfare solve whose data scale was 158). ``null`` when the result
    carries none (typed by hand; no LP/NLP solves)."""
    solver = result.solver or {}
    res = solver.get("max_kkt_residual")
    rel = solver.get("max_kkt_relative")
    scale = max(1.0, float(np.max(inst.capacity, initial=0.0)), float(x.sum(axis=1).max(initial=0.0)))
    item: dict[str, Any] = {"holds": None, "max_residual": res, "scale": scale, "max_relative": rel,
                            "solves": solver.get("solves")}
    if res is None or (isinstance(res, float) and math.isnan(res)):
        item["reason"] = ("the result carries no KKT residuals (typed by hand, or no LP/NLP solve "
                          "reported multipliers)")
        return item
    item["holds"] = bool(float(res) <= KKT_TOL * scale
                         or (isinstance(rel, (int, float)) and float(rel) <= KKT_TOL))
    if isinstance(result.details.get("kkt"), Mapping):
        item["last_solve"] = dict(result.details["kkt"])
    return item


def nash_item(inst: Instance, x: np.ndarray, result: Result, tol: float = 1e-6) -> dict[str, Any]:
    """``nash`` for an αPF-VDS result: NCP residual ``max |min(z, F(z))|`` of (28)–(31) and its
    dimensionless form, Ψ of (35)–(37) and every server's exact best-response gain
    (:func:`~fairalloc.models.apf_vds.nash_conditions`, with the result's ``alpha``, ``A``, ``B``).
    ``holds`` when the scaled residual and every server's relative gain are within ``tol`` — both are
    free of the units of tasks, resources and utility (the absolute residual is not: at ``α = 8`` the
    marginals ``z^{-α}`` span many orders of magnitude)."""
    base: dict[str, Any] = {"holds": None, "ncp_residual": None, "ncp_residual_scaled": None, "psi": None,
                            "best_response_gain": None, "relative_gain": None}
    if result.mechanism != "apf-vds":
        return {**base, "reason": "not an apf-vds result: the Nash conditions are those of the αPF-VDS "
                                  "server game ([APF] §4)"}
    from fairalloc.models.apf_vds import nash_conditions, utility_parameters

    p = result.parameters or {}
    try:
        a, A, B = utility_parameters(inst, p.get("alpha", 1.0), p.get("A"), p.get("B"))
        mult = (result.details or {}).get("multipliers")
        nash = nash_conditions(inst, x, a.tolist(), A.tolist(), B.tolist(),
                               witness=dict(mult) if isinstance(mult, Mapping) else None)
    except FairallocError as exc:
        return {**base, "reason": f"cannot evaluate the Nash conditions: {exc}"}
    res_ok = nash["ncp_residual_scaled"] <= tol
    gain_ok = nash["relative_gain"] is None or nash["relative_gain"] <= tol
    return {"holds": bool(res_ok and gain_ok), **{k: nash[k] for k in base if k != "holds"},
            "per_server_gain": nash["per_server_gain"], "alpha": a.tolist()}


def _psdsf_item(inst: Instance, x: np.ndarray) -> dict[str, Any]:
    # task limits: a user at its limit has it as its bottleneck; an external resource is a row of every
    # server in its scope (the generalised game, fairalloc.verify.psdsf)
    return psdsf_certificate(inst, x)


def verify(instance: Instance | str | os.PathLike[str], allocation: Any, *, si: str | None = None,
           sp: bool = True, seed: int = 0, sp_budget: int = 48, sp_time_limit: float = 60.0,
           items: tuple[str, ...] | None = None, customize: Any = None, progress: bool = False
           ) -> Report:
    """Check ``allocation`` on ``instance`` and return the :class:`Report`.

    ``allocation``: a :class:`Result`, a result document (a mapping as ``fairalloc solve`` writes it,
    or typed by hand: only ``allocation`` is required), a path to one, or an array ``x[n, i]``.
    ``si`` picks the sharing-incentive definition reported at the top (default: the mechanism's own
    paper). The strategy-proofness search re-runs the result's mechanism on at most ``sp_budget``
    misreports within ``sp_time_limit`` seconds, seeded by ``seed`` (``sp=False`` skips it).
    ``items`` restricts the report to some of :data:`ITEMS` (the others report ``holds: null``).
    ``customize`` is the hook the result was solved with (``fairalloc.solve(..., customize=fn)``): the
    search re-runs the mechanism with it. ``progress=True`` shows the search's progress bar on stderr.

    Bad input (an instance or result that does not parse, names that are not in the instance) raises
    :class:`~fairalloc.errors.FairallocError`; a property that fails is a verdict, never an error.
    """
    from fairalloc.api import as_instance

    inst = as_instance(instance)
    result = _as_result(inst, allocation)
    pinst, x = allocation_for(inst, result)
    mech = result.mechanism
    wanted = set(items or ITEMS)
    unknown = wanted - set(ITEMS)
    if unknown:
        raise ParameterError(f"items {sorted(unknown)}: unknown (known: {', '.join(ITEMS)})")
    if si is not None and si not in SI_DEFINITIONS:
        raise ParameterError(f"si {si!r}: expected one of {', '.join(SI_DEFINITIONS)}")
    rep = Report(instance=inst.name, mechanism=mech)
    checks = {
        "feasible": lambda: feasibility(pinst, x),
        "envy_free": lambda: envy_free(pinst, x),
        "sharing_incentive": lambda: si_item(pinst, x, mech, si),
        "pareto": lambda: pareto(pinst, x),
        "strategy_proof": lambda: (strategy_proof(inst, result, seed=seed, budget=sp_budget,
                                                  time_limit=sp_time_limit, customize=customize,
                                                  progress=progress) if sp else
                                   {"holds": None, "best_gain": None, "user": None, "lie": None,
                                    "lies_tried": 0, "reason": "skipped (sp=False / --no-sp)"}),
        "bottleneck_fair": lambda: bottleneck_fair(pinst, x),
        "psdsf_certificate": lambda: _psdsf_item(pinst, x),
        "kkt": lambda: kkt_item(pinst, x, result),
        "nash": lambda: nash_item(pinst, x, result),
    }
    for name in ITEMS:
        t0 = time.perf_counter()
        rep.items[name] = checks[name]() if name in wanted else {"holds": None, "reason": "not requested"}
        rep.timings[name] = time.perf_counter() - t0
    return rep


class _CallableModule(types.ModuleType):
    """``fairalloc.verify(instance, allocation, ...)`` is :func:`verify` (issue 5's spelling), while
    ``from fairalloc.verify import verify`` and the item modules keep working."""

    def __call__(self, *args: Any, **kwargs: Any) -> Report:
        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
