"""The pure policy functions: researcher units in reasons, and classify (docs/architecture.md)."""

from __future__ import annotations

from scheduling.decisions import (
    ClassifierPolicy,
    classify,
    format_duration,
    format_memory,
)
from tests.unit.scheduling.decisions.helpers import (
    GIB,
    MIN,
    TIB,
    H,
    spec,
)

# ---------------------------------------------------------------- units in reasons


def test_durations_and_memory_read_in_researcher_units():
    assert format_duration(72 * H) == "72h"
    assert format_duration(90 * MIN) == "1h30min"
    assert format_duration(30 * MIN) == "30min"
    assert format_duration(45) == "45s"
    assert format_memory(TIB) == "1 TiB"
    assert format_memory(256 * GIB) == "256 GiB"
    assert format_memory(1536) == "1.5 GiB"
    assert format_memory(512) == "512 MiB"


# ---------------------------------------------------------------- classify


def test_declared_type_wins_over_shape():
    c = classify(spec(type="hpc-simulation", gpus=32, estimate_s=40 * H))
    assert c.type == "hpc-simulation"
    assert c.reason == "declared type hpc-simulation"


def test_sandbox_is_only_ever_declared():
    assert classify(spec(type="sandbox")).type == "sandbox"
    assert classify(spec(cpus=1, estimate_s=60)).type == "agent"


def test_many_gpus_with_long_estimate_is_training():
    c = classify(spec(gpus=32, cpus=256, estimate_s=40 * H))
    assert c.type == "ai-training"
    assert c.reason == "no type given; 32 GPUs (≥ 2) and estimate 40h (> 2h) → ai-training"


def test_two_gpus_is_many_the_seeds_multi_card():
    assert classify(spec(gpus=2, estimate_s=3 * H)).type == "ai-training"
    assert classify(spec(gpus=1, estimate_s=3 * H)).type == "ai-inference"


def test_estimate_of_exactly_two_hours_is_not_long():
    c = classify(spec(gpus=8, estimate_s=2 * H))
    assert c.type == "ai-inference"
    assert "estimate 2h is not over 2h" in c.reason


def test_many_gpus_without_estimate_is_inference():
    c = classify(spec(gpus=8, walltime_s=10 * H))
    assert c.type == "ai-inference"
    assert "no estimate" in c.reason


def test_few_gpus_with_long_estimate_is_inference():
    c = classify(spec(gpus=1, estimate_s=10 * H))
    assert c.type == "ai-inference"
    assert "1 GPU" in c.reason and "fewer than the 2" in c.reason


def test_many_cpus_without_gpu_is_hpc():
    c = classify(spec(cpus=256))
    assert c.type == "hpc-simulation"
    assert c.reason == "no type given; no GPUs and 256 CPUs (≥ 64) → hpc-simulation"


def test_sixty_four_cpus_is_many():
    assert classify(spec(cpus=64, estimate_s=5 * MIN)).type == "hpc-simulation"
    assert "64 CPUs (≥ 64)" in classify(spec(cpus=64)).reason


def test_many_cpus_with_a_gpu_is_not_hpc():
    assert classify(spec(cpus=128, gpus=1)).type == "ai-inference"


def test_small_short_request_is_agent():
    c = classify(spec(cpus=2, estimate_s=5 * MIN))
    assert c.type == "agent"
    assert c.reason == (
        "no type given; small request (2 CPUs ≤ 4, no GPUs) and estimate 5min (under 30min) → agent"
    )


def test_thirty_minutes_exactly_is_not_agent_under_is_strict():
    assert classify(spec(cpus=4, estimate_s=30 * MIN)).type == "hpc-simulation"
    assert classify(spec(cpus=4, estimate_s=30 * MIN - 1)).type == "agent"


def test_walltime_stands_in_for_a_missing_estimate():
    c = classify(spec(cpus=1, walltime_s=20 * MIN))
    assert c.type == "agent"
    assert "walltime 20min" in c.reason


def test_estimate_is_preferred_to_walltime_for_duration():
    c = classify(spec(cpus=1, estimate_s=40 * MIN, walltime_s=20 * MIN))
    assert c.type == "hpc-simulation"
    assert "estimate 40min is not under an agent's 30min" in c.reason


def test_small_request_of_unknown_duration_is_not_agent():
    c = classify(spec(cpus=1))
    assert c.type == "hpc-simulation"
    assert "no estimate or walltime" in c.reason


def test_short_but_not_small_is_cpu_batch_work():
    c = classify(spec(cpus=5, estimate_s=5 * MIN))
    assert c.type == "hpc-simulation"
    assert "5 CPUs (< 64), more than an agent's 4" in c.reason


def test_short_gpu_task_is_inference_not_agent():
    assert classify(spec(cpus=1, gpus=1, estimate_s=5 * MIN)).type == "ai-inference"


def test_classifier_thresholds_are_a_policy():
    policy = ClassifierPolicy(small_gpus=1)
    assert classify(spec(cpus=1, gpus=1, estimate_s=5 * MIN), policy).type == "agent"
    policy = ClassifierPolicy(many_gpus=2, long_estimate_s=H)
    c = classify(spec(gpus=2, estimate_s=90 * MIN), policy)
    assert c.type == "ai-training"
    assert "2 GPUs (≥ 2) and estimate 1h30min (> 1h)" in c.reason
