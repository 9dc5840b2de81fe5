"""[PSDSF] Thm 1 certificate on the docs/examples.md PS-DSF allocations, and failures on perturbed ones."""

from __future__ import annotations

import numpy as np

from fairalloc import load_instance
from fairalloc.verify import psdsf_certificate


def test_golden_allocations_carry_the_certificate(examples):
    fig1 = load_instance(examples / "psdsf-fig1.yaml")
    cert = psdsf_certificate(fig1, np.array([[6.0, 0.0], [0.0, 6.0]]))
    assert cert["holds"]
    assert cert["bottleneck"] == {"u1": {"s1": "mem"}, "u2": {"s1": "mem", "s2": "mem"}}
    fig2 = load_instance(examples / "psdsf-fig2.yaml")
    x2 = np.array([[3.6, 0], [3.6, 0], [0, 8], [0, 8]])
    assert psdsf_certificate(fig2, x2)["holds"]
    t3 = load_instance(examples / "psdsf-table3.yaml")
    x3 = np.array([[40, 170, 0, 0], [20, 85, 0, 0], [0, 0, 82.5, 0], [0, 0, 0, 27.5]])
    assert psdsf_certificate(t3, x3)["holds"]


def test_perturbed_allocations_fail_with_names(examples):
    fig1 = load_instance(examples / "psdsf-fig1.yaml")
    # DRFH's allocation: u2 takes memory on s1 while its VDS there exceeds u1's
    drfh = np.array([[60 / 11, 0.0], [6 / 11, 6.0]])
    cert = psdsf_certificate(fig1, drfh)
    assert not cert["holds"]
    assert {"user": "u1", "server": "s1"} == {k: cert["failures"][0][k] for k in ("user", "server")}
    # leaving s2 idle: u2 has no saturated resource there
    idle = np.array([[6.0, 0.0], [0.0, 3.0]])
    fails = psdsf_certificate(fig1, idle)["failures"]
    assert any(f["user"] == "u2" and f["server"] == "s2" and "no saturated" in f["reason"]
               for f in fails)


def _pair_by_pair(inst, x, tol, bounds):
    """Thm 1 read one (user, server) pair at a time, from the definitions (the reference for the
    vectorised certificate): a limit, a spent budget or a bound first, else the first saturated resource
    the user demands there on which no holder has a larger weighted VDS."""
    vds = inst.vds(x, weighted=True)
    X = x.sum(axis=1)
    names = list(inst.resources) + list(inst.external)
    failures, bottleneck = [], {}
    for n in range(inst.n_users):
        for i in range(inst.n_servers):
            if not inst.runnable[n, i]:
                continue
            dem = [float(inst.demand[n, r]) for r in range(len(inst.resources))]
            use = [float(x[:, i] @ inst.demand[:, r]) for r in range(len(inst.resources))]
            cap = [float(c) for c in inst.capacity[i]]
            for e in range(len(inst.external)):
                scoped = bool(inst.external_scope[e, i])
                dem.append(float(inst.external_demand[n, e]) if scoped else 0.0)
                use.append(float((x * inst.external_scope[e]).sum(axis=1) @ inst.external_demand[:, e]))
                cap.append(float(inst.external_capacity[e]))

            def holds(m, r, i=i):
                if x[m, i] <= tol * abs(x[m]).sum():
                    return False
                return (inst.external_demand[m, r - len(inst.resources)] > 0 if r >= len(inst.resources)
                        else inst.demand[m, r] > 0)

            sat = [r for r in range(len(names)) if dem[r] > 0 and use[r] >= cap[r] * (1 - tol)]
            found = None
            if X[n] >= inst.tasks[n] * (1 - tol):
                found = "tasks"
            elif (np.isfinite(inst.budget_limit[n]) and inst.budget_cost[n, i] > 0
                  and (inst.budget_cost[n] * x[n]).sum() >= inst.budget_limit[n] * (1 - tol)):
                found = "budget"
            elif bounds is not None and np.isfinite(bounds[n, i]) and x[n, i] >= bounds[n, i] * (1 - tol):
                found = "bound"
            else:
                for r in sat:
                    worst = max((vds[m, i] for m in range(inst.n_users) if holds(m, r)), default=-np.inf)
                    if vds[n, i] >= worst - tol * abs(worst):
                        found = names[r]
                        break
            if found is None:
                reason = ("no saturated resource it demands" if not sat else "a user with a larger weighted "
                          f"VDS holds each saturated resource ({', '.join(names[r] for r in sat)})")
                failures.append({"user": inst.users[n], "server": inst.servers[i], "reason": reason})
            else:
                bottleneck.setdefault(inst.users[n], {})[inst.servers[i]] = found
    return {"holds": not failures, "failures": failures, "bottleneck": bottleneck}


def test_certificate_agrees_with_the_pair_by_pair_reading():
    """The certificate's arrays against the pair-by-pair reading above, on every family of the generator
    (limits, budgets, external resources, placement), at PS-DSF points, perturbed points, the empty
    allocation and with random column bounds: the same verdict, failures (in order) and bottlenecks."""
    from fairalloc.api import solve
    from fairalloc.generate import FAMILIES, random_instance

    rng = np.random.default_rng(7)
    for fam, kw in FAMILIES.items():
        for seed in range(2):
            inst = random_instance(seed, 9, 3, 3, missing=0.2, **kw)
            if inst.time_shared:
                continue
            x = solve(inst, "ps-dsf").allocation
            if seed:  # budgets that x spends in full for three users (tasks cost nothing at some servers)
                cost = rng.uniform(0, 1, x.shape) * (rng.random(x.shape) < 0.7)
                spent = (cost * x).sum(axis=1)
                inst = inst.replace(budget_cost=cost, budget_limit=np.where(
                    (np.arange(inst.n_users) < 3) & (spent > 0), spent, np.inf))
            for y in (x, x * rng.uniform(0.7, 1.0, x.shape), np.zeros_like(x)):
                for tol in (1e-6, 1e-9):
                    bounds = np.where(rng.random(y.shape) < 0.3, y, np.inf) if seed else None
                    assert psdsf_certificate(inst, y, tol, bounds) == _pair_by_pair(inst, y, tol, bounds), \
                        (fam, seed, tol)
