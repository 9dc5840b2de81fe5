"""The mechanism registry: one entry per mechanism, declared next to its model.

A mechanism module in ``fairalloc.models`` declares itself with :func:`mechanism`::

    @mechanism("drfh", problem="lp", summary="…", reference="[PSDSF] §II-B",
               params=[Param("tie_break", as_float, 0.0, "…")], build=build)
    def solve(instance, session, **params) -> Solution: ...

``build(instance, **params)`` returns the Pyomo model (for iterative mechanisms: the first model of
the sequence) so ``fairalloc show`` can print it; ``solve`` runs the mechanism through the solve layer.

User code registers mechanisms the same way (``fairalloc.mechanism``; ``summary`` defaults to the first
line of the docstring, ``reference`` to none; see ``docs/tutorial.md``) and makes them known with
``--import FILE.py`` (:func:`load_imports`) or, from an installed package, with an entry point in the
group ``fairalloc.mechanisms`` (loaded when a name is not found and when listing).
Parameters arrive as strings from the CLI (``-p alpha=3``) or as Python values from the API; each
:class:`Param` converts and checks them, and an unknown or bad parameter is a
:class:`~fairalloc.errors.ParameterError` naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
    "hook_reference",
    "load_hook",
    "load_imports",
    "mechanism",
    "positive",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "fairalloc.mechanisms"


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


CANONICAL = Param("canonical", as_bool, True,
                  "where the optimum is not unique, return the canonical optimum (the vertex of the "
                  "optimal face maximising a name-hashed weighting of x/η, docs/canonical.md); "
                  "false: whichever optimum the solver returns")


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

#: Mechanisms that cannot honour per-user budgets: DRF pools the servers (a budget prices tasks per
#: server). The per-server mechanisms honour budgets with their best responses (a column bound per
#: response); tsf-er-online places a whole task only where the user can still afford it.
NO_BUDGETS = frozenset({"drf"})


def mechanism(name: str, *, summary: str | None = None, problem: str = "lp", reference: str = "",
              params: Sequence[Param] = (), build: Callable[..., Any] | None = None,
              needs_demands: bool = True) -> Callable[[Callable[..., Solution]], Callable[..., Solution]]:
    """Register ``solve(instance, session, **params) -> Solution`` as mechanism ``name``.

    ``problem`` is the class of the solves it makes (``"lp"``, ``"milp"``, ``"nlp"``; ``"none"`` for a
    procedure without solver calls): it picks the default solver. ``summary`` (default: the first line
    of ``solve``'s docstring) and ``reference`` are shown by ``fairalloc mechanisms``; ``params`` are
    :class:`Param` declarations; ``build(instance, **params)`` returns the model ``fairalloc show``
    prints; ``needs_demands=False`` accepts instances given as rate tables.
    """

    def deco(fn: Callable[..., Solution]) -> Callable[..., Solution]:
        shipped = next((d["module"] for d in _catalogue() or () if d["name"] == name), fn.__module__)
        if shipped != fn.__module__:  # a shipped name, whether its module is imported yet or not
            raise RuntimeError(f"mechanism {name!r} registered twice ({shipped} and {fn.__module__})")
        if name in _REGISTRY and _REGISTRY[name].module != fn.__module__:
            raise RuntimeError(f"mechanism {name!r} registered twice ({_REGISTRY[name].module} and "
                               f"{fn.__module__})")
        doc = (fn.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = Mechanism(name=name, summary=summary or (doc[0] if doc else name),
                                    problem=problem, solve=fn, build=build, params=tuple(params),
                                    reference=reference, needs_demands=needs_demands,
                                    module=fn.__module__)
        return fn

    return deco


def _load_models() -> None:
    from fairalloc.models import load_all

    load_all()


def load_imports(imports: Iterable[str]) -> None:
    """Import modules that register extra mechanisms (``--import``): a dotted module name, or a path
    to a ``.py`` file (imported once per resolved path, under a private module name)."""
    for item in imports:
        if item.endswith(".py") or os.sep in item:
            path = Path(item).resolve()
            name = "fairalloc_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:10]
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None or not path.is_file():
                raise ParameterError(f"--import {item!r}: no such Python file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # before exec: the registry records the module's name
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
        else:
            try:
                importlib.import_module(item)
            except ImportError as exc:
                raise ParameterError(f"--import {item!r}: {exc}") from None


def _plugin_module(item: str) -> Any:
    load_imports([item])
    if item.endswith(".py") or os.sep in item:
        path = Path(item).resolve()
        return sys.modules["fairalloc_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:10]]
    return sys.modules[item]


def load_hook(ref: str) -> Callable[..., Any]:
    """The function named by ``FILE.py:FUNCTION`` or ``module:FUNCTION`` (``--customize``)."""
    where, sep, fn = ref.rpartition(":")
    if not sep or not where or not fn:
        raise ParameterError(f"--customize {ref!r}: expected FILE.py:FUNCTION or module:FUNCTION")
    hook = getattr(_plugin_module(where), fn, None)
    if not callable(hook):
        raise ParameterError(f"--customize {ref!r}: {where} has no function {fn!r}")
    return hook


def hook_reference(fn: Callable[..., Any]) -> str:
    """The ``FILE.py:FUNCTION`` / ``module:FUNCTION`` that :func:`load_hook` turns back into ``fn``, for
    processes that must import it by name (batch workers); a lambda or a nested function has none."""
    if isinstance(fn, str):
        load_hook(fn)
        return fn
    name, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    mod = sys.modules.get(name or "")
    if mod is None or not qual.isidentifier() or getattr(mod, qual, None) is not fn:
        raise ParameterError(f"customize = {fn!r}: batch workers import the hook by name, so it must "
                             "be a module-level function (or give 'FILE.py:FUNCTION')")
    path = getattr(mod, "__file__", None)
    if name == "__main__" or (name or "").startswith("fairalloc_plugin_"):
        if not path:
            raise ParameterError(f"customize = {fn!r}: defined interactively; put it in a file and "
                                 "give 'FILE.py:FUNCTION'")
        return f"{Path(path).resolve()}:{qual}"
    return f"{name}:{qual}"


_ENTRY_POINTS_LOADED: set[str] = set()


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points

    try:
        return list(entry_points(group=ENTRY_POINT_GROUP))
    except TypeError:  # Python 3.10 without the selectable interface
        return list(entry_points().get(ENTRY_POINT_GROUP, []))  # type: ignore[attr-defined]


def _load_entry_points(name: str | None = None) -> None:
    """Load the ``fairalloc.mechanisms`` entry points (only the one called ``name`` when given first;
    a plugin that fails to import is logged and skipped when listing)."""
    for ep in _entry_points():
        if ep.name in _ENTRY_POINTS_LOADED or (name is not None and ep.name != name):
            continue
        _ENTRY_POINTS_LOADED.add(ep.name)
        try:
            ep.load()
        except Exception as exc:
            if name is not None:
                raise ParameterError(f"-m {name!r}: the plugin {ep.value!r} (entry point "
                                     f"{ENTRY_POINT_GROUP}) failed to import: {exc}") from exc
            log.warning("mechanism plugin %s = %s failed to import: %s", ep.name, ep.value, exc)


def get_mechanism(name: str) -> Mechanism:
    if name not in _REGISTRY:  # import only the module that defines it when the catalogue knows it
        module = next((d["module"] for d in _catalogue() or () if d["name"] == name), None)
        if module is not None:
            importlib.import_module(module)
    if name not in _REGISTRY:
        _load_models()
    if name not in _REGISTRY:
        _load_entry_points(name)
    if name not in _REGISTRY:
        _load_entry_points()
    if name not in _REGISTRY:
        raise ParameterError(f"-m {name!r}: unknown mechanism (known: {', '.join(sorted(_REGISTRY))}; "
                             "a mechanism in your own file needs --import FILE.py)")
    return _REGISTRY[name]


def all_mechanisms() -> list[Mechanism]:
    _load_models()
    _load_entry_points()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


# ---------------------------------------------------------------------- metadata without the models
CATALOGUE = Path(__file__).with_name("_catalogue.py")


def describe(m: Mechanism) -> dict[str, Any]:
    """A mechanism's metadata as ``fairalloc mechanisms --json`` prints it."""
    doc = {"name": m.name, "problem": m.problem, "summary": m.summary, "reference": m.reference,
           "parameters": {p.name: {"default": p.default, "help": p.help} for p in m.params},
           "module": m.module}
    return json.loads(json.dumps(doc, default=str))


def models_fingerprint() -> str | None:
    """Hash of the mechanism modules' sources (``fairalloc.models``, found without importing it)."""
    spec = importlib.util.find_spec("fairalloc.models")
    if spec is None or not spec.submodule_search_locations:
        return None
    h = hashlib.sha256()
    for folder in spec.submodule_search_locations:
        for f in sorted(Path(folder).glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def write_catalogue() -> Path:
    """Regenerate ``fairalloc/_catalogue.py`` (``python -m fairalloc.registry``): the shipped mechanisms'
    metadata, so that listing them needs neither Pyomo nor the model modules."""
    _load_models()
    shipped = [describe(m) for m in (_REGISTRY[k] for k in sorted(_REGISTRY))
               if m.module.startswith("fairalloc.")]
    text = json.dumps(shipped, indent=1, ensure_ascii=False)
    CATALOGUE.write_text(
        "# ruff: noqa: E501\n"
        '"""Generated by ``python -m fairalloc.registry`` from the mechanism modules; do not edit.\n\n'
        "A stale catalogue (its fingerprint no longer matches the model sources) is never used, only "
        'slower:\nregenerate it."""\n\n'
        f"FINGERPRINT = {models_fingerprint()!r}\n\nMECHANISMS = {text!r}\n")
    return CATALOGUE


_CATALOGUE_CACHE: list[Any] = []


def _catalogue() -> list[dict[str, Any]] | None:
    """The shipped mechanisms' metadata from ``_catalogue.py``; ``None`` when missing or stale."""
    if not _CATALOGUE_CACHE:
        try:
            from fairalloc import _catalogue as cat
        except ImportError:
            cat = None
        fresh = cat is not None and cat.FINGERPRINT == models_fingerprint()
        if cat is not None and not fresh:
            log.debug("mechanism catalogue is stale; importing the models")
        _CATALOGUE_CACHE.append(json.loads(cat.MECHANISMS) if fresh else None)
    return _CATALOGUE_CACHE[0]


def describe_mechanisms() -> list[dict[str, Any]]:
    """Metadata of every mechanism, sorted by name: the shipped ones from the catalogue when it matches
    the model sources (no Pyomo import), else from the models; plus those registered by user code
    (``--import``) and entry points."""
    _load_entry_points()
    shipped = _catalogue()
    if shipped is None:
        return [describe(m) for m in all_mechanisms()]
    names = {d["name"] for d in shipped}
    extra = [describe(m) for m in _REGISTRY.values() if m.name not in names]
    return sorted(shipped + extra, key=lambda d: d["name"])


if __name__ == "__main__":  # pragma: no cover
    from fairalloc import registry as _registry  # the importable module, not __main__

    print(f"wrote {_registry.write_catalogue()}")
