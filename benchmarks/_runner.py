"""Run benchmark cases in child processes (:mod:`benchmarks._case`) and collect their JSON."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "environment", "run_case"]

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("benchmarks")


def run_case(spec: dict[str, Any], timeout: float = 1800.0) -> dict[str, Any]:
    """Run one case in a fresh interpreter; a crash or a timeout is a row with that status."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        path = f.name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    try:
        proc = subprocess.run([sys.executable, "-m", f"{__package__}._case", path], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("case %s timed out after %.0f s", spec, timeout)
        return {"status": "timeout", "end_to_end": float("nan")}
    finally:
        os.unlink(path)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        log.warning("case %s failed: %s", spec, tail[0])
        return {"status": f"crash: {tail[0][:200]}", "end_to_end": float("nan")}
    return json.loads(lines[-1])


def environment() -> dict[str, str]:
    """Versions and machine facts for a benchmark's summary."""
    import platform

    import cvxpy
    import pyomo

    from fairalloc.solvers.highs import new_highs

    h = new_highs()
    return {"python": platform.python_version(), "pyomo": pyomo.__version__,
            "highspy": f"{h.versionMajor()}.{h.versionMinor()}.{h.versionPatch()}",
            "cvxpy": cvxpy.__version__, "cores": str(os.cpu_count()),
            "machine": platform.machine()}
