r"""The property atlas: which mechanism keeps which property on which kind of instance, with the smallest
counterexample found for every violation (issue 5; docs/verification.md).

For every *subject* (a mechanism with its parameters, :data:`SUBJECTS`) and every instance *family*
(:data:`FAMILIES`: the generator's families of :data:`fairalloc.generate.FAMILIES` plus ``complete``, the
[TSFER] setting without missing resources, ``bottleneck``, instances satisfying the premise of [APF] Def. 2,
``psdsf-classes`` and ``tsfer-servers``, random users on the servers of the papers' experiments, and
``examples``, the papers' own examples of docs/examples.md), the atlas solves seeded random instances and
checks
envy-freeness, sharing incentive (under the subject's own paper's definition), Pareto optimality, strategy-
proofness (a budgeted lie search) and bottleneck fairness (where its premise holds).

Each check is classified by the instance's *features* (:func:`features`: placement constraints, external
resources, scoped external resources, task limits, weights, the time-shared form, zero capacities, zero
demands) as inside or outside the setting in which the subject's paper states its theorems
(``Subject.setting``), so the table separates "the paper is contradicted" from "the property is lost outside
the paper's premises".

A violation is *shrunk* (:func:`shrink`): users, servers, resources and external resources are removed,
weights, task limits and placement constraints dropped, and the numbers rounded to two and then one
significant digit, one change at a time, keeping each change after which the property still fails (for SP:
the same lie still pays) and the instance stays on its side (inside or outside) of the paper's setting. The
smallest counterexample of each (subject, property), inside and outside the setting, is kept
(:class:`Counterexample`); the benchmark ``python -m benchmarks atlas`` publishes them in the docs, and the
test suite re-checks every one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairalloc.errors import FairallocError
from fairalloc.generate import FAMILIES as GENERATOR_FAMILIES
from fairalloc.generate import random_instance
from fairalloc.instance import Instance
from fairalloc.io import instance_to_dict, parse_instance

__all__ = ["FAMILIES", "FEATURES", "MEASURES", "PROPERTIES", "SUBJECTS", "AtlasConfig", "AtlasRun",
           "Check", "Counterexample", "Subject", "bottleneck_instance", "check", "evaluate", "features",
           "make_instance", "paper_cluster", "restrict", "round_instance", "run_atlas", "shrink"]

log = logging.getLogger(__name__)

PROPERTIES = ("envy_free", "sharing_incentive", "pareto", "strategy_proof", "bottleneck_fair")
SHORT = {"envy_free": "EF", "sharing_incentive": "SI", "pareto": "PO", "strategy_proof": "SP",
         "bottleneck_fair": "BF"}
MEASURES = {"envy_free": "min_ef_sat", "sharing_incentive": "min_si_sat", "pareto": "domination_factor",
            "strategy_proof": "best_gain", "bottleneck_fair": "gap"}
FEATURES = ("placement", "external", "scoped", "limits", "weights", "time_shared", "zero_capacity",
            "zero_demand")
EXAMPLES = ("drf-ghodsi", "psdsf-fig1", "psdsf-fig2", "psdsf-table3", "tsfer-fig2", "tsfer-idle",
            "tsfer-placement")  # the docs/examples.md instances and the two TSF-ER idle-capacity examples

FAMILIES: dict[str, dict[str, Any]] = {
    **GENERATOR_FAMILIES,
    "complete": {"external": 1, "limits": True, "weights": True, "missing": 0.0},
    "bottleneck": {"bottleneck": True},
    "psdsf-classes": {"cluster": "psdsf"},
    "tsfer-servers": {"cluster": "tsfer"},
    "examples": {"examples": True},
}


# ---------------------------------------------------------------------- subjects and the papers' claims
@dataclass(frozen=True)
class Subject:
    """A row of the atlas: a mechanism with parameters, the paper whose setting and claims apply, the
    instance features inside that setting, and the claims (``True`` holds, ``False`` fails in general,
    ``None`` not stated) with their sources. ``tol`` loosens the verdicts for a subject whose solver is
    less accurate than the run's tolerance."""

    label: str
    mechanism: str
    params: dict[str, Any]
    paper: str
    setting: frozenset[str]
    claims: dict[str, tuple[bool | None, str]] = field(default_factory=dict)
    tol: float = 0.0  # a looser verdict tolerance for this subject (0: the run's own)

    def claim(self, prop: str) -> tuple[bool | None, str]:
        return self.claims.get(prop, (None, ""))

    @property
    def slug(self) -> str:
        """The label as a file name: ``tsf-er (paper)`` → ``tsf-er-paper``, ``apf-vds α=1`` →
        ``apf-vds-alpha1``."""
        out = self.label.replace("α=", "alpha").replace(" (", "-").replace(")", "").replace(" ", "-")
        return out.replace(".", "_")


