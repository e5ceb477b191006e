"""The simulator checked against reality: a scaled launch mix run on the localhost Slurm and the
same jobs in the simulator start in the same order, and wait as long, within `TOLERANCE_S`
(docs/simulation.md, calibration).

The mix, scaled to the six-node cluster and to seconds: three 64-core HPC runs for two HPC
nodes, three single-node trainings for two GPU nodes, two 4-GPU inference jobs for one 4-GPU
node, and four agents - so that one of each waits for the first of its kind to end. Each job
sleeps; the simulator is given the submit times Slurm saw and the runtimes it measured, on the
site the portal has (every pool on Slurm), under the `switchyard` policy.
"""

from __future__ import annotations

import time

import pytest

from scheduling import engine
from scheduling.models import Attempt
from scheduling.spec import TaskSpec
from simulation.replay import portal_site
from simulation.simulator.engine import simulate
from simulation.simulator.model import SimJob
from tests.integration.slurm.conftest import drive, submit_task

# It needs the localhost cluster like its neighbours: marked so, it runs with them (one at a
# time on the shared cluster, `-m slurm` takes it, `-m "not slurm"` leaves it out).
pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# Slurm starts a job 1-3 s after it is submitted on an idle cluster (its scheduling loop and
# the node's launch), records times in whole seconds, and the portal polls every 0.5 s here.
TOLERANCE_S = 6.0
TRAIN = {"nodes": 1, "gpus": 8, "cpus": 32, "memory": "8Gi"}
INFER = {"gpus": 4, "cpus": 8, "memory": "4Gi"}
# (name, type, resources, seconds it sleeps), by the second it is submitted in.
MIX = [
    [
        ("hpc-a", "hpc-simulation", {"cpus": 64}, 14),
        ("hpc-b", "hpc-simulation", {"cpus": 64}, 8),
        ("inf-a", "ai-inference", INFER, 12),
    ],
    [
        ("train-a", "ai-training", TRAIN, 12),
        ("train-b", "ai-training", TRAIN, 10),
        ("hpc-c", "hpc-simulation", {"cpus": 64}, 6),
        ("inf-b", "ai-inference", INFER, 4),
    ],
    [("train-c", "ai-training", TRAIN, 6)]
    + [(f"agent-{i}", "agent", {"cpus": 1}, 3) for i in range(4)],
]


def test_a_scaled_launch_mix_starts_on_slurm_as_the_simulator_says(cluster_site, api):
    ids: dict[str, int] = {}
    for second, group in enumerate(MIX):
        for name, kind, resources, sleep in group:
            extra = {"estimate": "1m"} if kind == "ai-training" else {}
            ids[name] = submit_task(
                api,
                name=name,
                type=kind,
                resources=resources,
                walltime="2m",
                command=["sleep", str(sleep)],
                **extra,
            )
            engine.task_dispatch(ids[name])
        if second < len(MIX) - 1:
            time.sleep(1)
    tasks = {t.name: t for t in drive(list(ids.values()), timeout=180)}
    assert all(t.state == "succeeded" for t in tasks.values()), {
        n: (t.state, t.reason) for n, t in tasks.items()
    }
    runs = {
        a.task.name: a
        for a in Attempt.objects.filter(task__in=tasks.values()).select_related("task")
    }
    t0 = min(a.submitted_at for a in runs.values())
    real = {
        n: (
            (a.submitted_at - t0).total_seconds(),
            (a.started_at - t0).total_seconds(),
            (a.ended_at - a.started_at).total_seconds(),
        )
        for n, a in runs.items()
    }

    jobs = []
    for name, task in tasks.items():
        submitted, _, runtime = real[name]
        spec = TaskSpec.from_dict(task.spec)
        jobs.append(SimJob(name, spec, task.type, task.queue.name, submitted, runtime))
    result = simulate(jobs, portal_site(start=t0), "switchyard")
    assert not result.never, result.never
    sim = {n: o.start for n, o in result.outcomes.items()}

    report = {n: (round(real[n][1], 1), round(sim[n], 1)) for n in sorted(real)}
    # Each waited as long as the simulator says, within the tolerance ...
    for name, (submitted, started, _) in real.items():
        real_wait, sim_wait = started - submitted, sim[name] - submitted
        assert abs(real_wait - sim_wait) <= TOLERANCE_S, (name, report)
    # ... the ones the simulator makes wait really waited ...
    waited = {n for n in real if sim[n] - real[n][0] > TOLERANCE_S}
    assert waited == {"hpc-c", "inf-b", "train-c"}, report
    # ... and starts further apart than the tolerance came in the simulator's order.
    for a in real:
        for b in real:
            if sim[a] + TOLERANCE_S < sim[b]:
                assert real[a][1] < real[b][1], (a, b, report)
