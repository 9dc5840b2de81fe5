"""Fuzzing every mechanism on seeded random instances whose numbers span 1e-4 … 1e6, checked by code that
shares nothing with the library's solve path (numpy and an exact rational simplex, :mod:`exact_lp`):

- every ``optimal``/``converged`` allocation meets every row of χ to 1e-6 of the row's bound;
- the max-min mechanisms reach the first max-min level of their share (one LP, here);
- utilitarian and relative-utilitarian reach the LP optimum;
- MNW's reported duality gap is recomputed from the prices it reports;
- PS-DSF's allocation has a bottleneck resource for every user at every server ([PSDSF] Thm 1, written
  out here from the definition);
- αPF-VDS (α = 1) and MNW give the same totals when both are ``optimal`` ([APF] Thm 2).

``FAIRALLOC_FUZZ=400`` runs 400 instances instead of the default 48.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from exact_lp import maximize

import fairalloc
from fairalloc.errors import FairallocError
from fairalloc.instance import Instance

N_INSTANCES = int(os.environ.get("FAIRALLOC_FUZZ", "48"))
SHARES = {"drfh": "dominant", "tsf": "tsf", "tsf-er": "eta"}


def wide_instance(seed: int) -> Instance:
    """Placement, weights, task limits, zero capacities, resources one user demands, scoped external
    resources, the time-shared form; each value drawn from 1e-4 … 1e6 or a whole table at one scale."""
    rng = np.random.default_rng(seed)
    N, K, R = int(rng.integers(2, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 4))

    def mag(shape: tuple[int, ...]) -> np.ndarray:
        if rng.random() < 0.5:  # each value at its own scale
            return 10.0 ** rng.uniform(-4, 6, shape)
        return 10.0 ** rng.uniform(-4, 6) * rng.uniform(0.5, 2, shape)  # one scale for the table

    weight = rng.choice([1.0, 2.0, 3.0], N) if rng.random() < 0.5 else np.ones(N)
    if rng.random() < 0.2:
        rates = mag((N, K)) * (rng.random((N, K)) > 0.3)
        rates[np.arange(N), rng.integers(0, K, N)] = mag((N,))
        return Instance.from_arrays(rates=rates, weight=weight, name=f"fuzz-ts-{seed}")
    cap = mag((K, R)) * (rng.random((K, R)) > 0.2)
    cap[:, 0] = np.where(cap[:, 0] > 0, cap[:, 0], mag((K,)))  # every server offers resource 0
    dem = mag((N, R)) * (rng.random((N, R)) > 0.4)
    dem[:, 0] = np.where(dem[:, 0] > 0, dem[:, 0], mag((N,)))
    for n in range(N):  # some server offers everything the user demands
        if not any(((cap[i] > 0) | (dem[n] == 0)).all() for i in range(K)):
            i = int(rng.integers(K))
            cap[i] = np.where((dem[n] > 0) & (cap[i] == 0), mag((R,)), cap[i])
    can = np.array([[((cap[i] > 0) | (dem[n] == 0)).all() for i in range(K)] for n in range(N)])
    elig = can.copy()
    if rng.random() < 0.5:
        elig &= rng.random((N, K)) > 0.3
        for n in range(N):
            if not elig[n].any():
                elig[n, int(np.flatnonzero(can[n])[0])] = True
    E = int(rng.integers(0, 3))
    kw: dict = {}
    if E:
        kw = {"external_capacity": mag((E,)), "external_demand": mag((N, E)) * (rng.random((N, E)) > 0.3)}
        if rng.random() < 0.5:
            scope = rng.random((E, K)) > 0.5
            scope[np.arange(E), rng.integers(0, K, E)] = True
            kw["external_scope"] = scope
    inst = Instance.from_arrays(capacity=cap, demand=dem, weight=weight, eligible=elig,
                                name=f"fuzz-{seed}", **kw)
    if rng.random() < 0.4:
        inst = inst.replace(tasks=np.where(rng.random(N) < 0.5, rng.uniform(0.2, 1.2, N) * inst.eta, np.inf))
    return inst


# ---------------------------------------------------------------------- independent checks
def rows(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """χ as ``A x ≤ b`` over x (users × servers, row-major), written from the definitions."""
    N, K = inst.n_users, inst.n_servers
    A, b = [], []
    if inst.rates is not None:
        for i in range(K):
            a = np.zeros((N, K))
            ok = inst.eligible[:, i] & (inst.rates[:, i] > 0)
            a[ok, i] = 1.0 / inst.rates[ok, i]
            A.append(a.ravel())
            b.append(1.0)
    else:
        for i in range(K):
            for r in range(len(inst.resources)):
                a = np.zeros((N, K))
                a[:, i] = inst.demand[:, r]
                A.append(a.ravel())
                b.append(inst.capacity[i, r])
    for e in range(len(inst.external)):
        a = inst.external_demand[:, e][:, None] * inst.external_scope[e][None, :]
        A.append(a.ravel())
        b.append(inst.external_capacity[e])
    for n in np.flatnonzero(np.isfinite(inst.tasks)):
        a = np.zeros((N, K))
        a[n] = 1.0
        A.append(a.ravel())
        b.append(inst.tasks[n])
    return np.array(A), np.array(b)


def runnable(inst: Instance) -> np.ndarray:
    if inst.rates is not None:
        return inst.eligible & (inst.rates > 0)
    ok = np.array([[((inst.capacity[i] > 0) | (inst.demand[n] == 0)).all() for i in range(inst.n_servers)]
                   for n in range(inst.n_users)])
    return ok & inst.eligible


def check_feasible(inst: Instance, x: np.ndarray) -> None:
    A, b = rows(inst)
    used = A @ x.ravel()
    over = np.where(b > 0, used / np.where(b > 0, b, 1.0) - 1, np.where(used > 0, np.inf, 0.0))
    assert (over <= 1e-6).all(), f"row {int(np.argmax(over))} over its bound by {over.max():.3g} (relative)"
    assert (x >= 0).all() and not (x[~runnable(inst)] > 0).any()


def lp_bounds(inst: Instance) -> list[tuple[float, float | None]]:
    return [(0, None) if ok else (0, 0) for ok in runnable(inst).ravel()]


def first_maxmin_level(inst: Instance, coeff: np.ndarray) -> float:
    """max t s.t. coeff_n X_n ≥ t for all n, x ∈ χ — in exact rational arithmetic (:mod:`exact_lp`):
    no tolerance and no scaling to get wrong when coefficients span ten orders of magnitude."""
    N, K = inst.n_users, inst.n_servers
    A, b = rows(inst)
    cols = np.flatnonzero(runnable(inst).ravel())
    share = np.kron(np.diag(coeff), np.ones((1, K)))[:, cols]  # coeff_n Σ_i x_ni
    A_ub = np.vstack([np.hstack([A[:, cols], np.zeros((len(b), 1))]), np.hstack([-share, np.ones((N, 1))])])
    c = np.zeros(len(cols) + 1)
    c[-1] = 1.0
    value, _ = maximize(c, A_ub, np.concatenate([b, np.zeros(N)]))
    return float(value)


def lp_optimum(inst: Instance, w: np.ndarray) -> float:
    """max Σ_n w_n X_n over χ, exactly."""
    A, b = rows(inst)
    cols = np.flatnonzero(runnable(inst).ravel())
    value, _ = maximize(np.repeat(w, inst.n_servers)[cols], A[:, cols], b)
    return float(value)


def share_coeff(inst: Instance, kind: str) -> np.ndarray:
    if kind == "dominant":
        total = np.concatenate([inst.capacity.sum(axis=0), inst.external_capacity])
        d = np.concatenate([inst.demand, inst.external_demand], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):  # a resource nobody offers nor demands
            ratio = np.where(total > 0, d / np.where(total > 0, total, 1.0), 0.0)
        return ratio.max(axis=1) / inst.weight
    if kind == "tsf":
        return 1.0 / (inst.weight * inst.gamma_tsf)
    return 1.0 / (inst.weight * inst.eta)


def failures(inst: Instance) -> tuple[int, list[str]]:
    """Every mechanism on ``inst``; the independent checks that fail, as ``"mechanism: what"``."""
    checked, bad, done = 0, [], {}
    for mech in fairalloc.mechanisms():
        try:
            r = fairalloc.solve(inst, mech)
        except FairallocError:  # a mechanism that does not take this kind of instance says so
            continue
        if not r.ok:
            continue
        checked += 1
        done[mech] = r
        try:
            check_result(inst, mech, r)
        except AssertionError as exc:
            bad.append(f"{mech} ({r.status.value}): {' '.join(str(exc).split())[:200]}")
    a, m = done.get("apf-vds"), done.get("mnw")  # α = 1: αPF-VDS is weighted PF ([APF] Thm 2)
    if a is not None and m is not None and a.status.value == m.status.value == "optimal" \
            and not np.allclose(a.tasks, m.tasks, rtol=1e-6, atol=1e-9 * float(np.max(m.tasks, initial=0))):
        bad.append(f"apf-vds: totals {a.tasks} differ from mnw's {m.tasks} at alpha = 1")
    return checked, bad


def check_psdsf_bottlenecks(inst: Instance, x: np.ndarray, tol: float = 1e-6) -> None:
    """[PSDSF] Thm 1 from its definition: every user has, at every server it can run on, a resource it
    demands that is saturated and held by no user of larger weighted VDS X_n/(φ_n γ[n,i]) (a user at
    its task limit is blocked everywhere; an external resource is a resource of every server in its
    scope, saturated when its pool is)."""
    ok = runnable(inst)
    X = x.sum(axis=1)
    if inst.rates is not None:
        gamma = np.where(ok, inst.rates, 0.0)
        dem = np.where(ok, 1.0 / np.where(ok, inst.rates, 1.0), 0.0)[:, :, None]  # (N, K, 1): time
        cap = np.ones((inst.n_servers, 1))
    else:
        with np.errstate(divide="ignore"):
            ratio = np.where(inst.demand[:, None, :] > 0,
                             inst.capacity[None, :, :] / np.where(inst.demand[:, None, :] > 0,
                                                                  inst.demand[:, None, :], 1.0), np.inf)
        gamma = np.where(ok, ratio.min(axis=2), 0.0)
        dem = np.broadcast_to(inst.demand[:, None, :], (inst.n_users, inst.n_servers, len(inst.resources)))
        cap = inst.capacity
    used = np.einsum("nk,nkr->kr", x, dem)
    if len(inst.external):  # a resource of every server in its scope, saturated when its pool is
        ext = inst.external_demand[:, None, :] * inst.external_scope.T[None]  # (N, K, E)
        pool = np.einsum("nk,nke->e", x, ext)
        dem = np.concatenate([dem, ext], axis=2)
        used = np.hstack([used, np.broadcast_to(pool, (inst.n_servers, len(pool)))])
        cap = np.hstack([cap, np.broadcast_to(inst.external_capacity, (inst.n_servers, len(pool)))])
    with np.errstate(divide="ignore", invalid="ignore"):
        vds = np.where(ok, X[:, None] / (inst.weight[:, None] * gamma), np.nan)
    hold = x > tol * max(1.0, float(x.max(initial=0.0)))
    for n, i in np.argwhere(ok):
        if X[n] >= inst.tasks[n] * (1 - tol):
            continue
        blocked = False
        for r in range(cap.shape[1]):
            if dem[n, i, r] <= 0 or used[i, r] < cap[i, r] * (1 - tol):
                continue
            rivals = hold[:, i] & (dem[:, i, r] > 0)
            if (vds[rivals, i] <= vds[n, i] * (1 + tol) + 1e-300).all():
                blocked = True
                break
        assert blocked, f"PS-DSF: user {inst.users[n]} has no bottleneck at server {inst.servers[i]}"


def check_result(inst: Instance, mech: str, r: fairalloc.Result) -> None:
    if r.allocation.shape == (inst.n_users, inst.n_servers):
        check_feasible(inst, r.allocation)
    kind = SHARES.get(mech)
    if kind is not None and not (inst.time_shared and kind == "dominant"):
        coeff = share_coeff(inst, kind)
        level = first_maxmin_level(inst, coeff)
        got = float((r.tasks * coeff).min())
        assert got >= level * (1 - 1e-6), f"smallest share {got:.6g} below the max-min level {level:.6g}"
    if mech in ("utilitarian", "relative-utilitarian"):
        w = np.ones(inst.n_users) if mech == "utilitarian" else 1.0 / inst.eta
        best = lp_optimum(inst, w)
        got = float((w * r.tasks).sum())
        assert got >= best * (1 - 1e-6), f"{got:.9g} below the LP optimum {best:.9g}"
    if mech == "ps-dsf":
        check_psdsf_bottlenecks(inst, r.allocation)
    if mech == "mnw" and r.status.value == "optimal":
        from fairalloc.models import mnw

        price = {k: np.asarray(v, float) for k, v in r.details["prices"].items()}  # the certificate
        gap = mnw.duality_gap(inst, r.allocation, price)
        assert gap <= 1e-8 * inst.weight.sum(), f"duality gap {gap:.3g}"


@pytest.mark.parametrize("seed", range(N_INSTANCES))
def test_fuzz_every_mechanism(seed):
    checked, bad = failures(wide_instance(seed))
    assert checked >= 3  # (a time-shared instance offers 7 mechanisms; extreme ones leave some `error`)
    assert bad == []