_PER_SERVER = frozenset({"placement", "weights", "zero_capacity", "zero_demand"})
_TSFER = frozenset({"external", "weights", "limits"})

SUBJECTS: tuple[Subject, ...] = (
    Subject("drf", "drf", {}, "[PSDSF] §II-A", _PER_SERVER | {"external", "limits"}, {
        "envy_free": (True, "[PSDSF] §II-A (Ghodsi et al.)"), "sharing_incentive": (True, "[PSDSF] §II-A"),
        "pareto": (True, "[PSDSF] §II-A"), "strategy_proof": (True, "[PSDSF] §II-A"),
        "bottleneck_fair": (True, "[PSDSF] §II-A")}),
    Subject("drfh", "drfh", {}, "[PSDSF]/[APF]", _PER_SERVER, {
        "envy_free": (True, "[PSDSF] Table I, [APF] Table I"),
        "sharing_incentive": (False, "[PSDSF] Table I, [APF] Table I"),
        "pareto": (True, "[PSDSF] Table I, [APF] Table I"), "strategy_proof": (True, "[PSDSF] Table I"),
        "bottleneck_fair": (False, "[PSDSF] Table I, [APF] Table I")}),
    Subject("tsf", "tsf", {}, "[PSDSF]/[APF]", _PER_SERVER, {
        "envy_free": (True, "[PSDSF] Table I, [APF] Table I"),
        "sharing_incentive": (True, "[PSDSF] Table I, [APF] Table I"),
        "pareto": (True, "[PSDSF] Table I, [APF] Table I"), "strategy_proof": (True, "[PSDSF] Table I"),
        "bottleneck_fair": (False, "[PSDSF] Table I, [APF] Table I")}),
    Subject("ps-dsf", "ps-dsf", {}, "[PSDSF]", _PER_SERVER, {
        "envy_free": (True, "[PSDSF] Thm 2, Table I"), "sharing_incentive": (True, "[PSDSF] Thm 2, Table I"),
        "pareto": (True, "[PSDSF] Thm 2, Table I (but [APF] Table I: ✗)"),
        "strategy_proof": (True, "[PSDSF] Thm 2"), "bottleneck_fair": (True, "[PSDSF] Thm 2, Table I")}),
    Subject("apf-vds α=1", "apf-vds", {"alpha": 1.0, "gains": False}, "[APF]", _PER_SERVER, {
        "envy_free": (True, "[APF] Thm 3"), "sharing_incentive": (True, "[APF] Thm 3"),
        "pareto": (True, "[APF] Thm 3"), "bottleneck_fair": (True, "[APF] Thm 4, Cor. 1")}),
    Subject("apf-vds α=3", "apf-vds", {"alpha": 3.0, "gains": False}, "[APF]", _PER_SERVER, {
        "envy_free": (True, "[APF] Thm 3"), "sharing_incentive": (True, "[APF] Thm 3"),
        "bottleneck_fair": (True, "[APF] Thm 4, Cor. 1")}),
    Subject("apf-vds α=0.5", "apf-vds", {"alpha": 0.5, "gains": False}, "[APF]", _PER_SERVER, {
        "envy_free": (False, "[APF] §3.3 (may fail for α < 1)"),
        "sharing_incentive": (False, "[APF] §3.3 (may fail for α < 1)"),
        "bottleneck_fair": (True, "[APF] Thm 4, Cor. 1")}),
    Subject("tsf-er", "tsf-er", {}, "[TSFER]", _TSFER | {"scoped"}, {
        "envy_free": (True, "[TSFER] Thm 6, Table 2"), "sharing_incentive": (True, "[TSFER] Table 2"),
        "pareto": (True, "[TSFER] Table 2"), "strategy_proof": (True, "[TSFER] Table 2")}),
    Subject("tsf-er (paper)", "tsf-er", {"variant": "paper"}, "[TSFER]", _TSFER | {"scoped"}, {
        "envy_free": (True, "[TSFER] Thm 6, Table 2"), "sharing_incentive": (True, "[TSFER] Table 2"),
        "pareto": (True, "[TSFER] Table 2"), "strategy_proof": (True, "[TSFER] Table 2")}),
    Subject("cru", "cru", {}, "[TSFER]", frozenset({"external"}), {
        "envy_free": (True, "[TSFER] Thm 1"), "sharing_incentive": (True, "[TSFER] Thm 1"),
        "pareto": (True, "[TSFER] Thm 1"), "strategy_proof": (False, "[TSFER] Thm 1")}),
    # Ipopt stops at tol 1e-8 on the KKT conditions; where MNW's optimum is dual degenerate (a user
    # indifferent between servers) that leaves X accurate to ~sqrt(1e-8) only (docs/mechanisms/mnw.md)
    Subject("mnw", "mnw", {}, "[TSFER]", frozenset({"external"}), {
        "envy_free": (True, "[TSFER] Thm 2"), "sharing_incentive": (True, "[TSFER] Thm 2"),
        "pareto": (True, "[TSFER] Thm 2"), "strategy_proof": (False, "[TSFER] Thm 2")}, tol=1e-3),
    Subject("drf-alpha (eq)", "drf-alpha", {}, "[TSFER]", _TSFER, {
        "envy_free": (True, "[TSFER] Table 2"), "sharing_incentive": (False, "[TSFER] Thm 3"),
        "pareto": (False, "[TSFER] Thm 3"), "strategy_proof": (True, "[TSFER] Table 2")}),
    Subject("tsf-alpha (eq)", "tsf-alpha", {}, "[TSFER]", _TSFER, {
        "envy_free": (True, "[TSFER] Table 2"), "sharing_incentive": (False, "[TSFER] Thm 4"),
        "pareto": (False, "[TSFER] Thm 4"), "strategy_proof": (True, "[TSFER] Table 2")}),
    # Thms 3-4 hold "for any split α": the same claims with a random split per instance
    Subject("drf-alpha (random)", "drf-alpha", {"alpha": "random1"}, "[TSFER]", _TSFER, {
        "envy_free": (True, "[TSFER] Table 2"), "sharing_incentive": (False, "[TSFER] Thm 3"),
        "pareto": (False, "[TSFER] Thm 3"), "strategy_proof": (True, "[TSFER] Table 2")}),
    Subject("tsf-alpha (random)", "tsf-alpha", {"alpha": "random1"}, "[TSFER]", _TSFER, {
        "envy_free": (True, "[TSFER] Table 2"), "sharing_incentive": (False, "[TSFER] Thm 4"),
        "pareto": (False, "[TSFER] Thm 4"), "strategy_proof": (True, "[TSFER] Table 2")}),
    Subject("drf-er", "drf-er", {}, "[TSFER]", _TSFER, {
        "envy_free": (True, "[TSFER] Table 2"), "sharing_incentive": (False, "[TSFER] Table 2"),
        "pareto": (True, "[TSFER] Table 2"), "strategy_proof": (True, "[TSFER] Table 2")}),
    Subject("utilitarian", "utilitarian", {}, "[TSFER]", _TSFER, {
        "envy_free": (False, "[TSFER] §3.1"), "sharing_incentive": (False, "[TSFER] §3.1"),
        "pareto": (True, "[TSFER] §3.1")}),
    Subject("relative-utilitarian", "relative-utilitarian", {}, "[TSFER]", _TSFER, {
        "envy_free": (False, "[TSFER] §3.1"), "sharing_incentive": (False, "[TSFER] §3.1"),
        "pareto": (True, "[TSFER] §3.1")}),
)


