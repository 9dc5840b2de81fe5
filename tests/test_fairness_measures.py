"""EF and SI measures (fairalloc.verify.fairness) against an independent per-pair LP, and metrics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from fairalloc import Instance, solve
from fairalloc.generate import random_instance
from fairalloc.metrics import jain, overall_utilization, utilization
from fairalloc.verify.fairness import envy_free, envy_values, sharing_incentive


def _value_lp(inst: Instance, x: np.ndarray, n: int, m: int) -> float:
    """Tasks n runs with m's weighted bundle: max Σ y_i, y_i ≤ w μR x[m,i] on n's eligible servers,
    each external resource n demands limited to m's amount of it (on its scope), Σ y ≤ T[n]."""
    d, K, w = inst.demand, inst.n_servers, inst.weight[n] / inst.weight[m]
    mu = min(d[m, r] / d[n, r] for r in range(d.shape[1]) if d[n, r] > 0)
    A, b = [np.ones(K)], [inst.tasks[n] if np.isfinite(inst.tasks[n]) else 1e12]
    for e in range(len(inst.external)):
        if inst.external_demand[n, e] > 0:
            A.append(inst.external_scope[e] * inst.external_demand[n, e])
            b.append(w * inst.external_demand[m, e] * (inst.external_scope[e] * x[m]).sum())
    res = linprog(-np.ones(K), A_ub=np.array(A), b_ub=b, method="highs",
                  bounds=[(0, w * mu * x[m, i] * inst.eligible[n, i]) for i in range(K)])
    return float(-res.fun)


@pytest.mark.parametrize("seed", range(12))
def test_envy_values_match_the_pair_lp(seed):
    inst = random_instance(seed, placement=True, external=2, scoped=seed % 2 == 0, weights=True,
                           limits=True)
    x = solve(inst, "drfh").x
    V = envy_values(inst, x)
    for n in range(inst.n_users):
        for m in range(inst.n_users):
            if n != m:
                assert V[n, m] == pytest.approx(_value_lp(inst, x, n, m), rel=1e-7, abs=1e-9)


def test_envy_and_si_name_the_worst_user():
    inst = Instance.from_arrays(capacity=[[10, 10]], demand=[[1, 1], [1, 1]])
    rep = envy_free(inst, np.array([[2.0], [6.0]]))
    assert not rep["holds"] and rep["user"] == "u1" and rep["envies"] == "u2"
    assert rep["min_ef_sat"] == pytest.approx(2 / 6)
    si = sharing_incentive(inst, np.array([[2.0], [6.0]]), "apf")
    assert not si["holds"] and si["user"] == "u1" and si["min_si_sat"] == pytest.approx(2 / 5)
    # a task limit caps both the envy and the SI threshold
    capped = inst.replace(tasks=np.array([2.0, np.inf]))
    assert envy_free(capped, np.array([[2.0], [6.0]]))["holds"]
    assert sharing_incentive(capped, np.array([[2.0], [6.0]]), "tsfer")["holds"]


def test_time_shared_bundles_are_time_fractions(examples):
    from fairalloc import load_instance

    inst = load_instance(examples / "psdsf-table3.yaml")
    r = solve(inst, "ps-dsf")
    assert envy_free(inst, r.x)["min_ef_sat"] == pytest.approx(1.0, abs=1e-6)
    swapped = r.x[[1, 0, 2, 3]]
    assert not envy_free(inst, swapped)["holds"]


def test_metrics():
    inst = Instance.from_arrays(capacity=[[9, 18], [0, 4]], demand=[[1, 4], [3, 1]])
    x = np.array([[3.0, 0.0], [2.0, 0.0]])
    u = utilization(inst, x)
    assert u[0].tolist() == pytest.approx([1.0, 14 / 18]) and np.isnan(u[1, 0]) and u[1, 1] == 0
    assert overall_utilization(inst, x) == pytest.approx((1 + 14 / 18 + 0) / 3)
    assert jain([2, 2, 2]) == 1.0 and jain([1, 0]) == 0.5
