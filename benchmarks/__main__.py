"""``python -m fairalloc.benchmarks [NAME ... | all] [--quick] [--out DIR] [--publish]`` (from any
directory; ``python -m benchmarks`` in a clone's root): run the paper reproductions and solver/scaling
benchmarks (``benchmarks/__init__.py`` lists them)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import pkgutil
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
CLONE = (HERE.parent / "pyproject.toml").exists()  # run from a clone (editable install), not a wheel
DOCS = HERE.parent / "docs" / "benchmarks"
OUT = HERE / "out" if CLONE else Path("benchmarks-out")

log = logging.getLogger("benchmarks")

MAX_PUBLISHED_CSV = 256 * 1024  # raw tables above this stay in --out (the docs cite the summaries)


def discover() -> dict[str, ModuleType]:
    """Every module of this package that defines ``NAME`` and ``run``."""
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules([str(HERE)]), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__package__}.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run"):
            found[mod.NAME] = mod
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=f"python -m {__package__}",
        description="Run fairalloc's paper reproductions and solver/scaling benchmarks; each writes CSV, "
                    "PNG and a Markdown summary to --out. From any directory: python -m fairalloc.benchmarks "
                    "(in a clone's root, python -m benchmarks is the same).")
    ap.add_argument("names", nargs="*", help="benchmarks to run ('all': every one; none: list them)")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="output folder (default: benchmarks/out in a clone, ./benchmarks-out otherwise)")
    ap.add_argument("--publish", action="store_true",
                    help="copy summaries, figures and tables (.md, .png, .csv) to docs/benchmarks/ of the "
                    "clone fairalloc is installed from")
    ap.add_argument("--resume", action="store_true",
                    help="keep the results already in --out and run only what is missing "
                         "(benchmarks that support it: scaling, perserver)")
    ap.add_argument("--only", metavar="TEXT",
                    help="run only the series whose label contains TEXT, e.g. 'ps-dsf' (benchmarks that "
                         "support it: perserver)")
    ap.add_argument("--import", dest="imports", action="append", metavar="FILE.py",
                    help="user file/module registering mechanisms (benchmarks that support it: atlas)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("pyomo").setLevel(logging.ERROR)
    if args.publish and not CLONE:
        print("error: --publish writes to the docs of a clone; fairalloc is not installed from one here",
              file=sys.stderr)
        return 2
    mods = discover()
    if not args.names:
        width = max(map(len, mods), default=0)
        for name, mod in mods.items():
            print(f"{name:<{width}}  {mod.DESCRIPTION}")
        return 0
    if args.names == ["all"]:
        args.names = list(mods)
    unknown = [n for n in args.names if n not in mods]
    if unknown:
        print(f"error: unknown benchmark(s) {', '.join(unknown)} (known: {', '.join(mods)})",
              file=sys.stderr)
        return 2
    for name in args.names:
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        kwargs = {"quick": args.quick}
        if args.resume and "resume" in inspect.signature(mods[name].run).parameters:
            kwargs["resume"] = True
        if args.only and "only" in inspect.signature(mods[name].run).parameters:
            kwargs["only"] = args.only
        if args.imports and "imports" in inspect.signature(mods[name].run).parameters:
            kwargs["imports"] = tuple(args.imports)
        info = mods[name].run(out, **kwargs)
        print(f"{name}: {time.perf_counter() - t0:.1f} s -> {out}", file=sys.stderr)
        if args.publish:
            DOCS.mkdir(parents=True, exist_ok=True)
            for f in info.get("files", []):
                src = out / f
                if src.suffix == ".csv" and src.stat().st_size > MAX_PUBLISHED_CSV:
                    print(f"{name}: {f} not published ({src.stat().st_size // 1024} KiB; it stays "
                          f"in {out})", file=sys.stderr)
                elif src.suffix in {".md", ".png", ".csv"}:
                    shutil.copy2(src, DOCS / src.name)
            print(f"{name}: published to {DOCS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