USER_PAPER = "(user)"


def user_subject(name: str) -> Subject:
    """A mechanism registered outside fairalloc (``--import``, an entry point) as an atlas row: its own
    name and default parameters, no paper, every instance inside its setting, no claims."""
    return Subject(name, name, {}, USER_PAPER, frozenset(FEATURES), {})


def user_mechanisms() -> list[str]:
    """Registered mechanisms that fairalloc does not ship (user files, plugins)."""
    from fairalloc.registry import all_mechanisms

    return [m.name for m in all_mechanisms() if not m.module.startswith("fairalloc.")]


def subject(label: str) -> Subject:
    for s in SUBJECTS:
        if s.label == label:
            return s
    if label in user_mechanisms():
        return user_subject(label)
    raise KeyError(f"no atlas subject {label!r} (known: {[s.label for s in SUBJECTS]})")


# ---------------------------------------------------------------------- instances
def features(inst: Instance) -> frozenset[str]:
    """The features of ``inst`` that decide whether it lies in a paper's setting (see :data:`FEATURES`)."""
    out = set()
    if inst.has_placement:
        out.add("placement")
    if inst.external:
        out.add("external")
        if not inst.external_scope.all():
            out.add("scoped")
    if inst.has_task_limits:
        out.add("limits")
    if not np.allclose(inst.weight, inst.weight[0]):
        out.add("weights")
    if inst.time_shared:
        out.add("time_shared")
    else:
        if (inst.capacity <= 0).any():
            out.add("zero_capacity")
        if (inst.all_demand <= 0).any():
            out.add("zero_demand")
    return frozenset(out)


