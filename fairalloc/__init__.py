"""fairalloc: exact, solver-backed multi-resource fair allocation on heterogeneous servers.

>>> import fairalloc
>>> inst = fairalloc.load_instance("examples/psdsf-fig1.yaml")   # doctest: +SKIP
>>> fairalloc.solve(inst, "drfh").tasks                          # doctest: +SKIP
array([5.45454545, 6.54545455])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fairalloc.errors import FairallocError, InstanceError, ParameterError, SolverUnavailableError
from fairalloc.status import Status

if TYPE_CHECKING:
    from fairalloc.api import solve
    from fairalloc.instance import Instance
    from fairalloc.io import instance_to_dict, load_instance, parse_instance, save_instance
    from fairalloc.registry import Param, Solution, mechanism
    from fairalloc.result import Result

# imported on first use, so that `fairalloc --help` and `fairalloc mechanisms` start fast
_LAZY = {"Instance": "fairalloc.instance", "Result": "fairalloc.result",
         **dict.fromkeys(["instance_to_dict", "load_instance", "parse_instance", "save_instance"],
                         "fairalloc.io"),
         **dict.fromkeys(["Param", "Solution", "mechanism"], "fairalloc.registry"),
         "solve": "fairalloc.api"}  # the function itself, so help(fairalloc.solve) shows its signature

__version__ = "0.1.0"

__all__ = [
    "FairallocError",
    "Instance",
    "InstanceError",
    "Param",
    "ParameterError",
    "Result",
    "Solution",
    "SolverUnavailableError",
    "Status",
    "__version__",
    "instance_to_dict",
    "load_instance",
    "mechanism",
    "mechanisms",
    "parse_instance",
    "save_instance",
    "solve",
]


def mechanisms() -> list[str]:
    """Names of the registered mechanisms."""
    from fairalloc.registry import describe_mechanisms

    return [m["name"] for m in describe_mechanisms()]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    # `fairalloc.verify(instance, result)` without importing the verification layer (and Pyomo) up front
    if name == "verify":
        import fairalloc.verify as verify

        return verify
    if name in ("modelling", "Session"):  # the building blocks import Pyomo: only when asked for
        import fairalloc.modelling as modelling

        return modelling if name == "modelling" else modelling.Session
    raise AttributeError(f"module 'fairalloc' has no attribute {name!r}")
