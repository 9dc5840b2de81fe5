"""The lower bounds in pyproject.toml are the versions constraints/minimum.txt installs (and the suite is
run on them), and the published-benchmark lock pins every dependency the benchmarks use."""

from __future__ import annotations

import re
import sys

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def _pins(name: str) -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints" / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            pkg, ver = line.split("==")
            out[pkg.lower()] = ver
    return out


def _lower_bounds() -> dict[str, str]:
    import pytest

    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(proj["dependencies"]) + [r for extra in ("dev", "bench") for r in
                                         proj["optional-dependencies"][extra]]
    out = {}
    for r in reqs:
        m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)>=([0-9.]+)", r.replace(" ", ""))
        if m and m.group(1).lower() not in out:
            out[m.group(1).lower()] = m.group(2)
    return out


def _norm(v: str) -> tuple[int, ...]:
    parts = [int(p) for p in v.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_minimum_pins_are_the_lower_bounds():
    pins, bounds = _pins("minimum.txt"), _lower_bounds()
    for pkg in ("pyomo", "highspy", "casadi", "numpy", "scipy", "pandas", "pyyaml", "tqdm", "matplotlib",
                "hypothesis", "cvxpy"):
        assert _norm(pins[pkg])[:len(_norm(bounds[pkg]))] == _norm(bounds[pkg]), (pkg, pins[pkg], bounds[pkg])


def test_published_lock_pins_the_solvers():
    pins = _pins("published.txt")
    assert {"pyomo", "highspy", "casadi", "cvxpy", "numpy"} <= set(pins)
