"""The site policy's filing of waiting jobs (simulation/simulator/groups.py): the orders kept
as jobs come and go (each queue and rank's groups by their first job, each queue's shapes by
the CPUs they ask) are, after every pass, what they would be if worked out from the groups
anew, on the random sites of the equivalence tests (moving levels, requeues after
preemption and node failures, refusals, leases)."""

from __future__ import annotations

import dataclasses

import pytest

from simulation.simulator import engine
from simulation.simulator.engine import simulate
from simulation.simulator.state import Sim
from simulation.simulator.switchyard import SitePolicy
from simulation.simulator.traces import read_swf, swf_site
from tests.unit.simulation.test_equivalence import TRACES, _site_and_jobs


def _orders_anew(policy: SitePolicy, pool: str) -> tuple[dict, dict, dict]:
    seq = policy.seq
    firsts: dict[tuple, list] = {}
    first_seq: dict[tuple, int] = {}
    needs: dict[str, list] = {}
    for shape, ranks in policy.groups.get(pool, {}).items():
        needs.setdefault(shape[0], []).append((shape[1], policy.shape_number[shape], shape))
        for rank, members in ranks.items():
            first = min(seq[key] for key in members)
            first_seq[(pool, shape, rank)] = first
            firsts.setdefault((shape[0], rank), []).append((first, shape))
    return (
        {k: sorted(v) for k, v in firsts.items()},
        first_seq,
        {k: sorted(v) for k, v in needs.items()},
    )


class Checked(SitePolicy):
    checked = 0

    def _pass(self, pool: str, now: float) -> None:
        super()._pass(pool, now)
        firsts, first_seq, needs = _orders_anew(self, pool)
        assert self.firsts.get(pool, {}) == firsts
        kept = {k: v for k, v in self.first_seq.items() if k[0] == pool}
        assert kept == first_seq
        assert {q: v for q, v in self.needs.get(pool, {}).items() if v} == needs
        Checked.checked += 1


@pytest.mark.parametrize("seed", [3, 17, 29, 41, 58, 77])
def test_the_orders_kept_as_jobs_come_and_go_are_the_orders_worked_out_anew(seed, monkeypatch):
    jobs, site, failures = _site_and_jobs(seed)
    monkeypatch.setattr(engine, "SitePolicy", Checked)
    before = Checked.checked
    run = simulate(jobs, site, "switchyard", failures=failures)
    assert Checked.checked - before > 20, "too few passes to tell"
    assert run.outcomes, "nothing ran"


def test_a_group_a_level_change_left_out_of_order_keeps_its_first_job_as_its_jobs_leave():
    """Jobs moved back into their group by level changes leave it out of submit order (j3,
    j2, j0); when its first job (j0) leaves, the next first is the lowest submit order of
    the rest (j2), not the first filed (j3)."""
    jobs = read_swf(TRACES / "lublin_256.swf", limit=400)
    one = next(j for j in jobs if j.spec.resources.cpus == 1)
    same = [dataclasses.replace(one, key=f"j{i}") for i in range(4)]
    sim = Sim(same, swf_site(), "switchyard")
    policy = SitePolicy(sim)
    for job in same:
        policy._ready(job, 0.0)
    pool = policy.where["j0"][0]

    def move(job, by: int) -> None:  # what a level change does (SitePolicy.event)
        policy._unbucket(job)
        policy.level[job.key] += by
        policy._bucket(job)

    for job in same[:3]:
        move(job, +1)
    move(same[2], -1)
    move(same[0], -1)
    policy._unbucket(same[1])
    group = policy.where["j0"]
    assert list(policy.groups[pool][group[1]][group[2]]) == ["j3", "j2", "j0"]
    assert group in policy.unsorted
    policy._unbucket(same[0])
    assert policy.first_seq[group] == policy.seq["j2"]
    firsts, first_seq, _ = _orders_anew(policy, pool)
    assert policy.firsts[pool] == firsts
    assert {k: v for k, v in policy.first_seq.items() if k[0] == pool} == first_seq
