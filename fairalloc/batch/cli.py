"""``fairalloc batch``: the command line of :func:`fairalloc.batch.run` (registered through
``fairalloc.cli.EXTENSIONS``).

Exit codes: 0 every task ended ``optimal``/``converged``; 1 the batch completed but some rows record
another status; 2 bad input (paths, mechanism, parameter, output file) — nothing ran; 128+signal when
interrupted (every finished task is kept; rerun with ``--resume``).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

__all__ = ["add_parser", "cmd_batch"]


def _param_sets(items: list[str] | None) -> list[dict[str, str]]:
    """``-p k=v`` options; a key given several times is a sweep over its values (cartesian product)."""
    from fairalloc.batch.tasks import grid
    from fairalloc.errors import ParameterError

    values: dict[str, list[str]] = {}
    for item in items or []:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ParameterError(f"-p {item!r}: expected key=value")
        k, v = (s.strip() for s in item.split("=", 1))
        if v not in values.setdefault(k, []):
            values[k].append(v)
    return grid(**values)


def cmd_batch(args: argparse.Namespace) -> int:
    from fairalloc.batch import BatchInterrupted, format_summary, run

    try:
        df = run(args.paths, args.mechanism or [], _param_sets(args.param), solver=args.solver,
                 time_limit=args.time_limit, hard_limit=args.hard_limit, out=args.out,
                 json_dir=args.json_dir, resume=args.resume, retry_failed=args.retry_failed,
                 overwrite=args.overwrite, workers=args.workers, scheduler=args.scheduler,
                 dask_local=args.dask_local, imports=args.imports or [], verify=args.verify,
                 progress=not args.no_progress, customize=getattr(args, "customize", None))
    except BatchInterrupted as exc:
        name = signal.Signals(exc.signum).name
        print(f"interrupted by {name}: " + format_summary(exc.summary), file=sys.stderr)
        return 128 + int(exc.signum)
    print(format_summary(df.attrs["summary"]), file=sys.stderr)
    return 0 if bool(df["ok"].all()) else 1


def add_parser(sub: Any) -> None:
    b = sub.add_parser(
        "batch", help="solve many instances × mechanisms × parameters; resumable results table",
        description="Run every instance × mechanism × parameter set × solver in isolated worker "
        "processes (or on Dask), recording one row per task in a CSV/Parquet table as tasks finish. "
        "A failing task is a row with its status and message, never the end of the batch.")
    b.add_argument("paths", nargs="+", metavar="PATH",
                   help="instance file, directory (a CSV instance, or scanned for .yaml/.yml/.json and "
                   "CSV instances), glob, or manifest .csv (instance[,mechanism][,params][,solver])")
    b.add_argument("-m", "--mechanism", action="append", metavar="MECH",
                   help="mechanism, repeatable (fairalloc mechanisms)")
    b.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="mechanism parameter, repeatable; a key given again is a sweep over its values; "
                   "each mechanism gets the parameters it declares")
    b.add_argument("--solver", action="append", metavar="NAME",
                   help="solver (fairalloc solvers), repeatable for a sweep; default by problem class")
    b.add_argument("--time-limit", type=float, metavar="S", help="solver time limit per task (seconds)")
    b.add_argument("--hard-limit", type=float, metavar="S",
                   help="kill a task after S wall-clock seconds (default: time limit + max(5, limit/2))")
    b.add_argument("-o", "--out", required=True, metavar="RESULTS",
                   help="results table, .csv or .parquet (its journal: RESULTS.journal.jsonl)")
    b.add_argument("--json-dir", metavar="DIR", help="also write each task's result JSON here")
    b.add_argument("--resume", action="store_true", help="skip tasks already recorded in the journal")
    b.add_argument("--retry-failed", action="store_true",
                   help="with --resume: rerun recorded tasks that did not end optimal/converged")
    b.add_argument("--overwrite", action="store_true", help="discard earlier results of RESULTS")
    b.add_argument("--workers", type=int, metavar="N",
                   help="local worker processes (default: number of cores)")
    b.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run on a Dask distributed cluster")
    b.add_argument("--dask-local", type=int, metavar="N",
                   help="start a Dask LocalCluster with N worker processes and run on it")
    b.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                   help="module or .py file registering extra mechanisms (imported in every worker)")
    b.add_argument("--verify", action="store_true",
                   help="run the full verification (feasibility is always checked)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_batch)
