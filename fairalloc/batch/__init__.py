"""Batch solving: many instances × mechanisms × parameters × solvers, isolated, resumable.

>>> from fairalloc.batch import run, grid                                # doctest: +SKIP
>>> df = run(["instances/"], ["drfh", "tsf"], out="results.csv", time_limit=60)  # doctest: +SKIP
>>> df.groupby("mechanism").sum_tasks.mean()                           # doctest: +SKIP

:func:`run` plans the tasks (:mod:`~fairalloc.batch.tasks`), skips those its journal already holds when
resuming, runs the rest on a backend (:mod:`~fairalloc.batch.backends`: local worker processes or
Dask), records every finished task at once (:mod:`~fairalloc.batch.journal`) and returns the results
table. A task's failure — bad instance, solver error, crash, time-out — is a row, never the end of the
batch. See ``docs/batch.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from fairalloc.batch.journal import (
    Journal,
    journal_path,
    read_results,
    table_format,
    tasks_frame,
    to_frame,
    write_table,
)
from fairalloc.batch.tasks import BatchError, Task, grid, load_plugins, plan, task_key
from fairalloc.batch.work import failure
from fairalloc.errors import ParameterError

__all__ = ["BatchError", "BatchInterrupted", "Task", "default_hard_limit", "format_summary", "grid",
           "plan", "read_results", "run", "tasks_frame"]

log = logging.getLogger(__name__)

SNAPSHOT_SECONDS = 10.0  # the table is rewritten from the journal at most this often while running


class BatchInterrupted(KeyboardInterrupt):
    """The batch stopped on SIGINT/SIGTERM after recording every finished task."""

    def __init__(self, signum: int, summary: dict[str, Any]) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.summary = summary


def default_hard_limit(time_limit: float | None) -> float | None:
    """Wall-clock limit after which a task's worker is killed: the solver's limit plus a grace for
    loading, model building and verification (max(5 s, half the limit)); none without a limit."""
    return None if time_limit is None else time_limit + max(5.0, 0.5 * time_limit)


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event, got: dict[str, int]) -> Iterator[None]:
    """First SIGINT/SIGTERM: finish cleanly (record, write the table). A second Ctrl-C: at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        got.setdefault("signum", signum)
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60] or "instance"


def _write_doc(folder: Path, task: Task, outcome: dict[str, Any], row: dict[str, Any]) -> None:
    import json

    from fairalloc.result import _jsonable

    doc = outcome.get("doc") or {"instance": row.get("instance_name") or task.label,
                                 "mechanism": task.mechanism, "status": row["status"],
                                 "message": row.get("message", ""), "parameters": task.params}
    doc = {**doc, "batch": {"key": task.key, "instance_path": task.instance,
                            "solver_requested": task.solver, "wall_seconds": row.get("wall_seconds"),
                            "worker": row.get("worker"), "finished_at": row["finished_at"]}}
    name = f"{_safe(Path(task.instance).stem)}__{_safe(task.mechanism)}__{task.key}.json"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps(_jsonable(doc), indent=2) + "\n")
    os.replace(tmp, folder / name)


def _backend(workers: int | None, scheduler: str | None, dask_local: int | None, client: Any,
             n_tasks: int) -> Any:
    from fairalloc.batch.backends import DaskBackend, LocalPool, default_workers

    if sum(x is not None for x in (scheduler, dask_local, client)) > 1:
        raise BatchError("batch: choose one of --scheduler, --dask-local (or client=)")
    if scheduler is not None or dask_local is not None or client is not None:
        if dask_local is not None and dask_local < 1:
            raise BatchError(f"--dask-local {dask_local}: must be >= 1")
        return DaskBackend(client=client, scheduler=scheduler, local=dask_local)
    if workers is not None and workers < 1:
        raise BatchError(f"--workers {workers}: must be >= 1")
    level = logging.getLogger("fairalloc").getEffectiveLevel()
    return LocalPool(min(workers or default_workers(), max(1, n_tasks)), log_level=level)


