"""Array-backed linear expressions are, to Pyomo, the LinearExpressions they stand for; the compiler
reads them as arrays and gets the same matrix."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.repn import generate_standard_repn

from fairalloc.generate import random_instance
from fairalloc.models.feasible import feasible_set
from fairalloc.solvers.compile import col_bounds, compile_linear
from fairalloc.solvers.highs import HighsBridge
from fairalloc.solvers.linear import ArrayLinearExpression, VarFamily, array_sum, column_bounds


def twin_models(seed: int = 0):
    """The same random LP twice: rows as array expressions, and as ordinary quicksums."""
    rng = np.random.default_rng(seed)
    n, rows = 12, 5
    A = rng.uniform(0, 1, (rows, n)) * (rng.random((rows, n)) < 0.6)
    c = rng.uniform(0, 1, n)
    models = []
    for arrays in (True, False):
        m = pyo.ConcreteModel()
        m.I = pyo.RangeSet(0, n - 1)
        m.x = pyo.Var(m.I, domain=pyo.NonNegativeReals)
        fam = VarFamily(m.x.values())

        def body(r, m=m, fam=fam, arrays=arrays):
            nz = np.flatnonzero(A[r])
            if arrays:
                return array_sum(A[r, nz], nz, fam)
            return pyo.quicksum(float(A[r, j]) * m.x[int(j)] for j in nz)

        m.c = pyo.ConstraintList()  # no rule kept: the model pickles
        for r in range(rows):
            m.c.add(body(r) <= 1.0)
        m.obj = pyo.Objective(expr=body(0) + pyo.quicksum(float(c[j]) * m.x[j] for j in m.I),
                              sense=pyo.maximize)
        models.append(m)
    return models


def test_pyomo_sees_the_same_expression(tmp_path):
    arr, plain = twin_models()
    for r in arr.c:
        a, p = arr.c[r].body, plain.c[r].body
        assert type(a) is ArrayLinearExpression and a.is_array
        assert str(a) == str(p)
        ra, rp = generate_standard_repn(a), generate_standard_repn(p)
        assert ra.linear_coefs == pytest.approx(rp.linear_coefs)
        assert [v.name for v in ra.linear_vars] == [v.name for v in rp.linear_vars]
    for m in (arr, plain):
        for v in m.x.values():
            v.set_value(0.5)
    assert [pyo.value(arr.c[r].body) for r in arr.c] == pytest.approx(
        [pyo.value(plain.c[r].body) for r in plain.c])
    files = []
    for k, m in enumerate((arr, plain)):
        for ext in ("lp", "nl"):
            m.write(str(tmp_path / f"{k}.{ext}"), io_options={"symbolic_solver_labels": ext == "lp"})
        files.append([(tmp_path / f"{k}.{ext}").read_text() for ext in ("lp", "nl")])
    assert files[0] == files[1]


def test_editing_cloning_pickling_give_ordinary_expressions():
    arr, _ = twin_models()
    body = arr.c[1].body
    text = str(body)
    extended = body + arr.x[0]
    assert str(extended) == text + " + x[0]" and str(body) == text  # the original is unchanged
    for other in (arr.clone(), copy.deepcopy(arr), pickle.loads(pickle.dumps(arr))):
        b = other.c[1].body
        assert str(b) == text
        assert all(v.parent_component() is other.x for v in generate_standard_repn(b).linear_vars)


def test_compiled_matrices_agree():
    arr, plain = twin_models(3)
    fa, fp = compile_linear(arr), compile_linear(plain)
    # columns are numbered by first appearance: align them by variable name
    pa = np.argsort([v.name for v in fa.variables])
    pp = np.argsort([v.name for v in fp.variables])
    assert np.allclose(fa.A.toarray()[:, pa], fp.A.toarray()[:, pp])
    assert np.allclose(fa.c[pa], fp.c[pp]) and np.array_equal(fa.row_ub, fp.row_ub)
    assert HighsBridge(arr).solve().objective == pytest.approx(HighsBridge(plain).solve().objective)


@pytest.mark.parametrize("family", ["placement", "mixed", "scoped", "time-shared"])
def test_feasible_set_rows_match_an_independent_formulation(family):
    from fairalloc.generate import FAMILIES

    inst = random_instance(7, 9, 4, 3, **FAMILIES[family])
    m = pyo.ConcreteModel()
    m.chi = feasible_set(inst)
    m.obj = pyo.Objective(expr=pyo.quicksum(m.chi.X[u] for u in m.chi.N), sense=pyo.maximize)
    f = compile_linear(m)
    col = {(v.index()): j for j, v in enumerate(f.variables)}
    dense = f.A.toarray()
    U, S = inst.users, inst.servers
    for con, row in zip(f.constraints, dense):
        name = con.parent_component().local_name
        want = np.zeros(len(col))
        if name == "capacity":
            s, r = con.index()
            i, k = S.index(s), inst.resources.index(r)
            for (u, s2), j in col.items():
                if s2 == s:
                    want[j] = inst.demand[U.index(u), k]
            assert f.row_ub[f.row_index[id(con)]] == pytest.approx(inst.capacity[i, k])
        elif name == "time":
            i = S.index(con.index())
            for (u, s2), j in col.items():
                if s2 == con.index():
                    want[j] = 1.0 / inst.gamma[U.index(u), i]
        elif name == "external":
            e = inst.external.index(con.index())
            for (u, s2), j in col.items():
                if inst.external_scope[e, S.index(s2)]:
                    want[j] = inst.external_demand[U.index(u), e]
        elif name == "limit":
            for (u, _), j in col.items():
                want[j] = float(u == con.index())
        assert np.allclose(row, want), con.name
    assert np.allclose(f.c, 1.0)


def test_column_bounds_match_the_public_properties():
    m = pyo.ConcreteModel()
    m.p = pyo.Param(mutable=True, initialize=4.0)
    m.a = pyo.Var(range(3), domain=pyo.NonNegativeReals)
    m.b = pyo.Var(range(2), domain=pyo.Binary)
    m.c = pyo.Var(range(2), domain=pyo.Integers, bounds=(-2, 5))
    m.d = pyo.Var(bounds=(None, m.p))
    m.e = pyo.Var(domain=pyo.Reals)
    m.a[1].setub(3.5)
    m.a[2].fix(1.25)
    variables = list(m.component_data_objects(pyo.Var))
    lb, ub, integer = column_bounds(variables)
    want = np.array([col_bounds(v) for v in variables])
    assert np.array_equal(lb, want[:, 0]) and np.array_equal(ub, want[:, 1])
    assert integer.tolist() == [v.is_integer() or v.is_binary() for v in variables]
    m.p = 7.0  # a mutable bound is read at call time
    assert column_bounds([m.d])[1][0] == 7.0
