"""The ``fairalloc`` command line (docs/cli.md).

    fairalloc solve INSTANCE -m MECHANISM [-p key=value ...] [--solver NAME] [-o OUT.json]
    fairalloc verify INSTANCE RESULT.json [-o REPORT.json]
    fairalloc show INSTANCE -m MECHANISM [-p key=value ...] [--write FILE.lp|FILE.nl]
    fairalloc mechanisms | fairalloc solvers

``--import FILE.py`` (or a module name; repeatable) on solve, verify, show, mechanisms, batch and simulate
imports user code that registers mechanisms (``fairalloc.mechanism``) before the name is looked up;
``--customize FILE.py:FUNCTION`` (solve, verify, show, batch) passes ``FUNCTION(model, instance)`` to the
mechanism as its ``customize`` hook.

Exit codes: 0 success; 1 the solver did not reach ``optimal``/``converged`` (the result is still
written, with its status); 2 bad input (one line on stderr naming the field and value); 3 an internal
error (rerun with ``--debug`` for the traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairalloc.errors import FairallocError, ParameterError

__all__ = ["build_parser", "main"]

log = logging.getLogger("fairalloc")

EXIT_OK, EXIT_STATUS, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

# Subcommands contributed by other modules: name -> (module, function adding the parser).
EXTENSIONS: list[tuple[str, str]] = []
EXTENSIONS.append(("fairalloc.batch.cli", "add_parser"))  # fairalloc batch (issue 7)
EXTENSIONS.append(("fairalloc.simulate.cli", "add_parser"))  # fairalloc simulate (issue 8)


def _key_values(items: Sequence[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ParameterError(f"{what} {item!r}: expected key=value")
        k, v = item.split("=", 1)
        if not k.strip():
            raise ParameterError(f"{what} {item!r}: empty key")
        out[k.strip()] = v.strip()
    return out


def _typed(v: str) -> Any:
    low = v.lower()
    if low in {"true", "false"}:
        return low == "true"
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def _emit(text: str, out: str | None) -> None:
    if out:
        Path(out).write_text(text + "\n")
    else:
        sys.stdout.write(text + "\n")


def _customize(args: argparse.Namespace) -> Any:
    from fairalloc.registry import load_hook

    ref = getattr(args, "customize", None)
    return None if ref is None else load_hook(ref)


# ---------------------------------------------------------------------- commands
def cmd_solve(args: argparse.Namespace) -> int:
    from fairalloc.api import solve

    result = solve(args.instance, args.mechanism, solver=args.solver, time_limit=args.time_limit,
                   solver_options={k: _typed(v) for k, v in
                                   _key_values(args.solver_option, "--solver-option").items()},
                   verify=args.verify, customize=_customize(args), **_key_values(args.param, "-p"))
    _emit(result.to_json(), args.output)
    if args.output:
        print(f"{result.mechanism} on {result.instance}: {result.status.value} -> {args.output}",
              file=sys.stderr)
    if not result.ok:
        print(f"status {result.status.value}: {result.message}", file=sys.stderr)
        return EXIT_STATUS
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from fairalloc.io import load_instance
    from fairalloc.verify import read_result, verify

    inst = load_instance(args.instance)
    result = read_result(args.result)
    if args.sp_budget < 0:
        raise ParameterError(f"--sp-budget {args.sp_budget}: must be >= 0")
    if not args.sp_time_limit > 0:
        raise ParameterError(f"--sp-time-limit {args.sp_time_limit}: must be > 0 seconds")
    report = verify(inst, result, si=args.si, sp=not args.no_sp and args.sp_budget > 0, seed=args.seed,
                    sp_budget=args.sp_budget, sp_time_limit=args.sp_time_limit,
                    customize=_customize(args), progress=not args.no_progress)
    _emit(json.dumps(report.to_dict(), indent=2), args.output)
    sp = report["strategy_proof"]
    if sp.get("summary"):
        print(f"strategy-proofness search: {sp['summary']}", file=sys.stderr)
    if args.output:
        failed = report.failed()
        print(f"verify {result.mechanism or 'allocation'} on {inst.name}: "
              f"{'fails ' + ', '.join(failed) if failed else 'no property fails'} -> {args.output}",
              file=sys.stderr)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from fairalloc.io import load_instance
    from fairalloc.registry import get_mechanism

    inst = load_instance(args.instance)
    mech = get_mechanism(args.mechanism)
    if mech.build is None:
        raise ParameterError(f"{mech.name}: has no single Pyomo model to show")
    if mech.needs_demands:
        inst.require_demands(mech.name)
    if not mech.supports_budgets:
        inst.require_no_budgets(mech.name)
    model = mech.build(inst, **mech.parse_params(_key_values(args.param, "-p")))
    hook = _customize(args)
    if hook is not None:
        hook(model, inst)
    if args.write:
        suffix = Path(args.write).suffix.lower()
        if suffix not in {".lp", ".nl"}:
            raise ParameterError(f"--write {args.write!r}: expected a .lp or .nl file name")
        model.write(args.write, io_options={"symbolic_solver_labels": True})
        print(f"wrote {args.write}", file=sys.stderr)
    else:
        model.pprint(ostream=sys.stdout)
    return EXIT_OK


def cmd_mechanisms(args: argparse.Namespace) -> int:
    from fairalloc.registry import describe_mechanisms

    mechs = describe_mechanisms()  # from the catalogue: no Pyomo import
    if args.json:
        print(json.dumps(mechs, indent=2, default=str))
        return EXIT_OK
    width = max(len(m["name"]) for m in mechs)
    for m in mechs:
        print(f"{m['name']:<{width}}  {m['problem']:<4} {m['summary']}" + (f"  [{m['reference']}]"
                                                                         if m["reference"] else ""))
        for name, p in m["parameters"].items():
            print(f"{'':<{width}}       -p {name}=… (default {p['default']}): {p['help']}")
    return EXIT_OK


def cmd_solvers(args: argparse.Namespace) -> int:
    from fairalloc.solvers import solver_table
    from fairalloc.solvers.ipopt import ipopt_route

    rows = solver_table()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        mark = "yes" if r["available"] else "no "
        print(f"{r['name']:<{width}}  {mark}  {r['classes']:<12} {r['detail']}: {r['summary']}")
    try:
        route = ipopt_route()
    except FairallocError as exc:
        route = f"none ({exc})"
    print(f"\nIpopt route in use: {route}")
    return EXIT_OK


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    from fairalloc import __version__

    p = argparse.ArgumentParser(prog="fairalloc", description="Multi-resource fair allocation: "
                                "solve, verify and inspect mechanisms on heterogeneous servers.")
    p.add_argument("--version", action="version", version=f"fairalloc {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log progress (-v: INFO, -vv: DEBUG) on stderr")
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("solve", help="run a mechanism on an instance; print the result JSON")
    s.add_argument("instance", help="instance file (.yaml/.yml/.json) or CSV directory")
    s.add_argument("-m", "--mechanism", required=True, help="mechanism name (fairalloc mechanisms)")
    s.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="mechanism parameter, repeatable (e.g. -p alpha=3)")
    s.add_argument("--solver", help="solver name (fairalloc solvers); default by problem class")
    s.add_argument("--solver-option", action="append", metavar="KEY=VALUE",
                   help="option passed verbatim to the solver, repeatable")
    s.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="limit for all solves of the mechanism together")
    s.add_argument("--verify", action="store_true", help="embed the verification report")
    s.add_argument("-o", "--output", metavar="OUT.json", help="write the result here")
    s.set_defaults(func=cmd_solve)

    v = sub.add_parser("verify", help="check an allocation against the properties of "
                       "docs/verification.md; prints "
                       "the JSON report and exits 0 whatever the verdicts")
    v.add_argument("instance")
    v.add_argument("result", help="result JSON (from fairalloc solve, another tool, or by hand)")
    v.add_argument("-o", "--output", metavar="REPORT.json")
    v.add_argument("--si", choices=("apf", "tsfer"),
                   help="sharing-incentive definition reported at the top (default: the mechanism's paper)")
    v.add_argument("--seed", type=int, default=0, help="seed of the strategy-proofness search")
    v.add_argument("--sp-budget", type=int, default=48, metavar="N",
                   help="re-solves the strategy-proofness search may make (default 48)")
    v.add_argument("--sp-time-limit", type=float, default=60.0, metavar="SECONDS",
                   help="time the strategy-proofness search may take (default 60)")
    v.add_argument("--no-sp", action="store_true", help="skip the strategy-proofness search")
    v.add_argument("--no-progress", action="store_true",
                   help="no progress bar for the strategy-proofness search")
    v.set_defaults(func=cmd_verify)

    w = sub.add_parser("show", help="print a mechanism's Pyomo model (or write it as .lp/.nl)")
    w.add_argument("instance")
    w.add_argument("-m", "--mechanism", required=True)
    w.add_argument("-p", "--param", action="append", metavar="KEY=VALUE")
    w.add_argument("--write", metavar="FILE", help="write .lp or .nl instead of printing")
    w.set_defaults(func=cmd_show)

    m = sub.add_parser("mechanisms", help="list the mechanisms")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_mechanisms)

    so = sub.add_parser("solvers", help="list the solvers and which are available here")
    so.add_argument("--json", action="store_true")
    so.set_defaults(func=cmd_solvers)

    import importlib

    for module, fn in EXTENSIONS:
        adder: Callable[[Any], None] = getattr(importlib.import_module(module), fn)
        adder(sub)
    _add_extension_options(sub)
    return p


IMPORT_COMMANDS = ("solve", "verify", "show", "mechanisms", "batch", "simulate")
CUSTOMIZE_COMMANDS = ("solve", "verify", "show", "batch")


def _add_extension_options(sub: Any) -> None:
    """``--import`` on every command that looks mechanisms up; ``--customize`` where a mechanism runs;
    ``-v``/``--debug`` after any command as well as before it."""
    for cmd in sub.choices.values():
        cmd.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                         help="log progress (-v: INFO, -vv: DEBUG) on stderr")
        cmd.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help="show tracebacks of internal errors")
    for name in IMPORT_COMMANDS:
        cmd = sub.choices.get(name)
        if cmd is not None and not any("--import" in a.option_strings for a in cmd._actions):
            cmd.add_argument("--import", dest="imports", action="append", metavar="FILE.py",
                             help="Python file (or module) registering extra mechanisms, imported "
                             "before the mechanism is looked up; repeatable")
    for name in CUSTOMIZE_COMMANDS:
        cmd = sub.choices.get(name)
        if cmd is not None:
            cmd.add_argument("--customize", metavar="FILE.py:FUNCTION",
                             help="call FUNCTION(model, instance) on the mechanism's Pyomo model(s) "
                             "before solving (docs/customize.md)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.verbose < 2:
        logging.getLogger("pyomo").setLevel(logging.ERROR)
    try:
        if getattr(args, "imports", None):
            from fairalloc.registry import load_imports

            load_imports(args.imports)
        from fairalloc.solvers.quiet import document_stdout

        # fd 1 carries only the document; what solvers print from C goes to stderr (-v) or nowhere
        with document_stdout():
            return int(args.func(args))
    except FairallocError as exc:  # one line, never a megabyte of echoed input
        text = " ".join(str(exc).split())
        print(f"error: {text if len(text) <= 500 else text[:499] + '…'}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `fairalloc show ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # an internal error: one line unless --debug
        if args.debug:
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
