r"""Strategy-proofness as a search for a profitable lie (docs/verification.md; [TSFER] Def. 5, [PSDSF]
§III-B).

SP cannot be proven by looking at one allocation. The search re-runs the mechanism that produced the
result (same parameters) on instances where one user misreports, and values what the liar receives by
what it can *really* run with it:

.. math::

    U_n(a'_n) = \min\Big(T_n,\ \max \sum_i y_i \ \text{ s.t. } y_i \le x'_{n,i} \min_{r:\,d_{n,r}>0}
    \frac{d'_{n,r}}{d_{n,r}} \ (\delta_{n,i}=1),\ \text{external: } \sum_{i\in S_e} y_i d_{n,e} \le
    \sum_{i \in S_e} x'_{n,i} d'_{n,e}\Big)

— the envy value of docs/verification.md applied to the bundle bought with the reported demand ``d'``
(:func:`~fairalloc.verify.fairness.bundle_value`; on the time-shared form ``x'_{n,i}`` tasks at the
reported rate ``γ'`` are the time fraction ``x'_{n,i}/γ'_{n,i}``, worth ``γ_{n,i}`` tasks per unit).
The gain of a lie is ``(U_n(a'_n) − min(X_n, T_n)) / min(X_n, T_n)`` against the result's own
allocation; a lie is *profitable* when its gain exceeds ``tol``.

Lies tried for each user (:func:`candidate_lies`):

- ``scale``: one demanded resource (server or external) reported ×0.5, ×0.8, ×1.25 or ×2;
- ``inflate``: every non-dominant resource raised towards the global dominant share
  (``d'_r = max(d_r, f·κ_n c_r)``, ``f ∈ {0.5, 1}``; with ``target="all"`` also resources it does not
  use) — the classic manipulation of DRF-like mechanisms;
- ``drop``: one eligible server reported ineligible (a misreported placement constraint, [PSDSF] §III-B);
- time-shared form: ``rate`` (one server's rate ×0.5 … ×2) and ``drop``;
- ``perturb``: every demand (or rate) multiplied by an independent factor ``e^{U(−0.7, 0.7)}``.

Weights and task limits are not lied about: weights are set by the operator, and reporting a larger
task limit cannot raise a utility capped at the true one. The candidates are shuffled per user with
``seed`` and tried round-robin over the users, so a budget smaller than the list still reaches everyone.
The cost is bounded by ``budget`` re-solves and ``time_limit`` seconds; the report says how many lies
were tried, how many of them failed and why the search stopped.

A lie the mechanism rejects — it raises (an instance it does not support, a user-written mechanism that
assumes every eligible server stays eligible, a ``customize`` hook naming a pair the lie removed) or it
does not reach ``optimal``/``converged`` — is a *failed* lie: counted, its reason kept in ``failures``,
never a crash of the search. Only evaluated lies decide ``holds``.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fairalloc.errors import FairallocError
from fairalloc.instance import Instance
from fairalloc.result import Result
from fairalloc.verify.fairness import bundle_value

__all__ = ["Lie", "candidate_lies", "liar_utility", "search_order", "strategy_proof", "summary"]

log = logging.getLogger(__name__)

FACTORS = (0.5, 0.8, 1.25, 2.0)
INFLATE = (0.5, 1.0)
PERTURB = 3  # random perturbations per user
REPORT_ONLY = {"gains": False}  # parameters that only add to the report; off for the re-solves


@dataclass(frozen=True)
class Lie:
    """One user's misreport. ``kind`` is ``scale``, ``inflate``, ``drop``, ``rate`` or ``perturb``;
    ``target`` a resource (``scale``), a server (``drop``, ``rate``) or ``demanded``/``all``
    (``inflate``); ``factor`` the multiplier; ``seed`` the random vector of ``perturb``."""

    user: str
    kind: str
    target: str | None = None
    factor: float | None = None
    seed: int | None = None

    def describe(self) -> str:
        if self.kind == "scale":
            return f"{self.user} reports {self.factor:g}× its {self.target} demand"
        if self.kind == "inflate":
            what = "every other resource" if self.target == "all" else "its non-dominant resources"
            return f"{self.user} inflates {what} to {self.factor:g}× its dominant share"
        if self.kind == "drop":
            return f"{self.user} reports it cannot run on {self.target}"
        if self.kind == "rate":
            return f"{self.user} reports {self.factor:g}× its rate on {self.target}"
        return f"{self.user} reports every demand times a random factor (seed {self.seed})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None} | {"description": self.describe()}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Lie:
        return cls(**{k: doc[k] for k in ("user", "kind", "target", "factor", "seed") if k in doc})

    def apply(self, inst: Instance) -> Instance:
        """``inst`` with this user's report replaced (validated: an impossible report raises
        :class:`~fairalloc.errors.InstanceError`)."""
        n = inst.users.index(self.user)
        if inst.time_shared:
            rates = np.array(inst.rates, copy=True)
            elig = np.array(inst.eligible, copy=True)
            if self.kind == "rate":
                rates[n, inst.servers.index(self.target)] *= self.factor
            elif self.kind == "drop":
                elig[n, inst.servers.index(self.target)] = False
            elif self.kind == "perturb":
                rates[n] *= np.exp(np.random.default_rng(self.seed).uniform(-0.7, 0.7, inst.n_servers))
            else:
                raise ValueError(f"lie {self.kind!r} does not apply to the time-shared form")
            return inst.replace(rates=rates, eligible=elig)
        d = np.array(inst.demand, copy=True)
        e = np.array(inst.external_demand, copy=True)
        elig = np.array(inst.eligible, copy=True)
        R = len(inst.resources)
        if self.kind == "scale":
            if self.target in inst.resources:
                d[n, inst.resources.index(self.target)] *= self.factor
            else:
                e[n, inst.external.index(self.target)] *= self.factor
        elif self.kind == "inflate":
            full = np.concatenate([d[n], e[n]])
            level = self.factor * inst.dominant_coeff[n] * inst.total_capacity
            keep = full > 0 if self.target != "all" else np.ones_like(full, bool)
            full = np.where(keep, np.maximum(full, level), full)
            d[n], e[n] = full[:R], full[R:]
        elif self.kind == "drop":
            elig[n, inst.servers.index(self.target)] = False
        elif self.kind == "perturb":
            f = np.exp(np.random.default_rng(self.seed).uniform(-0.7, 0.7, R + len(inst.external)))
            d[n] *= f[:R]
            e[n] *= f[R:]
        else:
            raise ValueError(f"lie {self.kind!r} does not apply to the capacity form")
        return inst.replace(demand=d, external_demand=e, eligible=elig)


def candidate_lies(inst: Instance, n: int, rng: np.random.Generator) -> list[Lie]:
    """Every structured lie of user ``n`` (module docstring) plus ``PERTURB`` random ones, shuffled."""
    u = inst.users[n]
    out: list[Lie] = []
    runnable = [inst.servers[i] for i in np.flatnonzero(inst.runnable[n])]
    if len(runnable) > 1:
        out += [Lie(u, "drop", s) for s in runnable]
    if inst.time_shared:
        out += [Lie(u, "rate", s, f) for s in runnable for f in FACTORS]
    else:
        demanded = [r for r, v in zip(inst.all_resources, inst.all_demand[n]) if v > 0]
        out += [Lie(u, "scale", r, f) for r in demanded for f in FACTORS]
        out += [Lie(u, "inflate", "demanded", f) for f in INFLATE]
        if len(demanded) < len(inst.all_resources):
            out += [Lie(u, "inflate", "all", f) for f in INFLATE]
    out += [Lie(u, "perturb", seed=int(s)) for s in rng.integers(0, 2**31 - 1, PERTURB)]
    order = rng.permutation(len(out))
    return [out[k] for k in order]


def search_order(inst: Instance, seed: int = 0, users: list[str] | None = None) -> list[Lie]:
    """The lies of every user (or of ``users``), interleaved: first lie of each user (users in a
    seeded random order), then the second of each, …"""
    rng = np.random.default_rng(seed)
    idx = [inst.users.index(u) for u in users] if users else list(rng.permutation(inst.n_users))
    per_user = [candidate_lies(inst, int(n), rng) for n in idx]
    longest = max((len(v) for v in per_user), default=0)
    return [lies[k] for k in range(longest) for lies in per_user if k < len(lies)]


def liar_utility(inst: Instance, lie_inst: Instance, result: Result, user: str) -> float:
    """What ``user`` can truly run (capped at its task limit) with the bundle ``result`` gave it on the
    misreported ``lie_inst`` (both instances are pooled first when the result is on DRF's pool)."""
    from fairalloc.verify import allocation_for

    pinst, _ = allocation_for(inst, result)
    plie, xl = allocation_for(lie_inst, result)
    n = pinst.users.index(user)
    if pinst.time_shared:
        return bundle_value(pinst, n, xl[n], rates=np.where(plie.eligible[n], plie.rates[n], 0.0))
    return bundle_value(pinst, n, xl[n], demand=plie.demand[n], external_demand=plie.external_demand[n])


def _not_checkable(reason: str, **extra: Any) -> dict[str, Any]:
    return {"holds": None, "best_gain": None, "user": None, "lie": None, "lies_tried": 0,
            "reason": reason, **extra}


MAX_FAILURES = 5  # failed lies whose reason the report keeps


def summary(item: dict[str, Any]) -> str:
    """One line: how many lies were tried, evaluated, failed and skipped, and why the search stopped."""
    tried, failed = item.get("lies_tried", 0), item.get("lies_failed", 0)
    text = (f"{tried} lie(s) tried: {item.get('lies_evaluated', tried - failed)} evaluated, {failed} "
            "failed (rejected by the mechanism or not solved)")
    if item.get("lies_invalid"):
        text += f", {item['lies_invalid']} impossible report(s) skipped"
    if item.get("stopped"):
        text += f"; stopped: {item['stopped']}"
    if item.get("holds") is False:
        text += f"; profitable lie: {item['lie']['description']} (gain {item['best_gain']:.3g})"
    elif item.get("holds") is True:
        text += "; no profitable lie found"
    return text


def strategy_proof(inst: Instance, result: Result, *, seed: int = 0, budget: int = 48,
                   time_limit: float = 60.0, tol: float = 1e-6, lies: list[Lie] | None = None,
                   stop_at_first: bool = False, customize: Any = None,
                   progress: bool = False) -> dict[str, Any]:
    """Search for a profitable lie against ``result.mechanism`` (run with ``result.parameters`` and the
    ``customize`` hook the result was solved with, if any).

    Returns ``holds`` (``false`` once a lie gains more than ``tol``, ``true`` if none of the lies
    evaluated does — a search, not a proof — ``null`` when the mechanism cannot be re-run or no lie
    could be evaluated), ``best_gain`` (relative), ``best_gain_tasks``, the ``user``, the ``lie``
    (``kind``, ``target``, ``factor``, ``description``), ``truthful_utility`` and ``lie_utility``,
    ``per_user`` best gains, and the cost: ``lies_tried`` (re-solves made), ``lies_evaluated``,
    ``lies_failed`` (the mechanism rejected the report or did not reach optimal/converged; the first
    few reasons in ``failures``), ``lies_invalid`` (an impossible report, not re-solved), ``stopped``
    (``exhausted``, ``budget``, ``time_limit`` or ``found``) and a one-line ``summary``.
    ``progress=True`` shows a tqdm bar on stderr.
    """
    from fairalloc.api import solve
    from fairalloc.registry import get_mechanism
    from fairalloc.verify import allocation_for

    if not result.mechanism:
        return _not_checkable("the result names no mechanism to re-run (an allocation typed by hand)")
    try:
        mech = get_mechanism(result.mechanism)
        params = {k: v for k, v in mech.parse_params(dict(result.parameters)).items()}
    except FairallocError as exc:
        return _not_checkable(f"cannot re-run the mechanism: {exc}")
    params.update({k: v for k, v in REPORT_ONLY.items() if k in params})
    pinst, x = allocation_for(inst, result)
    truth = np.minimum(x.sum(axis=1), pinst.tasks)
    order = lies if lies is not None else search_order(inst, seed)
    t0 = time.perf_counter()
    evaluated = failed = invalid = 0
    failures: list[dict[str, str]] = []
    best: dict[str, Any] | None = None
    per_user: dict[str, float] = {}
    stopped = "exhausted"

    def fail(lie: Lie, why: str) -> None:
        nonlocal failed
        failed += 1
        log.debug("lie %s failed: %s", lie.describe(), why)
        if len(failures) < MAX_FAILURES:
            failures.append({"lie": lie.describe(), "reason": why})

    from tqdm.auto import tqdm

    bar = tqdm(total=min(budget, len(order)), desc=f"SP search ({mech.name})", unit="lie",
               disable=not progress, file=sys.stderr, leave=False, dynamic_ncols=True)
    try:
        for lie in order:
            if evaluated + failed >= budget:
                stopped = "budget"
                break
            remaining = time_limit - (time.perf_counter() - t0)
            if remaining <= 0:
                stopped = "time_limit"
                break
            try:
                lie_inst = lie.apply(inst)
            except (FairallocError, ValueError):
                invalid += 1
                continue
            bar.update(1)
            try:
                r = solve(lie_inst, mech.name, time_limit=remaining, customize=customize, **params)
            except Exception as exc:  # the mechanism rejects the report: a failed lie, not a crash
                fail(lie, f"{type(exc).__name__}: {exc}")
                continue
            if not r.ok:
                fail(lie, f"status {r.status.value}: {r.message}")
                continue
            n = pinst.users.index(lie.user)
            try:
                got = liar_utility(inst, lie_inst, r, lie.user)
            except Exception as exc:  # a result that does not fit the instance (a custom mechanism)
                fail(lie, f"result not comparable: {type(exc).__name__}: {exc}")
                continue
            evaluated += 1
            gain_tasks = got - float(truth[n])
            gain = gain_tasks / truth[n] if truth[n] > 0 else (math.inf if gain_tasks > tol else 0.0)
            per_user[lie.user] = float(max(per_user.get(lie.user, -math.inf), gain))
            if best is None or gain > best["best_gain"]:
                best = {"best_gain": float(gain), "best_gain_tasks": float(gain_tasks),
                        "user": lie.user, "lie": lie.to_dict(), "truthful_utility": float(truth[n]),
                        "lie_utility": float(got),
                        "reported_tasks": float(r.tasks[r.users.index(lie.user)])}
            bar.set_postfix_str(f"failed {failed}, best gain {best['best_gain']:.3g}", refresh=False)
            if stop_at_first and gain > tol:
                stopped = "found"
                break
    finally:
        bar.close()
    tried = evaluated + failed
    seconds = time.perf_counter() - t0
    cost = {"lies_tried": tried, "lies_evaluated": evaluated, "lies_failed": failed,
            "lies_invalid": invalid, "failures": failures, "budget": budget,
            "time_limit": time_limit, "seconds": round(seconds, 3), "stopped": stopped, "seed": seed,
            "mechanism": mech.name, "per_user": per_user}
    if best is None:
        out = _not_checkable("no lie could be evaluated (every re-solve failed or was invalid)", **cost)
        out["summary"] = summary(out)
        return out
    holds = bool(best["best_gain"] <= tol)
    log.info("SP search on %s: %d lies (%d failed), best gain %.3g (%s)", mech.name, tried, failed,
             best["best_gain"], best["lie"]["description"])
    out = {"holds": holds, **best, **cost,
           "note": "a search over misreports, not a proof: holds=true means no lie evaluated was profitable"}
    out["summary"] = summary(out)
    return out
