"""The success criteria, measured on the validation day under each policy (docs/simulation.md).

Each criterion is measured the same way for every policy; pass/fail is Switchyard's value
against the target. The flow-time row's target is relative: at least 30 % shorter than the
FIFO run (the "before"). The GPU row's "from < 40 %" is the one-queue site's before; the FIFO column
shows what the one-queue site reaches on the same day, which need not be under 40 %.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduling.sites.default import default_site
from simulation.simulator.engine import simulate
from simulation.simulator.metrics import flow_time, summary
from simulation.simulator.model import POLICIES, Run, SimJob, Site
from simulation.simulator.workloads import BURST_AT, DAY_HOURS, HOUR, site_model, validation_day

BURST_TRAINING = ("train-0", "train-1")
PAIR = ("hpc-0", "train-0")


@dataclass(frozen=True, slots=True)
class Criterion:
    name: str
    target: str
    unit: str
    measure: Callable[[Run, dict], float | None]
    passes: Callable[[float, float | None], bool]  # (switchyard, fifo) → met?


def _waits(run: Run, kind: str, *, room_only: bool = False) -> list[float]:
    return [
        o.wait
        for o in run.outcomes.values()
        if o.type == kind and (not room_only or o.room_at_submit)
    ]


def _training_with_room(run: Run, s: dict) -> float | None:
    """The longest wait of a training its pool could have started on arrival; None (never
    ran: the row fails) if a training never ran at all."""
    if s["never_by_type"].get("ai-training"):
        return None
    return max(_waits(run, "ai-training", room_only=True), default=0.0)


def _hpc_preemptions(run: Run, s: dict) -> float:
    """HPC runs preempted within the day's window."""
    lo, hi = s["window_s"]
    return float(
        sum(
            1
            for x in run.spans
            if x.type == "hpc-simulation" and x.ended == "preempted" and lo <= x.end <= hi
        )
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _max_burst_training(run: Run, _: dict) -> float | None:
    waits = [run.outcomes[k].wait for k in BURST_TRAINING if k in run.outcomes]
    return max(waits) if len(waits) == len(BURST_TRAINING) else None


CRITERIA = (
    Criterion(
        "agent mean wait",
        "< 30 s",
        "s",
        lambda run, s: _mean(_waits(run, "agent")),
        lambda v, f: v < 30,
    ),
    Criterion(
        "training wait when its pool had room",
        "<= 5 min",
        "s",
        _training_with_room,
        lambda v, f: v <= 300,
    ),
    Criterion(
        "launch-mix trainings: longest wait",
        "<= 15 min",
        "s",
        _max_burst_training,
        lambda v, f: v <= 900,
    ),
    Criterion(
        "HPC preemptions in the day", "0 (< 1 a day)", "", _hpc_preemptions, lambda v, f: v < 1
    ),
    Criterion(
        "site GPU utilisation, 08:00-18:00",
        "from < 40 % to > 60 %",
        "%",
        lambda run, s: 100 * (s["utilisation"]["site"]["gpu"] or 0.0),
        lambda v, f: v > 60,
    ),
    Criterion(
        "HPC + training flow time (one project)",
        ">= 30 % shorter than FIFO",
        "s",
        lambda run, s: flow_time(run, PAIR),
        lambda v, f: f is not None and v <= 0.7 * f,
    ),
)


def validation_day_report(
    seed: int = 1, site: Site | None = None, jobs: list[SimJob] | None = None, progress=None
) -> dict:
    """Run the validation day under every policy; the criteria, each policy's summary, and the
    figures for charts."""
    site = site or site_model(default_site())
    jobs = jobs if jobs is not None else validation_day(seed)
    window = (0.0, DAY_HOURS * HOUR)
    runs, summaries = {}, {}
    for i, policy in enumerate(POLICIES):
        step = (lambda d, t, i=i: progress(i * t + d, len(POLICIES) * t)) if progress else None
        runs[policy] = simulate(jobs, site, policy, progress=step, record_room=True)
        summaries[policy] = summary(runs[policy], site.pools, window=window)
    rows = []
    for c in CRITERIA:
        values = {p: c.measure(runs[p], summaries[p]) for p in POLICIES}
        mine = values["switchyard"]
        rows.append(
            {
                "criterion": c.name,
                "target": c.target,
                "unit": c.unit,
                "values": values,
                "passed": mine is not None and c.passes(mine, values["fifo"]),
            }
        )
    return {
        "workload": "validation-day",
        "seed": seed,
        "jobs": len(jobs),
        "burst_at_s": BURST_AT,
        "criteria": rows,
        "summaries": summaries,
    }


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "never ran"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "s":
        return f"{value:,.0f} s" if value < 600 else f"{value / 60:,.1f} min"
    return f"{value:g}"


def format_table(report: dict) -> str:
    """The criteria as a Markdown table (what `manage.py simulate validation-day` prints)."""
    head = "| criterion | target | Switchyard | FIFO | EASY | met |\n|---|---|---|---|---|---|"
    lines = [head]
    for row in report["criteria"]:
        v, unit = row["values"], row["unit"]
        lines.append(
            f"| {row['criterion']} | {row['target']} | {format_value(v['switchyard'], unit)} | "
            f"{format_value(v['fifo'], unit)} | {format_value(v['easy'], unit)} | "
            f"{'pass' if row['passed'] else 'FAIL'} |"
        )
    return "\n".join(lines)