def bottleneck_instance(seed: int | np.random.Generator, n_users: int | None = None,
                        n_servers: int | None = None, n_resources: int | None = None) -> Instance:
    """A random instance in which the first resource is a bottleneck ([APF] Def. 2): the generator's
    ``placement`` + ``weights`` family without missing resources, with every user's demand of ``r1``
    raised to ``d_{n,1} = max_i max_r d_{n,r} c_{i,1}/c_{i,r}`` (so ``d_{n,1}/c_{i,1} ≥ d_{n,r}/c_{i,r}``
    at every server)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    base = random_instance(rng, n_users, n_servers, n_resources, placement=True, weights=True,
                           missing=0.0, name="bottleneck")
    d = np.array(base.demand, copy=True)
    c = base.capacity
    ratio = d[:, None, :] * (c[None, :, 0:1] / c[None, :, :])  # d_{n,r} c_{i,1}/c_{i,r}
    d[:, 0] = np.maximum(d[:, 0], ratio.max(axis=(1, 2)))
    return base.replace(demand=d, name=f"bottleneck-{base.n_users}x{base.n_servers}x{len(base.resources)}")


def _examples_dir() -> Path | None:
    import fairalloc

    here = Path(fairalloc.__file__).resolve().parents[1] / "examples"
    return here if here.is_dir() else None


def paper_cluster(kind: str, seed: int | np.random.Generator) -> Instance:
    """Random users on the servers of a paper's experiments (2–5 users, every demand positive):

    - ``psdsf``: one server of each class of [PSDSF] §V / [APF] Fig. 4, A = (1, 1), B = (0.5, 0.5),
      C = (0.5, 0.25), D = (0.5, 0.75) (cpu, mem); weights from {1, 2}; each user is latency-sensitive
      with probability 1/2 and then runs only on C and D (the paper's placement constraint);
    - ``tsfer``: the three servers of [TSFER] §6.2, (1, 1), (1 + ρ, 1 − ρ), (1 − ρ, 1 + ρ) with
      ρ ∈ {0.5, 0.7, 0.9}, and one link of capacity 1 (the external resource); equal weights, no limits.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    N = int(rng.integers(2, 6))
    dem = rng.uniform(0.05, 0.5, (N, 2))
    users = [f"u{n + 1}" for n in range(N)]
    if kind == "psdsf":
        cap = np.array([[1.0, 1.0], [0.5, 0.5], [0.5, 0.25], [0.5, 0.75]])
        elig = np.ones((N, 4), bool)
        elig[rng.random(N) < 0.5, :2] = False
        return Instance.from_arrays(capacity=cap, demand=dem, eligible=elig, users=users,
                                    weight=rng.choice([1.0, 2.0], N), servers=["A", "B", "C", "D"],
                                    resources=["cpu", "mem"], name="psdsf-classes")
    rho = float(rng.choice([0.5, 0.7, 0.9]))
    cap = np.array([[1.0, 1.0], [1 + rho, 1 - rho], [1 - rho, 1 + rho]])
    return Instance.from_arrays(capacity=cap, demand=dem, users=users, resources=["cpu", "mem"],
                                external_capacity=[1.0], external_demand=rng.uniform(0.02, 0.3, (N, 1)),
                                external=["link"], name=f"tsfer-servers-rho{rho}")


def make_instance(family: str, seed: int) -> Instance | None:
    """The seeded random instance of ``family`` (:data:`FAMILIES`); for ``examples``, the ``seed``-th
    of :data:`EXAMPLES` (``None`` past the last one, or when the repository's ``examples/`` is absent)."""
    kw = dict(FAMILIES[family])
    if kw.pop("examples", False):
        from fairalloc.io import load_instance

        folder = _examples_dir()
        if folder is None or seed >= len(EXAMPLES):
            return None
        return load_instance(folder / f"{EXAMPLES[seed]}.yaml")
    if kw.pop("bottleneck", False):
        inst = bottleneck_instance(seed)
    elif "cluster" in kw:
        inst = paper_cluster(kw["cluster"], seed)
    else:
        inst = random_instance(seed, **kw)
    return inst.replace(name=f"{family}-{seed}")


def restrict(inst: Instance, users: Iterable[int] | None = None, servers: Iterable[int] | None = None,
             resources: Iterable[int] | None = None, external: Iterable[int] | None = None) -> Instance:
    """The sub-instance on the given users/servers/resources/external resources (indices; ``None`` keeps
    all). Raises :class:`~fairalloc.errors.InstanceError` if what is left is not a valid instance."""
    def seq(sel: Iterable[int] | None) -> list[int] | None:
        return None if sel is None else list(sel)

    return inst.take(seq(users), seq(servers), seq(resources), seq(external))


def _sig(a: np.ndarray, digits: int) -> np.ndarray:
    def one(v: float) -> float:
        return v if (v == 0 or not math.isfinite(v)) else float(f"{v:.{digits}g}")

    return np.vectorize(one, otypes=[float])(np.asarray(a, float)) if np.size(a) else np.asarray(a, float)


def round_instance(inst: Instance, digits: int) -> Instance:
    """Every number rounded to ``digits`` significant digits (zeros and ``inf`` kept)."""
    changes: dict[str, Any] = {"tasks": _sig(inst.tasks, digits), "weight": _sig(inst.weight, digits)}
    if inst.time_shared:
        changes["rates"] = _sig(inst.rates, digits)
    else:
        changes.update(capacity=_sig(inst.capacity, digits), demand=_sig(inst.demand, digits),
                       external_capacity=_sig(inst.external_capacity, digits),
                       external_demand=_sig(inst.external_demand, digits))
    return inst.replace(**changes)


def size(inst: Instance) -> tuple[int, int, int, int]:
    """Order of "smaller": users + servers + resources first, then users, servers, resources."""
    R = 1 if inst.time_shared else len(inst.resources) + len(inst.external)
    return (inst.n_users + inst.n_servers + R, inst.n_users, inst.n_servers, R)


# ---------------------------------------------------------------------- checking one property
@dataclass
class Check:
    """One property checked on one instance: ``holds`` (``None``: premise absent / not checkable),
    the measure, and for SP the profitable ``lie``."""

    holds: bool | None
    measure: float | None
    lie: dict[str, Any] | None = None
    reason: str = ""


def evaluate(subj: Subject, inst: Instance, props: Iterable[str] = PROPERTIES, *, tol: float = 1e-5,
             sp_budget: int = 20, seed: int = 0, lies: list[Any] | None = None) -> dict[str, Check]:
    """Solve ``subj`` on ``inst`` once and check each of ``props``. Raises
    :class:`~fairalloc.errors.FairallocError` when the mechanism does not take the instance (e.g.
    PS-DSF with external resources)."""
    from fairalloc.api import solve
    from fairalloc.verify import SI_OF_MECHANISM, allocation_for
    from fairalloc.verify.bottleneck import bottleneck_fair
    from fairalloc.verify.fairness import envy_free, sharing_incentive
    from fairalloc.verify.pareto import pareto
    from fairalloc.verify.strategy import strategy_proof

    props = list(props)
    tol = max(tol, subj.tol)
    try:
        r = solve(inst, subj.mechanism, **subj.params)
    except FairallocError:
        raise
    except Exception as exc:
        if subj.paper != USER_PAPER:
            raise
        # a user's mechanism that rejects an instance in its own way: unsupported there, not a crash
        raise FairallocError(f"{subj.mechanism}: {type(exc).__name__}: {exc}") from exc
    if not r.ok:
        return {p: Check(None, None, reason=f"solve: {r.status.value}") for p in props}
    pinst, x = allocation_for(inst, r)
    out: dict[str, Check] = {}
    for prop in props:
        if prop == "strategy_proof":
            item = strategy_proof(inst, r, seed=seed, budget=sp_budget, tol=tol, lies=lies,
                                  stop_at_first=True)
            out[prop] = Check(item["holds"], item["best_gain"],
                              item["lie"] if item["holds"] is False else None, item.get("reason", ""))
            continue
        if prop == "envy_free":
            item = envy_free(pinst, x, tol)
        elif prop == "sharing_incentive":
            item = sharing_incentive(pinst, x, SI_OF_MECHANISM.get(subj.mechanism, "apf"), tol)
        elif prop == "pareto":
            item = pareto(pinst, x, tol)
        elif prop == "bottleneck_fair":
            item = bottleneck_fair(pinst, x, tol)
        else:
            raise ValueError(f"unknown property {prop!r}")
        out[prop] = Check(item["holds"], item.get(MEASURES[prop]), reason=item.get("reason", ""))
    return out


def check(subj: Subject, prop: str, inst: Instance, *, tol: float = 1e-5, sp_budget: int = 20,
          seed: int = 0, lies: list[Any] | None = None) -> Check:
    """:func:`evaluate` for one property."""
    return evaluate(subj, inst, [prop], tol=tol, sp_budget=sp_budget, seed=seed, lies=lies)[prop]


def _same_lie(lie: dict[str, Any], inst: Instance) -> list[Any] | None:
    """The recorded lie, if its user and target still exist in ``inst``."""
    from fairalloc.verify.strategy import Lie

    if lie["user"] not in inst.users:
        return None
    target = lie.get("target")
    if lie["kind"] in {"scale"} and target not in inst.all_resources:
        return None
    if lie["kind"] in {"drop", "rate"} and target not in inst.servers:
        return None
    return [Lie.from_dict(lie)]


def _candidates(inst: Instance) -> list[tuple[str, Callable[[], Instance]]]:
    """The one-step simplifications :func:`shrink` tries, smallest-making first (each builds lazily)."""
    out: list[tuple[str, Callable[[], Instance]]] = []
    N, K = inst.n_users, inst.n_servers
    for n in range(N):
        if N > 1:
            out.append((f"drop user {inst.users[n]}",
                        lambda n=n: restrict(inst, users=[m for m in range(N) if m != n])))
    for i in range(K):
        if K > 1:
            out.append((f"drop server {inst.servers[i]}",
                        lambda i=i: restrict(inst, servers=[j for j in range(K) if j != i])))
    if not inst.time_shared:
        R, E = len(inst.resources), len(inst.external)
        for r in range(R):
            if R > 1:
                out.append((f"drop resource {inst.resources[r]}",
                            lambda r=r: restrict(inst, resources=[q for q in range(R) if q != r])))
        for e in range(E):
            out.append((f"drop external {inst.external[e]}",
                        lambda e=e: restrict(inst, external=[q for q in range(E) if q != e])))
    if not np.all(inst.weight == 1):
        out.append(("unit weights", lambda: inst.replace(weight=np.ones(N))))
    if inst.has_task_limits:
        out.append(("no task limits", lambda: inst.replace(tasks=np.full(N, np.inf))))
    if inst.has_placement:
        out.append(("no placement constraints", lambda: inst.replace(eligible=np.ones((N, K), bool))))
    out.append(("round to 2 digits", lambda: round_instance(inst, 2)))
    out.append(("round to 1 digit", lambda: round_instance(inst, 1)))
    return out


def shrink(inst: Instance, fails: Callable[[Instance], bool], max_checks: int = 80) -> tuple[Instance, int]:
    """Greedy shrinking: apply the first change (:func:`_candidates`) after which ``fails`` still holds,
    repeat until no change keeps it failing or ``max_checks`` checks are spent. Returns the shrunk
    instance and the number of checks made."""
    checks = 0
    progress = True
    while progress and checks < max_checks:
        progress = False
        for what, make in _candidates(inst):
            try:
                smaller = make()
            except FairallocError:
                continue
            if smaller == inst:
                continue
            checks += 1
            try:
                ok = fails(smaller)
            except FairallocError:
                ok = False
            if ok:
                log.debug("shrink: %s", what)
                inst = smaller
                progress = True
                break
            if checks >= max_checks:
                break
    return inst, checks


# ---------------------------------------------------------------------- the run
@dataclass
class Counterexample:
    """The smallest instance found (after shrinking) on which ``subject`` violates ``prop``."""

    subject: str
    mechanism: str
    params: dict[str, Any]
    prop: str
    family: str
    seed: int
    in_setting: bool
    features: list[str]
    measure: float | None
    instance: dict[str, Any]
    lie: dict[str, Any] | None = None
    definition: str | None = None

    @property
    def key(self) -> str:
        where = "in" if self.in_setting else "out"
        return f"{self.subject}|{self.prop}|{where}"

    def load(self) -> Instance:
        return parse_instance(self.instance)

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "mechanism": self.mechanism, "params": self.params,
                "property": self.prop, "definition": self.definition, "family": self.family,
                "seed": self.seed, "in_setting": self.in_setting, "features": self.features,
                "measure": self.measure, "lie": self.lie}


