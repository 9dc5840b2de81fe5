"""Execution backends: a local pool of worker processes, and Dask distributed.

Both offer the same small interface to the driver (:func:`fairalloc.batch.run`), which does everything
else (which tasks, how many in flight, the hard time limit, recording):

``slots``
    how many tasks may be in flight at once (the driver never submits more);
``submit(spec)``
    start a task (:func:`~fairalloc.batch.work.solve_task` on a worker);
``events(timeout)``
    finished tasks as ``[(key, {"row": …, "doc": …})]`` — also for tasks whose worker died;
``started()``
    ``{key: time.monotonic() when it started}`` for the tasks running now;
``abandon(key)``
    stop waiting for a task that overran its hard limit: the local pool kills its worker process and
    starts a new one; Dask cancels the future (a running Dask task cannot be interrupted, so its worker
    thread stays busy until the solver's own time limit stops it);
``close(kill)``
    shut down.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fairalloc.batch.tasks import BatchError
from fairalloc.batch.work import failure, one_line, solve_task

__all__ = ["Backend", "DaskBackend", "LocalPool", "default_workers"]

log = logging.getLogger(__name__)


class Backend(Protocol):
    slots: int
    name: str

    def submit(self, spec: dict[str, Any]) -> None: ...
    def events(self, timeout: float) -> list[tuple[str, dict[str, Any]]]: ...
    def started(self) -> dict[str, float]: ...
    def abandon(self, key: str) -> None: ...
    def close(self, kill: bool = False) -> None: ...


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------- local processes
@dataclass(eq=False)
class _Worker:
    proc: subprocess.Popen
    log_path: Path
    ready: bool = False
    task: str | None = None
    abandoned: bool = False
    reader: threading.Thread | None = field(default=None, repr=False)


class LocalPool:
    """Up to ``workers`` long-lived worker processes, one task at a time each; a worker is killed on a
    hard time-out, and a killed or crashed one is replaced when tasks are waiting. Workers are plain
    ``python -m fairalloc.batch.worker`` subprocesses talking JSON lines, so nothing depends on the
    caller's ``__main__`` or on fork-safety."""

    name = "local"
    MAX_START_FAILURES = 3

    def __init__(self, workers: int | None = None, log_level: int = logging.WARNING) -> None:
        self.slots = workers or default_workers()
        if self.slots < 1:
            raise BatchError(f"--workers {workers}: must be >= 1")
        self.name = f"local ({self.slots} worker{'s' if self.slots > 1 else ''})"
        self._logs = tempfile.TemporaryDirectory(prefix="fairalloc-batch-")
        self._init = json.dumps({"sys_path": [p for p in sys.path if p], "log_level": log_level}) + "\n"
        self._queue: queue.Queue[tuple[_Worker, dict[str, Any] | None]] = queue.Queue()
        self._backlog: deque[dict[str, Any]] = deque()
        self._started: dict[str, float] = {}
        self._ids = itertools.count()
        self._start_failures = 0
        self._closing = False
        self._workers: list[_Worker] = []  # started on demand by _dispatch, at most `slots`

    def _spawn(self) -> _Worker:
        path = Path(self._logs.name) / f"worker-{next(self._ids)}.log"
        with open(path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "fairalloc.batch.worker"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    cwd=os.getcwd())
        w = _Worker(proc=proc, log_path=path)
        self._send(w, self._init)
        w.reader = threading.Thread(target=self._read, args=(w,), daemon=True,
                                    name=f"fairalloc-batch-reader-{proc.pid}")
        w.reader.start()
        return w

    def _read(self, w: _Worker) -> None:
        assert w.proc.stdout is not None
        for line in w.proc.stdout:
            try:
                self._queue.put((w, json.loads(line)))
            except json.JSONDecodeError:
                log.warning("worker %d wrote a malformed line: %.200r", w.proc.pid, line)
        w.proc.stdout.close()
        self._queue.put((w, None))

    @staticmethod
    def _send(w: _Worker, text: str) -> bool:
        try:
            assert w.proc.stdin is not None
            w.proc.stdin.write(text.encode())
            w.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):  # it died; its reader reports that
            return False

    def _dispatch(self) -> None:
        for w in self._workers:
            if not self._backlog:
                return
            if w.ready and w.task is None:
                spec = self._backlog.popleft()
                w.task = spec["key"]
                self._started[spec["key"]] = time.monotonic()
                self._send(w, json.dumps(spec) + "\n")
        # start workers only for waiting tasks: no replacement is started at the end of a batch
        starting = sum(not w.ready for w in self._workers)
        for _ in range(min(self.slots - len(self._workers), len(self._backlog) - starting)):
            self._workers.append(self._spawn())

    def _retire(self, w: _Worker) -> None:
        if w in self._workers:
            self._workers.remove(w)

    def _death_message(self, w: _Worker) -> str:
        rc = w.proc.wait()
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
        try:
            lines = [s for s in w.log_path.read_text(errors="replace").splitlines() if s.strip()]
        except OSError:
            lines = []
        # faulthandler's first line names the fault; otherwise the last line is the best summary
        fatal = [s for s in lines if s.startswith("Fatal Python error")]
        tail = fatal[0] if fatal else (lines[-1] if lines else "")
        return f"worker process died ({how})" + (f": {tail}" if tail else "")

    def submit(self, spec: dict[str, Any]) -> None:
        self._backlog.append(spec)
        self._dispatch()

    def started(self) -> dict[str, float]:
        return dict(self._started)

    def events(self, timeout: float) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        try:
            items = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return out
        with contextlib.suppress(queue.Empty):
            while True:
                items.append(self._queue.get_nowait())
        for w, msg in items:
            if w.abandoned:
                continue
            if msg is None:  # the process ended
                if w.task is not None:
                    self._started.pop(w.task, None)
                    out.append((w.task, failure("error", self._death_message(w))))
                    w.task = None
                elif not w.ready and not self._closing:
                    self._start_failures += 1
                    if self._start_failures >= self.MAX_START_FAILURES:
                        raise BatchError(f"local workers do not start: {self._death_message(w)}")
                self._retire(w)
            elif "ready" in msg:
                w.ready = True
                self._start_failures = 0
            elif msg.get("key") == w.task:
                self._started.pop(w.task, None)
                w.task = None
                out.append((msg["key"], {"row": msg.get("row", {}), "doc": msg.get("doc")}))
        self._dispatch()
        return out

    def abandon(self, key: str) -> None:
        for w in list(self._workers):
            if w.task == key:
                w.abandoned = True
                w.task = None
                with contextlib.suppress(ProcessLookupError):
                    w.proc.kill()
                w.proc.wait()
                self._retire(w)
        self._started.pop(key, None)
        self._dispatch()

    def close(self, kill: bool = False) -> None:
        """Stop every worker. They hold no state once their results are read, and a SIGKILL spares
        the second or so an interpreter full of solver libraries takes to shut down."""
        self._closing = True
        for w in self._workers:
            w.abandoned = True
            with contextlib.suppress(ProcessLookupError):
                w.proc.kill()
            with contextlib.suppress(OSError):
                assert w.proc.stdin is not None
                w.proc.stdin.close()
        for w in self._workers:
            w.proc.wait()
        self._workers.clear()
        self._logs.cleanup()


