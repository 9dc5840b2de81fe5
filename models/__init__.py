"""One module per mechanism, each a Pyomo model (or the sequence of models an iterative mechanism
solves) built from an :class:`~fairalloc.instance.Instance`.

Shared pieces exist once: :mod:`~fairalloc.models.feasible` (the feasible set χ as a Pyomo block) and
:mod:`~fairalloc.models.maxmin` (weighted lexicographic max-min by progressive filling).
:func:`load_all` imports every mechanism module, which registers it (:func:`fairalloc.registry.mechanism`);
the registry calls it, or imports just the module that defines a requested mechanism (start-up time).
"""

import importlib
import pkgutil

_SHARED = {"feasible", "maxmin"}



def load_all() -> None:
    """Import (and so register) every mechanism module."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_") and info.name not in _SHARED:
            importlib.import_module(f"{__name__}.{info.name}")
