"""Units do not change answers: the issue's reproducers, and every mechanism with one resource's unit
changed by 1e6 and an external resource's by 1e-3."""

from __future__ import annotations

import numpy as np
import pytest

import fairalloc
from fairalloc.generate import random_instance
from fairalloc.instance import Instance
from fairalloc.verify.feasibility import feasibility

PER_SERVER = {"ps-dsf", "apf-vds"}  # no external resources in their model


def _rescaled(inst: Instance) -> Instance:
    cap, dem = inst.capacity.copy(), inst.demand.copy()
    cap[:, 0] *= 1e6
    dem[:, 0] *= 1e6
    kw = {"capacity": cap, "demand": dem}
    if len(inst.external):
        kw |= {"external_capacity": inst.external_capacity * 1e-3,
               "external_demand": inst.external_demand * 1e-3}
    return inst.replace(**kw)


@pytest.mark.parametrize("mech", sorted(fairalloc.mechanisms()))
@pytest.mark.parametrize("seed", [0, 3])
def test_task_counts_do_not_depend_on_units(mech, seed):
    inst = random_instance(seed, 5, 3, 3, external=0 if mech in PER_SERVER else 1, placement=True)
    a, b = fairalloc.solve(inst, mech), fairalloc.solve(_rescaled(inst), mech)
    assert a.status == b.status and a.ok
    np.testing.assert_allclose(b.tasks, a.tasks, rtol=1e-6, atol=0)


@pytest.mark.parametrize("mech", ["drfh", "tsf", "tsf-er", "cru", "mnw", "ps-dsf", "apf-vds"])
def test_a_tiny_user_keeps_its_tasks(mech):
    """One server {cpu: 1}, demands 1e-4 and 1e6: the second user's 5e-7 tasks are not snapped away."""
    inst = Instance.from_arrays(capacity=[[1.0]], demand=[[1e-4], [1e6]])
    r = fairalloc.solve(inst, mech)
    np.testing.assert_allclose(r.tasks, [5000, 5e-7], rtol=1e-6)


@pytest.mark.parametrize("mech", ["drfh", "tsf", "tsf-er", "drf-er", "mnw", "apf-vds"])
def test_small_coefficients_are_not_dropped(mech):
    """{cpu: 1e6}, demands 1e-4 and 1: the share coefficient 1e-10 survives (HiGHS drops < 1e-9)."""
    inst = Instance.from_arrays(capacity=[[1e6]], demand=[[1e-4], [1.0]])
    r = fairalloc.solve(inst, mech)
    np.testing.assert_allclose(r.tasks, [5e9, 5e5], rtol=1e-6)


def test_mnw_tiny_server_is_not_overrun():
    """{cpu: 100} and {cpu: 0.0002}, demands 1 and 100000: no clipping of −1e-8 into an overrun."""
    inst = Instance.from_arrays(capacity=[[100.0], [0.0002]], demand=[[1.0], [100000.0]])
    r = fairalloc.solve(inst, "mnw")
    assert r.status.value == "optimal"
    assert feasibility(inst, r.allocation, tol=1e-9)["holds"]


def test_verify_judges_rows_relative_to_their_bound():
    inst = Instance.from_arrays(capacity=[[10.0]], demand=[[1.0]], external_capacity=[0.0002],
                                external_demand=[[0.0001]])
    x = np.array([[2.0 * (1 + 1.1e-4)]])  # the link overrun by 1.1e-4 of its capacity
    f = feasibility(inst, x)
    assert not f["holds"] and f["worst_row"] == "external[e1]"
    assert f["max_relative_violation"] == pytest.approx(1.1e-4, rel=1e-6)