def run(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        mechanisms: str | Sequence[str] = (),
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None, *,
        solver: str | Sequence[str] | None = None, time_limit: float | None = None,
        hard_limit: float | None = None, out: str | os.PathLike[str] | None = None,
        json_dir: str | os.PathLike[str] | None = None, resume: bool = False,
        retry_failed: bool = False, overwrite: bool = False, workers: int | None = None,
        scheduler: str | None = None, dask_local: int | None = None, client: Any = None,
        imports: str | Sequence[str] = (), verify: bool = False, progress: bool = True,
        customize: Any = None) -> pd.DataFrame:
    """Run every instance × mechanism × parameter set × solver; return the results table.

    ``paths``: instance files, directories, globs or manifest CSVs (:mod:`fairalloc.batch.tasks`).
    ``params``: one parameter set (a dict) or several (a list of dicts, e.g. from :func:`grid`); each
    mechanism receives the parameters it declares. ``solver``: one name or several (a sweep).
    ``time_limit`` (seconds) goes to every solve; ``hard_limit`` kills a task's worker after that
    many wall-clock seconds (default :func:`default_hard_limit`). ``out`` (.csv/.parquet) keeps the
    results on disk with a journal beside it; ``resume`` skips tasks the journal holds
    (``retry_failed`` also reruns those not ``optimal``/``converged``); ``overwrite`` starts afresh.
    ``json_dir``: one result JSON per task. Backend: local worker processes (``workers``, default
    the number of cores), or Dask (``scheduler`` address, ``dask_local`` workers in a LocalCluster,
    or an existing distributed ``client``). ``imports``: modules or ``.py`` files registering
    extra mechanisms (imported here and in every worker). ``verify`` embeds the full verification
    report in the JSON results and a ``{property: holds}`` summary in the table. ``customize``: the
    hook of :func:`fairalloc.solve`, as a module-level function or ``"FILE.py:FUNCTION"`` (workers
    import it by name); it is part of every task's key.

    The table holds every task the journal has recorded (also from earlier runs), one row per task
    key; ``df.attrs["summary"]`` describes this run. On SIGINT/SIGTERM every finished task is kept,
    the table is written and :class:`BatchInterrupted` is raised.
    """
    t_start = time.perf_counter()
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    mechanisms = [mechanisms] if isinstance(mechanisms, str) else list(mechanisms)
    param_sets = [{}] if params is None else [dict(params)] if isinstance(params, Mapping) \
        else [dict(p) for p in params]
    solvers = [solver] if solver is None or isinstance(solver, str) else list(solver)
    imports = [imports] if isinstance(imports, str) else list(imports)
    # workers may run elsewhere (another cwd, a Dask worker): send plugin files as absolute paths
    imports = [str(Path(i).resolve()) if i.endswith(".py") or os.sep in i else i for i in imports]
    if time_limit is not None and not time_limit > 0:
        raise ParameterError(f"time_limit = {time_limit!r}: must be > 0 seconds")
    if hard_limit is not None and not hard_limit > 0:
        raise ParameterError(f"hard_limit = {hard_limit!r}: must be > 0 seconds")
    hard = hard_limit if hard_limit is not None else default_hard_limit(time_limit)
    resume = resume or retry_failed
    if resume and overwrite:
        raise BatchError("batch: --resume and --overwrite exclude each other")

    jpath = None
    exclude: list[Path] = []
    if out is not None:
        table_format(out)
        jpath = journal_path(out)
        exclude += [Path(out), jpath]
        if (jpath.exists() or Path(out).exists()) and not (resume or overwrite):
            raise BatchError(f"{out}: results already exist; pass --resume (resume=True) to continue "
                             "or --overwrite (overwrite=True) to start again")
        if resume and Path(out).exists() and not jpath.exists():
            raise BatchError(f"{out}: its journal {jpath.name} is missing, so finished tasks cannot "
                             "be told apart; pass --overwrite to start again")
    folder = Path(json_dir) if json_dir is not None else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        exclude.append(folder)

    load_plugins(imports)
    hook = None
    if customize is not None:
        from fairalloc.registry import hook_reference

        try:
            hook = hook_reference(customize)
        except ParameterError as exc:
            raise BatchError(str(exc)) from None
    tasks = plan(paths, mechanisms, param_sets, solvers, exclude)
    if hook is not None:  # a customized run is another task: its own key
        tasks = [dataclasses.replace(t, key=task_key(t.instance, t.mechanism, {**t.params,
                                                                                "customize": hook},
                                                     t.solver)) for t in tasks]
    journal = Journal(jpath)
    done = journal.open(fresh=overwrite)
    try:
        todo = [t for t in tasks if t.key not in done or (retry_failed and not done[t.key].get("ok"))]
        summary: dict[str, Any] = {"tasks": len(tasks), "skipped": len(tasks) - len(todo), "ran": 0,
                                   "solved": 0, "failed": 0, "by_status": Counter(), "lost": 0,
                                   "backend": "none", "out": None if out is None else str(out)}
        if summary["skipped"]:
            log.info("skipping %d task(s) already recorded in %s", summary["skipped"], jpath)
        stop, got = threading.Event(), {}
        try:
            if todo:
                with _stop_on_signals(stop, got):
                    _drive(todo, journal, summary, stop, out=out, folder=folder, hard=hard,
                           spec_options={"time_limit": time_limit, "verify": verify,
                                         "imports": imports, "want_doc": folder is not None,
                                         "customize": hook},
                           backend_args=(workers, scheduler, dask_local, client), progress=progress)
        finally:  # also on a second Ctrl-C or an error: the table shows what the journal holds
            summary["seconds"] = time.perf_counter() - t_start
            df = to_frame(journal.records.values())
            if out is not None:
                write_table(df, out)
    finally:
        journal.close()
    summary["by_status"] = dict(summary["by_status"])
    df.attrs["summary"] = summary
    if stop.is_set():
        raise BatchInterrupted(got.get("signum", signal.SIGINT), summary)
    return df


