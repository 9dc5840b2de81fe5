"""The Schur-complement interior-point method (``solvers/schur_ipm.py``): the same optimum and a KKT
certificate as HiGHS on LPs of its shape, HiGHS's sign conventions for the multipliers, the fallback
to HiGHS's IPX where it does not apply or does not converge, and the same canonical allocations
through progressive filling as the other routes."""

from __future__ import annotations

import highspy
import numpy as np
import pytest
import scipy.sparse as sp
from link_instances import link_instance

from fairalloc import solve
from fairalloc.solvers import canonical
from fairalloc.solvers import schur_ipm as S
from fairalloc.solvers.highs import highs_lp, new_highs
from fairalloc.solvers.kkt import kkt_residuals

INF = highspy.kHighsInf


def _lp(seed: int, maximize: bool) -> dict:
    """A random LP of the method's shape: ``U`` rows with one entry per allocation column (as a
    progressive-filling ``level`` row: ``≥`` a floor, some with the dense column ``t``, some equalities),
    ``G`` coupling rows (``≤`` capacities, one ranged, one free), boxed, fixed and free columns."""
    rng = np.random.default_rng(seed)
    U, K, G = 40, 5, 8
    n = U * K
    rows, cols, vals = [], [], []
    user = np.repeat(np.arange(U), K)
    rows += list(user)
    cols += list(range(n))
    vals += list(rng.uniform(0.5, 2.0, n))
    for g in range(G):  # each coupling row touches about half of the columns, the last all of them
        js = np.flatnonzero(rng.random(n) < 0.5) if g < G - 1 else np.arange(n)
        rows += [U + g] * js.size
        cols += list(js)
        vals += list(rng.uniform(0.1, 1.0, js.size))
    t = n  # the common level: −1 in the first 30 user rows
    rows += list(range(30))
    cols += [t] * 30
    vals += [-1.0] * 30
    A = sp.csc_array((vals, (rows, cols)), shape=(U + G + 1, n + 1))
    A.sort_indices()
    rl = np.concatenate([np.zeros(30), rng.uniform(0.05, 0.1, U - 30), np.full(G, -INF), [-INF]])
    ru = np.concatenate([np.full(30, INF), rl[30:U].copy(), rng.uniform(2.0, 4.0, G), [INF]])
    ru[U - 1] = INF  # one floor that is not an equality
    rl[U + 1] = 0.3  # a ranged coupling row
    lb = np.zeros(n + 1)
    ub = np.full(n + 1, INF)
    ub[::7] = 0.8  # boxed columns
    lb[5] = ub[5] = 0.0  # a fixed column
    lb[t], ub[t] = -INF, INF  # t is free
    c = np.zeros(n + 1)
    c[t] = 1.0
    c[:n] = rng.uniform(0.0, 1e-3, n)  # a small preference among the columns
    sense = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    if not maximize:
        c = -c
    return {"A": A, "c": c, "lb": lb, "ub": ub, "rl": rl, "ru": ru, "sense": sense, "offset": 0.0}


def _highs(L: dict) -> tuple[float, str]:
    h = new_highs()
    h.passModel(highs_lp(L["A"], L["c"], L["lb"], L["ub"], L["rl"], L["ru"], L["sense"], L["offset"]))
    h.run()
    return float(h.getInfo().objective_function_value), h.modelStatusToString(h.getModelStatus())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("maximize", [True, False])