@dataclass
class AtlasConfig:
    """How much to run: ``instances`` per (subject, family), of which the first ``sp_instances`` also get
    the lie search with ``sp_budget`` re-solves; ``shrink_per_cell`` violations shrunk per (subject,
    property, inside/outside); ``tol`` the relative tolerance of every verdict."""

    instances: int = 10
    sp_instances: int = 6
    sp_budget: int = 20
    shrink_per_cell: int = 2
    tol: float = 1e-5
    seed: int = 0
    subjects: tuple[str, ...] | None = None
    families: tuple[str, ...] | None = None
    properties: tuple[str, ...] = PROPERTIES
    imports: tuple[str, ...] = ()  # user files/modules registering mechanisms (also in worker processes)


@dataclass
class AtlasRun:
    """Every check (``checks``: one row per subject × family × seed × property), the smallest
    counterexamples, and per (subject, family) the first reason an instance could not run."""

    config: AtlasConfig
    checks: pd.DataFrame
    counterexamples: dict[str, Counterexample]
    unsupported: dict[tuple[str, str], str]
    seconds: float

    def summary(self) -> pd.DataFrame:
        """One row per (subject, property): the claim, and checked/violated inside and outside the
        paper's setting, the families with violations and the worst measure."""
        rows = []
        for subj in _subjects(self.config):
            for prop in self.config.properties:
                claim, source = subj.claim(prop)
                d = self.checks[(self.checks.subject == subj.label) & (self.checks.property == prop)
                                & self.checks.holds.notna()]
                row: dict[str, Any] = {"subject": subj.label, "property": prop, "claim": claim,
                                       "source": source}
                for where, part in (("in", d[d.in_setting]), ("out", d[~d.in_setting])):
                    bad = part[part.holds == False]  # noqa: E712
                    row[f"checked_{where}"] = len(part)
                    row[f"violated_{where}"] = len(bad)
                    row[f"families_{where}"] = ", ".join(sorted(set(bad.family)))
                rows.append(row)
        return pd.DataFrame(rows)


