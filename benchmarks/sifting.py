"""Sifting and interior points in the HiGHS bridge (issue 16): fairalloc with the default
(``sifting=auto``, the Schur-complement interior point for later rounds) and with ``sifting=on`` vs
the numpy→highspy floor vs fairalloc with ``sifting=off`` and with ``schur=off`` (HiGHS's IPX for
the interior rounds), tsf-er (``MECHANISM=drfh`` etc. for another) on the scaling workload
(:mod:`benchmarks.scaling`), each case in a fresh process, the approaches back to back per
(workload, size). End to end = instance load → allocation (fairalloc: ``Result.timings['total']``,
no verification).

Usage: ``python -m benchmarks.sifting OUT N K [N K ...]`` (default 1024 128); ``WORKLOADS=mixed`` runs
one workload only, ``APPROACHES=auto,floor`` some approaches only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ._runner import run_case
from .scaling import _instance_folder

APPROACHES = [("auto", {"approach": "fairalloc", "verify": False}),
              ("sifting", {"approach": "fairalloc", "solver_options": {"sifting": "on"}, "verify": False}),
              ("floor", {"approach": "floor"}),
              ("no-sifting", {"approach": "fairalloc", "solver_options": {"sifting": "off"},
                              "verify": False}),
              ("schur-off", {"approach": "fairalloc", "solver_options": {"schur": "off"}, "verify": False})]


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else "benchmarks/out/sifting")
    nums = [int(a) for a in argv[1:]] or [1024, 128]
    sizes = list(zip(nums[::2], nums[1::2]))
    rows = []
    for N, K in sizes:
        for workload in os.environ.get("WORKLOADS", "link,mixed").split(","):
            folder = _instance_folder(out, workload, N, K)
            res = {}
            only = os.environ.get("APPROACHES")
            for name, spec in APPROACHES:
                if only and name not in only.split(","):
                    continue
                r = run_case({**spec, "mechanism": os.environ.get("MECHANISM", "tsf-er"),
                              "instance": str(folder)}, timeout=3600)
                res[name] = r
                print(f"{workload} {N}x{K} {name}: {r.get('end_to_end', float('nan')):.2f} s "
                      f"({r.get('status')}, load {r.get('loadavg', float('nan')):.1f})", flush=True)
            f = res["floor"]["end_to_end"] if "floor" in res else float("nan")
            row = {"workload": workload, "users": N, "servers": K,
                   **{n: r.get("end_to_end") for n, r in res.items()},
                   **{f"{n}/floor": r.get("end_to_end", float("nan")) / f for n, r in res.items()},
                   "loadavg": [r.get("loadavg") for r in res.values()],
                   "phases": {n: {k: r.get(k) for k in ("build", "translate", "solve", "solution_load")}
                              for n, r in res.items() if n != "floor"},
                   "max_dX_vs_floor": {n: max(abs(a - b) for a, b in zip(r.get("X", [0]),
                                                                         res.get("floor", {}).get("X", [0])))
                                       for n, r in res.items()}}
            rows.append(row)
            print(json.dumps(row), flush=True)
            (out / "sifting.json").write_text(json.dumps(rows, indent=1))
    print(os.getloadavg())


if __name__ == "__main__":
    main(sys.argv[1:])