@pytest.mark.parametrize("start", ["mehrotra", "plain"])
def test_schur_ipm_matches_highs_and_certifies(seed: int, maximize: bool, start: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    L = _lp(seed, maximize)
    monkeypatch.setattr(S.SchurIPM, "START", start)
    ipm = S.SchurIPM(L)
    res = ipm.solve()
    assert res is not None and res["status"] == "optimal"
    assert ipm.stats["start"] == start  # Mehrotra's start exists on these LPs: it is what was tested
    assert ipm.stats["dense_columns"] == 1 and ipm.stats["coupling_rows"] == 8  # the free row dropped
    obj, msg = _highs(L)
    assert msg == "Optimal"
    assert abs(res["objective"] - obj) <= 1e-8 * max(1.0, abs(obj))
    # the multipliers in HiGHS's conventions certify the point (residuals from the arrays alone)
    sense = 1 if L["sense"] == highspy.ObjSense.kMinimize else -1
    k = kkt_residuals(L["c"], sp.csr_array(L["A"]), res["row_value"], L["rl"], L["ru"], res["x"], L["lb"],
                      L["ub"], res["row_dual"], res["col_dual"], sense)
    assert k["relative"] <= 1e-7, k


def test_a_start_it_cannot_leave_is_dropped_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    # every step counts as short: Mehrotra's start, then his primal point, are each left after
    # SLOW_START iterations, and the plain start (never left) still reaches HiGHS's optimum
    L = _lp(1, True)
    monkeypatch.setattr(S.SchurIPM, "SLOW_STEP", 2.0)
    ipm = S.SchurIPM(L)
    res = ipm.solve()
    assert res is not None and res["status"] == "optimal" and ipm.stats["start"] == "plain"
    assert res["iterations"] > 2 * S.SchurIPM.SLOW_START
    obj, _ = _highs(L)
    assert abs(res["objective"] - obj) <= 1e-8 * max(1.0, abs(obj))


def test_no_structure_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    L = _lp(0, True)
    monkeypatch.setattr(S, "MAX_COUPLING", 3)  # more coupling rows than allowed: not its shape
    assert S.SchurIPM(L).solve() is None


def _instance(seed: int):
    return link_instance(seed, 30, 6, limits=seed % 2 == 1, eligible=seed >= 2, prefix="schur")


def _totals(res) -> np.ndarray:
    return np.asarray(res.allocation).sum(axis=1)


def _same(a, b, tol: float = 1e-6) -> None:
    assert a.status.value == b.status.value == "optimal"
    A, B = np.asarray(a.allocation), np.asarray(b.allocation)
    assert np.abs(A - B).max() <= tol * max(1.0, float(np.abs(B).max()))


def _schur_statuses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Statuses of the SchurIPM solves from now on."""
    seen: list[str] = []
    orig = S.SchurIPM.solve

    def solve_(self, time_limit=None):
        res = orig(self, time_limit)
        seen.append(res["status"] if res is not None else "none")
        return res

    monkeypatch.setattr(S.SchurIPM, "solve", solve_)
    return seen


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mech", ["drfh", "tsf-er"])
def test_progressive_filling_same_allocation_with_and_without(seed: int, mech: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _instance(seed)
    seen = _schur_statuses(monkeypatch)
    a = solve(inst, mech, solver_options={"interior": "on", "schur": "on"})
    assert seen and set(seen) == {"optimal"}  # every round by the Schur-complement IPM
    seen.clear()
    b = solve(inst, mech, solver_options={"interior": "on", "schur": "off"})
    # 1e-6 as between interior and vertex rounds (test_interior): the routes' levels differ by each
    # solver's tolerance
    _same(a, b, 1e-6)
    assert np.allclose(_totals(a), _totals(b), rtol=1e-7, atol=1e-9)
    assert not seen
    rounds = a.details.get("rounds") or a.details.get("iterations")
    assert rounds and len(rounds) >= 2


def test_a_run_that_does_not_converge_falls_back_to_ipx(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _instance(1)
    b = solve(inst, "tsf-er", solver_options={"interior": "on", "schur": "off"})
    monkeypatch.setattr(S.SchurIPM, "MAX_ITER", 2)
    a = solve(inst, "tsf-er", solver_options={"interior": "on", "schur": "on"})
    _same(a, b)


def test_tiebreak_pool_from_the_interior_point_gives_the_same_vertex(monkeypatch: pytest.MonkeyPatch) -> None:
    # sift every tie-break (it does from SIFT_ABOVE columns): with interior rounds the model's point is
    # dense, so the pool comes from the tie-break LP's own interior point
    monkeypatch.setattr(canonical, "SIFT_ABOVE", 0)
    seen = _schur_statuses(monkeypatch)
    for seed in (0, 2):
        inst = _instance(seed)
        monkeypatch.setattr(canonical, "SIFT_ABOVE", 10**9)
        seen.clear()
        solve(inst, "tsf-er", solver_options={"interior": "on"})
        rounds_only = len(seen)
        monkeypatch.setattr(canonical, "SIFT_ABOVE", 0)
        seen.clear()
        a = solve(inst, "tsf-er", solver_options={"interior": "on"})
        assert len(seen) == rounds_only + 1  # one more: the tie-break LP's interior point
        monkeypatch.setattr(canonical, "SCHUR_START", False)
        b = solve(inst, "tsf-er", solver_options={"interior": "on"})
        monkeypatch.setattr(canonical, "SCHUR_START", True)
        _same(a, b, 1e-7)  # the same vertex, to the restricted LPs' feasibility tolerance


def test_bad_schur_value_names_the_option() -> None:
    from fairalloc.errors import ParameterError

    with pytest.raises(ParameterError, match="schur"):
        solve(_instance(0), "drfh", solver_options={"schur": "sometimes"})