def _drive(todo: list[Task], journal: Journal, summary: dict[str, Any], stop: threading.Event, *,
           out: Any, folder: Path | None, hard: float | None, spec_options: dict[str, Any],
           backend_args: tuple[Any, ...], progress: bool) -> None:
    """Keep the backend's slots busy, record each task as it ends, kill tasks over the hard limit."""
    from tqdm.auto import tqdm

    backend = _backend(*backend_args, n_tasks=len(todo))
    summary["backend"] = backend.name
    pending = list(reversed(todo))
    inflight: dict[str, Task] = {}
    last_snapshot, snapshot_cost = time.monotonic(), 0.0
    bar = tqdm(total=len(todo), unit="task", desc="batch", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)

    def record(task: Task, outcome: dict[str, Any]) -> None:
        row = {"key": task.key, "instance": task.label, "mechanism": task.mechanism,
               "params": task.given, "solver": task.solver, "time_limit": spec_options["time_limit"],
               **outcome.get("row", {}),
               "finished_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds")}
        row.setdefault("status", "error")
        row["ok"] = bool(row.get("ok"))
        if folder is not None:  # the JSON first: a task in the journal has its file
            _write_doc(folder, task, outcome, row)
        journal.append(row)
        summary["ran"] += 1
        summary["solved" if row["ok"] else "failed"] += 1
        summary["by_status"][row["status"]] += 1
        bar.set_postfix_str(f"solved {summary['solved']}, failed {summary['failed']}", refresh=False)
        bar.update(1)

    killed = False
    try:
        while (pending or inflight) and not stop.is_set():
            while pending and len(inflight) < backend.slots:
                task = pending.pop()
                inflight[task.key] = task
                backend.submit(task.spec(**spec_options))
            for key, outcome in backend.events(timeout=0.2):
                if key in inflight:
                    record(inflight.pop(key), outcome)
            if hard is not None:
                now = time.monotonic()
                for key, t0 in backend.started().items():
                    if key in inflight and now - t0 > hard:
                        backend.abandon(key)
                        record(inflight.pop(key), failure(
                            "time_limit", f"stopped after {now - t0:.1f} s by the hard wall-clock limit "
                            f"({hard:g} s): the solver's own time limit did not end the task"))
            # a big table costs seconds to write: never spend more than a tenth of the time on it
            if out is not None and time.monotonic() - last_snapshot > max(SNAPSHOT_SECONDS,
                                                                           10 * snapshot_cost):
                t0 = time.monotonic()
                write_table(to_frame(journal.records.values()), out)
                snapshot_cost = time.monotonic() - t0
                last_snapshot = time.monotonic()
        killed = stop.is_set()
    except BaseException:
        killed = True
        raise
    finally:
        summary["lost"] = len(inflight)
        bar.close()
        backend.close(kill=killed)


def format_summary(summary: dict[str, Any]) -> str:
    """One paragraph for humans: what ran, what failed and why, how long, where the results are."""
    by = ", ".join(f"{k} {v}" for k, v in sorted(summary.get("by_status", {}).items())
                   if k not in ("optimal", "converged"))
    text = (f"{summary['tasks']} task(s): {summary['ran']} ran ({summary['solved']} solved, "
            f"{summary['failed']} failed{': ' + by if summary['failed'] else ''}), "
            f"{summary['skipped']} skipped as already recorded")
    if summary.get("lost"):
        text += f", {summary['lost']} in flight lost (rerun with --resume)"
    text += f"; {summary.get('seconds', 0.0):.1f} s on {summary['backend']}"
    if summary.get("out"):
        text += f"\nresults: {summary['out']}"
    return text

