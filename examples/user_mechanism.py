"""A mechanism written outside fairalloc: the weighted leximin of each user's *best-server share*,
its tasks over the tasks it could run alone on its best single server, X_n / (φ_n max_i γ[n,i]).

    fairalloc solve examples/psdsf-fig2.yaml -m best-server-share --import examples/user_mechanism.py
"""

import fairalloc
from fairalloc.modelling import allocation, leximin_model, progressive_filling


def build(inst):
    """χ, share[n] = X_n / (φ_n max_i γ[n,i]) and the max-min LP."""
    best = inst.gamma.max(axis=1)  # tasks on the best single server, alone
    return leximin_model(inst, 1.0 / (inst.weight * best), "best-server-share",
                         doc="X_n / (phi_n max_i gamma[n,i])")


@fairalloc.mechanism("best-server-share", build=build, needs_demands=False)
def solve(inst, session):
    """weighted lexicographic max-min of X_n / (φ_n max_i γ[n,i]) over χ"""
    m = build(inst)
    mm = progressive_filling(m, session, m.share)
    x = allocation(m.chi, inst)
    return fairalloc.Solution(x, mm.status, mm.message, details={"rounds": mm.rounds})
