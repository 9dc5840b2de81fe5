"""``fairalloc simulate``: the command line of :mod:`fairalloc.simulate` (registered through
``fairalloc.cli.EXTENSIONS``).

    fairalloc simulate WORKLOAD [-g key=value ...] -m MECH [-m MECH ...] [-p key=value ...]
        [--model fluid|indivisible] [--slot S] [--overhead S] [--sample S] [--fill task|user]
        [--fill-on users|tasks] [--seed N] [--task-limits] [--solver NAME] [--time-limit S]
        [-o DIR] [--save-workload FILE] [--json] [--no-progress]

``WORKLOAD`` is a workload file (``.yaml``/``.yml``/``.json``) or a generator name (``google``,
``alibaba``) with its parameters as ``-g key=value``. Prints one summary row per mechanism (or JSON);
``-o DIR`` also writes each run's jobs, timeline and summary and a comparison figure. Exit codes: 0
every run completed; 1 a solve stopped some run (its row says which status); 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "cmd_simulate", "resolve_workload"]


def _key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    from fairalloc.errors import ParameterError

    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ParameterError(f"{flag} {item!r}: expected key=value")
        k, v = (s.strip() for s in item.split("=", 1))
        out[k] = v
    return out


def resolve_workload(spec: str, gparams: dict[str, str]) -> Any:
    """A workload file, or a generator name with its parameters."""
    from fairalloc.simulate.generators import GENERATORS, generate
    from fairalloc.simulate.workload import WorkloadError, load_workload

    if Path(spec).exists():
        if gparams:
            raise WorkloadError(f"-g {next(iter(gparams))}=…: generator parameters need a generator "
                                f"name ({', '.join(GENERATORS)}), not a file")
        return load_workload(spec)
    return generate(spec, **gparams)


def cmd_simulate(args: argparse.Namespace) -> int:
    import pandas as pd

    from fairalloc.errors import ParameterError
    from fairalloc.registry import get_mechanism
    from fairalloc.simulate import simulate_fluid, simulate_online
    from fairalloc.simulate.result import plot_comparison

    mechs = [get_mechanism(m).name for m in args.mechanism]
    model = args.model or ("indivisible" if "tsf-er-online" in mechs else "fluid")
    if model == "fluid" and "tsf-er-online" in mechs:
        raise ParameterError("-m tsf-er-online: runs whole tasks; use --model indivisible")
    params = _key_values(args.param, "-p")
    for k in params:
        if not any(k in {p.name for p in get_mechanism(m).params} for m in mechs):
            raise ParameterError(f"-p {k}=…: no mechanism among {', '.join(mechs)} takes it")
    wl = resolve_workload(args.workload, _key_values(args.gen, "-g"))
    if args.save_workload:
        wl.save(args.save_workload)
        print(f"workload {wl.name}: {wl.n_jobs} jobs -> {args.save_workload}", file=sys.stderr)
    results = []
    for m in mechs:
        own = {k: v for k, v in params.items() if k in {p.name for p in get_mechanism(m).params}}
        common = {"params": own, "solver": args.solver, "time_limit": args.time_limit,
                  "progress": not args.no_progress}
        if model == "fluid":
            r = simulate_fluid(wl, m, task_limits=args.task_limits, **common)
        else:
            r = simulate_online(wl, m, slot=args.slot, overhead=args.overhead, sample=args.sample,
                                fill=args.fill, fill_on=args.fill_on, seed=args.seed, **common)
        results.append(r)
        if not r.ok:
            print(f"{r.label}: status {r.status.value}: {r.message}", file=sys.stderr)
    table = pd.DataFrame([r.summary() for r in results])
    if args.output:
        out = Path(args.output)
        for r in results:
            r.save(out, prefix=r.mechanism)
        table.to_csv(out / "summary.csv", index=False)
        plot_comparison(results, out / "comparison.png")
        print(f"{len(results)} run(s) -> {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(table.to_dict(orient="records"), indent=2, default=str))
    else:
        cols = ["mechanism", "model", "status", "finished", "mean_jct_factor", "utilization", "queue",
                "min_ef_sat", "min_si_sat"]
        print(f"{wl.name}: {wl.n_jobs} jobs, {wl.instance.n_servers} servers")
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0 if all(r.ok for r in results) else 1


def add_parser(sub: Any) -> None:
    s = sub.add_parser(
        "simulate", help="simulate arriving jobs over time (fluid or indivisible tasks): JCT factor, "
        "utilization, queue, MIN-EF-SAT, MIN-SI-SAT",
        description="Simulate a workload of arriving jobs ([TSFER] §5-6) under one or more "
        "mechanisms: the fluid model re-solves the mechanism at every arrival and departure; the "
        "indivisible model runs whole tasks with Algorithm 2 (-m tsf-er-online) or a mechanism's "
        "fractional allocation rounded down plus random filling (-m mnw, -m cru, ...).")
    s.add_argument("workload", metavar="WORKLOAD",
                   help="workload file (.yaml/.yml/.json) or generator name (google, alibaba)")
    s.add_argument("-g", "--gen", action="append", metavar="KEY=VALUE",
                   help="generator parameter, repeatable (e.g. -g users=15 -g rho=0.7 -g bw=2 -g seed=3)")
    s.add_argument("-m", "--mechanism", action="append", required=True, metavar="MECH",
                   help="mechanism, repeatable (fairalloc mechanisms; tsf-er-online = Algorithm 2)")
    s.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="mechanism parameter, repeatable; each mechanism gets those it declares")
    s.add_argument("--model", choices=("fluid", "indivisible"),
                   help="task model (default: indivisible with tsf-er-online, else fluid)")
    s.add_argument("--slot", type=float, default=256.0, metavar="S",
                   help="indivisible: reallocation slot length in seconds (default 256; inf: never)")
    s.add_argument("--overhead", type=float, default=0.25, metavar="S",
                   help="indivisible: suspend/resume overhead per suspended task (default 0.25 s)")
    s.add_argument("--sample", type=float, default=3600.0, metavar="S",
                   help="indivisible: width of the timeline bins (default 3600 s)")
    s.add_argument("--fill", choices=("task", "user"), default="task",
                   help="rounded baselines: random filling draws a waiting task (default) or a job")
    s.add_argument("--fill-on", choices=("users", "tasks"), default="users",
                   help="rounded baselines: fill on job arrivals/departures (default) or also on "
                   "every task departure")
    s.add_argument("--seed", type=int, default=0, help="seed of the random filling (default 0)")
    s.add_argument("--task-limits", action="store_true",
                   help="fluid: cap each job's rate at its number of tasks (the paper does not)")
    s.add_argument("--solver", help="solver for the mechanism's solves (fairalloc solvers)")
    s.add_argument("--time-limit", type=float, metavar="S", help="time limit per solve (seconds)")
    s.add_argument("-o", "--output", metavar="DIR",
                   help="write <mech>-jobs.csv, <mech>-timeline.csv, <mech>-summary.json, "
                   "<mech>-simulation.png, summary.csv and comparison.png here")
    s.add_argument("--save-workload", metavar="FILE", help="write the workload (.yaml/.json) here")
    s.add_argument("--json", action="store_true", help="print the summary rows as JSON")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_simulate)
