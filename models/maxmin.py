r"""Weighted lexicographic max-min by progressive filling (docs/mechanisms/index.md#decisions,
"Lexicographic max-min").

Given a linear share function per user, ``share[n](x)`` (already divided by the weight:
``κ_n X_n/φ_n`` for DRFH, ``X_n/(φ_n γTSF_n)`` for TSF, ``X_n/(φ_n η_n)`` for TSF-ER), the allocation
maximises the smallest share, then the second smallest, and so on. Each round solves

.. math::

    \max_{x \in \chi,\ t} \ t \quad\text{s.t.}\quad
        \mathrm{share}_n(x) \ge t \ \ (n \text{ active}), \qquad
        \mathrm{share}_n(x) \ge \ell_n \ \ (n \text{ frozen at level } \ell_n)

and freezes every active user that cannot rise above ``t*`` while the others keep ``t*``. Such users
are read from the duals of the ``level`` rows: ``t*(b)`` is concave in the right-hand sides, so a
non-zero multiplier on user ``n``'s row means raising ``n`` alone lowers ``t*`` — ``n`` is blocked.
The multipliers of the active rows sum to one (stationarity in ``t``), so each round freezes at least
one user and the loop ends after at most ``|N|`` LPs. When a solver returns no duals (SCIP), each
candidate is tested with one LP (``max share_n`` with the others held at ``t*``); a rise below
``PROBE_TOL`` (relative) is within the solver's tolerance and counts as blocked.

On wide LPs (``INTERIOR_ABOVE`` columns; the HiGHS bridge's ``interior`` option) every round that is
not sifted (under ``sifting=auto`` the first is, a vertex) is solved by an interior-point method
without crossover. Its multipliers are then strictly complementary rather than a vertex's, and
:func:`interior_blocked` reads the blocked users from them — a user is blocked when its multiplier's
share of their sum exceeds its relative slack — provided every user is separated by a factor
``SEPARATION``; otherwise the round is solved again for a vertex (``docs/solvers.md``, "Interior
points").

The loop does not stop after the first level: a user blocked by a resource it alone uses is frozen
there and the others keep rising. All rounds re-solve one persistent model: freezing deactivates a
``level`` row and sets a mutable ``floor`` parameter, which the solve layer pushes as bound changes.
A frozen user's share is read from the solver's activity of its ``level`` row when the handle reports
activities (evaluating ``share[n]`` through Pyomo would walk all of the user's terms).
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyomo.environ as pyo

from fairalloc.instance import Instance
from fairalloc.models.feasible import feasible_set
from fairalloc.solvers import Session
from fairalloc.solvers.canonical import RULE
from fairalloc.status import Status, worst

__all__ = ["SHRINKS", "MaxMinOutcome", "add_maxmin", "canonical_split", "leximin_model",
           "progressive_filling", "tiebreak_shrinking"]

log = logging.getLogger(__name__)

PROBE_TOL = 1e-6  # relative rise of a probed user's share that still counts as blocked
#: a user is blocked where its level row's multiplier (the active rows' sum to one) is above this:
#: 100x the bridge's dual tolerance (1e-9). At 1e-9 a restated fuzz instance froze a user whose
#: multiplier was 1.25e-9, noise, at 1e-4 of the level it reaches (tsf, `wide_instance(143)`); a
#: blocked user missed by the threshold is frozen by the next round or by the probe LPs
DUAL_TOL = 1e-7
SEPARATION = 1e3  # interior multipliers: each user's dual share and relative slack this far apart


def interior_blocked(y: np.ndarray, slack: np.ndarray, t: float) -> tuple[np.ndarray | None, float]:
    """Blocked users from an interior (not a vertex) optimum of one round, by strict complementarity.

    At the analytic centre of the optimal faces every active user has either a positive multiplier
    on its ``level`` row (some optimal dual prices it: it cannot rise) or a positive slack
    ``share/scale − t`` (some optimal allocation lifts it above ``t``), never both. ``y`` and
    ``slack`` are those, in the solver's units; they are compared as ``ỹ_n = |y_n|/Σ|y|`` (the
    multipliers sum to one at an exact optimum) against ``s̃_n = slack_n/t``. Returns the mask
    ``ỹ > s̃`` and the separation ``min_n max(ỹ_n, s̃_n)/min(ỹ_n, s̃_n)``, or ``(None, separation)``
    when some user is not separated by ``SEPARATION`` (its share sits within the solver's
    precision of the level in both senses: a vertex solve decides it)."""
    ya = np.abs(np.asarray(y, float))
    yt = ya / max(float(ya.sum()), 1e-300)
    st = np.maximum(np.asarray(slack, float), 0.0) / max(abs(t), 1e-300)
    hi, lo = np.maximum(yt, st), np.minimum(yt, st)
    with np.errstate(divide="ignore"):
        ratio = np.where(lo > 0, hi / np.where(lo > 0, lo, 1.0), np.inf)
    sep = float(ratio.min(initial=np.inf))
    if not sep >= SEPARATION or not (yt > st).any():
        return None, sep
    return yt > st, sep


def add_maxmin(m: pyo.ConcreteModel, share: Any, name: str = "maxmin", scale: float = 1.0) -> pyo.Block:
    """Add the max-min LP on top of ``share`` (an indexed Expression over users) to ``m``:
    ``t`` (the common level, in units of ``scale``), ``level[n]: share[n]/scale ≥ t``,
    ``floor[n]: share[n]/scale ≥ floor_level[n]/scale`` (inactive bound until ``n`` is frozen) and
    ``objective: max t``.

    ``scale`` (the mutable ``inv_scale = 1/scale``) puts the level near 1 in the solver's units: a level
    of 1e-11 shares would otherwise sit below every solver tolerance and read as 0 (a user whose share
    is tiny in every feasible allocation, e.g. one that can run only on a tiny server). Give an estimate
    of the first level (:func:`leximin_model` uses the equal split's smallest share); progressive
    filling re-scales between rounds when the level moves by more than 10³. Levels and floors are
    always read and set in the share's own units."""
    users = list(share.keys())
    blk = pyo.Block(concrete=True)
    m.add_component(name, blk)
    blk.t = pyo.Var(doc="common level of the active users, in units of 1/inv_scale")
    blk.inv_scale = pyo.Param(mutable=True, initialize=1.0 / scale if 0 < scale < math.inf else 1.0,
                              doc="1/(the level's order of magnitude): the rows' scale")
    blk.floor_level = pyo.Param(users, mutable=True, initialize=-math.inf, domain=pyo.Any,
                                doc="level at which a frozen user is held (-inf while active)")
    blk.level = pyo.Constraint(users, rule=lambda b, n: b.inv_scale * share[n] - b.t >= 0)
    blk.floor = pyo.Constraint(users, rule=lambda b, n: b.inv_scale * share[n]
                               >= b.inv_scale * b.floor_level[n])
    blk.objective = pyo.Objective(expr=blk.t, sense=pyo.maximize)
    return blk


def level_of(blk: pyo.Block) -> float:
    """The common level ``t`` of the last solve, in the share's units."""
    return float(pyo.value(blk.t)) / float(pyo.value(blk.inv_scale))


LEVEL_LIFTS = 3  # progressive filling: times a round that looked unbounded grows the level's unit 1e6-fold


def rescale(blk: pyo.Block, handle: Any, t: float) -> bool:
    """Put the next level near 1 in the solver's units when ``t`` (a level in share units) is more than
    10³ away from the current scale; push the changed coefficients. Returns whether it did."""
    inv = float(pyo.value(blk.inv_scale))
    if not (t > 0 and math.isfinite(t)) or 1e-3 <= t * inv <= 1e3:
        return False
    _set_inv_scale(blk, handle, 1.0 / t)
    return True


def _set_inv_scale(blk: pyo.Block, handle: Any, inv: float) -> None:
    """The level in units of ``1/inv``; the level and floor rows' changed coefficients pushed."""
    blk.inv_scale = inv
    if hasattr(handle, "update_rows"):
        handle.update_rows([*blk.level.values(), *blk.floor.values()])


def leximin_model(inst: Instance, coeff: np.ndarray, name: str,
                  doc: str = "weighted share of user n") -> pyo.ConcreteModel:
    """χ (task limits included), ``share[n] = coeff_n X_n`` and the max-min LP: the model every
    mechanism whose share is linear in the user's total calls ``progressive_filling`` on (drfh,
    tsf, tsf-er, drf-er, the α-split variants, the bottleneck check of the verification layer)."""
    m = pyo.ConcreteModel(name=f"{name}[{inst.name}]")
    m.chi = feasible_set(inst)
    c = dict(zip(inst.users, map(float, coeff)))
    m.share = pyo.Expression(m.chi.N, rule=lambda m, n: c[n] * m.chi.X[n], doc=doc)
    add_maxmin(m, m.share, scale=first_level_estimate(inst, coeff))
    return m


def first_level_estimate(inst: Instance, coeff: np.ndarray) -> float:
    """The smallest share ``coeff_n X_n`` at the weighted equal split (feasible, positive on every
    runnable pair): a lower bound on the first max-min level, and within a small factor of it on the
    instances tried (the scale of :func:`add_maxmin`)."""
    from fairalloc.models.feasible import uniform_split

    c = np.asarray(coeff, float)
    s = c * uniform_split(inst).sum(axis=1)
    s = s[np.isfinite(s) & (s > 0)]
    if not s.size:
        return 1.0
    return float(s.min())


@dataclass
class MaxMinOutcome:
    status: Status
    levels: dict[Any, float]  # the level each user was frozen at
    rounds: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    handle: Any = None  # the solver handle, for a caller that re-solves the same model later
    canonical: dict[str, Any] | None = None  # the canonical tie-break, when one ran

    @property
    def lps(self) -> int:
        return sum(r["lps"] for r in self.rounds)


def names(users: list[Any], limit: int = 8) -> str:
    """A short list of user names for the log: the first few, then how many more."""
    shown = ", ".join(map(str, users[:limit]))
    return shown + (f" … ({len(users) - limit} more)" if len(users) > limit else "")


def _duals(handle: Any, cons: list[Any]) -> np.ndarray | None:
    fn = getattr(handle, "duals", None)
    return None if fn is None else fn(cons)


def _shares(handle: Any, blk: pyo.Block, share: Any, users: list[Any], t: float) -> list[float]:
    """Current shares of ``users``: from the solver's activities of their ``level`` rows
    (``share[n] - t``) when it reports them — evaluating a share through Pyomo walks all of the
    user's terms — else by evaluating the expressions."""
    fn = getattr(handle, "activities", None)
    act = None if fn is None else fn([blk.level[n] for n in users])
    if act is None:
        return [float(pyo.value(share[n])) for n in users]
    inv = float(pyo.value(blk.inv_scale))  # the rows read inv_scale·share − t'
    return ((np.asarray(act, float) + t * inv) / inv).tolist()


def progressive_filling(m: pyo.ConcreteModel, session: Session, share: Any, name: str = "maxmin",
                        dual_tol: float = DUAL_TOL, tol: float = 1e-9, handle: Any = None,
                        resolve: str = "primal", canonical: Any = None) -> MaxMinOutcome:
    """Run progressive filling on the block added by :func:`add_maxmin`; the final allocation is
    left in the model's variables.

    ``canonical`` (a map ``{x[n,i]: (η_n, h[n,i])}``, :func:`~fairalloc.models.feasible.allocation_scale`)
    replaces the last LP's vertex by the canonical point of the leximin face: every user held at its
    level by its ``floor`` and a ``ceiling`` row (exactly at the level; where the solver's levels are
    inconsistent by its tolerance, at each level less 1e-10 … 1e-7 of it in turn, :data:`SHRINKS`,
    and last between the rounds' floors and the levels), the vertex of what is left maximising
    ``Σ h[n,i]·x[n,i]/X_n`` with ``h`` a hash of the names (:mod:`fairalloc.solvers.canonical`) and
    ``X_n`` the user's leximin total (:func:`pinned_scale`; ``η_n`` for a user at 0) — the totals are
    the leximin's, the split across servers no longer depends on the solver or the order of the input.

    ``handle`` re-uses a solver handle opened on ``m`` by an earlier call (a model re-solved with new
    data, e.g. PS-DSF's per-server best responses); the caller resets the ``level``/``floor`` rows and
    pushes coefficient or body-constant changes with ``handle.update_rows``. The handle used is
    returned in ``MaxMinOutcome.handle``.

    ``resolve`` says how HiGHS re-solves after a round (``HighsBridge.resolve``). Freezing users only
    relaxes rows (a ``level`` row becomes free, a ``floor`` at or below the user's current share
    appears), so the previous basis stays primal feasible and ``"primal"`` (default) re-solves by
    primal simplex from it. HiGHS's own warm choice, dual simplex, took 3–7× as long at 256 users ×
    32 servers (it starts dual infeasible) and at 1024 × 128 once failed outright; from scratch
    (``"cold"``) was in between (``docs/benchmarks/iterative.md``). IPM (from 20 000 columns) has
    no warm start either way.
    """
    blk = getattr(m, name)
    active = [n for n in blk.level.keys() if blk.level[n].active]
    levels: dict[Any, float] = {}
    rounds: list[dict[str, Any]] = []
    if handle is None:
        handle = session.open(m, "lp")
    else:
        handle.update(variables=False)
    if hasattr(handle, "resolve"):
        handle.resolve = resolve
    if getattr(handle, "interior_default", False):
        handle.interior = "auto"  # wide LPs without crossover; blocked users by interior_blocked
    status = Status.OPTIMAL
    vertex = None  # {"interior": "off"}: this round again, for a vertex (interior duals ambiguous)
    while active:
        out = session.run(handle, options=vertex)
        if out.status is Status.INFEASIBLE and levels:
            # frozen users are held where earlier rounds left them, each row only to the solver's
            # feasibility tolerance; after many rounds the floors can be inconsistent by ~1e-8.
            # Lower every floor by the solver tolerance once and re-solve (never hides a real
            # infeasibility: the first round has no floors, and χ itself is feasible at x = 0)
            for n in levels:
                blk.floor_level[n] = pyo.value(blk.floor_level[n]) - 1e-7 * abs(levels[n])
            handle.update(variables=False)
            log.info("progressive filling round %d: floors inconsistent by solver tolerance; "
                     "relaxed by 1e-7 and re-solved", len(rounds) + 1)
            out = session.run(handle, options=vertex)
        lifts = 0
        while (not out.ok and levels and "nbounded" in out.message and lifts < LEVEL_LIFTS
               and rounds[-1]["level"] > 0):
            # the next level lies far above the last (a user held at 1e-13 by an external resource,
            # the next at 0.5): in units of the last, the level's coefficient in its rows falls below
            # the matrix values HiGHS keeps, the level is in no row and the LP looks unbounded.
            # Measure it in units 1e6 times larger and solve again (the LP itself is bounded: χ is)
            lifts += 1
            _set_inv_scale(blk, handle, float(pyo.value(blk.inv_scale)) * 1e-6)
            handle.update(variables=False)
            log.info("progressive filling round %d: the LP looked unbounded with the level in the last "
                     "round's units; its unit x1e6 and re-solved", len(rounds) + 1)
            out = session.run(handle, options=vertex)
        status = worst(status, out.status)
        if not out.ok:
            msg = f"round {len(rounds) + 1}: {out.solver} stopped ({out.status}: {out.message})"
            return MaxMinOutcome(out.status, levels, rounds, msg, handle)
        if blk.t.value is None:  # never a traceback: e.g. HiGHS refused a matrix value and said so
            return MaxMinOutcome(Status.ERROR, levels, rounds, f"round {len(rounds) + 1}: {out.solver} "
                                 f"returned no level ({out.message})", handle)
        t = level_of(blk)
        if rounds and t < rounds[-1]["level"] * (1 - 1e-7):
            # each round's LP contains the last one's point: a lower level is the solver's precision
            # giving out (a share 1e-10 of what its user could reach, say), not an answer
            return MaxMinOutcome(Status.ERROR, levels, rounds, f"round {len(rounds) + 1}: level {t:.6g} "
                                 f"below the previous round's {rounds[-1]['level']:.6g}: the LP lost "
                                 "precision (a share far below what its user could reach)", handle)
        lps = 1 if vertex is None else 2
        vertex = sep = None
        y = _duals(handle, [blk.level[n] for n in active])
        if y is not None and out.extra.get("interior"):
            # an interior optimum: its multipliers are strictly complementary, not a vertex's
            slack = handle.activities([blk.level[n] for n in active])
            mask, sep = interior_blocked(y, slack, float(blk.t.value))
            if mask is None:
                log.info("progressive filling round %d: interior multipliers do not separate the "
                         "users (separation %.3g); a vertex solve decides", len(rounds) + 1, sep)
                vertex = {"interior": "off"}
                continue
        if y is not None and sep is not None:
            blocked = [n for n, b in zip(active, mask) if b]
            how = "interior duals"
        elif y is not None:
            blocked = [n for n, yn in zip(active, y) if abs(yn) > dual_tol]
            how = "duals"
        else:
            blocked = []
        if not blocked:
            blocked, probes, bad = _probe(m, blk, session, handle, share, active, t, tol)
            lps += probes
            how = "probe LPs"
            if bad is not None:
                return MaxMinOutcome(bad.status, levels, rounds, f"probe LP stopped: {bad.message}",
                                     handle)
            if not blocked:  # cannot happen with exact arithmetic; never loop forever
                return MaxMinOutcome(Status.ERROR, levels, rounds,
                                     f"round {len(rounds) + 1}: no blocked user found at t = {t}",
                                     handle)
        margin = tol * abs(t)  # relative: a level of 1e-4 tasks keeps 1e-9 of itself
        # after probe LPs the solver's activities (and t) belong to the last probe, not this round
        held = (_shares(handle, blk, share, blocked, t) if how != "probe LPs"
                else [float(pyo.value(share[n])) for n in blocked])
        for n, sn in zip(blocked, held):
            levels[n] = t
            blk.level[n].deactivate()
            # hold n where the solver left it (rows hold only to the solver's feasibility tolerance,
            # so a share may sit a hair below t): the current point stays feasible for the next round
            blk.floor_level[n] = min(t, sn) - margin
        active = [n for n in active if n not in set(blocked)]
        rounds.append({"level": t, "frozen": [str(n) for n in blocked], "lps": lps, "by": how,
                       **({"separation": sep} if sep is not None else {})})
        log.info("progressive filling round %d: level %.10g; frozen %s (%s); %d still active",
                 len(rounds), t, names(blocked), how, len(active))
        if active:
            rescale(blk, handle, t)
            handle.update(variables=False)
    if canonical is not None:
        # on the leximin face every user sits exactly at its level (the rounds held them a hair
        # below, to keep each LP's start feasible)
        held = {n: pyo.value(blk.floor_level[n]) for n in levels}
        pinned = pinned_scale(canonical)
        # ... from above too: the ceilings keep a user whose columns are tiny next to the others' in a
        # shared row from growing within tolerance. Floor and ceiling rows have the same coefficients,
        # so the tie-break LP holds each user by one row (merge_parallel_rows): an equality at one value
        blk.ceiling_level = pyo.Param(list(levels), mutable=True, initialize=dict(levels), domain=pyo.Any)
        blk.ceiling = pyo.Constraint(list(levels), rule=lambda b, n: b.inv_scale * share[n]
                                     <= b.inv_scale * b.ceiling_level[n])

        def pin(shrink: float) -> None:
            for n, lv in levels.items():
                blk.floor_level[n] = blk.ceiling_level[n] = lv * (1 - shrink)

        try:
            can, _ = tiebreak_shrinking(session, m, pinned, pin)
            if can.status is Status.INFEASIBLE or can.status is Status.ERROR:
                # last resort: between the rounds' floors and the levels (a slab: which side a user
                # ends on is one more choice of the LP's, so this is tried last)
                for n, lv in held.items():
                    blk.floor_level[n], blk.ceiling_level[n] = lv, levels[n]
                can = session.canonical(m, pinned)
        finally:
            blk.del_component(blk.ceiling)
            blk.del_component(blk.ceiling_level)
        info = {"rule": RULE + ", every user at its level", "status": can.status.value,
                "seconds": can.solve_seconds}
        # when the tie-break fails the last LP's vertex stands: optimal, but not the canonical split
        msg = "" if can.ok else (f"canonical tie-break failed ({can.status.value}: {can.message}); "
                                 "solver's vertex")
        return MaxMinOutcome(status, levels, rounds, msg, handle=handle, canonical=info)
    return MaxMinOutcome(status, levels, rounds, handle=handle)


# the leximin face's levels are known to the rounds' tolerance: a face with every user exactly at its
# level can be empty by ~1e-8 (HiGHS says "infeasible", or at times "unknown": seen on drfh, 30 users,
# a second level 1.6e-10 above the interior route's; and on random_instance(4, 16, 5, 3, external=2,
# scoped, placement) in other units). Every level less each of these fractions of itself is tried in
# turn: the same equality rows with a right-hand side a hair lower, so the LP's optimal basis (which h
# fixes) is the same and the point moves in proportion to the shrink — on an ill-conditioned face by
# far more (link_instance(2, 30, 6, eligible) under drfh: 1.12e-5 of the largest entry per 1e-9), so
# the steps start small; then the rounds' floors (see above)
SHRINKS = (0.0, 1e-10, 2e-10, 5e-10, 1e-9, 1e-8, 1e-7)


def pinned_scale(canonical: Any) -> Any:
    """The tie-break's scale on a leximin face: every user's total ``X_n`` is pinned by its level
    (the same for every route, to the solver's tolerance), so each user's columns are measured in its
    own total — ``x/X_n ∈ [0, 1]`` — instead of ``η_n``: a user held at 10⁻⁸ of its ``η_n`` by a shared
    resource would otherwise sit below the solver's tolerances in the tie-break LP and could lose its
    tasks there. Users at 0 keep ``η_n``."""
    from pyomo.common.collections import ComponentMap

    from fairalloc.solvers.canonical import ColumnScale

    if isinstance(canonical, ColumnScale) and canonical.group is not None:
        # the same sums, in the same order, on arrays
        g = canonical.group
        tot = np.bincount(g, weights=np.maximum(0.0, canonical.values_now()), minlength=int(g.max(
            initial=-1)) + 1)[g]
        return canonical.with_scale(np.where(tot > 0, tot, canonical.s))
    totals: dict[Any, float] = {}
    for v in canonical:
        u = v.index()[0]
        totals[u] = totals.get(u, 0.0) + max(0.0, float(v.value or 0.0))
    out = ComponentMap()
    for v, (eta, h) in canonical.items():
        X = totals[v.index()[0]]
        out[v] = (X if X > 0 else eta, h)
    return out


def canonical_split(inst: Instance, session: Session, x: np.ndarray, shrinks: tuple[float, ...] = SHRINKS,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray | None, dict[str, Any]]:
    """The canonical vertex of ``{y ∈ χ : Σ_i y[n,i] = X_n}`` with ``X`` the totals of ``x``: one split
    per set of totals, for a mechanism whose optimum is unique in the totals only (MNW: the objective
    reads ``X``). The rule and the scale are the leximin face's (:func:`pinned_scale`), and so are the
    shrinks of the totals where the face with the solver's totals is empty by its tolerance
    (``shrinks``, :data:`SHRINKS` by default). ``options``: HiGHS options of the tie-break LP. The LP
    holds a row to its tolerance in its scaled units (2.8e-9 of a small server's capacity, with demands
    six decades apart), so ``y``'s entries on a row it overruns by at most 1e-6 are lowered into it
    (:func:`~fairalloc.verify.feasibility.into_rows`; the amount in ``info["repaired"]``). Returns
    ``(y, info)``; ``y`` is ``None`` where every tie-break LP failed."""
    from fairalloc.models.feasible import allocation, allocation_scale
    from fairalloc.verify.feasibility import into_rows

    X = np.maximum(np.asarray(x, float), 0.0).sum(axis=1)
    m = pyo.ConcreteModel(name=f"canonical-split[{inst.name}]")
    m.chi = feasible_set(inst)
    for (n, i), v in zip(m.chi.pairs, m.chi.x.values()):
        v.set_value(float(max(x[n, i], 0.0)))
    m.total = pyo.Param(m.chi.N, mutable=True, initialize=dict(zip(inst.users, X)))
    m.pin = pyo.Constraint(m.chi.N, rule=lambda m, n: m.chi.X[n] == m.total[n])
    m.objective = pyo.Objective(expr=0.0)
    scale = pinned_scale(allocation_scale(m.chi, inst))

    def pin(shrink: float) -> None:
        for u, v in zip(inst.users, X):
            m.total[u] = float(v) * (1 - shrink)

    out, shrink = tiebreak_shrinking(session, m, scale, pin, shrinks, options)
    info = {"rule": RULE + ", every user at its total", "status": out.status.value,
            "seconds": out.solve_seconds, "shrink": shrink}
    if not out.ok:
        return None, info
    y, info["repaired"] = into_rows(inst, allocation(m.chi, inst))
    return y, info


def tiebreak_shrinking(session: Session, m: pyo.ConcreteModel, scale: Any, pin: Any,
                       shrinks: tuple[float, ...] = SHRINKS, options: dict[str, Any] | None = None
                       ) -> tuple[Any, float]:
    """``session.canonical(m, scale)`` after ``pin(shrink)`` (which holds every user at its level or
    total less ``shrink`` of it) for each of ``shrinks`` in turn, until one tie-break LP is neither
    infeasible nor failed; returns its outcome and shrink (the last tried where all failed)."""
    out, shrink = None, 0.0
    for shrink in shrinks:
        pin(shrink)
        out = session.canonical(m, scale, options=options)
        if out.status is not Status.INFEASIBLE and out.status is not Status.ERROR:
            break
        log.info("canonical tie-break: every user at its level less %g of it: %s", shrink, out.status.value)
    assert out is not None
    return out, shrink


def _probe(m: pyo.ConcreteModel, blk: pyo.Block, session: Session, handle: Any, share: Any,
           active: list[Any], t: float, tol: float) -> tuple[list[Any], int, Any]:
    """Test each active user at level ``t``: can it rise while the others keep ``t``?"""
    cand = [n for n in active if pyo.value(share[n]) <= t + tol * abs(t)]
    saved = {n: pyo.value(blk.floor_level[n]) for n in active}
    for n in active:
        blk.level[n].deactivate()
        blk.floor_level[n] = t - tol * abs(t)
    blk.objective.deactivate()
    blocked, lps, bad = [], 0, None
    from tqdm.auto import tqdm

    # one LP per candidate (solvers without duals): progress on stderr when it is a terminal
    for n in tqdm(cand, desc="probe LPs", unit="LP", file=sys.stderr, disable=None, leave=False):
        blk.probe = pyo.Objective(expr=share[n], sense=pyo.maximize)
        handle.update(variables=False)
        out = session.run(handle)
        lps += 1
        blk.del_component(blk.probe)
        if not out.ok:
            bad = out
            break
        # the others are held at t - tol, so n can gain ~tol per other user even when blocked, and
        # solvers without duals (SCIP: SoPlex) hold rows to ~1e-6: a rise below PROBE_TOL is noise
        if pyo.value(share[n]) <= t + max(10 * tol, PROBE_TOL) * abs(t):
            blocked.append(n)
    for n in active:
        blk.level[n].activate()
        blk.floor_level[n] = saved[n]
    blk.objective.activate()
    handle.update(variables=False)
    return blocked, lps, bad