def _subjects(cfg: AtlasConfig) -> list[Subject]:
    """The configured subjects: the shipped ones named in ``cfg.subjects`` (all when ``None``), plus user
    mechanisms — those named there, and with ``cfg.subjects = None`` every one ``cfg.imports`` registers."""
    from fairalloc.registry import load_imports

    load_imports(cfg.imports)
    out = [s for s in SUBJECTS if cfg.subjects is None or s.label in cfg.subjects]
    users = user_mechanisms()
    known = {s.label for s in SUBJECTS}
    wanted = users if cfg.subjects is None and cfg.imports else [
        n for n in (cfg.subjects or ()) if n not in known]
    for name in wanted:
        if name not in users:
            raise KeyError(f"no atlas subject {name!r} (known: {sorted(known)}; user mechanisms: "
                           f"{users or 'none (pass imports)'})")
        out.append(user_subject(name))
    return out


def run_atlas(cfg: AtlasConfig | None = None, progress: bool = True, workers: int = 1) -> AtlasRun:
    """Run the atlas (see the module docstring). ``workers > 1`` runs the subjects in that many
    processes (the result is the same: each subject's cells run in order in one process); a tqdm bar
    counts the (subject, family) cells."""
    from tqdm import tqdm

    from fairalloc.verify import SI_OF_MECHANISM

    cfg = cfg or AtlasConfig()
    fams = [f for f in FAMILIES if cfg.families is None or f in cfg.families]
    subjects = _subjects(cfg)
    t0 = time.perf_counter()
    parts: dict[str, _SubjectRun] = {}
    with tqdm(total=len(subjects) * len(fams), desc="atlas", unit="cell", disable=not progress) as bar:
        if workers > 1 and len(subjects) > 1:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = {pool.submit(_run_subject, s, fams, cfg): s.label for s in subjects}
                for fut in as_completed(futures):
                    parts[futures[fut]] = fut.result()
                    bar.update(len(fams))
        else:
            for s in subjects:
                parts[s.label] = _run_subject(s, fams, cfg, bar)
    rows = [r for s in subjects for r in parts[s.label].rows]
    best = {k: v for s in subjects for k, v in parts[s.label].best.items()}
    unsupported = {k: v for s in subjects for k, v in parts[s.label].unsupported.items()}
    checks = pd.DataFrame(rows, columns=["subject", "family", "seed", "property", "in_setting",
                                         "features", "holds", "measure", "reason"])
    for cx in best.values():
        if cx.prop == "sharing_incentive":
            cx.definition = SI_OF_MECHANISM.get(cx.mechanism, "apf")
    return AtlasRun(cfg, checks, best, unsupported, time.perf_counter() - t0)


