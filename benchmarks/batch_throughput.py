"""Throughput of ``fairalloc batch`` with 1 and 2 local worker processes (docs/batch.md).

    python benchmarks/batch_throughput.py [--instances 12] [--users 200] [--servers 20] [--workers 1 2]

Writes seeded random instances (:func:`fairalloc.generate.random_instance`, placement constraints on)
to a temporary folder, runs the same batch (drfh and tsf on each) once per worker count, and prints
one line per run: tasks, wall time of the whole run (worker start-up included), throughput, the
steady-state throughput between the first and the last finished task, the mean solve time of a task,
the CPU time of the worker processes (start-up included), and the load average around the run (other
processes on the machine slow every number down).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import pandas as pd

from fairalloc.batch import run
from fairalloc.generate import random_instance
from fairalloc.io import save_instance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=12)
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--servers", type=int, default=20)
    ap.add_argument("--resources", type=int, default=3)
    ap.add_argument("--mechanisms", nargs="+", default=["drfh", "tsf"])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "instances"
        folder.mkdir()
        for seed in range(args.instances):
            inst = random_instance(seed, args.users, args.servers, args.resources, placement=True,
                                   name=f"mid-{seed}")
            save_instance(inst, folder / f"mid-{seed}.yaml")
        print(f"{args.instances} instances ({args.users} users × {args.servers} servers × "
              f"{args.resources} resources) × {', '.join(args.mechanisms)}; {os.cpu_count()} cores")
        print("workers  tasks  wall[s]  tasks/s  steady tasks/s  mean task[s]  worker cpu[s]  "
              "load before/after")
        for w in args.workers:
            load0 = os.getloadavg()[0]
            cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            df = run([folder], args.mechanisms, out=Path(tmp) / f"w{w}.csv", workers=w, progress=False)
            wall = time.perf_counter() - t0
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
            load1 = os.getloadavg()[0]
            assert df["ok"].all(), df.loc[~df["ok"], "message"]
            done = pd.to_datetime(df["finished_at"]).sort_values()
            span = (done.iloc[-1] - done.iloc[0]).total_seconds()
            steady = (len(df) - 1) / span if span > 0 else float("nan")
            print(f"{w:>7}  {len(df):>5}  {wall:>7.1f}  {len(df) / wall:>7.2f}  {steady:>14.2f}  "
                  f"{df['mechanism_seconds'].mean():>12.3f}  {cpu:>13.1f}  {load0:.1f}/{load1:.1f}")


if __name__ == "__main__":
    main()
