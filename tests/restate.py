"""The same instance as another file states it (users and servers in other orders, resources in other
units, optionally listed backwards), and an allocation mapped back: the helpers of the one-answer tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fairalloc.instance import Instance
from fairalloc.io import instance_to_dict, parse_instance


def permuted(inst: Instance, pu: np.ndarray, ps: np.ndarray) -> Instance:
    """``inst`` with its users and servers listed in the orders ``pu``/``ps``."""
    return restated(inst, pu, ps)


def restated(inst: Instance, pu: np.ndarray, ps: np.ndarray, scale: Sequence[float] | None = None,
             reverse: bool = False) -> Instance:
    """``inst`` with users and servers in the orders ``pu``/``ps``, resource ``q`` (the server
    resources, then the external ones) measured in units ``scale[q]`` times smaller (every capacity and
    demand of it times ``scale[q]``) and, with ``reverse``, the resources listed backwards."""
    d = instance_to_dict(inst)
    if scale is not None:
        f = dict(zip(list(inst.resources) + list(inst.external), scale, strict=True))
        for s in d["servers"]:
            s["capacity"] = {r: v * f[r] for r, v in s["capacity"].items()}
        for u in d["users"]:
            u["demand"] = {r: v * f[r] for r, v in u["demand"].items()}
        for e, v in d.get("external", {}).items():
            d["external"][e] = {**v, "capacity": v["capacity"] * f[e]} if isinstance(v, dict) else v * f[e]
    if reverse:
        d["resources"] = d["resources"][::-1]
        if "external" in d:
            d["external"] = dict(reversed(list(d["external"].items())))
    d["users"] = [d["users"][k] for k in pu]
    d["servers"] = [d["servers"][k] for k in ps]
    return parse_instance(d)


def back(x: np.ndarray, pu: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """An allocation of the instance restated in the orders ``pu``/``ps``, in the original orders."""
    out = np.empty_like(x)
    out[np.ix_(pu, ps)] = x
    return out


def decades_apart(seed: int, fam: str, size: tuple[int, int, int] = (10, 4, 3),
                  rng: np.random.Generator | None = None) -> Instance:
    """``random_instance(seed, *size)`` of family ``fam`` with every user's demands times 10^U(-3, 3)
    (its task limit divided by the same) and every server's capacities times 10^U(-2, 2), drawn from
    ``rng`` (default: a generator seeded with ``seed``); in the time-shared form every user's rates
    times 10^U(-3, 3)."""
    from fairalloc.generate import FAMILIES, random_instance

    rng = np.random.default_rng(seed) if rng is None else rng
    d = instance_to_dict(random_instance(seed, *size, **FAMILIES[fam]))
    for u in d["users"]:
        m = 10 ** rng.uniform(-3, 3)
        if "demand" in u:
            u["demand"] = {r: v * m for r, v in u["demand"].items()}
            if "tasks" in u:
                u["tasks"] /= m
    for s in d["servers"]:
        c = 10 ** rng.uniform(-2, 2)
        if "capacity" in s:
            s["capacity"] = {r: v * c for r, v in s["capacity"].items()}
    for u, rates in d.get("rates", {}).items():
        m = 10 ** rng.uniform(-3, 3)
        d["rates"][u] = {s: v * m for s, v in rates.items()}
    return parse_instance(d)
