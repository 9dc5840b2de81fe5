"""The mechanism registry: one entry per mechanism, declared next to its model.

A mechanism module in ``fairalloc.models`` declares itself with :func:`mechanism`::

    @mechanism("drfh", problem="lp", summary="…", reference="[PSDSF] §II-B",
               params=[Param("tie_break", as_float, 0.0, "…")], build=build)
    def solve(instance, session, **params) -> Solution: ...

``build(instance, **params)`` returns the Pyomo model (for iterative mechanisms: the first model of
the sequence) so ``fairalloc show`` can print it; ``solve`` runs the mechanism through the solve layer.
Parameters arrive as strings from the CLI (``-p alpha=3``) or as Python values from the API; each
:class:`Param` converts and checks them, and an unknown or bad parameter is a
:class:`~fairalloc.errors.ParameterError` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fairalloc.errors import ParameterError
from fairalloc.status import Status

__all__ = [
    "Mechanism",
    "Param",
    "Solution",
    "all_mechanisms",
    "as_bool",
    "as_float",
    "as_floats",
    "as_int",
    "as_str",
    "choice",
    "get_mechanism",
    "mechanism",
    "positive",
]


# ---------------------------------------------------------------------- parameter converters
def as_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a number")
    if isinstance(v, str) and v.strip().lower() in {"inf", "infinity", "∞"}:
        return float("inf")
    return float(v)


def as_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    f = float(v)
    if not f.is_integer():
        raise ValueError("expected an integer")
    return int(f)


def as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in {"1", "true", "yes", "on"}:
        return True
    if s in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def as_str(v: Any) -> str:
    return str(v)


def as_floats(v: Any) -> float | list[float]:
    """One number, or several: ``"1,2,3"``, ``"[1, 2, 3]"`` or a list."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return [as_float(a) for a in v]
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            return as_floats(json.loads(s))
        if "," in s:
            return [as_float(a) for a in s.split(",")]
    return as_float(v)


def choice(*options: str) -> Callable[[Any], str]:
    def convert(v: Any) -> str:
        s = str(v)
        if s not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return s

    convert.__name__ = "choice(" + "|".join(options) + ")"
    return convert


def positive(v: Any) -> str | None:
    vals = v if isinstance(v, list) else [v]
    return None if all(a > 0 for a in vals) else "must be > 0"


@dataclass(frozen=True)
class Param:
    """A mechanism parameter: name, converter, default, one line of help, optional check."""

    name: str
    convert: Callable[[Any], Any]
    default: Any
    help: str
    check: Callable[[Any], str | None] | None = None

    def parse(self, mech: str, raw: Any) -> Any:
        try:
            val = self.convert(raw)
        except (ValueError, TypeError, json.JSONDecodeError) as exc:
            raise ParameterError(f"{mech}: parameter {self.name}={raw!r}: {exc}") from None
        if self.check is not None:
            msg = self.check(val)
            if msg:
                raise ParameterError(f"{mech}: parameter {self.name}={raw!r}: {msg}")
        return val


@dataclass
class Solution:
    """What a mechanism's ``solve`` returns: the allocation ``x`` (users × servers), a status and
    mechanism-specific details. ``servers`` overrides the instance's servers (DRF's pooled server)."""

    allocation: np.ndarray
    status: Status
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    servers: tuple[str, ...] | None = None
    zero_tol: float = 1e-9


@dataclass(frozen=True)
class Mechanism:
    name: str
    summary: str
    problem: str  # "lp", "milp", "nlp": the class of the solves it makes (the solver choice)
    solve: Callable[..., Solution]
    build: Callable[..., Any] | None
    params: tuple[Param, ...]
    reference: str
    needs_demands: bool = True
    module: str = ""

    @property
    def supports_budgets(self) -> bool:
        """False for the mechanisms that compute allocations without χ's budget rows."""
        return self.name not in NO_BUDGETS

    def parse_params(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Convert and check ``raw`` (strings or values); fill defaults; reject unknown names."""
        known = {p.name: p for p in self.params}
        for k in raw:
            if k not in known:
                hint = f" (known: {', '.join(known)})" if known else " (it takes no parameters)"
                raise ParameterError(f"{self.name}: unknown parameter {k!r}{hint}")
        return {p.name: (p.parse(self.name, raw[p.name]) if p.name in raw else p.default)
                for p in self.params}


_REGISTRY: dict[str, Mechanism] = {}

#: Mechanisms that compute (part of) their allocation outside χ and so cannot honour per-user budgets
#: (pooled server, per-server algorithms, split instances, the NCP, the online simulation).
NO_BUDGETS = frozenset({"drf", "ps-dsf", "apf-vds", "tsf-er-online", "drf-alpha", "tsf-alpha"})


def mechanism(name: str, *, summary: str, problem: str, reference: str,
              params: Sequence[Param] = (), build: Callable[..., Any] | None = None,
              needs_demands: bool = True) -> Callable[[Callable[..., Solution]], Callable[..., Solution]]:
    """Register ``solve`` as mechanism ``name``."""

    def deco(fn: Callable[..., Solution]) -> Callable[..., Solution]:
        if name in _REGISTRY and _REGISTRY[name].module != fn.__module__:
            raise RuntimeError(f"mechanism {name!r} registered twice")
        _REGISTRY[name] = Mechanism(name=name, summary=summary, problem=problem, solve=fn,
                                    build=build, params=tuple(params), reference=reference,
                                    needs_demands=needs_demands, module=fn.__module__)
        return fn

    return deco


def _load_models() -> None:
    import fairalloc.models  # noqa: F401  (imports every mechanism module)


def get_mechanism(name: str) -> Mechanism:
    _load_models()
    if name not in _REGISTRY:
        raise ParameterError(f"-m {name!r}: unknown mechanism (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]


def all_mechanisms() -> list[Mechanism]:
    _load_models()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