@dataclass
class _SubjectRun:
    rows: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Counterexample] = field(default_factory=dict)
    unsupported: dict[tuple[str, str], str] = field(default_factory=dict)


def _run_subject(subj: Subject, fams: list[str], cfg: AtlasConfig, bar: Any = None) -> _SubjectRun:
    """Every family of one subject, in order: checks, and the smallest shrunk counterexamples."""
    from fairalloc.registry import load_imports

    load_imports(cfg.imports)  # a worker process registers the user's mechanisms too
    out = _SubjectRun()
    shrunk: dict[str, int] = {}
    for fam in fams:
        for k in range(cfg.instances):
            seed = k if fam == "examples" else cfg.seed * 100_003 + k
            inst = make_instance(fam, seed)
            if inst is None:
                break
            feats = features(inst)
            inside = feats <= subj.setting
            props = [p for p in cfg.properties if p != "strategy_proof" or k < cfg.sp_instances]
            try:
                results = evaluate(subj, inst, props, tol=cfg.tol, sp_budget=cfg.sp_budget, seed=seed)
            except FairallocError as exc:  # the mechanism does not take this instance
                out.unsupported.setdefault((subj.label, fam), str(exc))
                continue
            for prop, res in results.items():
                out.rows.append({"subject": subj.label, "family": fam, "seed": seed, "property": prop,
                                 "in_setting": inside, "features": " ".join(sorted(feats)),
                                 "holds": res.holds, "measure": res.measure, "reason": res.reason})
                if res.holds is not False:
                    continue
                key = f"{subj.label}|{prop}|{'in' if inside else 'out'}"
                if shrunk.get(key, 0) >= cfg.shrink_per_cell and key in out.best:
                    continue
                shrunk[key] = shrunk.get(key, 0) + 1
                cx = _shrunk_counterexample(subj, prop, inst, res, fam, seed, cfg, inside)
                if cx is not None and (key not in out.best or size(cx.load()) < size(out.best[key].load())):
                    out.best[key] = cx
        if bar is not None:
            bar.update(1)
    return out


