"""Nothing but the document reaches standard output.

HiGHS ≥ 1.16 prints a banner from its constructor, cuPDLP-C prints warnings with ``printf``, Ipopt and SCIP
print from C: all of it on file descriptor 1 unless it is redirected. One child process runs every mechanism
with every solver of its problem class (and ``verify``, ``solvers --json``, ``simulate``) through the CLI,
writing the documents one after another on its real stdout; the parent decodes the stream. A single stray
byte from a solver breaks the decoding.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import sys
    from fairalloc import cli
    from fairalloc.registry import all_mechanisms
    from fairalloc.solvers.session import SOLVERS

    example, workload, result = sys.argv[1], sys.argv[2], sys.argv[3]
    available = [s for s in SOLVERS.values() if s.probe() is not None]
    runs = []
    for mech in all_mechanisms():
        solvers = [s.name for s in available if mech.problem in s.classes] or [None]
        for solver in solvers:
            argv = ["solve", example, "-m", mech.name, "--time-limit", "60"]
            if solver:
                argv += ["--solver", solver]
            runs.append(argv)
    runs += [["solve", example, "-m", "drfh", "-o", result],
             ["verify", example, result, "--no-progress", "--sp-budget", "5"], ["solvers", "--json"],
             ["simulate", workload, "-m", "drfh", "--json", "--no-progress"]]
    for argv in runs:
        code = cli.main(argv)
        sys.stderr.write(f"RUN {' '.join(argv)} -> {code}\\n")
""")


def _documents(text: str) -> list:
    dec, docs, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return docs
        doc, i = dec.raw_decode(text, i)  # raises on anything that is not JSON
        docs.append(doc)


WORKLOAD = {"name": "tiny", "resources": ["cpu", "mem"],
            "servers": [{"name": "s1", "capacity": {"cpu": 1, "mem": 1}},
                        {"name": "s2", "capacity": {"cpu": 2, "mem": 1}}],
            "users": [{"name": "a", "arrival": 0, "duration": 60, "tasks": 4,
                       "demand": {"cpu": 0.5, "mem": 0.25}},
                      {"name": "b", "arrival": 30, "duration": 20, "tasks": 6,
                       "demand": {"cpu": 0.25, "mem": 0.25}, "eligible": ["s2"]}]}


def test_every_mechanism_and_solver_prints_only_json(examples, tmp_path):
    workload = tmp_path / "tiny.json"
    workload.write_text(json.dumps(WORKLOAD))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(examples / "psdsf-fig1.yaml"), str(workload),
                           str(tmp_path / "result.json")],
                          capture_output=True, text=True, timeout=900)
    runs = [line for line in proc.stderr.splitlines() if line.startswith("RUN ")]
    assert proc.returncode == 0, proc.stderr[-2000:]
    docs = _documents(proc.stdout)
    # one run wrote its result to a file
    assert len(docs) == len(runs) - 1, (len(docs), len(runs), proc.stdout[:500])
    solved = [d for d in docs if isinstance(d, dict) and "allocation" in d]
    assert len(solved) >= 20  # every mechanism at least once, the LPs under several solvers


def test_library_calls_leave_stdout_empty(examples):
    """A user's script that prints its own output: fairalloc's solvers print nothing on its stdout."""
    code = ("import sys; from fairalloc import solve\n"
            "for m in ('drfh', 'mnw', 'ps-dsf', 'cru'):\n"
            "    r = solve(sys.argv[1], m)\n"
            "    assert r.status.value in ('optimal', 'converged'), (m, r.status)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(examples / "psdsf-fig1.yaml")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == ""
