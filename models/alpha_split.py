r"""DRF-α and TSF-α — DRFH / TSF after a fixed split of the external resources ([TSFER] §3.3, Thms 3–4).

The naive extensions of [TSFER] §3.3 reserve a share ``α_s`` of each external resource ``e`` for each
server ``s`` (of the servers ``S_e`` it serves, ``Σ_{s∈S_e} α_s = 1``) and treat ``α_s c_e`` as one more
resource *of that server*. The feasible set shrinks to

.. math::

    \chi_\alpha = \Big\{x \ge 0:\ \sum_n x_{n,s} d_{n,r} \le c_{s,r},\
    \sum_n x_{n,s} d_{n,e} \le \alpha_{e,s}\, c_e\ (s \in S_e),\ X_n \le T_n \Big\},

and DRF-α (DRFH) or TSF-α (TSF) is the weighted lexicographic max-min over ``χ_α`` of

.. math::

    \frac{\kappa_n X_n}{\phi_n} \ \text{(DRF-α; κ as in DRFH, unchanged by the split since }
    \textstyle\sum_s \alpha_s c_e = c_e\text{)}, \qquad
    \frac{X_n}{\phi_n \gamma^{TSF}_n},\ \
    \gamma^{TSF}_n = \sum_s \min\Big(\min_r \frac{c_{s,r}}{d_{n,r}}, \frac{\alpha_s c_e}{d_{n,e}}\Big)
    \ \text{(TSF-α, the denominator of (7c))}.

The split is an :class:`Instance` (:func:`split_instance`: each ``e`` becomes a server resource), so χ_α
is the shared χ block of that instance and γTSF its own; the max-min is the same χ + shares +
progressive-filling construction DRFH and TSF use (:func:`fairalloc.models.maxmin.leximin_model`). With
unscoped external resources this *is* ``drfh`` / ``tsf`` run on the split instance (a test checks it).
A scoped ``e`` is split over ``S_e`` only; on other servers its tasks do not use ``e``, so there it
gets a capacity no allocation reaches, and κ is taken from the unsplit instance so that this padding
does not dilute it.

``alpha`` is a preset or explicit values:

- ``eq``: equal shares over ``S_e`` (the paper's DRF-eq, Fig. 2(b));
- the name of a server resource, e.g. ``cpu`` or ``mem``: in proportion to the servers' capacities of
  that resource (the paper's TSF-cpu, Fig. 2(c));
- numbers, one per server (``-p alpha=1,3``): proportions, normalised over each ``S_e``.

[TSFER] Thms 3–4: no split makes either mechanism PO or SI; on Fig. 2 both users get fewer tasks with
DRF-eq than with CRU and with TSF-cpu than with TSF-ER (checked in the tests).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyomo.environ as pyo

from fairalloc.errors import InstanceError, ParameterError
from fairalloc.instance import Instance
from fairalloc.models import tsf_er
from fairalloc.models.maxmin import leximin_model
from fairalloc.registry import CANONICAL, Param, Solution, as_floats, mechanism
from fairalloc.solvers import Session

__all__ = ["alpha_profile", "split_instance"]


def as_alpha(v: Any) -> str | list[float]:
    """A preset name (``eq`` or a server resource) or a list of per-server numbers."""
    if isinstance(v, str):
        try:
            vals = as_floats(v)
        except ValueError:
            return v.strip()
        return vals if isinstance(vals, list) else [vals]
    vals = as_floats(v)
    return vals if isinstance(vals, list) else [vals]


def alpha_profile(inst: Instance, alpha: str | list[float]) -> np.ndarray:
    """``α[e, s]``: the fraction of external resource ``e`` reserved for server ``s`` (rows sum to one
    over the servers ``e`` serves, zero elsewhere)."""
    K = inst.n_servers
    if isinstance(alpha, str):
        if alpha == "eq":
            base = np.ones(K)
        elif alpha in inst.resources:
            base = inst.capacity[:, inst.resources.index(alpha)].astype(float)
        elif alpha == "random" or (alpha.startswith("random") and alpha[6:].isdigit()):
            # a seeded random split, different for every set of server names: Thms 3-4 hold for any α
            digest = hashlib.blake2b("\x00".join(inst.servers).encode(), digest_size=8).digest()
            rng = np.random.default_rng([int(alpha[6:] or 0), int.from_bytes(digest, "big")])
            base = rng.uniform(0.05, 1.0, K)
        else:
            raise ParameterError(f"alpha={alpha!r}: expected 'eq', 'random' or 'random<seed>', a server "
                                 f"resource ({', '.join(inst.resources)}) or {K} numbers, one per server")
    else:
        base = np.asarray(alpha, float)
        if base.shape != (K,) or not np.isfinite(base).all() or (base < 0).any():
            raise ParameterError(f"alpha={alpha!r}: expected {K} finite numbers >= 0, one per "
                                 f"server ({', '.join(inst.servers)})")
    prof = inst.external_scope * base[None, :]
    tot = prof.sum(axis=1)
    for e in np.flatnonzero(~(tot > 0)):
        raise ParameterError(f"alpha={alpha!r}: gives external resource {inst.external[e]!r} nothing "
                             "on the servers it serves")
    return prof / tot[:, None]


def split_instance(inst: Instance, alpha: str | list[float]) -> Instance:
    """The instance with every external resource ``e`` turned into a server resource: capacity
    ``α[e,s] c_e`` on each server ``s ∈ S_e``. Tasks on servers outside ``S_e`` do not use ``e``
    (docs/instance-format.md#the-model), which a per-user demand cannot say; there ``e`` gets a capacity no
    allocation can reach,
    ``Σ_n γ̂[n,s] d[n,e]`` (``x[n,s] ≤ γ̂[n,s]`` on every feasible point)."""
    inst.require_demands("the external-resource split")
    prof = alpha_profile(inst, alpha)
    gamma_hat = inst.replace(eligible=np.ones_like(inst.eligible)).gamma  # placement ignored: ≥ x
    ample = (gamma_hat.T @ inst.external_demand).T  # (E, K)
    ext = np.where(inst.external_scope, prof * inst.external_capacity[:, None], ample)
    cap = np.hstack([inst.capacity, ext.T])
    try:
        return Instance(users=inst.users, servers=inst.servers, resources=inst.all_resources,
                        capacity=cap, demand=inst.all_demand, weight=inst.weight, tasks=inst.tasks,
                        eligible=inst.eligible, budget_limit=inst.budget_limit,
                        budget_cost=inst.budget_cost, name=f"{inst.name}|alpha={alpha}")
    except InstanceError as exc:
        raise ParameterError(f"alpha={alpha!r}: the split leaves a user no server: {exc}") from None


def drf_coeff(inst: Instance, split: Instance) -> np.ndarray:
    """``κ_n/φ_n`` with κ of the *unsplit* instance: the pooled capacity of ``e`` is ``Σ_s α_s c_e = c_e``
    either way, but the ample capacities outside ``S_e`` must not dilute it."""
    return inst.dominant_coeff / inst.weight


def tsf_coeff(inst: Instance, split: Instance) -> np.ndarray:
    """``1/(φ_n γTSF_n)`` on the split: ``γ̂[n,s] = min(min_r c_{s,r}/d_{n,r}, α_s c_e/d_{n,e})``, (7c)."""
    return 1.0 / (inst.weight * split.gamma_tsf)


KINDS: dict[str, tuple[str, Callable[[Instance, Instance], np.ndarray]]] = {
    "drf-alpha": ("DRF-alpha", drf_coeff), "tsf-alpha": ("TSF-alpha", tsf_coeff)}


def _build(name: str, inst: Instance, alpha: str | list[float]) -> pyo.ConcreteModel:
    split = split_instance(inst, alpha)
    m = leximin_model(split, KINDS[name][1](inst, split), name)
    m.name = f"{name}[{inst.name}]"
    return m


def _solve(name: str, inst: Instance, session: Session, alpha: str | list[float],
           canonical: bool = True) -> Solution:
    split = split_instance(inst, alpha)
    label, coeff_fn = KINDS[name]
    coeff = coeff_fn(inst, split)
    out = tsf_er.run(split, session, coeff, "leximin", label=label, canonical=canonical)
    U = inst.users
    prof = alpha_profile(inst, alpha)
    details: dict[str, Any] = {
        "alpha": {e: dict(zip(inst.servers, prof[k])) for k, e in enumerate(inst.external)},
        "share": dict(zip(U, out.x.sum(axis=1) * coeff)),
        "rounds": out.iterations, "lps": out.lps}
    if name == "drf-alpha":
        details["dominant_resource"] = dict(zip(U, inst.dominant_resource))
    else:
        details["gamma_tsf"] = dict(zip(U, split.gamma_tsf))
    return Solution(out.x, out.status, out.message, details=details)


ALPHA = Param("alpha", as_alpha, "eq", "split of each external resource over its servers: eq, a "
              "server resource name (cpu, mem, …: in proportion to its capacities), random<seed> (a "
              "seeded random split, drawn per set of server names) or one number per server")


@mechanism("drf-alpha", problem="lp", params=[ALPHA, CANONICAL],
           build=lambda inst, alpha="eq", **_: _build("drf-alpha", inst, alpha),
           reference="[TSFER] §3.3, Thm 3 (DRF-α^er)",
           summary="DRFH after a fixed split α of each external resource across servers")
def solve_drf(inst: Instance, session: Session, alpha: str | list[float] = "eq",
              canonical: bool = True) -> Solution:
    return _solve("drf-alpha", inst, session, alpha, canonical)


@mechanism("tsf-alpha", problem="lp", params=[ALPHA, CANONICAL],
           build=lambda inst, alpha="eq", **_: _build("tsf-alpha", inst, alpha),
           reference="[TSFER] §3.3, (7a)-(7c), Thm 4 (TSF-α^er)",
           summary="TSF after a fixed split α of each external resource across servers")
def solve_tsf(inst: Instance, session: Session, alpha: str | list[float] = "eq",
              canonical: bool = True) -> Solution:
    return _solve("tsf-alpha", inst, session, alpha, canonical)
