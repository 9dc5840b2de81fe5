"""Shared fixtures: the docs/examples.md example files and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# CI (CI=true) runs the property tests on a fixed sequence of examples, so a red build is
# reproducible; locally every run explores new examples (and keeps failures in .hypothesis/)
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m fairalloc ARGS`` in a subprocess, as a user would."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "fairalloc", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env=env)


@pytest.fixture
def cli():
    return run_cli


def require_scip() -> None:
    """Skip unless the SCIP route works here (pyscipopt, and Pyomo ≥ 6.10.1 for its 'scip_direct')."""
    from fairalloc.solvers.session import SOLVERS

    if SOLVERS["scip"].probe() is None:
        pytest.skip("SCIP route unavailable (needs pyscipopt and Pyomo >= 6.10.1)")
