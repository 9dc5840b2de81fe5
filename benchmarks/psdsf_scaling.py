"""PS-DSF at scale: Algorithm I (``algorithm=paper``) against the numpy best responses
(``algorithm=fast``) on ``random_instance(seed, N, K, 4, missing=0.0)`` (capacity form), and the same with
placement and weights, and time-shared.

Every row records the wall time, the status, the rounds (Algorithm I) or sweeps (fast), and whether the
[PSDSF] Thm 1 certificate (:func:`fairalloc.verify.psdsf.psdsf_certificate`, recomputed here) holds.
Algorithm I runs only up to ``PAPER_MAX`` users (it takes minutes beyond). Outputs ``psdsf_scaling.csv``
and ``psdsf_scaling.md``. Times are of one run on the machine at hand; nothing here is asserted by tests.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pandas as pd

NAME = "psdsf_scaling"
DESCRIPTION = "PS-DSF: Algorithm I vs numpy best responses (algorithm=fast), 25x4 to 400x64 users x servers"

SIZES = [(25, 4), (50, 8), (100, 16), (200, 32), (400, 64)]
QUICK_SIZES = [(25, 4), (50, 8)]
FAMILIES = {"plain": {}, "placement+weights": {"placement": True, "weights": True},
            "time-shared": {"time_shared": True}}
PAPER_MAX = 100


def one(N: int, K: int, family: str, algorithm: str, seed: int = 1, max_iter: int = 5000) -> dict[str, Any]:
    from fairalloc import solve
    from fairalloc.generate import random_instance
    from fairalloc.verify import psdsf_certificate

    inst = random_instance(seed, N, K, 4, missing=0.0, **FAMILIES[family])
    t = time.perf_counter()
    r = solve(inst, "ps-dsf", algorithm=algorithm, max_iter=max_iter)
    sec = time.perf_counter() - t
    return {"users": N, "servers": K, "family": family, "algorithm": algorithm, "seconds": round(sec, 3),
            "status": r.status.value, "rounds": r.details.get("rounds", r.details.get("sweeps")),
            "certificate": bool(psdsf_certificate(inst, r.x)["holds"])}


def run(out: pathlib.Path, quick: bool = False, sizes: list[tuple[int, int]] | None = None,
        families: list[str] | None = None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for N, K in sizes or (QUICK_SIZES if quick else SIZES):
        for family in families or list(FAMILIES):
            for algorithm in ("paper", "fast"):
                if algorithm == "paper" and N > PAPER_MAX:
                    continue
                rows.append(one(N, K, family, algorithm, max_iter=200 if quick else 5000))
                pd.DataFrame(rows).to_csv(out / f"{NAME}.csv", index=False)
    frame = pd.DataFrame(rows)
    lines = [f"# {DESCRIPTION}", "", "| users x servers | family | algorithm | seconds | status "
             "| rounds/sweeps | certificate |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['users']} x {row['servers']} | {row['family']} | {row['algorithm']} | "
                     f"{row['seconds']} | {row['status']} | {row['rounds']} | {row['certificate']} |")
    (out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.md"], "rows": len(frame)}
