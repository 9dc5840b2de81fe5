"""The solve layer: persistent HiGHS bridge, the Ipopt routes, statuses, multipliers, KKT residuals."""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest

from fairalloc.errors import ParameterError
from fairalloc.solvers import Session, model_kkt, solver_table
from fairalloc.solvers.compile import compile_linear
from fairalloc.solvers.highs import HighsBridge
from fairalloc.solvers.ipopt import CasadiIpopt, ipopt_executable
from fairalloc.status import Status

from conftest import require_scip


def small_lp(sense=pyo.maximize):
    m = pyo.ConcreteModel()
    m.x = pyo.Var([0, 1], domain=pyo.NonNegativeReals)
    m.c1 = pyo.Constraint(expr=m.x[0] + 2 * m.x[1] <= 4)
    m.c2 = pyo.Constraint(expr=3 * m.x[0] + m.x[1] <= 6)
    m.obj = pyo.Objective(expr=m.x[0] + m.x[1], sense=sense)
    return m


def test_highs_duals_are_shadow_prices():
    m = small_lp()
    b = HighsBridge(m)
    out = b.solve()
    assert out.status is Status.OPTIMAL and out.objective == pytest.approx(2.8)
    assert [m.x[0].value, m.x[1].value] == pytest.approx([1.6, 1.2])
    # d(obj*)/d(rhs), checked by finite differences on a fresh model
    for con, rhs in ((m.c1, 4), (m.c2, 6)):
        m2 = small_lp()
        getattr(m2, con.local_name).set_value(
            (m2.x[0] + 2 * m2.x[1] if con is m.c1 else 3 * m2.x[0] + m2.x[1]) <= rhs + 1e-3)
        o2 = HighsBridge(m2).solve().objective
        assert b.dual(con) == pytest.approx((o2 - 2.8) / 1e-3, abs=1e-6)
    assert out.kkt["max"] < 1e-9


def test_highs_persistent_updates_match_fresh_solves():
    m = small_lp()
    b = HighsBridge(m)
    b.solve()
    m.x[1].setub(0.5)  # bound change
    b.update()
    assert b.solve().objective == pytest.approx(HighsBridge(m).solve().objective)
    m.c2.deactivate()  # deactivation
    m.extra = pyo.Constraint(expr=m.x[0] <= 3)  # new row
    b.update()
    o = b.solve().objective
    assert o == pytest.approx(3.5) and o == pytest.approx(HighsBridge(m).solve().objective)
    m.p = pyo.Param(mutable=True, initialize=2.0)
    m.c3 = pyo.Constraint(expr=m.x[0] + m.p * m.x[1] <= 3)
    b.update()
    assert b.solve().objective == pytest.approx(3.0)
    m.p = 0.5  # coefficient change: pushed explicitly
    b.update_rows([m.c3])
    out = b.solve()
    assert out.objective == pytest.approx(HighsBridge(m).solve().objective)
    assert out.kkt["max"] < 1e-9
    m.obj.sense = pyo.minimize  # objective change
    b.update()
    assert b.solve().objective == pytest.approx(0.0)


def test_highs_fixed_variables_and_constants():
    m = small_lp()
    m.x[0].fix(1.0)
    m.c4 = pyo.Constraint(expr=m.x[1] + 2 <= 3.5)
    f = compile_linear(m)
    j = f.columns.index[id(m.x[0])]
    assert f.col_lb[j] == f.col_ub[j] == 1.0 and f.row_ub[-1] == pytest.approx(1.5)
    out = HighsBridge(m).solve()
    assert m.x[1].value == pytest.approx(1.5) and out.ok
    m.x[0].unfix()
    b = HighsBridge(m)
    m.x[0].fix(0.0)
    b.update()
    assert b.solve().objective == pytest.approx(1.5)


def test_highs_statuses():
    m = small_lp()
    m.bad = pyo.Constraint(expr=m.x[0] >= 10)
    assert HighsBridge(m).solve().status is Status.INFEASIBLE
    m = small_lp()
    m.x[0].domain = pyo.Reals
    m.obj.expr = -m.x[0]  # unbounded: an error status, not a number
    assert HighsBridge(m).solve().status is Status.ERROR


