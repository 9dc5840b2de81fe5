"""The property atlas (issue 5): every mechanism × property on seeded random instances of every family,
next to what the papers claim, with the smallest counterexample of every violation.

``python -m benchmarks atlas --publish`` regenerates ``docs/benchmarks/atlas.md`` (the table, the
explanation of every difference from the papers, and every counterexample as a YAML instance) and
``docs/benchmarks/atlas.png``. The test suite (``tests/test_atlas.py``) re-checks every counterexample
that page shows, so the page *is* the regression data. ``--quick`` runs 2 instances per cell.

The engine is :mod:`fairalloc.verify.atlas`; this module turns its run into the page.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Any

import numpy as np
import pandas as pd
import yaml

NAME = "atlas"
DESCRIPTION = ("property atlas: EF/SI/PO/SP/BF of every mechanism on random instance families, inside and "
               "outside each paper's setting, with shrunk counterexamples")

log = logging.getLogger(__name__)

MARK = {True: "✓", False: "✗", None: "–"}
CASE = "atlas-case"  # marker of the machine-readable comment before each counterexample's YAML

# What the papers print (transcribed; ✓ satisfied, ✗ not satisfied, blank = not listed).
PAPER_TABLES = {
    "[PSDSF] Table I (heterogeneous servers with placement constraints)": (
        ["property", "C-DRFH", "TSF", "PS-DSF"],
        [["SI", "", "✓", "✓"], ["SP", "✓", "✓", "~ (Thm 2: ✓)"], ["EF", "✓", "✓", "✓"],
         ["PO", "✓", "✓", "✓"], ["BF", "", "", "✓"]]),
    "[APF] Table I (heterogeneous servers with placement constraints)": (
        ["property", "DRFH", "TSF", "PS-DSF"],
        [["SI", "", "✓", "✓"], ["EF", "✓", "✓", "✓"], ["PO", "✓", "✓", ""], ["BF", "", "", "✓"]]),
    "[TSFER] Table 2 (servers and an external resource)": (
        ["mechanism", "EF", "PO", "SP", "SI"],
        [["CRU", "✓", "✓", "×", "✓"], ["MNW", "✓", "✓", "×", "✓"], ["DRF-α", "✓", "×", "✓", "×"],
         ["TSF-α", "✓", "×", "✓", "×"], ["DRF-ER", "✓", "✓", "✓", "×"], ["TSF-ER", "✓", "✓", "✓", "✓"]]),
    "[APF] Thm 3–4 (αPF-VDS)": (
        ["α", "EF", "SI", "PO", "BF"],
        [["α = 1", "✓", "✓", "✓", "✓ (Thm 4)"], ["α ≥ 1", "✓", "✓", "", "✓ (Thm 4)"],
         ["α < 1", "may fail", "may fail", "", "✓ (Thm 4)"]]),
}

# Why the atlas differs from a paper's claim, per (subject, property). Keys are looked up for every cell
# where the claim and the atlas disagree (inside or outside the paper's setting); a missing one is
# flagged on the page as unexplained.
_TIME_SHARED_SP = (
    "Only on the time-shared form, for which the papers state no SP result: there a user reports one rate "
    "per server, so it can misstate its speed on one server alone — a misreport a demand vector, the same "
    "on every server, cannot express. The normaliser (γTSF, η, or the per-server VDS) then moves out of "
    "proportion with the time the user receives: reporting a lower rate on a server it shares buys more of "
    "that server's time, or a higher rate on a server where it ties another user makes it look poorer "
    "there. PS-DSF, αPF-VDS, TSF and TSF-ER all yield to such a lie (the PS-DSF one on [PSDSF] Table III is "
    "worked out in [Verification](../verification.md#strategy-proofness)).")
_PER_SERVER_EXTERNAL_SI = (
    "Outside the setting only, with external resources (fairalloc's extension of the per-server game: each "
    "server has what the others leave of a pool). The [APF]/[PSDSF] threshold splits every server but not "
    "the external pools, so it can exceed what any feasible allocation gives: the smallest counterexample "
    "is one user alone on one server whose link allows fewer tasks than the server's share promises (the "
    "measure shown is the ratio; every mechanism fails it, see tsf × SI; [TSFER] Def. 6, which also "
    "splits the pools, is the definition for that setting).")
_SCOPED_SP = (
    "Outside the setting only, and only with an external pool scoped to some servers: the global dominant "
    "share then measures a resource a user may never consume. In the counterexample u3 runs only on s2, "
    "but its dominant resource is e2, a pool that serves s1. Reporting a larger r1 demand (still below its "
    "e2 share, so its share coefficient is unchanged) buys more r1 on s2 for the same dominant share — more "
    "true tasks. The SP argument for dominant-share mechanisms needs the dominant share to measure what the "
    "user holds. DRFH, DRF-α and DRF-ER compute the same global dominant shares and fail on the same "
    "instance.")
_TSFER_BF = (
    "[TSFER] does not consider bottleneck fairness ([APF] Def. 2). Its mechanisms normalise by η, the tasks "
    "a user could run alone over its eligible servers, or weigh utilities, not shares of the common "
    "bottleneck per server; so when one resource is everyone's bottleneck but users reach different "
    "servers (placement constraints, servers lacking a resource), the user with fewer servers gets less of "
    "it than max-min fairness would give.")
_APF_NOT_PO = (
    "[APF] Thm 3 claims Pareto optimality for α = 1 only. Then the server game's equilibrium is the optimum "
    "of one concave program over χ (weighted proportional fairness, Thm 2); for any other α each server "
    "maximises its own utility given the others' allocation, and such an equilibrium need not be Pareto "
    "optimal — the dominating allocation moves tasks between servers, which no single server can do.")
_APF_SP = (
    "[APF] states no strategy-proofness result for αPF-VDS. For finite α a server trades efficiency "
    "against fairness through the users' reported demands, and a user can tilt that trade: at α = 1 on "
    "one server, a user claiming a share of a resource only the other user needs makes that resource "
    "bind, and the proportionally fair split moves tasks its way; at other α the search finds "
    "misreported demand vectors that pay the same way. Time-shared instances add the per-server rate lie "
    "of PS-DSF.")
_UTIL_SP = (
    "[TSFER] §3.1 does not discuss SP for the utilitarian rules. Maximising Σ X (or Σ X/η) hands resources "
    "to whoever reports the most efficient use of them, so a user reporting a smaller demand than it has "
    "— or, for Σ X/η, hiding servers to shrink its η — wins them: the liar goes from nothing to a positive "
    "number of true tasks (gain ∞).")
_UTIL_BF = (
    "[TSFER] does not consider bottleneck fairness. The utilitarian rules give the bottleneck resource to "
    "whoever turns it into the most (normalised) tasks: even on one server with one resource, one user gets "
    "all of it (gap 1).")
_TSFER_EF = (
    "Outside [TSFER]'s setting only: with placement constraints η counts only a user's eligible servers "
    "(and on the time-shared form its rates). The proof of Thm 6 needs η_j ≥ μ_{j,i} η_i — user j could run "
    "as many tasks as user i with i's monopoly bundle — which fails when i's monopoly includes servers j "
    "may not use, or that are worth more to j. In the counterexample u1 may run on s3 only: it and the "
    "others get equal task shares, but another user places most of its share on s3, a bigger piece of s3 "
    "than u1's own. This is an artefact of the split, not of the totals: the same totals have an "
    "envy-free split (one LP finds it; `tests/test_atlas.py`), which neither the canonical split nor the "
    "paper's algorithm looks for.")

_NOT_HIT = (
    "A claim that a property fails needs one instance, and this run's instances inside the setting did "
    "not include one (few instances, e.g. with --quick). The paper's own counterexample, and the full run, "
    "show the failure; nothing here contradicts the claim.")

EXPLANATIONS: dict[tuple[str, str], str] = {
    ("drfh", "strategy_proof"): _SCOPED_SP,
    ("drf-alpha (eq)", "strategy_proof"): _SCOPED_SP,
    ("drf-er", "strategy_proof"): _SCOPED_SP,
    ("tsf", "envy_free"): (
        "Only on the time-shared form, for which [PSDSF]/[APF] state no TSF property. γTSF sums a user's "
        "rates over all servers, so equal task shares do not mean equally valuable bundles server by server: "
        "in the counterexample one user's share is held as time on a server where the envious user is just "
        "as fast, and the envious user could run more tasks with that time than with its own."),
    ("tsf", "sharing_incentive"): (
        "Outside the setting only. (1) With external resources the [APF]/[PSDSF] threshold splits every "
        "server but not the external pools, so it can exceed what any feasible allocation gives — the "
        "smallest counterexample is one user that gets everything the link allows (every mechanism fails "
        "it; [TSFER] Def. 6, which also splits the pools, is the definition for that setting). (2) On the "
        "time-shared form γTSF also counts the rates of servers a user may not use (placement is ignored "
        "by design), so such a user looks poorer than it is and takes time a user with more servers would "
        "get under the uniform split."),
    ("tsf", "strategy_proof"): _TIME_SHARED_SP,
    ("ps-dsf", "pareto"): (
        "[PSDSF] (Thm 2, Table I) claims PO; [APF] Table I and §2.3 correct it: \"PS-DSF does not satisfy "
        "Pareto optimality in general\". The atlas agrees with [APF]. In the counterexample every user has "
        "a bottleneck resource at every server (the Thm 1 certificate holds, and Algorithm I and the "
        "distributed algorithm give the same allocation), yet the dominating allocation raises everyone by "
        "trading one server's resources for another's. Each server's max-min sees only its own resources; "
        "a trade across servers is invisible to it."),
    ("ps-dsf", "strategy_proof"): _TIME_SHARED_SP + (
        " With external resources too (fairalloc's extension, outside the setting): two `tsfer-servers` "
        "instances (servers sharing a link) lose SP, the best lie gaining 3.9 % and 7.6–7.9 % (two runs of "
        "the search). The generalised game's fixed points are not unique in the totals, and a misreport can "
        "steer the sweeps to another one; whether that or the game itself makes these lies pay was not "
        "separated. (The earlier external counterexample, where `fast` and `best-response` returned "
        "different fixed points of the true instance, is gone since `fast` returns the canonical vertex and "
        "both run in name order: both now give the liar 1.437 there, and 1.432 under the lie.)"),
    ("ps-dsf", "sharing_incentive"): _PER_SERVER_EXTERNAL_SI,
    ("apf-vds α=1", "sharing_incentive"): _PER_SERVER_EXTERNAL_SI,
    ("apf-vds α=3", "sharing_incentive"): _PER_SERVER_EXTERNAL_SI,
    ("apf-vds α=1", "strategy_proof"): _APF_SP,
    ("apf-vds α=3", "strategy_proof"): _APF_SP,
    ("apf-vds α=0.5", "strategy_proof"): _APF_SP,
    ("apf-vds α=3", "pareto"): _APF_NOT_PO,
    ("apf-vds α=0.5", "pareto"): _APF_NOT_PO,
    ("tsf-er", "envy_free"): _TSFER_EF,
    ("tsf-er (paper)", "envy_free"): _TSFER_EF,
    ("tsf-er", "strategy_proof"): _TIME_SHARED_SP,
    ("tsf-er (paper)", "strategy_proof"): _TIME_SHARED_SP,
    ("tsf-er (paper)", "pareto"): (
        "Outside the setting only. That [TSFER]'s model has every user demand every resource and every "
        "server hold every resource is our reading, not a statement of the paper (its η of (6) divides by "
        "each demand, which needs every demand positive). Algorithm 1 removes a user from the active set "
        "only when it reaches its task limit, so when users are blocked by different resources (here one "
        "user needs a resource the others do not use), (8f) holds everyone at the level of the most "
        "constrained and capacity stays idle. Placement constraints and servers lacking a resource do the "
        "same (`examples/tsfer-idle.yaml`, `examples/tsfer-placement.yaml`). The default variant, exact "
        "lexicographic max-min, freezes such users instead and is PO on every instance checked."),
    ("tsf-er", "bottleneck_fair"): _TSFER_BF,
    ("tsf-er (paper)", "bottleneck_fair"): _TSFER_BF,
    ("cru", "bottleneck_fair"): _TSFER_BF + (" CRU maximises relative utilitarian welfare among EF and "
                                             "SI allocations; nothing ties it to max-min in one resource."),
    ("mnw", "bottleneck_fair"): _TSFER_BF + " MNW is proportional, not max-min, fairness.",
    ("drf-alpha (eq)", "bottleneck_fair"): _TSFER_BF,
    ("tsf-alpha (eq)", "bottleneck_fair"): _TSFER_BF,
    ("drf-er", "bottleneck_fair"): _TSFER_BF,
    ("utilitarian", "strategy_proof"): _UTIL_SP,
    ("relative-utilitarian", "strategy_proof"): _UTIL_SP,
    ("utilitarian", "bottleneck_fair"): _UTIL_BF,
    ("relative-utilitarian", "bottleneck_fair"): _UTIL_BF,
}


def _cell(row: pd.Series) -> str:
    claim = MARK[row.claim if row.claim in (True, False) else None]

    def part(where: str) -> str:
        n, v = row[f"checked_{where}"], row[f"violated_{where}"]
        if n == 0:
            return "·"
        return "✓" if v == 0 else f"✗ {v}/{n}"

    return f"{claim} · {part('in')} · {part('out')}"


def differences(summary: pd.DataFrame) -> list[dict[str, Any]]:
    """Every (subject, property) where the atlas and the paper's claim disagree, or where a claimed
    property is lost outside the paper's setting. User mechanisms (``--import``) have no paper: skipped."""
    from fairalloc.verify.atlas import user_mechanisms

    users = set(user_mechanisms())
    out = []
    for _, row in summary.iterrows():
        if row.subject in users:
            continue
        vin, vout = row.violated_in, row.violated_out
        if row.claim is True and vin:
            kind = "contradicted inside the paper's setting"
        elif row.claim is True and vout:
            kind = "holds in the paper's setting, lost outside it"
        elif row.claim is False and not vin and not vout and row.checked_in + row.checked_out:
            kind = "claimed to fail, but no counterexample found"
        elif row.claim is False and not vin and vout:
            kind = "claimed to fail; counterexamples found only outside the paper's setting"
        elif row.claim is None and (vin or vout):
            kind = "not claimed by the paper; violated"
        else:
            continue
        text = EXPLANATIONS.get((row.subject, row.property))
        if text is None and row.claim is False:
            text = _NOT_HIT
        out.append({"subject": row.subject, "property": row.property, "kind": kind, "text": text})
    return out


