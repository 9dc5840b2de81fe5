"""What the papers prove, as hypothesis properties, each inside its theorem's premises (the atlas charts
what happens outside them):

- DRF (one pooled server; Ghodsi et al., [PSDSF] §II-A): EF, SI, PO, SP;
- TSF-ER ([TSFER] Table 2, Thm 6; servers holding every resource, positive demands, no placement
  constraints, external resources, task limits, weights per §8): EF, PO, SI (Def. 6) and SP on the
  searched lies;
- PS-DSF ([PSDSF] Thm 2; placement constraints and weights, no external resources or task limits):
  EF, SI and, where its premise holds, BF;
- αPF-VDS ([APF] Thm 3): EF and SI for α ≥ 1, PO for α = 1.

Instances are drawn from small integer grids (capacities and demands in tenths) so hypothesis shrinks a
failure to a readable instance. Few examples each and ``deadline=None``: a property run costs a solve.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairalloc import Instance, solve
from fairalloc.verify import allocation_for
from fairalloc.verify.bottleneck import bottleneck_fair
from fairalloc.verify.fairness import envy_free, sharing_incentive
from fairalloc.verify.pareto import pareto
from fairalloc.verify.strategy import strategy_proof

TOL = 1e-6
FAST = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@st.composite
def instances(draw: st.DrawFn, *, users: tuple[int, int] = (2, 4), servers: tuple[int, int] = (1, 3),
              resources: tuple[int, int] = (1, 3), positive: bool = False, placement: bool = False,
              external: int = 0, limits: bool = False, weights: bool = False,
              bottleneck: bool = False) -> Instance:
    """A valid instance. ``positive``: every server holds every resource and every user demands every
    resource ([TSFER]'s setting); otherwise capacities and demands may be 0. ``bottleneck``: resource 1
    dominant for every user at every server ([APF] Def. 2)."""
    N = draw(st.integers(*users))
    K = draw(st.integers(*servers))
    R = draw(st.integers(*resources))
    lo = 1 if positive else 0
    cap = np.array(draw(st.lists(st.integers(lo, 20), min_size=K * R, max_size=K * R)), float).reshape(K, R)
    cap[cap.sum(axis=1) == 0, 0] = 10
    dem = np.array(draw(st.lists(st.integers(lo, 10), min_size=N * R, max_size=N * R)), float).reshape(N, R)
    dem[dem.sum(axis=1) == 0, 0] = 1
    cap, dem = cap / 10, dem / 10
    if bottleneck:
        cap = np.maximum(cap, 0.1)
        dem[:, 0] = np.maximum(dem[:, 0], 0.1)
        lift = (dem[:, None, :] * cap[None, :, 0:1] / cap[None, :, :]).max(axis=(1, 2))
        dem[:, 0] = np.maximum(dem[:, 0], lift)  # d[n,1]/c[i,1] >= d[n,r]/c[i,r] everywhere
    can = np.array([[((cap[i] > 0) | (dem[n] == 0)).all() for i in range(K)] for n in range(N)])
    for n in np.flatnonzero(~can.any(axis=1)):  # give the user a server it can run on
        cap[0, dem[n] > 0] = np.maximum(cap[0, dem[n] > 0], 0.5)
        can[:, 0] = [((cap[0] > 0) | (dem[m] == 0)).all() for m in range(N)]
    elig = np.ones((N, K), bool)
    if placement:
        elig = np.array(draw(st.lists(st.booleans(), min_size=N * K, max_size=N * K))).reshape(N, K)
        for n in range(N):
            if not (elig[n] & can[n]).any():
                elig[n, int(np.flatnonzero(can[n])[0])] = True
    w = np.array(draw(st.lists(st.integers(1, 3), min_size=N, max_size=N)), float) if weights else None
    kw: dict = {}
    if external:
        kw = {"external_capacity": np.array(draw(st.lists(st.integers(5, 20), min_size=external,
                                                          max_size=external)), float) / 10,
              "external_demand": np.array(draw(st.lists(st.integers(1 if positive else 0, 5),
                                                        min_size=N * external, max_size=N * external)),
                                          float).reshape(N, external) / 10}
    inst = Instance.from_arrays(capacity=cap, demand=dem, eligible=elig, weight=w, **kw)
    if limits:
        frac = draw(st.lists(st.sampled_from([0.3, 0.6, 1.0, np.inf]), min_size=N, max_size=N))
        inst = inst.replace(tasks=np.asarray(frac) * inst.eta)
    return inst


def _solved(inst: Instance, mech: str, **params):
    r = solve(inst, mech, **params)
    assert r.ok, r.message
    return r, *allocation_for(inst, r)


# ---------------------------------------------------------------------- DRF: all four
@FAST
@given(instances(external=1, weights=True))
def test_drf_envy_free_sharing_incentive_pareto(inst):
    _, pinst, x = _solved(inst, "drf")
    assert envy_free(pinst, x, TOL)["holds"]
    assert sharing_incentive(pinst, x, "apf", TOL)["holds"]
    assert pareto(pinst, x, TOL)["holds"]


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(instances(users=(2, 3), servers=(1, 2), resources=(2, 3)))
def test_drf_strategy_proof(inst):
    r, _, _ = _solved(inst, "drf")
    rep = strategy_proof(inst, r, budget=12, tol=TOL)
    assert rep["holds"] is True, rep


# ---------------------------------------------------------------------- TSF-ER in its paper's setting
TSFER_SETTING = instances(positive=True, external=2, limits=True, weights=True, servers=(1, 2))


@FAST
@given(TSFER_SETTING)
def test_tsfer_envy_free_pareto_sharing_incentive(inst):
    _, pinst, x = _solved(inst, "tsf-er")
    assert envy_free(pinst, x, TOL)["holds"]
    assert pareto(pinst, x, TOL)["holds"]
    assert sharing_incentive(pinst, x, "tsfer", TOL)["holds"]


@FAST
@given(instances(positive=True, external=1, weights=True, servers=(1, 2)))
def test_tsfer_paper_variant_agrees_in_its_setting(inst):
    """Algorithm 1 as printed is EF, PO and SI when every user demands every resource everywhere."""
    _, pinst, x = _solved(inst, "tsf-er", variant="paper")
    assert pareto(pinst, x, TOL)["holds"] and envy_free(pinst, x, TOL)["holds"]
    assert sharing_incentive(pinst, x, "tsfer", TOL)["holds"]


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(instances(positive=True, external=1, users=(2, 3), servers=(1, 2), resources=(1, 2)))
def test_tsfer_strategy_proof_on_searched_lies(inst):
    r, _, _ = _solved(inst, "tsf-er")
    rep = strategy_proof(inst, r, budget=12, tol=TOL)
    assert rep["holds"] is True, rep


# ---------------------------------------------------------------------- PS-DSF
@FAST
@given(instances(placement=True, weights=True))
def test_psdsf_envy_free_sharing_incentive(inst):
    _, pinst, x = _solved(inst, "ps-dsf")
    assert envy_free(pinst, x, TOL)["holds"]
    assert sharing_incentive(pinst, x, "apf", TOL)["holds"]


@FAST
@given(instances(placement=True, weights=True, bottleneck=True, resources=(2, 3)))
def test_psdsf_bottleneck_fair(inst):
    _, pinst, x = _solved(inst, "ps-dsf")
    bf = bottleneck_fair(pinst, x, TOL)
    assert bf["premise"] and bf["resource"] == "r1"
    assert bf["holds"], bf


# ---------------------------------------------------------------------- αPF-VDS
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(instances(placement=True, weights=True, users=(2, 3), servers=(1, 2)),
       st.sampled_from([1.0, 2.0, 4.0]))
def test_apf_vds_envy_free_sharing_incentive_for_alpha_at_least_one(inst, alpha):
    _, pinst, x = _solved(inst, "apf-vds", alpha=alpha, gains=False)
    assert envy_free(pinst, x, TOL)["holds"]
    assert sharing_incentive(pinst, x, "apf", TOL)["holds"]


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(instances(placement=True, weights=True, users=(2, 3), servers=(1, 2)))
def test_apf_vds_pareto_for_alpha_one(inst):
    _, pinst, x = _solved(inst, "apf-vds", alpha=1.0, gains=False)
    assert pareto(pinst, x, TOL)["holds"]
