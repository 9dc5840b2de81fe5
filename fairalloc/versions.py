"""The versions a number depends on, recorded in every result's ``solver`` block and every batch row.

Read from the installed distributions' metadata (nothing is imported, so this costs no start-up time).
The Ipopt entry names the route in use: the executable found on ``PATH`` (its ``--version``), or the
Ipopt bundled in the ``casadi`` wheel.
"""

from __future__ import annotations

import functools
import platform
from importlib import metadata
from typing import Any

__all__ = ["versions"]

PACKAGES = ("fairalloc", "pyomo", "highspy", "casadi", "numpy", "scipy", "pyscipopt")


def _dist(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _ipopt() -> str | None:
    from fairalloc.solvers.ipopt import ipopt_executable

    exe = ipopt_executable()
    if exe:
        import subprocess

        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
            return f"{out.split()[1]} (executable)" if out.startswith("Ipopt") else "executable"
        except (OSError, subprocess.SubprocessError, IndexError):
            return "executable"
    return "3.14 (casadi)" if _dist("casadi") else None


@functools.lru_cache(maxsize=2)
def versions(nlp: bool = False) -> dict[str, Any]:
    """``{package: version}`` for the packages in :data:`PACKAGES` that are installed, plus Python's
    version and, when ``nlp`` (an Ipopt route was used), the Ipopt route's version."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for name in PACKAGES:
        v = _dist(name)
        if v is not None:
            out[name] = v
    if nlp:
        ip = _ipopt()
        if ip:
            out["ipopt"] = ip
    return out
