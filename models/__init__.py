"""One module per mechanism, each a Pyomo model (or the sequence of models an iterative mechanism
solves) built from an :class:`~fairalloc.instance.Instance`.

Shared pieces exist once: :mod:`~fairalloc.models.feasible` (the feasible set χ as a Pyomo block) and
:mod:`~fairalloc.models.maxmin` (weighted lexicographic max-min by progressive filling). Importing this
package imports every mechanism module, which registers it (:func:`fairalloc.registry.mechanism`).
"""

import importlib
import pkgutil

_SHARED = {"feasible", "maxmin"}

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _info.name.startswith("_") and _info.name not in _SHARED:
        importlib.import_module(f"{__name__}.{_info.name}")
