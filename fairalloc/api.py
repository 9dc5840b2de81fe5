"""The single entry point: ``solve(instance, mechanism, **params) -> Result``.

>>> from fairalloc import solve, Instance
>>> inst = Instance.from_arrays(capacity=[[9, 18]], demand=[[1, 4], [3, 1]])
>>> r = solve(inst, "drf")
>>> r.status.value, r.tasks.round(6).tolist()
('optimal', [3.0, 2.0])
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from pyomo.common.gc_manager import PauseGC

from fairalloc.errors import ParameterError
from fairalloc.instance import Instance
from fairalloc.io import load_instance
from fairalloc.partition import take_params as take_partition_params
from fairalloc.registry import get_mechanism
from fairalloc.result import Result, snap_zeros
from fairalloc.solvers import Session
from fairalloc.status import Status
from fairalloc.verify.feasibility import into_rows
from fairalloc.versions import versions

__all__ = ["as_instance", "solve"]

log = logging.getLogger(__name__)


def as_instance(instance: Instance | str | os.PathLike[str]) -> Instance:
    return instance if isinstance(instance, Instance) else load_instance(instance)


def _guard_feasibility(inst: Instance, sol: Any, x: Any, customize: Any) -> None:
    """A result marked ``optimal``/``converged`` must be feasible for the instance, each row to 1e-6 of its
    own bound. A solver may meet a badly scaled row only by a tiny negative entry on a column with a
    huge coefficient (``x = −2·10⁻⁹`` times a demand of 8·10⁴ frees room another user then takes);
    reported with that entry at 0, the row is over. Such a point is not a certified answer: the status
    becomes ``error``, naming the row. (Not for edited models, whose hook may change χ.)"""
    if not sol.status.ok or customize is not None or sol.servers is not None \
            or x.shape != (inst.n_users, inst.n_servers):
        return
    from fairalloc.verify.feasibility import feasibility

    feas = feasibility(inst, x)
    if not feas["holds"]:
        sol.status = Status.ERROR
        sol.message = (f"the solver's point violates {feas['worst_row']} by "
                       f"{feas['max_relative_violation']:.2g} of its bound (solver tolerances on a "
                       "badly scaled LP); try another --solver. " + sol.message).strip()


def _user_scale(inst: Instance, sol: Any) -> np.ndarray | None:
    """η per user when the allocation is on the instance's servers (else each row's largest entry)."""
    if sol.allocation.shape != (inst.n_users, inst.n_servers):
        return None
    return np.maximum(np.asarray(inst.eta, float), np.abs(sol.allocation).max(axis=1, initial=0.0))


def solve(instance: Instance | str | os.PathLike[str], mechanism: str, *, solver: str | None = None,
          time_limit: float | None = None, solver_options: dict[str, Any] | None = None,
          verify: bool = False, customize: Callable[[Any, Instance], Any] | None = None,
          **params: Any) -> Result:
    """Run ``mechanism`` on ``instance`` through the solve layer.

    ``params`` are the mechanism's parameters (strings as from the CLI, or Python values);
    ``solver`` names a solver from ``fairalloc solvers``; ``time_limit`` (seconds) bounds every solve
    the mechanism makes together. ``verify=True`` embeds the verification report.

    ``customize(model, instance)`` edits the mechanism's Pyomo model after the mechanism built it and
    before its algorithm runs (add a constraint, change a bound or the objective): it is called once
    on every model the mechanism solves — the one model of an LP/MILP/NLP mechanism, the persistent
    model of progressive filling and of Algorithm 1, each server's model of the per-server loops.
    The component names are in ``docs/customize.md`` (``model.chi.x[user, server]``, ``model.chi.X``,
    ``model.share``, …). A mechanism that builds no Pyomo model (``tsf-er-online``) raises a
    :class:`~fairalloc.errors.ParameterError`, as does one whose run never opened a model.
    The verification report (``verify=True``) still checks the instance's own properties.

    Bad input raises :class:`~fairalloc.errors.FairallocError`; a solver that fails or stops early
    gives a :class:`Result` whose ``status`` says so.
    """
    t0 = time.perf_counter()
    inst = as_instance(instance)
    t_load = time.perf_counter() - t0
    mech = get_mechanism(mechanism)
    part = take_partition_params(params)
    if part.get("k", 1) > 1:  # POP-style partitioned solve: an approximation, see fairalloc.partition
        if customize is not None:
            raise ParameterError("customize: not with -p partitions (the hook would see each part)")
        from fairalloc.partition import solve_partitioned

        result = solve_partitioned(inst, mech.name, part.pop("k"), **part, solver=solver,
                                   time_limit=time_limit, solver_options=solver_options, **params)
        if verify:
            from fairalloc.verify import verify as run_verify

            result.verification = run_verify(inst, result).to_dict()
        return result
    values = mech.parse_params(params)
    if mech.needs_demands:
        inst.require_demands(mech.name)
    if not mech.supports_budgets:
        inst.require_no_budgets(mech.name)
    if customize is not None and mech.problem not in ("lp", "milp", "nlp"):
        raise ParameterError(f"customize: mechanism {mech.name!r} builds no Pyomo model (it is a "
                             "combinatorial procedure), so there is nothing for the hook to edit")
    session = Session(solver=solver, time_limit=time_limit, options=solver_options,
                      customize=customize, instance=inst)
    session.check(mech.problem)
    log.info("%s on %r (%d users, %d servers)", mech.name, inst.name, inst.n_users, inst.n_servers)
    t1 = time.perf_counter()
    with PauseGC():  # model building allocates ~10⁶ objects; collect once, at the end
        sol = mech.solve(inst, session, **values)
    t_mech = time.perf_counter() - t1
    if customize is not None and not session.customized:
        raise ParameterError(f"customize: {mech.name} with {values} solved no Pyomo model the hook "
                             "could edit (this algorithm works on arrays); choose a model-based "
                             "algorithm or drop customize")
    if customize is not None:  # the result says it is not the mechanism as published
        sol.details = {**sol.details, "customize": {
            "hook": getattr(customize, "__qualname__", repr(customize)),
            "models": session.customized}}
    st = session.stats
    on_servers = sol.allocation.shape == (inst.n_users, inst.n_servers)
    allocation = snap_zeros(sol.allocation, sol.zero_tol, _user_scale(inst, sol),
                            np.where(inst.runnable, inst.gamma, np.inf) if on_servers else None)
    if sol.status.ok and customize is None and sol.servers is None:
        # a vertex within the solver's tolerance of χ, held in it exactly (verify.feasibility.into_rows)
        allocation, overrun = into_rows(inst, allocation)
        if overrun > 0:
            sol.details = {**sol.details, "overrun_removed": overrun}
    _guard_feasibility(inst, sol, allocation, customize)
    result = Result(
        instance=inst.name, mechanism=mech.name, status=sol.status, users=inst.users,
        servers=sol.servers or inst.servers, allocation=allocation,
        message=sol.message, parameters=values,
        solver={"name": st.solver or "none", "solves": st.solves, "iterations": st.iterations,
                "seconds": round(st.solve_seconds, 6), "max_kkt_residual": st.max_kkt,
                "max_kkt_relative": st.max_kkt_relative,
                "versions": versions(nlp="ipopt" in (st.solver or ""))},
        timings={"load": t_load, "build": max(0.0, t_mech - st.solve_seconds - st.load_seconds
                                              - st.build_seconds),
                 "translate": st.build_seconds, "solve": st.solve_seconds,
                 "solution_load": st.load_seconds, "total": time.perf_counter() - t0},
        details=sol.details)
    if verify:
        from fairalloc.verify import verify as run_verify

        t2 = time.perf_counter()
        result.verification = run_verify(inst, result, customize=customize).to_dict()
        result.timings["verify"] = time.perf_counter() - t2
    log.info("%s: %s in %.3f s (%d solves)", mech.name, result.status.value,
             result.timings["total"], st.solves)
    return result
