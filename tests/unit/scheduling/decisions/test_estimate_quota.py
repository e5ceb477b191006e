"""The start estimate of a task its quota holds: when its project's holders free enough
quota (by their walltimes), then the pool replay from then. Numbers checked by hand."""

from __future__ import annotations

from scheduling.decisions.estimate import Ahead, Busy, estimate_start
from scheduling.decisions.estimate_quota import Held, Holder, Release, quota_releases
from scheduling.decisions.quota import Ask, QuotaRule, Usage
from scheduling.decisions.types import NodeAllocation
from scheduling.sites import default_site
from scheduling.spec import Resources, TaskSpec

SITE = default_site()
GPU32 = QuotaRule("materials", "training", "gpus", 32, id=1)
TWO_TASKS = QuotaRule("materials", "training", "tasks", 2, id=2)


def ask(gpus: int = 8, user: str = "alice", project: str = "materials") -> Ask:
    return Ask(project=project, queue="training", user=user, gpus=gpus, cpus=8)


def test_a_held_task_is_let_in_when_enough_holders_reach_their_walltime():
    # 32/32 GPUs held: 16 until 1000, 8 until 400, 8 until 2500. Asking 16 needs 16 free:
    # at 400 only 8 are free (24 held), at 1000 24 are free.
    holders = [
        Holder(1, ask(16), ends_at=1000.0),
        Holder(2, ask(8), ends_at=400.0),
        Holder(3, ask(8), ends_at=2500.0),
    ]
    [release] = quota_releases([GPU32], holders, [Held(9, ask(16), 3600)], now=0.0).values()
    assert release == Release(1000.0, (holders[0],))


def test_a_held_task_with_room_now_is_let_in_now():
    holders = [Holder(1, ask(16), ends_at=1000.0)]
    releases = quota_releases([GPU32], holders, [Held(9, ask(16), 60)], now=5.0)
    assert releases == {9: Release(5.0, ())}


def test_held_tasks_ahead_take_the_room_first_and_hold_it_for_their_walltime():
    # Two running tasks, two held (one each): the first held is let in at 100 (task 1's end)
    # and holds until 100 + 500 = 600; task 2 ends at 900, so the second is let in at 600.
    holders = [Holder(1, ask(), ends_at=100.0), Holder(2, ask(), ends_at=900.0)]
    held = [Held(7, ask(), 500), Held(8, ask(), 500)]
    releases = quota_releases([TWO_TASKS], holders, held, now=0.0)
    assert releases[7] == Release(100.0, (holders[0],))
    assert releases[8] == Release(600.0, (Holder(7, ask(), 600.0),))


def test_a_smaller_task_behind_is_let_in_first_where_it_fits_as_the_engine_does():
    # 24/32 held until 1000: a 16-GPU task waits for 1000, the 8-GPU task behind it fits now.
    holders = [Holder(1, ask(24), ends_at=1000.0)]
    held = [Held(7, ask(16), 3600), Held(8, ask(8), 3600)]
    releases = quota_releases([GPU32], holders, held, now=0.0)
    assert releases[8] == Release(0.0, ())
    # 24 + 8 held; at 1000 the 24 end: 8 held, 16 more fit.
    assert releases[7] == Release(1000.0, (holders[0],))


def test_only_the_holders_of_the_same_scope_count():
    other = [Holder(1, ask(32, project="physics"), ends_at=None)]
    releases = quota_releases([GPU32], other, [Held(9, ask(32), 3600)], now=0.0)
    assert releases == {9: Release(0.0, ())}


def test_a_user_quota_waits_for_that_users_own_holders():
    per_user = QuotaRule("materials", "training", "gpus", 8, user="alice", id=3)
    holders = [Holder(1, ask(8, user="bob"), ends_at=50.0), Holder(2, ask(8), ends_at=700.0)]
    releases = quota_releases([GPU32, per_user], holders, [Held(9, ask(8), 60)], now=0.0)
    assert releases == {9: Release(700.0, (holders[1],))}


def test_no_release_when_the_room_depends_on_work_without_a_walltime():
    holders = [Holder(1, ask(16), ends_at=None), Holder(2, ask(16), ends_at=400.0)]
    releases = quota_releases([GPU32], holders, [Held(9, ask(32), 3600)], now=0.0)
    assert releases == {9: None}


def test_a_spent_budget_holds_it_past_every_holders_end():
    budget = QuotaRule("materials", "training", "gpu_hours", 100, id=4)
    spent = {("materials", "training", None): Usage(gpu_hours=130.0)}
    holders = [Holder(1, ask(8), ends_at=400.0)]
    releases = quota_releases([budget], holders, [Held(9, ask(8), 60)], now=0.0, spent=spent)
    assert releases == {9: None}


def test_the_pool_replay_starts_it_no_sooner_than_its_release():
    queue = SITE.queues_by_name()["hpc"]
    nodes = SITE.nodes_by_pool()["cpu-hpc"]
    spec = TaskSpec("t", "p", Resources(cpus=64), walltime_s=3600)
    # The pool is free: it starts at its release.
    assert estimate_start(spec, queue, nodes, [], [], now=0.0, not_before=1000.0) == 1000.0
    # Every node busy until 500 + 600 i: free ones exist by 1000, so its release decides.
    busy = [
        Busy(NodeAllocation(node=n.name, cpus=64, memory_mib=1024), ends_at=500.0 + 600 * i)
        for i, n in enumerate(nodes)
    ]
    assert estimate_start(spec, queue, nodes, busy, [], now=0.0, not_before=1000.0) == 1000.0
    # Four like it ahead, free to start now, take the nodes freed at 500, 1100, 1700, 2300;
    # it gets the fifth node, free at 2900.
    ahead = [Ahead(spec, queue)] * 4
    assert estimate_start(spec, queue, nodes, busy, ahead, now=0.0, not_before=1000.0) == 2900.0
    # Two of them held until 3000 themselves: the two free to start take the nodes freed at
    # 500 and 1100, and it gets the one freed at 1700.
    mixed = [Ahead(spec, queue), Ahead(spec, queue)] + [Ahead(spec, queue, 3000.0)] * 2
    assert estimate_start(spec, queue, nodes, busy, mixed, now=0.0, not_before=1000.0) == 1700.0
