"""The persistent solver handles push exactly the model's edits: re-solving after an edit gives what
a fresh solve of the edited model gives (HiGHS bridge and Pyomo's persistent HiGHS)."""

from __future__ import annotations

import math

import numpy as np
import pyomo.environ as pyo
import pytest

from benchmarks._workload import scaling_instance
from fairalloc import solve
from fairalloc.solvers.highs import HighsBridge


def bounded_model():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(3), domain=pyo.NonNegativeReals)
    m.p = pyo.Param(mutable=True, initialize=-math.inf, domain=pyo.Any)
    m.cap = pyo.Constraint(expr=m.x[0] + 2 * m.x[1] + m.x[2] <= 4)
    m.floor = pyo.Constraint(expr=m.x[2] >= m.p)  # a mutable bound that starts at -inf
    m.obj = pyo.Objective(expr=m.x[0] + m.x[1], sense=pyo.maximize)
    return m


@pytest.mark.parametrize("solver", ["highs", "pyomo-highs"])
def test_mutable_bound_starting_at_infinity_is_pushed(solver):
    from fairalloc.solvers import Session

    m = bounded_model()
    s = Session(solver=solver)
    h = s.open(m, "lp")
    assert s.run(h).objective == pytest.approx(4.0)
    m.p = 3.0  # floor x2 >= 3 leaves 1 for x0 + 2 x1
    h.update()
    assert s.run(h).objective == pytest.approx(1.0)
    assert m.x[2].value == pytest.approx(3.0)
    m.p = -math.inf
    h.update()
    assert s.run(h).objective == pytest.approx(4.0)


def test_bridge_follows_replaced_expressions_and_coefficients():
    m = bounded_model()
    b = HighsBridge(m)
    b.solve()
    m.cap.set_value(m.x[0] + 2 * m.x[1] + m.x[2] <= 6)  # a new expression with plain bounds
    b.update()
    assert b.solve().objective == pytest.approx(6.0)
    m.q = pyo.Param(mutable=True, initialize=1.0)
    m.lim = pyo.Constraint(expr=m.q * m.x[0] <= 2)
    b.update()
    assert b.solve().objective == pytest.approx(4.0)  # x0 = 2, x1 = 2
    m.q = 4.0  # coefficient edit: x0 <= 0.5
    b.update_rows([m.lim])
    out = b.solve()
    assert out.objective == pytest.approx(HighsBridge(m).solve().objective)
    assert out.kkt["max"] < 1e-9  # the cached matrix followed the edit
    m.lim.deactivate()
    b.update()
    assert b.solve().objective == pytest.approx(6.0)
    m.lim.activate()
    b.update()
    assert b.solve().objective == pytest.approx(HighsBridge(m).solve().objective)


@pytest.mark.parametrize("mechanism", ["drfh", "tsf-er"])
def test_pyomo_persistent_highs_agrees_over_progressive_filling(mechanism):
    inst = scaling_instance(24, 4, seed=3, link_users=0.8)  # several levels: floors matter
    a = solve(inst, mechanism)
    b = solve(inst, mechanism, solver="pyomo-highs")
    assert a.solver["solves"] > 1 and b.ok
    np.testing.assert_allclose(b.tasks, a.tasks, rtol=1e-6, atol=1e-9)


def _small():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(3), domain=pyo.NonNegativeReals)
    m.cap = pyo.Constraint(expr=m.x[0] + 2 * m.x[1] + m.x[2] <= 4)
    m.e = pyo.Expression(expr=m.x[0] + m.x[1])
    m.obj = pyo.Objective(expr=m.e, sense=pyo.maximize)
    return m


def test_bridge_update_sees_replaced_rows_and_named_objective_edits():
    """update() re-reads a row whose expression set_value replaced (body and bounds, not only the
    bounds) and an objective edited through a named Expression; the answer equals a fresh solve."""
    m = _small()
    bridge = HighsBridge(m)
    assert bridge.solve().objective == pytest.approx(4.0)
    m.cap.set_value(2 * m.x[0] + 2 * m.x[1] + m.x[2] <= 4)
    bridge.update()
    out = bridge.solve()
    assert out.objective == pytest.approx(HighsBridge(m).solve().objective) == pytest.approx(2.0)
    assert out.kkt["max"] <= 1e-9
    m.e.set_value(m.x[0] + 3 * m.x[1])
    bridge.update()
    assert bridge.solve().objective == pytest.approx(HighsBridge(m).solve().objective)


def test_rejected_per_solve_option_leaves_the_others_as_they_were():
    from fairalloc.errors import ParameterError

    bridge = HighsBridge(_small())
    bridge.solve()
    before = bridge._get_option("presolve"), bridge.solves
    with pytest.raises(ParameterError):
        bridge.solve(options={"presolve": "off", "no_such_option": 1})
    assert (bridge._get_option("presolve"), bridge.solves) == before