def _figure(summary: pd.DataFrame, props: list[str], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fairalloc.verify.atlas import SHORT

    subjects = list(dict.fromkeys(summary.subject))
    cols = [(p, w) for p in props for w in ("in", "out")]
    rate = np.full((len(subjects), len(cols)), np.nan)
    text = [["" for _ in cols] for _ in subjects]
    for _, row in summary.iterrows():
        i = subjects.index(row.subject)
        for j, (p, w) in enumerate(cols):
            if p != row.property:
                continue
            n, v = row[f"checked_{w}"], row[f"violated_{w}"]
            if n:
                rate[i, j] = v / n
                text[i][j] = f"{v}/{n}"
    fig, ax = plt.subplots(figsize=(1.0 * len(cols) + 2.5, 0.42 * len(subjects) + 1.6))
    im = ax.imshow(rate, cmap="Reds", vmin=0, vmax=1, aspect="auto")
    for i in range(len(subjects)):
        for j in range(len(cols)):
            if text[i][j]:
                ax.text(j, i, text[i][j], ha="center", va="center", fontsize=7,
                        color="white" if rate[i, j] > 0.6 else "black")
    ax.set_xticks(range(len(cols)), [f"{SHORT[p]}\n{'in' if w == 'in' else 'out'}" for p, w in cols],
                  fontsize=8)
    ax.set_yticks(range(len(subjects)), subjects, fontsize=8)
    ax.set_title("violated / checked, inside and outside each paper's setting", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03, label="share of checks violated")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "∞" if np.isinf(v) else f"{v:.4g}"
    return str(v)


def page(run: Any) -> str:
    """The markdown page of an :class:`~fairalloc.verify.atlas.AtlasRun`."""
    from fairalloc.verify.atlas import FAMILIES, MEASURES, SHORT, SUBJECTS

    cfg = run.config
    summary = run.summary()
    props = list(cfg.properties)
    subjects = [s for s in SUBJECTS if s.label in set(summary.subject)]
    n_inst = run.checks.groupby(["subject", "family", "seed"]).ngroups
    L: list[str] = ["# Property atlas", ""]
    L += [f"*Generated by `python -m benchmarks atlas --publish` — {len(run.checks)} checks on {n_inst} "
          f"(mechanism, instance) pairs in {run.seconds:.0f} s: {cfg.instances} seeded instances per "
          f"mechanism and family, the lie search on the first {cfg.sp_instances} with a budget of "
          f"{cfg.sp_budget} re-solves, verdicts at relative tolerance {cfg.tol:g}. Do not edit by hand; "
          "the method is described in [Verification → Property atlas](../atlas.md).*", ""]
    L += ["## What the papers claim", ""]
    for title, (headers, rows) in PAPER_TABLES.items():
        L += [f"**{title}**", "", *_table(headers, rows), ""]
    L += ["## What the atlas finds", "",
          "Each cell reads **claim · inside · outside**: the paper's claim (✓ holds, ✗ fails in general, "
          "– not stated), then the atlas on instances inside the paper's setting and outside it "
          "(✓ no violation among the checks, ✗ *k/n* violated in *k* of *n* checks, · nothing checked). "
          "Bottleneck fairness is only checked where its premise ([APF] Def. 2) holds. Sharing incentive "
          "uses each paper's own definition ([TSFER] Def. 6 for the [TSFER] rows, the [APF]/[PSDSF] "
          "uniform split for the others).", ""]
    headers = ["mechanism", "paper", "setting", *[SHORT[p] for p in props]]
    rows = []
    for s in subjects:
        cells = []
        for p in props:
            row = summary[(summary.subject == s.label) & (summary.property == p)].iloc[0]
            cells.append(_cell(row))
        setting = ", ".join(sorted(s.setting)).replace("_", " ")
        params = ", ".join(f"{k}={v}" for k, v in s.params.items() if k != "gains")
        name = f"`{s.mechanism}`" + (f" ({params})" if params else "")
        rows.append([name, s.paper, setting, *cells])
    L += [*_table(headers, rows), ""]
    L += ["![violation rates](atlas.png)", ""]
    fams = ", ".join(f"`{f}`" for f in FAMILIES)
    L += [f"Families: {fams} (see [the atlas method](../atlas.md#families)). A mechanism that rejects an "
          "instance (the demand-based mechanisms on the time-shared form) is not checked on that family; "
          "PS-DSF and αPF-VDS take external resources and task limits as fairalloc's extension, outside "
          "their papers' setting.", ""]

    L += ["## Every difference, explained", ""]
    diffs = differences(summary)
    unexplained = 0
    for d in diffs:
        text = d["text"]
        if not text:
            unexplained += 1
            log.warning("atlas: no explanation for %s × %s (%s)", d["subject"], d["property"], d["kind"])
            text = "**Unexplained** — a new finding of this run; see its counterexample below."
        L += [f"- **{d['subject']} × {SHORT[d['property']]}** — *{d['kind']}.* {text}"]
    if not diffs:
        L += ["The atlas agrees with every claim."]
    L += [""]

    L += ["## Counterexamples", "",
          "The smallest instance found for every violation, after shrinking (fewer users, servers and "
          "resources; weights, task limits and placement dropped; numbers rounded) while the property "
          "still fails — for SP, while the same lie still pays. Each is an instance file "
          "(`fairalloc solve case.yaml -m MECH` then `fairalloc verify case.yaml result.json` reproduces "
          "it) and a regression test (`tests/test_atlas.py` reads them from this page).", ""]
    order = {s.label: k for k, s in enumerate(subjects)}
    for cx in sorted(run.counterexamples.values(),
                     key=lambda c: (order.get(c.subject, 99), props.index(c.prop), not c.in_setting)):
        inst = cx.load()
        where = "inside the paper's setting" if cx.in_setting else "outside the paper's setting"
        title = (f"{cx.subject} · {SHORT[cx.prop]} · {where} — {inst.n_users} users, {inst.n_servers} "
                 f"servers; {MEASURES[cx.prop]} = {_fmt(cx.measure)}")
        meta = json.dumps({**cx.to_dict(), "measure": None if cx.measure is None or not np.isfinite(
            cx.measure) else cx.measure, "measure_text": _fmt(cx.measure)}, ensure_ascii=False)
        body = [f"features: {', '.join(cx.features) or 'none'}; found on family `{cx.family}`, "
                f"seed {cx.seed}."]
        if cx.lie:
            body.append(f"Lie: {cx.lie['description']}.")
        if cx.definition:
            body.append(f"Sharing incentive per the `{cx.definition}` definition.")
        L += [f'??? example "{title}"', "", *[f"    {b}" for b in body], "",
              f"    <!-- {CASE} {meta} -->", "    ```yaml",
              *[f"    {line}" for line in yaml.safe_dump(cx.instance, sort_keys=False).splitlines()],
              "    ```", ""]
    if unexplained:
        L += [f"*{unexplained} difference(s) above are new and not yet explained.*", ""]
    return "\n".join(L) + "\n"


def run(out: pathlib.Path, quick: bool = False, imports: tuple[str, ...] = ()) -> dict[str, Any]:
    """``imports``: user files/modules (``--import``); their mechanisms join the atlas as rows."""
    from fairalloc.verify.atlas import AtlasConfig, run_atlas, subject

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    imports = tuple(str(pathlib.Path(i).resolve()) if i.endswith(".py") else i for i in imports)
    cfg = AtlasConfig(instances=2, sp_instances=1, sp_budget=6, imports=imports) if quick else \
        AtlasConfig(imports=imports)
    res = run_atlas(cfg, workers=min(2, os.cpu_count() or 1))  # subjects in parallel; same result
    res.checks.to_csv(out / f"{NAME}.csv", index=False)
    summary = res.summary()
    summary.to_csv(out / f"{NAME}_summary.csv", index=False)
    _figure(summary, list(cfg.properties), out / f"{NAME}.png")
    (out / f"{NAME}.md").write_text(page(res))
    cases = out / "counterexamples"
    cases.mkdir(exist_ok=True)
    for cx in res.counterexamples.values():
        stem = f"{subject(cx.subject).slug}-{cx.prop}-{'in' if cx.in_setting else 'out'}"
        (cases / f"{stem}.yaml").write_text(yaml.safe_dump(cx.instance, sort_keys=False))
    (cases / "index.json").write_text(json.dumps([c.to_dict() for c in res.counterexamples.values()],
                                                 indent=2, default=str))
    diffs = differences(summary)
    return {"name": NAME, "files": [f"{NAME}.csv", f"{NAME}_summary.csv", f"{NAME}.png", f"{NAME}.md"],
            "seconds": res.seconds, "checks": len(res.checks),
            "violations": int((res.checks.holds == False).sum()),  # noqa: E712
            "counterexamples": len(res.counterexamples), "differences": len(diffs),
            "unexplained": sum(d["text"] is None for d in diffs)}
