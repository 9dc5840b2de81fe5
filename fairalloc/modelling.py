r"""The building blocks of fairalloc's mechanisms, in one place, for writing new ones.

A mechanism is a function ``solve(instance, session, **params) -> Solution`` registered with
:func:`mechanism`. The built-in ones are made of these pieces (``docs/tutorial.md`` writes a new one,
``docs/customize.md`` lists the component names of every built-in model):

- :func:`feasible_set` — the feasible set χ of an instance as a Pyomo block (``m.chi = feasible_set(inst)``):
  ``chi.x[user, server] ≥ 0`` on the runnable pairs, ``chi.X[user] = Σ_i x[user, i]``, the capacity
  (or time), external-resource and task-limit rows;
- :func:`allocation` — the ``users × servers`` array of the values held in ``chi.x``;
- :func:`uniform_split` — the weighted equal split, a strictly positive feasible starting point;
- :func:`leximin_model` — χ plus ``share[n] = coeff[n]·X[n]`` plus the max-min block (:func:`add_maxmin`);
- :func:`add_maxmin` — the max-min LP on top of any indexed expression of shares;
- :func:`progressive_filling` — the weighted lexicographic max-min of those shares (one persistent LP,
  re-solved until every user is frozen), leaving the allocation in the model;
- :func:`canonical_split` — one split across servers for given totals (the canonical vertex of
  ``{y ∈ χ : Σ_i y[n,i] = X_n}``), for a mechanism whose optimum is unique in the totals only (``mnw``);
- :class:`Session` — the solve layer a mechanism receives: ``session.solve(model, "lp")`` for one solve,
  ``session.open``/``session.run`` for a persistent handle; it applies the user's ``customize`` hook;
- :class:`Solution` — what ``solve`` returns: the allocation, a :class:`Status`, a message, details;
- :func:`mechanism`, :class:`Param` and the converters (:func:`as_float`, :func:`as_int`, :func:`as_bool`,
  :func:`choice`, …) — registration and parameters.

A leximin of a share of your own, in full::

    from fairalloc.modelling import Solution, allocation, leximin_model, mechanism, progressive_filling

    @mechanism("leximin-tasks", reference="my notes")
    def solve(inst, session):
        "weighted leximin of the raw task counts X/φ"
        m = leximin_model(inst, 1.0 / inst.weight, "leximin-tasks")
        mm = progressive_filling(m, session, m.share)
        return Solution(allocation(m.chi, inst), mm.status, mm.message)
"""

from fairalloc.instance import Instance
from fairalloc.models.feasible import allocation, feasible_set, uniform_split
from fairalloc.models.maxmin import (
    MaxMinOutcome,
    add_maxmin,
    canonical_split,
    leximin_model,
    progressive_filling,
)
from fairalloc.registry import (
    Param,
    Solution,
    as_bool,
    as_float,
    as_floats,
    as_int,
    as_str,
    choice,
    mechanism,
    positive,
)
from fairalloc.solvers import Session
from fairalloc.status import Status

__all__ = ["Instance", "MaxMinOutcome", "Param", "Session", "Solution", "Status", "add_maxmin",
           "allocation", "as_bool", "as_float", "as_floats", "as_int", "as_str", "canonical_split", "choice",
           "feasible_set", "leximin_model", "mechanism", "positive", "progressive_filling", "uniform_split"]
