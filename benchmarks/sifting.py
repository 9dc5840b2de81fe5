"""Sifting in the HiGHS bridge (issue 16): fairalloc with ``sifting=on`` vs the numpy→highspy floor vs
fairalloc with ``sifting=off``, tsf-er on the scaling workload (:mod:`benchmarks.scaling`), each case
in a fresh process, the three approaches back to back per (workload, size). End to end = instance load
→ allocation (fairalloc: ``Result.timings['total']``, no verification).

Usage: ``python -m benchmarks.sifting OUT N K [N K ...]`` (default 1024 128); ``WORKLOADS=mixed`` runs
one workload only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ._runner import run_case
from .scaling import _instance_folder

APPROACHES = [("sifting", {"approach": "fairalloc", "solver_options": {"sifting": "on"}, "verify": False}),
              ("floor", {"approach": "floor"}),
              ("no-sifting", {"approach": "fairalloc", "solver_options": {"sifting": "off"},
                              "verify": False})]


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else "benchmarks/out/sifting")
    nums = [int(a) for a in argv[1:]] or [1024, 128]
    sizes = list(zip(nums[::2], nums[1::2]))
    rows = []
    for N, K in sizes:
        for workload in os.environ.get("WORKLOADS", "link,mixed").split(","):
            folder = _instance_folder(out, workload, N, K)
            res = {}
            for name, spec in APPROACHES:
                r = run_case({**spec, "mechanism": "tsf-er", "instance": str(folder)}, timeout=3600)
                res[name] = r
                print(f"{workload} {N}x{K} {name}: {r.get('end_to_end', float('nan')):.2f} s "
                      f"({r.get('status')}, load {r.get('loadavg', float('nan')):.1f})", flush=True)
            f = res["floor"]["end_to_end"]
            row = {"workload": workload, "users": N, "servers": K,
                   **{n: r.get("end_to_end") for n, r in res.items()},
                   "sifting/floor": res["sifting"]["end_to_end"] / f,
                   "no-sifting/floor": res["no-sifting"]["end_to_end"] / f,
                   "loadavg": [r.get("loadavg") for r in res.values()],
                   "phases_sifting": {k: res["sifting"].get(k) for k in ("build", "translate", "solve",
                                                                         "solution_load")},
                   "max_dX_vs_floor": max(abs(a - b) for a, b in zip(res["sifting"].get("X", [0]),
                                                                     f and res["floor"].get("X", [0])))}
            rows.append(row)
            print(json.dumps(row), flush=True)
            (out / "sifting.json").write_text(json.dumps(rows, indent=1))
    print(os.getloadavg())


if __name__ == "__main__":
    main(sys.argv[1:])
