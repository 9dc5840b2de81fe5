"""POP-style partitioned solves: the split covers everything once, the combination is feasible for the
whole instance, parallel and in-process runs agree, and bad parameters are one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairalloc
from fairalloc.generate import random_instance
from fairalloc.partition import reweight, split
from fairalloc.status import Status
from fairalloc.verify.feasibility import feasibility

FLAGS = st.fixed_dictionaries({"placement": st.booleans(), "external": st.integers(0, 2),
                               "scoped": st.booleans(), "limits": st.booleans(), "weights": st.booleans()})


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4), flags=FLAGS)
def test_split_covers_each_user_and_server_once(seed, k, flags):
    inst = random_instance(seed, 12, 8, 3, **flags)
    parts = split(inst, k, seed)
    users = np.concatenate([p.users for p in parts])
    servers = np.concatenate([p.servers for p in parts])
    assert sorted(users) == list(range(inst.n_users))
    assert sorted(servers) == list(range(inst.n_servers))
    sizes = [len(p.servers) for p in parts]
    assert max(sizes) - min(sizes) <= 1 or len(parts) < k  # round-robin over the servers
    assert all(len(p.users) for p in parts)
    for p in parts:  # every user that can run somewhere can run in its part
        run = inst.runnable[np.ix_(p.users, p.servers)]
        assert (run.any(axis=1) | ~inst.runnable[p.users].any(axis=1)).all()
    for e, name in enumerate(inst.external):  # an external resource's capacity is divided, not duplicated
        total = sum(p.instance.external_capacity[p.instance.external.index(name)] for p in parts
                    if name in p.instance.external)
        np.testing.assert_allclose(total, inst.external_capacity[e], rtol=1e-12)
    again = split(inst, k, seed)
    assert all((a.users == b.users).all() and (a.servers == b.servers).all() for a, b in zip(parts, again))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), flags=FLAGS, mech=st.sampled_from(["tsf-er", "drfh", "cru", "mnw"]))
def test_combined_allocation_is_feasible_and_converged(seed, flags, mech):
    inst = random_instance(seed, 10, 6, 3, **flags)
    r = fairalloc.solve(inst, mech, partitions=2, partition_seed=seed)
    assert r.status == Status.CONVERGED  # never "optimal": it is not the mechanism's allocation
    assert feasibility(inst, r.allocation)["holds"]
    assert r.details["partition"]["k"] == 2 and len(r.details["partition"]["parts"]) == 2
    # each part's allocation is that mechanism's allocation of the part (reweighted: whole-instance shares)
    for p in reweight(inst, split(inst, 2, seed), mech):
        alone = fairalloc.solve(p.instance, mech)
        np.testing.assert_allclose(r.tasks[p.users], alone.tasks, rtol=1e-6, atol=1e-9)


def test_one_partition_is_the_exact_solve(examples):
    a = fairalloc.solve(examples / "psdsf-fig1.yaml", "drfh", partitions=1)
    b = fairalloc.solve(examples / "psdsf-fig1.yaml", "drfh")
    assert a.status == b.status == Status.OPTIMAL and np.allclose(a.allocation, b.allocation)


def test_worker_processes_give_the_in_process_answer():
    inst = random_instance(7, 24, 8, 3, placement=True, external=1)
    here = fairalloc.solve(inst, "tsf-er", partitions=4)
    pool = fairalloc.solve(inst, "tsf-er", partitions=4, partition_workers=2)
    assert pool.status == Status.CONVERGED
    np.testing.assert_allclose(pool.allocation, here.allocation, rtol=1e-9, atol=1e-12)


def test_cli_and_bad_parameters(cli, examples):
    f = str(examples / "psdsf-fig1.yaml")
    p = cli("solve", f, "-m", "tsf", "-p", "partitions=2")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "converged" and doc["details"]["partition"]["k"] == 2
    for args, words in [(("-p", "partitions=0"), "partitions = 0"), (("-p", "partitions=3"), "at most"),
                        (("-p", "partitions=two"), "partitions = 'two'"),
                        (("-p", "partition_seed=1"), "only with -p partitions")]:
        q = cli("solve", f, "-m", "tsf", *args)
        assert q.returncode == 2 and words in q.stderr and len(q.stderr.strip().splitlines()) == 1, q.stderr


@pytest.mark.parametrize("flags", [{"time_shared": True}, {"limits": True, "weights": True}])
def test_time_shared_and_limited_instances(flags):
    inst = random_instance(3, 9, 6, 2, **flags)
    r = fairalloc.solve(inst, "mnw" if flags.get("time_shared") else "tsf", partitions=3)
    assert r.ok and feasibility(inst, r.allocation)["holds"]


@pytest.mark.parametrize("mech", ["tsf-er", "tsf", "drfh"])
def test_parts_share_in_whole_instance_units(mech):
    """Reweighted parts equalise the whole instance's shares X/(φν): within a part every user blocked by
    the part's link alone ends at one level of X/(φν) with ν of the whole instance (not of the part)."""
    from benchmarks._workload import scaling_instance
    from fairalloc.partition import NORMALISERS

    inst = scaling_instance(64, 8)
    nu = np.asarray(NORMALISERS[mech](inst), float)
    parts = reweight(inst, split(inst, 2), mech)
    for p in parts:
        own = np.asarray(NORMALISERS[mech](p.instance), float)
        # the part's own share X/(φ' ν_part) is the whole instance's X/(φ ν) up to one factor
        ratio = (p.instance.weight * own) / (inst.weight[p.users] * nu[p.users])
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    r = fairalloc.solve(inst, mech, partitions=2)
    plain = split(inst, 2)
    assert r.details["partition"]["reweighted"] is True
    # on this workload the smallest whole-instance share improves over solving the parts as drawn
    x_plain = np.zeros_like(r.x)
    for p in plain:
        x_plain[np.ix_(p.users, p.servers)] = fairalloc.solve(p.instance, mech).x
    share = lambda x: (x.sum(axis=1) / (inst.weight * nu)).min()  # noqa: E731
    assert share(r.x) >= share(x_plain) * (1 - 1e-9)
