"""[PSDSF] §V: utilization of PS-DSF, TSF and C-DRFH on the four-class cluster with user churn (Fig. 6).

The cluster and users of [PSDSF] Fig. 5 / Table III (:func:`fairalloc.generate.psdsf_section5`, 120
servers): four users with weights (2, 2, 1, 1), users 3–4 only on classes C–D. Over ``(0, 300)`` s every
user is active except user 4, which is away during ``(100, 250)`` s. As in the paper:

- **PS-DSF** runs its distributed form ([PSDSF] §III-D): it starts from DRF on each server and, every
  second, every server runs the *server procedure* of Algorithm I once, in a random order, from the
  allocation of the second before (a user that leaves drops its tasks; one that returns starts from none);
- **TSF** and **C-DRFH** are computed exactly (``fairalloc.solve``) for the users active in that second.

The exact PS-DSF allocation (``fairalloc.solve(..., "ps-dsf")``) of each active set is the reference the
distributed run should reach. Outputs: CPU and memory utilization per class and second
(``psdsf_churn.csv``), the figure (``psdsf_churn.png``: Fig. 6's CPU of classes C and D) and a summary
with Table IV side by side with ours (``psdsf_churn.md``).
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import numpy as np
import pandas as pd

NAME = "psdsf_churn"
DESCRIPTION = ("[PSDSF] §V Fig. 6 / Table IV: CPU utilization of classes C, D under distributed PS-DSF, "
               "TSF and C-DRFH over 300 s with user 4 away for (100, 250) s")

log = logging.getLogger(__name__)

HORIZON = 300
AWAY = (100, 250)  # user 4 inactive in this interval ([PSDSF] §V)
CLASSES = ("A", "B", "C", "D")
TABLE_IV = {  # [PSDSF] Table IV: tasks per class (A, B, C, D)
    "ps-dsf": {"u1": (40, 170, 0, 0), "u2": (20, 85, 0, 0), "u3": (0, 0, 82.5, 0), "u4": (0, 0, 0, 27.5)},
    "tsf": {"u1": (35, 170, 0, 0), "u2": (22.5, 85, 0, 0), "u3": (0, 0, 58.33, 0), "u4": (0, 0, 8.05, 27.5)},
}


def active_users(t: int, away: tuple[int, int] = AWAY) -> tuple[str, ...]:
    """The users active during second ``t`` (user 4 is away during ``away``)."""
    return ("u1", "u2", "u3") if away[0] <= t < away[1] else ("u1", "u2", "u3", "u4")


def class_utilization(inst: Any, x: np.ndarray) -> dict[str, float]:
    """``{resource}_{class}``: used over capacity of each resource, pooled over the servers of a class."""
    cls = np.array([s[0] for s in inst.servers])
    load = np.einsum("ni,nr->ir", np.asarray(x, float), inst.demand)
    out = {}
    for k, r in enumerate(inst.resources):
        for c in CLASSES:
            sel = cls == c
            out[f"{r}_{c}"] = float(load[sel, k].sum() / inst.capacity[sel, k].sum())
    return out


def class_tasks(inst: Any, x: np.ndarray) -> dict[str, tuple[float, ...]]:
    """Tasks of every user on every class (the rows of Table IV)."""
    cls = np.array([s[0] for s in inst.servers])
    return {u: tuple(float(x[n, cls == c].sum()) for c in CLASSES) for n, u in enumerate(inst.users)}


def simulate(expand: bool = True, horizon: int = HORIZON, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """Run the experiment; returns one row per (second, mechanism) and the exact allocations per
    active set (``{(mechanism, users): x}``)."""
    from fairalloc import solve
    from fairalloc.generate import psdsf_section5
    from fairalloc.models._perserver import server_rows
    from fairalloc.models.psdsf import drf_server, server_procedure

    rng = np.random.default_rng(seed)
    everyone = psdsf_section5(expand=expand)
    x = np.zeros((everyone.n_users, everyone.n_servers))  # distributed PS-DSF state, all four users
    for r in server_rows(everyone):
        x[:, r.server] = drf_server(everyone, r)
    exact: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}
    cache: dict[tuple[str, ...], tuple[Any, list, np.ndarray]] = {}
    rows: list[dict[str, Any]] = []
    for t in range(horizon):
        users = active_users(t)
        if users not in cache:
            inst = psdsf_section5(users, expand=expand)
            cache[users] = (inst, server_rows(inst), np.array([everyone.users.index(u) for u in users]))
            for mech in ("ps-dsf", "tsf", "drfh"):
                res = solve(inst, mech, **({"algorithm": "paper"} if mech == "ps-dsf" else {}))
                if not res.ok:
                    log.warning("%s on %s: %s", mech, users, res.status.value)
                exact[mech, users] = res.x
        inst, srows, idx = cache[users]
        gone = np.setdiff1d(np.arange(everyone.n_users), idx)
        x[gone] = 0.0  # a user that leaves releases its tasks
        xa = x[idx].copy()
        updates = 0
        for k in rng.permutation(len(srows)):
            u, _ = server_procedure(inst, xa, srows[k])
            updates += u
        x[idx] = xa
        for mech, alloc in (("ps-dsf (distributed)", xa), ("ps-dsf", exact["ps-dsf", users]),
                            ("tsf", exact["tsf", users]), ("drfh", exact["drfh", users])):
            rows.append({"t": t, "mechanism": mech, "active": ",".join(users),
                         "updates": updates if mech.endswith("(distributed)") else 0,
                         "distance": _distance(xa, exact["ps-dsf", users]) if mech.endswith("(distributed)")
                         else 0.0,
                         **class_utilization(inst, alloc)})
    return pd.DataFrame(rows), exact


def _distance(x: np.ndarray, ref: np.ndarray) -> float:
    """``max_n |X_n − X*_n| / max_n X*_n``: how far the totals are from the exact PS-DSF ones."""
    X, R = x.sum(axis=1), ref.sum(axis=1)
    return float(np.abs(X - R).max() / max(1e-12, R.max()))


def run(out: pathlib.Path, quick: bool = False) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fairalloc.generate import psdsf_section5

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    frame, exact = simulate(expand=not quick)  # quick: the pooled classes (the same fluid instance)
    frame.to_csv(out / f"{NAME}.csv", index=False)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    styles = {"ps-dsf (distributed)": "-", "tsf": "--", "drfh": ":"}
    for ax, c in zip(axes, ("C", "D")):
        for mech, ls in styles.items():
            f = frame[frame.mechanism == mech]
            ax.plot(f.t, f[f"cpu_{c}"], ls, label=mech, lw=1.8)
        ax.axvspan(*AWAY, color="0.9", zorder=0, label="user 4 away")
        ax.set_title(f"CPU utilization, class {c}")
        ax.set_xlabel("time (s)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out / f"{NAME}.png", dpi=110)
    plt.close(fig)

    phases = {"all active": lambda t: t < AWAY[0] or t >= AWAY[1],
              "user 4 away": lambda t: AWAY[0] <= t < AWAY[1]}
    summary = []
    for phase, sel in phases.items():
        for mech in ("ps-dsf (distributed)", "ps-dsf", "tsf", "drfh"):
            f = frame[(frame.mechanism == mech) & frame.t.map(sel)]
            summary.append({"phase": phase, "mechanism": mech,
                            **{k: float(f[k].mean()) for k in frame.columns if k[:4] in ("cpu_", "mem_")}})
    dist = frame[frame.mechanism == "ps-dsf (distributed)"]
    settle = _settling(dist)
    everyone = psdsf_section5()
    tables = {m: class_tasks(everyone, _pooled(exact[m, everyone.users], quick)) for m in ("ps-dsf", "tsf")}
    _markdown(out / f"{NAME}.md", summary, settle, tables, quick)
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}.png", f"{NAME}.md"], "summary": summary,
            "settling": settle, "table_iv": tables}


def _pooled(x: np.ndarray, pooled: bool) -> np.ndarray:
    """Per-class tasks as a 4-server allocation (the 120 servers summed per class)."""
    if pooled:
        return x
    from fairalloc.generate import four_class_cluster

    _, _, classes = four_class_cluster(expand=True)
    cls = np.array(classes)
    return np.stack([x[:, cls == c].sum(axis=1) for c in CLASSES], axis=1)


def _settling(dist: pd.DataFrame, tol: float = 1e-6) -> dict[str, int | None]:
    """Seconds the distributed run needs, after start and after each change of the active set, until its
    totals stay within ``tol`` (relative) of the exact PS-DSF ones."""
    out: dict[str, int | None] = {}
    for label, start in (("start", 0), ("user 4 leaves", AWAY[0]), ("user 4 returns", AWAY[1])):
        end = {0: AWAY[0], AWAY[0]: AWAY[1], AWAY[1]: HORIZON}[start]
        seg = dist[(dist.t >= start) & (dist.t < end)]
        ok = seg.distance.to_numpy() <= tol
        idx = next((k for k in range(len(ok)) if ok[k:].all()), None)
        out[label] = None if idx is None else int(idx + 1)
    return out


def _markdown(path: pathlib.Path, summary: list[dict[str, Any]], settle: dict[str, int | None],
              tables: dict[str, dict[str, tuple[float, ...]]], quick: bool) -> None:
    size = "quick: pooled classes" if quick else "120 servers"
    lines = [f"# [PSDSF] §V: utilization with user churn ({size})", "",
             "Instance: `fairalloc.generate.psdsf_section5` (Table III's γ exactly; demands derived from "
             "it). Mean utilization per class while all users are active and while user 4 is away:", "",
             "| phase | mechanism | CPU A | CPU B | CPU C | CPU D | mem C | mem D |",
             "|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['phase']} | {s['mechanism']} | {s['cpu_A']:.3f} | {s['cpu_B']:.3f} | "
                     f"{s['cpu_C']:.3f} | {s['cpu_D']:.3f} | {s['mem_C']:.3f} | {s['mem_D']:.3f} |")
    lines += ["", "Distributed PS-DSF: periods (seconds) until the totals stay within 10⁻⁶ of the exact "
              "PS-DSF allocation: " + ", ".join(f"{k}: {v}" for k, v in settle.items()) + ".", "",
              "Tasks per class, all users active (ours / [PSDSF] Table IV):", "",
              "| mechanism | user | A | B | C | D |", "|---|---|---|---|---|---|"]
    for mech, rows in tables.items():
        for u, vals in rows.items():
            paper = TABLE_IV[mech][u]
            cells = " | ".join(f"{a:.2f} / {b:g}" for a, b in zip(vals, paper))
            lines.append(f"| {mech} | {u} | {cells} |")
    lines += ["", f"![{NAME}]({NAME}.png)", ""]
    path.write_text("\n".join(lines))
