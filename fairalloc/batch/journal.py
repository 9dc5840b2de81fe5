"""The on-disk format of a batch: an append-only journal, and the table made from it.

``--out results.csv`` keeps its ground truth in ``results.csv.journal.jsonl``: one JSON object per
finished task, written with a single ``write`` on an ``O_APPEND`` descriptor and ``fsync``-ed before the
task counts as done. A run killed at any moment leaves complete lines plus, at worst, one torn last
line without its newline; readers ignore it and the next writer cuts it off. The journal is locked
(``flock``) while a batch writes to it, so two runs cannot interleave.

The table (CSV or Parquet) is derived: the last record of every task key, sorted, written to a
temporary file and renamed over the old one (``os.replace`` is atomic), every few seconds while the
batch runs and at its end — also after Ctrl-C. After a SIGKILL the table may lag behind the journal;
``--resume`` rebuilds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from fairalloc.batch.tasks import BatchError

__all__ = ["COLUMNS", "Journal", "journal_path", "read_results", "tasks_frame", "to_frame",
           "write_table"]

log = logging.getLogger(__name__)

JOURNAL_SUFFIX = ".journal.jsonl"
FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}

COLUMNS = [
    # the task (its key is a hash of instance path, mechanism, all parameters, solver)
    "key", "instance", "instance_name", "mechanism", "params", "solver", "time_limit",
    # outcome
    "status", "ok", "message", "n_users", "n_servers",
    # totals X[n] = Σ_i x[n,i]: their sum and minimum, and all of them as a JSON object {user: X}
    "sum_tasks", "min_tasks", "tasks",
    # solver statistics and times (seconds)
    "solver_used", "solves", "iterations", "solve_seconds", "mechanism_seconds", "wall_seconds",
    "max_kkt_residual",
    # the versions the numbers depend on, as a JSON object {package: version}
    "versions",
    # verification: feasibility always; with --verify, {property: holds} of the full report
    "feasible", "max_violation", "worst_row", "verification",
    # where and when
    "worker", "finished_at",
]
_JSON_COLUMNS = ("params", "tasks", "verification", "versions")
_INT_COLUMNS = ("n_users", "n_servers", "solves", "iterations")


def journal_path(out: str | os.PathLike[str]) -> Path:
    return Path(os.fspath(out) + JOURNAL_SUFFIX)


def table_format(out: str | os.PathLike[str]) -> str:
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise BatchError(f"--out {out}: expected a .csv or .parquet file")
    if FORMATS[suffix] == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise BatchError(f"--out {out}: writing Parquet needs pyarrow "
                             "(pip install 'fairalloc[dask]' or pyarrow)") from None
    return FORMATS[suffix]


def _complete_lines(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """Records of every complete line, and the length of the complete part (the rest is torn)."""
    end = data.rfind(b"\n") + 1
    records = []
    for k, line in enumerate(data[:end].splitlines()):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log.warning("journal line %d is not valid JSON; ignored", k + 1)
            continue
        if isinstance(rec, dict) and "key" in rec:
            records.append(rec)
    return records, end


class Journal:
    """Append-only record of finished tasks (``path=None``: kept in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}  # last record per key
        self._fd: int | None = None

    def open(self, fresh: bool) -> dict[str, dict[str, Any]]:
        """Lock the journal, cut a torn last line, and return what it holds (nothing when ``fresh``)."""
        if self.path is None:
            return self.records
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BatchError(f"{self.path}: another batch is writing to it") from None
        except ImportError:  # no flock on this platform: no protection against two writers
            pass
        self._fd = fd
        if fresh:
            os.ftruncate(fd, 0)
        data = self.path.read_bytes()
        recs, end = _complete_lines(data)
        if end < len(data):
            log.warning("%s: dropped a torn last line (%d bytes) left by an interrupted run",
                        self.path, len(data) - end)
            os.ftruncate(fd, end)
        for rec in recs:
            self.records[rec["key"]] = rec
        return self.records

    def append(self, record: dict[str, Any]) -> None:
        self.records[record["key"]] = record
        if self._fd is None:
            return
        data = (json.dumps(record, allow_nan=True) + "\n").encode()
        view = memoryview(data)
        while view:  # a regular file takes it in one write; loop in case it does not
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None


def to_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """The results table: one row per task key (the last record wins), columns :data:`COLUMNS`."""
    import pandas as pd

    last: dict[str, dict[str, Any]] = {}
    for rec in records:
        last[rec["key"]] = rec
    rows = []
    for rec in last.values():
        row = {c: rec.get(c) for c in COLUMNS}
        for c in _JSON_COLUMNS:
            if row[c] is not None and not isinstance(row[c], str):
                row[c] = json.dumps(row[c])
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    for c in _INT_COLUMNS:  # integers stay integers beside the missing values of failed rows
        df[c] = pd.to_numeric(df[c]).astype("Int64")
    if len(df):
        df = df.sort_values(["instance", "mechanism", "params", "solver"], kind="stable",
                            na_position="first").reset_index(drop=True)
    return df


def write_table(df: pd.DataFrame, out: str | os.PathLike[str]) -> Path:
    """Write the table atomically: a temporary file in the same folder, then ``os.replace``."""
    out = Path(out)
    fmt = table_format(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return out


def read_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a results table written by a batch (CSV or Parquet) or straight from its journal."""
    import pandas as pd

    p = Path(path)
    if p.name.endswith(JOURNAL_SUFFIX):
        return to_frame(_complete_lines(p.read_bytes())[0])
    if table_format(p) == "csv":
        return pd.read_csv(p, dtype={"key": str, "params": str, "solver": str, "message": str,
                                     **dict.fromkeys(_INT_COLUMNS, "Int64")})
    return pd.read_parquet(p)


def tasks_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Long form of the ``tasks`` column: one row per (task, user) with ``X`` = that user's tasks."""
    import pandas as pd

    rows = []
    for _, r in df.iterrows():
        totals = r["tasks"]
        if isinstance(totals, str) and totals:
            totals = json.loads(totals)
        if not isinstance(totals, dict):
            continue
        for user, x in totals.items():
            rows.append({"key": r["key"], "instance": r["instance"], "mechanism": r["mechanism"],
                         "params": r["params"], "solver": r["solver"], "user": user, "X": x})
    return pd.DataFrame(rows, columns=["key", "instance", "mechanism", "params", "solver", "user", "X"])
