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
