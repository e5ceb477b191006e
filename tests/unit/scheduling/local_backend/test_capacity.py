"""The local backend with real processes: idempotency, capacity, placement, leases."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path

from scheduling.backends.base import (
    BackendError,
    Job,
    JobState,
    SubmitRequest,
)
from scheduling.backends.local import LocalBackend
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.spec import Resources, TaskSpec
from tests.unit.scheduling.local_backend.helpers import (
    WHOLE,
    finished,
    request,
    running,
    state_file,
)

# -- idempotency and capacity -----------------------------------------------------------


def test_submit_twice_makes_one_job_and_one_process(make):
    first, second = make(), make()  # two worker processes sharing the root
    counter = Path(first.root) / "jobs" / "twice-1" / "work" / "count"
    req = request("twice-1", ["sh", "-c", "echo run >> count"])
    results: list[Job] = []
    threads = [
        threading.Thread(target=lambda b=b: results.append(b.submit(req)))
        for b in (first, second) * 4
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {j.backend_id for j in results} == {"twice-1"}
    assert finished(first, "twice-1").state is JobState.SUCCEEDED
    assert first.submit(req).state is JobState.SUCCEEDED  # still the same, finished job
    assert counter.read_text() == "run\n"
    assert first.find("twice-1") == second.find("twice-1")
    assert os.listdir(Path(first.root) / "jobs") == ["twice-1"]


def test_whole_node_jobs_wait_for_the_node_then_start_on_poll(make):
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    backend.submit(request("whole-a", ["sleep", "30"], queue=WHOLE))
    assert running(backend, "whole-a").state is JobState.RUNNING
    job = backend.submit(request("whole-b", ["true"], queue=WHOLE, cpus=1))
    assert job.state is JobState.PENDING
    assert "waiting for resources" in job.reason
    assert backend.poll(["whole-b"])["whole-b"].state is JobState.PENDING

    backend.cancel("whole-a")
    assert finished(backend, "whole-a").state is JobState.CANCELLED
    assert finished(backend, "whole-b").state is JobState.SUCCEEDED


def test_started_waits_for_placed_jobs_only_and_returns_once_they_started(make):
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    backend.submit(request("start-a", ["sleep", "30"], queue=WHOLE))
    backend.submit(request("start-b", ["true"], queue=WHOLE))  # waits for the node
    began = time.monotonic()
    found = backend.started(["start-a", "start-b", "no-such-job"], within_s=20)
    assert time.monotonic() - began < 10, "it returned when start-a started, not at the end"
    assert list(found) == ["start-a"] and found["start-a"].state is JobState.RUNNING
    assert backend.started(["start-b"], within_s=20) == {}  # pending: not waited for
    backend.cancel("start-a")
    assert finished(backend, "start-b").state is JobState.SUCCEEDED


def test_packing_respects_cpus_and_gpus(make):
    backend = make()  # 4 cpus, 2 GPUs
    for key in ("pack-a", "pack-b"):
        backend.submit(request(key, ["sleep", "30"], cpus=2, gpus=1))
        assert running(backend, key).state is JobState.RUNNING
    # GPUs are gone: a GPU job waits; and so does a CPU job (all 4 cpus are allocated).
    assert backend.submit(request("pack-gpu", ["true"], gpus=1)).state is JobState.PENDING
    assert backend.submit(request("pack-cpu", ["true"], cpus=1)).state is JobState.PENDING
    [node] = backend.nodes()
    assert (node.free_cpus, node.free_gpus) == (0, ())

    backend.cancel("pack-a")
    assert finished(backend, "pack-gpu").state is JobState.SUCCEEDED
    assert finished(backend, "pack-cpu").state is JobState.SUCCEEDED
    assert backend.poll(["pack-b"])["pack-b"].state is JobState.RUNNING


def test_a_jobs_placement_is_kept_in_its_state_and_an_older_alloc_file_still_counts(make):
    backend = make()  # 4 cpus, 2 GPUs
    backend.submit(request("placed-a", ["sleep", "30"], cpus=2, gpus=1))
    running(backend, "placed-a")
    jobdir = Path(backend.root) / "jobs" / "placed-a"
    assert not (jobdir / "alloc.json").exists()
    [allocation] = state_file(backend, "placed-a")["allocations"]
    assert (allocation["node"], allocation["cpus"], len(allocation["gpu_indices"])) == ("n1", 2, 1)

    # A job started by an older version: its placement in alloc.json, not in its state.
    path = jobdir / "state.json"
    state = json.loads(path.read_text())
    (jobdir / "alloc.json").write_text(json.dumps({"allocations": state.pop("allocations")}))
    path.write_text(json.dumps(state))
    fresh = make()  # another process: nothing cached
    [node] = fresh.nodes()
    assert (node.free_cpus, len(node.free_gpus)) == (2, 1)
    backend.cancel("placed-a")


def test_a_stored_job_is_pending_from_its_request_alone(make):
    backend = make()
    store = backend.store
    with store.locked():
        assert store.create(dataclasses.replace(request("stored-1", ["true"]), priority=7))
    jobdir = Path(backend.root) / "jobs" / "stored-1"
    assert sorted(p.name for p in jobdir.iterdir()) == ["request.json"]  # one file
    state = store.read_state("stored-1")
    assert (state["state"], state["seq"]) == ("pending", 1) and state["submitted_at"]
    assert backend.find("stored-1").state is JobState.PENDING
    assert store.priority("stored-1") == 7  # the request's, until set_priority
    backend.set_priority("stored-1", 9)
    assert store.priority("stored-1") == 9
    assert finished(backend, "stored-1").state is JobState.SUCCEEDED  # the next pass runs it


def test_jobs_are_numbered_in_submission_order_after_an_older_counter(make):
    backend = make()
    (Path(backend.root) / "seq").write_text("41")  # as an older version wrote it
    for key in ("order-a", "order-b"):
        backend.submit(request(key, ["true"]))
    assert [state_file(backend, k)["seq"] for k in ("order-a", "order-b")] == [42, 43]
    assert (Path(backend.root) / "seq").read_text() == "00000000000000000043"


def test_cpu_oversubscription_of_the_queue_is_honoured(make):
    agents = QueuePolicy(name="agents", pool="p", task_types=(), cpu_oversubscription=4)
    backend = make([NodeView("n1", cpus=1, memory_mib=16384)])
    for i in range(4):
        backend.submit(request(f"over-{i}", ["sleep", "30"], queue=agents))
    for i in range(4):
        assert running(backend, f"over-{i}").state is JobState.RUNNING
    assert backend.submit(request("over-4", ["true"], queue=agents)).state is JobState.PENDING


def test_a_blocked_job_does_not_block_smaller_later_ones(make):
    backend = make()
    backend.submit(request("fifo-a", ["sleep", "30"], cpus=3))
    assert running(backend, "fifo-a").state is JobState.RUNNING
    assert backend.submit(request("fifo-big", ["true"], cpus=2)).state is JobState.PENDING
    backend.submit(request("fifo-small", ["true"], cpus=1))
    assert finished(backend, "fifo-small").state is JobState.SUCCEEDED
    assert backend.poll(["fifo-big"])["fifo-big"].state is JobState.PENDING


def test_a_blocked_job_gets_a_reservation_that_only_shorter_work_may_pass(make):
    # The node's 4 CPUs: A holds 3 until its walltime (60 s); the 4-CPU job is reserved the
    # whole node from then, the next one that cannot start a CPU after it (two reservations
    # per pool). One CPU is free now: a job whose walltime ends before the reservations
    # takes it; one that would outlast them waits, though the CPU is free.
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    backend.submit(request("res-a", ["sleep", "30"], cpus=3, walltime_s=60))
    assert running(backend, "res-a").state is JobState.RUNNING
    big = backend.submit(request("res-big", ["true"], cpus=4, walltime_s=60))
    assert big.state is JobState.PENDING
    assert big.reason.startswith("reserved from ") and "on n1" in big.reason
    long = backend.submit(request("res-long", ["sleep", "30"], walltime_s=3600))
    assert long.state is JobState.PENDING
    assert long.reason.startswith("reserved from ") and long.reason != big.reason
    short = backend.submit(request("res-short", ["true"], walltime_s=10))
    assert finished(backend, "res-short").state is JobState.SUCCEEDED, short.reason
    assert backend.poll(["res-long"])["res-long"].state is JobState.PENDING


def test_higher_priority_starts_first(make):
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    backend.submit(request("prio-a", ["sleep", "30"], queue=WHOLE))
    assert running(backend, "prio-a").state is JobState.RUNNING
    backend.submit(request("prio-b", ["sleep", "30"], queue=WHOLE))
    backend.submit(request("prio-c", ["sleep", "30"], queue=WHOLE))
    backend.set_priority("prio-c", 10)
    backend.cancel("prio-a")
    assert running(backend, "prio-c").state is JobState.RUNNING
    assert backend.poll(["prio-b"])["prio-b"].state is JobState.PENDING


def test_a_request_that_can_never_fit_fails_at_once(make):
    backend = make()
    job = backend.submit(request("huge-1", ["true"], cpus=64))
    assert job.state is JobState.FAILED
    assert "can ever hold" in job.reason and "cpus=64" in job.reason


def test_concurrent_workers_never_double_book(make):
    backends = [make([NodeView("n1", cpus=4, memory_mib=16384)]) for _ in range(3)]
    threads = [
        threading.Thread(
            target=lambda i=i: backends[i % 3].submit(
                request(f"race-{i}", ["sleep", "30"], queue=WHOLE)
            )
        )
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = [f"race-{i}" for i in range(6)]
    states = [j.state for j in backends[0].poll(keys).values()]
    assert states.count(JobState.PENDING) >= 5
    started = [k for k in keys if state_file(backends[0], k)["state"] in ("starting", "running")]
    assert len(started) == 1


def test_drain_and_resume(make):
    backend = make()
    backend.drain("n1", "fan failure")
    assert [n.available for n in backend.nodes()] == [False]
    job = backend.submit(request("drained-1", ["true"]))
    assert job.state is JobState.PENDING
    assert "drained" in job.reason
    backend.resume("n1")
    assert [n.available for n in backend.nodes()] == [True]
    assert finished(backend, "drained-1").state is JobState.SUCCEEDED


def test_a_lease_lends_nodes_to_another_pool_for_work_that_ends_in_time(job_root):
    from scheduling.backends.base import LeaseView

    train = QueuePolicy(name="training", pool="train", task_types=())
    inventory = {
        "inf": [NodeView(name="g1", cpus=4, memory_mib=16384, gpus=2)],
        "train": [NodeView(name="t1", cpus=4, memory_mib=16384, gpus=2, available=False)],
    }
    backend = LocalBackend(
        "local-lease",
        root=str(job_root / "lease"),
        node_source=lambda alias: inventory,
        kill_grace_s=0.5,
    )
    lease = LeaseView(7, ("g1",), ("inference",), "training", "train", time.time() + 3600)
    before = backend.submit(request("before", ["true"], queue=train, gpus=2, walltime_s=60))
    assert before.state is JobState.PENDING  # the training pool's one node is down

    backend.apply_lease(lease, now=time.time())
    assert finished(backend, "before").state is JobState.SUCCEEDED
    assert state_file(backend, "before")["nodes"] == ["g1"]
    long = backend.submit(request("long", ["true"], queue=train, gpus=2, walltime_s=2 * 3600))
    assert long.state is JobState.PENDING  # its walltime outlasts the lease

    backend.end_lease(lease)
    after = backend.submit(request("after", ["true"], queue=train, gpus=2, walltime_s=60))
    assert after.state is JobState.PENDING  # the node is back in its pool
    own = backend.submit(request("own", ["true"], queue=PACK_INF, walltime_s=60))
    assert finished(backend, own.backend_id).state is JobState.SUCCEEDED
    for key in ("long", "after"):
        backend.cancel(key)


PACK_INF = QueuePolicy(name="inference", pool="inf", task_types=())


def test_multi_node_work_says_when_it_could_not_stay_under_one_switch(make):
    whole = QueuePolicy(name="training", pool="p", task_types=(), allocation="whole-node")
    backend = make(
        [
            NodeView(name="a1", cpus=2, memory_mib=4096, switch="sw1"),
            NodeView(name="b1", cpus=2, memory_mib=4096, switch="sw2"),
        ]
    )
    req = request("spread", ["sleep", "5"], queue=whole, cpus=4)
    req = SubmitRequest(
        **{
            **{f: getattr(req, f) for f in req.__dataclass_fields__},
            "spec": TaskSpec(
                name="spread",
                project="materials",
                resources=Resources(cpus=4, nodes=2),
                command=("sleep", "5"),
            ),
        }
    )
    job = running(backend, backend.submit(req).backend_id)
    assert set(job.nodes) == {"a1", "b1"}
    assert job.reason == "placed across 2 switches: no switch has 2 free nodes for it"
    backend.cancel("spread")


def test_a_log_chunk_never_cuts_a_character():
    from scheduling.backends.base import decode_log

    text = "héllo wörld € 🚀".encode()
    for end in range(len(text) + 1):
        shown = decode_log(text[:end])
        assert "\ufffd" not in shown and text.startswith(shown.encode())
    assert decode_log(b"ab\xffcd") == "ab\ufffdcd"  # invalid bytes inside are replaced


def test_many_jobs_are_placed_in_one_scheduling_pass(make, monkeypatch):
    backend = make()
    passes = []
    real = backend._schedule_locked
    monkeypatch.setattr(backend, "_schedule_locked", lambda **kw: passes.append(1) or real(**kw))
    already = backend.submit(request("many-0", ["true"]))
    passes.clear()
    bad = request("many-bad", ["true"])
    bad = dataclasses.replace(bad, key="Not A Key")
    results = backend.submit_many([request(f"many-{i}", ["true"]) for i in range(4)] + [bad])
    assert passes == [1]  # one pass for the four new jobs
    assert results[0].backend_id == already.backend_id == "many-0"  # found, not made again
    assert [r.backend_id for r in results[1:4]] == ["many-1", "many-2", "many-3"]
    assert isinstance(results[4], BackendError) and "key" in str(results[4])
    for i in range(4):
        assert finished(backend, f"many-{i}").state is JobState.SUCCEEDED