# ---------------------------------------------------------------------- Dask distributed
class DaskBackend:
    """Tasks as Dask futures on an existing client, a scheduler address, or a LocalCluster started
    here (``local`` worker processes, one thread each). Workers must see the instance paths (a shared
    file system) and have fairalloc installed; results come back to the driver, which writes them."""

    def __init__(self, client: Any = None, scheduler: str | None = None, local: int | None = None,
                 wait: float = 60.0) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise BatchError("the Dask backend needs dask[distributed] (pip install "
                             "'fairalloc[dask]')") from None
        self._owned: list[Any] = []
        if logging.getLogger("fairalloc").getEffectiveLevel() >= logging.WARNING:
            # distributed logs every connection at INFO; keep the terminal for the progress bar
            logging.getLogger("distributed").setLevel(logging.WARNING)
        if client is None:
            if scheduler:
                try:
                    client = Client(scheduler, timeout=wait)
                except (OSError, TimeoutError) as exc:
                    raise BatchError(f"--scheduler {scheduler}: cannot connect ({one_line(exc)})") from None
                self._owned.append(client)
                where = scheduler
            else:
                n = local or default_workers()
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
                client = Client(cluster)
                self._owned += [client, cluster]
                where = f"LocalCluster({n})"
        else:
            where = str(getattr(client, "scheduler", None) and client.scheduler.address)
        self.client = client
        self._futures: dict[str, Any] = {}
        if not client.nthreads():
            try:
                client.wait_for_workers(1, timeout=wait)
            except TimeoutError:
                self.close()
                raise BatchError(f"dask {where}: no worker joined within {wait:g} s") from None
        self.slots = max(1, sum(client.nthreads().values()))
        self.name = f"dask {where} ({self.slots} thread{'s' if self.slots > 1 else ''})"
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._started: dict[str, float] = {}

    def submit(self, spec: dict[str, Any]) -> None:
        key = spec["key"]
        fut = self.client.submit(solve_task, spec, key=f"fairalloc-{key}-{uuid.uuid4().hex[:8]}",
                                 pure=False)
        self._futures[key] = fut
        self._started[key] = time.monotonic()
        fut.add_done_callback(lambda f, k=key: self._queue.put((k, f)))

    def started(self) -> dict[str, float]:
        return dict(self._started)

    def events(self, timeout: float) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        try:
            items = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return out
        with contextlib.suppress(queue.Empty):
            while True:
                items.append(self._queue.get_nowait())
        for key, fut in items:
            if self._futures.get(key) is not fut:  # abandoned
                continue
            del self._futures[key]
            self._started.pop(key, None)
            if fut.status == "finished":
                out.append((key, fut.result()))
            elif fut.status != "cancelled":
                exc = fut.exception()
                out.append((key, failure("error", f"dask: {type(exc).__name__}: {exc}")))
        return out

    def abandon(self, key: str) -> None:
        fut = self._futures.pop(key, None)
        self._started.pop(key, None)
        if fut is not None:
            fut.cancel()

    def close(self, kill: bool = False) -> None:
        for fut in self._futures.values():
            fut.cancel()
        self._futures.clear()
        for obj in self._owned:
            with contextlib.suppress(Exception):
                obj.close()