def _big_lp(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(0, n - 1)
    m.x = pyo.Var(m.I, domain=pyo.NonNegativeReals)
    A = rng.uniform(0, 1, (60, n))
    m.c = pyo.Constraint(pyo.RangeSet(0, 59), rule=lambda m, r: sum(A[r, j] * m.x[j] for j in m.I) <= 1)
    m.obj = pyo.Objective(expr=sum(rng.uniform(0, 1) * m.x[j] for j in m.I), sense=pyo.maximize)
    return m


def test_limits_are_reported_honestly():
    m = _big_lp()
    out = HighsBridge(m, algorithm="simplex").solve(options={"simplex_iteration_limit": 2})
    assert out.status is Status.ITERATION_LIMIT and not out.ok
    out = HighsBridge(m, algorithm="ipm").solve(time_limit=1e-6)
    assert out.status is Status.TIME_LIMIT and not out.ok
    s = Session(time_limit=1e-9)
    import time

    time.sleep(0.01)
    assert s.solve(m).status is Status.TIME_LIMIT


def test_array_lps_map_statuses_and_stop_at_the_same_work_every_time():
    """``solve_arrays``: an LP built from arrays is solved by HiGHS (the optimum checked by hand), an
    infeasible one says so, and the work limit (HiGHS's simplex interrupt checks, counted) stops it as
    an iteration limit at the same iteration on every run."""
    import scipy.sparse as sp

    from fairalloc.solvers.highs import solve_arrays

    # max x + 2y s.t. x + y <= 4, x - y = 1, 0 <= x, y <= 3: (2.5, 1.5), objective -5.5
    c, A_ub, A_eq = np.array([-1.0, -2.0]), sp.csr_array([[1.0, 1.0]]), sp.csr_array([[1.0, -1.0]])
    res = solve_arrays(c, A_ub, np.array([4.0]), A_eq, np.array([1.0]), np.zeros(2), np.full(2, 3.0))
    assert res.status is Status.OPTIMAL and res.work == 0
    np.testing.assert_allclose(res.x, [2.5, 1.5], atol=1e-12)
    assert res.objective == pytest.approx(-5.5)
    res = solve_arrays(c, A_ub, np.array([0.5]), A_eq, np.array([1.0]), np.zeros(2), np.full(2, 3.0))
    assert res.status is Status.INFEASIBLE and res.x is None
    rng = np.random.default_rng(3)
    A = sp.random(300, 400, density=0.05, random_state=rng, format="csr")
    args = (-rng.random(400), A, np.ones(300), sp.csr_array((0, 400)), np.zeros(0), np.zeros(400),
            np.full(400, np.inf), {"solver": "simplex", "presolve": "off"})
    full = solve_arrays(*args)
    assert full.status is Status.OPTIMAL and full.iterations > 20
    runs = [solve_arrays(*args, work_limit=10) for _ in range(2)]
    assert all(r.status is Status.ITERATION_LIMIT and r.x is None and r.work == 10 for r in runs)
    assert runs[0].iterations == runs[1].iterations < full.iterations
    with pytest.raises(ParameterError, match="no_such_option"):  # named, as the bridge names it
        solve_arrays(*args[:-1], {"no_such_option": 1})


def test_failed_warm_dual_simplex_is_re_solved_by_primal_simplex():
    """HiGHS 1.15's dual simplex can end a warm re-solve at once with status 'Not Set' (seen on TSF-ER
    1024x128, second progressive-filling round). The bridge then runs primal simplex from the same
    basis and keeps it for later re-solves; the answer equals a fresh solve."""
    import highspy

    m = _big_lp(n=300)
    bridge = HighsBridge(m, algorithm="simplex")
    assert bridge.solve().ok
    m.c[0].set_value(m.c[0].body <= 0.5)
    bridge.update()

    class FailsOnce:  # the HiGHS handle, except that the next run fails as HiGHS did
        def __init__(self, h):
            self._h, self._failed = h, False

        def __getattr__(self, name):
            return getattr(self._h, name)

        def run(self):
            if not self._failed:
                self._failed = True
                return highspy.HighsStatus.kError
            return self._h.run()

    bridge.h.clearSolver()  # model status 'Not Set', as HiGHS left it
    bridge.h = FailsOnce(bridge.h)
    out = bridge.solve()
    assert out.status is Status.OPTIMAL and bridge.warm_retries == 1
    assert bridge._get_option("simplex_strategy") == 4
    assert out.objective == pytest.approx(HighsBridge(m).solve().objective, rel=1e-9)


def nash_welfare(sense=pyo.maximize):
    """max Σ w log u[n], u[n] = Σ_i x[n,i], capacity rows: a small Eisenberg–Gale program."""
    m = pyo.ConcreteModel()
    m.N, m.K = pyo.RangeSet(0, 2), pyo.RangeSet(0, 1)
    w, d, c = [1.0, 2.0, 1.0], [[1, 2], [2, 1], [1, 1]], [[6, 4], [5, 7]]
    m.x = pyo.Var(m.N, m.K, domain=pyo.NonNegativeReals, initialize=0.5)
    m.u = pyo.Var(m.N, initialize=1.0)
    m.du = pyo.Constraint(m.N, rule=lambda m, n: m.u[n] == m.x[n, 0] + m.x[n, 1])
    m.cap = pyo.Constraint(m.K, [0, 1], rule=lambda m, i, r: sum(d[n][r] * m.x[n, i] for n in m.N)
                           <= c[i][r])
    m.limit = pyo.Constraint(expr=m.u[2] <= 1.0)
    s = 1 if sense == pyo.maximize else -1
    m.obj = pyo.Objective(expr=s * sum(w[n] * pyo.log(m.u[n]) for n in m.N), sense=sense)
    return m


@pytest.mark.parametrize("sense", [pyo.maximize, pyo.minimize])
def test_casadi_ipopt_nash_welfare_kkt(sense):
    m = nash_welfare(sense)
    out = CasadiIpopt(m).solve()
    assert out.status is Status.OPTIMAL and out.solver == "ipopt-casadi"
    # KKT residuals computed from the Pyomo model (reverse-mode derivatives) and the mapped multipliers
    kkt = model_kkt(m)
    assert kkt["max"] < 1e-6, kkt
    assert m.dual[m.limit] != 0.0  # the task limit binds
    # the multiplier is a shadow price: perturb the bound and re-solve
    m2 = nash_welfare(sense)
    m2.limit.set_value(m2.u[2] <= 1.0 + 1e-4)
    o2 = CasadiIpopt(m2).solve().objective
    assert m.dual[m.limit] == pytest.approx((o2 - out.objective) / 1e-4, rel=1e-3)


def test_casadi_multipliers_match_highs_on_an_lp():
    a, b = small_lp(), small_lp()
    HighsBridge(a).solve()
    hb = HighsBridge(a)
    hb.solve()
    CasadiIpopt(b).solve()
    for name in ("c1", "c2"):
        assert b.dual[getattr(b, name)] == pytest.approx(hb.dual(getattr(a, name)), abs=1e-6)


def test_casadi_reuse_after_bound_change_and_iteration_limit():
    m = nash_welfare()
    solver = CasadiIpopt(m)
    first = solver.solve().objective
    m.limit.set_value(m.u[2] <= 2.0)
    solver.update()
    again = solver.solve()
    fresh = CasadiIpopt(nash_welfare()).solve()
    assert again.objective > first and fresh.objective == pytest.approx(first)
    assert CasadiIpopt(nash_welfare(), {"max_iter": 1}).solve().status is Status.ITERATION_LIMIT


def test_ipopt_refuses_integers():
    from fairalloc.errors import SolverUnavailableError

    m = nash_welfare()
    m.z = pyo.Var(domain=pyo.Binary)
    m.zc = pyo.Constraint(expr=m.z <= m.u[0])
    with pytest.raises(SolverUnavailableError, match="integer"):
        CasadiIpopt(m)


@pytest.mark.skipif(ipopt_executable() is None, reason="no ipopt executable on PATH (idaes route)")
def test_executable_ipopt_agrees_with_casadi():
    from fairalloc.solvers.ipopt import ExecutableIpopt

    a, b = nash_welfare(), nash_welfare()
    oa, ob = ExecutableIpopt(a).solve(), CasadiIpopt(b).solve()
    assert oa.objective == pytest.approx(ob.objective, rel=1e-7)
    assert model_kkt(a)["max"] < 1e-6


def test_session_routes_and_checks():
    from fairalloc.errors import ParameterError

    with pytest.raises(ParameterError, match="unknown solver"):
        Session(solver="gurobi-ish")
    # a solver applies to the classes it takes; the others keep their defaults
    Session(solver="highs").check("nlp")
    Session(solver="highs").check("none")  # tsf-er-online: nothing to solve, nothing to refuse
    assert Session(solver="highs").solver_for("nlp").name == "ipopt"
    assert Session(solver="ipopt").solver_for("lp").name == "highs"
    Session().check("none")
    s = Session()
    assert s.solver_for("lp").name == "highs" and s.solver_for("nlp").name == "ipopt"
    names = {r["name"]: r for r in solver_table()}
    assert names["highs"]["available"] and names["ipopt-casadi"]["available"]


def test_scip_agrees_with_highs():
    require_scip()
    m = small_lp()
    out = Session(solver="scip").solve(m, "lp")
    assert out.ok and out.objective == pytest.approx(2.8, abs=1e-6)
    assert out.kkt is None  # SCIP returns no multipliers; nothing pretends otherwise


def test_pyomo_persistent_highs_agrees():
    m = small_lp()
    out = Session(solver="pyomo-highs").solve(m, "lp")
    assert out.ok and out.objective == pytest.approx(2.8) and out.kkt["max"] < 1e-9