def _shrunk_counterexample(subj: Subject, prop: str, inst: Instance, res: Check, family: str, seed: int,
                           cfg: AtlasConfig, inside: bool) -> Counterexample | None:
    lie = res.lie

    def fails(candidate: Instance) -> bool:
        if (features(candidate) <= subj.setting) != inside:
            return False  # a counterexample stays on its side of the paper's setting
        lies = None
        if prop == "strategy_proof":
            lies = _same_lie(lie, candidate) if lie else None
            if lies is None:
                return False
        return check(subj, prop, candidate, tol=cfg.tol, lies=lies).holds is False

    small, spent = shrink(inst, fails)
    final = check(subj, prop, small, tol=cfg.tol, lies=_same_lie(lie, small) if lie else None)
    if final.holds is not False:  # cannot happen unless the solver is not deterministic
        log.warning("atlas: shrunk counterexample of %s/%s no longer fails", subj.label, prop)
        return None
    log.info("atlas: %s violates %s on %s seed %d; shrunk to %s in %d checks", subj.label, prop, family,
             seed, size(small), spent)
    name = f"atlas-{subj.slug}-{SHORT[prop].lower()}-{'in' if inside else 'out'}"
    return Counterexample(subject=subj.label, mechanism=subj.mechanism, params=dict(subj.params), prop=prop,
                          family=family, seed=seed, in_setting=inside, features=sorted(features(small)),
                          measure=final.measure, instance=instance_to_dict(small.replace(name=name)),
                          lie=lie)
