"""A local worker process: ``python -m fairalloc.batch.worker`` (started by the local pool, not by hand).

Protocol, one JSON object per line: the parent sends ``{"sys_path": [...], "log_level": 30}`` then
task specs; the worker answers ``{"ready": pid}`` once imported, then ``{"key": …, "row": …, "doc": …}``
per task. The protocol uses a private copy of the original stdout; file descriptor 1 is pointed at
stderr so that solver chatter from C code cannot corrupt it. The worker ignores SIGINT (the parent
decides what happens on Ctrl-C), dies with its parent (Linux ``PR_SET_PDEATHSIG``), and exits at the
end of its input.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys


def _die_with_parent() -> None:
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    faulthandler.enable()  # a segfault leaves its Python stack in the worker's log
    init = json.loads(sys.stdin.readline() or "{}")
    sys.path.extend(p for p in init.get("sys_path", []) if p not in sys.path)  # the parent's plugins
    logging.basicConfig(level=init.get("log_level", logging.WARNING), stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("pyomo").setLevel(logging.ERROR)

    import fairalloc.api  # noqa: F401
    from fairalloc.batch.work import solve_task
    from fairalloc.registry import all_mechanisms

    all_mechanisms()  # every mechanism module imported before the first task

    proto.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        out = solve_task(spec)
        proto.write(json.dumps({"key": spec["key"], **out}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
