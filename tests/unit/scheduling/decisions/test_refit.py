"""Which declared type would take a task whose type was guessed (scheduling/decisions/refit.py)."""

from __future__ import annotations

import dataclasses

from scheduling.decisions import classify, pool_capacity
from scheduling.decisions.refit import Fit, guessed_note, other_fits
from tests.unit.scheduling.decisions.helpers import GIB, MIN, H, spec


def _fits(task, pools, queues, rules):
    guessed = classify(task).type
    return other_fits(task, guessed, rules, queues, lambda pool: pool_capacity(pools[pool]))


def test_an_untyped_long_eight_gpu_job_is_told_to_declare_training_with_an_estimate(
    pools, queues, rules
):
    task = spec(gpus=8, cpus=16, memory_mib=64 * GIB, walltime_s=3 * H)
    assert classify(task).type == "ai-inference"  # no estimate: not known to be training
    assert _fits(task, pools, queues, rules) == [Fit("ai-training", "training", True)]
    note = guessed_note(classify(task), _fits(task, pools, queues, rules), task.walltime_s)
    assert note.startswith("; its type ai-inference was guessed, not given (8 GPUs, but no")
    assert "declare `type: ai-training` with an `estimate:`" in note
    assert "at most the walltime 3h" in note and "queue training takes it" in note


def test_a_short_small_cpu_job_guessed_agent_is_offered_hpc_not_the_gpu_types(pools, queues, rules):
    md = spec(cpus=4, memory_mib=4 * GIB, walltime_s=15 * MIN)
    assert classify(md).type == "agent"
    assert _fits(md, pools, queues, rules) == [Fit("hpc-simulation", "hpc")]


def test_no_other_type_fits_a_task_too_big_for_every_pool(pools, queues, rules):
    huge = spec(cpus=100_000, walltime_s=H)
    assert _fits(huge, pools, queues, rules) == []
    note = guessed_note(classify(huge), [], huge.walltime_s)
    assert note.endswith(
        "was guessed, not given (no GPUs and 100000 CPUs (≥ 64) → hpc-simulation)"
        ": give the type if it is another kind of work"
    )


def test_a_declared_type_or_a_chosen_queue_gets_no_advice(pools, queues, rules):
    task = spec(gpus=8, cpus=16, walltime_s=3 * H, type="ai-inference")
    assert guessed_note(classify(task), [Fit("ai-training", "training")], task.walltime_s) == ""
    chosen = dataclasses.replace(task, type=None, queue="inference-agent")
    assert _fits(chosen, pools, queues, rules) == []
