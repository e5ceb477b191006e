"""The simulator's schedules, checked by hand on small cases, and its purity."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from scheduling.decisions.levels import HIGH, LOW, LevelRule
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.sites.default import default_site
from scheduling.sites.types import LeaseTemplate, QuotaTemplate
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.criteria import format_table, validation_day_report
from simulation.simulator.engine import simulate
from simulation.simulator.metrics import summary
from simulation.simulator.model import AGENT_STARTUP_S, Failure, SimJob, Site
from simulation.simulator.workloads import launch_mix, site_model
from tests.conftest import ROOT

ONE_NODE = Site(
    pools={"p": (NodeView("n1", cpus=4, memory_mib=16384),)},
    queues={"q": QueuePolicy(name="q", pool="p", task_types=())},
)


def _job(
    key, submit, cpus, runtime, walltime, *, kind="hpc-simulation", queue="q", gpus=0, project="p"
) -> SimJob:
    spec = TaskSpec(
        name=key,
        project=project,
        resources=Resources(cpus=cpus, gpus=gpus, memory_mib=1024),
        walltime_s=walltime,
    )
    return SimJob(key, spec, kind, queue, submit, runtime)


# A (2 CPUs, 10 s) runs; B wants the whole node; C is short, D is long.
CASE = [
    _job("A", 0, 2, 10, 10),
    _job("B", 1, 4, 5, 5),
    _job("C", 2, 2, 5, 5),
    _job("D", 3, 2, 20, 20),
]


def _schedule(policy: str, jobs=CASE, site=ONE_NODE, **kw) -> dict[str, tuple[float, float]]:
    run = simulate(jobs, site, policy, **kw)
    assert not run.never
    return {k: (o.start, o.end) for k, o in sorted(run.outcomes.items())}


def test_easy_backfill_matches_the_hand_checked_schedule():
    # B is the head from t=1 and cannot start before A ends: its reservation is t=10. C fits
    # now and ends (walltime 5) at 7 <= 10: backfilled at 2. D would end at 23 > 10: it waits,
    # and starts when B ends.
    assert _schedule("easy") == {"A": (0, 10), "B": (10, 15), "C": (2, 7), "D": (15, 35)}


def test_easy_backfills_past_the_reservation_into_room_the_head_leaves():
    # Three 4-CPU nodes: A and A2 fill n1 and n2, A3 takes 3 CPUs of n3, all until 10. B, the
    # head, needs 10 CPUs: reserved at 10, spread as place() spreads it (4 + 4 + 2), which
    # leaves 2 CPUs of n3 free then. E (1 CPU, 100 s) fits now in n3's free CPU, which B does
    # not need at 10: it starts now although it ends long after the reservation.
    site = Site(
        pools={"p": tuple(NodeView(f"n{i}", cpus=4, memory_mib=16384) for i in (1, 2, 3))},
        queues={"q": QueuePolicy(name="q", pool="p", task_types=())},
    )
    jobs = [
        _job("A", 0, 4, 10, 10),
        _job("A2", 0, 4, 10, 10),
        _job("A3", 0, 3, 10, 10),
        _job("B", 1, 10, 5, 5),
        _job("E", 2, 1, 100, 100),
    ]
    easy = _schedule("easy", jobs, site)
    assert easy["B"] == (10, 15)
    assert easy["E"] == (2, 102)
    assert _schedule("fifo", jobs, site)["E"] == (10, 110)  # FIFO: behind B, beside it at 10


def test_fifo_lets_nobody_pass_the_head():
    assert _schedule("fifo") == {"A": (0, 10), "B": (10, 15), "C": (15, 20), "D": (15, 35)}


def test_the_switchyard_policy_reserves_room_for_the_job_that_does_not_fit():
    # schedule_pass (what the local backend runs) gives B, the whole-node job that does not
    # fit at 1, a reservation at 10 (A's walltime): C (ends at 7) passes it, D (would end at
    # 23) does not - as EASY decides (docs/simulation.md).
    assert _schedule("switchyard") == {"A": (0, 10), "B": (10, 15), "C": (2, 7), "D": (15, 35)}


def test_a_job_that_can_never_fit_is_reported_not_run():
    for policy in ("fifo", "easy", "switchyard"):
        run = simulate([_job("X", 0, 8, 5, 5)], ONE_NODE, policy)
        assert "X" in run.never and not run.outcomes


PREEMPTIBLE = Site(
    pools={"p": (NodeView("n1", cpus=4, memory_mib=16384),)},
    queues={"q": QueuePolicy(name="q", pool="p", task_types=(), preemptible=True)},
    level_rules=(LevelRule("agent", start=HIGH), LevelRule("ai-inference", start=LOW)),
)


def test_a_higher_level_task_preempts_after_the_delay_and_the_victim_runs_again():
    jobs = [
        _job("inf", 0, 4, 100, 200, kind="ai-inference"),
        _job("agent", 5, 2, 10, 60, kind="agent"),
    ]
    run = simulate(jobs, PREEMPTIBLE, "switchyard")
    # The agent waits the preempt delay (10 s), then the inference job is stopped for it and
    # starts again from scratch when the agent is done.
    assert (run.outcomes["agent"].start, run.outcomes["agent"].end) == (15, 25)
    assert (run.outcomes["inf"].start, run.outcomes["inf"].attempts) == (25, 2)
    assert [(s.key, s.start, s.end, s.ended) for s in run.spans if s.ended != "done"] == [
        ("inf", 0, 15, "preempted")
    ]
    assert summary(run, PREEMPTIBLE.pools)["types"]["ai-inference"]["preempted"] == 1
    # Training and HPC are never preempted, whatever the queue says.
    jobs[0] = _job("inf", 0, 4, 100, 200, kind="hpc-simulation")
    run = simulate(jobs, PREEMPTIBLE, "switchyard")
    assert run.outcomes["agent"].start == 100 and run.outcomes["inf"].attempts == 1


def test_a_quota_holds_work_until_its_projects_running_work_ends():
    site = Site(
        pools={"g": (NodeView("g1", cpus=8, memory_mib=16384, gpus=8),)},
        queues={"t": QueuePolicy(name="t", pool="g", task_types=())},
        quotas=(QuotaTemplate("t", "gpus", 4),),
    )
    jobs = [
        _job("a", 0, 1, 50, 60, queue="t", gpus=4),
        _job("b", 1, 1, 50, 60, queue="t", gpus=4),
        _job("c", 2, 1, 50, 60, queue="t", gpus=4, project="other"),
    ]
    got = _schedule("switchyard", jobs, site)
    # b waits for a (same project, 4 GPUs at most) though the node has room; c does not.
    assert got == {"a": (0, 50), "b": (50, 100), "c": (2, 52)}
    assert simulate(jobs, site, "switchyard", record_room=True).outcomes["b"].room_at_submit is True


def test_a_daily_lease_lends_idle_nodes_and_takes_them_back():
    site = Site(
        pools={
            "inf": (NodeView("i1", cpus=4, memory_mib=16384),),
            "train": (NodeView("t1", cpus=4, memory_mib=16384),),
        },
        queues={
            "inf": QueuePolicy(name="inf", pool="inf", task_types=()),
            "train": QueuePolicy(name="train", pool="train", task_types=()),
        },
        leases=(LeaseTemplate("inf", "train", 1, "08:01", 3600),),
        start_minute=8 * 60,
    )
    jobs = [
        _job("t-a", 0, 4, 1000, 1000, queue="train"),
        _job("t-b", 1, 4, 100, 100, queue="train"),
        _job("t-c", 2, 4, 5000, 5000, queue="train"),
    ]
    run = simulate(jobs, site, "switchyard")
    # At 08:01 (t=60) i1 is lent until t=3660: t-b (walltime 100) fits before the lease ends
    # and runs there; t-c (walltime 5000) would not, so it waits for t1.
    assert run.leases == [(60.0, 3660.0, ("i1",))]
    assert (run.outcomes["t-b"].start, run.outcomes["t-b"].allocations[0].node) == (60, "i1")
    assert run.outcomes["t-c"].start == 1000


def test_a_failed_node_loses_its_work_which_starts_again_elsewhere():
    site = Site(
        pools={
            "p": (
                NodeView("n1", cpus=4, memory_mib=16384),
                NodeView("n2", cpus=4, memory_mib=16384),
            )
        },
        queues={"q": QueuePolicy(name="q", pool="p", task_types=())},
    )
    jobs = [_job("a", 0, 4, 100, 100), _job("b", 0, 4, 30, 30)]
    for policy in ("fifo", "easy", "switchyard"):
        run = simulate(jobs, site, policy, failures=[Failure("n1", 10, 1000)])
        lost = [s for s in run.spans if s.ended == "lost"]
        assert len(lost) == 1 and lost[0].end == 10, policy
        again = run.outcomes[lost[0].key]
        assert again.attempts == 2 and again.allocations[0].node == "n2", policy


def test_the_simulator_imports_no_django_and_uses_the_engines_decisions():
    code = (
        "import sys; import simulation.simulator.engine, simulation.simulator.runner; "
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), "
        "sorted(m for m in sys.modules if m.startswith('django'))[:5]; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_simulator_calls_the_functions_the_live_engine_calls():
    from scheduling.backends.local import backend as local
    from scheduling.backends.local import crosspool as local_crosspool
    from scheduling.decisions import borrow
    from scheduling.engine import admission, capacity
    from simulation.simulator import baselines, crosspool, leases, switchyard

    assert switchyard.schedule_pass is local_crosspool.schedule_pass
    # Backfill across pools: the local backend's borrow_after is borrow_pass after one pass.
    assert crosspool.borrow_pass is borrow.borrow_pass
    assert local_crosspool.borrow_after is borrow.borrow_after
    assert leases.lend is local.lend
    assert switchyard.whom_to_preempt is capacity.whom_to_preempt
    assert switchyard.admit is admission.admit
    assert switchyard.place is baselines.place is capacity.place


def test_the_launch_mix_on_the_idle_default_site_starts_at_once_under_every_policy():
    site = site_model(default_site())
    jobs = launch_mix(seed=7)
    assert [j.type for j in jobs].count("agent") == 50 and len(jobs) == 53
    for policy in ("fifo", "easy", "switchyard"):
        result = summary(simulate(jobs, site, policy), site.pools)
        assert result["never"] == 0
        assert {k: v["n"] for k, v in result["types"].items()} == {
            "agent": 50,
            "ai-training": 2,
            "hpc-simulation": 1,
        }
        # 40 nodes hold the whole mix: nothing waits (the validation day adds the load) but
        # an agent's start-up, as the local backend measured it.
        waits = {k: v["mean_wait_s"] for k, v in result["types"].items()}
        assert waits == {
            "agent": pytest.approx(AGENT_STARTUP_S),
            "ai-training": 0,
            "hpc-simulation": 0,
        }
        assert result["utilisation"]["gpu-train"]["gpu"] > 0


def test_a_training_that_never_ran_fails_its_criterion_row_rather_than_drop_out():
    site = site_model(default_site())
    # Training nodes too small for any training of the day: each is refused, never runs.
    small = tuple(dataclasses.replace(n, gpus=1) for n in site.pools["gpu-train"])
    report = validation_day_report(
        1, site=dataclasses.replace(site, pools={**site.pools, "gpu-train": small})
    )
    row = next(r for r in report["criteria"] if r["criterion"].startswith("training wait"))
    assert row["values"]["switchyard"] is None and row["passed"] is False
    assert report["summaries"]["switchyard"]["never_by_type"]["ai-training"] > 0
    assert "| never ran |" in format_table(report)
